//! Reading a [`FileEventSource`]'s input: chunks of the open file cut into lines,
//! mapped and published in batches (a refused line kept pending), and what happens at
//! the end of the file (a once read ends, a rotated file is finished, the path's
//! identity is checked before CAUGHT_UP).

use std::fs::{self, File};
use std::io;
use std::path::Path;
use std::sync::Arc;

use mongoose_core::{BatchEnd, CoreError, Refusal, SourceState, TryPublish};
use tracing::{info, warn};

use super::FileEventSource;
use crate::identity::{end_of_file_change, key_of, EndOfFileChange, FileKey, ObservedAtEnd};
use crate::line::{Chunk, Line};
use crate::positional::read_exact_at;
use crate::split::next_line;

/// The open input file and the last chunk read from it.
#[derive(Debug)]
pub(super) struct OpenInput {
    pub(super) file: Arc<File>,
    key: Option<FileKey>,
    /// The file being read (the lines' [`Line::path`]).
    path: Arc<Path>,
    /// The last read: its lines not yet taken, then a partial line.
    chunk: Arc<Chunk>,
    /// The file offset of `chunk[0]`.
    chunk_offset: u64,
    /// Bytes of the chunk taken (published, filtered or held as pending).
    consumed: usize,
    /// The file's first bytes (up to [`LEAD_BYTES`]) as first seen: a file cut and
    /// written again in place (logrotate's `copytruncate` under a busy writer) no
    /// longer starts with them, even when it grew back past what was read.
    lead: Vec<u8>,
}

/// How many leading bytes of the open file are compared to tell a file rewritten in
/// place (after each read chunk and at each end of the file: one small `pread`).
const LEAD_BYTES: usize = 256;

impl OpenInput {
    /// `file` (of `path`), to be read from `start_at`.
    pub(super) fn new(
        file: Arc<File>,
        key: Option<FileKey>,
        path: Arc<Path>,
        start_at: u64,
    ) -> OpenInput {
        let mut input = OpenInput {
            file,
            key,
            chunk: Chunk::empty(Arc::clone(&path)),
            path,
            chunk_offset: start_at,
            consumed: 0,
            lead: Vec::new(),
        };
        input.lead_changed();
        input
    }

    /// Whether the file no longer starts with the bytes it started with when first
    /// seen (cut and written again in place; or shorter than them: cut). Grows the
    /// remembered bytes while fewer than [`LEAD_BYTES`] were seen.
    pub(super) fn lead_changed(&mut self) -> bool {
        let mut now = [0u8; LEAD_BYTES];
        let known = self.lead.len();
        if known > 0
            && (read_exact_at(&self.file, &mut now[..known], 0).is_err()
                || now[..known] != self.lead[..])
        {
            return true;
        }
        if known < LEAD_BYTES {
            let size = self.file.metadata().map_or(0, |metadata| metadata.len());
            let wanted = (size as usize).min(LEAD_BYTES);
            if wanted > known && read_exact_at(&self.file, &mut now[..wanted], 0).is_ok() {
                if now[..known] != self.lead[..] {
                    return true;
                }
                self.lead = now[..wanted].to_vec();
            }
        }
        false
    }

    /// The open file's key.
    pub(super) fn key(&self) -> Option<FileKey> {
        self.key
    }

    /// The last bytes taken before [`OpenInput::position`] that are still in the read
    /// chunk, at most `max`.
    pub(super) fn taken_tail(&self, max: usize) -> &[u8] {
        let taken = &self.chunk.bytes()[..self.consumed];
        &taken[taken.len().saturating_sub(max)..]
    }

    /// The open file was renamed: its lines carry the new name.
    pub(super) fn set_path(&mut self, path: Arc<Path>) {
        self.path = path;
    }

    #[inline]
    pub(super) fn position(&self) -> u64 {
        self.chunk_offset + self.consumed as u64
    }

    fn read_through(&self) -> u64 {
        self.chunk_offset + self.chunk.bytes().len() as u64
    }

    /// The bytes read and not taken yet.
    #[inline]
    fn unread(&self) -> &[u8] {
        &self.chunk.bytes()[self.consumed..]
    }
}

enum EofCheck {
    Unchanged,
    Replaced(String),
    /// Cut (`true`: shorter than what was read) or rewritten in place (`false`).
    Truncated(String, bool),
}

impl<T: Send + 'static> FileEventSource<T> {
    pub(super) fn close_input(&mut self) {
        if let Some(input) = self.input.take() {
            self.buffers.retire(input.chunk);
        }
        self.shared.lock().input = None;
    }

    fn on_pause(&mut self) {
        if !self.paused {
            self.paused = true;
            self.status.pauses += 1;
        }
        self.report_str(
            SourceState::Behind,
            Some("paused: a subscriber queue is full"),
        );
    }

    fn on_retry(&mut self) {
        // not a pause (not counted), but the line is not taken yet
        self.report_str(
            SourceState::Behind,
            Some("a publish nested in a commit of this feed: offering the line again"),
        );
    }

    /// Offers the pending item; true when published (or nothing was pending).
    fn publish_pending(&mut self) -> bool {
        let Some((item, position)) = self.pending.take() else {
            return true;
        };
        self.offer(item, position)
    }

    /// Publishes one item; on a pause or a retry keeps it pending. False when it must
    /// wait.
    fn offer(&mut self, item: T, position: u64) -> bool {
        match self.output.try_publish(item, position) {
            TryPublish::Published => {
                self.status.lines_published += 1;
                self.paused = false;
                true
            }
            TryPublish::Paused(item) => {
                self.pending = Some((item, position));
                self.on_pause();
                false
            }
            TryPublish::Retry(item) => {
                self.pending = Some((item, position));
                self.on_retry();
                false
            }
        }
    }

    /// Maps and publishes one line; false when it must wait (pending).
    #[inline]
    fn take_line(&mut self, line: Line, position: u64) -> bool {
        self.status.read_position = position;
        match (self.mapper)(line) {
            Ok(item) => self.offer(item, position),
            Err(reason) => {
                self.filter_line(position, &reason);
                true
            }
        }
    }

    /// Records a line the line mapper refused: counted, logged, and given to the output
    /// so its position is committed with the items around it.
    fn filter_line(&mut self, position: u64, reason: &str) {
        self.status.lines_filtered += 1;
        warn!(source = %self.config.name, position, %reason, filtered = self.status.lines_filtered,
            "the line mapper refused a line: filtered");
        self.output.filtered(position, reason);
    }

    /// Publishes the complete lines in the buffer; false when paused (or retried).
    ///
    /// The lines go out in batches ([`SourceOutput::try_publish_batch`]): the output
    /// takes its lock once per batch and pulls a line only when it can take it, so a
    /// paused feed leaves the rest in the buffer. A line the mapper refuses ends the
    /// batch, and is recorded with [`SourceOutput::filtered`] outside it: never a call
    /// nested in the output's batch, and its position stays in order between the lines
    /// before and after it.
    fn publish_buffered(&mut self) -> bool {
        loop {
            let Some(input) = self.input.as_mut() else {
                return true;
            };
            let mapper = &mut self.mapper;
            let position_before = input.position();
            let mut taken = 0u64;
            let mut refused: Option<(u64, String)> = None;
            let mut next = || {
                if refused.is_some() {
                    return None;
                }
                let span = next_line(input.unread(), false)?;
                let start = input.consumed;
                let line = Line::of_chunk(&input.chunk, start, start + span.text_len);
                input.consumed += span.consumed;
                let position = input.position();
                match mapper(line) {
                    Ok(item) => {
                        taken += 1;
                        Some((item, position))
                    }
                    Err(reason) => {
                        refused = Some((position, reason));
                        None
                    }
                }
            };
            let end = self.output.try_publish_batch(&mut next);
            let position_after = input.position();
            if position_after != position_before {
                self.status.read_position = position_after;
            }
            let returned = matches!(end, BatchEnd::Returned(..));
            let published = taken - u64::from(returned);
            if published > 0 {
                self.status.lines_published += published;
                self.paused = false;
            }
            let filtered = refused.is_some();
            if let Some((position, reason)) = refused {
                // the closure ends the batch at a refused line: nothing after it was
                // taken, so it is recorded in order before the next batch
                self.filter_line(position, &reason);
            }
            match end {
                BatchEnd::Exhausted if filtered => {}
                BatchEnd::Exhausted => {
                    // the feed had room for more: a pause episode (if any) is over
                    self.paused = false;
                    return true;
                }
                BatchEnd::Paused => {
                    self.on_pause();
                    return false;
                }
                BatchEnd::Returned(item, position, Refusal::Paused) => {
                    self.pending = Some((item, position));
                    self.on_pause();
                    return false;
                }
                BatchEnd::Returned(item, position, Refusal::Retry) => {
                    self.pending = Some((item, position));
                    self.on_retry();
                    return false;
                }
            }
        }
    }

    /// True when the source has nothing to do until its file changes: started, its
    /// watch wakes it, and it waits for nothing else ([`Self::read_to_the_end`]). Only
    /// then does it let its driver park until a wake ([`EventSource::quiet_for`]).
    ///
    /// [`EventSource::quiet_for`]: mongoose_core::EventSource::quiet_for
    pub(super) fn is_idle_at_the_end(&self) -> bool {
        let watched = self
            .wake
            .as_ref()
            .is_some_and(crate::wake::FileWake::is_active);
        watched && self.read_to_the_end()
    }

    /// True when the source waits for nothing but its file to change (whatever wakes
    /// it; a glob asks it of its files): the open file is read to its end (a partial
    /// line, or no whole first line yet, waits for bytes), or no file is at the path
    /// yet, and nothing waits on time or commits (no line paused, no reopen back-off,
    /// no rotation, reopen or replacement in progress).
    pub(crate) fn read_to_the_end(&self) -> bool {
        if !self.started || self.pending.is_some() || self.paused || self.next_file.is_some() {
            return false;
        }
        if self.ended {
            return true;
        }
        match self.input {
            // waiting for the file to exist (its creation is a change), not for a
            // back-off after a failed open
            None => self.backoff.ready(),
            Some(_) => {
                self.draining.is_none()
                    && self.reopen_from.is_none()
                    && self.finishing_rotated.is_none()
                    && self.seen_at_path.is_none()
                    && !self.path_replaced
            }
        }
    }

    /// Reads and publishes until the end of the file, a pause or the cycle's budget.
    pub(super) fn read_and_publish(&mut self) -> Result<usize, CoreError> {
        let published_before = self.status.lines_published;
        if !self.publish_pending() {
            return Ok(0);
        }
        let mut read_this_cycle = 0usize;
        loop {
            // a file opened before its first line was whole: its epoch (its identity)
            // comes before its first line goes out
            let has_line = self
                .input
                .as_ref()
                .is_some_and(|input| next_line(input.unread(), false).is_some());
            if has_line && !self.establish_identity()? {
                break;
            }
            if !self.publish_buffered() {
                break;
            }
            if read_this_cycle >= self.config.max_bytes_per_cycle {
                self.report_str(SourceState::Behind, Some("reading"));
                break;
            }
            let Some(input) = self.input.as_mut() else {
                break;
            };
            // a new chunk: the partial line carried over (copied), then what is read
            // after it. The chunk before stays with the lines cut from it.
            let offset = input.read_through();
            let read = self
                .buffers
                .read(&input.file, offset, &input.path, input.unread());
            if read.is_ok() {
                self.backoff.succeeded();
                if let Some(failures) = self.read_failures.cleared() {
                    info!(source = %self.config.name, failures, "the input file reads again");
                }
            }
            match read {
                Ok(None) => {
                    if !self.at_end_of_file()? {
                        break;
                    }
                }
                Ok(Some((chunk, _))) if input.lead_changed() => {
                    // cut and written again while being read: what was just read may
                    // be the new content, at an offset of the old one
                    self.buffers.retire(chunk);
                    let reason = format!(
                        "the input file {} was rewritten in place while being read: its first bytes changed",
                        self.config.path.display()
                    );
                    if !self.on_truncated(reason, false)? {
                        break;
                    }
                }
                Ok(Some((chunk, read))) => {
                    input.chunk_offset += input.consumed as u64;
                    input.consumed = 0;
                    let before = std::mem::replace(&mut input.chunk, chunk);
                    self.buffers.retire(before);
                    read_this_cycle += read;
                }
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => {
                    self.backoff.failed();
                    if let Some(unlogged) = self.read_failures.occurred() {
                        warn!(source = %self.config.name, path = %self.config.path.display(), %error,
                            failures = self.read_failures.total, unlogged,
                            "cannot read the input file; reopening it with a back-off (up to 1 s; this warning is repeated at most every 10 s, with a count)");
                    }
                    let from = input.position();
                    self.close_input();
                    self.reopen_from = Some(from);
                    self.report(
                        SourceState::Behind,
                        Some(format!("reopening after a read error: {error}")),
                    );
                    break;
                }
            }
        }
        Ok((self.status.lines_published - published_before) as usize)
    }

    /// At the end of the open file. Returns true to read on (a rotated file being read
    /// to its end), false to end the cycle.
    fn at_end_of_file(&mut self) -> Result<bool, CoreError> {
        if self.config.strategy.is_once() {
            return Ok(self.end_once_read());
        }
        if let Some(reason) = self.draining.take() {
            let from = self.input.as_ref().map(OpenInput::position);
            if self.config.strategy.has_pointer() {
                // the old file of a rotation (found at a restart, or seen replaced
                // while running): its lines are committed under its epoch before the
                // switch, so the pointer names it until then and a crash before the
                // switch finds it again among the rotation candidates; after the
                // switch the new file's pointer forgets this epoch (issue 11, item 1)
                let (committed, epoch) = {
                    let shared = self.shared.lock();
                    (shared.record.offset, shared.record.epoch)
                };
                let position = from.unwrap_or(0);
                if epoch == self.epoch.get() && committed < position {
                    let old = match self.finishing_rotated.as_ref() {
                        Some(rotated) => format!("the rotated file {}", rotated.display()),
                        None => "the replaced file".to_owned(),
                    };
                    let waiting = format!(
                        "finishing {old}: waiting for its lines to be processed and committed ({committed} of {position} bytes)"
                    );
                    self.draining = Some(reason);
                    self.report(SourceState::Behind, Some(waiting));
                    return Ok(false);
                }
            }
            if let Some(rotated) = self.finishing_rotated.take() {
                info!(source = %self.config.name, rotated = %rotated.display(), position = from.unwrap_or(0),
                    "the rotated file was read to its end and committed: opening the file at the path under a new epoch");
                self.rotated_finished = true;
            }
            // the rotated or replaced file was read to its end: open the one at the
            // path next cycle. Its unterminated last line is not published.
            self.close_input();
            self.reopen_from = from;
            self.report(SourceState::Behind, Some(reason));
            return Ok(false);
        }
        if self.path_replaced {
            // a glob's file: the glob says what the file at the path is (see
            // `follow_rename`, `confirm_replacement`); the open file is read on
            return Ok(false);
        }
        match self.check_identity_at_eof() {
            EofCheck::Unchanged => {
                self.report(SourceState::CaughtUp, None);
                Ok(false)
            }
            EofCheck::Replaced(reason) if self.glob_member => {
                self.path_replaced = true;
                self.report(
                    SourceState::Behind,
                    Some(format!(
                        "{reason}: waiting for the glob's scan to find where the open file went"
                    )),
                );
                Ok(false)
            }
            EofCheck::Replaced(reason) => {
                // an ordinary rotation by rename: the old file is read to its end from
                // its handle, nothing is lost
                let line = crate::rotation::renamed_line(
                    &self.config.path,
                    self.input
                        .as_ref()
                        .and_then(OpenInput::key)
                        .map(|key| key.0),
                );
                info!(source = %self.config.name, "{line}");
                self.rotation_announced = true;
                // hold the new file now: a second rotation while the old one is
                // finished renames it away from the path (issue 11)
                self.next_file = File::open(&self.config.path).ok();
                self.report_files_between();
                self.report(SourceState::Behind, Some(reason.clone()));
                self.draining = Some(reason);
                Ok(true)
            }
            EofCheck::Truncated(reason, shorter) => self.on_truncated(reason, shorter),
        }
    }

    /// The open file is shorter than what was read of it, or was rewritten in place.
    /// With a pointer, a copy of it among its rotations (logrotate's `copytruncate`)
    /// is read from where the source was, under the same epoch, and true is returned
    /// (read on); without one, what the source had not read yet is a loss when it was
    /// behind. Then the file is reopened (false: the cycle ends), under a new epoch.
    ///
    /// `shorter`: the file is shorter than what was read (a truncation); else it was
    /// rewritten in place (its first bytes changed), always a WARN. A truncation after
    /// everything was read (logrotate's `copytruncate`, a writer that truncates on
    /// open) loses nothing and is an INFO; one that cut bytes not read yet is a WARN
    /// and a counted loss, unless a copy of them is found.
    fn on_truncated(&mut self, reason: String, shorter: bool) -> Result<bool, CoreError> {
        let from = self.input.as_ref().map(OpenInput::position);
        let caught_up = self.status.state == SourceState::CaughtUp;
        if !shorter {
            warn!(source = %self.config.name, %reason, "reopening the input file");
        }
        let mut lost = false;
        if let (true, Some(from)) = (
            self.config.strategy.has_pointer() && self.finishing_rotated.is_none(),
            from,
        ) {
            if self.finish_copy(from)? {
                return Ok(true);
            }
            if !caught_up {
                // cut while the source was behind: what it had not read yet is gone
                // (no copy of it was found)
                lost = true;
                let path = self.config.path.display().to_string();
                let unread = match self.last_seen_size().filter(|size| *size > from) {
                    Some(size) => format!(
                        "at least {} bytes (seen up to byte {size}) were never read",
                        size - from
                    ),
                    None => "an unknown number of bytes after it were never read".to_owned(),
                };
                warn!(source = %self.config.name, path = %path, read_to = from, %reason,
                    "the input was truncated while the source was behind, and no copy of it was found among its rotations: {unread}: they are lost (counted; the feed is not lossless)");
                self.report_unread(
                    &path,
                    &format!("{path} was truncated while the source was behind (at byte {from}), and no copy of it was found: {unread} (a loss)"),
                );
            }
        }
        if shorter && !lost {
            if caught_up {
                info!(source = %self.config.name, path = %self.config.path.display(),
                    "rotated by truncation: all {} bytes were read before; reading the new content from 0",
                    from.unwrap_or(0));
                self.rotation_announced = true;
            } else {
                // no pointer to say what was read: a possible loss, said as it is
                warn!(source = %self.config.name, %reason,
                    "the input was truncated while the source was behind: the bytes it had not read may be lost; reading the new content from 0");
            }
        }
        self.close_input();
        self.reopen_from = from;
        self.report(SourceState::Behind, Some(reason));
        Ok(false)
    }

    /// Before CAUGHT_UP: is the path still the open file, and is it not shorter than
    /// what was read? (book: guarantees/epochs-and-identity.md)
    fn check_identity_at_eof(&mut self) -> EofCheck {
        let Some(input) = self.input.as_mut() else {
            return EofCheck::Unchanged;
        };
        let lead_changed = input.lead_changed();
        let path = &self.config.path;
        let observed = ObservedAtEnd {
            open_size: input.file.metadata().ok().map(|open| open.len()),
            read_through: input.read_through(),
            open_key: input.key,
            // none: a rotation in progress, the open file is read on
            path_key: fs::metadata(path).ok().map(|at_path| key_of(&at_path)),
        };
        match end_of_file_change(&observed) {
            None if lead_changed => EofCheck::Truncated(
                format!(
                    "the input file {} was rewritten in place: its first bytes changed",
                    path.display()
                ),
                false,
            ),
            None => EofCheck::Unchanged,
            Some(EndOfFileChange::Truncated { size, read_through }) => {
                EofCheck::Truncated(
                    format!(
                        "the input file {} was truncated while being read: {size} bytes, {read_through} read",
                        path.display(),
                    ),
                    true,
                )
            }
            Some(EndOfFileChange::Replaced) => EofCheck::Replaced(format!(
                "the input file {} was replaced while being read",
                path.display()
            )),
        }
    }

    /// The end of a once read: a last line ended by a lone `\r` is published, bytes
    /// after the last terminator are counted as unterminated. Returns false.
    fn end_once_read(&mut self) -> bool {
        let Some(input) = self.input.as_mut() else {
            return false;
        };
        if let Some(span) = next_line(input.unread(), true) {
            let start = input.consumed;
            let line = Line::of_chunk(&input.chunk, start, start + span.text_len);
            input.consumed += span.consumed;
            let position = input.position();
            if !self.take_line(line, position) {
                return false;
            }
            // more lines can follow only if the buffer held more; go round again
            return true;
        }
        let unterminated = input.unread().len() as u64;
        self.status.unterminated_bytes = unterminated;
        self.output.set_unterminated_bytes(unterminated);
        self.ended = true;
        let detail = (unterminated > 0).then(|| {
            format!("the last {unterminated} bytes have no line terminator and were not published")
        });
        self.close_input();
        self.report(SourceState::EndOfStream, detail);
        false
    }
}
