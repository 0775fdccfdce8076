//! What an aggregate processor has done, shared with `/status`: lines applied,
//! rejected per reason, late, windows closed, outputs emitted.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use mongoose_aggregate::AggregateState;
use parking_lot::Mutex;

/// The counters of one aggregate processor, updated by its thread, read by `/status`.
#[derive(Debug, Default)]
pub struct AggregateStats {
    applied: AtomicU64,
    late: AtomicU64,
    headers: AtomicU64,
    windows_closed: AtomicU64,
    emits: AtomicU64,
    keys: AtomicU64,
    rejected_total: AtomicU64,
    /// Rejected lines per reason (copied only when a line was rejected).
    rejected: Mutex<BTreeMap<String, u64>>,
}

impl AggregateStats {
    /// Takes the counters of `state` (a copy of the reasons only when they changed).
    pub fn update(&self, state: &AggregateState) {
        let counters = &state.counters;
        self.applied.store(counters.applied, Ordering::Relaxed);
        self.late.store(counters.late, Ordering::Relaxed);
        self.headers.store(counters.headers, Ordering::Relaxed);
        self.windows_closed
            .store(counters.windows_closed, Ordering::Relaxed);
        self.emits.store(counters.emits, Ordering::Relaxed);
        self.keys.store(state.keys.len() as u64, Ordering::Relaxed);
        let total = counters.rejected_total();
        if self.rejected_total.swap(total, Ordering::Relaxed) != total {
            self.rejected.lock().clone_from(&counters.rejected);
        }
    }

    /// The counters as JSON (what `/status` shows under the processor).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "kind": "aggregate",
            "applied": self.applied.load(Ordering::Relaxed),
            "rejected": self.rejected_total.load(Ordering::Relaxed),
            "rejectedByReason": *self.rejected.lock(),
            "late": self.late.load(Ordering::Relaxed),
            "headers": self.headers.load(Ordering::Relaxed),
            "windowsClosed": self.windows_closed.load(Ordering::Relaxed),
            "emitted": self.emits.load(Ordering::Relaxed),
            "keys": self.keys.load(Ordering::Relaxed),
        })
    }
}
