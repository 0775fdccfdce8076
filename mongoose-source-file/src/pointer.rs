//! The pointer file: a 1,024-byte memory-mapped record beside the input file.
//!
//! Layout (big-endian, like the Java original, so a pointer it wrote can be adopted;
//! book: guarantees/epochs-and-identity.md):
//!
//! | at | field |
//! |---:|---|
//! | 0  | offset: bytes of the input processed and committed |
//! | 8  | epoch: the position space (0: none yet, a pointer of an older layout) |
//! | 16 | file-key hash: device and inode of the input file (0: unknown) |
//! | 24 | layout version ([`LAYOUT_VERSION`]) |
//! | 32 | fingerprint length: bytes of the input the fingerprint covers (<= 4,096) |
//! | 40 | fingerprint: FNV-1a 64 of those bytes |
//! | 48 | owner: FNV-1a 64 of the input's absolute path, the input the pointer was written for (0: unknown, a pointer written before the field) |
//! | 56 | lane: a glob's file's lane (4 bytes) and its bitwise complement (4 bytes); all 0: none (a single file's pointer, or one written before the field) |
//!
//! | 64 | check: CRC-32 of bytes 0..64 (4 bytes) and its bitwise complement (4 bytes); all 0: none (a pointer of an older release, or the Java original's) |
//! | 512 | mirror: a copy of bytes 0..72, written before them |
//!
//! The rest of the 1,024 bytes is zero. The check tells a pointer whose bytes changed
//! (a damaged disk block, a stray write) from a whole one: a changed offset was trusted
//! before it (chaos mixed-consumers seed 1796642187125: a consumer that keeps no
//! position never got the lines between). The mirror is written whole before the
//! first copy, so a write torn by a crash leaves one whole copy, the new or the old
//! record: a pointer whose first copy fails its check is read from its mirror, and one
//! whose two copies fail is damaged (the feed resumes where the consumers need it:
//! book, guarantees/where-a-feed-resumes.md). The lane lets a glob rebuild its lane
//! registry when it is lost or damaged (the complement tells a lane whose bytes were
//! changed: read as none, never as another lane). The owner tells this input's pointer from
//! another input's put in its place (a backup restored to the wrong folder, another
//! server's copy): a pointer whose owner is another path and whose file key is not the
//! file's at the path is not taken for this input's replaced or copied file when its
//! leading bytes differ, or its epoch is none the consumers hold (book:
//! guarantees/epochs-and-identity.md).

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use memmap2::MmapMut;
use mongoose_durable::disk::{Disk, RealDisk};

/// The size of a pointer file.
pub const POINTER_FILE_SIZE: usize = 1024;
/// Where the offset is.
pub const OFFSET_AT: usize = 0;
/// Where the epoch is.
pub const EPOCH_AT: usize = 8;
/// Where the file-key hash is.
pub const FILE_KEY_AT: usize = 16;
/// Where the layout version is.
pub const LAYOUT_VERSION_AT: usize = 24;
/// Where the fingerprint length is.
pub const FINGERPRINT_LENGTH_AT: usize = 32;
/// Where the fingerprint is.
pub const FINGERPRINT_AT: usize = 40;
/// Where the owner (a hash of the input's path) is.
pub const OWNER_AT: usize = 48;
/// Where the lane (a glob's file's) and its complement are.
pub const LANE_AT: usize = 56;
/// Where the check of bytes `0..CHECK_AT` (CRC-32 and its complement) is.
pub const CHECK_AT: usize = 64;
/// Where the mirror of bytes `0..RECORD_BYTES` is.
pub const MIRROR_AT: usize = 512;
/// The bytes a copy of the record takes: its fields and their check.
pub const RECORD_BYTES: usize = CHECK_AT + 8;
/// The layout this crate writes.
pub const LAYOUT_VERSION: u64 = 2;
/// The most bytes a fingerprint covers.
pub const MAX_FINGERPRINT_BYTES: u64 = 4096;

// the fields fit the file (checked at compile time)
const _: () = assert!(LANE_AT + 8 <= POINTER_FILE_SIZE);
const _: () = assert!(OWNER_AT + 8 == LANE_AT);
const _: () = assert!(OFFSET_AT + 8 == EPOCH_AT && EPOCH_AT + 8 == FILE_KEY_AT);
const _: () = assert!(FILE_KEY_AT + 8 == LAYOUT_VERSION_AT);
const _: () = assert!(LAYOUT_VERSION_AT + 8 == FINGERPRINT_LENGTH_AT);
const _: () = assert!(FINGERPRINT_LENGTH_AT + 8 == FINGERPRINT_AT);
const _: () = assert!(FINGERPRINT_AT + 8 == OWNER_AT);
const _: () = assert!(LANE_AT + 8 == CHECK_AT && RECORD_BYTES <= MIRROR_AT);
const _: () = assert!(MIRROR_AT + RECORD_BYTES <= POINTER_FILE_SIZE);

/// The fields of a pointer file.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct PointerRecord {
    /// Bytes of the input processed and committed.
    pub offset: u64,
    /// The position space; 0 when the pointer has none yet.
    pub epoch: u64,
    /// Hash of the input file's key; 0 when unknown.
    pub file_key: u64,
    /// The layout version that wrote it (0 for layouts before versions).
    pub layout_version: u64,
    /// Bytes of the input the fingerprint covers.
    pub fingerprint_length: u64,
    /// FNV-1a 64 of the first `fingerprint_length` bytes.
    pub fingerprint: u64,
    /// [`owner_of`] the input the pointer was written for; 0 when unknown (written
    /// before the field).
    pub owner: u64,
    /// The lane of a glob's file (what its glob's lane registry is rebuilt from); 0
    /// when none: a single file's pointer, one written before the field, or one whose
    /// lane bytes do not hold a lane and its complement.
    pub lane: u32,
}

/// What was wrong with a pointer file's bytes, if anything.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PointerDamage {
    /// The file is empty: read from the start.
    Empty,
    /// Shorter than 8 bytes: no offset, read from the start.
    TooShortForAnOffset(usize),
    /// Shorter than [`POINTER_FILE_SIZE`]: the fields present are kept, it is extended.
    Short(usize),
    /// The fingerprint length is larger than a fingerprint can be: ignored.
    BadFingerprintLength(u64),
    /// The offset is negative as a Java long: read from the start.
    NegativeOffset(u64),
    /// The bytes fail their check, and so does the mirror (or there is none): the
    /// record cannot be trusted (the feed resumes where its consumers need it).
    Checksum,
}

/// A decoded pointer file: its record and what was wrong with it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct DecodedPointer {
    /// The record (missing fields are 0).
    pub record: PointerRecord,
    /// Damage found and repaired in `record`, if any (the first one found).
    pub damage: Option<PointerDamage>,
    /// The first copy failed its check and the record was read from the mirror (a write
    /// torn by a crash, or a changed byte): whole, and to be written back.
    pub mirrored: bool,
}

/// How a copy of the record stands against its check.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Checked {
    /// No check (all 0): a pointer of an older release or of the Java original.
    Unchecked,
    /// The check holds.
    Whole,
    /// The check fails.
    Changed,
}

/// The check field of a record's bytes (`fields`: bytes `0..CHECK_AT`): the CRC-32 in
/// the high 4 bytes, its complement in the low 4 (never 0).
fn check_field(fields: &[u8]) -> u64 {
    let crc = crc32fast::hash(fields);
    (u64::from(crc) << 32) | u64::from(!crc)
}

/// Checks a copy of the record (`copy`: `RECORD_BYTES` bytes, or fewer when short).
fn checked(copy: &[u8]) -> Checked {
    if copy.len() < RECORD_BYTES {
        return Checked::Unchecked;
    }
    match read_field(copy, CHECK_AT) {
        0 => Checked::Unchecked,
        field if field == check_field(&copy[..CHECK_AT]) => Checked::Whole,
        _ => Checked::Changed,
    }
}

fn read_field(bytes: &[u8], at: usize) -> u64 {
    match bytes.get(at..at + 8) {
        Some(field) => {
            let mut raw = [0u8; 8];
            raw.copy_from_slice(field);
            u64::from_be_bytes(raw)
        }
        None => 0,
    }
}

impl PointerRecord {
    /// Decodes a pointer file of any length, repairing what cannot be used: never
    /// panics (fuzzed).
    pub fn decode(bytes: &[u8]) -> DecodedPointer {
        let mut damage = match bytes.len() {
            0 => Some(PointerDamage::Empty),
            short if short < 8 => Some(PointerDamage::TooShortForAnOffset(short)),
            short if short < POINTER_FILE_SIZE => Some(PointerDamage::Short(short)),
            _ => None,
        };
        if bytes.len() < 8 {
            return DecodedPointer {
                record: PointerRecord::default(),
                damage,
                mirrored: false,
            };
        }
        let mirror = bytes.get(MIRROR_AT..MIRROR_AT + RECORD_BYTES);
        let mirror_whole = mirror.is_some_and(|copy| checked(copy) == Checked::Whole);
        let mut mirrored = false;
        let bytes = match checked(&bytes[..bytes.len().min(RECORD_BYTES)]) {
            Checked::Whole => bytes,
            // a first copy that fails its check, or whose check was wiped while its
            // mirror holds one: the mirror, written whole before it, when it is whole
            Checked::Changed | Checked::Unchecked if mirror_whole => {
                let copy = mirror.unwrap_or_default();
                if copy != &bytes[..bytes.len().min(RECORD_BYTES)] {
                    mirrored = true;
                }
                copy
            }
            Checked::Changed => {
                return DecodedPointer {
                    record: PointerRecord::default(),
                    damage: damage.or(Some(PointerDamage::Checksum)),
                    mirrored: false,
                };
            }
            Checked::Unchecked => bytes,
        };
        let mut record = PointerRecord {
            offset: read_field(bytes, OFFSET_AT),
            epoch: read_field(bytes, EPOCH_AT),
            file_key: read_field(bytes, FILE_KEY_AT),
            layout_version: read_field(bytes, LAYOUT_VERSION_AT),
            fingerprint_length: read_field(bytes, FINGERPRINT_LENGTH_AT),
            fingerprint: read_field(bytes, FINGERPRINT_AT),
            owner: read_field(bytes, OWNER_AT),
            lane: lane_of_field(read_field(bytes, LANE_AT)),
        };
        if record.offset > i64::MAX as u64 {
            damage = damage.or(Some(PointerDamage::NegativeOffset(record.offset)));
            record.offset = 0;
        }
        if record.fingerprint_length > MAX_FINGERPRINT_BYTES {
            damage = damage.or(Some(PointerDamage::BadFingerprintLength(
                record.fingerprint_length,
            )));
            record.fingerprint_length = 0;
            record.fingerprint = 0;
        }
        DecodedPointer {
            record,
            damage,
            mirrored,
        }
    }

    /// Encodes the record into a pointer file's bytes (`bytes` at least
    /// [`POINTER_FILE_SIZE`] long): its fields and their check, into the mirror first,
    /// then into the first copy (a write torn by a crash leaves one of them whole).
    pub fn encode_into(&self, bytes: &mut [u8]) {
        let mut copy = [0u8; RECORD_BYTES];
        self.encode_fields(&mut copy);
        let check = check_field(&copy[..CHECK_AT]);
        copy[CHECK_AT..].copy_from_slice(&check.to_be_bytes());
        bytes[MIRROR_AT..MIRROR_AT + RECORD_BYTES].copy_from_slice(&copy);
        bytes[..RECORD_BYTES].copy_from_slice(&copy);
    }

    /// The fields, without their check, into `bytes[..CHECK_AT]`.
    fn encode_fields(&self, bytes: &mut [u8]) {
        bytes[OFFSET_AT..OFFSET_AT + 8].copy_from_slice(&self.offset.to_be_bytes());
        bytes[EPOCH_AT..EPOCH_AT + 8].copy_from_slice(&self.epoch.to_be_bytes());
        bytes[FILE_KEY_AT..FILE_KEY_AT + 8].copy_from_slice(&self.file_key.to_be_bytes());
        bytes[LAYOUT_VERSION_AT..LAYOUT_VERSION_AT + 8]
            .copy_from_slice(&self.layout_version.to_be_bytes());
        bytes[FINGERPRINT_LENGTH_AT..FINGERPRINT_LENGTH_AT + 8]
            .copy_from_slice(&self.fingerprint_length.to_be_bytes());
        bytes[FINGERPRINT_AT..FINGERPRINT_AT + 8].copy_from_slice(&self.fingerprint.to_be_bytes());
        bytes[OWNER_AT..OWNER_AT + 8].copy_from_slice(&self.owner.to_be_bytes());
        bytes[LANE_AT..LANE_AT + 8].copy_from_slice(&lane_field(self.lane).to_be_bytes());
    }
}

/// The lane field of `lane`: the lane in the high 4 bytes, its complement in the low
/// 4; 0 for no lane.
fn lane_field(lane: u32) -> u64 {
    if lane == 0 {
        0
    } else {
        (u64::from(lane) << 32) | u64::from(!lane)
    }
}

/// The lane a lane field holds: 0 for none, or for bytes that are not a lane and its
/// complement (a changed byte is never read as another lane).
fn lane_of_field(field: u64) -> u32 {
    let (lane, check) = ((field >> 32) as u32, field as u32);
    if lane != 0 && check == !lane {
        lane
    } else {
        0
    }
}

/// FNV-1a 64 offset basis.
const FNV_OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
/// FNV-1a 64 prime.
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a 64 of `bytes`.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    fnv1a_continue(FNV_OFFSET_BASIS, bytes)
}

/// Continues an FNV-1a 64 hash.
pub(crate) fn fnv1a_continue(mut hash: u64, bytes: &[u8]) -> u64 {
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(FNV_PRIME);
    }
    hash
}

/// The owner of a pointer written for `input`: FNV-1a 64 of its absolute path's bytes
/// (a relative path is taken from the working folder: two servers with the same
/// relative paths in two folders read two inputs), never 0.
pub fn owner_of(input: &Path) -> u64 {
    let absolute = std::path::absolute(input).unwrap_or_else(|_| input.to_path_buf());
    fnv1a(absolute.as_os_str().as_encoded_bytes()).max(1)
}

/// The pointer file's name beside `input`: `<input file name>.readPointer`.
pub fn pointer_path_for(input: &Path) -> PathBuf {
    let mut name = input
        .file_name()
        .map(|name| name.to_os_string())
        .unwrap_or_default();
    name.push(".readPointer");
    input.with_file_name(name)
}

/// The pointer file of `input`: `<input file name>.readPointer` in `state_dir`, or
/// beside the input without one ([`pointer_path_for`]).
pub fn pointer_path_in(state_dir: Option<&Path>, input: &Path) -> PathBuf {
    let beside = pointer_path_for(input);
    match (state_dir, beside.file_name()) {
        (Some(dir), Some(name)) => dir.join(name),
        _ => beside,
    }
}

/// An open, memory-mapped pointer file.
#[derive(Debug)]
pub(crate) struct PointerFile {
    map: MmapMut,
    // kept open for as long as it is mapped
    _file: File,
}

/// A mapped pointer file and what opening it found.
#[derive(Debug)]
pub(crate) struct OpenedPointer {
    pub(crate) file: PointerFile,
    pub(crate) decoded: DecodedPointer,
    pub(crate) created: bool,
}

/// Renames the pointer file `from` to `to` (a file renamed inside a glob takes its
/// pointer along) and syncs the folder, so that a power loss after it returns does not
/// put the pointer back under its old name (the file's pointer missing: repeats);
/// `false` when there was none to move. At a rename only, off the commit path.
///
/// # Errors
/// The operating system's.
pub(crate) fn rename_pointer(from: &Path, to: &Path) -> io::Result<bool> {
    rename_pointer_on(&mut RealDisk, from, to)
}

/// As [`rename_pointer`], on `disk` (a recording one in the crash-point test).
///
/// # Errors
/// The operating system's.
pub(crate) fn rename_pointer_on<D: Disk>(disk: &mut D, from: &Path, to: &Path) -> io::Result<bool> {
    match disk.rename(from, to) {
        Ok(()) => {}
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(error) => return Err(error),
    }
    disk.sync_folder(folder_of(to))?;
    if folder_of(from) != folder_of(to) {
        disk.sync_folder(folder_of(from))?;
    }
    Ok(true)
}

/// The folder `path` is in (`.` for a bare name).
fn folder_of(path: &Path) -> &Path {
    match path.parent() {
        Some(folder) if !folder.as_os_str().is_empty() => folder,
        _ => Path::new("."),
    }
}

impl PointerFile {
    /// Opens (creating it if missing) and maps the pointer file at `path`, extending a
    /// short one to [`POINTER_FILE_SIZE`] and keeping what it holds.
    ///
    /// The record's bytes are written back with an ordinary write before the file is
    /// mapped, so the file system allocates them now: on a full file system the open
    /// fails with an error, where a write through the mapping into a page the file
    /// system had not allocated (a file extended with `set_len`) would kill the
    /// process with SIGBUS.
    #[allow(unsafe_code)] // the one mapping of the crate
    pub(crate) fn open(path: &Path) -> io::Result<OpenedPointer> {
        let created = !path.exists();
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        let length = file.metadata()?.len();
        // the bytes present (up to the record's size), then zeros: written in place
        let mut bytes = Vec::with_capacity(POINTER_FILE_SIZE);
        (&file)
            .take(POINTER_FILE_SIZE as u64)
            .read_to_end(&mut bytes)?;
        bytes.resize(POINTER_FILE_SIZE, 0);
        file.seek(SeekFrom::Start(0))?;
        file.write_all(&bytes)?;
        if created {
            // the new name durable once (the record itself is checked and mirrored)
            mongoose_durable::disk::sync_folder(folder_of(path))?;
        }
        // SAFETY: the pointer file belongs to this source (one source per input file by
        // configuration) and is at least POINTER_FILE_SIZE bytes long (written above).
        // The mapping is only read and written through copies of whole fields while the
        // caller holds the commit lock; another process truncating the file under us
        // is outside the contract (it would be a SIGBUS, as for any mmap user).
        let map = unsafe { MmapMut::map_mut(&file)? };
        let usable = (length as usize).min(map.len());
        let decoded = PointerRecord::decode(&map[..usable]);
        Ok(OpenedPointer {
            file: PointerFile { map, _file: file },
            decoded,
            created,
        })
    }

    /// The record as mapped now.
    pub(crate) fn read(&self) -> PointerRecord {
        PointerRecord::decode(&self.map[..POINTER_FILE_SIZE]).record
    }

    /// Writes the whole record and schedules the page's write-back. The page is in
    /// the page cache once written, so it survives a SIGKILL of this process.
    pub(crate) fn write(&mut self, record: &PointerRecord) -> io::Result<()> {
        record.encode_into(&mut self.map[..POINTER_FILE_SIZE]);
        self.map.flush_async_range(0, POINTER_FILE_SIZE)
    }

    /// Writes the whole record and waits until it is written back to the file system
    /// (`msync` with `MS_SYNC`): the write of a commit made after the source stopped.
    pub(crate) fn write_durable(&mut self, record: &PointerRecord) -> io::Result<()> {
        record.encode_into(&mut self.map[..POINTER_FILE_SIZE]);
        self.flush_durable()
    }

    /// Waits until what the mapping holds is written back to the file system (`msync`
    /// with `MS_SYNC`, which on Linux also syncs the file's range like
    /// `fdatasync`): at a clean stop, so that a power loss right after a clean exit
    /// cannot take the final commit back (issue 9, item 10). During the run the
    /// asynchronous flush of [`PointerFile::write`] is enough for a process crash.
    pub(crate) fn flush_durable(&self) -> io::Result<()> {
        self.map.flush_range(0, POINTER_FILE_SIZE)
    }
}

#[cfg(test)]
mod rename_tests {
    use std::collections::BTreeMap;

    use mongoose_durable::crash::{crash_states, RecordingDisk};

    use super::*;

    // storage.md gap 3: a pointer renamed with its file inside a glob must be under its
    // new name after a power loss once the rename returned, or the file's pointer is
    // missing and the feed resumes by the rule (repeats).
    #[test]
    fn a_renamed_pointer_keeps_its_new_name_after_a_power_loss() {
        let folder = tempfile::tempdir().expect("folder");
        let from = folder.path().join("a.log.readPointer");
        let to = folder.path().join("b.log.readPointer");
        let before = BTreeMap::from([(from.clone(), vec![7u8; POINTER_FILE_SIZE])]);
        let mut disk = RecordingDisk::default();
        assert!(rename_pointer_on(&mut disk, &from, &to).expect("rename"));
        let operations = disk.operations();
        for crash in crash_states(&before, &operations) {
            if crash.after < operations.len() {
                continue;
            }
            assert!(
                crash.files.contains_key(&to) && !crash.files.contains_key(&from),
                "after {} of {} operations ({}): {:?}",
                crash.after,
                operations.len(),
                crash.how,
                crash.files.keys().collect::<Vec<_>>()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_through_its_bytes_at_the_documented_offsets() {
        let record = PointerRecord {
            offset: 0x0102_0304_0506_0708,
            epoch: 9,
            file_key: 10,
            layout_version: LAYOUT_VERSION,
            fingerprint_length: 4096,
            fingerprint: 12,
            owner: 13,
            lane: 0x0102_0304,
        };
        let mut bytes = [0u8; POINTER_FILE_SIZE];
        record.encode_into(&mut bytes);
        assert_eq!(bytes[..8], [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(bytes[15], 9);
        assert_eq!(bytes[23], 10);
        assert_eq!(bytes[31], LAYOUT_VERSION as u8);
        assert_eq!(bytes[38..40], [0x10, 0x00]);
        assert_eq!(bytes[47], 12);
        assert_eq!(bytes[55], 13);
        assert_eq!(bytes[56..64], [1, 2, 3, 4, 0xfe, 0xfd, 0xfc, 0xfb]);
        let crc = crc32fast::hash(&bytes[..64]);
        assert_eq!(bytes[64..68], crc.to_be_bytes());
        assert_eq!(bytes[68..72], (!crc).to_be_bytes());
        assert_eq!(bytes[512..584], bytes[..72], "the mirror");
        assert!(bytes[72..512]
            .iter()
            .chain(&bytes[584..])
            .all(|byte| *byte == 0));
        let decoded = PointerRecord::decode(&bytes);
        assert_eq!(decoded.record, record);
        assert_eq!(decoded.damage, None);
    }

    #[test]
    fn a_lane_is_read_only_beside_its_complement() {
        let mut bytes = [0u8; POINTER_FILE_SIZE];
        assert_eq!(PointerRecord::decode(&bytes).record.lane, 0, "none");
        let record = PointerRecord {
            lane: 7,
            ..PointerRecord::default()
        };
        // the fields without their check (a pointer of the release that added lanes):
        // a checked pointer's changed lane byte is read from its mirror instead
        record.encode_fields(&mut bytes);
        assert_eq!(PointerRecord::decode(&bytes).record.lane, 7);
        for at in LANE_AT..LANE_AT + 8 {
            let mut changed = bytes;
            changed[at] ^= 0x5a;
            let decoded = PointerRecord::decode(&changed);
            assert_eq!(decoded.record.lane, 0, "byte {at} changed: no lane");
            assert_eq!(decoded.damage, None, "the rest of the pointer is whole");
        }
    }

    #[test]
    fn short_and_damaged_pointers_are_repaired() {
        assert_eq!(
            PointerRecord::decode(&[]).damage,
            Some(PointerDamage::Empty)
        );
        let decoded = PointerRecord::decode(&[0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(decoded.record.offset, 0);
        assert_eq!(decoded.damage, Some(PointerDamage::TooShortForAnOffset(7)));
        let decoded = PointerRecord::decode(&[0, 0, 0, 0, 0, 0, 1, 0]);
        assert_eq!(decoded.record.offset, 256);
        assert_eq!(decoded.damage, Some(PointerDamage::Short(8)));
        let mut bytes = [0u8; POINTER_FILE_SIZE];
        bytes[0] = 0x80;
        bytes[FINGERPRINT_LENGTH_AT + 6] = 0x20;
        let decoded = PointerRecord::decode(&bytes);
        assert_eq!(decoded.record.offset, 0);
        assert_eq!(decoded.record.fingerprint_length, 0);
    }

    fn sample(offset: u64) -> PointerRecord {
        PointerRecord {
            offset,
            epoch: 0x379c_29db_bbad_8069,
            file_key: 0xc01f_3a8e_9788_c477,
            layout_version: LAYOUT_VERSION,
            fingerprint_length: 4096,
            fingerprint: 0xbf01_4776_2453_de05,
            owner: 0x9f47_f730_cecc_e8fd,
            lane: 1,
        }
    }

    #[test]
    fn a_changed_byte_of_either_copy_is_read_from_the_other_and_never_trusted_as_it_is() {
        // chaos mixed-consumers seed 1796642187125: byte 1 of the offset changed after a
        // kill was trusted (an offset far past the file)
        let record = sample(32_236);
        let mut bytes = [0u8; POINTER_FILE_SIZE];
        record.encode_into(&mut bytes);
        for at in (0..RECORD_BYTES).chain(MIRROR_AT..MIRROR_AT + RECORD_BYTES) {
            for flip in [0x01, 0x5a, 0xff] {
                let mut changed = bytes;
                changed[at] ^= flip;
                let decoded = PointerRecord::decode(&changed);
                assert_eq!(decoded.record, record, "byte {at} ^ {flip:#x}");
                assert_eq!(decoded.damage, None, "byte {at} ^ {flip:#x}");
                assert_eq!(decoded.mirrored, at < RECORD_BYTES, "byte {at} ^ {flip:#x}");
            }
        }
        // both copies changed: damaged, its record not used
        let mut changed = bytes;
        changed[1] ^= 0x5a;
        changed[MIRROR_AT + 1] ^= 0x5a;
        let decoded = PointerRecord::decode(&changed);
        assert_eq!(decoded.damage, Some(PointerDamage::Checksum));
        assert_eq!(decoded.record, PointerRecord::default());
    }

    #[test]
    fn a_write_torn_at_any_byte_reads_as_the_old_record_or_the_new_one() {
        let old = sample(32_236);
        let new = PointerRecord {
            fingerprint: 7,
            ..sample(48_000)
        };
        let mut before = [0u8; POINTER_FILE_SIZE];
        old.encode_into(&mut before);
        let mut after = [0u8; POINTER_FILE_SIZE];
        new.encode_into(&mut after);
        // the order encode_into writes in: the mirror, then the first copy
        let order: Vec<usize> = (MIRROR_AT..MIRROR_AT + RECORD_BYTES)
            .chain(0..RECORD_BYTES)
            .collect();
        for cut in 0..=order.len() {
            let mut torn = before;
            for &at in &order[..cut] {
                torn[at] = after[at];
            }
            let decoded = PointerRecord::decode(&torn);
            assert_eq!(decoded.damage, None, "cut after {cut} bytes");
            assert!(
                decoded.record == old || decoded.record == new,
                "cut after {cut} bytes: a third record {:?}",
                decoded.record
            );
        }
    }

    #[test]
    fn a_pointer_without_a_check_is_read_as_before() {
        // an older release's pointer (or the Java original's): no check, no mirror
        let record = sample(4_096);
        let mut bytes = [0u8; POINTER_FILE_SIZE];
        record.encode_fields(&mut bytes);
        let decoded = PointerRecord::decode(&bytes);
        assert_eq!(decoded.record, record);
        assert_eq!(decoded.damage, None);
        assert!(!decoded.mirrored);
    }

    #[test]
    fn fnv1a_matches_the_published_test_vectors() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn the_pointer_file_is_named_after_the_input() {
        assert_eq!(
            pointer_path_for(Path::new("/data/in.log")),
            PathBuf::from("/data/in.log.readPointer")
        );
    }
}
