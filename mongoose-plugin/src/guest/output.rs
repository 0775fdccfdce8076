//! [`PluginOutput`]: the feed a plugin source publishes into, seen through the boundary.

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use mongoose_core::{
    BatchEnd, ConsumerPosition, Epoch, EvidenceStatus, FailureKind, FileLag, Held, PositionValue,
    PublishRefused, Refusal, SourceOutput, SourceState, TryPublish,
};

use crate::abi::{self, ByteSlice, HostOutput, ItemRef, Status, Str};

use super::message_out;

/// The feed a plugin source publishes into: the host's output, seen through the
/// boundary. It implements [`SourceOutput<T, PositionValue>`] for any item type that is
/// bytes (`T: AsRef<[u8]>`): the host copies the bytes during the call, so on
/// [`TryPublish::Paused`] or [`TryPublish::Retry`] the item is given back to the source
/// as usual. What the source registers at start (epoch, PAUSE by default, committer)
/// is what its `start` returns ([`mongoose_core::SourceStart`]): the SDK hands it to
/// the host, whose source driver applies it and polls the acknowledgements around
/// every duty cycle. [`SourceOutput::commit_processed`] crosses to the host and
/// commits what was processed at once (before a source gives input up).
///
/// # Lifetime
///
/// A `PluginOutput` holds a reference on the host's context (taken when it is made or
/// cloned, given back when it is dropped), so every call on it is safe for as long as
/// it lives: a clone may be kept by a committer that the host calls after the source
/// was stopped and destroyed, or by a thread of the plugin's own. Once the source was
/// destroyed the feed takes nothing more: a publish is refused (`Paused`, or an error
/// for a push publish), the other calls do nothing, and the log calls still log. A
/// clone kept for ever keeps the host's context (and the plugin loaded) for ever: drop
/// it when the work it was kept for is done.
#[derive(Debug)]
pub struct PluginOutput {
    host: HostOutput,
    feed: Arc<str>,
}

// SAFETY: the host's output context is `Sync` (a feed's publisher behind an `Arc`, its
// reference count atomic) and stays valid while this value holds its reference.
unsafe impl Send for PluginOutput {}
// SAFETY: as above.
unsafe impl Sync for PluginOutput {}

impl Clone for PluginOutput {
    fn clone(&self) -> Self {
        PluginOutput::retained(self.host, Arc::clone(&self.feed))
    }
}

impl Drop for PluginOutput {
    fn drop(&mut self) {
        // SAFETY: gives back the reference this value took (`retained`).
        unsafe { (self.vtable().release)(self.host.context) }
    }
}

impl PluginOutput {
    /// An output over `host` with a reference of its own.
    pub(super) fn retained(host: HostOutput, feed: Arc<str>) -> Self {
        // SAFETY: `host` is valid (the source's, while it lives, or one a live
        // `PluginOutput` holds); the reference taken is given back by `Drop`.
        unsafe { ((*host.vtable).retain)(host.context) };
        PluginOutput { host, feed }
    }

    /// The feed's name (the source's name).
    pub fn feed(&self) -> &str {
        &self.feed
    }

    /// See [`SourceOutput::filtered`].
    pub fn filtered(&self, position: PositionValue, reason: &str) {
        // SAFETY: as in try_publish.
        unsafe {
            (self.vtable().filtered)(
                self.host.context,
                position.lane,
                position.offset,
                Str::new(reason),
            )
        }
    }

    /// See [`SourceOutput::commit_processed`]: commits what was processed, now, before
    /// the source gives part of its input up (a revoked partition). The host's driver
    /// commits around every cycle anyway.
    pub fn commit_processed(&self) -> usize {
        // SAFETY: as in try_publish.
        let committed = unsafe { (self.vtable().commit_processed)(self.host.context) };
        usize::try_from(committed).unwrap_or(usize::MAX)
    }

    /// See [`SourceOutput::set_epoch`].
    pub fn set_epoch(&self, epoch: Epoch) {
        // SAFETY: as in try_publish.
        unsafe { (self.vtable().set_epoch)(self.host.context, epoch.0) }
    }

    /// See [`SourceOutput::report_state`].
    pub fn report_state(&self, state: SourceState, detail: Option<&str>) {
        let detail = detail.map_or(Str::NONE, Str::new);
        // SAFETY: as in try_publish.
        unsafe { (self.vtable().report_state)(self.host.context, state_code(state), detail) }
    }

    /// Logs `message` as a WARN in the host's log, with the feed's name, from any
    /// thread. (A plugin's own `tracing` events at INFO and above reach the host's log
    /// too: with the feed's name on the thread the host is calling into the source
    /// from, with the plugin's name elsewhere.)
    pub fn warn(&self, message: &str) {
        // SAFETY: as in try_publish.
        unsafe { (self.vtable().log)(self.host.context, abi::level::WARN, Str::new(message)) }
    }

    /// Logs `message` as an INFO in the host's log, with the feed's name.
    pub fn info(&self, message: &str) {
        // SAFETY: as in try_publish.
        unsafe { (self.vtable().log)(self.host.context, abi::level::INFO, Str::new(message)) }
    }

    /// See [`SourceOutput::report_loss`]: a loss the source knows of (input it will
    /// never deliver) makes the feed not lossless.
    pub fn report_loss(&self, what: &str, bytes: Option<u64>) {
        // SAFETY: as in try_publish.
        unsafe {
            (self.vtable().report_loss)(
                self.host.context,
                Str::new(what),
                bytes.unwrap_or(0),
                u8::from(bytes.is_some()),
            )
        }
    }

    /// See [`SourceOutput::report_files`]: the input files of a many-file source, for
    /// the feed's status (at most once per scan or poll interval, never per item).
    pub fn report_files(&self, files: &[FileLag]) {
        let files: Vec<abi::FileLagRef> = files
            .iter()
            .map(|file| abi::FileLagRef {
                path: Str::new(&file.path),
                committed: file.committed,
                size: file.size,
                lag: file.lag,
                lane: file.lane,
                reserved: 0,
            })
            .collect();
        // SAFETY: as in try_publish; the files and their paths are borrowed for the call.
        unsafe { (self.vtable().report_files)(self.host.context, files.as_ptr(), files.len()) }
    }

    /// See [`SourceOutput::consumer_positions`]: what each of the feed's consumers holds
    /// of it (a saved state's position, a sink's written outputs, or nothing of its
    /// own), for the source to decide where it resumes with
    /// [`mongoose_core::resume::resume`] (a lost or damaged store resumes where every
    /// consumer still has what it needs, never past it).
    pub fn consumer_positions(&self) -> Vec<ConsumerPosition> {
        unsafe extern "C" fn each(
            context: *mut c_void,
            consumer: Str,
            held: u8,
            epoch: u64,
            lane: u32,
            offset: u64,
        ) {
            let _ = catch_unwind(AssertUnwindSafe(|| {
                // SAFETY: `context` is the vector `consumer_positions` passed, alive for
                // the call; `consumer` is borrowed for this call.
                let positions = unsafe { &mut *(context as *mut Vec<ConsumerPosition>) };
                // SAFETY: `consumer` points to its bytes for this call (the host's contract).
                let consumer = unsafe { consumer.as_str() }.into_owned();
                let at = (Epoch(epoch), PositionValue { lane, offset });
                let held = match held {
                    abi::HELD_SAVED => Held::Saved(Some(at)),
                    abi::HELD_NOTHING_SAVED => Held::Saved(None),
                    abi::HELD_WRITTEN => Held::Written(at),
                    _ => Held::Nothing,
                };
                positions.push(ConsumerPosition::new(consumer, held));
            }));
        }
        let mut positions: Vec<ConsumerPosition> = Vec::new();
        // SAFETY: as in try_publish; the callback and its context live for the call.
        unsafe {
            (self.vtable().consumer_positions)(
                self.host.context,
                each,
                &mut positions as *mut Vec<ConsumerPosition> as *mut c_void,
            )
        };
        positions
    }

    /// See [`SourceOutput::set_unterminated_bytes`].
    pub fn set_unterminated_bytes(&self, bytes: u64) {
        // SAFETY: as in try_publish.
        unsafe { (self.vtable().set_unterminated_bytes)(self.host.context, bytes) }
    }

    fn vtable(&self) -> &abi::HostOutputVTable {
        // SAFETY: the host's vtable is in its context, valid while this value holds its
        // reference.
        unsafe { &*self.host.vtable }
    }
}

fn state_code(state: SourceState) -> u32 {
    match state {
        SourceState::Starting => abi::state::STARTING,
        SourceState::Behind => abi::state::BEHIND,
        SourceState::CaughtUp => abi::state::CAUGHT_UP,
        SourceState::EndOfStream => abi::state::END_OF_STREAM,
    }
}

impl<T: AsRef<[u8]> + Send> SourceOutput<T, PositionValue> for PluginOutput {
    fn try_publish(&self, item: T, position: PositionValue) -> TryPublish<T> {
        // SAFETY: the host context is valid (see the type); the bytes are borrowed for
        // the call and copied by the host.
        let code = unsafe {
            (self.vtable().try_publish)(
                self.host.context,
                ByteSlice::new(item.as_ref()),
                position.lane,
                position.offset,
            )
        };
        match code {
            abi::publish::PUBLISHED => TryPublish::Published,
            abi::publish::RETRY => TryPublish::Retry(item),
            _ => TryPublish::Paused(item),
        }
    }

    /// Publishes items pulled from `next` in one call to the host (the host takes its
    /// feed's lock once and pulls an item only when it can take it), so a source with
    /// many items ready crosses the boundary once per batch, not once per item.
    fn try_publish_batch(
        &self,
        next: &mut dyn FnMut() -> Option<(T, PositionValue)>,
    ) -> BatchEnd<T, PositionValue> {
        let mut state = Pull {
            next,
            current: None,
            panic: None,
        };
        // SAFETY: the host pulls through `pull::<T>` with `state`, alive for the call;
        // each item stays in `state.current` until the next pull, so its bytes are
        // valid while the host copies them.
        let code = unsafe {
            (self.vtable().try_publish_batch)(
                self.host.context,
                pull::<T>,
                &mut state as *mut Pull<'_, T> as *mut c_void,
            )
        };
        if let Some(payload) = state.panic {
            // the source's own producer panicked: unwind in the plugin, as it would
            // without the boundary (the boundary around do_work catches it)
            std::panic::resume_unwind(payload);
        }
        let current = state.current.take();
        let returned = |refusal| match current {
            Some((item, position)) => BatchEnd::Returned(item, position, refusal),
            None => BatchEnd::Paused,
        };
        match code {
            abi::batch::EXHAUSTED => BatchEnd::Exhausted,
            abi::batch::PAUSED => BatchEnd::Paused,
            abi::batch::RETURNED_RETRY => returned(Refusal::Retry),
            // RETURNED_PAUSED, or a host failure: keep the last item (a duplicate at
            // worst, never a gap)
            _ => returned(Refusal::Paused),
        }
    }

    fn publish(&self, item: T) -> Result<(), PublishRefused> {
        let mut message = String::new();
        // SAFETY: as in try_publish; `message` outlives the call.
        let status = unsafe {
            (self.vtable().publish)(
                self.host.context,
                ByteSlice::new(item.as_ref()),
                message_out(&mut message),
            )
        };
        if status == Status::OK {
            return Ok(());
        }
        let (kind, reason) = match message.split_once(": ") {
            Some(("RefusedDeadline", reason)) => (FailureKind::RefusedDeadline, reason),
            Some((_, reason)) => (FailureKind::RefusedState, reason),
            None => (FailureKind::RefusedState, message.as_str()),
        };
        Err(PublishRefused {
            feed: self.feed.to_string(),
            kind,
            evidence: EvidenceStatus::NotDegraded,
            reason: reason.to_owned(),
        })
    }

    fn cache(&self, item: T, position: PositionValue) {
        // SAFETY: as in try_publish.
        unsafe {
            (self.vtable().cache)(
                self.host.context,
                ByteSlice::new(item.as_ref()),
                position.lane,
                position.offset,
            )
        }
    }

    fn filtered(&self, position: PositionValue, reason: &str) {
        PluginOutput::filtered(self, position, reason)
    }

    fn commit_processed(&self) -> usize {
        PluginOutput::commit_processed(self)
    }

    fn set_epoch(&self, epoch: Epoch) {
        PluginOutput::set_epoch(self, epoch)
    }

    fn report_state(&self, state: SourceState, detail: Option<&str>) {
        PluginOutput::report_state(self, state, detail)
    }

    fn set_unterminated_bytes(&self, bytes: u64) {
        PluginOutput::set_unterminated_bytes(self, bytes)
    }

    fn report_loss(&self, what: &str, bytes: Option<u64>) {
        PluginOutput::report_loss(self, what, bytes)
    }

    fn consumer_positions(&self) -> Vec<ConsumerPosition> {
        PluginOutput::consumer_positions(self)
    }

    fn report_files(&self, files: &[FileLag]) {
        PluginOutput::report_files(self, files)
    }
}

/// The state of a batch the host pulls from: the source's producer and the item
/// pulled last (kept so its bytes stay valid, and given back if it is not published).
struct Pull<'a, T> {
    next: &'a mut dyn FnMut() -> Option<(T, PositionValue)>,
    current: Option<(T, PositionValue)>,
    panic: Option<Box<dyn std::any::Any + Send>>,
}

/// The host's pull of the next item of a batch.
unsafe extern "C" fn pull<T: AsRef<[u8]>>(context: *mut c_void, item: *mut ItemRef) -> u8 {
    // SAFETY: `context` is the `Pull` of the running `try_publish_batch`.
    let state = unsafe { &mut *(context as *mut Pull<'_, T>) };
    if state.panic.is_some() {
        return 0;
    }
    state.current = None;
    match catch_unwind(AssertUnwindSafe(|| (state.next)())) {
        Ok(Some(pulled)) => {
            let (value, position) = state.current.insert(pulled);
            // SAFETY: the host's out pointer, valid for the call.
            unsafe {
                *item = ItemRef {
                    bytes: ByteSlice::new(value.as_ref()),
                    offset: position.offset,
                    lane: position.lane,
                    reserved: 0,
                };
            }
            1
        }
        Ok(None) => 0,
        Err(payload) => {
            state.panic = Some(payload);
            0
        }
    }
}
