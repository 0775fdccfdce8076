//! Helpers the journal's integration tests share.
#![allow(dead_code, unreachable_pub)]

use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use mongoose_journal::{Journal, JournalConfig};

/// The content of excerpt `index` in every test: a length that varies with the index
/// (0 to 300 bytes) and bytes that depend on both, so a misplaced or mixed-up excerpt
/// never matches.
pub fn payload(index: u64) -> Vec<u8> {
    let len = (index.wrapping_mul(7919) % 301) as usize;
    (0..len)
        .map(|position| (index as usize).wrapping_mul(31).wrapping_add(position * 7) as u8)
        .collect()
}

/// A journal of small segments, so that a few thousand excerpts roll many times.
pub fn small_segments() -> JournalConfig {
    JournalConfig {
        segment_bytes: 64 * 1024,
        ..JournalConfig::default()
    }
}

/// Opens the journal at `dir` with small segments.
pub fn open_small(dir: &Path) -> Journal {
    Journal::open(dir, small_segments()).expect("open the journal")
}

/// Appends `payload(i)` for every `i` in `range` (which must start at the journal's
/// next index).
pub fn append_payloads(journal: &Journal, range: std::ops::Range<u64>) {
    let mut appender = journal.appender().expect("the appender");
    for index in range {
        assert_eq!(appender.append(&payload(index)).expect("append"), index);
    }
}

/// Reads every excerpt a fresh tailer yields, checking each against `payload`, and
/// returns how many there were (they are dense from 0).
pub fn read_all_checked(journal: &Journal) -> u64 {
    let mut tailer = journal.tailer();
    let mut expected = 0;
    while let Some(excerpt) = tailer.next().expect("read") {
        assert_eq!(excerpt.index(), expected, "indexes are dense and in order");
        assert_eq!(
            excerpt.bytes(),
            &payload(expected)[..],
            "excerpt {expected} holds what was appended"
        );
        expected += 1;
    }
    expected
}

/// Waits for `done` with a generous deadline (the machine is shared).
pub fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(2));
    }
}
