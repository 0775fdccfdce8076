//! The C-ABI boundary: `#[repr(C)]` types only, shared by the host and every plugin.
//!
//! # Rules
//! * **Nothing changes owner.** Text and bytes cross as borrowed `(ptr, len)` pairs
//!   ([`Str`], [`ByteSlice`]) valid only for the call; the receiver copies what it keeps.
//!   Objects cross as opaque handles freed by the side that made them (a plugin's
//!   source, sink or committer by its vtable's `destroy`; the host's output context
//!   by the host after `destroy`).
//! * **Errors** cross as text the receiving side copies: the caller passes a
//!   [`MessageOut`] (its own context and a callback), the callee calls it with borrowed
//!   text before it returns a failing [`Status`]. No message is ever allocated on one
//!   side and freed on the other.
//! * **Panics never unwind across.** Every `extern "C"` function on both sides runs its
//!   body under `catch_unwind`; a panic becomes [`Status::PANIC`] with its message.
//! * **The handshake.** The host first reads the [`PluginDeclaration`] header, whose
//!   layout never changes (checked by `static_assertions` below), then refuses the
//!   plugin unless the ABI version, the SDK version (major.minor), the target triple and
//!   the [`LAYOUT_FINGERPRINT`] agree. Only then does it read the kinds and call
//!   through the vtables.
//!
//! The fingerprint is a hash, computed at compile time, of the size, alignment and
//! field offsets of every struct below: a host and a plugin agree on it only when they
//! agree on every layout.

use std::ffi::c_void;
use std::mem::{align_of, offset_of, size_of};

use static_assertions::const_assert_eq;

/// `b"MONGOOSE"` as a little-endian `u64`: the first field of a declaration.
pub const MAGIC: u64 = u64::from_le_bytes(*b"MONGOOSE");

/// The version of this boundary. Bumped by any change a fingerprint cannot see (the
/// meaning of a field, a status code, a calling rule).
///
/// 2: `create` takes the config file's folder (`base_dir`) for the relative paths of a
/// plugin's settings.
///
/// 3: a [`HostOutput`] is counted ([`HostOutputVTable::retain`] and `release`): the host
/// keeps its context for as long as the plugin holds a reference, not only while the
/// source lives (a committer called after its source was destroyed may still use it);
/// the host output has `report_loss` (a source's known loss, such as an archive gap,
/// makes the feed not lossless); the source and sink vtables have `check` (a kind's
/// settings checked when the plugin is loaded, by `validate` and before `run` starts);
/// the host output has `saved_positions` (since 5: `consumer_positions`; what the feed's consumers saved with their
/// state, for a source to reconcile its own committed position with at start), and
/// `report_files` (a many-file source's files, for the feed's status).
///
/// 4: the source protocol as types. [`SourceVTable::start`] writes what the source
/// registers at start into a [`SourceStartRef`] (its epoch, PAUSE by default, its
/// committer), which the host's driver applies; the host output no longer has
/// `set_pause_by_default` nor `acknowledge_with`, and its `poll_acknowledgements` is
/// [`HostOutputVTable::commit_processed`] (what a source calls before it gives input
/// up; only the host's driver polls around the cycles).
///
/// 5: one rule for where a feed resumes. The host output's `saved_positions` is
/// [`HostOutputVTable::consumer_positions`]: every consumer of the feed, each with what
/// it holds ([`HELD_SAVED`], [`HELD_NOTHING_SAVED`], [`HELD_WRITTEN`],
/// [`HELD_NOTHING`]), for [`mongoose_core::resume::resume`].
pub const ABI_VERSION: u32 = 5;

/// The symbol every plugin exports: `extern "C" fn() -> *const PluginDeclaration`.
pub const DECLARATION_SYMBOL: &[u8] = b"mongoose_plugin_declaration\0";

/// The SDK version this crate is (`CARGO_PKG_VERSION`).
pub const SDK_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The target triple this crate was compiled for.
pub const TARGET: &str = env!("MONGOOSE_PLUGIN_TARGET");

/// Borrowed UTF-8 text: valid for the call it is passed to (or, in a declaration, for
/// as long as the library is loaded). `ptr` may be null only when `len` is 0.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Str {
    /// The first byte.
    pub ptr: *const u8,
    /// The length in bytes.
    pub len: usize,
}

impl Str {
    /// Borrows `text`.
    pub const fn new(text: &str) -> Str {
        Str {
            ptr: text.as_ptr(),
            len: text.len(),
        }
    }

    /// No text (a null pointer): "none" where an optional text is expected.
    pub const NONE: Str = Str {
        ptr: std::ptr::null(),
        len: 0,
    };

    /// True for [`Str::NONE`].
    pub fn is_none(&self) -> bool {
        self.ptr.is_null()
    }

    /// The text, lossily decoded (a plugin that sends bad UTF-8 gets replacement
    /// characters, never undefined behaviour).
    ///
    /// # Safety
    /// `ptr` must point to `len` readable bytes for the lifetime `'a`.
    pub unsafe fn as_str<'a>(&self) -> std::borrow::Cow<'a, str> {
        if self.ptr.is_null() || self.len == 0 {
            return std::borrow::Cow::Borrowed("");
        }
        // SAFETY: the caller guarantees `len` readable bytes at `ptr` for 'a.
        let bytes = unsafe { std::slice::from_raw_parts(self.ptr, self.len) };
        String::from_utf8_lossy(bytes)
    }
}

/// Borrowed bytes, valid for the call they are passed to.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ByteSlice {
    /// The first byte (dangling or null when `len` is 0).
    pub ptr: *const u8,
    /// The length.
    pub len: usize,
}

impl ByteSlice {
    /// Borrows `bytes`.
    pub fn new(bytes: &[u8]) -> ByteSlice {
        ByteSlice {
            ptr: bytes.as_ptr(),
            len: bytes.len(),
        }
    }

    /// The bytes.
    ///
    /// # Safety
    /// `ptr` must point to `len` readable bytes for the lifetime `'a`.
    pub unsafe fn as_slice<'a>(&self) -> &'a [u8] {
        if self.ptr.is_null() || self.len == 0 {
            return &[];
        }
        // SAFETY: the caller guarantees `len` readable bytes at `ptr` for 'a.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// What a call across the boundary returns. A plain `u32` (never a Rust enum: a value
/// the other side does not know must not be undefined behaviour).
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Status(pub u32);

impl Status {
    /// Done.
    pub const OK: Status = Status(0);
    /// Failed; the message was written to the call's [`MessageOut`].
    pub const ERROR: Status = Status(1);
    /// The callee panicked (caught at the boundary); the message was written to the
    /// call's [`MessageOut`]. The object that panicked is not called again (but for its
    /// `destroy`).
    pub const PANIC: Status = Status(2);
}

/// The result of the host's `try_publish`.
pub mod publish {
    /// The item was published.
    pub const PUBLISHED: u32 = 0;
    /// The feed cannot take it now: keep it, read nothing more, offer it next cycle.
    pub const PAUSED: u32 = 1;
    /// A nested publish: keep it and offer it later (not a pause).
    pub const RETRY: u32 = 2;
    /// The host could not publish (it panicked): keep the item as for a pause.
    pub const FAILED: u32 = 3;
}

/// The result of the host's `try_publish_batch` (`mongoose_core::BatchEnd`).
pub mod batch {
    /// The plugin had no more: everything it gave was published.
    pub const EXHAUSTED: u32 = 0;
    /// The feed cannot take more now; every item pulled was published.
    pub const PAUSED: u32 = 1;
    /// The last item pulled was not published (the feed is paused): keep it.
    pub const RETURNED_PAUSED: u32 = 2;
    /// The last item pulled was not published (a nested publish): keep it.
    pub const RETURNED_RETRY: u32 = 3;
    /// The host panicked (a host bug): the plugin keeps the last item pulled, which
    /// may then be published twice, never lost.
    pub const FAILED: u32 = 4;
}

/// [`mongoose_core::SourceState`] as a number.
pub mod state {
    /// Starting.
    pub const STARTING: u32 = 0;
    /// Behind.
    pub const BEHIND: u32 = 1;
    /// Caught up.
    pub const CAUGHT_UP: u32 = 2;
    /// End of stream.
    pub const END_OF_STREAM: u32 = 3;
}

/// A log level of [`HostOutputVTable::log`].
pub mod level {
    /// Something the operator should know: the source goes on.
    pub const WARN: u32 = 1;
    /// A normal event.
    pub const INFO: u32 = 2;
}

/// [`mongoose_core::sink::SinkOutcome`]'s variant as a number.
pub mod outcome {
    /// Published.
    pub const PUBLISHED: u32 = 0;
    /// Verified not published.
    pub const NOT_PUBLISHED: u32 = 1;
    /// Uncertain.
    pub const UNCERTAIN: u32 = 2;
}

/// Whether a declared kind is a source or a sink.
pub mod role {
    /// A source kind (`[[feeds]] source = "<kind>"`).
    pub const SOURCE: u32 = 1;
    /// A sink kind (`[[sinks]] kind = "<kind>"`).
    pub const SINK: u32 = 2;
}

/// Where a callee writes an error message: it calls `write(context, text)` (with text
/// borrowed for that call) before it returns a failing [`Status`]; the caller copies it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MessageOut {
    /// The caller's context.
    pub context: *mut c_void,
    /// Copies `text` into the caller's context.
    pub write: unsafe extern "C" fn(context: *mut c_void, text: Str),
}

/// The header a plugin's [`DECLARATION_SYMBOL`] returns. Its layout never changes: the
/// host reads `magic`, `abi_version`, the versions, the target and the fingerprint
/// before anything else, whatever ABI the plugin was built for.
#[repr(C)]
#[derive(Debug)]
pub struct PluginDeclaration {
    /// [`MAGIC`].
    pub magic: u64,
    /// The plugin's [`ABI_VERSION`].
    pub abi_version: u32,
    /// Zero.
    pub reserved: u32,
    /// The `mongoose-plugin` version the plugin was built with.
    pub sdk_version: Str,
    /// The target triple the plugin was built for.
    pub target: Str,
    /// The plugin's [`LAYOUT_FINGERPRINT`].
    pub layout_fingerprint: u64,
    /// The plugin's name.
    pub name: Str,
    /// The plugin's version.
    pub version: Str,
    /// The declared kinds (read only after the handshake passed).
    pub kinds: *const KindDeclaration,
    /// How many.
    pub kind_count: usize,
    /// Gives the plugin the host's [`PluginLogFn`], for the events it raises outside
    /// any call of the host's. The host calls it once, after the handshake passed.
    pub set_log: unsafe extern "C" fn(log: PluginLogFn),
}

/// The host's log for a plugin's events raised outside any call of the host's (on the
/// plugin's own threads, librdkafka's for one): `level` is a [`level`] code, `plugin`
/// the plugin's name. Callable from any thread for as long as the library is loaded.
pub type PluginLogFn = unsafe extern "C" fn(plugin: Str, level: u32, message: Str);

/// One kind a plugin declares.
#[repr(C)]
#[derive(Debug)]
pub struct KindDeclaration {
    /// The kind's name (`[[feeds]] source = ...` or `[[sinks]] kind = ...`).
    pub name: Str,
    /// [`role::SOURCE`] or [`role::SINK`].
    pub role: u32,
    /// The source vtable (a source kind), else null.
    pub source: *const SourceVTable,
    /// The sink vtable (a sink kind), else null.
    pub sink: *const SinkVTable,
}

/// A plugin source, as the host calls it. A `handle` is what `create` gave; every
/// call but `create` runs on the source's agent thread.
#[repr(C)]
#[derive(Debug)]
pub struct SourceVTable {
    /// The constructor: builds a source of kind `kind` for feed `name` from `config`
    /// (TOML text of the feed's settings table; its relative paths resolve against
    /// `base_dir`, the config file's folder, empty for the working directory),
    /// publishing into `host`, and writes its handle into `*handle`. `host`'s context
    /// stays valid until `destroy` returns.
    pub create: unsafe extern "C" fn(
        kind: Str,
        name: Str,
        config: Str,
        base_dir: Str,
        host: HostOutput,
        handle: *mut *mut c_void,
        error: MessageOut,
    ) -> Status,
    /// `EventSource::start`: on [`Status::OK`] writes what the source registers at
    /// start into `*started` (the host owns its committer from then on).
    pub start: unsafe extern "C" fn(
        handle: *mut c_void,
        started: *mut SourceStartRef,
        error: MessageOut,
    ) -> Status,
    /// `EventSource::do_work`: writes the work done into `*work`.
    pub do_work:
        unsafe extern "C" fn(handle: *mut c_void, work: *mut usize, error: MessageOut) -> Status,
    /// `EventSource::stop`.
    pub stop: unsafe extern "C" fn(handle: *mut c_void, error: MessageOut) -> Status,
    /// Frees the source (the plugin's allocation). Called once, last.
    pub destroy: unsafe extern "C" fn(handle: *mut c_void),
    /// Checks the settings of a source of kind `kind` (as `create` takes them) without
    /// opening or creating anything: [`Status::OK`], or [`Status::ERROR`] after writing
    /// the settings key at fault to `key` (nothing for the table as a whole) and what is
    /// wrong to `error`.
    pub check: CheckFn,
}

/// A kind's settings check (see [`SourceVTable::check`]).
pub type CheckFn = unsafe extern "C" fn(
    kind: Str,
    config: Str,
    base_dir: Str,
    key: MessageOut,
    error: MessageOut,
) -> Status;

/// What a plugin source registers at start (`mongoose_core::SourceStart`), written by
/// [`SourceVTable::start`].
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SourceStartRef {
    /// The epoch of the positions published from the start.
    pub epoch: u64,
    /// Its committer; a null `handle` for a source without one.
    pub committer: CommitterRef,
    /// PAUSE is the feed's default policy: 1 true, 0 false.
    pub pause_by_default: u8,
    /// Zero.
    pub reserved: [u8; 7],
}

impl SourceStartRef {
    /// Nothing registered yet: epoch 0, no committer, no PAUSE default.
    pub const EMPTY: SourceStartRef = SourceStartRef {
        epoch: 0,
        committer: CommitterRef {
            handle: std::ptr::null_mut(),
            vtable: std::ptr::null(),
        },
        pause_by_default: 0,
        reserved: [0; 7],
    };
}

/// A plugin's committer (`SourceCommitter<PositionValue>`), handed to the host in the
/// [`SourceStartRef`] its source's `start` writes. The host owns it from then on and
/// frees it with `destroy`.
#[repr(C)]
#[derive(Debug)]
pub struct CommitterVTable {
    /// `SourceCommitter::acknowledged`.
    pub acknowledged: unsafe extern "C" fn(
        handle: *mut c_void,
        sequence: u64,
        epoch: u64,
        lane: u32,
        offset: u64,
        error: MessageOut,
    ) -> Status,
    /// `SourceCommitter::commit`.
    pub commit: unsafe extern "C" fn(handle: *mut c_void, error: MessageOut) -> Status,
    /// `SourceCommitter::commits_after_stop`: 1 true, 0 false.
    pub commits_after_stop: unsafe extern "C" fn(handle: *mut c_void) -> u8,
    /// Frees the committer (the plugin's allocation).
    pub destroy: unsafe extern "C" fn(handle: *mut c_void),
}

/// A committer crossing to the host: its handle and vtable.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CommitterRef {
    /// The plugin's committer.
    pub handle: *mut c_void,
    /// Its functions (static in the plugin).
    pub vtable: *const CommitterVTable,
}

/// One item a plugin hands the host during a batch ([`PullFn`]): the bytes are
/// borrowed until the next pull or the end of the batch.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ItemRef {
    /// The item's bytes.
    pub bytes: ByteSlice,
    /// Its position's offset.
    pub offset: u64,
    /// Its position's lane.
    pub lane: u32,
    /// Zero.
    pub reserved: u32,
}

/// Pulls the next item of a batch into `*item`: 1 when it did, 0 when the plugin has
/// no more. Called by the host only while it can take the item.
pub type PullFn = unsafe extern "C" fn(context: *mut c_void, item: *mut ItemRef) -> u8;

/// The host's side of a plugin source: the feed it publishes into.
#[repr(C)]
#[derive(Debug)]
pub struct HostOutputVTable {
    /// Copies `item` and publishes it at `(lane, offset)`; returns a [`publish`] code.
    pub try_publish: unsafe extern "C" fn(
        context: *const c_void,
        item: ByteSlice,
        lane: u32,
        offset: u64,
    ) -> u32,
    /// `SourceOutput::try_publish_batch`: pulls items with `pull(pull_context, ...)`
    /// while the feed can take them, copying each at once; returns a [`batch`] code.
    pub try_publish_batch: unsafe extern "C" fn(
        context: *const c_void,
        pull: PullFn,
        pull_context: *mut c_void,
    ) -> u32,
    /// A push publish (no position); [`Status::ERROR`] when refused, with the message.
    pub publish:
        unsafe extern "C" fn(context: *const c_void, item: ByteSlice, error: MessageOut) -> Status,
    /// `SourceOutput::cache`.
    pub cache:
        unsafe extern "C" fn(context: *const c_void, item: ByteSlice, lane: u32, offset: u64),
    /// `SourceOutput::filtered`.
    pub filtered: unsafe extern "C" fn(context: *const c_void, lane: u32, offset: u64, reason: Str),
    /// `SourceOutput::set_epoch`.
    pub set_epoch: unsafe extern "C" fn(context: *const c_void, epoch: u64),
    /// `SourceOutput::report_state` with a [`state`] code; `detail` may be [`Str::NONE`].
    pub report_state: unsafe extern "C" fn(context: *const c_void, state: u32, detail: Str),
    /// `SourceOutput::set_unterminated_bytes`.
    pub set_unterminated_bytes: unsafe extern "C" fn(context: *const c_void, bytes: u64),
    /// `SourceOutput::commit_processed`: commits what was processed, now, for a source
    /// that must do so before it gives part of its input up (a Kafka partition revoked
    /// inside its poll); the host's driver commits around every cycle anyway. Returns
    /// the number of items acknowledged.
    pub commit_processed: unsafe extern "C" fn(context: *const c_void) -> u64,
    /// Writes `message` to the host's log at a [`level`]. The SDK also forwards a
    /// plugin's own `tracing` events (INFO and above) through it, while the host calls
    /// into the plugin's source on that thread.
    pub log: unsafe extern "C" fn(context: *const c_void, level: u32, message: Str),
    /// Takes one more reference on the context: it stays valid (and every function of
    /// this vtable callable with it) until the matching [`HostOutputVTable::release`].
    /// Callable from any thread.
    pub retain: unsafe extern "C" fn(context: *const c_void),
    /// Gives back a reference taken with [`HostOutputVTable::retain`]; the context may be
    /// freed by it. Callable from any thread.
    pub release: unsafe extern "C" fn(context: *const c_void),
    /// `SourceOutput::report_loss`: `bytes` is the bytes lost when `known` is 1.
    pub report_loss: unsafe extern "C" fn(context: *const c_void, what: Str, bytes: u64, known: u8),
    /// `SourceOutput::consumer_positions`: calls `each(each_context, ...)` once per
    /// consumer of the feed, with what it holds, before it returns.
    pub consumer_positions: unsafe extern "C" fn(
        context: *const c_void,
        each: ConsumerPositionFn,
        each_context: *mut c_void,
    ),
    /// `SourceOutput::report_files`: `count` files at `files` (borrowed for the call).
    pub report_files:
        unsafe extern "C" fn(context: *const c_void, files: *const FileLagRef, count: usize),
}

/// One input file of a many-file source (`mongoose_core::FileLag`), for the feed's
/// status ([`HostOutputVTable::report_files`]).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct FileLagRef {
    /// The file's path.
    pub path: Str,
    /// The offset committed (or read).
    pub committed: u64,
    /// Its size when last looked at.
    pub size: u64,
    /// `size - committed` (0 when shorter).
    pub lag: u64,
    /// The file's lane.
    pub lane: u32,
    /// Zero.
    pub reserved: u32,
}

/// `held` of a [`ConsumerPositionFn`]: the consumer's saved state holds nothing of the
/// feed (`mongoose_core::Held::Saved(None)`).
pub const HELD_NOTHING_SAVED: u8 = 0;
/// `held`: its saved state holds `(epoch, lane, offset)` (`Held::Saved(Some(..))`).
pub const HELD_SAVED: u8 = 1;
/// `held`: its sink holds the outputs up to `(epoch, lane, offset)` (`Held::Written`).
pub const HELD_WRITTEN: u8 = 2;
/// `held`: it keeps no position of its own (`Held::Nothing`).
pub const HELD_NOTHING: u8 = 3;

/// One consumer's hold of the feed ([`HostOutputVTable::consumer_positions`]): its name
/// (`group/processor`), what it holds (`held`: [`HELD_SAVED`] and the others), and, for
/// [`HELD_SAVED`] and [`HELD_WRITTEN`], the `(epoch, lane, offset)` it holds.
pub type ConsumerPositionFn = unsafe extern "C" fn(
    context: *mut c_void,
    consumer: Str,
    held: u8,
    epoch: u64,
    lane: u32,
    offset: u64,
);

/// The feed a plugin source publishes into: the host's context and functions.
///
/// Lifetime: the value given to a source's `create` is valid until that source's
/// `destroy` returns. To use it longer (a committer that outlives its source, a thread
/// of the plugin's own), take a reference with [`HostOutputVTable::retain`] and give it
/// back with `release`: the context stays valid in between. After the source was
/// destroyed the host's functions are still safe to call, but the feed takes nothing
/// more: a publish is refused ([`publish::PAUSED`] or [`Status::ERROR`]), the other
/// calls do nothing, and `log` still logs. The SDK's `PluginOutput` does all of this
/// (its `Clone` retains, its `Drop` releases).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct HostOutput {
    /// The host's context.
    pub context: *const c_void,
    /// The host's functions.
    pub vtable: *const HostOutputVTable,
}

/// An output's key, borrowed (`mongoose_core::sink::OutputKey`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct KeyRef {
    /// The input's feed.
    pub feed: Str,
    /// The input's epoch.
    pub epoch: u64,
    /// The input's position offset.
    pub position: u64,
    /// The writer that made the output (`OutputKey::writer`; the field keeps its
    /// name of ABI version 1, which called it the processor generation).
    pub generation: u64,
    /// The input's lane.
    pub lane: u32,
    /// The output's index within the delivery.
    pub index: u32,
}

/// An output, borrowed for the `publish` call (`mongoose_core::sink::Output`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct OutputRef {
    /// Its key.
    pub key: KeyRef,
    /// Its payload.
    pub payload: ByteSlice,
    /// Earlier attempts.
    pub attempt: u32,
    /// Zero.
    pub reserved: u32,
}

/// An outcome a plugin sink writes into the host's array; `evidence` is borrowed from
/// the plugin until its next call on that sink (the host copies it at once).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct OutcomeRef {
    /// An [`outcome`] code.
    pub kind: u32,
    /// For NOT_PUBLISHED: 1 when another attempt may succeed.
    pub retryable: u32,
    /// The evidence.
    pub evidence: Str,
}

/// A plugin sink, as the host calls it (on the sink's runner thread).
#[repr(C)]
#[derive(Debug)]
pub struct SinkVTable {
    /// The constructor: builds a sink of kind `kind` named `name` from `config` (TOML
    /// text; relative paths resolve against `base_dir`, as a source's) and writes its
    /// handle into `*handle`.
    pub create: unsafe extern "C" fn(
        kind: Str,
        name: Str,
        config: Str,
        base_dir: Str,
        handle: *mut *mut c_void,
        error: MessageOut,
    ) -> Status,
    /// `Sink::publish`: `outputs` and `outcomes` both hold `count` entries; the plugin
    /// writes one outcome per output, in order.
    pub publish: unsafe extern "C" fn(
        handle: *mut c_void,
        outputs: *const OutputRef,
        outcomes: *mut OutcomeRef,
        count: usize,
        error: MessageOut,
    ) -> Status,
    /// `Sink::verify`: writes 1 into `*found` and the outcome into `*outcome` when the
    /// sink can tell, 0 when it cannot.
    pub verify: unsafe extern "C" fn(
        handle: *mut c_void,
        key: *const KeyRef,
        outcome: *mut OutcomeRef,
        found: *mut u8,
        error: MessageOut,
    ) -> Status,
    /// Frees the sink (the plugin's allocation).
    pub destroy: unsafe extern "C" fn(handle: *mut c_void),
    /// Checks the settings of a sink of kind `kind`, as [`SourceVTable::check`].
    pub check: CheckFn,
}

// The header never changes: these pin it on the 64-bit targets the server runs on.
#[cfg(target_pointer_width = "64")]
mod fixed {
    use super::*;
    const_assert_eq!(size_of::<Str>(), 16);
    const_assert_eq!(size_of::<PluginDeclaration>(), 112);
    const_assert_eq!(offset_of!(PluginDeclaration, magic), 0);
    const_assert_eq!(offset_of!(PluginDeclaration, abi_version), 8);
    const_assert_eq!(offset_of!(PluginDeclaration, sdk_version), 16);
    const_assert_eq!(offset_of!(PluginDeclaration, target), 32);
    const_assert_eq!(offset_of!(PluginDeclaration, layout_fingerprint), 48);
    const_assert_eq!(offset_of!(PluginDeclaration, name), 56);
    const_assert_eq!(offset_of!(PluginDeclaration, version), 72);
    const_assert_eq!(size_of::<Status>(), 4);
}

/// FNV-1a over `words`, at compile time.
const fn fnv1a(words: &[usize]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut index = 0;
    while index < words.len() {
        let mut word = words[index] as u64;
        let mut byte = 0;
        while byte < 8 {
            hash ^= word & 0xff;
            hash = hash.wrapping_mul(0x0100_0000_01b3);
            word >>= 8;
            byte += 1;
        }
        index += 1;
    }
    hash
}

/// Size, alignment and field offsets of every shared struct, in a fixed order.
const LAYOUT: &[usize] = &[
    size_of::<Str>(),
    align_of::<Str>(),
    offset_of!(Str, len),
    size_of::<ByteSlice>(),
    offset_of!(ByteSlice, len),
    size_of::<Status>(),
    size_of::<MessageOut>(),
    offset_of!(MessageOut, write),
    size_of::<PluginDeclaration>(),
    align_of::<PluginDeclaration>(),
    offset_of!(PluginDeclaration, kinds),
    offset_of!(PluginDeclaration, kind_count),
    offset_of!(PluginDeclaration, set_log),
    size_of::<KindDeclaration>(),
    offset_of!(KindDeclaration, role),
    offset_of!(KindDeclaration, source),
    offset_of!(KindDeclaration, sink),
    size_of::<SourceVTable>(),
    offset_of!(SourceVTable, start),
    offset_of!(SourceVTable, do_work),
    offset_of!(SourceVTable, stop),
    offset_of!(SourceVTable, destroy),
    offset_of!(SourceVTable, check),
    size_of::<CommitterVTable>(),
    offset_of!(CommitterVTable, commit),
    offset_of!(CommitterVTable, commits_after_stop),
    offset_of!(CommitterVTable, destroy),
    size_of::<CommitterRef>(),
    offset_of!(CommitterRef, vtable),
    size_of::<SourceStartRef>(),
    offset_of!(SourceStartRef, committer),
    offset_of!(SourceStartRef, pause_by_default),
    size_of::<HostOutputVTable>(),
    offset_of!(HostOutputVTable, try_publish_batch),
    offset_of!(HostOutputVTable, publish),
    offset_of!(HostOutputVTable, cache),
    offset_of!(HostOutputVTable, filtered),
    offset_of!(HostOutputVTable, set_epoch),
    offset_of!(HostOutputVTable, report_state),
    offset_of!(HostOutputVTable, set_unterminated_bytes),
    offset_of!(HostOutputVTable, commit_processed),
    offset_of!(HostOutputVTable, log),
    offset_of!(HostOutputVTable, retain),
    offset_of!(HostOutputVTable, release),
    offset_of!(HostOutputVTable, report_loss),
    offset_of!(HostOutputVTable, consumer_positions),
    offset_of!(HostOutputVTable, report_files),
    size_of::<FileLagRef>(),
    offset_of!(FileLagRef, committed),
    offset_of!(FileLagRef, size),
    offset_of!(FileLagRef, lag),
    offset_of!(FileLagRef, lane),
    size_of::<ItemRef>(),
    offset_of!(ItemRef, offset),
    offset_of!(ItemRef, lane),
    size_of::<HostOutput>(),
    offset_of!(HostOutput, vtable),
    size_of::<KeyRef>(),
    offset_of!(KeyRef, epoch),
    offset_of!(KeyRef, position),
    offset_of!(KeyRef, generation),
    offset_of!(KeyRef, lane),
    offset_of!(KeyRef, index),
    size_of::<OutputRef>(),
    offset_of!(OutputRef, payload),
    offset_of!(OutputRef, attempt),
    size_of::<OutcomeRef>(),
    offset_of!(OutcomeRef, retryable),
    offset_of!(OutcomeRef, evidence),
    size_of::<SinkVTable>(),
    offset_of!(SinkVTable, publish),
    offset_of!(SinkVTable, verify),
    offset_of!(SinkVTable, destroy),
    offset_of!(SinkVTable, check),
];

/// The hash of every shared struct's layout (see the module documentation).
pub const LAYOUT_FINGERPRINT: u64 = fnv1a(LAYOUT);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fingerprint_changes_with_any_layout_number() {
        let mut changed = LAYOUT.to_vec();
        changed[5] += 8;
        assert_ne!(fnv1a(&changed), LAYOUT_FINGERPRINT);
        assert_eq!(fnv1a(LAYOUT), LAYOUT_FINGERPRINT);
    }

    #[test]
    fn the_magic_spells_mongoose() {
        assert_eq!(&MAGIC.to_le_bytes(), b"MONGOOSE");
        assert!(!TARGET.is_empty());
    }
}
