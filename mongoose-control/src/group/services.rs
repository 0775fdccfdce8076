//! Services: a registry broadcast decided in order (a stale version is ignored) and
//! delivered once per version to each processor's services callback.

use mongoose_core::FailureKind;

use super::Runtime;
use crate::reply::{ControlReply, ReplyOutcome};
use crate::services::{ServiceBroadcast, ServiceEvent};

impl Runtime {
    pub(super) fn apply_service(
        &mut self,
        request_id: Option<u64>,
        input: u64,
        broadcast: ServiceBroadcast,
    ) -> ControlReply {
        let last = self
            .service_versions
            .get(&broadcast.name)
            .copied()
            .unwrap_or(0);
        if broadcast.version <= last {
            let found = format!("v{last}");
            self.decision(
                request_id,
                input,
                "serviceStale",
                None,
                &broadcast.name,
                (&found, &found),
                &[],
            );
            return ControlReply::applied_with(
                request_id,
                format!("ignored: stale version {}", broadcast.version),
                None,
                Some(broadcast.name),
            );
        }
        self.decision(
            request_id,
            input,
            "serviceDeliver",
            None,
            &broadcast.name,
            (&format!("v{last}"), &format!("v{}", broadcast.version)),
            &["DeliverService"],
        );
        self.service_versions
            .insert(broadcast.name.clone(), broadcast.version);
        let event = broadcast.event();
        let mut failures = Vec::new();
        let generations: Vec<u64> = self.processors.keys().copied().collect();
        for generation in generations {
            if let Err(reason) = self.deliver_service(generation, &event) {
                failures.push(reason);
            }
        }
        let result = if failures.is_empty() {
            Ok(())
        } else {
            Err(failures.join("; "))
        };
        self.effect(request_id, input, "DeliverService", &result, None);
        match result {
            Ok(()) => {
                ControlReply::applied_with(request_id, "delivered", None, Some(broadcast.name))
            }
            Err(reason) => ControlReply::not_applied(
                request_id,
                ReplyOutcome::Failed,
                FailureKind::FailedEffect,
                format!("delivered with failures: {reason}"),
                None,
                Some(broadcast.name),
            ),
        }
    }

    /// Gives one processor a service event, once per version. A quarantined processor
    /// that holds the service cannot confirm its withdrawal.
    pub(super) fn deliver_service(
        &mut self,
        generation: u64,
        event: &ServiceEvent,
    ) -> Result<(), String> {
        let Some(slot) = self.processors.get_mut(&generation) else {
            return Ok(());
        };
        let (version, registering) = match event {
            ServiceEvent::Registered { version, .. } => (*version, true),
            ServiceEvent::Deregistered { version, .. } => (*version, false),
        };
        let name = event.name().to_owned();
        let (seen_version, present) = slot.services_seen.get(&name).copied().unwrap_or((0, false));
        if seen_version >= version {
            return Ok(());
        }
        if slot.quarantined.is_some() {
            return if !registering && present {
                Err(format!(
                    "quarantined processor '{}' may still hold '{name}'",
                    slot.name
                ))
            } else {
                Ok(())
            };
        }
        let subscribed = slot.host.subscribes_to_services();
        if !subscribed || (!registering && !present) {
            slot.services_seen
                .insert(name, (version, registering && subscribed));
            return Ok(());
        }
        match slot
            .host
            .deliver_service(event, self.recorder.as_deref_mut())
        {
            Ok(()) => {
                slot.services_seen
                    .insert(name.clone(), (version, registering));
                Ok(())
            }
            Err(reason) => {
                // a failed withdrawal leaves the service possibly held
                slot.services_seen
                    .insert(name.clone(), (version, !registering || present));
                let processor_name = slot.name.clone();
                self.contain(generation, "service callback", reason.clone());
                Err(format!("{processor_name}: {reason}"))
            }
        }
    }
}
