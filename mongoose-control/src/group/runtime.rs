//! The group's thread: its runtime state (processors, feed readers, timers), the duty
//! cycle over the mailbox, the timers and the feeds, the status it publishes, and how
//! the thread ends (closed, or dead).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mongoose_core::{agent, FailureKind, GroupReader};

use super::{
    answer_not_running, write_reply_record, Captures, GroupDispatcher, GroupShared, GroupState,
    ProcessorStatus, QuarantinedProcessor, RetryPolicy, Seed, ServiceSnapshot,
};
use crate::contain::panic_message;
use crate::context::{self, TimerOp};
use crate::controller;
use crate::feeds::{FeedConnector, PendingProbe};
use crate::host::ProcessorHost;
use crate::idle::Idler;
use crate::record::GroupRecorder;
use crate::reply::{ControlReply, ReplyOutcome, ReplySender};
use mongoose_audit::{NewRecord, RecordType};

/// The longest park of an idle group's thread without a wake: what reaches a group
/// without waking it (an item published by hand, not by a source driver) waits at most
/// this long; everything else wakes it at once.
const GROUP_QUIET_FOR: Duration = Duration::from_secs(1);

pub(super) struct Slot {
    pub(super) name: String,
    /// The processor and every call made to it (its admin commands are cleared when
    /// it is quarantined).
    pub(super) host: ProcessorHost,
    pub(super) retry_safe: bool,
    pub(super) quarantined: Option<String>,
    pub(super) subscriptions: Vec<(String, u64)>,
    pub(super) services_seen: HashMap<String, (u64, bool)>,
}

pub(super) struct FeedState {
    pub(super) feed: String,
    /// The group's queue of the feed with its subscribers' typed handlers.
    pub(super) reader: Box<dyn GroupReader>,
    /// The queue's state, read off the group's thread.
    pub(super) probe: PendingProbe,
    /// The generations of the processors subscribed, in subscription order (the
    /// reader's handlers are theirs).
    pub(super) subscribers: Vec<u64>,
    pub(super) handled: Vec<u64>,
    /// The group's queue of this feed lost items and its QueueDrop record is written
    /// (first-drop evidence, once per queue binding).
    pub(super) drop_reported: bool,
}

pub(super) struct Runtime {
    pub(super) shared: Arc<GroupShared>,
    pub(super) connector: Arc<dyn FeedConnector>,
    pub(super) services: ServiceSnapshot,
    pub(super) policy: RetryPolicy,
    pub(super) poll_limit: usize,
    pub(super) processors: BTreeMap<u64, Slot>,
    pub(super) feeds: Vec<FeedState>,
    pub(super) timers: BinaryHeap<Reverse<(Instant, u64, u64, u64)>>,
    pub(super) timer_seq: u64,
    pub(super) timer_ops: Vec<TimerOp>,
    pub(super) service_versions: HashMap<String, u64>,
    pub(super) in_flight: Option<(ReplySender, u64)>,
    pub(super) effects_of_request: u32,
    pub(super) quarantines: Vec<(u64, String)>,
    pub(super) status_dirty: bool,
    pub(super) recorder: Option<Box<dyn GroupRecorder>>,
    /// Its processors' audit captures: opens in progress and installed sessions.
    pub(super) captures: Captures,
    /// Wakes the group's thread, parked by its idler, when a feed publishes to one of
    /// its queues (each reader is given it).
    pub(super) wakeup: Arc<mongoose_core::Wakeup>,
}

pub(super) enum Cycle {
    Worked(usize),
    Closed,
}

pub(super) fn run_group(shared: Arc<GroupShared>, seed: Seed) {
    if let Some(core) = seed.core {
        // not looked up in get_core_ids(): that lists only the cores the calling thread
        // may run on, so a group started from a thread already pinned elsewhere would
        // never find its core; the kernel refuses a core that does not exist
        let pinned = core_affinity::set_for_current(core_affinity::CoreId { id: core });
        if !pinned {
            tracing::warn!(group = %shared.name, core, "could not pin the group's thread to the core");
        }
    }
    // the group's part of its thread's context, each restored by its guard when the
    // thread ends
    let agent = agent::mark_current_thread(&shared.name);
    let group = context::install(&shared.name);
    // a processor's audit records reach its capture while the group calls it
    let hook = mongoose_core::audit::enter_hook(mongoose_audit::capture::routing::HOOK);
    let link = controller::install(seed.plane, seed.recorder.is_some());
    // writers keep a poll's outputs and hand them to their sinks together at its end
    let batching = mongoose_core::batch_end::batching();
    let mut idler = Idler::new(seed.idle);
    let mut runtime = Runtime {
        shared: Arc::clone(&shared),
        connector: seed.connector,
        services: seed.services,
        policy: seed.retry,
        poll_limit: seed.poll_limit,
        processors: BTreeMap::new(),
        feeds: Vec::new(),
        timers: BinaryHeap::new(),
        timer_seq: 0,
        timer_ops: Vec::new(),
        service_versions: HashMap::new(),
        in_flight: None,
        effects_of_request: 0,
        quarantines: Vec::new(),
        status_dirty: true,
        recorder: seed.recorder,
        captures: Captures::default(),
        wakeup: Arc::clone(idler.wakeup()),
    };
    loop {
        match catch_unwind(AssertUnwindSafe(|| runtime.duty_cycle())) {
            Ok(Cycle::Worked(work)) => {
                let wake_by = match (runtime.next_timer_in(), runtime.captures.next_deadline_in()) {
                    (Some(timer), Some(open)) => Some(timer.min(open)),
                    (timer, open) => timer.or(open),
                };
                // every kind of a group's work wakes it (a publish by a source
                // driver, a control request, its timers by `wake_by`); the cap bounds
                // the wait of an item published by hand, without a wake
                idler.idle_quiet(work, wake_by, Some(GROUP_QUIET_FOR));
            }
            Ok(Cycle::Closed) => {
                if let Some(recorder) = runtime.recorder.as_mut() {
                    recorder.closing();
                }
                break;
            }
            Err(payload) => {
                let message = panic_message(&*payload);
                runtime.die(&message);
                break;
            }
        }
    }
    drop(batching);
    drop(group);
    drop(link);
    drop(hook);
    drop(agent);
    *shared.finished.lock() = true;
    shared.finished_signal.notify_all();
}

impl Runtime {
    pub(super) fn duty_cycle(&mut self) -> Cycle {
        let mut work = 0;
        match self.drain_mailbox() {
            Some(done) => work += done,
            None => {
                self.close();
                return Cycle::Closed;
            }
        }
        work += self.take_opened_captures();
        work += self.expire_capture_opens();
        work += self.fire_timers();
        if !self.shared.dispatch_held() {
            work += self.poll_feeds();
        }
        // the poll's outputs go to their sinks now (their inputs are held meanwhile)
        mongoose_core::batch_end::end_batch();
        self.settle();
        Cycle::Worked(work)
    }

    /// Applies quarantines and timer requests made during the cycle, and publishes
    /// the status when it changed.
    pub(super) fn settle(&mut self) {
        while !self.quarantines.is_empty() {
            let pending = std::mem::take(&mut self.quarantines);
            for (generation, reason) in pending {
                self.apply_quarantine(generation, &reason);
            }
        }
        self.apply_timer_ops();
        if self.status_dirty {
            self.publish_status();
        }
    }

    pub(super) fn publish_status(&mut self) {
        self.status_dirty = false;
        let mut running = Vec::new();
        let mut quarantined = Vec::new();
        for (generation, slot) in &self.processors {
            match &slot.quarantined {
                None => running.push(ProcessorStatus {
                    name: slot.name.clone(),
                    generation: *generation,
                }),
                Some(reason) => quarantined.push(QuarantinedProcessor {
                    name: slot.name.clone(),
                    generation: *generation,
                    reason: reason.clone(),
                }),
            }
        }
        let commands = self
            .processors
            .values()
            .filter(|slot| slot.quarantined.is_none() && !slot.host.has_no_commands())
            .map(|slot| (slot.name.clone(), slot.host.command_names()))
            .collect();
        let mut status = self.shared.status.lock();
        status.commands = commands;
        status.running = running;
        status.quarantined = quarantined;
        status.probes = self
            .feeds
            .iter()
            .map(|feed| (feed.feed.clone(), Arc::clone(&feed.probe)))
            .collect();
    }

    pub(super) fn poll_feeds(&mut self) -> usize {
        let Runtime {
            feeds,
            processors,
            quarantines,
            poll_limit,
            shared,
            recorder,
            ..
        } = self;
        let mut work = 0;
        for state in feeds.iter_mut() {
            let FeedState {
                feed,
                reader,
                subscribers,
                handled,
                drop_reported,
                ..
            } = state;
            let mut dispatcher = GroupDispatcher {
                group: &shared.name,
                feed,
                subscribers,
                handled,
                processors,
                quarantines,
                recorder: recorder.as_deref_mut(),
                audit: &shared.audit,
                drop_reported,
            };
            work += reader.poll(&mut dispatcher, *poll_limit);
            if let Some(recorder) = recorder.as_mut() {
                recorder.polled();
            }
        }
        work
    }

    pub(super) fn close(&mut self) {
        let queued = {
            let mut mailbox = self.shared.mailbox.lock();
            mailbox.state = GroupState::Closing;
            std::mem::take(&mut mailbox.queue)
        };
        for letter in queued {
            answer_not_running(&self.shared, letter, "group closed", None);
        }
        for state in &mut self.feeds {
            state.reader.set_fenced(true);
        }
        let running: Vec<u64> = self
            .processors
            .iter()
            .filter(|(_, slot)| slot.quarantined.is_none())
            .map(|(generation, _)| *generation)
            .collect();
        // what the last cycle's writers kept goes before their processors stop
        mongoose_core::batch_end::end_batch();
        for generation in running {
            let _ = self.release(generation, false);
        }
        mongoose_core::batch_end::end_batch();
        self.close_captures();
        // quarantined processors keep their names and instances; their queues go
        let remaining: Vec<u64> = self.processors.keys().copied().collect();
        for generation in remaining {
            self.detach(generation);
        }
        self.audit()
            .write(NewRecord::new(RecordType::Fallback, None, "Closed"));
        self.publish_status();
        self.retain_instances();
        self.shared.mailbox.lock().state = GroupState::Closed;
    }

    pub(super) fn die(&mut self, message: &str) {
        tracing::error!(group = %self.shared.name, %message, "group control logic died; queued requests are answered FAILED");
        let queued = {
            let mut mailbox = self.shared.mailbox.lock();
            mailbox.state = GroupState::Dead;
            std::mem::take(&mut mailbox.queue)
        };
        self.audit().write(
            NewRecord::new(RecordType::Fallback, None, "Dead")
                .reason(message.to_owned())
                .kind(FailureKind::FailedDead),
        );
        if let Some((sender, input)) = self.in_flight.take() {
            let mut reply = ControlReply::not_applied(
                sender.request_id,
                ReplyOutcome::Failed,
                FailureKind::FailedRule,
                format!("control processor threw: {message}"),
                None,
                None,
            );
            reply.evidence = self.audit().evidence();
            let cause_op = self.last_op(reply.request_id);
            write_reply_record(self.audit(), &reply, input, cause_op);
            sender.complete_on(&self.shared.executor, reply);
        }
        for letter in queued {
            answer_not_running(&self.shared, letter, "group died", Some(message));
        }
        for state in &mut self.feeds {
            state.reader.mark_dead();
        }
        // every processor is fenced the same way: no input, no timer, instance and
        // name kept, nothing restarts
        for slot in self.processors.values_mut() {
            if slot.quarantined.is_none() {
                slot.quarantined = Some(format!("group died: {message}"));
            }
        }
        // captures are detached without calling the processors, and closed
        self.close_captures();
        self.timers.clear();
        self.publish_status();
        self.retain_instances();
    }

    /// Moves the processors still held (quarantined, or all of a dead group) to the
    /// group's shared state, so ending the thread neither stops nor drops them.
    pub(super) fn retain_instances(&mut self) {
        let mut retained = self.shared.retained.lock();
        for (_, slot) in std::mem::take(&mut self.processors) {
            retained.push(slot.host.into_processor());
        }
    }
}
