//! `mongoose journal append|tail|dump`: the operator's tools for a
//! [`mongoose_journal::Journal`] (the journal connector's files).
//!
//! * `append DIR`: appends each line of standard input (without its newline) as one
//!   excerpt, syncing every `--sync-every` lines and at the end; prints the index of
//!   the last excerpt.
//! * `tail DIR [--from N] [--follow]`: prints `index<TAB>text` for each excerpt from
//!   index `N` (a tailer stops before a torn or damaged excerpt, never printing it);
//!   with `--follow` it waits for more until interrupted.
//! * `dump DIR`: prints every indexed excerpt, whole or not: index, segment, offset,
//!   length and whether its checksum holds, for investigating a damaged journal.

use std::io::{BufRead, Write};
use std::path::Path;
use std::time::Duration;

use mongoose_journal::{Journal, JournalConfig};

use mongoose_server::ServerError;

/// Appends each line read from `input` as one excerpt; returns how many were appended
/// and the index of the last.
///
/// # Errors
/// A journal that cannot be opened or appended to (another appender holds it, a full
/// disk), or input that cannot be read.
pub fn append(
    dir: &Path,
    input: impl BufRead,
    sync_every: u64,
) -> Result<(u64, Option<u64>), ServerError> {
    let journal = Journal::open(dir, JournalConfig::default())?;
    let mut appender = journal.appender()?;
    let mut count = 0u64;
    let mut last = None;
    for line in input.split(b'\n') {
        let line = line.map_err(|error| ServerError::Io {
            context: "cannot read standard input".to_owned(),
            error,
        })?;
        let line = line.strip_suffix(b"\r").unwrap_or(&line);
        last = Some(appender.append(line)?);
        count += 1;
        if sync_every > 0 && count % sync_every == 0 {
            appender.sync()?;
        }
    }
    appender.sync()?;
    Ok((count, last))
}

/// Prints `index<TAB>text` for the excerpts from `from`; with `follow`, waits for more
/// until `stop` says so (checked between polls).
///
/// # Errors
/// A journal that cannot be read, or output that cannot be written.
pub fn tail(
    dir: &Path,
    from: u64,
    follow: bool,
    out: &mut impl Write,
    stop: &dyn Fn() -> bool,
) -> Result<u64, ServerError> {
    let journal = Journal::open(dir, JournalConfig::default())?;
    let mut tailer = journal.tailer();
    tailer.seek(from)?;
    let mut printed = 0u64;
    let write_error = |error| ServerError::Io {
        context: "cannot write standard output".to_owned(),
        error,
    };
    loop {
        while let Some(excerpt) = tailer.next()? {
            writeln!(
                out,
                "{}\t{}",
                excerpt.index(),
                String::from_utf8_lossy(excerpt.bytes())
            )
            .map_err(write_error)?;
            printed += 1;
        }
        out.flush().map_err(write_error)?;
        if !follow || stop() {
            return Ok(printed);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Prints one line per indexed excerpt, whole or not; returns (excerpts, damaged).
///
/// # Errors
/// A journal that cannot be read, or output that cannot be written.
pub fn dump(dir: &Path, out: &mut impl Write) -> Result<(u64, u64), ServerError> {
    let journal = Journal::open(dir, JournalConfig::default())?;
    let write_error = |error| ServerError::Io {
        context: "cannot write standard output".to_owned(),
        error,
    };
    writeln!(out, "index\tsegment\toffset\tlen\tchecksum").map_err(write_error)?;
    let (mut total, mut damaged) = (0u64, 0u64);
    for entry in journal.dump()? {
        let entry = entry?;
        total += 1;
        if !entry.checksum_ok {
            damaged += 1;
        }
        writeln!(
            out,
            "{}\t{}\t{}\t{}\t{}",
            entry.index,
            entry.segment,
            entry.offset,
            entry.len,
            if entry.checksum_ok { "ok" } else { "DAMAGED" }
        )
        .map_err(write_error)?;
    }
    Ok((total, damaged))
}
