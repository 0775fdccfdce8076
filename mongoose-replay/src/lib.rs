//! Record and replay of processor inputs: RECORD a processor group's processors as they
//! run, then REPLAY each one alone from the recording to reproduce its run.
//!
//! * RECORD: a [`Recorder`] installed on a group (`GroupOptions::recorder`) writes, for
//!   each recorded processor, its inputs (copied through the feed's codec, or by feed
//!   and sequence for a journalled feed) with the delivery it could read through
//!   `DeliveryContext` and the [`Clock`] readings it took, its timers, its stop, and a
//!   `Failed` mark where its run failed (a dispatch, or a completion callback's first
//!   failure: book: guarantees/completion-hooks.md), and an `AdminInvoked` entry for each of its
//!   admin commands an operator ran (`mongoose_control::admin`). What it sends through
//!   an [`OutputSink`], and what its admin commands answered, are kept beside the
//!   recording, so a replay can be compared with them.
//! * REPLAY: a [`Replayer`] builds each recorded processor afresh, in a
//!   `mongoose_control::ProcessorHost` (the code a live group calls it through), and
//!   gives it its stream alone: the recorded delivery entered for the whole replayed cycle and
//!   cleared after, the completion callbacks run where they ran live, its clock pinned
//!   to the recorded readings, its outputs captured (`outputs(processor)`), never
//!   delivered; each recorded admin command is called again on the command the replayed
//!   processor registered, its answers collected (`admin_replies(processor)`). A replay
//!   that cannot go on stops that processor only and says why
//!   (`stopped(processor)`); `losses()` / `lossless()` report what was dropped live.
//! * [`cli::replay_report`] runs a replay and prints, per processor, complete or
//!   stopped (with the reason), its losses and the diff of its outputs and admin replies
//!   against the recorded run's: what `mongoose replay` shows.
//!
//! # Example: record a processor, then replay it
//!
//! ```
//! use std::sync::Arc;
//! use std::time::{Duration, Instant};
//! use mongoose_control::{memory::MemoryFeeds, ControlConfig, ControlPlane, GroupOptions};
//! use mongoose_core::{Processor, ProcessorError, StartContext};
//! use mongoose_replay::{Clock, FeedCodecs, OutputSink, RecordConfig, Recorder, Replayer};
//!
//! /// Prices orders: reads the time through a Clock, writes through an OutputSink.
//! struct Pricer {
//!     clock: Clock,
//!     quotes: OutputSink,
//! }
//! impl Pricer {
//!     fn on_order(&mut self, quantity: &u64) -> Result<(), ProcessorError> {
//!         let at = self.clock.now();
//!         self.quotes.send(format!("{quantity} lots at {} (t={at})", quantity * 101));
//!         Ok(())
//!     }
//! }
//! impl Processor for Pricer {
//!     fn start(&mut self, context: &mut StartContext<'_>) -> Result<(), ProcessorError> {
//!         context.subscribe("orders", Pricer::on_order)
//!     }
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! // the feeds the recording copies, with their codecs (serde + postcard here)
//! let feeds = || FeedCodecs::new().feed::<u64>("orders");
//!
//! // RECORD: a group with a recorder for the processor "pricer"
//! let orders_feeds = MemoryFeeds::default();
//! let orders = orders_feeds.feed::<u64>("orders");
//! let plane = ControlPlane::new(ControlConfig::default(), Arc::new(orders_feeds));
//! let recorder = Recorder::create(dir.path(), RecordConfig::new(["pricer"], feeds()))?;
//! plane.create_group("pricing", GroupOptions {
//!     recorder: Some(Box::new(recorder)),
//!     ..GroupOptions::default()
//! })?;
//! let (quotes, sent) = OutputSink::collecting("quotes");
//! plane.add_processor("pricing", "pricer", move || Pricer { clock: Clock::system(), quotes })
//!     .reply.wait_for(Duration::from_secs(30))?;
//! orders.publish(3);
//! orders.publish(5);
//! let deadline = Instant::now() + Duration::from_secs(30);
//! while sent.lock().len() < 2 && Instant::now() < deadline {
//!     std::thread::sleep(Duration::from_millis(1));
//! }
//! plane.close_groups(Instant::now() + Duration::from_secs(30)); // the recorder closes the recording
//!
//! // REPLAY: the same processor type, built afresh, given its stream alone
//! let replay = Replayer::open(dir.path(), feeds())
//!     .processor("pricer", || Pricer {
//!         clock: Clock::system(), // pinned to the recorded readings in the replay
//!         quotes: OutputSink::new("quotes", |_| unreachable!("captured, never delivered")),
//!     })
//!     .run();
//! assert!(replay.complete());
//! assert_eq!(replay.stopped("pricer"), None);
//! assert_eq!(replay.outputs("pricer"), &sent.lock()[..]); // the same times, the same quotes
//! assert!(replay.lossless());
//!
//! // what `mongoose replay` prints
//! let report = mongoose_replay::cli::replay_report(
//!     dir.path(),
//!     Replayer::open(dir.path(), feeds()).processor("pricer", || Pricer {
//!         clock: Clock::system(),
//!         quotes: OutputSink::new("quotes", |_| {}),
//!     }),
//! );
//! assert!(report.reproduced());
//! assert!(report.to_string().contains("processor pricer"));
//! # Ok(())
//! # }
//! ```
//!
//! # The recording directory
//!
//! * `recording.replay`: the store (below): one stream per recorded processor build;
//! * `journal.replay`: the items of journalled feeds, one stream per feed (an entry per
//!   item, its sequence as the route), written once per item;
//! * `outputs.jsonl`: what the recorded processors sent to [`OutputSink`]s, one JSON
//!   object `{"stream": key, "output": text}` per line;
//! * `admin.jsonl`: what the recorded processors' admin commands answered, one
//!   [`RecordedAdminReply`] per line: `{"stream": key, "command": c, "args": [..],
//!   "result": {"Ok": output}}` (or `{"Err": error}`).
//!
//! # When a replay stops
//!
//! A replay stops one processor's replay, never the others', and records why
//! ([`Replay::stopped`]); a stopped replay counts as done for [`Replay::complete`].
//!
//! | Reason starts with | When |
//! |---|---|
//! | `the replayed processor is not the recorded one` | the build's type differs from the stream's recorded provenance |
//! | `the replay store could not be read` | the store (or its journal) cannot be read: every processor stops |
//! | `no stream was recorded for` | a later build (`name#2` and up) has no stream (it is not replayed as empty) |
//! | `ambiguous legacy stream key` | the stream is under a legacy key with an unescaped `#` |
//! | `the recorded run failed here` | a `Failed` entry: determinism is not claimed after a failure |
//! | `entry N could not be replayed` | the entry fails or panics in the replay, cannot be decoded, its feed is not declared or not subscribed, or it is an entry kind this build does not replay |
//! | `the journal holds no item` | an `Indexed` entry whose item the journal lacks |
//! | `clock divergence` | a replayed cycle read the [`Clock`] a different number of times from the recorded one |
//! | `control request X was not made by the recorded run here` | the replayed processor made a control request where the recording has none, or another one |
//! | `control request differs` | it made the recorded request with other arguments |
//! | `the recorded run made control request` | a recorded `ControlCall` the replay did not make (found at the next entry that is not one, or at the stream's end) |
//! | `registry mutation` | it called `register_service` or `remove_service` (even where recorded): never executed |
//! | `addEventProcessor supplier cannot be verified from the recording` | it called `add_processor`: the supplier is never run |
//! | `recorded control exception cannot be reconstructed` | the matching recorded request failed: only its text was recorded |
//! | `entry N could not be delivered within` | an `AdminInvoked` entry names a command the replayed processor did not register in its `start` |
//! | `recorded service S at version V is unavailable` | a `ServiceChanged` delivery of a service the replay was not given at that version ([`Replayer::service`]): no other instance or version is substituted |
//! | `recorded service callback for S was not delivered` | the processor's services callback failed in the replay, it already held the service, or it takes no services |
//! | `recorded withdrawal of service S has no delivered incarnation` | a recorded withdrawal of a service the replayed processor never held |
//!
//! # Services
//!
//! A service delivered to or withdrawn from a recorded processor (at its build or while
//! it runs) is a `ServiceChanged` entry with the service's registry version. A replay
//! has no live registry: give it the services the recording names, at their versions,
//! with [`Replayer::service`]. It then delivers and withdraws them through the
//! processor's services callback where the recorded run did, with the clock pinned.
//!
//! # Control requests
//!
//! A processor's control requests ([`mongoose_control::Controller`]) are recorded as
//! [`Entry::ControlCall`] (the request's name, its arguments as text, its outcome) right
//! after the entry of the call that made them; requests made in the processor's build
//! and `start()` come before its first entry. A replay installs a
//! [`mongoose_control::ControlInterceptor`] on its thread, so the replayed processor's
//! requests never reach a live control plane: a `stop_processor` that matches the next
//! recorded request returns its recorded outcome (ok) and nothing is executed; every
//! other request returns an error into the processor and stops its replay with one of
//! the reasons above. A request made off the processor's thread cannot happen: a
//! `Controller` is not `Send`, so it does not compile.
//!
//! A `Dropped` entry is written live where items were lost for a recorded processor's
//! queue: the delivery engine keeps the dropped runs beside the queue and the reader
//! reports them in queue order, before the next item (book: guarantees/control-plane.md
//! : "the processor's recording gets a Dropped entry where the
//! items were lost"). A replay carries on past it and counts it in `losses()`.
//!
//! # Not built in this version
//!
//! * "control request ... made off the processor's thread" cannot happen (see Control
//!   requests).
//! * Waiting for a service version to be published: the replay's registry is what it
//!   was given before it ran, so "no registry binding identifies recorded service" and
//!   the wait for a version's broadcast become the stop "recorded service S at version
//!   V is unavailable".
//! * A delivery timeout: a replay runs on the caller's thread, synchronously, so an
//!   entry is delivered at once or stops at once. "entry N could not be delivered
//!   within" is given without waiting, for an admin command the replayed processor never
//!   registered (the Java original waits up to `deliveryTimeout` for it).
//! * "the replay clock could not be installed": a [`Clock`] is a value the processor
//!   holds; it cannot refuse the pin.
//! * With a write buffer ([`RecordConfig`]), an input's entry is handed to the buffer
//!   before the item counts as dispatched but written at the end of the group's poll:
//!   a crash in between can leave committed items unrecorded. Without one (the
//!   default) the entry is written before the item counts as dispatched
//!   (book: guarantees/completion-hooks.md: `recorder.afterDispatch` before `dispatched += 1`).
//!
//! # Stream keys and entries
//!
//! A recording holds one stream per processor build, keyed by [`stream_key`] (the bare
//! name for the first build of a name in its group, `name#2`, `name#3`, ... for later
//! ones, with a `#` in a name doubled, so keys never alias). A stream is the processor's
//! [`Entry`] values in order, with its [`Provenance`]. Each input ([`Entry::Indexed`],
//! [`Entry::Inline`]) carries the [`mongoose_core::Delivery`] the processor could read
//! through `DeliveryContext` (feed, sequence, epoch, position), so a replay can enter it
//! for the replayed cycle (book: running/record-and-replay.md, "Delivery metadata is recorded
//! and replayed").
//!
//! [`ReplayStore`] appends to a store file (one write per call by default, or whole
//! calls buffered up to [`ReplayStore::set_write_buffer`] bytes until
//! [`ReplayStore::flush`]) and [`ReplayStore::close`] ends it with its closing frame;
//! [`Recording::read`] reads one back, complete only when it ends with that frame.
//!
//! # Example: write a store directly and read it back
//!
//! ```
//! use std::sync::Arc;
//! use mongoose_core::{Delivery, Epoch, PositionValue};
//! use mongoose_replay::{
//!     Entry, Provenance, Recording, ReplayStore, StreamKeys, Utf8Codec,
//! };
//!
//! # fn main() -> Result<(), mongoose_replay::ReplayError> {
//! let dir = tempfile::tempdir().unwrap();
//! let path = dir.path().join("pricing.replay");
//!
//! // RECORD: a new store; each processor build gets its own stream
//! let mut store = ReplayStore::open_for_record(&path)?;
//! let mut keys = StreamKeys::new();
//! let key = keys.built("pricer");
//! let provenance = Provenance {
//!     processor_type: "Pricer".into(),
//!     handler_type: String::new(),
//!     ordinal: key.ordinal(),
//! };
//! let pricer = store.begin(key.key(), Some(&provenance))?;
//!
//! // an input from a positioned feed that is not journalled: copied inline, with its delivery
//! let delivery = Delivery::new(Arc::from("lines"), 1, Epoch(7), PositionValue::at(12), 0);
//! let line = "EURUSD 1.0841".to_string();
//! store.append(pricer, &Entry::inline(&Utf8Codec, &line, "onLine", Some(delivery.clone()), vec![1_000])?)?;
//! store.append(pricer, &Entry::TimerFired { schedule: 1, clock: vec![2_000] })?;
//! store.close()?; // the closing frame: without it the recording reads as incomplete
//! drop(store);
//!
//! // REPLAY: read it back; the delivery is attached to its input
//! let recording = Recording::read(&path)?;
//! assert!(recording.complete());
//! let stream = recording.stream("pricer").expect("recorded");
//! assert_eq!(stream.provenance(), Some(&provenance));
//! assert_eq!(stream.entries()[0].delivery(), Some(&delivery));
//! assert_eq!(stream.entries()[0].decode_inline(&Utf8Codec).unwrap()?, line);
//! assert_eq!(stream.entries()[1].clock(), Some(&[2_000][..]));
//!
//! // a store that holds a recording is never recorded into again
//! assert!(ReplayStore::open_for_record(&path).is_err());
//! # Ok(())
//! # }
//! ```
//!
//! # The store's format (version 3)
//!
//! All integers of the head and of frame heads are little-endian. The head is the
//! durable layer's header (`mongoose_durable::header`) and the frames are its record
//! log's frames (`mongoose_durable::log`), with the store's own limit on a body.
//!
//! ```text
//! head    : magic "MGDH" | header length u16 (= 37) | format version u32 (= 3)
//!           | name length u8 (= 21) | "mongoose-replay-store" | owner length u8 (= 0)
//!           | CRC-32 of the 33 bytes before it
//! frame*  : length u32 (1 ..= 16 MiB) | crc32 u32 | body (length bytes)
//! closing : one last frame whose body is a Close (below), written at a clean close
//! ```
//!
//! Stores of versions 1 and 2 open with the earlier head, magic "MGREPLAY" (8 bytes)
//! then the format version u32, and have the same frames: they are read, and a store of
//! version 2 is continued as it is (its head kept).
//!
//! The checksum is CRC-32 (IEEE 802.3, the zlib/PNG one) of the 4 length bytes followed
//! by the body. The body is one `WireFrame` encoded by postcard 1.x: a varint variant
//! index, then the fields in order (unsigned integers as LEB128 varints, `i64` zigzag
//! varints, `bool` one byte 0/1, `Option` a byte 0/1 then the value, strings, byte
//! strings and lists a varint length then the items):
//!
//! ```text
//! 0 Stream   { id: u32, key: str, provenance: Option<{processor_type: str, handler_type: str, ordinal: u32}> }
//! 1 Delivery { stream: u32, feed: str, sequence: u64, epoch: u64, lane: u32, offset: u64, attempt: u32 }
//! 2 Entry    { stream: u32, entry }
//! 3 Close    { frames: u64, entries: u64, checksum: u32, sealed: [{name: str, length: u64, checksum: u32}] }
//!   entry:
//!   0 Indexed        { feed: str, sequence: u64, route: str, delivered: bool, clock: [i64] }
//!   1 Inline         { payload: bytes, route: str, delivered: bool, clock: [i64] }
//!   2 TimerFired     { schedule: u64, clock: [i64] }
//!   3 AdminInvoked   { command: str, args: [str], clock: [i64] }
//!   4 Failed         { reason: str }
//!   5 Stopped        { clock: [i64] }
//!   6 ServiceChanged { service: str, version: u64, delivered: bool, clock: [i64] }
//!   7 ControlCall    { call: str, args: [str], failure: Option<str> }   (None: ok)
//!   8 Dropped        { feed: str, sequence: u64 }
//! ```
//!
//! Streams are numbered 0, 1, 2, ... in the order their `Stream` frame appears, and the
//! other frames name them by that number. The `Close` frame is the last frame of a
//! recording closed cleanly ([`ReplayStore::close`]; a [`Recorder`] writes it when its
//! group closes): `frames` counts the frames before it, `entries` the `Entry` frames
//! among them, `checksum` is the CRC-32 of the 8-byte heads (`length | crc32`) of those
//! frames, in order (each head's CRC covers its body, so this binds every frame byte
//! and their order), and `sealed` lists the files beside the store the
//! recording holds (`outputs.jsonl`, `admin.jsonl`) with their length and CRC-32 at the
//! close, written and made durable before the `Close` frame. Version 1 (no `Close`
//! frame) is still read. An input with a delivery is written as its
//! `Delivery` frame immediately followed, in the same write, by its `Entry` frame with
//! `delivered = true`.
//!
//! Reading:
//!
//! * a recording is complete only when it ends with a `Close` frame that matches the
//!   frames before it; frames that end without one are incomplete
//!   ([`Incomplete::NotClosed`]: "no closing frame (written by an older version or the
//!   recorder was killed)"), so a store cut at a frame boundary, or to its head, never
//!   reads as complete; a `Close` frame whose counts or checksum differ is
//!   [`Incomplete::ClosingMismatch`], and a frame after it is damaged;
//! * a file shorter than the head whose bytes start the magic is an empty store (its
//!   creation was interrupted): RECORD writes it afresh, and a reader reports it
//!   incomplete ([`Incomplete::NoHead`]); another head is refused
//!   ([`ReplayError::NotAStore`]), and so is a version newer than this build's
//!   ([`ReplayError::NewerFormat`]);
//! * a last frame that runs past the end of the file is torn: the recording is
//!   incomplete ([`Incomplete::TornFrame`]) and holds every frame before it;
//! * a frame with a bad length or checksum, or a body that does not decode, is damaged:
//!   reading stops there and the recording is incomplete ([`Incomplete::DamagedFrame`]);
//! * a `Delivery` frame not immediately followed by its stream's input with
//!   `delivered = true` adds nothing and makes the recording incomplete
//!   ([`Incomplete::OrphanDelivery`]); an input with `delivered = true` and no delivery
//!   before it is damaged.
//!
//! An incomplete store opens read-only: it is replayed, never appended to, and it holds
//! a recording, so RECORD never reuses it as empty. A closed store is read-only too;
//! [`ReplayStore::open`] continues one, cutting its `Close` frame off at the first
//! write (a later [`ReplayStore::close`] writes a new one).
//!
//! # Where things are
//!
//! One job per file: `record.rs` (the [`Recorder`], its files and configuration) and
//! `record/hooks.rs` (what it writes for each group event); `replay.rs` (the
//! [`Replayer`] and its loop over a stream), `replay/calls.rs` (control requests
//! matched with the recorded ones), `replay/journal.rs` (journalled items) and
//! `replay/report.rs` (what a replay returns: [`Replay`]); `store.rs` (the
//! [`ReplayStore`] writer), `store/recording.rs` (the reader: [`Recording`]) and
//! `store/sealed.rs` ([`SealedFile`]); `format.rs` (the frames), `entry.rs`, `key.rs`,
//! `feeds.rs`, `tap.rs` ([`Clock`], [`OutputSink`]) and `cli.rs` (the report). The
//! store's unit tests are `store_tests.rs` (writing) and `recording_tests.rs` (reading)
//! with their fixtures in `store/tests_support.rs`; the integration tests share
//! `tests/support/mod.rs` (a recording group, a hand-written store, waiting).
#![forbid(unsafe_code)]

pub mod cli;
mod entry;
mod error;
mod feeds;
mod format;
mod key;
mod record;
mod replay;
mod store;
mod tap;

pub use entry::{ControlOutcome, Entry, EventCodec, PostcardCodec, Provenance, Utf8Codec};
pub use error::ReplayError;
pub use feeds::FeedCodecs;
pub use format::{
    EARLIER_HEADER_LEN, FORMAT_NAME, FORMAT_VERSION, FRAME_HEAD_LEN, HEADER_LEN, MAGIC,
    MAX_FRAME_LEN,
};
pub use key::{parse_stream_key, stream_key, StreamKey, StreamKeys};
pub use record::{
    RecordConfig, RecordedAdminReply, RecordedOutput, Recorder, RecordingHandle,
    ADMIN_REPLIES_FILE, JOURNAL_FILE, OUTPUTS_FILE, RECORDING_FILE,
};
pub use replay::{AdminReply, Loss, ProcessorReplay, Replay, Replayer};
pub use store::{
    Closing, Incomplete, RecordedStream, Recording, ReplayStore, SealedFile, StreamHandle,
};
pub use tap::{Clock, Collected, OutputSink};

#[cfg(test)]
mod recording_tests;
#[cfg(test)]
mod replay_tests;
#[cfg(test)]
mod store_tests;
