//! Reading an outbox folder back: every whole record, what is unsettled, what was cut.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use mongoose_core::sink::OutputKey;

use crate::format::{
    self, check_segment_header, find_whole_record_after, read_frame, segment_header, Frame,
    HEADER_LEN, KIND_ADMISSION,
};
use crate::{Admission, AdmittedOutput, OutboxError, Outcome};

/// What [`Outbox::open`](crate::Outbox::open) found in the folder.
#[derive(Debug, Default)]
pub struct Recovery {
    /// Every whole admission since the oldest kept segment, in order, with its
    /// sequence.
    pub admissions: Vec<(u64, Admission)>,
    /// Every outcome recorded since the oldest kept segment, in order, with the
    /// sequence of its record.
    pub outcomes: Vec<(u64, OutputKey, Outcome)>,
    /// The torn write cut off the end of the last segment, if there was one.
    pub torn: Option<TornTail>,
    /// The highest sequence on disk (0 when the outbox is empty); the next record gets
    /// the one after it.
    pub last_seq: u64,
    /// (admission index, output index) of each unsettled output, in admission order.
    unsettled: Vec<(usize, usize)>,
}

impl Recovery {
    /// The admitted outputs that have no terminal outcome, in admission order, each
    /// with its admission's sequence: re-publish them with the same key (or let the
    /// sink verify them). An output admitted again under the same key appears once, at
    /// its latest admission.
    pub fn unsettled(&self) -> Vec<(u64, &AdmittedOutput)> {
        self.unsettled
            .iter()
            .map(|&(admission, output)| {
                let (seq, admission) = &self.admissions[admission];
                (*seq, &admission.outputs[output])
            })
            .collect()
    }
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
}

/// A folder read back, before anything is changed on disk.
#[derive(Debug)]
pub(crate) struct Scan {
    pub(crate) recovery: Recovery,
    /// Oldest first; empty for an empty folder.
    pub(crate) segments: Vec<SegmentMeta>,
    /// The key of each unsettled output and the first sequence of its segment.
    pub(crate) unsettled_keys: HashMap<OutputKey, u64>,
    /// The last segment's path and the length to keep (shorter than the file when a
    /// torn tail is cut; 0 when its header itself was torn).
    pub(crate) tail: Option<(PathBuf, u64)>,
}

/// Reads the outbox in `dir` without opening it for writing: no lock, nothing changed
/// on disk, a torn tail left in place (and reported in [`Recovery::torn`]). For a
/// reader beside a running writer (a status tool, a test): the last group being
/// written may read as a torn tail. A missing folder reads as an empty outbox.
///
/// # Errors
/// [`OutboxError::Damaged`] as [`crate::Outbox::open`] would refuse it; an I/O error.
pub fn read(dir: &Path) -> Result<Recovery, OutboxError> {
    if !dir.exists() {
        return Ok(Recovery::default());
    }
    scan(dir).map(|scanned| scanned.recovery)
}

/// Reads every segment of `dir`; refuses damage without changing anything.
pub(crate) fn scan(dir: &Path) -> Result<Scan, OutboxError> {
    let mut names = Vec::new();
    let entries = fs::read_dir(dir).map_err(|source| OutboxError::Io {
        action: "read the folder",
        path: dir.to_path_buf(),
        source,
    })?;
    for entry in entries {
        let entry = entry.map_err(|source| OutboxError::Io {
            action: "read the folder",
            path: dir.to_path_buf(),
            source,
        })?;
        if let Some(first_seq) = entry
            .file_name()
            .to_str()
            .and_then(format::parse_segment_file_name)
        {
            names.push((first_seq, entry.path()));
        }
    }
    names.sort();

    let mut recovery = Recovery::default();
    let mut segments: Vec<SegmentMeta> = Vec::new();
    // key -> (admission index, output index, segment first sequence)
    let mut unsettled: HashMap<OutputKey, (usize, usize, u64)> = HashMap::new();
    let mut tail = None;
    let mut expected_seq: Option<u64> = None;
    let count = names.len();
    for (index, (first_seq, path)) in names.into_iter().enumerate() {
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
        let bytes = fs::read(&path).map_err(|source| OutboxError::Io {
            action: "read",
            path: path.clone(),
            source,
        })?;
        let torn_header = (bytes.len() < HEADER_LEN
            && bytes[..] == segment_header(first_seq)[..bytes.len()])
            || (bytes.len() <= HEADER_LEN && bytes.iter().all(|&byte| byte == 0));
        if is_last && torn_header {
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
            });
            recovery.last_seq = first_seq - 1;
            tail = Some((path, 0));
            break;
        }
        check_segment_header(&bytes, first_seq).map_err(|reason| damaged(0, reason))?;
        let mut meta = SegmentMeta {
            first_seq,
            last_seq: first_seq - 1,
            last_admission: 0,
            unsettled: 0,
        };
        let mut offset = HEADER_LEN;
        let mut next_seq = first_seq;
        while offset < bytes.len() {
            let reason = match read_frame(&bytes, offset) {
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
                    if kind == KIND_ADMISSION {
                        let admission: Admission = decode(body).map_err(|reason| {
                            damaged(offset, format!("an admission cannot be decoded: {reason}"))
                        })?;
                        let admission_index = recovery.admissions.len();
                        for (output_index, output) in admission.outputs.iter().enumerate() {
                            if let Some((_, _, old_segment)) = unsettled.insert(
                                output.key.clone(),
                                (admission_index, output_index, first_seq),
                            ) {
                                uncount(&mut segments, &mut meta, old_segment);
                            }
                            meta.unsettled += 1;
                        }
                        meta.last_admission = seq;
                        recovery.admissions.push((seq, admission));
                    } else {
                        let outcomes: Vec<(OutputKey, Outcome)> =
                            decode(body).map_err(|reason| {
                                damaged(
                                    offset,
                                    format!("an outcome record cannot be decoded: {reason}"),
                                )
                            })?;
                        for (key, outcome) in outcomes {
                            if let Some((_, _, old_segment)) = unsettled.remove(&key) {
                                uncount(&mut segments, &mut meta, old_segment);
                            }
                            recovery.outcomes.push((seq, key, outcome));
                        }
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
            if let Some(whole) = find_whole_record_after(&bytes, offset, next_seq) {
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
            tail = Some((path, offset as u64));
        }
    }

    let mut unsettled_list: Vec<(usize, usize)> = unsettled
        .values()
        .map(|&(admission, output, _)| (admission, output))
        .collect();
    unsettled_list.sort_unstable();
    recovery.unsettled = unsettled_list;
    let unsettled_keys = unsettled
        .into_iter()
        .map(|(key, (_, _, segment))| (key, segment))
        .collect();
    Ok(Scan {
        recovery,
        segments,
        unsettled_keys,
        tail,
    })
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
