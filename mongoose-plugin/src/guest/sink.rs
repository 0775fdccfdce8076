//! The sink vtable's functions: an author's sink behind a handle.

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};

use mongoose_core::sink::{Output, OutputKey, Sink, SinkOutcome};
use mongoose_core::Epoch;

use crate::abi::{self, KeyRef, MessageOut, OutcomeRef, OutputRef, Status, Str};
use crate::settings::CreateContext;

use super::{base, declared, guarded};

/// A plugin sink behind a handle, with the outcomes of its last call (their evidence
/// is what the host's [`OutcomeRef`]s borrow until the next call).
struct SinkHandle {
    sink: Box<dyn Sink>,
    outputs: Vec<Output>,
    outcomes: Vec<SinkOutcome>,
    verified: Option<SinkOutcome>,
}

const NO_OUTCOME: &str = "the plugin sink gave no outcome for this output (counted uncertain)";

fn outcome_ref(outcome: Option<&SinkOutcome>) -> OutcomeRef {
    match outcome {
        Some(SinkOutcome::Published { evidence }) => OutcomeRef {
            kind: abi::outcome::PUBLISHED,
            retryable: 0,
            evidence: Str::new(evidence),
        },
        Some(SinkOutcome::NotPublished {
            evidence,
            retryable,
        }) => OutcomeRef {
            kind: abi::outcome::NOT_PUBLISHED,
            retryable: u32::from(*retryable),
            evidence: Str::new(evidence),
        },
        Some(SinkOutcome::Uncertain { evidence }) => OutcomeRef {
            kind: abi::outcome::UNCERTAIN,
            retryable: 0,
            evidence: Str::new(evidence),
        },
        None => OutcomeRef {
            kind: abi::outcome::UNCERTAIN,
            retryable: 0,
            evidence: Str::new(NO_OUTCOME),
        },
    }
}

/// The owned key of a borrowed one.
///
/// # Safety
/// `key.feed` is valid for the call.
unsafe fn owned_key(key: &KeyRef) -> OutputKey {
    OutputKey::new(
        // SAFETY: see the function's contract.
        &unsafe { key.feed.as_str() },
        Epoch(key.epoch),
        key.lane,
        key.position,
        key.index,
        key.generation,
    )
}

pub(super) unsafe extern "C" fn sink_create(
    kind: Str,
    _name: Str,
    config: Str,
    base_dir: Str,
    handle: *mut *mut c_void,
    error: MessageOut,
) -> Status {
    guarded(error, || {
        // SAFETY: the host passes text valid for this call.
        let (kind, config, base_dir) =
            unsafe { (kind.as_str(), config.as_str(), base_dir.as_str()) };
        let declared = declared()?;
        let factory = declared
            .plugin
            .sinks
            .iter()
            .find(|(declared, _)| *declared == kind)
            .map(|(_, factory)| factory)
            .ok_or_else(|| format!("this plugin declares no sink kind '{kind}'"))?;
        let sink = factory(&CreateContext::new(&config, base(&base_dir)))?;
        let boxed = Box::new(SinkHandle {
            sink,
            outputs: Vec::new(),
            outcomes: Vec::new(),
            verified: None,
        });
        // SAFETY: the host passes a valid out pointer.
        unsafe { *handle = Box::into_raw(boxed) as *mut c_void };
        Ok(())
    })
}

pub(super) unsafe extern "C" fn sink_publish(
    handle: *mut c_void,
    outputs: *const OutputRef,
    outcomes: *mut OutcomeRef,
    count: usize,
    error: MessageOut,
) -> Status {
    guarded(error, || {
        // SAFETY: `handle` came from `sink_create`; the host calls one function at a
        // time per sink; `outputs` and `outcomes` hold `count` entries for the call.
        let (sink, given, answers) = unsafe {
            (
                &mut *(handle as *mut SinkHandle),
                std::slice::from_raw_parts(outputs, count),
                std::slice::from_raw_parts_mut(outcomes, count),
            )
        };
        sink.outputs.clear();
        for output in given {
            sink.outputs.push(Output {
                // SAFETY: borrowed for the call.
                key: unsafe { owned_key(&output.key) },
                // SAFETY: borrowed for the call.
                payload: unsafe { output.payload.as_slice() }.to_vec(),
                attempt: output.attempt,
            });
        }
        sink.outcomes.clear();
        sink.sink.publish(&sink.outputs, &mut sink.outcomes);
        for (index, answer) in answers.iter_mut().enumerate() {
            *answer = outcome_ref(sink.outcomes.get(index));
        }
        Ok(())
    })
}

pub(super) unsafe extern "C" fn sink_verify(
    handle: *mut c_void,
    key: *const KeyRef,
    outcome: *mut OutcomeRef,
    found: *mut u8,
    error: MessageOut,
) -> Status {
    guarded(error, || {
        // SAFETY: as in `sink_publish`; `key`, `outcome` and `found` are valid for the
        // call.
        let (sink, key) = unsafe { (&mut *(handle as *mut SinkHandle), owned_key(&*key)) };
        sink.verified = sink.sink.verify(&key);
        // SAFETY: valid out pointers for the call.
        unsafe {
            *found = u8::from(sink.verified.is_some());
            *outcome = outcome_ref(sink.verified.as_ref());
        }
        Ok(())
    })
}

pub(super) unsafe extern "C" fn sink_destroy(handle: *mut c_void) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        if !handle.is_null() {
            // SAFETY: made by `sink_create` with `Box::into_raw`, destroyed once.
            drop(unsafe { Box::from_raw(handle as *mut SinkHandle) });
        }
    }));
}
