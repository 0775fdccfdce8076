//! Loss records kept beside a feed's pointer: a run that ended not lossless, or in which
//! an operator released a held position, leaves a record there, so the next start
//! reports it once (and that run is not lossless either) instead of looking clean.
//!
//! The file is `<pointer file>.losses` (a glob feed's: `<lane registry>.losses`), JSON
//! Lines, appended and synced. A file source appends a record the moment it finds a
//! loss it reports (a rotated file compressed or deleted before it was read to its end,
//! a glob's file deleted before it was opened): a kill right after cannot make the
//! loss forgotten. The server appends one at a clean stop for what its feeds dropped.
//! At a start the server reports the records (a WARN each, counted in the feed's
//! `earlierLosses`) and moves them to `<pointer file>.losses.reported`, which keeps the
//! history.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

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
}

/// The loss file of a feed whose pointer is `pointer`.
pub fn loss_path(pointer: &Path) -> PathBuf {
    let mut name = pointer.as_os_str().to_owned();
    name.push(".losses");
    PathBuf::from(name)
}

/// Appends `record` to the loss file at `path` and syncs it.
///
/// # Errors
/// The file cannot be opened or written.
pub fn append(path: &Path, record: &LossRecord) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(record).map_err(std::io::Error::other)?;
    line.push(b'\n');
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    file.write_all(&line)?;
    file.sync_data()
}

/// The records at `path` that no run has reported to its end yet (a start reports
/// them, and only a run that ends after reporting them marks them reported: a run
/// killed after its start reported them leaves them for the next start). A line that is
/// not a record (a torn last write) is reported as such, never dropped silently.
///
/// # Errors
/// The file exists but cannot be read.
pub fn read_unreported(path: &Path) -> std::io::Result<Vec<LossRecord>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(error),
    };
    Ok(text
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|_| LossRecord {
                feed: String::new(),
                at_millis: 0,
                what: format!("an unreadable loss record: {line}"),
            })
        })
        .collect())
}

/// Marks the first `count` records at `path` reported (a run that reported them at its
/// start has ended): they are appended to `<path>.reported`, which keeps the history,
/// and the records written after them (losses found in that run) stay for the next
/// start. The file is rewritten atomically (a temporary file renamed over it), or
/// removed when nothing stays.
///
/// # Errors
/// The file cannot be read, or the history or the rest cannot be written.
pub fn mark_reported(path: &Path, count: usize) -> std::io::Result<()> {
    if count == 0 {
        return Ok(());
    }
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(error),
    };
    let lines: Vec<&str> = text
        .lines()
        .filter(|line| !line.trim().is_empty())
        .collect();
    let split = count.min(lines.len());
    let (done, rest) = lines.split_at(split);
    let mut reported = path.as_os_str().to_owned();
    reported.push(".reported");
    let mut history = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(PathBuf::from(reported))?;
    for line in done {
        history.write_all(line.as_bytes())?;
        history.write_all(b"\n")?;
    }
    history.sync_data()?;
    if rest.is_empty() {
        return std::fs::remove_file(path);
    }
    let mut kept = Vec::new();
    for line in rest {
        kept.extend_from_slice(line.as_bytes());
        kept.push(b'\n');
    }
    mongoose_durable::replace::replace(path, &kept).map_err(Into::into)
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
}
