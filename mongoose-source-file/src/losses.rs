//! Loss records kept beside a feed's pointer: a run that ended not lossless, or in which
//! an operator released a held position, leaves a record there, so the next start
//! reports it once (and that run is not lossless either) instead of looking clean.
//!
//! The file is `<pointer file>.losses` (a glob feed's: `<lane registry>.losses`), a
//! checksummed record log of the durable layer ([`mongoose_durable::log`], format
//! `mongoose-loss-file`), one JSON record per entry, appended and synced. A file source
//! appends a record the moment it finds a loss it reports (a rotated file compressed or
//! deleted before it was read to its end, a glob's file deleted before it was opened):
//! a kill right after cannot make the loss forgotten. The server appends one at a clean
//! stop for what its feeds dropped. At a start the server reports the records (a WARN
//! each, counted in the feed's `earlierLosses`) and moves them to
//! `<pointer file>.losses.reported` (JSON Lines), which keeps the history.
//!
//! Nothing in it is dropped unreported: a record cut by a crash while it was written (a
//! torn tail), a record that does not parse, and a file damaged in the middle are each
//! reported as an unreadable loss record. A damaged file is moved aside to
//! `<...>.losses.damaged` (kept for the operator) when the next record is written, and
//! the new file starts with a record saying so. A file of the JSON Lines layout of
//! earlier releases is read as it is and rewritten in the new layout at its next
//! append.

use std::io::Write;
use std::path::{Path, PathBuf};

use mongoose_durable::header::{Header, MAGIC};
use mongoose_durable::log::RecordLog;
use mongoose_durable::DurableError;
use serde::{Deserialize, Serialize};
use tracing::warn;

/// The format name in the loss file's header.
const FORMAT: &str = "mongoose-loss-file";

fn header() -> Header {
    Header::new(FORMAT, 1, Vec::new())
}

/// One loss of a run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LossRecord {
    /// The feed.
    pub feed: String,
    /// Wall-clock milliseconds since the Unix epoch when it was recorded.
    pub at_millis: u64,
    /// What was lost, in words.
    pub what: String,
}

impl LossRecord {
    /// A record of `what`, now.
    pub fn now(feed: &str, what: String) -> Self {
        let at_millis = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_millis() as u64);
        LossRecord {
            feed: feed.to_owned(),
            at_millis,
            what,
        }
    }

    /// A record for an entry that cannot be read.
    fn unreadable(what: String) -> Self {
        LossRecord {
            feed: String::new(),
            at_millis: 0,
            what,
        }
    }
}

/// The loss file of a feed whose pointer is `pointer`.
pub fn loss_path(pointer: &Path) -> PathBuf {
    with_suffix(pointer, ".losses")
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// What a loss file holds: its entries in order, each with the record it reports.
struct Entries {
    records: Vec<LossRecord>,
    /// The file could not be read as a whole (damaged in the middle, another format):
    /// its only entry says so, and it is moved aside before anything is written to it.
    damaged: bool,
    /// The file is whole but not a clean log (the earlier layout, or a torn tail that
    /// an entry reports): rewritten as one before anything is appended, so the entries
    /// a start reported are the first ones still.
    rewrite: bool,
}

/// Reads the entries at `path` (none when there is no file).
fn load(path: &Path) -> std::io::Result<Entries> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Entries {
                records: Vec::new(),
                damaged: false,
                rewrite: false,
            })
        }
        Err(error) => return Err(error),
    };
    if !bytes.starts_with(&MAGIC) {
        // the JSON Lines of earlier releases
        let records = String::from_utf8_lossy(&bytes)
            .lines()
            .filter(|line| !line.trim().is_empty())
            .map(|line| parse(line.as_bytes()))
            .collect();
        return Ok(Entries {
            records,
            damaged: false,
            rewrite: !bytes.is_empty(),
        });
    }
    match mongoose_durable::log::read(path, &header()) {
        Ok(recovery) => {
            let mut records: Vec<LossRecord> =
                recovery.records.iter().map(|record| parse(record)).collect();
            let torn_tail = recovery.torn_tail.is_some();
            if let Some(torn) = recovery.torn_tail {
                records.push(LossRecord::unreadable(format!(
                    "an unreadable loss record: {} bytes of a record cut by a crash while it was written (at byte {}); what was lost is unknown",
                    torn.bytes_cut, torn.offset
                )));
            }
            Ok(Entries {
                records,
                damaged: false,
                rewrite: torn_tail,
            })
        }
        Err(DurableError::Io { source, .. }) => Err(source),
        Err(damage) => Ok(Entries {
            records: vec![LossRecord::unreadable(format!(
                "unreadable loss records: {damage}; the file is moved to {} (kept for you) once this is reported",
                damaged_path(path).display()
            ))],
            damaged: true,
            rewrite: false,
        }),
    }
}

fn parse(record: &[u8]) -> LossRecord {
    serde_json::from_slice(record).unwrap_or_else(|_| {
        LossRecord::unreadable(format!(
            "an unreadable loss record: {}",
            String::from_utf8_lossy(record)
        ))
    })
}

/// Where a damaged loss file is moved aside.
fn damaged_path(path: &Path) -> PathBuf {
    with_suffix(path, ".damaged")
}

fn encode(record: &LossRecord) -> std::io::Result<Vec<u8>> {
    serde_json::to_vec(record).map_err(std::io::Error::other)
}

/// Rewrites `path` atomically as a log of `records` (removed when there are none).
fn rewrite(path: &Path, records: &[LossRecord]) -> std::io::Result<()> {
    if records.is_empty() {
        return match std::fs::remove_file(path) {
            Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(error),
            _ => Ok(()),
        };
    }
    let encoded = records
        .iter()
        .map(encode)
        .collect::<std::io::Result<Vec<_>>>()?;
    let bytes = mongoose_durable::log::encode(&header(), encoded.iter().map(Vec::as_slice))
        .map_err(std::io::Error::other)?;
    mongoose_durable::replace::replace(path, &bytes).map_err(Into::into)
}

/// Appends `record` to the loss file at `path` and syncs it. A file of the earlier
/// layout is rewritten in this one first; a damaged file is moved aside first (to
/// `<path>.damaged`), and the new file starts with a record saying so.
///
/// # Errors
/// The file cannot be read, moved, opened or written.
pub fn append(path: &Path, record: &LossRecord) -> std::io::Result<()> {
    // loss records are rare: the file is read whole before each one
    let entries = load(path)?;
    if entries.damaged {
        let aside = damaged_path(path);
        warn!(file = %path.display(), moved_to = %aside.display(),
            "the loss file is damaged: it is moved aside, and the next start reports it as unreadable loss records; the new loss is recorded in a new file");
        std::fs::rename(path, &aside)?;
        rewrite(path, &entries.records)?;
    } else if entries.rewrite {
        rewrite(path, &entries.records)?;
    }
    let (mut log, _) = RecordLog::open_or_create(path, &header()).map_err(|error| match error {
        DurableError::Io { source, .. } => source,
        other => std::io::Error::other(other),
    })?;
    log.append(&encode(record)?)
        .and_then(|()| log.sync())
        .map_err(std::io::Error::other)
}

/// The records at `path` that no run has reported to its end yet (a start reports
/// them, and only a run that ends after reporting them marks them reported: a run
/// killed after its start reported them leaves them for the next start). An entry that
/// is not a record (a torn last write, damage) is reported as such, never dropped
/// silently.
///
/// # Errors
/// The file exists but cannot be read.
pub fn read_unreported(path: &Path) -> std::io::Result<Vec<LossRecord>> {
    Ok(load(path)?.records)
}

/// Marks the first `count` records at `path` reported (a run that reported them at its
/// start has ended): they are appended to `<path>.reported` (JSON Lines), which keeps
/// the history, and the records written after them (losses found in that run) stay for
/// the next start. The file is rewritten atomically, or removed when nothing stays; a
/// damaged file whose report was all it held is moved aside to `<path>.damaged`.
///
/// # Errors
/// The file cannot be read, or the history or the rest cannot be written.
pub fn mark_reported(path: &Path, count: usize) -> std::io::Result<()> {
    if count == 0 {
        return Ok(());
    }
    let entries = load(path)?;
    if entries.records.is_empty() {
        return Ok(());
    }
    let split = count.min(entries.records.len());
    let (done, rest) = entries.records.split_at(split);
    let mut history = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(with_suffix(path, ".reported"))?;
    for record in done {
        let mut line = encode(record)?;
        line.push(b'\n');
        history.write_all(&line)?;
    }
    history.sync_data()?;
    if entries.damaged {
        // reported: kept aside for the operator, out of the way of the next loss
        return std::fs::rename(path, damaged_path(path));
    }
    rewrite(path, rest)
}

/// Reads the records at `path` and marks them reported at once ([`read_unreported`],
/// then [`mark_reported`]).
///
/// # Errors
/// As those two.
pub fn take_unreported(path: &Path) -> std::io::Result<Vec<LossRecord>> {
    let records = read_unreported(path)?;
    mark_reported(path, records.len())?;
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_reported_once_and_kept_in_the_history() {
        let dir = tempfile::tempdir().expect("dir");
        let path = loss_path(&dir.path().join("input.txt.readPointer"));
        append(&path, &LossRecord::now("lines", "released 3 items".into())).expect("written");
        append(&path, &LossRecord::now("lines", "dropped 2".into())).expect("written");
        let first = take_unreported(&path).expect("taken");
        assert_eq!(
            first.iter().map(|r| r.what.as_str()).collect::<Vec<_>>(),
            ["released 3 items", "dropped 2"]
        );
        assert!(take_unreported(&path).expect("taken").is_empty(), "once");
        let history =
            std::fs::read_to_string(dir.path().join("input.txt.readPointer.losses.reported"))
                .expect("history");
        assert_eq!(history.lines().count(), 2);
    }

    #[test]
    fn records_stay_until_a_run_that_reported_them_ends() {
        let dir = tempfile::tempdir().expect("dir");
        let path = loss_path(&dir.path().join("input.txt.readPointer"));
        append(&path, &LossRecord::now("lines", "lost a.log".into())).expect("written");
        // a start reports it, the run is killed: reported again by the next start
        assert_eq!(read_unreported(&path).expect("read").len(), 1);
        let at_start = read_unreported(&path).expect("read");
        assert_eq!(at_start.len(), 1);
        // that run finds another loss, then ends: only the first is marked reported
        append(&path, &LossRecord::now("lines", "lost b.log".into())).expect("written");
        mark_reported(&path, at_start.len()).expect("marked");
        let left = read_unreported(&path).expect("read");
        assert_eq!(
            left.iter().map(|r| r.what.as_str()).collect::<Vec<_>>(),
            ["lost b.log"]
        );
        mark_reported(&path, 1).expect("marked");
        assert!(!path.exists());
    }

    /// Writes two records at `path`, then changes a byte of the first (damage in the
    /// middle of the log); returns the damaged file's bytes.
    fn two_records_the_first_damaged(path: &Path) -> Vec<u8> {
        append(path, &LossRecord::now("lines", "lost a.log".into())).expect("written");
        append(path, &LossRecord::now("lines", "lost b.log".into())).expect("written");
        let mut bytes = std::fs::read(path).expect("read");
        let at = bytes
            .windows(10)
            .position(|window| window == b"lost a.log")
            .expect("the record");
        bytes[at] ^= 0x20;
        std::fs::write(path, &bytes).expect("damaged");
        bytes
    }

    fn whats(records: &[LossRecord]) -> Vec<&str> {
        records.iter().map(|record| record.what.as_str()).collect()
    }

    #[test]
    fn a_record_torn_by_a_crash_is_reported_and_stays_first_after_an_append() {
        let dir = tempfile::tempdir().expect("dir");
        let path = loss_path(&dir.path().join("input.txt.readPointer"));
        append(&path, &LossRecord::now("lines", "lost a.log".into())).expect("written");
        append(&path, &LossRecord::now("lines", "lost b.log".into())).expect("written");
        // the second record's write cut by a crash
        let length = std::fs::metadata(&path).expect("meta").len();
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("open");
        file.set_len(length - 5).expect("cut");
        let at_start = read_unreported(&path).expect("read");
        assert_eq!(at_start.len(), 2, "{at_start:?}");
        assert_eq!(at_start[0].what, "lost a.log");
        assert!(
            at_start[1].what.starts_with("an unreadable loss record:")
                && at_start[1].what.contains("cut by a crash"),
            "{at_start:?}"
        );
        // the run finds another loss: the torn entry is not cut from under the start's count
        append(&path, &LossRecord::now("lines", "lost c.log".into())).expect("written");
        mark_reported(&path, at_start.len()).expect("marked");
        assert_eq!(
            whats(&read_unreported(&path).expect("read")),
            ["lost c.log"]
        );
    }

    #[test]
    fn a_damaged_loss_file_is_reported_moved_aside_and_never_skipped() {
        let dir = tempfile::tempdir().expect("dir");
        let path = loss_path(&dir.path().join("input.txt.readPointer"));
        let bytes = two_records_the_first_damaged(&path);
        let at_start = read_unreported(&path).expect("read");
        assert_eq!(at_start.len(), 1, "{at_start:?}");
        assert!(
            at_start[0].what.starts_with("unreadable loss records:"),
            "{at_start:?}"
        );
        // a loss of this run: the damaged file goes aside, the new one reports both
        append(&path, &LossRecord::now("lines", "lost c.log".into())).expect("written");
        assert_eq!(
            std::fs::read(damaged_path(&path)).expect("kept aside"),
            bytes
        );
        let now = read_unreported(&path).expect("read");
        assert_eq!(now.len(), 2);
        assert_eq!(now[0], at_start[0]);
        mark_reported(&path, at_start.len()).expect("marked");
        assert_eq!(
            whats(&read_unreported(&path).expect("read")),
            ["lost c.log"]
        );
    }

    #[test]
    fn a_damaged_loss_file_reported_to_the_end_of_a_run_is_moved_aside() {
        let dir = tempfile::tempdir().expect("dir");
        let path = loss_path(&dir.path().join("input.txt.readPointer"));
        two_records_the_first_damaged(&path);
        let reported = take_unreported(&path).expect("taken");
        assert_eq!(reported.len(), 1);
        assert!(!path.exists());
        assert!(damaged_path(&path).exists());
        assert!(read_unreported(&path).expect("read").is_empty());
    }

    #[test]
    fn a_loss_file_of_the_earlier_layout_is_read_then_rewritten_in_this_one() {
        let dir = tempfile::tempdir().expect("dir");
        let path = loss_path(&dir.path().join("input.txt.readPointer"));
        let old = LossRecord::now("lines", "lost a.log".into());
        let mut lines = serde_json::to_vec(&old).expect("json");
        lines.extend_from_slice(b"\n{\"torn\n");
        std::fs::write(&path, &lines).expect("written");
        let at_start = read_unreported(&path).expect("read");
        assert_eq!(at_start.len(), 2);
        assert_eq!(at_start[0], old);
        assert_eq!(at_start[1].what, "an unreadable loss record: {\"torn");
        append(&path, &LossRecord::now("lines", "lost c.log".into())).expect("written");
        assert!(std::fs::read(&path).expect("read").starts_with(&MAGIC));
        assert_eq!(
            read_unreported(&path).expect("read")[..2],
            at_start[..],
            "the earlier entries first, unchanged"
        );
        mark_reported(&path, 2).expect("marked");
        assert_eq!(
            whats(&read_unreported(&path).expect("read")),
            ["lost c.log"]
        );
    }
}
