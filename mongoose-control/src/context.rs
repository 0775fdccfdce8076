//! What a processor can ask of its group while the group calls it: timers and the
//! group's name.
//!
//! These work on the group's thread, while the group is calling the processor (in
//! `start`, a handler, a timer or a service callback); elsewhere they do nothing and
//! return `false` / `None`.

use std::marker::PhantomData;
use std::time::{Duration, Instant};

use mongoose_core::context::ContextSlot;
use mongoose_core::engine;

#[derive(Debug)]
pub(crate) enum TimerOp {
    Schedule {
        owner: u64,
        timer: u64,
        due: Instant,
    },
    Cancel {
        owner: u64,
        timer: u64,
    },
}

#[derive(Debug)]
struct ContextState {
    group: String,
    ops: Vec<TimerOp>,
}

/// The group's part of its thread's context.
static GROUP: ContextSlot<Option<ContextState>> = ContextSlot::new();

/// Installs the group context on the group's thread until the guard is dropped (the
/// group's thread ends).
pub(crate) fn install(group: &str) -> GroupGuard {
    let previous = GROUP.replace(Some(ContextState {
        group: group.to_owned(),
        ops: Vec::new(),
    }));
    GroupGuard {
        previous,
        _thread_bound: PhantomData,
    }
}

/// The group context installed on its thread ([`install`]): removed when dropped,
/// what was installed before restored.
#[must_use = "the group context is removed as soon as the guard is dropped"]
pub(crate) struct GroupGuard {
    previous: Option<ContextState>,
    _thread_bound: PhantomData<*const ()>,
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        let installed = GROUP.replace(self.previous.take());
        drop(installed);
    }
}

/// Takes the timer requests made since the last call.
pub(crate) fn take_ops(into: &mut Vec<TimerOp>) {
    GROUP.with(|slot| {
        if let Some(state) = slot.as_mut() {
            into.append(&mut state.ops);
        }
    });
}

fn push(op: impl FnOnce(u64) -> TimerOp) -> bool {
    let Some(owner) = engine::current_processor() else {
        return false;
    };
    GROUP.with(|slot| match slot.as_mut() {
        Some(state) => {
            state.ops.push(op(owner.0));
            true
        }
        None => false,
    })
}

/// Asks the group to call the current processor's `on_timer(timer)` after `delay`, on
/// the group's thread. Returns `false` (nothing scheduled) outside a processor call on a
/// group thread. A timer of a processor that stops or is quarantined never fires.
pub fn schedule_timer(delay: Duration, timer: u64) -> bool {
    let due = Instant::now() + delay;
    push(|owner| TimerOp::Schedule { owner, timer, due })
}

/// Cancels the current processor's pending timers with this id.
pub fn cancel_timer(timer: u64) -> bool {
    push(|owner| TimerOp::Cancel { owner, timer })
}

/// The name of the group whose thread this is.
pub fn group_name() -> Option<String> {
    GROUP.with(|slot| slot.as_ref().map(|state| state.group.clone()))
}
