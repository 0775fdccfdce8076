//! A memory-mapped, segmented, append-only journal (API skeleton; not implemented yet).
#![allow(missing_docs, unused_variables, dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("not implemented")]
    NotImplemented,
    #[error("another appender")]
    AppenderHeld { path: PathBuf },
    #[error("damaged")]
    TailerStoreDamaged { path: PathBuf },
}

pub type Result<T> = std::result::Result<T, JournalError>;

#[derive(Debug, Clone)]
pub struct JournalConfig {
    pub segment_bytes: u64,
    pub roll_interval: Option<Duration>,
    pub index_slots: Option<u32>,
}

impl Default for JournalConfig {
    fn default() -> Self {
        JournalConfig { segment_bytes: 64 << 20, roll_interval: None, index_slots: None }
    }
}

#[derive(Debug)]
pub struct Journal {
    dir: PathBuf,
}

impl Journal {
    pub fn open(dir: impl AsRef<Path>, config: JournalConfig) -> Result<Journal> {
        unimplemented!()
    }
    pub fn appender(&self) -> Result<Appender> {
        unimplemented!()
    }
    pub fn tailer(&self) -> Tailer {
        unimplemented!()
    }
    pub fn last_index(&self) -> Result<Option<u64>> {
        unimplemented!()
    }
    pub fn segment_numbers(&self) -> Result<Vec<u64>> {
        unimplemented!()
    }
    pub fn segment_path(&self, number: u64) -> PathBuf {
        unimplemented!()
    }
    pub fn dump(&self) -> Result<Dump> {
        unimplemented!()
    }
}

#[derive(Debug)]
pub struct Appender {}

impl Appender {
    pub fn append(&mut self, bytes: &[u8]) -> Result<u64> {
        unimplemented!()
    }
    pub fn append_with<F: FnOnce(&mut [u8])>(&mut self, len: usize, fill: F) -> Result<u64> {
        unimplemented!()
    }
    pub fn next_index(&self) -> u64 {
        unimplemented!()
    }
    pub fn flush(&mut self) -> Result<()> {
        unimplemented!()
    }
    pub fn sync(&mut self) -> Result<()> {
        unimplemented!()
    }
}

#[derive(Debug)]
pub struct Tailer {}

#[derive(Debug)]
pub struct Excerpt<'a> {
    index: u64,
    bytes: &'a [u8],
}

impl Excerpt<'_> {
    pub fn index(&self) -> u64 {
        self.index
    }
    pub fn bytes(&self) -> &[u8] {
        self.bytes
    }
}

impl Tailer {
    pub fn next(&mut self) -> Result<Option<Excerpt<'_>>> {
        unimplemented!()
    }
    pub fn seek(&mut self, index: u64) -> Result<bool> {
        unimplemented!()
    }
    pub fn index(&self) -> u64 {
        unimplemented!()
    }
}

#[derive(Debug)]
pub struct TailerStore {}

impl TailerStore {
    pub fn open(dir: impl AsRef<Path>, name: &str) -> Result<TailerStore> {
        unimplemented!()
    }
    pub fn load(&self) -> Option<u64> {
        unimplemented!()
    }
    pub fn store(&mut self, index: u64) -> Result<()> {
        unimplemented!()
    }
    pub fn path(&self) -> &Path {
        unimplemented!()
    }
}

#[derive(Debug)]
pub struct Dump {}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpEntry {
    pub index: u64,
    pub segment: u64,
    pub offset: u64,
    pub len: u32,
    pub checksum_ok: bool,
}

impl Iterator for Dump {
    type Item = Result<DumpEntry>;
    fn next(&mut self) -> Option<Self::Item> {
        unimplemented!()
    }
}
