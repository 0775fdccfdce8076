//! The proxy of a plugin's sink.

use std::ffi::c_void;
use std::sync::Arc;

use mongoose_core::sink::{Output, OutputKey, Sink, SinkOutcome};
use tracing::error;

use crate::abi::{self, ByteSlice, KeyRef, OutcomeRef, OutputRef, SinkVTable, Status, Str};
use crate::guest::message_out;

use super::{PluginError, PluginLibrary, PluginRegistry, Role};

/// A plugin's sink as a [`Sink`].
///
/// A panic in the plugin's `publish` is caught: every output of that batch is
/// [`SinkOutcome::Uncertain`] (the plugin may have handed some over), and the sink is
/// never called again: later outputs are [`SinkOutcome::NotPublished`], not retryable,
/// with the panic in the evidence (the sink's exhausted policy then holds their feed or
/// counts them lost).
pub struct PluginSink {
    name: String,
    kind: String,
    handle: *mut c_void,
    vtable: *const SinkVTable,
    failed: Option<String>,
    answers: Vec<OutcomeRef>,
    // last: outlives the handle
    library: Arc<PluginLibrary>,
}

impl std::fmt::Debug for PluginSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginSink")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("plugin", &self.library.name)
            .field("failed", &self.failed)
            .finish()
    }
}

// SAFETY: the plugin's sink is `Send` (a `Sink`), called from one thread at a time
// (`&mut self`).
unsafe impl Send for PluginSink {}

fn key_ref(key: &OutputKey) -> KeyRef {
    KeyRef {
        feed: Str::new(&key.feed),
        epoch: key.epoch.0,
        position: key.position,
        generation: key.writer,
        lane: key.lane,
        index: key.index,
    }
}

/// The owned outcome of a plugin's answer (copied: the evidence is borrowed).
///
/// # Safety
/// The evidence is valid until the plugin's next call on the sink.
unsafe fn owned_outcome(answer: &OutcomeRef) -> SinkOutcome {
    // SAFETY: see the function's contract.
    let evidence = unsafe { answer.evidence.as_str() }.into_owned();
    match answer.kind {
        abi::outcome::PUBLISHED => SinkOutcome::Published { evidence },
        abi::outcome::NOT_PUBLISHED => SinkOutcome::NotPublished {
            evidence,
            retryable: answer.retryable != 0,
        },
        _ => SinkOutcome::Uncertain { evidence },
    }
}

impl PluginSink {
    /// Creates sink `name` of `kind` in `registry`'s plugins from `settings` (TOML
    /// text).
    pub fn create(
        registry: &PluginRegistry,
        kind: &str,
        name: &str,
        settings: &str,
    ) -> Result<Self, PluginError> {
        let library = registry
            .find(Role::Sink, kind)
            .ok_or_else(|| PluginError::UnknownKind {
                role: "sink",
                kind: kind.to_owned(),
            })?;
        let vtable = library
            .kind(Role::Sink, kind)
            .map(|declared| declared.sink)
            .ok_or_else(|| PluginError::UnknownKind {
                role: "sink",
                kind: kind.to_owned(),
            })?;
        let mut handle: *mut c_void = std::ptr::null_mut();
        let mut message = String::new();
        // SAFETY: a vtable of the loaded plugin; texts borrowed for the call.
        let status = unsafe {
            ((*vtable).create)(
                Str::new(kind),
                Str::new(name),
                Str::new(settings),
                Str::new(&registry.base_dir),
                &mut handle,
                message_out(&mut message),
            )
        };
        if status != Status::OK || handle.is_null() {
            return Err(PluginError::Create {
                plugin: library.name.clone(),
                role: "sink",
                name: name.to_owned(),
                kind: kind.to_owned(),
                message,
            });
        }
        Ok(PluginSink {
            name: name.to_owned(),
            kind: kind.to_owned(),
            handle,
            vtable,
            failed: None,
            answers: Vec::new(),
            library: Arc::clone(library),
        })
    }

    fn vtable(&self) -> &SinkVTable {
        // SAFETY: a static of the plugin, loaded while `library` is held.
        unsafe { &*self.vtable }
    }

    fn fail(&mut self, message: &str) -> String {
        let failed = format!(
            "the plugin sink '{}' ({} {}, kind '{}') panicked: {message}; it is not called again in this run",
            self.name, self.library.name, self.library.version, self.kind
        );
        error!(sink = %self.name, "{failed}");
        self.failed = Some(failed.clone());
        failed
    }
}

impl Sink for PluginSink {
    fn publish(&mut self, outputs: &[Output], outcomes: &mut Vec<SinkOutcome>) {
        if let Some(failed) = &self.failed {
            outcomes.extend(outputs.iter().map(|_| SinkOutcome::NotPublished {
                evidence: format!("not sent: {failed}"),
                retryable: false,
            }));
            return;
        }
        let given: Vec<OutputRef> = outputs
            .iter()
            .map(|output| OutputRef {
                key: key_ref(&output.key),
                payload: ByteSlice::new(&output.payload),
                attempt: output.attempt,
                reserved: 0,
            })
            .collect();
        self.answers.clear();
        self.answers.resize(
            outputs.len(),
            OutcomeRef {
                kind: abi::outcome::UNCERTAIN,
                retryable: 0,
                evidence: Str::new("the plugin sink wrote no outcome for this output"),
            },
        );
        let mut message = String::new();
        // SAFETY: our live handle; `given` and `answers` hold `outputs.len()` entries
        // and borrow `outputs`, all alive for the call.
        let status = unsafe {
            (self.vtable().publish)(
                self.handle,
                given.as_ptr(),
                self.answers.as_mut_ptr(),
                given.len(),
                message_out(&mut message),
            )
        };
        if status == Status::OK {
            // SAFETY: the evidence is valid until our next call on the sink.
            outcomes.extend(
                self.answers
                    .iter()
                    .map(|answer| unsafe { owned_outcome(answer) }),
            );
            return;
        }
        let evidence = if status == Status::ERROR {
            format!(
                "the plugin sink failed the batch: {message}: the outputs may or may not be held"
            )
        } else {
            let failed = self.fail(&message);
            format!("{failed}: the outputs of the batch may or may not be held")
        };
        outcomes.extend(outputs.iter().map(|_| SinkOutcome::Uncertain {
            evidence: evidence.clone(),
        }));
    }

    fn verify(&mut self, key: &OutputKey) -> Option<SinkOutcome> {
        if self.failed.is_some() {
            return None;
        }
        let key = key_ref(key);
        let mut answer = OutcomeRef {
            kind: abi::outcome::UNCERTAIN,
            retryable: 0,
            evidence: Str::NONE,
        };
        let mut found = 0u8;
        let mut message = String::new();
        // SAFETY: our live handle; the pointers are valid for the call.
        let status = unsafe {
            (self.vtable().verify)(
                self.handle,
                &key,
                &mut answer,
                &mut found,
                message_out(&mut message),
            )
        };
        match status {
            // SAFETY: the evidence is valid until our next call on the sink.
            Status::OK if found != 0 => Some(unsafe { owned_outcome(&answer) }),
            Status::OK | Status::ERROR => None,
            _ => {
                self.fail(&message);
                None
            }
        }
    }
}

impl Drop for PluginSink {
    fn drop(&mut self) {
        // SAFETY: freed once, by the plugin that allocated it.
        unsafe { (self.vtable().destroy)(self.handle) }
    }
}
