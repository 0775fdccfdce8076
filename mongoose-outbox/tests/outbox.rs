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
    Admission, AdmittedOutput, AdmittedPosition, Outbox, OutboxConfig, OutboxError, Outcome,
    Recovery,
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

/// The offsets of the records of a segment (walking the length prefixes).
fn record_offsets(path: &Path) -> Vec<usize> {
    let bytes = fs::read(path).unwrap();
    let mut offsets = Vec::new();
    let mut offset = 24;
    while offset + 8 <= bytes.len() {
        offsets.push(offset);
        offset += 8 + u32::from_le_bytes(bytes[offset..offset + 4].try_into().unwrap()) as usize;
    }
    offsets
}

fn config(dir: &Path) -> OutboxConfig {
    OutboxConfig::new(dir)
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
        .into_iter()
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
    // A record cut short at the very end of the last segment: cut off, the rest kept.
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
            if at >= 24 && at + 300 < original.len() && at % 5 != 0 {
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
        .into_iter()
        .map(|(seq, output)| (seq, output.key.clone()))
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
        .into_iter()
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
