//! Timers: the processors' scheduled timers, fired on the group's thread in due order,
//! and the schedule and cancel requests they made during a cycle.

use std::cmp::Reverse;
use std::time::{Duration, Instant};

use super::Runtime;
use crate::context::{self, TimerOp};

impl Runtime {
    pub(super) fn fire_timers(&mut self) -> usize {
        let now = Instant::now();
        let mut fired = 0;
        while fired < 256 {
            match self.timers.peek() {
                Some(Reverse((due, ..))) if *due <= now => {}
                _ => break,
            }
            let Some(Reverse((_, _, owner, timer))) = self.timers.pop() else {
                break;
            };
            fired += 1;
            let Some(slot) = self.processors.get_mut(&owner) else {
                continue;
            };
            if slot.quarantined.is_some() {
                continue;
            }
            let result = slot.host.fire_timer(timer, self.recorder.as_deref_mut());
            if let Err(reason) = result {
                self.contain(owner, "timer", reason);
            }
        }
        fired
    }

    pub(super) fn apply_timer_ops(&mut self) {
        context::take_ops(&mut self.timer_ops);
        for op in std::mem::take(&mut self.timer_ops) {
            match op {
                TimerOp::Schedule { owner, timer, due } => {
                    let live = self
                        .processors
                        .get(&owner)
                        .is_some_and(|slot| slot.quarantined.is_none());
                    if live {
                        self.timer_seq += 1;
                        self.timers
                            .push(Reverse((due, self.timer_seq, owner, timer)));
                    }
                }
                TimerOp::Cancel { owner, timer } => self
                    .timers
                    .retain(|Reverse((_, _, o, t))| !(*o == owner && *t == timer)),
            }
        }
    }

    pub(super) fn drop_timer_ops_of(&mut self, generation: u64) {
        context::take_ops(&mut self.timer_ops);
        self.timer_ops.retain(|op| match op {
            TimerOp::Schedule { owner, .. } | TimerOp::Cancel { owner, .. } => *owner != generation,
        });
    }

    pub(super) fn next_timer_in(&self) -> Option<Duration> {
        self.timers
            .peek()
            .map(|Reverse((due, ..))| due.saturating_duration_since(Instant::now()))
    }
}
