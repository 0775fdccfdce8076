//! The source and committer vtables' functions: an author's source and committer
//! behind handles.

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use mongoose_core::{CoreError, Epoch, EventSource, PositionValue, SourceCommitter, SourceStart};

use crate::abi::{CommitterRef, HostOutput, MessageOut, SourceStartRef, Status, Str};
use crate::guest_log::Forwarding;
use crate::settings::CreateContext;

use super::{base, declared, guarded, PluginOutput, COMMITTER_VTABLE};

/// A plugin source behind a handle, with its feed (where its `tracing` events go
/// while the host calls into it).
struct SourceHandle {
    source: Box<dyn EventSource>,
    host: HostOutput,
}

fn core_message(error: CoreError) -> String {
    error.to_string()
}

pub(super) unsafe extern "C" fn source_create(
    kind: Str,
    name: Str,
    config: Str,
    base_dir: Str,
    host: HostOutput,
    handle: *mut *mut c_void,
    error: MessageOut,
) -> Status {
    guarded(error, || {
        // SAFETY: the host passes text valid for this call.
        let (kind, name, config, base_dir) = unsafe {
            (
                kind.as_str(),
                name.as_str(),
                config.as_str(),
                base_dir.as_str(),
            )
        };
        let declared = declared()?;
        let factory = declared
            .plugin
            .sources
            .iter()
            .find(|(declared, _)| *declared == kind)
            .map(|(_, factory)| factory)
            .ok_or_else(|| format!("this plugin declares no source kind '{kind}'"))?;
        let output = PluginOutput::retained(host, Arc::from(&*name));
        let _forwarding = Forwarding::to(host);
        let source = factory(&CreateContext::new(&config, base(&base_dir)), output)?;
        let boxed = Box::new(SourceHandle { source, host });
        // SAFETY: the host passes a valid out pointer.
        unsafe { *handle = Box::into_raw(boxed) as *mut c_void };
        Ok(())
    })
}

/// The source behind `handle`.
///
/// # Safety
/// `handle` came from `source_create` and was not destroyed; the host calls one
/// function at a time per handle.
unsafe fn source<'a>(handle: *mut c_void) -> &'a mut SourceHandle {
    // SAFETY: see the function's contract.
    unsafe { &mut *(handle as *mut SourceHandle) }
}

pub(super) unsafe extern "C" fn source_start(
    handle: *mut c_void,
    started: *mut SourceStartRef,
    error: MessageOut,
) -> Status {
    // SAFETY: the host's contract (see `source`).
    guarded(error, || {
        // SAFETY: a live handle of `source_create`, one call at a time (the host's contract).
        let handle = unsafe { source(handle) };
        let _forwarding = Forwarding::to(handle.host);
        let SourceStart {
            epoch,
            pause_by_default,
            committer,
        } = handle.source.start().map_err(core_message)?;
        let committer = match committer {
            None => SourceStartRef::EMPTY.committer,
            Some(committer) => {
                let committer = committer
                    .into_typed::<PositionValue>()
                    .map_err(|committer| {
                        format!(
                            "the source's committer commits positions of type {}: a plugin source commits PositionValue",
                            committer.position_type()
                        )
                    })?;
                CommitterRef {
                    // the host owns it from now on and frees it through the vtable's
                    // `destroy`, which frees it here, on the side that allocated it
                    handle: Box::into_raw(Box::new(committer)) as *mut c_void,
                    vtable: &COMMITTER_VTABLE,
                }
            }
        };
        // SAFETY: the host passes a valid out pointer.
        unsafe {
            *started = SourceStartRef {
                epoch: epoch.0,
                committer,
                pause_by_default: u8::from(pause_by_default),
                reserved: [0; 7],
            }
        };
        Ok(())
    })
}

pub(super) unsafe extern "C" fn source_do_work(
    handle: *mut c_void,
    work: *mut usize,
    error: MessageOut,
) -> Status {
    guarded(error, || {
        // SAFETY: the host's contract (see `source`).
        let handle = unsafe { source(handle) };
        let _forwarding = Forwarding::to(handle.host);
        let done = handle.source.do_work().map_err(core_message)?;
        // SAFETY: the host passes a valid out pointer.
        unsafe { *work = done.0 };
        Ok(())
    })
}

pub(super) unsafe extern "C" fn source_stop(handle: *mut c_void, error: MessageOut) -> Status {
    // SAFETY: the host's contract (see `source`).
    guarded(error, || {
        // SAFETY: a live handle of `source_create`, one call at a time (the host's contract).
        let handle = unsafe { source(handle) };
        let _forwarding = Forwarding::to(handle.host);
        handle.source.stop().map_err(core_message)
    })
}

pub(super) unsafe extern "C" fn source_destroy(handle: *mut c_void) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        if !handle.is_null() {
            // SAFETY: made by `source_create` with `Box::into_raw`, destroyed once.
            drop(unsafe { Box::from_raw(handle as *mut SourceHandle) });
        }
    }));
}

/// The committer behind `handle`.
///
/// # Safety
/// `handle` came from `source_start` and was not destroyed.
unsafe fn committer<'a>(handle: *mut c_void) -> &'a mut Box<dyn SourceCommitter<PositionValue>> {
    // SAFETY: see the function's contract.
    unsafe { &mut *(handle as *mut Box<dyn SourceCommitter<PositionValue>>) }
}

pub(super) unsafe extern "C" fn committer_acknowledged(
    handle: *mut c_void,
    sequence: u64,
    epoch: u64,
    lane: u32,
    offset: u64,
    error: MessageOut,
) -> Status {
    guarded(error, || {
        // SAFETY: the host's contract (see `committer`).
        unsafe { committer(handle) }.acknowledged(
            sequence,
            Epoch(epoch),
            PositionValue { lane, offset },
        );
        Ok(())
    })
}

pub(super) unsafe extern "C" fn committer_commit(handle: *mut c_void, error: MessageOut) -> Status {
    // SAFETY: the host's contract (see `committer`).
    guarded(error, || {
        // SAFETY: a live handle of `source_start` (the host's contract).
        unsafe { committer(handle) }.commit().map_err(core_message)
    })
}

pub(super) unsafe extern "C" fn committer_commits_after_stop(handle: *mut c_void) -> u8 {
    // SAFETY: the host's contract (see `committer`).
    catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: a live handle of `source_start` (the host's contract).
        u8::from(unsafe { committer(handle) }.commits_after_stop())
    }))
    .unwrap_or(0)
}

pub(super) unsafe extern "C" fn committer_destroy(handle: *mut c_void) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        if !handle.is_null() {
            // SAFETY: made by `source_start` with `Box::into_raw`, destroyed once.
            drop(unsafe { Box::from_raw(handle as *mut Box<dyn SourceCommitter<PositionValue>>) });
        }
    }));
}
