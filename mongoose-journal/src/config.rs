//! The journal's configuration.

use std::time::Duration;

use crate::error::{JournalError, Result};
use crate::segment::{HEADER_BYTES, PAGE_BYTES};

/// How a journal's appender lays out new segments. Existing segments keep the layout they
/// were written with (each segment's header records it), so a changed configuration
/// applies from the next segment on.
///
/// ```
/// use std::time::Duration;
/// use mongoose_journal::JournalConfig;
///
/// let hourly = JournalConfig {
///     segment_bytes: 256 << 20,
///     roll_interval: Some(Duration::from_secs(3600)),
///     ..JournalConfig::default()
/// };
/// assert_eq!(hourly.index_slots, None);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalConfig {
    /// The size of a segment file, header and index included (rounded up to a multiple of
    /// 4 KiB; at least 16 KiB, less than 4 GiB). The appender rolls to a new segment when
    /// the next excerpt would not fit. Default 64 MiB.
    pub segment_bytes: u64,
    /// Roll to a new segment at the first append after the current segment has been open
    /// this long (measured from its creation, recorded in its header, so a restart does not
    /// reset it). An empty segment is never rolled. Default `None`: roll by size only.
    pub roll_interval: Option<Duration>,
    /// How many excerpts one segment can index (one 4-byte slot each, one slot reserved for
    /// the end-of-segment mark); a segment also rolls when its index is full. Default
    /// `None`: `segment_bytes / 64`, sized for excerpts of about 56 bytes and up.
    pub index_slots: Option<u32>,
}

impl Default for JournalConfig {
    fn default() -> Self {
        JournalConfig {
            segment_bytes: 64 << 20,
            roll_interval: None,
            index_slots: None,
        }
    }
}

/// The layout of a segment, as a configuration resolves it and a header records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Geometry {
    pub(crate) segment_bytes: u64,
    pub(crate) index_slots: u64,
}

impl Geometry {
    /// Where the excerpts start: after the header page and the index slots, page aligned.
    pub(crate) fn data_start(&self) -> u64 {
        HEADER_BYTES as u64 + (self.index_slots * 4).next_multiple_of(PAGE_BYTES as u64)
    }

    /// The largest payload an empty segment of this layout holds.
    pub(crate) fn max_payload(&self) -> usize {
        (self.segment_bytes - self.data_start()) as usize - crate::segment::EXCERPT_HEADER_BYTES
    }
}

impl JournalConfig {
    /// Checks that the configuration can work (what [`Journal::open`](crate::Journal::open)
    /// checks first), without touching any file.
    pub fn check(&self) -> Result<()> {
        self.geometry().map(|_| ())
    }

    pub(crate) fn geometry(&self) -> Result<Geometry> {
        let segment_bytes = self.segment_bytes.next_multiple_of(PAGE_BYTES as u64);
        if segment_bytes < 16 * 1024 {
            return Err(JournalError::InvalidConfig(format!(
                "segment_bytes = {} is below the minimum of 16 KiB",
                self.segment_bytes
            )));
        }
        if segment_bytes >= u64::from(u32::MAX) {
            return Err(JournalError::InvalidConfig(format!(
                "segment_bytes = {} must be below 4 GiB (excerpt offsets are 32-bit)",
                self.segment_bytes
            )));
        }
        let index_slots = match self.index_slots {
            Some(slots) => u64::from(slots),
            None => (segment_bytes / 64).max(256),
        };
        if index_slots < 2 {
            return Err(JournalError::InvalidConfig(format!(
                "index_slots = {index_slots}: a segment needs at least 2 (one is the end mark)"
            )));
        }
        let geometry = Geometry {
            segment_bytes,
            index_slots,
        };
        if geometry.data_start() + PAGE_BYTES as u64 > segment_bytes {
            return Err(JournalError::InvalidConfig(format!(
                "index_slots = {index_slots} leave no room for data in a segment of \
                 {segment_bytes} bytes; lower index_slots or raise segment_bytes"
            )));
        }
        if self.roll_interval == Some(Duration::ZERO) {
            return Err(JournalError::InvalidConfig(
                "roll_interval must be above zero (or None to roll by size only)".into(),
            ));
        }
        Ok(geometry)
    }
}
