//! A processor's life in its group: added (built, started, subscribed), stopped
//! (released from its readers and timers), quarantined (fenced, name and instance
//! kept), and the subscriptions it makes while it starts.

use std::cmp::Reverse;
use std::collections::HashMap;
use std::sync::Arc;

use mongoose_core::{ErasedHandler, FailureKind, GroupReader, ProcessorError, ProcessorId};

use super::{free_name, FeedState, RetryPolicy, Runtime, Slot, Supplier};
use crate::feeds::{FeedBinding, FeedConnector, SubscribeRequest};
use crate::host::{FeedSubscriptions, ProcessorHost};
use crate::reply::{ControlReply, ReplyOutcome};
use crate::supplier::ProcessorSupplier;
use mongoose_audit::{ControlAudit, NewRecord, RecordType};

impl Runtime {
    pub(super) fn apply_add(
        &mut self,
        request_id: Option<u64>,
        input: u64,
        name: String,
        generation: u64,
        type_name: &'static str,
        supplier: Supplier,
    ) -> ControlReply {
        let signed = Some(generation);
        self.decision(
            request_id,
            input,
            "addStarting",
            signed,
            &name,
            ("ABSENT", "RUNNING"),
            &["Build", "Start"],
        );
        let id = ProcessorId(generation);
        // a processor never built has no stream: what it asked is not recorded
        let supplier = ProcessorSupplier::boxed(supplier).named(type_name);
        let built = ProcessorHost::build(id, &name, supplier)
            .map_err(|panic| format!("supplier panicked: {panic}"));
        let mut host = match built {
            Ok(host) => {
                self.effect(request_id, input, "Build", &Ok(()), signed);
                host
            }
            Err(reason) => {
                self.effect(request_id, input, "Build", &Err(reason.clone()), signed);
                free_name(&self.shared, &name, generation);
                return ControlReply::not_applied(
                    request_id,
                    ReplyOutcome::Failed,
                    FailureKind::FailedEffect,
                    reason,
                    signed,
                    Some(name),
                );
            }
        };
        let mut subscriptions = StartSubscriptions {
            connector: &*self.connector,
            group: &self.shared.name,
            audit: &self.shared.audit,
            retry: self.policy,
            bindings: Vec::new(),
        };
        // once started, the recorder learns it was built, then the control requests its
        // start() made, before anything else it is given
        let started = host.start(&mut subscriptions, self.recorder.as_deref_mut());
        let StartSubscriptions { bindings, .. } = subscriptions;
        self.effect(
            request_id,
            input,
            "Start",
            &started.clone().map(|_| ()),
            signed,
        );
        if let Err(reason) = started {
            for binding in bindings {
                self.connector
                    .unsubscribe(&binding.feed, binding.binding.subscription);
            }
            self.drop_timer_ops_of(generation);
            free_name(&self.shared, &name, generation);
            tracing::error!(group = %self.shared.name, processor = %name, %reason, "processor start failed; processor dropped");
            return ControlReply::not_applied(
                request_id,
                ReplyOutcome::Failed,
                FailureKind::FailedEffect,
                reason,
                signed,
                Some(name),
            );
        }
        // what it holds of each feed it takes, for the feeds' sources to decide where
        // they resume (mongoose_core::resume): its loaded state's positions, what its
        // sink holds of its outputs, or, for a feed it reports neither of, nothing of
        // its own (it needs the input from its start when a source's pointer is lost)
        let consumer = format!("{}/{name}", self.shared.name);
        let mut reported: Vec<String> = Vec::new();
        for saved in host.processor().saved_positions() {
            reported.push(saved.feed.clone());
            self.connector.report_consumer_position(
                &saved.feed,
                mongoose_core::ConsumerPosition::new(
                    consumer.clone(),
                    mongoose_core::Held::Saved(saved.saved),
                ),
            );
        }
        for written in host.processor().written_positions() {
            if let Some(position) = written.saved {
                reported.push(written.feed.clone());
                self.connector.report_consumer_position(
                    &written.feed,
                    mongoose_core::ConsumerPosition::new(
                        consumer.clone(),
                        mongoose_core::Held::Written(position),
                    ),
                );
            }
        }
        for binding in &bindings {
            if !reported.contains(&binding.feed) {
                reported.push(binding.feed.clone());
                self.connector.report_consumer_position(
                    &binding.feed,
                    mongoose_core::ConsumerPosition::new(
                        consumer.clone(),
                        mongoose_core::Held::Nothing,
                    ),
                );
            }
        }
        let retry_safe = host.processor().retry_safe();
        let mut slot = Slot {
            name: name.clone(),
            host,
            retry_safe,
            quarantined: None,
            subscriptions: Vec::new(),
            services_seen: HashMap::new(),
        };
        for pending in bindings {
            slot.subscriptions
                .push((pending.feed.clone(), pending.binding.subscription));
            self.attach(generation, pending);
        }
        self.processors.insert(generation, slot);
        self.status_dirty = true;
        // a processor added later is given the registry's services when it is built
        for broadcast in (self.services)() {
            let event = broadcast.event();
            let _ = self.deliver_service(generation, &event);
        }
        ControlReply::applied_with(request_id, "started", signed, Some(name))
    }

    pub(super) fn attach(&mut self, generation: u64, pending: PendingBinding) {
        let PendingBinding {
            feed,
            binding,
            handler,
        } = pending;
        let group = &self.shared.name;
        let add = |reader: &mut dyn GroupReader, id: u64, handler: ErasedHandler| {
            if let Err(error) = reader.add(ProcessorId(id), handler) {
                // the connector checked the type when it subscribed: a connector's bug
                tracing::error!(%group, %feed, processor = id, %error, "a subscribed handler does not fit its feed's reader");
            }
        };
        if let Some(state) = self.feeds.iter_mut().find(|state| state.feed == feed) {
            if let Some((mut reader, probe)) = binding.reader {
                reader.set_wakeup(Arc::clone(&self.wakeup));
                // a new queue of a feed the group reads: its subscribers move to it
                for (id, moved) in state.reader.take_handlers() {
                    add(&mut *reader, id.0, moved);
                }
                state.reader = reader;
                state.probe = probe;
            }
            add(&mut *state.reader, generation, handler);
            state.subscribers.push(generation);
            return;
        }
        match binding.reader {
            Some((mut reader, probe)) => {
                reader.set_wakeup(Arc::clone(&self.wakeup));
                add(&mut *reader, generation, handler);
                self.feeds.push(FeedState {
                    feed,
                    reader,
                    probe,
                    subscribers: vec![generation],
                    handled: Vec::new(),
                    drop_reported: false,
                });
            }
            None => {
                tracing::error!(group = %self.shared.name, %feed, "subscription came without a reader and the group reads no queue of the feed");
            }
        }
    }

    pub(super) fn apply_stop(
        &mut self,
        request_id: Option<u64>,
        input: u64,
        name: String,
        generation: u64,
    ) -> ControlReply {
        let signed = Some(generation);
        let quarantined = match self.processors.get(&generation) {
            None => {
                self.decision(
                    request_id,
                    input,
                    "stopAlreadyStopped",
                    signed,
                    &name,
                    ("STOPPED", "STOPPED"),
                    &[],
                );
                return ControlReply::applied_with(
                    request_id,
                    "alreadyStopped",
                    signed,
                    Some(name),
                );
            }
            Some(slot) => slot.quarantined.clone(),
        };
        if let Some(reason) = quarantined {
            self.decision(
                request_id,
                input,
                "stopQuarantined",
                signed,
                &name,
                ("QUARANTINED", "QUARANTINED"),
                &[],
            );
            return ControlReply::not_applied(
                request_id,
                ReplyOutcome::Failed,
                FailureKind::Quarantined,
                format!("quarantined: {reason}"),
                signed,
                Some(name),
            );
        }
        self.decision(
            request_id,
            input,
            "stopStarted",
            signed,
            &name,
            ("RUNNING", "STOPPED"),
            &["Stop"],
        );
        let result = self.release(generation, true);
        self.effect(request_id, input, "Stop", &result, signed);
        ControlReply::applied_with(request_id, "stopped", signed, Some(name))
    }

    /// Stops a running processor: off every reader, timers cancelled, `stop()` called,
    /// its name freed. A failing `stop()` is reported and the release continues.
    pub(super) fn release(&mut self, generation: u64, by_request: bool) -> Result<(), String> {
        // its capture ends before its stop() (book: guarantees/control-plane.md:
        // stopping or removing the processor stops its capture)
        self.end_capture_of(generation, "stopped");
        self.detach(generation);
        let Some(mut slot) = self.processors.remove(&generation) else {
            return Ok(());
        };
        let result = slot.host.stop(by_request, self.recorder.as_deref_mut());
        self.drop_timer_ops_of(generation);
        if let Err(reason) = &result {
            tracing::error!(group = %self.shared.name, processor = %slot.name, %reason, "processor stop failed; release continues");
        }
        free_name(&self.shared, &slot.name, generation);
        self.status_dirty = true;
        result
    }

    /// Removes a processor from every reader (unsubscribing) and cancels its timers.
    pub(super) fn detach(&mut self, generation: u64) {
        let subscriptions = match self.processors.get_mut(&generation) {
            Some(slot) => std::mem::take(&mut slot.subscriptions),
            None => Vec::new(),
        };
        for state in &mut self.feeds {
            state.subscribers.retain(|s| *s != generation);
            state.reader.remove(ProcessorId(generation));
        }
        for (feed, subscription) in subscriptions {
            self.connector.unsubscribe(&feed, subscription);
        }
        self.feeds.retain(|state| !state.subscribers.is_empty());
        self.timers
            .retain(|Reverse((_, _, owner, _))| *owner != generation);
        self.status_dirty = true;
    }

    pub(super) fn apply_quarantine(&mut self, generation: u64, reason: &str) {
        let Some(slot) = self.processors.get_mut(&generation) else {
            return;
        };
        if slot.quarantined.is_none() {
            slot.quarantined = Some(reason.to_owned());
        }
        // its admin commands go with its routes
        slot.host.clear_commands();
        let name = slot.name.clone();
        // its capture is detached without calling it
        self.end_capture_of(generation, "quarantined");
        self.detach(generation);
        self.drop_timer_ops_of(generation);
        tracing::error!(group = %self.shared.name, processor = %name, generation, %reason, "processor quarantined: removed from every reader, timers cancelled, name and instance retained");
        self.audit().write(
            NewRecord::new(RecordType::Fallback, None, "ProcessorQuarantined")
                .generation(Some(generation))
                .name(Some(&name))
                .reason(reason.to_owned())
                .kind(FailureKind::Quarantined),
        );
    }

    /// A processor call failed outside dispatch (timer, service callback): quarantine
    /// it, or report it and keep it running when it is retry-safe.
    pub(super) fn contain(&mut self, generation: u64, what: &str, reason: String) {
        let Some(slot) = self.processors.get_mut(&generation) else {
            return;
        };
        if slot.retry_safe {
            tracing::error!(group = %self.shared.name, processor = %slot.name, %reason, "{what} failed; the retry-safe processor keeps running");
        } else if slot.quarantined.is_none() {
            slot.quarantined = Some(format!("{what}: {reason}"));
            self.quarantines
                .push((generation, format!("{what}: {reason}")));
        }
    }
}

pub(super) struct PendingBinding {
    pub(super) feed: String,
    pub(super) binding: FeedBinding,
    pub(super) handler: ErasedHandler,
}

/// Where a starting processor's subscriptions go: each is made at once (so an unknown
/// feed or a wrong type fails the start), and attached to the group's readers once
/// the start succeeded.
pub(super) struct StartSubscriptions<'a> {
    pub(super) connector: &'a dyn FeedConnector,
    pub(super) group: &'a str,
    pub(super) audit: &'a Arc<ControlAudit>,
    pub(super) retry: RetryPolicy,
    pub(super) bindings: Vec<PendingBinding>,
}

impl FeedSubscriptions for StartSubscriptions<'_> {
    fn subscribe(&mut self, feed: &str, handler: ErasedHandler) -> Result<(), ProcessorError> {
        let binding = self
            .connector
            .subscribe(SubscribeRequest {
                feed,
                group: self.group,
                item_type: handler.item_type(),
                item_type_name: handler.item_type_name(),
                retry: self.retry,
                audit: Some(self.audit),
            })
            .map_err(|error| ProcessorError::new(error.to_string()))?;
        self.bindings.push(PendingBinding {
            feed: feed.to_owned(),
            binding,
            handler,
        });
        Ok(())
    }
}
