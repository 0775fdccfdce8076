//! A partition's epoch, and the owner's epoch file that lets it survive a restart.
//!
//! Kafka offsets never repeat within a partition, but the state that applied them
//! changes hands: a processor that stores `(epoch, position)` with its state
//! ([`mongoose_core::Delivery::already_applied`]) must recognise re-deliveries of what
//! *its own* state holds (a restart after `kill -9`: exactly once), and must never take
//! a position saved during an earlier ownership as proof that it holds what another
//! owner read in between. So the epoch changes with the owner:
//!
//! * When a partition is assigned, the source decides its epoch before it publishes any
//!   of its records ([`decide`]). It keeps the epoch of its **epoch file** for the
//!   partition only when the group's committed offset is one this owner itself committed
//!   last (or was about to): nobody else committed the partition since. Otherwise (a
//!   partition coming from another member, no epoch file, a damaged slot) it mints a new
//!   one ([`mint_epoch`]: greater than any it has seen for the partition and than the
//!   clock in microseconds, so it is unique in practice and increases along the
//!   partition's history) and writes it to the file before publishing.
//! * Before each commit the source writes `(epoch, previous offset, new offset)` into
//!   the partition's slot: a crash between the write and the broker's commit leaves
//!   the broker at the previous offset, which still matches.
//!
//! The epoch file belongs to the owner's state (for a server, a file in its state
//! directory; `KafkaSourceConfig::epoch_file`): two live members must never share one.
//! It is created whole by the durable layer's atomic replace (its 16-byte header), then
//! written in place, one 40-byte checksummed slot per partition, without fsync: a
//! `kill -9` keeps it (the page cache survives the process); after a power loss a torn
//! or stale slot fails the check and the partition gets a new epoch, so the state's
//! guard re-applies instead of skipping (duplicates, never a gap). Without an epoch file
//! every assignment gets a new epoch (at-least-once for a processor that stores
//! positions; nothing changes for one that does not).
//!
//! The input topic's id is recorded beside the file (`<epoch_file>.topic`, a one-record
//! log of the durable layer: [`EpochFile::recorded_topic`]): a topic deleted and made
//! again under its name while the owner was stopped has offsets from 0 again, and a slot
//! of the old topic would keep its epoch for them (chaos kafka seed 1796658157071: the
//! new topic's records were taken for repeats of the old one's, 764 of 6,872 lines
//! never written). A start whose topic has another id clears the slots first
//! ([`EpochFile::clear`]).
//!
//! The broker keeps no epoch: the group's offset-commit metadata would be the natural
//! place, but the first test broker (tansu 0.6) accepted metadata and returned it empty,
//! so the source writes `mongoose:1:<epoch hex>` there only as a hint for people reading
//! the group's offsets (Apache Kafka, the test broker now, returns it).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use mongoose_core::Epoch;
use mongoose_durable::disk::{Disk, RealDisk};
use tracing::warn;

/// The prefix and version of the metadata this connector writes with its commits.
pub const TAG_PREFIX: &str = "mongoose:1:";

/// The metadata written with a commit in `epoch`.
pub fn tag(epoch: Epoch) -> String {
    format!("{TAG_PREFIX}{:x}", epoch.0)
}

/// The epoch file's first 8 bytes.
pub const MAGIC: [u8; 8] = *b"MGKEPOCH";
/// Its layout version (bytes 8..12, big-endian).
pub const VERSION: u32 = 1;
/// The header's size: magic, version, 4 reserved bytes.
pub const HEADER_SIZE: u64 = 16;
/// One slot: partition (4), flags (4), epoch (8), previous offset (8), offset (8),
/// crc32 of the first 32 bytes (4), 4 reserved; all big-endian.
pub const SLOT_SIZE: u64 = 40;

/// What the owner wrote for one partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EpochSlot {
    /// The partition's epoch.
    pub epoch: Epoch,
    /// The committed offset before the last commit this owner made (-1: none).
    pub previous: i64,
    /// The offset of that commit (-1: none).
    pub offset: i64,
}

impl EpochSlot {
    fn encode(self, partition: i32) -> [u8; SLOT_SIZE as usize] {
        let mut bytes = [0u8; SLOT_SIZE as usize];
        bytes[0..4].copy_from_slice(&partition.to_be_bytes());
        bytes[4..8].copy_from_slice(&1u32.to_be_bytes()); // flags: in use
        bytes[8..16].copy_from_slice(&self.epoch.0.to_be_bytes());
        bytes[16..24].copy_from_slice(&self.previous.to_be_bytes());
        bytes[24..32].copy_from_slice(&self.offset.to_be_bytes());
        let crc = crc32fast::hash(&bytes[0..32]);
        bytes[32..36].copy_from_slice(&crc.to_be_bytes());
        bytes
    }

    fn decode(partition: i32, bytes: &[u8; SLOT_SIZE as usize]) -> Option<EpochSlot> {
        let crc = u32::from_be_bytes(bytes[32..36].try_into().ok()?);
        if crc32fast::hash(&bytes[0..32]) != crc {
            return None; // never written, torn, or damaged
        }
        if i32::from_be_bytes(bytes[0..4].try_into().ok()?) != partition
            || u32::from_be_bytes(bytes[4..8].try_into().ok()?) != 1
        {
            return None;
        }
        Some(EpochSlot {
            epoch: Epoch(u64::from_be_bytes(bytes[8..16].try_into().ok()?)),
            previous: i64::from_be_bytes(bytes[16..24].try_into().ok()?),
            offset: i64::from_be_bytes(bytes[24..32].try_into().ok()?),
        })
    }

    /// True when the group's committed offset (`None`: nothing committed) is one this
    /// owner committed last or was about to commit: nobody else committed since.
    pub fn matches(&self, committed: Option<i64>) -> bool {
        let committed = committed.unwrap_or(-1);
        committed == self.offset || committed == self.previous
    }
}

/// The owner's epoch file: one slot per partition.
#[derive(Debug)]
pub struct EpochFile {
    path: PathBuf,
    file: File,
}

impl EpochFile {
    /// Opens (creating) the file at `path`. A new file is created holding its header by
    /// the durable layer's atomic replace ([`EpochFile::create_on`]), so it exists whole
    /// or not at all. An empty file, or one whose header is all zeros (a creation by an
    /// earlier release, which wrote the header unsynced, cut by a power loss), is made
    /// again the same way: its partitions get new epochs. A file with another magic or
    /// version is refused (it is not this connector's, or is from a newer release).
    pub fn open(path: &Path) -> std::io::Result<EpochFile> {
        mongoose_durable::replace::remove_leftover(path)?;
        let file = match OpenOptions::new().read(true).write(true).open(path) {
            Ok(file) => file,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                EpochFile::create_on(&mut RealDisk, path)?;
                OpenOptions::new().read(true).write(true).open(path)?
            }
            Err(error) => return Err(error),
        };
        let length = file.metadata()?.len();
        let mut header = [0u8; HEADER_SIZE as usize];
        let read = length.min(HEADER_SIZE) as usize;
        file.read_exact_at(&mut header[..read], 0)?;
        if header[..read].iter().all(|byte| *byte == 0) {
            warn!(file = %path.display(), bytes = length,
                "the Kafka epoch file has no header (a creation a power loss cut short): it is made again, and its partitions get new epochs");
            EpochFile::create_on(&mut RealDisk, path)?;
            let file = OpenOptions::new().read(true).write(true).open(path)?;
            return Ok(EpochFile {
                path: path.to_owned(),
                file,
            });
        }
        if read < HEADER_SIZE as usize {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("{}: a short header ({length} bytes): delete the file (its partitions get new epochs)", path.display()),
            ));
        }
        if header[0..8] != MAGIC || header[8..12] != VERSION.to_be_bytes() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "{} is not a version-{VERSION} Kafka epoch file: point epoch_file elsewhere, or delete it (its partitions get new epochs)",
                    path.display()
                ),
            ));
        }
        Ok(EpochFile {
            path: path.to_owned(),
            file,
        })
    }

    /// Creates (or replaces) the file at `path` holding only its header, on `disk`, by
    /// the atomic replace (synced, renamed, the folder synced).
    ///
    /// # Errors
    /// The operating system's.
    pub fn create_on<D: Disk>(disk: &mut D, path: &Path) -> std::io::Result<()> {
        let mut header = [0u8; HEADER_SIZE as usize];
        header[0..8].copy_from_slice(&MAGIC);
        header[8..12].copy_from_slice(&VERSION.to_be_bytes());
        mongoose_durable::replace::replace_on(disk, path, &header).map_err(Into::into)
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn slot_at(partition: i32) -> u64 {
        HEADER_SIZE + SLOT_SIZE * u64::from(partition.max(0) as u32)
    }

    /// The file beside it that records the input topic's id.
    fn topic_path(&self) -> PathBuf {
        let mut name = self.path.as_os_str().to_owned();
        name.push(".topic");
        PathBuf::from(name)
    }

    /// The input topic's id the slots were written for: `None` when none is recorded (a
    /// new file, or one of an earlier release).
    ///
    /// # Errors
    /// The record cannot be read, or is damaged (the message says what to do).
    pub fn recorded_topic(&self) -> std::io::Result<Option<crate::topic_id::TopicId>> {
        let path = self.topic_path();
        if !path.exists() {
            return Ok(None);
        }
        let damaged = |reason: String| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "{}: {reason}: delete it and {} (every partition gets a new epoch)",
                    path.display(),
                    self.path.display()
                ),
            )
        };
        let recovery = mongoose_durable::log::read(&path, &topic_header())
            .map_err(|error| damaged(error.to_string()))?;
        match recovery.records.as_slice() {
            [id] if recovery.torn_tail.is_none() => crate::topic_id::TopicId::from_bytes(id)
                .map(Some)
                .ok_or_else(|| damaged("not a topic id".to_owned())),
            _ => Err(damaged("not one whole record".to_owned())),
        }
    }

    /// Records `id` as the input topic's (atomically, synced).
    ///
    /// # Errors
    /// The record cannot be written.
    pub fn record_topic(&self, id: crate::topic_id::TopicId) -> std::io::Result<()> {
        let bytes = mongoose_durable::log::encode(&topic_header(), [&id.to_bytes()[..]])
            .map_err(std::io::Error::other)?;
        mongoose_durable::replace::replace(&self.topic_path(), &bytes).map_err(Into::into)
    }

    /// Forgets every slot (synced): each partition gets a new epoch.
    ///
    /// # Errors
    /// The file cannot be cut or synced.
    pub fn clear(&self) -> std::io::Result<()> {
        self.file.set_len(HEADER_SIZE)?;
        self.file.sync_all()
    }

    /// The partition's slot, `None` when never written or damaged.
    pub fn read(&self, partition: i32) -> Option<EpochSlot> {
        let mut bytes = [0u8; SLOT_SIZE as usize];
        self.file
            .read_exact_at(&mut bytes, Self::slot_at(partition))
            .ok()?;
        EpochSlot::decode(partition, &bytes)
    }

    /// Writes the partition's slot in place (no fsync: see the module documentation).
    pub fn write(&self, partition: i32, slot: EpochSlot) -> std::io::Result<()> {
        self.file
            .write_all_at(&slot.encode(partition), Self::slot_at(partition))
    }
}

/// The header of the topic id's record beside the epoch file.
fn topic_header() -> mongoose_durable::header::Header {
    mongoose_durable::header::Header::new("mongoose-kafka-epoch-topic", 1, Vec::new())
}

/// What the source decides for a partition it was assigned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EpochDecision {
    /// Nobody else committed the partition since this owner did: keep its epoch.
    Keep(Epoch),
    /// The partition comes from another owner or from nobody: a new epoch, written to
    /// the epoch file before any record is published.
    Mint(Epoch),
}

impl EpochDecision {
    /// The epoch decided on.
    pub fn epoch(self) -> Epoch {
        match self {
            EpochDecision::Keep(epoch) | EpochDecision::Mint(epoch) => epoch,
        }
    }
}

/// A new epoch after `previous`: greater than it and than the clock in microseconds.
pub fn mint_epoch(previous: Option<Epoch>) -> Epoch {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(1, |since| since.as_micros() as u64);
    let after = previous.map_or(1, |epoch| epoch.0.saturating_add(1));
    Epoch(now.max(after).max(1))
}

/// Decides the epoch of a partition assigned to this owner, from its epoch-file slot
/// (`None`: no file, never written, damaged) and the group's committed offset (`None`:
/// nothing committed); `seen` is the greatest epoch seen for it otherwise (in this run).
pub fn decide(
    slot: Option<EpochSlot>,
    committed: Option<i64>,
    seen: Option<Epoch>,
) -> EpochDecision {
    match slot {
        Some(slot) if slot.epoch.0 != 0 && slot.matches(committed) => {
            EpochDecision::Keep(slot.epoch)
        }
        _ => {
            let previous = match (slot.map(|slot| slot.epoch), seen) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
            EpochDecision::Mint(mint_epoch(previous))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_epoch_file_layout_is_fixed() {
        let slot = EpochSlot {
            epoch: Epoch(0x0102_0304_0506_0708),
            previous: 5,
            offset: 9,
        };
        let bytes = slot.encode(3);
        assert_eq!(bytes.len() as u64, SLOT_SIZE);
        assert_eq!(&bytes[0..4], &[0, 0, 0, 3]);
        assert_eq!(&bytes[8..16], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(&bytes[24..32], &9i64.to_be_bytes());
        assert_eq!(EpochSlot::decode(3, &bytes), Some(slot));
        assert_eq!(
            EpochSlot::decode(4, &bytes),
            None,
            "another partition's slot"
        );
        let mut torn = bytes;
        torn[20] ^= 1;
        assert_eq!(
            EpochSlot::decode(3, &torn),
            None,
            "a damaged slot fails its check"
        );
        assert_eq!(EpochFile::slot_at(0), HEADER_SIZE);
        assert_eq!(EpochFile::slot_at(2), HEADER_SIZE + 2 * SLOT_SIZE);
    }

    #[test]
    fn a_slot_is_kept_only_while_the_committed_offset_is_the_owners() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("epochs");
        let file = EpochFile::open(&path).expect("open");
        assert_eq!(file.read(1), None);
        let slot = EpochSlot {
            epoch: Epoch(77),
            previous: 100,
            offset: 150,
        };
        file.write(1, slot).expect("write");
        drop(file);
        let file = EpochFile::open(&path).expect("reopen");
        assert_eq!(file.read(1), Some(slot));
        assert_eq!(file.read(0), None);
        // the broker at the owner's last commit, or at the one before (a crash between
        // the slot's write and the commit): the same epoch
        assert_eq!(
            decide(file.read(1), Some(150), None),
            EpochDecision::Keep(Epoch(77))
        );
        assert_eq!(
            decide(file.read(1), Some(100), None),
            EpochDecision::Keep(Epoch(77))
        );
        // someone else committed since: a new, greater epoch
        let other = decide(file.read(1), Some(180), None);
        assert!(matches!(other, EpochDecision::Mint(epoch) if epoch > Epoch(77)));
        // nothing in the file: a new epoch, greater than what this run saw
        let far = Epoch(u64::MAX - 1);
        assert_eq!(
            decide(None, Some(3), Some(far)),
            EpochDecision::Mint(Epoch(u64::MAX))
        );
        // a file of something else is refused
        std::fs::write(dir.path().join("other"), b"not an epoch file").expect("write");
        assert!(EpochFile::open(&dir.path().join("other")).is_err());
    }

    #[test]
    fn nothing_committed_matches_a_slot_written_before_any_commit() {
        let slot = EpochSlot {
            epoch: Epoch(5),
            previous: -1,
            offset: -1,
        };
        assert!(slot.matches(None));
        assert!(!slot.matches(Some(0)));
        assert_eq!(tag(Epoch(0xab)), "mongoose:1:ab");
    }

    // storage.md gap 10: a file of an earlier release created just before a power loss
    // came back with a zero header, and the start was refused ("is not a version-1
    // Kafka epoch file").
    #[test]
    fn an_epoch_file_with_a_zero_header_is_taken_as_new() {
        let dir = tempfile::tempdir().expect("dir");
        for length in [HEADER_SIZE, HEADER_SIZE + 2 * SLOT_SIZE, 5] {
            let path = dir.path().join(format!("epochs-{length}"));
            std::fs::write(&path, vec![0u8; length as usize]).expect("zeros");
            let file = EpochFile::open(&path).expect("a zero header is a cut creation");
            assert_eq!(file.read(0), None);
            let slot = EpochSlot {
                epoch: Epoch(9),
                previous: -1,
                offset: 4,
            };
            file.write(1, slot).expect("write");
            drop(file);
            assert_eq!(EpochFile::open(&path).expect("reopen").read(1), Some(slot));
        }
        // a short header that is not zeros is still refused
        let short = dir.path().join("short");
        std::fs::write(&short, b"MGKE").expect("short");
        let error = EpochFile::open(&short).expect_err("short");
        assert!(error.to_string().contains("a short header"), "{error}");
    }

    #[test]
    fn a_new_epoch_file_is_whole_at_every_crash_point_of_its_creation() {
        use mongoose_durable::crash::{crash_states, RecordingDisk};
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("epochs");
        let mut disk = RecordingDisk::default();
        EpochFile::create_on(&mut disk, &path).expect("recorded");
        let operations = disk.operations();
        for state in crash_states(&std::collections::BTreeMap::new(), &operations) {
            state.materialise(dir.path()).expect("materialise");
            if let Some(bytes) = state.files.get(&path) {
                assert!(
                    bytes.len() == HEADER_SIZE as usize && bytes[0..8] == MAGIC,
                    "the epoch file after {} of {} operations ({}): {bytes:?}",
                    state.after,
                    operations.len(),
                    state.how
                );
            }
            let file = EpochFile::open(&path).expect("opens after every crash");
            assert_eq!(file.read(0), None);
        }
    }
}
