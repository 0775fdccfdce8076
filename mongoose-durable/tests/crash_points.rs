//! The crash-point test of the durable layer (issue 38.2, the way SQLite and redb test
//! recovery): each write sequence's file operations are recorded, cut after every
//! operation (and with the next write torn after every byte), the files materialised as
//! a crash would leave them, and the real recovery run over them.

use std::collections::BTreeMap;
use std::path::Path;

use mongoose_durable::crash::{crash_states, RecordingDisk};
use mongoose_durable::header::Header;
use mongoose_durable::log::RecordLog;
use mongoose_durable::replace;
use proptest::prelude::*;

/// Replaces `path` with each of `versions` in turn (`initial` before), then checks every
/// crash state: the file holds the last acknowledged version or the one being written,
/// never a third content, and no temporary file is left after recovery.
fn check_replaces(folder: &Path, initial: Option<Vec<u8>>, versions: Vec<Vec<u8>>) {
    let path = folder.join("state");
    let mut disk = RecordingDisk::default();
    let mut acknowledged = Vec::new();
    for version in &versions {
        replace::replace_on(&mut disk, &path, version).expect("replace");
        acknowledged.push(disk.len());
    }
    let mut before = BTreeMap::new();
    if let Some(bytes) = &initial {
        before.insert(path.clone(), bytes.clone());
    }
    let mut contents = vec![initial];
    contents.extend(versions.into_iter().map(Some));
    let operations = disk.operations();
    for state in crash_states(&before, &operations) {
        state.materialise(folder).expect("materialise");
        replace::remove_leftover(&path).expect("recover");
        let found = std::fs::read(&path).ok();
        let done = acknowledged
            .iter()
            .filter(|&&mark| mark <= state.after)
            .count();
        let allowed = &contents[done..(done + 2).min(contents.len())];
        assert!(
            allowed.contains(&found),
            "after {} of {} operations ({}), {} replaces acknowledged: found {found:?}, allowed {allowed:?}\n{operations:#?}",
            state.after,
            operations.len(),
            state.how,
            done
        );
        assert!(
            !replace::temporary_path(&path).exists(),
            "the temporary file is left after recovery ({})",
            state.how
        );
    }
}

/// Creates a log and appends `records`, syncing (and so acknowledging) after those
/// whose flag is set, then checks every crash state: recovery opens the log, and finds
/// a prefix of the records appended that holds every acknowledged one (never a third
/// state, never a silent cut of a committed record); a torn tail it cut is gone when the
/// log is opened again.
fn check_log(folder: &Path, records: Vec<(Vec<u8>, bool)>) {
    let path = folder.join("events.log");
    let header = Header::new("crash-point-log", 1, b"test".to_vec());
    let mut disk = RecordingDisk::default();
    let mut log = RecordLog::create_on(&mut disk, &path, &header).expect("create");
    // (operations done, records committed) at each acknowledgement
    let mut acknowledged = vec![(disk.len(), 0)];
    for (index, (record, sync)) in records.iter().enumerate() {
        log.append(record).expect("append");
        if *sync {
            log.sync().expect("sync");
            acknowledged.push((disk.len(), index + 1));
        }
    }
    drop(log);
    let appended: Vec<Vec<u8>> = records.into_iter().map(|(record, _)| record).collect();
    let operations = disk.operations();
    for state in crash_states(&BTreeMap::new(), &operations) {
        state.materialise(folder).expect("materialise");
        let committed = acknowledged
            .iter()
            .filter(|(mark, _)| *mark <= state.after)
            .map(|(_, committed)| *committed)
            .max();
        let context = format!(
            "after {} of {} operations ({}), committed {committed:?}",
            state.after,
            operations.len(),
            state.how
        );
        let (_, recovery) = RecordLog::open_or_create(&path, &header)
            .unwrap_or_else(|error| panic!("{context}: recovery refused: {error}"));
        let found = recovery.records.len();
        assert!(
            found <= appended.len(),
            "{context}: more records than appended"
        );
        assert_eq!(
            recovery.records,
            appended[..found],
            "{context}: not a prefix of what was appended"
        );
        assert!(
            found >= committed.unwrap_or(0),
            "{context}: {found} records, a committed one was cut"
        );
        if let Some(torn) = recovery.torn_tail {
            assert!(torn.bytes_cut > 0, "{context}: a cut of nothing reported");
        }
        let (_, again) = RecordLog::open_or_create(&path, &header).expect("reopen");
        assert_eq!(
            again.torn_tail, None,
            "{context}: the torn tail was not cut"
        );
        assert_eq!(
            again.records, recovery.records,
            "{context}: reopening changed the records"
        );
        assert!(
            !replace::temporary_path(&path).exists(),
            "{context}: temporary file left"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn every_prefix_of_a_durable_write_recovers_to_before_or_after(
        initial in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..12)),
        versions in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..16), 1..4),
        records in proptest::collection::vec(
            (proptest::collection::vec(any::<u8>(), 0..14), any::<bool>()), 1..6),
    ) {
        let folder = tempfile::tempdir().expect("folder");
        check_log(folder.path(), records);
        check_replaces(folder.path(), initial, versions);
    }
}
