//! A named tailer's committed index, in a small file of its own.
//!
//! Layout (little-endian): a 96-byte file of two 48-byte slots, written alternately:
//!
//! ```text
//!  0  magic     b"MGTS"
//!  4  version   u16 = 2
//!  6  reserved  u16 = 0
//!  8  sequence  u64  (higher is newer)
//! 16  index     u64  the committed next index
//! 24  journal   u64  the identity of the journal the index belongs to (0: unknown)
//! 32  reserved  12 bytes = 0
//! 44  crc       u32  CRC-32 of bytes 0..44
//! ```
//!
//! A store writes the slot that does not hold the newest value (`pwrite`), then
//! `fdatasync`s: a write torn by a crash or a power loss spoils only that slot, and the
//! other keeps the previous committed index.
//!
//! Version 1 (a 64-byte file of two 32-byte slots: magic, version 1, sequence, index,
//! CRC at 28, no journal identity) is still read, as an index of an unknown journal; the
//! first store after it writes a version 2 slot at offset 48, which overlaps only the
//! second half of version 1's second slot, so a torn first store keeps an older index
//! (duplicates, never a skip).

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::error::{JournalError, Result};
use mongoose_durable::lock::FileLock;

const STORE_MAGIC: [u8; 4] = *b"MGTS";
const STORE_VERSION: u16 = 2;
const SLOT_BYTES: usize = 48;
const STORE_BYTES: usize = 2 * SLOT_BYTES;
const V1_VERSION: u16 = 1;
const V1_SLOT_BYTES: usize = 32;
const STORE_SUFFIX: &str = ".tailer";

/// The durable committed index of a named tailer (`<dir>/<name>.tailer`): a journal
/// source stores the index after the last excerpt it processed, and resumes there after
/// a restart or a crash. One owner per name at a time (an exclusive `flock`, here or in
/// another process).
#[derive(Debug)]
pub struct TailerStore {
    path: PathBuf,
    dir: PathBuf,
    lock: FileLock,
    /// The newest valid slot: its number (0 or 1), sequence and index.
    newest: Option<(usize, u64, u64)>,
    /// The newest slot is a version 1 slot (the file was written by an older version).
    legacy: bool,
    /// The identity of the journal the committed index belongs to (0: unknown), and that
    /// the next store records.
    journal: u64,
    directory_synced: bool,
}

impl TailerStore {
    /// Opens (creating it if needed) the store of the tailer `name` in `dir`, and reads
    /// its committed index. A store whose slots are both unreadable is refused (its
    /// committed index is unknown); so is a store another owner holds.
    pub fn open(dir: impl AsRef<Path>, name: &str) -> Result<TailerStore> {
        validate_name(name)?;
        let dir = dir.as_ref();
        fs::create_dir_all(dir)
            .map_err(|error| JournalError::io("cannot create the directory", dir, error))?;
        let path = dir.join(format!("{name}{STORE_SUFFIX}"));
        let existed = path.exists();
        let lock = crate::lock::try_lock(&path)
            .map_err(|error| JournalError::io("cannot open the tailer store", &path, error))?
            .ok_or_else(|| JournalError::TailerStoreHeld { path: path.clone() })?;
        let mut bytes = [0u8; STORE_BYTES];
        let read = read_up_to(lock.file(), &mut bytes)
            .map_err(|error| JournalError::io("cannot read the tailer store", &path, error))?;
        let slots = [
            decode_slot(&bytes[..SLOT_BYTES]),
            decode_slot(&bytes[SLOT_BYTES..]),
        ];
        let mut newest = slots
            .iter()
            .enumerate()
            .filter_map(|(number, slot)| slot.map(|slot| (number, slot)))
            .max_by_key(|&(_, (sequence, _, _))| sequence);
        let mut legacy = false;
        if newest.is_none() {
            let v1 = [
                decode_v1_slot(&bytes[..V1_SLOT_BYTES]),
                decode_v1_slot(&bytes[V1_SLOT_BYTES..2 * V1_SLOT_BYTES]),
            ];
            newest = v1
                .iter()
                .enumerate()
                .filter_map(|(number, slot)| {
                    slot.map(|(sequence, index)| (number, (sequence, index, 0)))
                })
                .max_by_key(|&(_, (sequence, _, _))| sequence);
            legacy = newest.is_some();
        }
        if newest.is_none() && bytes[..read].iter().any(|&byte| byte != 0) {
            return Err(JournalError::TailerStoreDamaged {
                path,
                reason: "both slots fail their magic or checksum".into(),
            });
        }
        let journal = newest.map_or(0, |(_, (_, _, journal))| journal);
        let newest = newest.map(|(number, (sequence, index, _))| (number, sequence, index));
        Ok(TailerStore {
            path,
            dir: dir.to_path_buf(),
            lock,
            newest,
            legacy,
            journal,
            directory_synced: existed,
        })
    }

    /// The committed index (the next excerpt to process), or `None` if nothing was ever
    /// stored.
    pub fn load(&self) -> Option<u64> {
        self.newest.map(|(_, _, index)| index)
    }

    /// The identity of the journal (see [`Journal::identity`](crate::Journal::identity))
    /// whose index [`TailerStore::load`] gives, or `None` if it is unknown: nothing was
    /// stored yet, or an older version stored it. A reader must not apply an index of
    /// another journal: a journal made again at the same path gives its first excerpts
    /// the old one's indexes.
    pub fn journal(&self) -> Option<u64> {
        (self.newest.is_some() && self.journal != 0).then_some(self.journal)
    }

    /// Makes the following stores record that their index belongs to the journal with
    /// `identity`.
    pub fn bind(&mut self, identity: u64) {
        self.journal = identity;
    }

    /// Stores `index` as the committed index (of the journal given to
    /// [`TailerStore::bind`], or the one the loaded index belongs to), durably: it is on
    /// disk (`fdatasync`) when this returns.
    pub fn store(&mut self, index: u64) -> Result<()> {
        let (number, sequence) = match self.newest {
            // the slot at 48 overlaps only the second half of a version 1 second slot
            Some((_, sequence, _)) if self.legacy => (1, sequence + 1),
            Some((newest, sequence, _)) => (1 - newest, sequence + 1),
            None => (0, 1),
        };
        let slot = encode_slot(sequence, index, self.journal);
        let file = self.lock.file();
        file.write_all_at(&slot, (number * SLOT_BYTES) as u64)
            .and_then(|()| file.sync_data())
            .map_err(|error| {
                JournalError::io("cannot write the tailer store", &self.path, error)
            })?;
        if !self.directory_synced {
            File::open(&self.dir)
                .and_then(|directory| directory.sync_all())
                .map_err(|error| JournalError::io("cannot sync the directory", &self.dir, error))?;
            self.directory_synced = true;
        }
        self.newest = Some((number, sequence, index));
        self.legacy = false;
        Ok(())
    }

    /// The store's file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Checks that `name` can name a tailer store (what [`TailerStore::open`] checks
    /// first), without touching any file.
    pub fn check_name(name: &str) -> Result<()> {
        validate_name(name)
    }
}

fn validate_name(name: &str) -> Result<()> {
    let valid = !name.is_empty()
        && name.len() <= 100
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-'));
    if valid {
        Ok(())
    } else {
        Err(JournalError::InvalidTailerName {
            name: name.to_owned(),
        })
    }
}

fn encode_slot(sequence: u64, index: u64, journal: u64) -> [u8; SLOT_BYTES] {
    let mut slot = [0u8; SLOT_BYTES];
    slot[0..4].copy_from_slice(&STORE_MAGIC);
    slot[4..6].copy_from_slice(&STORE_VERSION.to_le_bytes());
    slot[8..16].copy_from_slice(&sequence.to_le_bytes());
    slot[16..24].copy_from_slice(&index.to_le_bytes());
    slot[24..32].copy_from_slice(&journal.to_le_bytes());
    let crc = crc32fast::hash(&slot[0..44]);
    slot[44..48].copy_from_slice(&crc.to_le_bytes());
    slot
}

/// A slot's (sequence, index, journal), if it is whole.
fn decode_slot(slot: &[u8]) -> Option<(u64, u64, u64)> {
    let crc = u32::from_le_bytes(slot[44..48].try_into().expect("4 bytes"));
    let whole = slot[0..4] == STORE_MAGIC
        && u16::from_le_bytes([slot[4], slot[5]]) == STORE_VERSION
        && crc == crc32fast::hash(&slot[0..44]);
    whole.then(|| {
        (
            u64::from_le_bytes(slot[8..16].try_into().expect("8 bytes")),
            u64::from_le_bytes(slot[16..24].try_into().expect("8 bytes")),
            u64::from_le_bytes(slot[24..32].try_into().expect("8 bytes")),
        )
    })
}

/// A version 1 slot's (sequence, index), if it is whole.
fn decode_v1_slot(slot: &[u8]) -> Option<(u64, u64)> {
    let crc = u32::from_le_bytes(slot[28..32].try_into().expect("4 bytes"));
    let whole = slot[0..4] == STORE_MAGIC
        && u16::from_le_bytes([slot[4], slot[5]]) == V1_VERSION
        && crc == crc32fast::hash(&slot[0..28]);
    whole.then(|| {
        (
            u64::from_le_bytes(slot[8..16].try_into().expect("8 bytes")),
            u64::from_le_bytes(slot[16..24].try_into().expect("8 bytes")),
        )
    })
}

/// Reads from the start of `file` into `buffer` until it is full or the file ends; how
/// many bytes were read (the rest stays zero).
fn read_up_to(file: &File, buffer: &mut [u8]) -> io::Result<usize> {
    let mut read = 0;
    while read < buffer.len() {
        match file.read_at(&mut buffer[read..], read as u64) {
            Ok(0) => break,
            Ok(count) => read += count,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(read)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tailer_store_slot_layout_is_fixed() {
        let slot = encode_slot(5, 0x1122_3344_5566_7788, 0x99AA_BBCC_DDEE_FF01);
        assert_eq!(&slot[0..4], b"MGTS");
        assert_eq!(slot[4..6], 2u16.to_le_bytes());
        assert_eq!(slot[6..8], [0; 2]);
        assert_eq!(slot[8..16], 5u64.to_le_bytes());
        assert_eq!(slot[16..24], 0x1122_3344_5566_7788u64.to_le_bytes());
        assert_eq!(slot[24..32], 0x99AA_BBCC_DDEE_FF01u64.to_le_bytes());
        assert_eq!(slot[32..44], [0; 12]);
        assert_eq!(slot[44..48], crc32fast::hash(&slot[0..44]).to_le_bytes());
        assert_eq!(
            decode_slot(&slot),
            Some((5, 0x1122_3344_5566_7788, 0x99AA_BBCC_DDEE_FF01))
        );
        assert_eq!(STORE_BYTES, 96);
        let mut torn = slot;
        torn[20] ^= 0xFF;
        assert_eq!(decode_slot(&torn), None);
    }

    /// A version 1 store (written by an older version) is read as an index of an
    /// unknown journal, and the next store turns it into version 2.
    #[test]
    fn a_version_1_store_is_read_and_upgraded() {
        let v1 = |sequence: u64, index: u64| {
            let mut slot = [0u8; V1_SLOT_BYTES];
            slot[0..4].copy_from_slice(&STORE_MAGIC);
            slot[4..6].copy_from_slice(&V1_VERSION.to_le_bytes());
            slot[8..16].copy_from_slice(&sequence.to_le_bytes());
            slot[16..24].copy_from_slice(&index.to_le_bytes());
            let crc = crc32fast::hash(&slot[0..28]);
            slot[28..32].copy_from_slice(&crc.to_le_bytes());
            slot
        };
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("old.tailer");
        let mut file = Vec::new();
        file.extend_from_slice(&v1(3, 30));
        file.extend_from_slice(&v1(4, 40));
        fs::write(&path, &file).expect("a version 1 store");
        let mut store = TailerStore::open(dir.path(), "old").expect("read");
        assert_eq!(store.load(), Some(40));
        assert_eq!(store.journal(), None, "an index of an unknown journal");
        store.bind(77);
        store.store(41).expect("store");
        drop(store);
        let mut store = TailerStore::open(dir.path(), "old").expect("reopen");
        assert_eq!((store.load(), store.journal()), (Some(41), Some(77)));
        store.store(42).expect("store");
        drop(store);
        let store = TailerStore::open(dir.path(), "old").expect("reopen");
        assert_eq!((store.load(), store.journal()), (Some(42), Some(77)));
    }
}
