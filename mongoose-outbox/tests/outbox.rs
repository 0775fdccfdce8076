//! The outbox's guarantees under real failures: a killed process, a torn or damaged
//! file, a full disk.

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mongoose_core::sink::OutputKey;
use mongoose_core::Epoch;
use mongoose_outbox::{
    Admission, AdmittedOutput, AdmittedPosition, Outbox, OutboxConfig, OutboxError, OutboxOwner,
    Outcome, Recovery,
};
use mongoose_testkit::Tmpfs;

/// The key of output `index` of input `number`.
fn key(number: u64, index: u32) -> OutputKey {
    OutputKey::new("lines", Epoch(1), 0, number, index, 1)
}

/// Admission `number`: its state and outputs say which number they are, so recovery
/// can tell an intact record from an invented or mixed-up one.
fn admission(number: u64, outputs: u32, padding: usize) -> Admission {
    let mut state = number.to_le_bytes().to_vec();
    state.extend(std::iter::repeat_n((number % 251) as u8, padding));
    Admission {
        state,
        positions: vec![AdmittedPosition {
            feed: "lines".into(),
            epoch: Epoch(1),
            lane: 0,
            position: number,
        }],
        outputs: (0..outputs)
            .map(|index| AdmittedOutput {
                sink: "out".into(),
                key: key(number, index),
                payload: format!("output {index} of {number}").into_bytes(),
            })
            .collect(),
    }
}

/// The number an admission carries, after checking the whole record matches it.
fn number_of(admission: &Admission) -> u64 {
    let number = u64::from_le_bytes(admission.state[..8].try_into().unwrap());
    let outputs = admission.outputs.len() as u32;
    let padding = admission.state.len() - 8;
    assert_eq!(
        *admission,
        self::admission(number, outputs, padding),
        "admission {number} is not intact"
    );
    number
}

/// The segments of `dir`, oldest first.
fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "log"))
        .collect();
    paths.sort();
    paths
}

/// The length of a segment's header: the durable layer's (format version 3, its length
/// in its bytes 4..6), 40 bytes for version 2, 24 for version 1.
fn header_len(bytes: &[u8]) -> usize {
    if bytes.starts_with(b"MGDH") {
        return usize::from(u16::from_le_bytes([bytes[4], bytes[5]]));
    }
    match u32::from_le_bytes(bytes[8..12].try_into().unwrap()) {
        1 => 24,
        _ => 40,
    }
}

/// The offsets of the records of a segment (walking the length prefixes).
fn record_offsets(path: &Path) -> Vec<usize> {
    let bytes = fs::read(path).unwrap();
    let mut offsets = Vec::new();
    let mut offset = header_len(&bytes);
    while offset + 8 <= bytes.len() {
        offsets.push(offset);
        offset += 8 + u32::from_le_bytes(bytes[offset..offset + 4].try_into().unwrap()) as usize;
    }
    offsets
}

fn config(dir: &Path) -> OutboxConfig {
    OutboxConfig::new(dir)
}

/// Writes the outbox's watermark file as a process killed right after it wrote the
/// records after `seq`, before it said they were durable, would have left it.
fn set_watermark(dir: &Path, seq: u64) {
    let mut bytes = Vec::with_capacity(24);
    bytes.extend_from_slice(b"MGDURABL");
    bytes.extend_from_slice(&1u32.to_le_bytes());
    bytes.extend_from_slice(&seq.to_le_bytes());
    let crc = crc32fast::hash(&bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());
    fs::write(dir.join("DURABLE"), bytes).unwrap();
}

// ---------------------------------------------------------------------------------
// Kill -9 at any point.

const CHILD_DIR: &str = "MONGOOSE_OUTBOX_KILL_CHILD_DIR";
const KILL_TEST: &str = "a_kill_at_any_point_loses_no_durable_admission";

/// The child: admits numbered records as fast as it can (with sync on), records
/// outcomes now and then, compacts, and prints each durable sequence it is told of.
fn kill_child(dir: &Path) -> ! {
    let mut config = config(dir);
    config.segment_bytes = 256 << 10;
    let (mut outbox, recovery) = Outbox::open(config).expect("the child opens the outbox");
    outbox.on_durable(Box::new(|seq| {
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "durable {seq}").unwrap();
        stdout.flush().unwrap();
    }));
    let mut number = recovery.admissions.last().map_or(0, |(_, a)| number_of(a));
    let mut unsettled: Vec<OutputKey> = recovery
        .unsettled()
        .iter()
        .map(|(_, output)| output.key.clone())
        .collect();
    loop {
        number += 1;
        outbox
            .admit(&admission(number, 1, 100))
            .expect("the child admits");
        unsettled.push(key(number, 0));
        if number % 4 == 0 {
            let outcomes: Vec<(OutputKey, Outcome)> = unsettled
                .drain(..)
                .map(|key| (key, Outcome::Published))
                .collect();
            outbox
                .record_outcomes(&outcomes)
                .expect("the child records outcomes");
        }
        if number % 5000 == 0 {
            // Only what the parent already checked (what was there at the start), so
            // that it can tell a compacted admission from a lost one.
            outbox
                .compact(recovery.last_seq.saturating_sub(1000))
                .expect("the child compacts");
        }
    }
}

/// A small xorshift for the kill times (the seed is printed to replay a failure).
struct Random(u64);
impl Random {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % bound
    }
}

#[test]
fn a_kill_at_any_point_loses_no_durable_admission() {
    if let Some(dir) = std::env::var_os(CHILD_DIR) {
        kill_child(Path::new(&dir));
    }
    let dir = tempfile::tempdir().unwrap();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    eprintln!("kill test seed {seed}");
    let mut random = Random(seed);
    let mut last_number = 0;
    let mut last_seq = 0;
    for round in 0..20 {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", KILL_TEST, "--nocapture", "--test-threads=1"])
            .env(CHILD_DIR, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let printed = Arc::new(AtomicU64::new(0));
        let reports = Arc::new(AtomicU64::new(0));
        let reader = {
            let printed = Arc::clone(&printed);
            let reports = Arc::clone(&reports);
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if let Some(seq) = line.strip_prefix("durable ") {
                        let seq: u64 = seq.parse().unwrap();
                        assert!(seq >= printed.load(Ordering::Relaxed), "durable went back");
                        printed.store(seq, Ordering::Relaxed);
                        reports.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        };
        // Let it get going (at least one durable group), then kill it at a random time.
        let deadline = Instant::now() + Duration::from_secs(300);
        while reports.load(Ordering::Relaxed) < 1 {
            assert!(
                Instant::now() < deadline,
                "the child reported nothing durable"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(random.below(200)));
        if round % 2 == 1 {
            // Every other round, right after a durable report: the next group is being
            // written, and the one reported must already be whole on disk.
            let seen = reports.load(Ordering::Relaxed);
            while reports.load(Ordering::Relaxed) == seen {
                assert!(Instant::now() < deadline, "the child stopped reporting");
                std::hint::spin_loop();
            }
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        reader.join().unwrap();
        let durable_printed = printed.load(Ordering::Relaxed);

        let (outbox, recovery) = Outbox::open(config(dir.path())).unwrap_or_else(|error| {
            panic!("round {round}: recovery after a kill refused: {error}")
        });
        assert!(
            recovery.last_seq >= durable_printed,
            "round {round}: the child was told {durable_printed} was durable, recovery ends at {}",
            recovery.last_seq
        );
        assert!(
            recovery.last_seq >= last_seq,
            "round {round}: records went missing"
        );
        // In order, intact, no gap, nothing invented.
        let numbers: Vec<u64> = recovery
            .admissions
            .iter()
            .map(|(_, a)| number_of(a))
            .collect();
        assert!(!numbers.is_empty());
        for pair in numbers.windows(2) {
            assert_eq!(pair[1], pair[0] + 1, "round {round}: a gap or a mix-up");
        }
        let seqs: Vec<u64> = recovery.admissions.iter().map(|(seq, _)| *seq).collect();
        assert!(seqs.windows(2).all(|pair| pair[1] > pair[0]));
        assert!(
            numbers[0] <= last_number + 1,
            "round {round}: admissions {}..{} vanished",
            last_number + 1,
            numbers[0]
        );
        assert!(*numbers.last().unwrap() >= last_number);
        eprintln!(
            "round {round}: printed durable {durable_printed}, recovered through seq {} (admissions {}..={}), torn {:?}",
            recovery.last_seq,
            numbers[0],
            numbers.last().unwrap(),
            recovery.torn.as_ref().map(|torn| torn.bytes)
        );
        last_number = *numbers.last().unwrap();
        last_seq = recovery.last_seq;
        outbox.close().unwrap();
    }
}

// ---------------------------------------------------------------------------------
// A torn tail and damage.

/// Writes admissions 1..=count into a fresh outbox and closes it.
fn write_admissions(config: OutboxConfig, count: u64) {
    let (mut outbox, _) = Outbox::open(config).unwrap();
    for number in 1..=count {
        outbox.admit(&admission(number, 1, 40)).unwrap();
    }
    outbox.close().unwrap();
}

fn assert_damaged_at(dir: &Path, file: &Path, offset: u64) -> String {
    let before: Vec<(PathBuf, Vec<u8>)> = segments(dir)
        .into_iter()
        .map(|path| {
            let bytes = fs::read(&path).unwrap();
            (path, bytes)
        })
        .collect();
    let error = Outbox::open(config(dir)).expect_err("damage must refuse to open");
    match &error {
        OutboxError::Damaged {
            file: damaged,
            offset: at,
            ..
        } => {
            assert_eq!((damaged.as_path(), *at), (file, offset), "{error}");
        }
        other => panic!("expected damage, got {other}"),
    }
    let message = error.to_string();
    assert!(message.contains(&file.display().to_string()), "{message}");
    assert!(message.contains(&format!("byte {offset}")), "{message}");
    assert!(message.contains("move the folder"), "{message}");
    let after: Vec<(PathBuf, Vec<u8>)> = segments(dir)
        .into_iter()
        .map(|path| {
            let bytes = fs::read(&path).unwrap();
            (path, bytes)
        })
        .collect();
    assert!(before == after, "refusing to open changed the files");
    message
}

#[test]
fn a_torn_tail_is_cut_and_damage_refuses_naming_the_file_and_offset() {
    // A record cut short at the very end of the last segment, after the last one
    // reported durable (the process died while writing it): cut off, the rest kept.
    let dir = tempfile::tempdir().unwrap();
    write_admissions(config(dir.path()), 10);
    let last = segments(dir.path()).pop().unwrap();
    let offsets = record_offsets(&last);
    let length = fs::metadata(&last).unwrap().len();
    fs::OpenOptions::new()
        .write(true)
        .open(&last)
        .unwrap()
        .set_len(length - 5)
        .unwrap();
    set_watermark(dir.path(), 9);
    let (mut outbox, recovery) = Outbox::open(config(dir.path())).unwrap();
    let torn = recovery.torn.clone().expect("a torn tail");
    assert_eq!(torn.file, last);
    assert_eq!(torn.offset, offsets[9] as u64);
    assert_eq!(torn.bytes, length - 5 - offsets[9] as u64);
    let numbers: Vec<u64> = recovery
        .admissions
        .iter()
        .map(|(_, a)| number_of(a))
        .collect();
    assert_eq!(numbers, (1..=9).collect::<Vec<_>>());
    assert_eq!(fs::metadata(&last).unwrap().len(), offsets[9] as u64);
    assert_eq!(outbox.admit(&admission(10, 1, 40)).unwrap(), 10);
    outbox.close().unwrap();
    let (_, recovery) = Outbox::open(config(dir.path())).unwrap();
    assert!(recovery.torn.is_none());
    assert_eq!(recovery.admissions.len(), 10);

    // The same cut of a record that was reported durable: its input may be committed,
    // so it is not a torn write: refused, nothing changed.
    let dir = tempfile::tempdir().unwrap();
    write_admissions(config(dir.path()), 10);
    let last = segments(dir.path()).pop().unwrap();
    let bytes = fs::read(&last).unwrap();
    let offsets = record_offsets(&last);
    for keep in [bytes.len() - 5, offsets[7] + 3, offsets[7]] {
        fs::write(&last, &bytes[..keep]).unwrap();
        let error = Outbox::open(config(dir.path())).expect_err("a cut of durable records");
        match &error {
            OutboxError::Cut {
                durable,
                first_missing,
                ..
            } => assert_eq!(
                (*durable, *first_missing),
                (10, if keep == bytes.len() - 5 { 10 } else { 8 })
            ),
            other => panic!("expected a cut, got {other}"),
        }
        assert!(error.to_string().contains("remove"), "{error}");
        assert_eq!(
            fs::read(&last).unwrap(),
            &bytes[..keep],
            "refusing changed the file"
        );
    }
    // the last segment deleted, or all of them: refused too
    fs::remove_file(&last).unwrap();
    let error = Outbox::open(config(dir.path())).expect_err("no segment left");
    assert!(
        error.to_string().contains("the folder has no segment"),
        "{error}"
    );
    assert!(segments(dir.path()).is_empty(), "refusing made a segment");

    // A zero-filled tail (a file system that extended the file but never wrote the
    // data): a torn write too.
    let dir = tempfile::tempdir().unwrap();
    write_admissions(config(dir.path()), 4);
    let last = segments(dir.path()).pop().unwrap();
    let length = fs::metadata(&last).unwrap().len();
    fs::OpenOptions::new()
        .write(true)
        .open(&last)
        .unwrap()
        .set_len(length + 300)
        .unwrap();
    set_watermark(dir.path(), 3);
    let (outbox, recovery) = Outbox::open(config(dir.path())).unwrap();
    assert_eq!(recovery.torn.unwrap().offset, length);
    assert_eq!(recovery.admissions.len(), 4);
    outbox.close().unwrap();

    // The last record whole but wrong (not cut short): damage, not a torn write.
    let dir = tempfile::tempdir().unwrap();
    write_admissions(config(dir.path()), 10);
    let last = segments(dir.path()).pop().unwrap();
    let offsets = record_offsets(&last);
    let mut bytes = fs::read(&last).unwrap();
    bytes[offsets[9] + 30] ^= 0x01;
    fs::write(&last, &bytes).unwrap();
    assert_damaged_at(dir.path(), &last, offsets[9] as u64);

    // A flipped byte in a record with whole records after it: damage.
    let dir = tempfile::tempdir().unwrap();
    write_admissions(config(dir.path()), 10);
    let last = segments(dir.path()).pop().unwrap();
    let offsets = record_offsets(&last);
    let mut bytes = fs::read(&last).unwrap();
    bytes[offsets[4] + 20] ^= 0x40;
    fs::write(&last, &bytes).unwrap();
    let message = assert_damaged_at(dir.path(), &last, offsets[4] as u64);
    eprintln!("{message}");

    // A flipped byte in a length with whole records after it: damage, not a torn tail.
    let dir = tempfile::tempdir().unwrap();
    write_admissions(config(dir.path()), 10);
    let last = segments(dir.path()).pop().unwrap();
    let offsets = record_offsets(&last);
    let mut bytes = fs::read(&last).unwrap();
    bytes[offsets[6] + 2] ^= 0x10;
    fs::write(&last, &bytes).unwrap();
    assert_damaged_at(dir.path(), &last, offsets[6] as u64);

    // The last record of an older segment cut short or wrong: damage.
    let dir = tempfile::tempdir().unwrap();
    let mut small = config(dir.path());
    small.segment_bytes = 4096;
    write_admissions(small, 200);
    let all = segments(dir.path());
    assert!(all.len() >= 3, "{all:?}");
    let offsets = record_offsets(&all[0]);
    let mut bytes = fs::read(&all[0]).unwrap();
    let last_record = *offsets.last().unwrap();
    bytes[last_record + 12] ^= 1;
    fs::write(&all[0], &bytes).unwrap();
    assert_damaged_at(dir.path(), &all[0], last_record as u64);

    // A bad segment header (even of the last segment): damage.
    let dir = tempfile::tempdir().unwrap();
    write_admissions(config(dir.path()), 3);
    let last = segments(dir.path()).pop().unwrap();
    let mut bytes = fs::read(&last).unwrap();
    bytes[3] ^= 1;
    fs::write(&last, &bytes).unwrap();
    assert_damaged_at(dir.path(), &last, 0);

    // A segment named for sequence 0 (no outbox writes one): damage, not a panic.
    let dir = tempfile::tempdir().unwrap();
    write_admissions(config(dir.path()), 3);
    let last = segments(dir.path()).pop().unwrap();
    let zero = dir.path().join("outbox-00000000000000000000.log");
    fs::rename(&last, &zero).unwrap();
    assert_damaged_at(dir.path(), &zero, 0);

    // A missing segment in the middle: damage.
    let dir = tempfile::tempdir().unwrap();
    let mut small = config(dir.path());
    small.segment_bytes = 4096;
    write_admissions(small, 200);
    let all = segments(dir.path());
    fs::remove_file(&all[1]).unwrap();
    assert_damaged_at(dir.path(), &all[2], 0);
}

#[test]
fn every_flipped_byte_is_refused_or_cut_and_nothing_is_invented() {
    let dir = tempfile::tempdir().unwrap();
    let mut small = config(dir.path());
    small.segment_bytes = 4096;
    write_admissions(small, 60);
    let all = segments(dir.path());
    assert!(all.len() >= 2, "{all:?}");
    let originals: Vec<(PathBuf, Vec<u8>)> = all
        .iter()
        .map(|path| (path.clone(), fs::read(path).unwrap()))
        .collect();
    let (mut refused, mut cut) = (0, 0);
    for (path, original) in &originals {
        for at in 0..original.len() {
            // Every byte of the header and of the last records, every fifth elsewhere.
            if at >= 63 && at + 300 < original.len() && at % 5 != 0 {
                continue;
            }
            let mut bytes = original.clone();
            bytes[at] ^= 0xA5;
            fs::write(path, &bytes).unwrap();
            let mut unsynced = config(dir.path());
            unsynced.sync = false;
            match Outbox::open(unsynced) {
                Err(OutboxError::Damaged { file, .. }) => {
                    assert_eq!(&file, path);
                    assert_eq!(fs::read(path).unwrap(), bytes, "refusing changed the file");
                    refused += 1;
                }
                // a length made to look cut short: every record was reported durable,
                // so it is not taken for a torn write
                Err(OutboxError::Cut { .. }) => {
                    assert_eq!(fs::read(path).unwrap(), bytes, "refusing changed the file");
                    refused += 1;
                }
                Err(other) => panic!("byte {at} of {}: {other}", path.display()),
                Ok((outbox, recovery)) => {
                    // Only a cut-short end of the last segment may be cut: what is
                    // recovered is the originals' prefix, intact.
                    assert!(recovery.torn.is_some(), "byte {at} of {}", path.display());
                    let numbers: Vec<u64> = recovery
                        .admissions
                        .iter()
                        .map(|(_, a)| number_of(a))
                        .collect();
                    assert_eq!(numbers, (1..=numbers.len() as u64).collect::<Vec<_>>());
                    assert!(
                        numbers.len() >= 59,
                        "byte {at}: more than the last record cut"
                    );
                    drop(outbox);
                    cut += 1;
                }
            }
            fs::write(path, original).unwrap();
        }
    }
    eprintln!("{refused} flips refused, {cut} cut as a torn tail");
    assert!(refused > 0);
}

// ---------------------------------------------------------------------------------
// A full disk.

#[test]
fn a_full_disk_fails_the_admission_and_never_reports_it_durable() {
    let tmpfs = Tmpfs::mount("384k");
    let dir = tmpfs.path().join("outbox");
    let mut small = config(&dir);
    small.segment_bytes = 64 << 10;
    small.group_records = 16;
    let (mut outbox, _) = Outbox::open(small.clone()).unwrap();
    let told = Arc::new(AtomicU64::new(0));
    {
        let told = Arc::clone(&told);
        outbox.on_durable(Box::new(move |seq| {
            told.fetch_max(seq, Ordering::SeqCst);
        }));
    }
    let mut admitted = 0;
    let error = loop {
        match outbox.admit(&admission(admitted + 1, 1, 1000)) {
            Ok(seq) => {
                admitted += 1;
                assert_eq!(seq, admitted);
                assert!(outbox.durable() <= seq);
            }
            Err(error) => break error,
        }
        assert!(admitted < 100_000, "the disk never filled");
    };
    eprintln!("after {admitted} admissions: {error}");
    assert!(matches!(error, OutboxError::Write { .. }), "{error}");
    assert!(error.to_string().contains("free space"), "{error}");
    // It stays failed: a later admission and a sync fail too, and nothing more counts.
    let durable = outbox.durable();
    assert!(outbox.admit(&admission(admitted + 1, 1, 10)).is_err());
    assert!(outbox.sync().is_err());
    assert_eq!(outbox.durable(), durable);
    assert!(durable < admitted, "the failed group counted durable");
    assert!(outbox.close().is_err());
    assert!(told.load(Ordering::SeqCst) <= durable);

    // What was reported durable is on disk, whole; free space and it opens cleanly.
    tmpfs.remount("size=8m");
    let (mut outbox, recovery) = Outbox::open(small).unwrap();
    assert!(
        recovery.last_seq >= durable,
        "durable {durable} passed the disk"
    );
    let numbers: Vec<u64> = recovery
        .admissions
        .iter()
        .map(|(_, a)| number_of(a))
        .collect();
    assert_eq!(numbers, (1..=recovery.last_seq).collect::<Vec<_>>());
    let next = recovery.last_seq + 1;
    assert_eq!(outbox.admit(&admission(next, 1, 1000)).unwrap(), next);
    assert_eq!(outbox.sync().unwrap(), next);
    outbox.close().unwrap();
}

// ---------------------------------------------------------------------------------
// Unsettled outputs and compaction.

#[test]
fn unsettled_outputs_are_those_without_a_terminal_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let (mut outbox, _) = Outbox::open(config(dir.path())).unwrap();
    for number in 1..=3 {
        outbox.admit(&admission(number, 2, 0)).unwrap();
    }
    outbox
        .record_outcomes(&[
            (key(1, 0), Outcome::Published),
            (key(2, 1), Outcome::NotPublished),
        ])
        .unwrap();
    outbox
        .record_outcomes(&[(key(3, 0), Outcome::LostByPolicy)])
        .unwrap();
    outbox.close().unwrap();

    let (mut outbox, recovery) = Outbox::open(config(dir.path())).unwrap();
    let unsettled: Vec<(u64, OutputKey)> = recovery
        .unsettled()
        .iter()
        .map(|(seq, output)| (*seq, output.key.clone()))
        .collect();
    assert_eq!(
        unsettled,
        vec![(1, key(1, 1)), (2, key(2, 0)), (3, key(3, 1))]
    );
    assert_eq!(recovery.unsettled()[0].1.payload, b"output 1 of 1");
    assert_eq!(recovery.outcomes.len(), 3);
    assert_eq!(recovery.outcomes[2], (5, key(3, 0), Outcome::LostByPolicy));
    outbox
        .record_outcomes(&[(key(2, 0), Outcome::Published)])
        .unwrap();
    outbox.close().unwrap();
    let (_, recovery) = Outbox::open(config(dir.path())).unwrap();
    let keys: Vec<OutputKey> = recovery
        .unsettled()
        .iter()
        .map(|(_, output)| output.key.clone())
        .collect();
    assert_eq!(keys, vec![key(1, 1), key(3, 1)]);
}

#[test]
fn compaction_keeps_segments_with_unsettled_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let mut small = config(dir.path());
    small.segment_bytes = 4096;
    let (mut outbox, _) = Outbox::open(small.clone()).unwrap();
    for number in 1..=300 {
        outbox.admit(&admission(number, 1, 40)).unwrap();
        if number != 7 {
            outbox
                .record_outcomes(&[(key(number, 0), Outcome::Published)])
                .unwrap();
        }
    }
    let last = outbox.sync().unwrap();
    let before = segments(dir.path());
    assert!(before.len() >= 5, "{before:?}");
    // Output 7 (in the first segment) is unsettled: nothing goes.
    assert_eq!(outbox.compact(last).unwrap(), 0);
    assert_eq!(segments(dir.path()), before);

    outbox
        .record_outcomes(&[(key(7, 0), Outcome::Published)])
        .unwrap();
    outbox.sync().unwrap();
    // Only segments whose admissions are all at or before the given sequence go.
    let removed = outbox.compact(200).unwrap();
    assert!(removed >= 1);
    let kept = segments(dir.path());
    assert_eq!(kept[..], before[removed..]);
    outbox.close().unwrap();
    let (mut outbox, recovery) = Outbox::open(small.clone()).unwrap();
    assert!(recovery.unsettled().is_empty());
    let first_kept = recovery.admissions[0].0;
    assert!(first_kept <= 201, "admission 201 was compacted");
    assert_eq!(number_of(&recovery.admissions.last().unwrap().1), 300);
    // The segment being written is never removed.
    let all = outbox.compact(u64::MAX).unwrap();
    assert_eq!(segments(dir.path()).len(), kept.len() - all);
    assert_eq!(segments(dir.path()).len(), 1);
    outbox.close().unwrap();
    let (_, recovery) = Outbox::open(small).unwrap();
    assert_eq!(number_of(&recovery.admissions.last().unwrap().1), 300);
}

#[test]
fn a_panicking_durable_callback_fails_the_outbox_instead_of_hanging_the_writer() {
    let dir = tempfile::tempdir().unwrap();
    let mut small = config(dir.path());
    small.max_pending_bytes = 4096;
    let (mut outbox, _) = Outbox::open(small).unwrap();
    outbox.on_durable(Box::new(|_| panic!("a callback bug")));
    let mut result = Ok(0);
    for number in 1..=10_000 {
        result = outbox.admit(&admission(number, 1, 100));
        if result.is_err() {
            break;
        }
    }
    assert!(
        matches!(result, Err(OutboxError::Write { .. })),
        "{result:?}"
    );
    assert!(outbox.sync().is_err());
    assert!(outbox.close().is_err());
}

#[test]
fn a_second_opener_is_refused_while_the_outbox_is_open() {
    let dir = tempfile::tempdir().unwrap();
    let (mut outbox, _) = Outbox::open(config(dir.path())).unwrap();
    outbox.admit(&admission(1, 1, 10)).unwrap();
    outbox.sync().unwrap();
    let before = fs::read(&segments(dir.path())[0]).unwrap();
    let error = Outbox::open(config(dir.path())).expect_err("a second writer");
    assert!(matches!(error, OutboxError::Locked { .. }), "{error}");
    assert!(error.to_string().contains("stop the other one"), "{error}");
    assert_eq!(fs::read(&segments(dir.path())[0]).unwrap(), before);
    outbox.admit(&admission(2, 1, 10)).unwrap();
    outbox.close().unwrap();
    let (_, recovery) = Outbox::open(config(dir.path())).unwrap();
    assert_eq!(recovery.admissions.len(), 2);
}

/// A recovered outbox with nothing in it.
#[test]
fn an_empty_folder_opens_empty() {
    let dir = tempfile::tempdir().unwrap();
    let (outbox, recovery): (Outbox, Recovery) = Outbox::open(config(dir.path())).unwrap();
    assert_eq!(
        (recovery.last_seq, outbox.durable(), outbox.last_seq()),
        (0, 0, 0)
    );
    assert!(recovery.admissions.is_empty() && recovery.torn.is_none());
    outbox.close().unwrap();
}

// ---------------------------------------------------------------------------------
// Whose outbox it is.

#[test]
fn a_segment_of_another_owner_is_refused_and_an_adopted_owner_is_kept() {
    let ours = [1u8; 16];
    let theirs = [2u8; 16];
    let owned = |dir: &Path, owner: OutboxOwner| {
        let mut config = config(dir);
        config.owner = owner;
        config
    };
    let dir = tempfile::tempdir().unwrap();
    write_admissions(owned(dir.path(), OutboxOwner::Is(ours)), 5);
    let other = tempfile::tempdir().unwrap();
    write_admissions(owned(other.path(), OutboxOwner::Is(theirs)), 7);

    // the owner it was written for opens it; an adopter learns it
    let (outbox, recovery) = Outbox::open(owned(dir.path(), OutboxOwner::Is(ours))).unwrap();
    assert_eq!(recovery.owner, Some(ours));
    outbox.close().unwrap();
    let (outbox, recovery) = Outbox::open(owned(dir.path(), OutboxOwner::AdoptOr(theirs))).unwrap();
    assert_eq!((recovery.owner, outbox.owner()), (Some(ours), ours));
    outbox.close().unwrap();

    // another owner's segment put in its place: refused, naming it, nothing changed
    let segment = segments(dir.path()).pop().unwrap();
    let foreign = segments(other.path()).pop().unwrap();
    fs::copy(&foreign, &segment).unwrap();
    let before = fs::read(&segment).unwrap();
    let error = Outbox::open(owned(dir.path(), OutboxOwner::Is(ours))).expect_err("foreign");
    match &error {
        OutboxError::Foreign { file, .. } => assert_eq!(file, &segment),
        other => panic!("expected a foreign segment, got {other}"),
    }
    assert!(error.to_string().contains(&segment.display().to_string()));
    assert_eq!(fs::read(&segment).unwrap(), before);

    // two segments of two owners in one folder: refused whatever the opener expects
    let dir = tempfile::tempdir().unwrap();
    let mut small = owned(dir.path(), OutboxOwner::Is(ours));
    small.segment_bytes = 4096;
    write_admissions(small, 100);
    let all = segments(dir.path());
    let bytes = fs::read(&all[1]).unwrap();
    let (mut header, len) =
        mongoose_durable::header::Header::decode(&all[1], &bytes).expect("a layer header");
    header.owner[..16].copy_from_slice(&theirs);
    let mut rewritten = header.encode().unwrap();
    rewritten.extend_from_slice(&bytes[len..]);
    fs::write(&all[1], &rewritten).unwrap();
    for owner in [OutboxOwner::Any, OutboxOwner::AdoptOr(ours)] {
        let error = Outbox::open(owned(dir.path(), owner)).expect_err("two owners");
        assert!(matches!(error, OutboxError::Foreign { .. }), "{error}");
    }
}

#[test]
fn a_segment_of_format_version_1_is_still_read() {
    let dir = tempfile::tempdir().unwrap();
    write_admissions(config(dir.path()), 4);
    // rewrite the segment as the first format wrote it: a 24-byte header, no owner
    // (and frames whose checksum covers only the payload)
    let segment = segments(dir.path()).pop().unwrap();
    let mut v1 = Vec::new();
    v1.extend_from_slice(b"MGOUTBOX");
    v1.extend_from_slice(&1u32.to_le_bytes());
    v1.extend_from_slice(&1u64.to_le_bytes());
    let crc = crc32fast::hash(&v1);
    v1.extend_from_slice(&crc.to_le_bytes());
    for offset in record_offsets(&segment) {
        let bytes = fs::read(&segment).unwrap();
        let len = u32::from_le_bytes(bytes[offset..offset + 4].try_into().unwrap()) as usize;
        let payload = &bytes[offset + 8..offset + 8 + len];
        v1.extend_from_slice(&bytes[offset..offset + 4]);
        v1.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
        v1.extend_from_slice(payload);
    }
    fs::write(&segment, &v1).unwrap();
    fs::remove_file(dir.path().join("DURABLE")).unwrap();
    let mut config = config(dir.path());
    config.owner = OutboxOwner::Is([9; 16]);
    let (mut outbox, recovery) = Outbox::open(config.clone()).unwrap();
    assert_eq!(recovery.owner, None, "a version 1 segment names no owner");
    assert_eq!(recovery.admissions.len(), 4);
    // never appended to: the next record starts a segment of the durable layer's layout
    outbox.admit(&admission(5, 1, 40)).unwrap();
    outbox.admit(&admission(6, 1, 40)).unwrap();
    outbox.close().unwrap();
    let all = segments(dir.path());
    assert_eq!(all.len(), 2);
    assert_eq!(fs::read(&all[0]).unwrap(), v1);
    assert_eq!(header_len(&fs::read(&all[1]).unwrap()), 63);
    let (_, recovery) = Outbox::open(config).unwrap();
    let numbers: Vec<u64> = recovery
        .admissions
        .iter()
        .map(|(_, a)| number_of(a))
        .collect();
    assert_eq!(numbers, (1..=6).collect::<Vec<_>>());
    assert_eq!(recovery.owner, Some([9; 16]));
}

#[test]
fn a_roll_lets_compaction_remove_everything_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let (mut outbox, _) = Outbox::open(config(dir.path())).unwrap();
    // a roll before anything is written changes nothing
    outbox.roll();
    for number in 1..=10 {
        outbox.admit(&admission(number, 1, 40)).unwrap();
        outbox
            .record_outcomes(&[(key(number, 0), Outcome::Over)])
            .unwrap();
    }
    assert_eq!(segments(dir.path()).len(), 1);
    let through = outbox.sync().unwrap();
    outbox.roll();
    // the new segment starts with the next record; until it is durable the old one stays
    assert_eq!(outbox.compact(through).unwrap(), 0);
    outbox.admit(&admission(11, 1, 40)).unwrap();
    assert_eq!(
        outbox.compact(through).unwrap(),
        0,
        "the new segment is not durable yet"
    );
    outbox.sync().unwrap();
    assert_eq!(outbox.compact(through).unwrap(), 1);
    let kept = segments(dir.path());
    assert_eq!(kept.len(), 1);
    assert!(
        kept[0].ends_with(format!("outbox-{:020}.log", through + 1)),
        "{kept:?}"
    );
    outbox.close().unwrap();
    let (outbox, recovery) = Outbox::open(config(dir.path())).unwrap();
    assert_eq!(recovery.first_seq, through + 1);
    assert_eq!(recovery.admissions.len(), 1);
    assert_eq!(recovery.unsettled().len(), 1);
    let last = recovery.last_seq;
    outbox.close().unwrap();
    // an owner that saved more than the outbox holds (an older copy put back) is told
    let mut ahead = config(dir.path());
    ahead.saved_through = last + 5;
    let error = Outbox::open(ahead).expect_err("behind the owner's snapshot");
    assert!(
        matches!(error, OutboxError::Behind { saved_through, last_seq, .. } if saved_through == last + 5 && last_seq == last),
        "{error}"
    );
    let mut exact = config(dir.path());
    exact.saved_through = last;
    Outbox::open(exact).unwrap().0.close().unwrap();
}

#[test]
fn open_with_hands_every_admission_to_its_visitor_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let mut small = config(dir.path());
    small.segment_bytes = 4096;
    let (mut outbox, _) = Outbox::open(small.clone()).unwrap();
    for number in 1..=100 {
        outbox.admit(&admission(number, 2, 30)).unwrap();
        if number % 3 != 0 {
            outbox
                .record_outcomes(&[
                    (key(number, 0), Outcome::Over),
                    (key(number, 1), Outcome::Over),
                ])
                .unwrap();
        }
    }
    outbox.close().unwrap();
    let (outbox, kept) = Outbox::open(small.clone()).unwrap();
    outbox.close().unwrap();
    let mut visited = Vec::new();
    let (outbox, recovery) = Outbox::open_with(small.clone(), |seq, view| {
        visited.push((seq, view.state.to_vec(), view.outputs));
        Ok(())
    })
    .unwrap();
    outbox.close().unwrap();
    assert!(recovery.admissions.is_empty() && recovery.outcomes.is_empty());
    let expected: Vec<(u64, Vec<u8>, usize)> = kept
        .admissions
        .iter()
        .map(|(seq, admission)| (*seq, admission.state.clone(), admission.outputs.len()))
        .collect();
    assert_eq!(visited, expected);
    assert_eq!(recovery.unsettled(), kept.unsettled());
    assert_eq!(recovery.unsettled().len(), 66);
    assert_eq!(recovery.last_seq, kept.last_seq);
    // a visitor's refusal names the record and changes nothing
    let error = Outbox::open_with(small.clone(), |seq, _| {
        if seq == 50 {
            Err("not mine".to_owned())
        } else {
            Ok(())
        }
    })
    .expect_err("refused");
    assert!(
        matches!(error, OutboxError::Refused { seq: 50, .. }),
        "{error}"
    );
    assert!(error.to_string().contains("not mine"));
}

/// Issue 38.1: an owner that bounds its restart time counts what a restart would replay
/// from the files on disk: the records after its snapshot (`saved_through`) and their
/// bytes, the same bytes the writer counted as it appended them, across segments.
#[test]
fn the_records_after_the_saved_sequence_are_counted_from_disk_with_their_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = OutboxConfig::new(dir.path());
    config.segment_bytes = 4096;
    let (mut outbox, recovery) = Outbox::open(config.clone()).unwrap();
    assert_eq!(recovery.since_saved, mongoose_outbox::LogSpan::default());
    let mut appended_after = 0;
    for number in 1..=120u64 {
        if number == 41 {
            appended_after = outbox.appended_bytes();
        }
        outbox.admit(&admission(number, 1, 30)).unwrap();
    }
    outbox
        .record_outcomes(&[(key(1, 0), Outcome::Published)])
        .unwrap();
    let appended = outbox.appended_bytes();
    outbox.close().unwrap();
    assert!(
        fs::read_dir(dir.path()).unwrap().count() > 3,
        "the records span several segments"
    );

    config.saved_through = 40;
    let (outbox, recovery) = Outbox::open(config.clone()).unwrap();
    assert_eq!(
        recovery.since_saved.records, 81,
        "records 41-120 and the outcomes"
    );
    assert_eq!(
        recovery.since_saved.bytes,
        appended - appended_after,
        "the bytes the writer appended after record 40"
    );
    assert_eq!(
        outbox.appended_bytes(),
        0,
        "nothing appended since this open"
    );
    drop(outbox);
    let read = mongoose_outbox::read(dir.path()).unwrap();
    assert_eq!(
        read.since_saved.records, 121,
        "a reader counts every record"
    );
    assert_eq!(read.since_saved.bytes, appended);
}
