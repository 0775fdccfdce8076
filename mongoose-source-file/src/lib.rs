//! A tailing file source whose pointer is never ahead of processing.
//!
//! [`FileEventSource`] reads a file by bytes, splits it into lines on `\n`, `\r` and
//! `\r\n`, maps each [`Line`] to the feed's item with a [`LineMapper`] and publishes
//! it, the position being the byte offset just after the line.
//!
//! A [`Line`] borrows the read chunk it was cut from (an `Arc` and a range), so a feed of
//! `Line`s ([`FileEventSource::of_lines`]) publishes without allocating; the chunks are
//! reused once their lines were dropped. Its bytes are kept as they were on disk:
//! [`Line::as_bytes`] and [`Line::to_str`] are lossless, [`Line::text`] gives U+FFFD
//! for bytes that are not UTF-8. A feed of `String`s still works (`T: From<Line>`),
//! with a lossy copy of each line. The lines of a read buffer go out in batches
//! ([`SourceOutput::try_publish_batch`](mongoose_core::SourceOutput::try_publish_batch):
//! one publisher lock per batch, a line pulled only when the feed can take it); a line a
//! full queue refused is kept and offered again with
//! [`SourceOutput::try_publish`](mongoose_core::SourceOutput::try_publish).
//!
//! With [`ReadStrategy::Committed`] the source keeps a 1,024-byte memory-mapped pointer
//! file beside the input (`<input file name>.readPointer`, layout in [`mod@pointer`]). The
//! pointer is written only by the source's committer, when the output acknowledges that
//! every consumer processed the lines it covers: after a crash the lines after it are
//! delivered again, never skipped. The pointer also holds an epoch (the position space),
//! the input's file key and a fingerprint of its first bytes, so a replaced or truncated
//! input resets it to 0 under a new epoch, while an append never does.
//!
//! During the run a commit writes the mapped page (in the page cache: it survives a
//! crash of the process) and schedules its write-back; a commit whose write failed is
//! kept and written by the next one, and the feed is not settled meanwhile. At a clean
//! stop the pointer is written back synchronously (`msync` with `MS_SYNC`), as is every
//! commit made after the stop, so a power loss right after a clean exit cannot take
//! the final commit back.
//!
//! A full subscriber queue pauses the source (PAUSE is the default policy of a file
//! feed): it keeps the line and reads nothing more until the queue has room.
//!
//! # Identity, rotation and the open
//!
//! * The identity of the input is its file key (device and inode), read from the
//!   *opened handle* (`fstat`), and the fingerprint is read by positional reads of that
//!   handle. The Java original could only read the path's identity, so it read it
//!   before and after the open and retried; here a rotation between the open and the
//!   identity read cannot mislabel the file, and the file opened is always the one read
//!   (the old file of a rotation is read to its end, then the new one is opened).
//! * Never a file time: an append, or a tool touching the file, keeps pointer and epoch.
//! * While tailing, at the end of the file and before reporting CAUGHT_UP, the source
//!   checks that the path still names the open file and that the file is not shorter
//!   than what was read; if not it reports BEHIND with the reason, reads a rotated file
//!   to its end and reopens through the same identity check as a restart. With a
//!   pointer (COMMITED) the reopen waits until the old file's lines are processed and
//!   committed (BEHIND, "waiting for its lines to be processed and committed"): until
//!   then the pointer names the old file, so a crash right after a rotation finds it
//!   again among the rotation candidates at the restart instead of losing its tail.
//! * Follow the file, not the name, across a restart (COMMITED): at the first open
//!   after start, when the path does not name the pointer's file, the pointer's file is
//!   looked for among the rotation candidates (the input's folder, the
//!   [`FileSourceConfig::rotated`] globs, default `<name>.*` and `<name>-*`), matched by
//!   file key *and* fingerprint (a new file with the same preamble is never taken for
//!   it). Found, it is read from the pointer to its end under its old epoch, and its
//!   lines are processed and committed before the file at the path is opened under a
//!   new epoch. Not found (compressed, `.gz`/`.zst`/..., or deleted before it was read)
//!   while it held bytes, its unread tail is unknown: the source cannot know the old
//!   file's final size, so it reports a *possible* loss of unknown bytes (a WARN naming
//!   the compressed candidates or the missing file,
//!   [`SourceOutput::report_rotated_unread`](mongoose_core::SourceOutput::report_rotated_unread)
//!   with `None`, `rotatedUnreadFiles` in the feed status, not lossless), even when the
//!   old file had in fact been read to its end: never a silent skip. A candidate
//!   written *after* the pointer's file (other than the file at the path) is the
//!   current file of the time between two rotations while the source was down: it
//!   cannot be proven a rotation (reading a copy would apply lines twice), so it is not
//!   read but reported the same way, as a possible loss naming it. The same while
//!   running, when the input was rotated twice before the source reached the end of
//!   its open file: a candidate written after that file, other than the one at the
//!   path, is reported.
//! * **Cut in place** (logrotate's `copytruncate`): a file shorter than what was read,
//!   or whose first 256 bytes changed (cut and written again, maybe past the old
//!   length before the source looked), is reopened under a new epoch, never read on
//!   from the old offset. COMMITED first looks among the rotation candidates for its
//!   copy (the fingerprinted leading bytes, at least as long as what was read, and
//!   the bytes last read equal): found, the lines after the last one read are read
//!   from the copy under the same epoch (the pointer names the copy until then, so a
//!   restart finds it), then the cut file from its start. The same at a restart, when
//!   the pointer's file was cut while the source was down; the file at the path is then
//!   held open while the copy (or a renamed pointer's file) is finished, so a rename
//!   meanwhile loses nothing, and a second cut meanwhile (its lines only in a newer
//!   copy, not read) is reported as a possible loss. No copy: a cut while the
//!   source was behind is a counted loss; one while it was caught up is only a reset
//!   (what was appended and cut between two looks cannot be known). The fingerprint
//!   grown at a commit is grown only over the same leading bytes.
//! * **Losses are recorded when found**: every possible loss reported above is also
//!   appended to the loss file beside the pointer (`<pointer>.losses`, see
//!   [`mod@losses`]), so a kill right after cannot make it forgotten; a start reports
//!   it until a run that reported it ends.
//! * LATEST starts after the last line terminator when first opened (a line being
//!   written at that moment is published whole once it ends); after a rotation,
//!   strategies without a pointer read the new file from its start.
//!
//! # Many files per feed: a glob
//!
//! [`GlobFileSource`] reads every file whose name matches a glob (`logs/*.log`) with
//! its own [`FileEventSource`] and its own lane: the feed's positions are `(lane, byte
//! offset)`, each file has its own pointer and epoch and commits on its own, lanes are
//! kept across restarts in `<state folder>/<feed>.lanes` and in each file's pointer
//! (a lost or damaged registry is rebuilt from them), new files are read from their
//! start, deleted ones are forgotten once everything read from them is committed, and
//! at most [`GlobSourceConfig::max_open_files`] are open at once. See [`GlobFileSource`].
//!
//! # The crate's parts
//!
//! | module | what it holds |
//! |---|---|
//! | `config` | [`ReadStrategy`], [`FileSourceConfig`], [`FileSourceStatus`] |
//! | `source` | [`FileEventSource`]: its state, start, stop and duty cycle; `source::open` (the open, the pointer's identity check, following a rotation at a restart, reconciling with the consumers' saved positions), `source::read` (reading, cutting lines, publishing, the end-of-file checks), `source::backoff` (reopening a failing input) |
//! | `identity` | the file key, and the identity rules as pure functions: `reset_reason` (keep the pointer or reset it under a new epoch) and `end_of_file_change` (truncated, or replaced at the path) |
//! | `committer` | the commit state shared with the output's committer, and the pointer committer (a [`SourceCommitter`](mongoose_core::SourceCommitter)) a COMMITED source registers with its output |
//! | `positional` | positional reads of the open handle: the fingerprint, where LATEST starts, aligning a pointer without an epoch |
//! | [`mod@pointer`] | the pointer file: layout, decoding of damaged files, the mapped page |
//! | `rotation` | the rotation candidates of an input, and finding the pointer's file among them |
//! | `line`, [`mod@split`] | [`Line`], the read chunks it borrows, and cutting lines on terminators |
//! | `glob` | [`GlobFileSource`]: `glob::pattern` (file-name globs), `glob::adapter` (the lane adapter and the multiplexing committer), `glob::scan` (discovery, renames inside the glob), `glob::slots` (open-file slots, parking, forgetting deleted files) |
//! | `lanes`, `watch` | the lane registry of a glob, and inotify on its folder |
//! | [`mod@losses`] | the loss records kept beside a pointer (or a glob's registry) until a start reports them |
//!
//! # Example: a file feed and a processor that saves its position with its state
//!
//! The pointer bounds how much a restart reads again; the position saved atomically
//! with the processor's state decides what is applied (book: guarantees/consumer-side-positions.md).
//! Here the first run processes every line and saves its state, then "crashes" before
//! the pointer is committed: the restart delivers the lines again, and the processor
//! skips them with [`Delivery::already_applied`](mongoose_core::Delivery::already_applied).
//!
//! ```
//! use std::fs;
//! use std::path::Path;
//! use std::sync::Arc;
//!
//! use mongoose_core::engine::PendingCompletion;
//! use mongoose_core::{
//!     Delivery, DeliveryContext, Epoch, EventSource, ProcessorError, SourceOutput, SourceState,
//! };
//! use mongoose_delivery::{
//!     DispatchOutcome, Dispatcher, Feed, Publisher, SourceDriver, SubscribeOptions,
//! };
//! use mongoose_source_file::{FileEventSource, FileSourceConfig, Line, ReadStrategy};
//!
//! /// Sums the numbers of a file; its state and the position of the last line applied
//! /// are saved together, in one atomic write (a temporary file renamed into place).
//! struct Summer {
//!     sum: i64,
//!     applied: Option<(Epoch, u64)>,
//!     state_file: std::path::PathBuf,
//! }
//!
//! impl Summer {
//!     fn load(state_file: &Path) -> Summer {
//!         let text = fs::read_to_string(state_file).unwrap_or_default();
//!         let fields: Vec<u64> = text.split_whitespace().filter_map(|f| f.parse().ok()).collect();
//!         let (sum, applied) = match fields[..] {
//!             [sum, epoch, position] => (sum as i64, Some((Epoch(epoch), position))),
//!             _ => (0, None),
//!         };
//!         Summer { sum, applied, state_file: state_file.to_owned() }
//!     }
//!
//!     fn save(&self) -> std::io::Result<()> {
//!         let (epoch, position) = self.applied.unwrap_or_default();
//!         let temporary = self.state_file.with_extension("tmp");
//!         fs::write(&temporary, format!("{} {} {}", self.sum, epoch.get(), position))?;
//!         fs::rename(&temporary, &self.state_file)
//!     }
//! }
//!
//! impl Dispatcher<i64> for Summer {
//!     fn dispatch(&mut self, number: &i64, _attempt: u32) -> DispatchOutcome {
//!         let delivery = DeliveryContext::current().expect("a file feed's items have positions");
//!         if let Some((epoch, position)) = self.applied {
//!             if delivery.already_applied(epoch, position) {
//!                 return DispatchOutcome::Done; // a re-delivery: already in the state
//!             }
//!         }
//!         self.sum += number;
//!         self.applied = Some((delivery.epoch(), delivery.position().offset));
//!         self.save().expect("state saved");
//!         DispatchOutcome::Done
//!     }
//!
//!     fn complete(&mut self, _: PendingCompletion, _: &Delivery) -> Result<(), ProcessorError> {
//!         Ok(())
//!     }
//! }
//!
//! /// One run: a COMMITED file feed of numbers into the processor, until caught up.
//! fn run(input: &Path, state_file: &Path, commit: bool) -> i64 {
//!     let feed: Arc<Publisher<i64, u64>> = Feed::builder("numbers").build();
//!     let output: Arc<dyn SourceOutput<i64, u64>> = feed.clone();
//!     let mut source = FileEventSource::new(
//!         FileSourceConfig::new("numbers", input, ReadStrategy::Committed),
//!         |line: Line| line.text().trim().parse::<i64>().map_err(|e| format!("{line:?}: {e}")),
//!         output,
//!     );
//!     let mut reader = feed
//!         .subscribe("summer", SubscribeOptions::default())
//!         .expect("subscribed")
//!         .take_reader()
//!         .expect("the group's reader");
//!     let mut summer = Summer::load(state_file);
//!     source.start().expect("started");
//!     feed.start_complete();
//!     while source.state() != SourceState::CaughtUp || !reader.is_empty() {
//!         // the driver's cycle commits what was processed; `do_work` alone does not
//!         SourceDriver::cycle(&mut source, &*feed).expect("duty cycle");
//!         reader.poll(&mut summer, 256);
//!     }
//!     if commit {
//!         // commits what was processed, then stops the source
//!         SourceDriver::stop_source(&mut source, &*feed).expect("stopped");
//!     } // else: a crash before the pointer was written
//!     summer.sum
//! }
//!
//! let dir = tempfile::tempdir()?;
//! let input = dir.path().join("numbers.txt");
//! let state_file = dir.path().join("summer.state");
//! fs::write(&input, "1\n2\n3\n")?;
//!
//! assert_eq!(run(&input, &state_file, false), 6);
//! // every line is delivered again after the "crash", and none is applied twice
//! assert_eq!(run(&input, &state_file, true), 6);
//! use std::io::Write;
//! fs::OpenOptions::new().append(true).open(&input)?.write_all(b"10\n")?; // the same epoch
//! assert_eq!(run(&input, &state_file, true), 16);
//! # Ok::<(), std::io::Error>(())
//! ```
#![deny(unsafe_code)]

pub mod adopt;
mod committer;
mod config;
mod error;
mod glob;
mod identity;
mod lanes;
mod line;
pub mod losses;
pub mod pointer;
mod positional;
mod rotation;
mod source;
pub mod split;
mod wake;
mod watch;

pub use config::{FileSourceConfig, FileSourceStatus, ReadStrategy};
pub use error::FileSourceError;
pub use glob::{
    glob_covers, glob_matches, is_glob, GlobFileSource, GlobSourceConfig, DEFAULT_MAX_OPEN_FILES,
    DEFAULT_SCAN_INTERVAL,
};
pub use line::Line;
pub use source::{FileEventSource, LineMapper};
