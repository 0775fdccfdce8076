//! Audit captures recorded to a journal (`mongoose-journal`): the server's default
//! capture storage (`[audit] store = "journal"`). Each session's folder holds the
//! identity sidecar and a `journal/` directory: one excerpt per capture record (a
//! `mongoose_audit::capture::CaptureRecord` encoding), readable while the capture
//! runs with `mongoose journal tail` or `mongoose journal dump`, and by
//! [`read_journal_capture`].

use std::path::Path;

use mongoose_audit::capture::{
    CaptureFailure, CaptureIdentity, CaptureRecord, CaptureResources, CaptureWriter,
};
use mongoose_journal::{Appender, Journal, JournalConfig};

/// The journal inside a capture session's folder.
pub const CAPTURE_JOURNAL: &str = "journal";

/// Segments of a capture journal: small, as a capture is usually short.
const CAPTURE_SEGMENT_BYTES: u64 = 4 << 20;

/// Opens capture sessions as journals.
#[derive(Clone, Copy, Debug, Default)]
pub struct JournalCaptureResources;

impl CaptureResources for JournalCaptureResources {
    fn open(
        &self,
        _identity: &CaptureIdentity,
        dir: &Path,
    ) -> Result<Box<dyn CaptureWriter>, CaptureFailure> {
        let config = JournalConfig {
            segment_bytes: CAPTURE_SEGMENT_BYTES,
            ..JournalConfig::default()
        };
        let journal = Journal::open(dir.join(CAPTURE_JOURNAL), config)?;
        let appender = journal.appender()?;
        Ok(Box::new(JournalCaptureWriter {
            appender,
            _journal: journal,
        }))
    }
}

/// One session's appender.
struct JournalCaptureWriter {
    appender: Appender,
    _journal: Journal,
}

impl CaptureWriter for JournalCaptureWriter {
    fn write(&mut self, record: &[u8]) -> Result<(), CaptureFailure> {
        self.appender.append(record)?;
        Ok(())
    }

    fn close(mut self: Box<Self>) -> Result<(), CaptureFailure> {
        self.appender.sync()?;
        Ok(())
    }
}

/// The records of a journal capture session's folder, in order (a reader never sees a
/// torn record: the journal stops before it).
///
/// # Errors
/// The journal cannot be read, or an excerpt is not a capture record.
pub fn read_journal_capture(session: &Path) -> Result<Vec<CaptureRecord>, CaptureFailure> {
    let journal = Journal::open(session.join(CAPTURE_JOURNAL), JournalConfig::default())?;
    let mut tailer = journal.tailer();
    let mut records = Vec::new();
    while let Some(excerpt) = tailer.next()? {
        records.push(CaptureRecord::decode(excerpt.bytes())?);
    }
    Ok(records)
}
