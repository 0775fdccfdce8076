//! The host's output vtable: the callbacks a plugin source publishes through, over a
//! counted host context.

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, RwLock};

use bytes::{Bytes, BytesMut};
use mongoose_core::{BatchEnd, Epoch, PositionValue, SourceOutput, SourceState, TryPublish};
use tracing::error;

use crate::abi::{self, ByteSlice, HostOutputVTable, ItemRef, MessageOut, Status, Str};
use crate::guest::panic_message;

use super::PluginLibrary;

/// Turns the bytes a plugin source publishes into the feed's item type: the host's
/// codec hook. The bytes are the host's own copy (chunked: no allocation per item).
pub trait ItemCodec<I>: Send + Sync {
    /// The item of `bytes`.
    fn decode(&self, bytes: Bytes) -> I;
}

impl<I, F: Fn(Bytes) -> I + Send + Sync> ItemCodec<I> for F {
    fn decode(&self, bytes: Bytes) -> I {
        self(bytes)
    }
}

/// How much a source's copy buffer grows at a time: items are copied into one chunk
/// until it is full, so copying allocates once per chunk, not per item.
const COPY_CHUNK: usize = 64 * 1024;

/// The host's output context a plugin source publishes through. It is counted (an
/// `Arc`): the source's proxy holds one reference and the plugin one per
/// `PluginOutput` it keeps (`retain`/`release`), so a committer or a thread of the
/// plugin that outlives the source never reaches freed memory. When the source is
/// destroyed the feed is let go (`output` becomes `None`): later publishes are refused,
/// the other calls do nothing, logging still works.
pub(super) struct HostContext<I> {
    pub(super) output: RwLock<Option<Arc<dyn SourceOutput<I, PositionValue>>>>,
    pub(super) codec: Arc<dyn ItemCodec<I>>,
    pub(super) buffer: Mutex<BytesMut>,
    pub(super) vtable: HostOutputVTable,
    pub(super) library: Arc<PluginLibrary>,
    pub(super) feed: String,
}

impl<I> HostContext<I> {
    /// Runs `f` with the feed, or gives `closed` once the source was destroyed.
    pub(super) fn with_output<R>(
        &self,
        closed: R,
        f: impl FnOnce(&dyn SourceOutput<I, PositionValue>) -> R,
    ) -> R {
        let output = self
            .output
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match output.as_deref() {
            Some(output) => f(output),
            None => closed,
        }
    }

    /// Lets the feed go: the source was destroyed.
    pub(super) fn close(&self) {
        let taken = self
            .output
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        drop(taken);
    }

    fn buffer(&self) -> std::sync::MutexGuard<'_, BytesMut> {
        self.buffer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn copy(&self, bytes: &[u8]) -> Bytes {
        copy_into(&mut self.buffer(), bytes)
    }
}

/// Copies `bytes` into the chunk `buffer` (a new chunk when it is full) and splits
/// them off, frozen.
fn copy_into(buffer: &mut BytesMut, bytes: &[u8]) -> Bytes {
    if buffer.capacity() - buffer.len() < bytes.len() {
        // a new chunk: the items split off the old one keep it alive
        *buffer = BytesMut::with_capacity(COPY_CHUNK.max(bytes.len()));
    }
    buffer.extend_from_slice(bytes);
    buffer.split().freeze()
}

/// The host context behind a plugin's pointer.
///
/// # Safety
/// `context` is a `HostContext<I>` alive for the call: the plugin holds a reference (the
/// one its source was created with, while the source lives, or one it retained).
unsafe fn host_context<'a, I>(context: *const c_void) -> &'a HostContext<I> {
    // SAFETY: see the function's contract.
    unsafe { &*(context as *const HostContext<I>) }
}

/// Runs a host callback's body, logging a panic instead of unwinding into the plugin.
fn host_guard<T>(feed_of: impl FnOnce() -> String, fallback: T, body: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(value) => value,
        Err(payload) => {
            error!(feed = %feed_of(), panic = %panic_message(&*payload), "the host panicked in a plugin source's callback (a host bug): the call failed");
            fallback
        }
    }
}

/// [`abi::PluginLogFn`]: a plugin's event raised outside the host's calls (on a thread
/// of the plugin's own), logged with the plugin's name.
pub(super) unsafe extern "C" fn plugin_log(plugin: Str, level: u32, message: Str) {
    host_guard(String::new, (), || {
        // SAFETY: the plugin passes strings valid for the call.
        let (plugin, message) = unsafe { (plugin.as_str(), message.as_str()) };
        if level == abi::level::WARN {
            tracing::warn!(plugin = %plugin, "{message}");
        } else {
            tracing::info!(plugin = %plugin, "{message}");
        }
    })
}

pub(super) unsafe extern "C" fn host_try_publish<I: 'static>(
    context: *const c_void,
    item: ByteSlice,
    lane: u32,
    offset: u64,
) -> u32 {
    host_guard(String::new, abi::publish::FAILED, || {
        // SAFETY: the plugin calls with our context and bytes valid for the call.
        let (context, bytes) = unsafe { (host_context::<I>(context), item.as_slice()) };
        context.with_output(abi::publish::PAUSED, |output| {
            let item = context.codec.decode(context.copy(bytes));
            match output.try_publish(item, PositionValue { lane, offset }) {
                TryPublish::Published => abi::publish::PUBLISHED,
                TryPublish::Paused(_) => abi::publish::PAUSED,
                TryPublish::Retry(_) => abi::publish::RETRY,
            }
        })
    })
}

pub(super) unsafe extern "C" fn host_try_publish_batch<I: 'static>(
    context: *const c_void,
    pull: abi::PullFn,
    pull_context: *mut c_void,
) -> u32 {
    host_guard(String::new, abi::batch::FAILED, || {
        // SAFETY: the plugin calls with our context.
        let context = unsafe { host_context::<I>(context) };
        let mut buffer = context.buffer();
        let mut next = || {
            let mut item = ItemRef {
                bytes: ByteSlice::new(&[]),
                offset: 0,
                lane: 0,
                reserved: 0,
            };
            // SAFETY: the plugin's pull function and context, valid for this batch; the
            // item's bytes are borrowed until the next pull, and copied now.
            if unsafe { pull(pull_context, &mut item) } == 0 {
                return None;
            }
            // SAFETY: as above.
            let bytes = copy_into(&mut buffer, unsafe { item.bytes.as_slice() });
            Some((
                context.codec.decode(bytes),
                PositionValue {
                    lane: item.lane,
                    offset: item.offset,
                },
            ))
        };
        // nothing is pulled once the source was destroyed
        context.with_output(abi::batch::PAUSED, |output| {
            match output.try_publish_batch(&mut next) {
                BatchEnd::Exhausted => abi::batch::EXHAUSTED,
                BatchEnd::Paused => abi::batch::PAUSED,
                BatchEnd::Returned(_, _, mongoose_core::Refusal::Paused) => {
                    abi::batch::RETURNED_PAUSED
                }
                BatchEnd::Returned(_, _, mongoose_core::Refusal::Retry) => {
                    abi::batch::RETURNED_RETRY
                }
            }
        })
    })
}

pub(super) unsafe extern "C" fn host_publish<I: 'static>(
    context: *const c_void,
    item: ByteSlice,
    error: MessageOut,
) -> Status {
    host_guard(String::new, Status::PANIC, || {
        // SAFETY: as in `host_try_publish`.
        let (context, bytes) = unsafe { (host_context::<I>(context), item.as_slice()) };
        let refusal = context.with_output(
            Some("the feed's source was destroyed: it takes nothing more".to_owned()),
            |output| {
                let item = context.codec.decode(context.copy(bytes));
                output
                    .publish(item)
                    .err()
                    .map(|refused| format!("{:?}: {}", refused.kind, refused.reason))
            },
        );
        match refusal {
            None => Status::OK,
            Some(text) => {
                // SAFETY: the plugin's callback, valid for the call.
                unsafe { (error.write)(error.context, Str::new(&text)) };
                Status::ERROR
            }
        }
    })
}

pub(super) unsafe extern "C" fn host_cache<I: 'static>(
    context: *const c_void,
    item: ByteSlice,
    lane: u32,
    offset: u64,
) {
    host_guard(String::new, (), || {
        // SAFETY: as in `host_try_publish`.
        let (context, bytes) = unsafe { (host_context::<I>(context), item.as_slice()) };
        context.with_output((), |output| {
            let item = context.codec.decode(context.copy(bytes));
            output.cache(item, PositionValue { lane, offset });
        });
    })
}

pub(super) unsafe extern "C" fn host_filtered<I: 'static>(
    context: *const c_void,
    lane: u32,
    offset: u64,
    reason: Str,
) {
    host_guard(String::new, (), || {
        // SAFETY: as in `host_try_publish`.
        let (context, reason) = unsafe { (host_context::<I>(context), reason.as_str()) };
        context.with_output((), |output| {
            output.filtered(PositionValue { lane, offset }, &reason)
        });
    })
}

pub(super) unsafe extern "C" fn host_set_epoch<I: 'static>(context: *const c_void, epoch: u64) {
    host_guard(String::new, (), || {
        // SAFETY: as in `host_try_publish`.
        unsafe { host_context::<I>(context) }
            .with_output((), |output| output.set_epoch(Epoch(epoch)));
    })
}

pub(super) unsafe extern "C" fn host_report_state<I: 'static>(
    context: *const c_void,
    state: u32,
    detail: Str,
) {
    host_guard(String::new, (), || {
        // SAFETY: as in `host_try_publish`.
        let context = unsafe { host_context::<I>(context) };
        let state = match state {
            abi::state::STARTING => SourceState::Starting,
            abi::state::CAUGHT_UP => SourceState::CaughtUp,
            abi::state::END_OF_STREAM => SourceState::EndOfStream,
            _ => SourceState::Behind,
        };
        // SAFETY: borrowed for the call.
        let detail = (!detail.is_none()).then(|| unsafe { detail.as_str() });
        context.with_output((), |output| output.report_state(state, detail.as_deref()));
    })
}

pub(super) unsafe extern "C" fn host_set_unterminated_bytes<I: 'static>(
    context: *const c_void,
    bytes: u64,
) {
    host_guard(String::new, (), || {
        // SAFETY: as in `host_try_publish`.
        unsafe { host_context::<I>(context) }
            .with_output((), |output| output.set_unterminated_bytes(bytes));
    })
}

pub(super) unsafe extern "C" fn host_report_loss<I: 'static>(
    context: *const c_void,
    what: Str,
    bytes: u64,
    known: u8,
) {
    host_guard(String::new, (), || {
        // SAFETY: as in `host_try_publish`; `what` is borrowed for the call.
        let (context, what) = unsafe { (host_context::<I>(context), what.as_str()) };
        context.with_output((), |output| {
            output.report_loss(&what, (known != 0).then_some(bytes))
        });
    })
}

pub(super) unsafe extern "C" fn host_consumer_positions<I: 'static>(
    context: *const c_void,
    each: abi::ConsumerPositionFn,
    each_context: *mut c_void,
) {
    host_guard(String::new, (), || {
        // SAFETY: as in `host_try_publish`.
        let context = unsafe { host_context::<I>(context) };
        for position in context.with_output(Vec::new(), |output| output.consumer_positions()) {
            use mongoose_core::Held;
            let (saved, epoch, lane, offset) = match position.held {
                Held::Saved(Some((epoch, position))) => {
                    (abi::HELD_SAVED, epoch.0, position.lane, position.offset)
                }
                Held::Saved(None) => (abi::HELD_NOTHING_SAVED, 0, 0, 0),
                Held::Written((epoch, position)) => {
                    (abi::HELD_WRITTEN, epoch.0, position.lane, position.offset)
                }
                Held::Nothing => (abi::HELD_NOTHING, 0, 0, 0),
            };
            // SAFETY: the plugin's callback and context, valid for this call; the name
            // is borrowed for the call.
            unsafe {
                each(
                    each_context,
                    Str::new(&position.consumer),
                    saved,
                    epoch,
                    lane,
                    offset,
                )
            };
        }
    })
}

pub(super) unsafe extern "C" fn host_report_files<I: 'static>(
    context: *const c_void,
    files: *const abi::FileLagRef,
    count: usize,
) {
    host_guard(String::new, (), || {
        // SAFETY: as in `host_try_publish`.
        let context = unsafe { host_context::<I>(context) };
        let files = if files.is_null() || count == 0 {
            &[][..]
        } else {
            // SAFETY: the plugin passes `count` files, borrowed for the call.
            unsafe { std::slice::from_raw_parts(files, count) }
        };
        let files: Vec<mongoose_core::FileLag> = files
            .iter()
            .map(|file| mongoose_core::FileLag {
                lane: file.lane,
                // SAFETY: borrowed for the call.
                path: unsafe { file.path.as_str() }.into_owned(),
                committed: file.committed,
                size: file.size,
                lag: file.lag,
            })
            .collect();
        context.with_output((), |output| output.report_files(&files));
    })
}

pub(super) unsafe extern "C" fn host_commit_processed<I: 'static>(context: *const c_void) -> u64 {
    host_guard(String::new, 0, || {
        // SAFETY: as in `host_try_publish`.
        let committed = unsafe { host_context::<I>(context) }
            .with_output(0, |output| output.commit_processed());
        u64::try_from(committed).unwrap_or(u64::MAX)
    })
}

pub(super) unsafe extern "C" fn host_log<I: 'static>(
    context: *const c_void,
    level: u32,
    message: Str,
) {
    host_guard(String::new, (), || {
        // SAFETY: as in `host_try_publish`.
        let context = unsafe { host_context::<I>(context) };
        // SAFETY: borrowed for the call.
        let message = unsafe { message.as_str() };
        let plugin = context.library.name();
        if level == abi::level::WARN {
            tracing::warn!(feed = %context.feed, plugin, "{message}");
        } else {
            tracing::info!(feed = %context.feed, plugin, "{message}");
        }
    })
}

pub(super) unsafe extern "C" fn host_retain<I: 'static>(context: *const c_void) {
    // SAFETY: the plugin holds a reference (see `host_context`): the count is at least
    // one, and the pointer came from `Arc::as_ptr` of a `HostContext<I>`.
    unsafe { Arc::increment_strong_count(context as *const HostContext<I>) }
}

pub(super) unsafe extern "C" fn host_release<I: 'static>(context: *const c_void) {
    // SAFETY: the plugin gives back a reference it holds (one taken with `retain`).
    unsafe { Arc::decrement_strong_count(context as *const HostContext<I>) }
}
