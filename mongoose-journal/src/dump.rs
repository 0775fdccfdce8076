//! Every excerpt the journal's segments index, with whether it is whole: for operators'
//! tools (`mongoose journal dump`) and tests.

use std::path::PathBuf;

use crate::error::Result;
use crate::segment::{self, Segment, SLOT_EMPTY, SLOT_END};

/// One indexed excerpt, as [`Journal::dump`](crate::Journal::dump) lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpEntry {
    /// The excerpt's index.
    pub index: u64,
    /// The number of the segment that holds it
    /// ([`Journal::segment_path`](crate::Journal::segment_path) gives its file).
    pub segment: u64,
    /// The offset of the excerpt's 8-byte header (length, checksum) in the segment file;
    /// its payload follows.
    pub offset: u64,
    /// The payload length its header gives (0 if the header is outside the file).
    pub len: u32,
    /// Whether the excerpt is whole: inside the file, where the excerpt before it ends,
    /// and matching its checksum. A tailer stops before the first excerpt that is not.
    pub checksum_ok: bool,
}

/// An iterator over every indexed excerpt of every segment, in index order, whole or
/// not (unlike a tailer, it goes on past a damaged excerpt to the end of its segment).
#[derive(Debug)]
pub struct Dump {
    dir: PathBuf,
    numbers: std::vec::IntoIter<u64>,
    segment: Option<Segment>,
    slot: u64,
    expected_offset: Option<usize>,
}

impl Dump {
    pub(crate) fn new(dir: PathBuf) -> Result<Dump> {
        let numbers = segment::list_segments(&dir)?;
        Ok(Dump {
            dir,
            numbers: numbers.into_iter(),
            segment: None,
            slot: 0,
            expected_offset: None,
        })
    }
}

impl Iterator for Dump {
    type Item = Result<DumpEntry>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let Some(segment) = &self.segment else {
                let number = self.numbers.next()?;
                match Segment::open(&segment::segment_path(&self.dir, number), false) {
                    Ok(Some(opened)) => {
                        self.expected_offset = Some(opened.header.geometry.data_start() as usize);
                        self.segment = Some(opened);
                        self.slot = 0;
                    }
                    Ok(None) => {}
                    Err(error) => return Some(Err(error)),
                }
                continue;
            };
            let value = segment.slot(self.slot);
            if value == SLOT_EMPTY || value == SLOT_END {
                self.segment = None;
                continue;
            }
            let index = segment.header.first_index + self.slot;
            let entry = match segment.check_excerpt(index, value, self.expected_offset) {
                Ok((start, len)) => {
                    self.expected_offset = Some((start + len).next_multiple_of(8));
                    DumpEntry {
                        index,
                        segment: segment.header.number,
                        offset: u64::from(value),
                        len: len as u32,
                        checksum_ok: true,
                    }
                }
                Err(_) => {
                    self.expected_offset = None;
                    DumpEntry {
                        index,
                        segment: segment.header.number,
                        offset: u64::from(value),
                        len: segment.raw_len(value).unwrap_or(0),
                        checksum_ok: false,
                    }
                }
            };
            self.slot += 1;
            return Some(Ok(entry));
        }
    }
}
