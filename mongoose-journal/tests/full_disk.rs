//! A full file system is an error at the roll (the segment's space is reserved when it
//! is created), never a SIGBUS on a write to the mapping; appending resumes once space
//! is freed, and nothing appended before is lost.

mod common;

use std::os::unix::fs::MetadataExt;

use common::{payload, read_all_checked};
use mongoose_journal::{Journal, JournalConfig, JournalError};
use mongoose_testkit::Tmpfs;

#[test]
fn a_full_file_system_refuses_the_roll_and_appending_resumes_once_space_is_freed() {
    let tmpfs = Tmpfs::mount("10m");
    let dir = tmpfs.path().join("journal");
    let config = JournalConfig {
        segment_bytes: 4 << 20,
        ..JournalConfig::default()
    };
    let journal = Journal::open(&dir, config.clone()).expect("open");
    let mut appender = journal.appender().expect("appender");
    let mut appended = 0;
    let error = loop {
        match appender.append(&payload(appended)) {
            Ok(index) => {
                assert_eq!(index, appended);
                appended += 1;
            }
            Err(error) => break error,
        }
        assert!(
            appended < 1_000_000,
            "a 10 MiB file system cannot take this much"
        );
    };
    assert!(matches!(error, JournalError::Io { .. }), "{error:?}");
    assert!(error.to_string().contains("free space"), "{error}");
    assert!(
        appended > 10_000,
        "two segments were filled first: {appended}"
    );
    // the refused append changed nothing; readers see everything before it
    assert_eq!(appender.next_index(), appended);
    assert!(appender.append(&payload(appended)).is_err(), "still full");
    assert_eq!(read_all_checked(&journal), appended);
    assert_eq!(
        std::fs::read_dir(&dir)
            .expect("dir")
            .filter(|entry| {
                let name = entry.as_ref().expect("entry").file_name();
                name.to_string_lossy().ends_with(".tmp")
            })
            .count(),
        0,
        "a failed segment creation leaves no half-made file taking space"
    );

    // every segment's space is reserved (allocated, not a sparse file): a write to its
    // mapping can never meet a full file system
    for number in journal.segment_numbers().expect("segments") {
        let metadata = std::fs::metadata(journal.segment_path(number)).expect("segment");
        assert!(
            metadata.blocks() * 512 >= metadata.len(),
            "segment {number}: {} bytes allocated of {}",
            metadata.blocks() * 512,
            metadata.len()
        );
    }

    // the operator frees space: appending resumes where it stopped
    tmpfs.remount("size=20m");
    assert_eq!(
        appender.append(&payload(appended)).expect("append"),
        appended
    );
    drop(appender);
    assert_eq!(read_all_checked(&journal), appended + 1);
    let appender = journal.appender().expect("a new appender");
    assert_eq!(appender.next_index(), appended + 1);
}
