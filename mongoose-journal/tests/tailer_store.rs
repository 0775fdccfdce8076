//! A named tailer's committed index survives a torn write of its store.

use std::fs;

use mongoose_journal::{JournalError, TailerStore};

/// The bytes `store(index)` changed in the file: its first and last changed offsets.
fn changed_range(before: &[u8], after: &[u8]) -> (usize, usize) {
    assert_eq!(before.len(), after.len());
    let first = (0..before.len())
        .find(|&i| before[i] != after[i])
        .expect("a change");
    let last = (0..before.len())
        .rev()
        .find(|&i| before[i] != after[i])
        .expect("a change");
    (first, last)
}

#[test]
fn the_tailer_store_survives_a_torn_write() {
    let dir = tempfile::tempdir().expect("dir");
    let mut store = TailerStore::open(dir.path(), "journal-source").expect("open");
    assert_eq!(store.load(), None, "a new store holds nothing");
    store.store(5).expect("store");
    store.store(9).expect("store");
    assert_eq!(store.load(), Some(9));
    let path = store.path().to_path_buf();
    drop(store);
    assert_eq!(
        TailerStore::open(dir.path(), "journal-source")
            .expect("reopen")
            .load(),
        Some(9),
        "durable across a reopen"
    );

    // a write torn in the middle (its second half never reached the file), and one torn
    // at its very start (only the first byte written) keep the previous index
    for torn_half in [true, false] {
        let mut store = TailerStore::open(dir.path(), "journal-source").expect("open");
        let committed = store.load().expect("an index");
        let before = fs::read(&path).expect("the store file");
        store.store(committed + 100).expect("store");
        drop(store);
        let after = fs::read(&path).expect("the store file");
        let (first, last) = changed_range(&before, &after);
        let mut torn = after.clone();
        let keep_up_to = if torn_half {
            first + (last - first) / 2
        } else {
            first
        };
        torn[keep_up_to + 1..=last].copy_from_slice(&before[keep_up_to + 1..=last]);
        fs::write(&path, &torn).expect("tear the write");
        let store = TailerStore::open(dir.path(), "journal-source").expect("reopen");
        assert_eq!(store.load(), Some(committed), "the previous index survives");

        // and the next store works (it is not lost to the torn slot)
        let mut store = store;
        store
            .store(committed + 1)
            .expect("store after a torn write");
        drop(store);
        let store = TailerStore::open(dir.path(), "journal-source").expect("reopen");
        assert_eq!(store.load(), Some(committed + 1));
    }

    // a store with no readable slot is refused, not read as "start from 0"
    fs::write(
        &path,
        vec![0xA5; fs::metadata(&path).expect("meta").len() as usize],
    )
    .expect("wreck the store");
    let refused = TailerStore::open(dir.path(), "journal-source").expect_err("refused");
    assert!(
        matches!(refused, JournalError::TailerStoreDamaged { .. }),
        "{refused:?}"
    );
    assert!(refused.to_string().contains("delete"), "{refused}");

    // names that are not plain file names are refused
    assert!(TailerStore::open(dir.path(), "../escape").is_err());
    assert!(TailerStore::open(dir.path(), "").is_err());
}
