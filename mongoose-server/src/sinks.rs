//! Sinks declared in the configuration (`[[sinks]]`) that processors write their
//! outputs to. This build has one kind, `file`: lines appended to a file, one unbuffered
//! write per line, so a line written before a crash is on disk after it.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

/// A file sink: appends lines, one write each.
#[derive(Clone, Debug)]
pub struct FileSink {
    path: PathBuf,
    file: Arc<Mutex<File>>,
}

impl FileSink {
    /// Opens (creating) `path` for appending.
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(FileSink {
            path: path.to_path_buf(),
            file: Arc::new(Mutex::new(file)),
        })
    }

    /// Appends `line` and a newline in one write.
    pub fn write_line(&self, line: &str) -> std::io::Result<()> {
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        self.file.lock().write_all(&bytes)
    }

    /// The file it appends to.
    pub fn path(&self) -> &Path {
        &self.path
    }
}
