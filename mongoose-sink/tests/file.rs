//! The file sink: durable batches, what a crash leaves cut off at the next open, keys
//! already written not written again (and only those: a refused output overtaken by
//! later ones is written when retried), a full disk, a state checked against the file
//! before it is trusted (every damaged byte and every cut of it refused), two sinks on
//! one file refused, and lanes without a bound.

use std::io::Write;
use std::path::Path;

use mongoose_core::sink::{Output, OutputKey, Sink, SinkOutcome};
use mongoose_core::Epoch;
use mongoose_sink::{FileSink, FileSinkConfig, SinkError};
use mongoose_testkit::Tmpfs;

fn output(position: u64, text: &str) -> Output {
    keyed("lines", 0, 1, position, text)
}

fn keyed(feed: &str, lane: u32, writer: u64, position: u64, text: &str) -> Output {
    Output::new(
        OutputKey::new(feed, Epoch(2), lane, position, 0, writer),
        text.as_bytes().to_vec(),
    )
}

fn publish(sink: &mut FileSink, outputs: &[Output]) -> Vec<SinkOutcome> {
    let mut outcomes = Vec::new();
    sink.publish(outputs, &mut outcomes);
    assert_eq!(outcomes.len(), outputs.len(), "one outcome per output");
    outcomes
}

fn config(dir: &Path) -> FileSinkConfig {
    FileSinkConfig {
        path: dir.join("out.txt"),
        sync: true,
        state_file: None,
    }
}

fn state_of(config: &FileSinkConfig) -> std::path::PathBuf {
    mongoose_sink::file::state_path(&config.path)
}

fn already(outcome: &SinkOutcome) -> bool {
    outcome.is_published() && outcome.evidence().contains("already")
}

fn written(outcome: &SinkOutcome) -> bool {
    outcome.is_published() && outcome.evidence().contains("durable")
}

#[test]
fn a_batch_a_crash_left_partly_written_is_cut_off_at_the_next_open() {
    let dir = tempfile::tempdir().expect("dir");
    let config = config(dir.path());
    let mut sink = FileSink::open("out", &config).expect("opened");
    publish(&mut sink, &[output(10, "a"), output(20, "b")]);
    publish(&mut sink, &[output(30, "ccc"), output(40, "ddd")]);
    drop(sink);
    // the kill came while the second batch's bytes were being written: its record is
    // written first, a part of its bytes is in the file, and the record saying its bytes
    // are written (the last ten bytes of the state: length, CRC, `Written`, seq) is not
    let cut = |path: &Path, keep: u64| {
        std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .and_then(|file| file.set_len(keep))
            .expect("cut");
    };
    let state_len = std::fs::metadata(state_of(&config)).expect("state").len();
    cut(&state_of(&config), state_len - 10);
    cut(&config.path, 6);
    let mut sink = FileSink::open("out", &config).expect("reopened");
    assert_eq!(sink.durable_length(), 4);
    assert_eq!(std::fs::read(&config.path).expect("file"), b"a\nb\n");
    // the second batch was never reported published: it comes again and is written
    let outcomes = publish(
        &mut sink,
        &[output(20, "b"), output(30, "ccc"), output(40, "ddd")],
    );
    assert!(
        already(&outcomes[0]) && written(&outcomes[1]) && written(&outcomes[2]),
        "{outcomes:?}"
    );
    assert_eq!(
        std::fs::read(&config.path).expect("file"),
        b"a\nb\nccc\nddd\n"
    );
}

#[test]
fn a_re_delivered_key_is_not_written_twice() {
    let dir = tempfile::tempdir().expect("dir");
    let config = config(dir.path());
    let mut sink = FileSink::open("out", &config).expect("opened");
    publish(
        &mut sink,
        &[output(10, "a"), output(20, "b"), output(30, "c")],
    );
    drop(sink);
    // a restart re-delivers from before the last key (the pointer was behind)
    let mut sink = FileSink::open("out", &config).expect("reopened");
    let outcomes = publish(
        &mut sink,
        &[output(20, "b"), output(30, "c"), output(40, "d")],
    );
    assert!(
        outcomes.iter().all(SinkOutcome::is_published),
        "{outcomes:?}"
    );
    assert!(already(&outcomes[0]), "{outcomes:?}");
    assert_eq!(std::fs::read(&config.path).expect("file"), b"a\nb\nc\nd\n");
    // another epoch (the input was replaced) is not compared with the old keys
    let fresh = Output::new(
        OutputKey::new("lines", Epoch(3), 0, 10, 0, 1),
        b"new a".to_vec(),
    );
    publish(&mut sink, &[fresh]);
    assert_eq!(
        std::fs::read(&config.path).expect("file"),
        b"a\nb\nc\nd\nnew a\n"
    );
}

#[test]
fn two_writers_of_one_input_are_keyed_apart() {
    // invariant 6, issue 24 item 3: the same input's outputs by two writers
    let dir = tempfile::tempdir().expect("dir");
    let config = config(dir.path());
    let mut sink = FileSink::open("out", &config).expect("opened");
    let ledger = mongoose_core::sink::writer_id("ledger/ledger");
    let copy = mongoose_core::sink::writer_id("copy/copy");
    let outcomes = publish(
        &mut sink,
        &[
            keyed("lines", 0, ledger, 10, "alert 10"),
            keyed("lines", 0, copy, 10, "line 10"),
        ],
    );
    assert!(outcomes.iter().all(written), "{outcomes:?}");
    // the second writer's next output is not taken for the first's
    let outcomes = publish(&mut sink, &[keyed("lines", 0, copy, 20, "line 20")]);
    assert!(written(&outcomes[0]), "{outcomes:?}");
    let outcomes = publish(&mut sink, &[keyed("lines", 0, ledger, 15, "alert 15")]);
    assert!(written(&outcomes[0]), "{outcomes:?}");
    assert_eq!(
        std::fs::read_to_string(&config.path).expect("file"),
        "alert 10\nline 10\nline 20\nalert 15\n"
    );
}

#[test]
fn outputs_made_outside_a_delivery_are_never_dropped_as_written() {
    let dir = tempfile::tempdir().expect("dir");
    let config = config(dir.path());
    let timer = |n: u64| keyed(mongoose_sink::writer::NO_INPUT, 0, 1, n, "tick");
    let mut sink = FileSink::open("out", &config).expect("opened");
    publish(&mut sink, &[timer(1), timer(2)]);
    drop(sink);
    // the next run numbers its outputs from 1 again: they are new outputs
    let mut sink = FileSink::open("out", &config).expect("reopened");
    let outcomes = publish(&mut sink, &[timer(1)]);
    assert!(written(&outcomes[0]), "{outcomes:?}");
    assert_eq!(
        std::fs::read(&config.path).expect("file"),
        b"tick\ntick\ntick\n"
    );
}

#[test]
fn a_full_disk_cuts_the_batch_back_and_reports_it_not_published() {
    let disk = Tmpfs::mount("256k");
    let config = config(disk.path());
    let mut sink = FileSink::open("out", &config).expect("opened");
    let line = "x".repeat(1000);
    let mut position = 0;
    let mut refused = None;
    for _ in 0..1000 {
        let batch: Vec<Output> = (0..10)
            .map(|_| {
                position += 1;
                output(position, &line)
            })
            .collect();
        let outcomes = publish(&mut sink, &batch);
        if !outcomes[0].is_published() {
            refused = Some(outcomes);
            break;
        }
    }
    let outcomes = refused.expect("the disk filled up");
    assert!(
        outcomes.iter().all(|outcome| matches!(
            outcome,
            SinkOutcome::NotPublished {
                retryable: true,
                ..
            }
        )),
        "{outcomes:?}"
    );
    let durable = sink.durable_length();
    assert_eq!(
        std::fs::metadata(&config.path).expect("file").len(),
        durable,
        "cut back to what was published"
    );
    assert_eq!(durable % 1001, 0, "whole lines only");
    // room again: the same outputs are published after the ones before
    disk.remount("size=4m");
    let retried: Vec<Output> = (position - 9..=position)
        .map(|position| output(position, &line))
        .collect();
    let outcomes = publish(&mut sink, &retried);
    assert!(outcomes.iter().all(written), "{outcomes:?}");
    assert_eq!(sink.durable_length(), durable + 10 * 1001);
    drop(sink);
    // and the state the full disk saw is whole
    let sink = FileSink::open("out", &config).expect("reopened");
    assert_eq!(sink.durable_length(), durable + 10 * 1001);
}

/// Issue 24, item 1, at the sink: a batch refused by a full disk waits for its retry
/// while a later, smaller one fits; the retried outputs are written, not answered
/// "already in the file", and after a restart every one of them is known written.
#[test]
fn a_refused_output_overtaken_by_later_ones_is_written_when_retried() {
    let disk = Tmpfs::mount("64k");
    let config = config(disk.path());
    let mut sink = FileSink::open("out", &config).expect("opened");
    let big: Vec<Output> = (1..=100)
        .map(|position| output(position, &"b".repeat(1000)))
        .collect();
    let outcomes = publish(&mut sink, &big);
    assert!(
        outcomes.iter().all(|outcome| !outcome.is_published()),
        "refused: {outcomes:?}"
    );
    let short = output(101, "short");
    let outcomes = publish(&mut sink, std::slice::from_ref(&short));
    assert!(written(&outcomes[0]), "{outcomes:?}");
    // a restart here (its state durable) must not hold the refused ones either
    drop(sink);
    let mut sink = FileSink::open("out", &config).expect("reopened");
    disk.remount("size=4m");
    let outcomes = publish(&mut sink, &big);
    assert!(
        outcomes.iter().all(written),
        "the retried outputs are written: {outcomes:?}"
    );
    let out = std::fs::read_to_string(&config.path).expect("file");
    assert_eq!(out.lines().count(), 101, "every output once");
    // once written, they are held, across a restart too
    drop(sink);
    let mut sink = FileSink::open("out", &config).expect("reopened");
    let mut again = big.clone();
    again.push(short);
    let outcomes = publish(&mut sink, &again);
    assert!(outcomes.iter().all(already), "{outcomes:?}");
}

/// The same, without a restart, with the retries in two parts in reverse order.
#[test]
fn retried_outputs_are_written_in_any_order_and_none_twice() {
    let disk = Tmpfs::mount("64k");
    let config = config(disk.path());
    let mut sink = FileSink::open("out", &config).expect("opened");
    let big: Vec<Output> = (1..=100)
        .map(|position| output(position, &"b".repeat(1000)))
        .collect();
    assert!(publish(&mut sink, &big)
        .iter()
        .all(|outcome| !outcome.is_published()));
    let outcomes = publish(&mut sink, &[output(200, "later")]);
    assert!(written(&outcomes[0]), "{outcomes:?}");
    disk.remount("size=4m");
    let outcomes = publish(&mut sink, &big[50..]);
    assert!(outcomes.iter().all(written), "{outcomes:?}");
    let outcomes = publish(&mut sink, &big[..50]);
    assert!(outcomes.iter().all(written), "{outcomes:?}");
    let outcomes = publish(&mut sink, &big);
    assert!(outcomes.iter().all(already), "{outcomes:?}");
    drop(sink);
    let mut sink = FileSink::open("out", &config).expect("reopened");
    let outcomes = publish(&mut sink, &big);
    assert!(outcomes.iter().all(already), "{outcomes:?}");
    assert_eq!(
        std::fs::read_to_string(&config.path)
            .expect("file")
            .lines()
            .count(),
        101
    );
}

/// A key twice in one batch that fails: neither copy is reported published.
#[test]
fn a_key_twice_in_a_failed_batch_is_not_reported_published() {
    let disk = Tmpfs::mount("16k");
    let config = config(disk.path());
    let mut sink = FileSink::open("out", &config).expect("opened");
    let line = "d".repeat(30_000);
    let outcomes = publish(&mut sink, &[output(1, &line), output(1, &line)]);
    assert!(
        outcomes.iter().all(|outcome| !outcome.is_published()),
        "{outcomes:?}"
    );
}

#[test]
fn a_device_gets_no_state_beside_it() {
    // /dev/null: a target that is not a regular file; nothing is written into /dev
    let config = FileSinkConfig {
        path: "/dev/null".into(),
        sync: false,
        state_file: None,
    };
    let mut sink = FileSink::open("null", &config).expect("opened");
    let outcomes = publish(&mut sink, &[output(1, "a"), output(2, "b")]);
    assert!(
        outcomes.iter().all(SinkOutcome::is_published),
        "{outcomes:?}"
    );
    assert!(
        !std::path::Path::new("/dev/null.sinkstate").exists(),
        "no state file beside a device"
    );
    // and two sinks on a device are not refused
    FileSink::open("null2", &config).expect("a second sink on /dev/null");
}

#[test]
fn two_sinks_on_one_file_are_refused() {
    let dir = tempfile::tempdir().expect("dir");
    let config = config(dir.path());
    let _first = FileSink::open("out", &config).expect("opened");
    let other = FileSinkConfig {
        path: dir.path().join(".").join("out.txt"),
        sync: true,
        state_file: None,
    };
    match FileSink::open("out2", &other) {
        Err(SinkError::InUse { path, .. }) => assert!(path.contains("out.txt")),
        other => panic!("a second sink on one file: {other:?}"),
    }
}

/// A finished sink with a few batches on two lanes, one gap, and the outputs it got.
fn filled(dir: &Path) -> (FileSinkConfig, Vec<Output>) {
    let config = config(dir);
    let mut sink = FileSink::open("out", &config).expect("opened");
    let mut outputs = Vec::new();
    for batch in 0..6u64 {
        let lane = (batch % 2) as u32;
        let batch_outputs: Vec<Output> = (0..5)
            .map(|index| {
                keyed(
                    "lines",
                    lane,
                    7,
                    batch * 100 + index * 10,
                    &format!("l{lane} b{batch} i{index}"),
                )
            })
            .collect();
        publish(&mut sink, &batch_outputs);
        outputs.extend(batch_outputs);
    }
    (config, outputs)
}

/// What a sink opened on a damaged state must do: refuse and change nothing, or answer
/// exactly as the undamaged one would (every output it got held, the length the same).
fn assert_refused_or_exact(config: &FileSinkConfig, outputs: &[Output], case: &str) {
    let out_before = std::fs::read(&config.path).expect("file");
    let state_before = std::fs::read(state_of(config)).expect("state");
    match FileSink::open("out", config) {
        Err(SinkError::State {
            state,
            problem,
            fix,
            ..
        }) => {
            assert!(
                state.ends_with("out.txt.sinkstate"),
                "{case}: names the state: {state}"
            );
            assert!(
                !problem.is_empty() && fix.contains("move"),
                "{case}: {problem} / {fix}"
            );
            assert_eq!(
                std::fs::read(&config.path).expect("file"),
                out_before,
                "{case}: output untouched"
            );
            assert_eq!(
                std::fs::read(state_of(config)).expect("state"),
                state_before,
                "{case}: state untouched"
            );
        }
        Err(other) => panic!("{case}: refused for another reason: {other}"),
        Ok(mut sink) => {
            assert_eq!(
                sink.durable_length(),
                out_before.len() as u64,
                "{case}: nothing cut"
            );
            let outcomes = publish(&mut sink, outputs);
            assert!(
                outcomes.iter().all(already),
                "{case}: accepted, and not exact: {outcomes:?}"
            );
        }
    }
}

#[test]
fn every_damaged_byte_of_the_state_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().expect("dir");
    let (config, outputs) = filled(dir.path());
    let state = state_of(&config);
    let good = std::fs::read(&state).expect("state");
    assert!(good.len() > 100, "a few records");
    for at in 0..good.len() {
        let mut bytes = good.clone();
        bytes[at] ^= 0x5a;
        std::fs::write(&state, &bytes).expect("damaged");
        let case = format!("byte {at} of {} flipped", good.len());
        assert_refused_or_exact(&config, &outputs, &case);
        std::fs::write(&state, &good).expect("restored");
    }
}

#[test]
fn every_cut_of_the_state_is_refused_or_exact() {
    let dir = tempfile::tempdir().expect("dir");
    let (config, outputs) = filled(dir.path());
    let state = state_of(&config);
    let good = std::fs::read(&state).expect("state");
    for len in 0..good.len() {
        std::fs::write(&state, &good[..len]).expect("cut");
        assert_refused_or_exact(
            &config,
            &outputs,
            &format!("cut to {len} of {} bytes", good.len()),
        );
        std::fs::write(&state, &good).expect("restored");
    }
}

#[test]
fn an_older_copy_another_files_state_or_none_is_refused() {
    let dir = tempfile::tempdir().expect("dir");
    let config = config(dir.path());
    let mut sink = FileSink::open("out", &config).expect("opened");
    publish(&mut sink, &[output(10, "a"), output(20, "b")]);
    let older = std::fs::read(state_of(&config)).expect("state");
    publish(&mut sink, &[output(30, "c")]);
    drop(sink);
    let outputs = [output(10, "a"), output(20, "b"), output(30, "c")];
    let good = std::fs::read(state_of(&config)).expect("state");
    // an older copy of itself
    std::fs::write(state_of(&config), &older).expect("older");
    assert_refused_or_exact(&config, &outputs, "an older copy");
    assert!(FileSink::open("out", &config).is_err());
    // another file's state (another folder's run of the same sink)
    let other = tempfile::tempdir().expect("dir");
    let other_config = self::config(other.path());
    let mut other_sink = FileSink::open("out", &other_config).expect("opened");
    publish(
        &mut other_sink,
        &[output(10, "x"), output(20, "y"), output(30, "zz")],
    );
    drop(other_sink);
    std::fs::copy(state_of(&other_config), state_of(&config)).expect("foreign");
    assert_refused_or_exact(&config, &outputs, "another file's state");
    assert!(FileSink::open("out", &config).is_err());
    // none at all beside a file that holds outputs
    std::fs::remove_file(state_of(&config)).expect("deleted");
    let before = std::fs::read(&config.path).expect("file");
    match FileSink::open("out", &config) {
        Err(SinkError::State { problem, .. }) => {
            assert!(problem.contains("no sink state"), "{problem}")
        }
        other => panic!("no state beside a non-empty file: {other:?}"),
    }
    assert_eq!(std::fs::read(&config.path).expect("file"), before);
    assert!(!state_of(&config).exists(), "nothing made");
    // the good state put back: all is well
    std::fs::write(state_of(&config), &good).expect("back");
    assert_refused_or_exact(&config, &outputs, "the good state");
    assert!(FileSink::open("out", &config).is_ok());
}

#[test]
fn a_file_changed_or_cut_under_its_state_is_refused() {
    let dir = tempfile::tempdir().expect("dir");
    let config = config(dir.path());
    let mut sink = FileSink::open("out", &config).expect("opened");
    publish(&mut sink, &[output(10, "aaaa"), output(20, "bbbb")]);
    drop(sink);
    let good = std::fs::read(&config.path).expect("file");
    // something else appended to it
    std::fs::OpenOptions::new()
        .append(true)
        .open(&config.path)
        .expect("file")
        .write_all(b"x\n")
        .expect("appended");
    assert!(matches!(
        FileSink::open("out", &config),
        Err(SinkError::State { .. })
    ));
    // its last batch rewritten
    let mut changed = good.clone();
    changed[6] = b'X';
    std::fs::write(&config.path, &changed).expect("changed");
    assert!(matches!(
        FileSink::open("out", &config),
        Err(SinkError::State { .. })
    ));
    // cut below what was published
    std::fs::write(&config.path, &good[..3]).expect("cut");
    assert!(matches!(
        FileSink::open("out", &config),
        Err(SinkError::State { .. })
    ));
    assert_eq!(
        std::fs::read(&config.path).expect("file"),
        &good[..3],
        "not cut further"
    );
    // emptied (a copytruncate): refused until the state is moved away too
    std::fs::write(&config.path, b"").expect("emptied");
    match FileSink::open("out", &config) {
        Err(SinkError::State { fix, .. }) => assert!(fix.contains("move"), "{fix}"),
        other => panic!("{other:?}"),
    }
    std::fs::remove_file(state_of(&config)).expect("moved away");
    FileSink::open("out", &config).expect("a fresh start on an empty file");
}

#[test]
fn a_folder_moved_with_its_state_goes_on() {
    let dir = tempfile::tempdir().expect("dir");
    let config = config(dir.path());
    let mut sink = FileSink::open("out", &config).expect("opened");
    publish(&mut sink, &[output(10, "a"), output(20, "b")]);
    drop(sink);
    let moved = tempfile::tempdir().expect("dir");
    let moved_config = self::config(moved.path());
    std::fs::copy(&config.path, &moved_config.path).expect("copied");
    std::fs::copy(state_of(&config), state_of(&moved_config)).expect("copied");
    let mut sink = FileSink::open("out", &moved_config).expect("the same bytes, another inode");
    let outcomes = publish(&mut sink, &[output(20, "b"), output(30, "c")]);
    assert!(
        already(&outcomes[0]) && written(&outcomes[1]),
        "{outcomes:?}"
    );
    drop(sink);
    FileSink::open("out", &moved_config).expect("recorded as this file now");
}

#[test]
fn a_state_of_the_older_format_that_matches_the_file_is_taken_over() {
    let dir = tempfile::tempdir().expect("dir");
    let config = config(dir.path());
    std::fs::write(&config.path, b"a\nb\n").expect("file");
    // the older format: two 64 KiB slots, MGSINK01 | counter | len | crc | postcard
    let payload = [4u8, 0]; // length 4 (varint), no keys
    let mut bytes = vec![0u8; 128 * 1024];
    bytes[..8].copy_from_slice(b"MGSINK01");
    bytes[8..16].copy_from_slice(&1u64.to_le_bytes());
    bytes[16..20].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    bytes[20..24].copy_from_slice(&crc32fast_hash(&payload).to_le_bytes());
    bytes[24..26].copy_from_slice(&payload);
    std::fs::write(state_of(&config), &bytes).expect("state");
    let mut sink = FileSink::open("out", &config).expect("taken over");
    assert_eq!(sink.durable_length(), 4);
    publish(&mut sink, &[output(30, "c")]);
    assert_eq!(std::fs::read(&config.path).expect("file"), b"a\nb\nc\n");
    drop(sink);
    // and one that does not match is refused
    std::fs::write(&config.path, b"a\n").expect("shorter");
    std::fs::write(state_of(&config), &bytes).expect("state");
    assert!(matches!(
        FileSink::open("out", &config),
        Err(SinkError::State { .. })
    ));
}

fn crc32fast_hash(bytes: &[u8]) -> u32 {
    // CRC-32 (IEEE), bitwise: the older format's checksum
    let mut crc = 0xffff_ffffu32;
    for byte in bytes {
        crc ^= u32::from(*byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// Issue 24, item 4, at the sink: ten thousand lanes (a glob of as many files, with a
/// long feed name) keep working, and the log is compacted as it grows.
#[test]
fn ten_thousand_lanes_keep_working_and_the_log_stays_bounded() {
    let dir = tempfile::tempdir().expect("dir");
    let config = config(dir.path());
    let feed = "f".repeat(64);
    let mut sink = FileSink::open("out", &config).expect("opened");
    let lanes = 10_000u32;
    for round in 0..3u64 {
        for first in (0..lanes).step_by(500) {
            let batch: Vec<Output> = (first..first + 500)
                .map(|lane| keyed(&feed, lane, 1, round * 10 + 1, "x"))
                .collect();
            let outcomes = publish(&mut sink, &batch);
            assert!(
                outcomes.iter().all(written),
                "round {round}: {:?}",
                outcomes[0]
            );
        }
    }
    assert_eq!(sink.lanes(), lanes as usize);
    let state_len = std::fs::metadata(state_of(&config)).expect("state").len();
    drop(sink);
    let mut sink = FileSink::open("out", &config).expect("reopened");
    assert_eq!(sink.lanes(), lanes as usize);
    let again: Vec<Output> = (0..lanes)
        .map(|lane| keyed(&feed, lane, 1, 21, "x"))
        .collect();
    assert!(publish(&mut sink, &again).iter().all(already));
    // bounded by a few snapshots of the lanes, not by the batches written
    assert!(state_len < 8 * 1024 * 1024, "state of {state_len} bytes");
}

/// The state file's frames (issue 38): the durable layer's header, then records of
/// length, CRC-32 and payload; `(where each frame starts, its payload)`, and the
/// header's length.
fn frames(state: &[u8]) -> (usize, Vec<(usize, Vec<u8>)>) {
    assert_eq!(&state[..4], b"MGDH", "the durable layer's header");
    let header = u16::from_le_bytes([state[4], state[5]]) as usize;
    let mut at = header;
    let mut frames = Vec::new();
    while at + 8 <= state.len() {
        let len = u32::from_le_bytes(state[at..at + 4].try_into().unwrap()) as usize;
        frames.push((at, state[at + 8..at + 8 + len].to_vec()));
        at += 8 + len;
    }
    (header, frames)
}

/// The state file's layout: the durable layer's header (format `mongoose-sink-state`
/// version 3, the state id as its owner), the identity as the first record, then one
/// postcard `Frame` per record.
#[test]
fn the_state_file_layout_is_stable() {
    let dir = tempfile::tempdir().expect("dir");
    let config = config(dir.path());
    let mut sink = FileSink::open("out", &config).expect("opened");
    let fresh = std::fs::read(state_of(&config)).expect("state");
    let (header_len, records) = frames(&fresh);
    assert_eq!(
        u32::from_le_bytes(fresh[6..10].try_into().unwrap()),
        3,
        "version"
    );
    let name_len = fresh[10] as usize;
    assert_eq!(&fresh[11..11 + name_len], b"mongoose-sink-state");
    let owner_len = fresh[11 + name_len] as usize;
    let owner = std::str::from_utf8(&fresh[12 + name_len..12 + name_len + owner_len])
        .expect("the state id, in decimal");
    assert!(owner.parse::<u64>().expect("a number") > 0, "{owner}");
    assert_eq!(
        records.len(),
        1,
        "a new state is its header and identity alone"
    );
    assert_eq!(records[0].0, header_len);
    publish(&mut sink, &[output(10, "a")]);
    let state = std::fs::read(state_of(&config)).expect("state");
    assert_eq!(&state[..fresh.len()], &fresh[..], "records are appended");
    let (_, records) = frames(&state);
    assert_eq!(records.len(), 3, "{records:?}");
    // the batch's record: Batch (variant 0), seq 1, base 0, check (start 0, end 2, crc
    // as a varint), lanes
    let batch = &records[1].1;
    assert_eq!(&batch[..4], &[0, 1, 0, 0], "Batch, seq 1, base 0, start 0");
    assert_eq!(batch[4], 2, "end 2");
    // then, once its bytes are written: Written (variant 1), seq 1
    assert_eq!(records[2].1, [1, 1], "Written, seq 1");
    assert_eq!(records[2].0 + 8 + 2, state.len());
}

// Issue 38: the state log is a record log of the durable layer. A changed byte of a
// record that valid records follow is damage in the middle: refused, naming the file,
// the byte and what to do, and nothing is skipped or cut.
#[test]
fn a_damaged_record_in_the_middle_of_the_state_is_refused_naming_its_byte() {
    let dir = tempfile::tempdir().expect("dir");
    let (config, outputs) = filled(dir.path());
    let state = state_of(&config);
    let good = std::fs::read(&state).expect("state");
    let (_, records) = frames(&good);
    let (at, _) = records[1];
    let mut bytes = good.clone();
    bytes[at + 9] ^= 0x01;
    std::fs::write(&state, &bytes).expect("damaged");
    match FileSink::open("out", &config) {
        Err(error @ SinkError::State { .. }) => {
            let message = error.to_string();
            assert!(
                message.contains("out.txt.sinkstate")
                    && message.contains(&format!("the record at byte {at} is damaged"))
                    && message.contains("valid records follow")
                    && message.contains("move"),
                "{message}"
            );
        }
        other => panic!("damage in the middle: {other:?}"),
    }
    assert_eq!(std::fs::read(&state).expect("state"), bytes, "nothing cut");
    std::fs::write(&state, &good).expect("restored");
    assert_refused_or_exact(&config, &outputs, "restored");
}

// Issue 38: a last record cut short, or whose bytes changed, is a torn tail (a write a
// crash cut, never acknowledged): cut from the state and reported, and the file then
// decides, as for any state (here: the same outputs held, nothing written twice).
#[test]
fn a_torn_tail_of_the_state_is_cut_and_the_state_goes_on() {
    let dir = tempfile::tempdir().expect("dir");
    let (config, outputs) = filled(dir.path());
    let state = state_of(&config);
    let good = std::fs::read(&state).expect("state");
    let (_, records) = frames(&good);
    let (last, _) = *records.last().expect("records");
    for (what, bytes) in [
        ("cut short", good[..good.len() - 1].to_vec()),
        ("its payload changed", {
            let mut bytes = good.clone();
            *bytes.last_mut().expect("a byte") ^= 0x01;
            bytes
        }),
    ] {
        std::fs::write(&state, &bytes).expect("torn");
        let mut sink = FileSink::open("out", &config)
            .unwrap_or_else(|error| panic!("a torn tail ({what}): {error}"));
        assert_eq!(
            std::fs::metadata(&state).expect("state").len(),
            last as u64,
            "{what}: the torn record is cut"
        );
        let outcomes = publish(&mut sink, &outputs);
        assert!(outcomes.iter().all(already), "{what}: {outcomes:?}");
        drop(sink);
        std::fs::write(&state, &good).expect("restored");
    }
}

// Issue 38: a state of the layout before the durable layer's (`MGSNKST2`, written by
// the release before it: the fixture) is read as it is, its outputs held, and
// rewritten in the durable layout at the open.
#[test]
fn a_state_of_the_earlier_layout_is_read_and_rewritten() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sinkstate-v2");
    let dir = tempfile::tempdir().expect("dir");
    let config = config(dir.path());
    std::fs::copy(fixture.join("out.txt"), &config.path).expect("output");
    std::fs::copy(fixture.join("out.txt.sinkstate"), state_of(&config)).expect("state");
    assert!(std::fs::read(state_of(&config))
        .expect("state")
        .starts_with(b"MGSNKST2"));
    // the fixture's outputs: 4 batches of 3, lanes 0 and 1 of writer 7
    let outputs: Vec<Output> = (0..4u64)
        .flat_map(|batch| {
            (0..3u64).map(move |index| {
                let lane = (batch % 2) as u32;
                keyed(
                    "lines",
                    lane,
                    7,
                    batch * 100 + index * 10,
                    &format!("l{lane} b{batch} i{index}"),
                )
            })
        })
        .collect();
    let mut sink = FileSink::open("out", &config).expect("the earlier layout is read");
    let rewritten = std::fs::read(state_of(&config)).expect("state");
    assert!(rewritten.starts_with(b"MGDH"), "rewritten at the open");
    assert_eq!(sink.lanes(), 2);
    assert!(publish(&mut sink, &outputs).iter().all(already));
    assert!(written(
        &publish(&mut sink, &[keyed("lines", 0, 7, 900, "new")])[0]
    ));
    drop(sink);
    let mut sink = FileSink::open("out", &config).expect("reopened");
    assert!(publish(&mut sink, &outputs).iter().all(already));
    let text = std::fs::read_to_string(&config.path).expect("output");
    assert_eq!(text.lines().count(), 13, "nothing written twice: {text}");
    // a last record of the earlier layout cut short is cut too
    let dir = tempfile::tempdir().expect("dir");
    let config = self::config(dir.path());
    std::fs::copy(fixture.join("out.txt"), &config.path).expect("output");
    let earlier = std::fs::read(fixture.join("out.txt.sinkstate")).expect("state");
    std::fs::write(state_of(&config), &earlier[..earlier.len() - 1]).expect("torn");
    let mut sink = FileSink::open("out", &config).expect("a torn earlier layout");
    assert!(publish(&mut sink, &outputs).iter().all(already));
}
