//! Reading an outbox folder back: every whole record, what is unsettled, what was cut.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use mongoose_core::sink::OutputKey;

use crate::format::{
    self, check_segment_header, find_whole_record_after, is_torn_header, is_torn_watermark,
    parse_watermark, read_frame, Frame, Framing, KIND_ADMISSION, WATERMARK_FILE,
};
use crate::{Admission, AdmittedOutput, OutboxError, OutboxOwner, Outcome};

/// What [`Outbox::open`](crate::Outbox::open) found in the folder.
#[derive(Debug, Default)]
pub struct Recovery {
    /// Every whole admission since the oldest kept segment, in order, with its
    /// sequence (empty after [`Outbox::open_with`](crate::Outbox::open_with), which
    /// hands each one to its visitor instead of keeping it).
    pub admissions: Vec<(u64, Admission)>,
    /// Every outcome recorded since the oldest kept segment, in order, with the
    /// sequence of its record (empty after
    /// [`Outbox::open_with`](crate::Outbox::open_with)).
    pub outcomes: Vec<(u64, OutputKey, Outcome)>,
    /// The torn write cut off the end of the last segment, if there was one.
    pub torn: Option<TornTail>,
    /// The highest sequence on disk (0 when the outbox is empty); the next record gets
    /// the one after it.
    pub last_seq: u64,
    /// The sequence the oldest kept segment starts at (1 for an empty outbox): the
    /// records before it were compacted away.
    pub first_seq: u64,
    /// The number of segment files (0: a new folder, or one whose segments are gone).
    pub segments: usize,
    /// The owner the segments were written for ([`crate::OutboxConfig::owner`]; `None`
    /// when no segment names one: an empty outbox, or segments of format version 1).
    pub owner: Option<[u8; 16]>,
    /// The highest sequence the outbox had reported durable, from its watermark file
    /// (`None` without one: a new outbox, or one written before watermarks).
    pub watermark: Option<u64>,
    /// The records after [`OutboxConfig::saved_through`](crate::OutboxConfig::saved_through)
    /// (every record for [`read`] and [`read_with`]), counted as they are on disk: what
    /// the owner replays at each start until it saves them elsewhere (its snapshot).
    /// An owner that bounds its restart time snapshots when this passes its bound.
    pub since_saved: LogSpan,
    /// Each unsettled output with its admission's sequence, in admission order.
    unsettled: Vec<(u64, AdmittedOutput)>,
}

impl Recovery {
    /// The admitted outputs that have no terminal outcome, in admission order, each
    /// with its admission's sequence: re-publish them with the same key (or let the
    /// sink verify them). An output admitted again under the same key appears once, at
    /// its latest admission.
    pub fn unsettled(&self) -> &[(u64, AdmittedOutput)] {
        &self.unsettled
    }

    /// Takes the unsettled outputs out of the recovery (see [`Recovery::unsettled`]).
    pub fn take_unsettled(&mut self) -> Vec<(u64, AdmittedOutput)> {
        std::mem::take(&mut self.unsettled)
    }
}

/// A stretch of the outbox's log: how many records, and their bytes on disk (each
/// record's frame: its length, checksum, kind, sequence and body).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogSpan {
    /// How many records (admissions and outcome records).
    pub records: u64,
    /// Their bytes in the segment files.
    pub bytes: u64,
}

/// One admission as [`Outbox::open_with`](crate::Outbox::open_with) hands it to its
/// visitor: borrowed from the segment's bytes, nothing copied.
#[derive(Clone, Copy, Debug)]
pub struct AdmissionView<'a> {
    /// The state change, opaque to the outbox.
    pub state: &'a [u8],
    /// How many outputs it admitted.
    pub outputs: usize,
}

/// A record cut short at the very end of the last segment (a write the crash
/// interrupted), cut off when the outbox opened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TornTail {
    /// The segment it was cut from.
    pub file: PathBuf,
    /// Where the cut starts (the segment's new length).
    pub offset: u64,
    /// How many bytes were cut.
    pub bytes: u64,
}

/// What the writer keeps of each segment.
#[derive(Clone, Debug)]
pub(crate) struct SegmentMeta {
    /// The sequence in its name.
    pub(crate) first_seq: u64,
    /// Its last record's sequence (`first_seq - 1` while empty).
    pub(crate) last_seq: u64,
    /// Its last admission's sequence (0 without one).
    pub(crate) last_admission: u64,
    /// How many of its outputs have no terminal outcome.
    pub(crate) unsettled: usize,
    /// The length of its header (24 for format version 1, 40 for version 2,
    /// [`format::HEADER_LEN`] for version 3).
    pub(crate) header_len: u64,
    /// How its records are framed: a segment of the earlier layout is read, never
    /// appended to.
    pub(crate) framing: Framing,
}

/// A folder read back, before anything is changed on disk.
#[derive(Debug)]
pub(crate) struct Scan {
    pub(crate) recovery: Recovery,
    /// Oldest first; empty for an empty folder.
    pub(crate) segments: Vec<SegmentMeta>,
    /// The key of each unsettled output and the first sequence of its segment.
    pub(crate) unsettled_keys: Vec<(OutputKey, u64)>,
    /// The last segment's path and the length to keep (shorter than the file when a
    /// torn tail is cut; 0 when its header itself was torn).
    pub(crate) tail: Option<(PathBuf, u64)>,
}

/// What a scan hands each admission to: its sequence and a borrowed view; an error
/// stops the scan ([`OutboxError::Refused`]).
pub(crate) type Visitor<'v> = dyn FnMut(u64, &AdmissionView<'_>) -> Result<(), String> + 'v;

/// Reads the outbox in `dir` without opening it for writing: no lock, nothing changed
/// on disk, a torn tail left in place (and reported in [`Recovery::torn`]). For a
/// reader beside a running writer (a status tool, a test): the last group being
/// written may read as a torn tail. A missing folder reads as an empty outbox.
///
/// # Errors
/// [`OutboxError::Damaged`], [`OutboxError::Foreign`] or [`OutboxError::Cut`] as
/// [`crate::Outbox::open`] would refuse it; an I/O error.
pub fn read(dir: &Path) -> Result<Recovery, OutboxError> {
    if !dir.exists() {
        return Ok(empty());
    }
    scan(dir, &OutboxOwner::Any, 0, None).map(|scanned| scanned.recovery)
}

/// [`read`], handing each admission to `visit` (in order, borrowed) instead of keeping
/// it: [`Recovery::admissions`] and [`Recovery::outcomes`] stay empty.
///
/// # Errors
/// As [`read`]; [`OutboxError::Refused`] when `visit` refuses an admission.
pub fn read_with(
    dir: &Path,
    visit: &mut dyn FnMut(u64, &AdmissionView<'_>) -> Result<(), String>,
) -> Result<Recovery, OutboxError> {
    if !dir.exists() {
        return Ok(empty());
    }
    scan(dir, &OutboxOwner::Any, 0, Some(visit)).map(|scanned| scanned.recovery)
}

/// The recovery of an outbox with nothing in it.
fn empty() -> Recovery {
    Recovery {
        first_seq: 1,
        ..Recovery::default()
    }
}

/// Hex of an owner, for messages.
pub(crate) fn owner_hex(owner: &[u8; 16]) -> String {
    owner.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Reads the watermark file of `dir` (before the segments: a writer that adds a group
/// meanwhile only makes the segments longer than it says).
///
/// A watermark torn by a power loss (its checksum fails: it is rewritten in place and
/// never synced) is taken as absent, with a WARN, as in an outbox written before
/// watermarks. That is safe: the watermark is written only after the records it covers
/// were synced, so it can only lag them, and all it does is refuse a start whose
/// segments end before it ([`OutboxError::Cut`]). Without it, every record on disk is
/// still read and a bad one in the middle still refused; only that check is skipped
/// once (the open writes it again at the last sequence on disk).
fn read_watermark(dir: &Path) -> Result<Option<u64>, OutboxError> {
    let path = dir.join(WATERMARK_FILE);
    let bytes = match fs::read(&path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(OutboxError::Io {
                action: "read",
                path,
                source,
            })
        }
    };
    if is_torn_watermark(&bytes) {
        tracing::warn!(file = %path.display(),
            "outbox: the watermark fails its checksum (a rewrite in place a power loss tore): \
             taken as absent, every record on disk is read, and it is written again");
        return Ok(None);
    }
    parse_watermark(&bytes).map_err(|reason| OutboxError::Damaged {
        file: path.clone(),
        offset: 0,
        reason: format!(
            "the watermark (the highest sequence the outbox reported durable) is damaged: \
             {reason}. Without it a cut tail cannot be told from a torn write; to accept the \
             records as they are, remove {} and start again",
            path.display()
        ),
        dir: dir.to_path_buf(),
    })
}

/// The segment files of `dir`, by first sequence.
fn segment_names(dir: &Path) -> Result<Vec<(u64, PathBuf)>, OutboxError> {
    let folder_error = |source| OutboxError::Io {
        action: "read the folder",
        path: dir.to_path_buf(),
        source,
    };
    let mut names = Vec::new();
    for entry in fs::read_dir(dir).map_err(folder_error)? {
        let entry = entry.map_err(folder_error)?;
        if let Some(first_seq) = entry
            .file_name()
            .to_str()
            .and_then(format::parse_segment_file_name)
        {
            names.push((first_seq, entry.path()));
        }
    }
    names.sort();
    Ok(names)
}

/// An unsettled output found by a scan: where it is, until its outcome is found.
#[derive(Clone, Copy, Debug)]
struct Pending<'b> {
    /// Its admission's sequence.
    seq: u64,
    /// Its index within the admission.
    index: usize,
    /// The first sequence of its segment.
    segment: u64,
    /// Its encoded bytes (an [`AdmittedOutput`]).
    output: &'b [u8],
}

/// One admission's body split into its parts: the state, and the encoded bytes of each
/// output and of its key (the key of a map of unsettled outputs: postcard writes a key
/// the same way every time).
fn split_admission<'b>(
    body: &'b [u8],
    outputs: &mut Vec<(&'b [u8], &'b [u8])>,
) -> Result<&'b [u8], String> {
    outputs.clear();
    let failed = |error: postcard::Error| error.to_string();
    let (state, rest): (&[u8], _) = postcard::take_from_bytes(body).map_err(failed)?;
    let (positions, mut rest): (usize, _) = postcard::take_from_bytes(rest).map_err(failed)?;
    for _ in 0..positions {
        let (_, after): (crate::AdmittedPositionRef<'_>, _) = take_position(rest)?;
        rest = after;
    }
    let (count, mut rest): (usize, _) = postcard::take_from_bytes(rest).map_err(failed)?;
    for _ in 0..count {
        let start = rest;
        let (_, after): (&str, _) = postcard::take_from_bytes(rest).map_err(failed)?;
        let key_start = after;
        let (_, after): (OutputKey, _) = postcard::take_from_bytes(after).map_err(failed)?;
        let key = &key_start[..key_start.len() - after.len()];
        let (_, after): (&[u8], _) = postcard::take_from_bytes(after).map_err(failed)?;
        outputs.push((&start[..start.len() - after.len()], key));
        rest = after;
    }
    if !rest.is_empty() {
        return Err(format!(
            "{} bytes left over after the record's body",
            rest.len()
        ));
    }
    Ok(state)
}

/// A position, borrowed (its parts are the same as [`crate::AdmittedPosition`]'s).
fn take_position(bytes: &[u8]) -> Result<(crate::AdmittedPositionRef<'_>, &[u8]), String> {
    #[derive(serde::Deserialize)]
    struct Position<'a> {
        feed: &'a str,
        epoch: mongoose_core::Epoch,
        lane: u32,
        position: u64,
    }
    let (position, rest): (Position<'_>, _) =
        postcard::take_from_bytes(bytes).map_err(|error| error.to_string())?;
    Ok((
        crate::AdmittedPositionRef {
            feed: position.feed,
            epoch: position.epoch,
            lane: position.lane,
            position: position.position,
        },
        rest,
    ))
}

/// Reads every segment of `dir`; refuses damage, another owner's segment and records
/// reported durable that are gone, without changing anything. With a `visit`or, each
/// admission goes to it and is not kept in [`Recovery::admissions`] (nor outcomes in
/// [`Recovery::outcomes`]).
pub(crate) fn scan(
    dir: &Path,
    owner: &OutboxOwner,
    saved_through: u64,
    mut visit: Option<&mut Visitor<'_>>,
) -> Result<Scan, OutboxError> {
    let watermark = read_watermark(dir)?;
    let names = segment_names(dir)?;
    let mut files = Vec::with_capacity(names.len());
    for (_, path) in &names {
        files.push(fs::read(path).map_err(|source| OutboxError::Io {
            action: "read",
            path: path.clone(),
            source,
        })?);
    }
    let keep = visit.is_none();

    let mut recovery = Recovery {
        first_seq: names.first().map_or(1, |(first_seq, _)| *first_seq),
        segments: names.len(),
        watermark,
        ..Recovery::default()
    };
    let expected_owner = match owner {
        OutboxOwner::Is(id) => Some(*id),
        OutboxOwner::Any | OutboxOwner::AdoptOr(_) => None,
    };
    let mut found_owner: Option<[u8; 16]> = None;
    let mut segments: Vec<SegmentMeta> = Vec::new();
    let mut unsettled: HashMap<&[u8], Pending<'_>, foldhash::fast::RandomState> =
        HashMap::default();
    let mut outputs: Vec<(&[u8], &[u8])> = Vec::new();
    let mut tail = None;
    let mut expected_seq: Option<u64> = None;
    let count = names.len();
    for (index, ((first_seq, path), bytes)) in names.iter().zip(&files).enumerate() {
        let (first_seq, bytes) = (*first_seq, bytes.as_slice());
        let is_last = index + 1 == count;
        let damaged = |offset: usize, reason: String| OutboxError::Damaged {
            file: path.clone(),
            offset: offset as u64,
            reason,
            dir: dir.to_path_buf(),
        };
        if first_seq == 0 || first_seq > u64::MAX / 2 {
            return Err(damaged(
                0,
                format!("the segment's name says it starts at sequence {first_seq}, which no outbox writes"),
            ));
        }
        if let Some(expected) = expected_seq {
            if first_seq != expected {
                return Err(damaged(
                    0,
                    format!(
                        "the segment starts at sequence {first_seq}, but the segment before \
                         it ends at sequence {}: a segment is missing or out of place",
                        expected - 1
                    ),
                ));
            }
        }
        if is_last && is_torn_header(bytes, first_seq) {
            // The segment was being created when the process stopped: its header is a
            // torn write.
            if !bytes.is_empty() {
                recovery.torn = Some(TornTail {
                    file: path.clone(),
                    offset: 0,
                    bytes: bytes.len() as u64,
                });
            }
            segments.push(SegmentMeta {
                first_seq,
                last_seq: first_seq - 1,
                last_admission: 0,
                unsettled: 0,
                header_len: format::HEADER_LEN as u64,
                framing: Framing::Layer,
            });
            recovery.last_seq = first_seq - 1;
            tail = Some((path.clone(), 0));
            break;
        }
        let header = check_segment_header(bytes, first_seq).map_err(|reason| damaged(0, reason))?;
        if let Some(written_for) = header.owner.filter(|owner| *owner != [0u8; 16]) {
            let expected = expected_owner.or(found_owner);
            if let Some(expected) = expected.filter(|expected| *expected != written_for) {
                return Err(OutboxError::Foreign {
                    file: path.clone(),
                    found: owner_hex(&written_for),
                    expected: owner_hex(&expected),
                });
            }
            found_owner = Some(written_for);
        }
        let mut meta = SegmentMeta {
            first_seq,
            last_seq: first_seq - 1,
            last_admission: 0,
            unsettled: 0,
            header_len: header.len as u64,
            framing: header.framing,
        };
        let mut offset = header.len;
        let mut next_seq = first_seq;
        while offset < bytes.len() {
            let reason = match read_frame(bytes, offset, header.framing) {
                Frame::Whole {
                    kind,
                    seq,
                    body,
                    next,
                } => {
                    if seq != next_seq {
                        return Err(damaged(
                            offset,
                            format!("a record has sequence {seq} where {next_seq} was due"),
                        ));
                    }
                    if seq > saved_through {
                        recovery.since_saved.records += 1;
                        recovery.since_saved.bytes += (next - offset) as u64;
                    }
                    if kind == KIND_ADMISSION {
                        let state = split_admission(body, &mut outputs).map_err(|reason| {
                            damaged(offset, format!("an admission cannot be decoded: {reason}"))
                        })?;
                        for (output_index, (output, key)) in outputs.iter().enumerate() {
                            let pending = Pending {
                                seq,
                                index: output_index,
                                segment: first_seq,
                                output,
                            };
                            if let Some(old) = unsettled.insert(key, pending) {
                                uncount(&mut segments, &mut meta, old.segment);
                            }
                            meta.unsettled += 1;
                        }
                        meta.last_admission = seq;
                        match visit.as_mut() {
                            Some(visit) => {
                                let view = AdmissionView {
                                    state,
                                    outputs: outputs.len(),
                                };
                                visit(seq, &view).map_err(|reason| OutboxError::Refused {
                                    file: path.clone(),
                                    offset: offset as u64,
                                    seq,
                                    reason,
                                })?;
                            }
                            None => {
                                let admission: Admission = decode(body).map_err(|reason| {
                                    damaged(
                                        offset,
                                        format!("an admission cannot be decoded: {reason}"),
                                    )
                                })?;
                                recovery.admissions.push((seq, admission));
                            }
                        }
                    } else {
                        for_each_outcome(body, |key_bytes, key, outcome| {
                            if let Some(old) = unsettled.remove(key_bytes) {
                                uncount(&mut segments, &mut meta, old.segment);
                            }
                            if keep {
                                recovery.outcomes.push((seq, key(), outcome));
                            }
                        })
                        .map_err(|reason| {
                            damaged(
                                offset,
                                format!("an outcome record cannot be decoded: {reason}"),
                            )
                        })?;
                    }
                    meta.last_seq = seq;
                    next_seq = seq + 1;
                    offset = next;
                    continue;
                }
                Frame::CutShort(reason) => (reason, true),
                // Zeros to the end: space the file system extended but the data never
                // reached (a power loss); a torn write too.
                Frame::Bad(reason) => {
                    let zeros = bytes[offset..].iter().all(|&byte| byte == 0);
                    (reason, zeros)
                }
            };
            let (reason, torn_shape) = reason;
            if !is_last {
                return Err(damaged(
                    offset,
                    format!("{reason}, in a segment that is not the last one"),
                ));
            }
            if let Some(whole) = find_whole_record_after(bytes, offset, next_seq, header.framing) {
                return Err(damaged(
                    offset,
                    format!("{reason}, and a whole record follows it at byte {whole}"),
                ));
            }
            if !torn_shape {
                return Err(damaged(
                    offset,
                    format!(
                        "{reason}, at the end of the last segment but not cut short, so not a \
                         torn write"
                    ),
                ));
            }
            recovery.torn = Some(TornTail {
                file: path.clone(),
                offset: offset as u64,
                bytes: (bytes.len() - offset) as u64,
            });
            break;
        }
        recovery.last_seq = next_seq - 1;
        expected_seq = Some(next_seq);
        segments.push(meta);
        if is_last {
            tail = Some((path.clone(), offset as u64));
        }
    }

    recovery.owner = found_owner;
    if let Some(durable) = watermark.filter(|durable| *durable > recovery.last_seq) {
        let found = match segments.last() {
            Some(last) => format!(
                "its last segment {} ends at sequence {}",
                dir.join(format::segment_file_name(last.first_seq))
                    .display(),
                recovery.last_seq
            ),
            None => "the folder has no segment".to_owned(),
        };
        return Err(OutboxError::Cut {
            dir: dir.to_path_buf(),
            watermark: dir.join(WATERMARK_FILE),
            durable,
            first_missing: recovery.last_seq + 1,
            found,
        });
    }
    if saved_through > recovery.last_seq {
        return Err(OutboxError::Behind {
            dir: dir.to_path_buf(),
            saved_through,
            last_seq: recovery.last_seq,
        });
    }
    let mut left: Vec<Pending<'_>> = unsettled.into_values().collect();
    left.sort_unstable_by_key(|pending| (pending.seq, pending.index));
    let mut unsettled_keys = Vec::with_capacity(left.len());
    for pending in left {
        let output: AdmittedOutput = decode(pending.output).map_err(|reason| {
            OutboxError::Encode(format!("an unsettled output cannot be decoded: {reason}"))
        })?;
        unsettled_keys.push((output.key.clone(), pending.segment));
        recovery.unsettled.push((pending.seq, output));
    }
    Ok(Scan {
        recovery,
        segments,
        unsettled_keys,
        tail,
    })
}

/// Calls `each` with every `(key bytes, key, outcome)` of an outcome record's body;
/// `key` decodes the key only when asked.
fn for_each_outcome<'b>(
    body: &'b [u8],
    mut each: impl FnMut(&'b [u8], &dyn Fn() -> OutputKey, Outcome),
) -> Result<(), String> {
    let failed = |error: postcard::Error| error.to_string();
    let (count, mut rest): (usize, _) = postcard::take_from_bytes(body).map_err(failed)?;
    for _ in 0..count {
        let start = rest;
        let (key, after): (OutputKey, _) = postcard::take_from_bytes(rest).map_err(failed)?;
        let key_bytes = &start[..start.len() - after.len()];
        let (outcome, after): (Outcome, _) = postcard::take_from_bytes(after).map_err(failed)?;
        each(key_bytes, &|| key.clone(), outcome);
        rest = after;
    }
    if !rest.is_empty() {
        return Err(format!(
            "{} bytes left over after the record's body",
            rest.len()
        ));
    }
    Ok(())
}

/// One fewer unsettled output in the segment that starts at `first_seq` (the one being
/// read, or an earlier one).
fn uncount(segments: &mut [SegmentMeta], current: &mut SegmentMeta, first_seq: u64) {
    if first_seq == current.first_seq {
        current.unsettled -= 1;
    } else if let Ok(index) = segments.binary_search_by_key(&first_seq, |meta| meta.first_seq) {
        segments[index].unsettled -= 1;
    }
}

/// A postcard body that must be used up exactly.
fn decode<'a, T: serde::Deserialize<'a>>(body: &'a [u8]) -> Result<T, String> {
    let (value, rest) = postcard::take_from_bytes(body).map_err(|error| error.to_string())?;
    if !rest.is_empty() {
        return Err(format!(
            "{} bytes left over after the record's body",
            rest.len()
        ));
    }
    Ok(value)
}
