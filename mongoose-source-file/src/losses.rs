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

/// Takes the records at `path` that no start has reported yet: they are appended to
/// `<path>.reported` and the loss file is removed. A line that is not a record (a torn
/// last write) is reported as such, never dropped silently.
///
/// # Errors
/// The file exists but cannot be read or moved.
pub fn take_unreported(path: &Path) -> std::io::Result<Vec<LossRecord>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(error),
    };
    let records: Vec<LossRecord> = text
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|_| LossRecord {
                feed: String::new(),
                at_millis: 0,
                what: format!("an unreadable loss record: {line}"),
            })
        })
        .collect();
    let mut reported = path.as_os_str().to_owned();
    reported.push(".reported");
    let mut history = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(PathBuf::from(reported))?;
    history.write_all(text.as_bytes())?;
    history.sync_data()?;
    std::fs::remove_file(path)?;
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
}
