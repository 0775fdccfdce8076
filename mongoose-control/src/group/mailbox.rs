//! The control mailbox: the requests a group decides in order, how a sender is
//! admitted or refused, the names reserved for adds, and the answer to a request the
//! group will never decide (closed, or dead).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mongoose_core::FailureKind;

use super::{write_reply_record, GroupShared, GroupState, ProcessorGroup, Runtime, Supplier};
use crate::reply::{ControlReply, ReplyOutcome, ReplySender};
use crate::services::ServiceBroadcast;
use mongoose_audit::{NewRecord, RecordType};

pub(crate) enum Request {
    Add {
        name: String,
        generation: u64,
        /// The processor's type name, for a recorder's provenance ("" when unknown).
        type_name: &'static str,
        supplier: Supplier,
    },
    Stop {
        name: String,
        generation: u64,
    },
    Service(ServiceBroadcast),
    /// Runs a processor's admin command (see [`crate::admin`]).
    Admin {
        name: String,
        command: String,
        args: Vec<String>,
    },
    /// Starts an audit capture of processor `identity.generation` (see
    /// [`mongoose_audit::capture`]).
    CaptureStart(Box<CaptureStart>),
    /// Stops processor `generation`'s audit capture.
    CaptureStop {
        name: String,
        generation: u64,
    },
}

impl Request {
    fn fact(&self) -> &'static str {
        match self {
            Request::Add { .. } => "Add",
            Request::Stop { .. } => "Stop",
            Request::Service(broadcast) => match broadcast.change {
                crate::services::ServiceChange::Registered(_) => "Register",
                crate::services::ServiceChange::Deregistered => "Deregister",
            },
            Request::Admin { .. } => "Admin",
            Request::CaptureStart(_) => "CaptureStart",
            Request::CaptureStop { .. } => "CaptureStop",
        }
    }

    fn subject(&self) -> (Option<u64>, Option<&str>) {
        match self {
            Request::Add {
                name, generation, ..
            }
            | Request::Stop { name, generation }
            | Request::CaptureStop { name, generation } => (Some(*generation), Some(name)),
            Request::CaptureStart(start) => {
                (Some(start.identity.generation), Some(&start.identity.name))
            }
            Request::Service(broadcast) => (None, Some(&broadcast.name)),
            Request::Admin { name, .. } => (None, Some(name)),
        }
    }
}

/// What a capture start carries (boxed: the mailbox's requests stay small).
pub(crate) struct CaptureStart {
    pub(crate) identity: mongoose_audit::capture::CaptureIdentity,
    pub(crate) settings: mongoose_audit::capture::CaptureSettings,
}

/// A control request in a group's mailbox, with where its reply goes.
pub(crate) struct Letter {
    pub(crate) request: Request,
    pub(crate) reply: ReplySender,
}

/// How a sender waits for room in a full mailbox.
pub(crate) enum Admission {
    /// Refuse at once (agent threads, stage calls, broadcasts).
    Immediate,
    /// Back off until the deadline, leaving at once when the server begins to stop.
    Backoff {
        deadline: Instant,
        stopping: Arc<AtomicBool>,
    },
}

/// Why a letter was not admitted into the mailbox.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum NotAdmitted {
    Full,
    Deadline,
    NotRunning(GroupState),
    ServerStopping,
}

pub(super) struct Mailbox {
    pub(super) queue: VecDeque<Letter>,
    pub(super) state: GroupState,
    pub(super) close_requested: bool,
    /// Capture opens their helpers handed back, for the group's thread to install
    /// between event cycles (never refused for room: each holds a resource).
    pub(super) opened: Vec<super::OpenedCapture>,
}

impl ProcessorGroup {
    /// Reserves `name` for a new registration; returns its generation.
    pub(crate) fn reserve(&self, name: &str) -> Option<u64> {
        let mut names = self.shared.names.lock();
        if names.contains_key(name) {
            return None;
        }
        let generation = self.shared.next_generation.fetch_add(1, Ordering::Relaxed);
        names.insert(name.to_owned(), generation);
        Some(generation)
    }

    /// Releases a reservation that was never admitted.
    pub(crate) fn release_reservation(&self, name: &str, generation: u64) {
        free_name(&self.shared, name, generation);
    }

    /// The generation admitted under `name` now.
    pub(crate) fn admitted_generation(&self, name: &str) -> Option<u64> {
        self.shared.names.lock().get(name).copied()
    }

    /// Puts a letter in the mailbox.
    pub(crate) fn admit(
        &self,
        letter: Letter,
        admission: Admission,
    ) -> Result<(), (Letter, NotAdmitted)> {
        let mut pause = Duration::from_micros(50);
        loop {
            {
                let mut mailbox = self.shared.mailbox.lock();
                if mailbox.close_requested
                    || !matches!(mailbox.state, GroupState::NotStarted | GroupState::Running)
                {
                    let state = mailbox.state;
                    return Err((letter, NotAdmitted::NotRunning(state)));
                }
                if mailbox.queue.len() < self.shared.capacity {
                    mailbox.queue.push_back(letter);
                    drop(mailbox);
                    self.wake();
                    return Ok(());
                }
            }
            match &admission {
                Admission::Immediate => return Err((letter, NotAdmitted::Full)),
                Admission::Backoff { deadline, stopping } => {
                    if stopping.load(Ordering::Acquire) {
                        return Err((letter, NotAdmitted::ServerStopping));
                    }
                    let now = Instant::now();
                    if now >= *deadline {
                        return Err((letter, NotAdmitted::Deadline));
                    }
                    debug_assert!(
                        !mongoose_core::agent::is_agent_thread(),
                        "invariant 3: an agent thread waits for room in a full control mailbox"
                    );
                    std::thread::sleep(pause.min(*deadline - now));
                    pause = (pause * 2).min(Duration::from_millis(5));
                }
            }
        }
    }

    /// The full-mailbox timeout of this group.
    pub(crate) fn full_timeout(&self) -> Duration {
        self.shared.full_timeout
    }

    /// Answers a letter the group never took (refused at admission) with `reply`,
    /// on the caller's thread.
    pub(crate) fn answer_refused(letter: Letter, reply: ControlReply) {
        letter.reply.complete_here(reply);
    }
}

pub(super) fn free_name(shared: &GroupShared, name: &str, generation: u64) {
    let mut names = shared.names.lock();
    if names.get(name) == Some(&generation) {
        names.remove(name);
    }
}

pub(super) fn answer_not_running(
    shared: &GroupShared,
    letter: Letter,
    reason: &str,
    dead: Option<&str>,
) {
    let Letter { request, reply } = letter;
    let request_id = reply.request_id;
    let (generation, name) = request.subject();
    let name = name.map(str::to_owned);
    let input = shared.audit.write(
        NewRecord::new(RecordType::Input, request_id, request.fact())
            .generation(generation)
            .name(name.as_deref()),
    );
    if let Request::Add {
        name: added,
        generation: added_generation,
        ..
    } = &request
    {
        // the supplier is dropped unrun; the name is free again
        free_name(shared, added, *added_generation);
    }
    let (outcome, kind, reason) = match dead {
        Some(message) => (
            ReplyOutcome::Failed,
            FailureKind::FailedDead,
            format!("group died: {message}"),
        ),
        None => (
            ReplyOutcome::NotRunning,
            FailureKind::FailedShutdown,
            reason.to_owned(),
        ),
    };
    shared.audit.write(
        NewRecord::new(RecordType::Fallback, request_id, "NotRunning")
            .cause(input)
            .reason(reason.clone()),
    );
    let mut reply_value =
        ControlReply::not_applied(request_id, outcome, kind, reason, generation, name);
    reply_value.evidence = shared.audit.evidence();
    write_reply_record(&shared.audit, &reply_value, input, None);
    reply.complete_on(&shared.executor, reply_value);
}

impl Runtime {
    /// Decides queued requests; `None` when the group is to close.
    pub(super) fn drain_mailbox(&mut self) -> Option<usize> {
        let mut done = 0;
        while done < 64 {
            let next = {
                let mut mailbox = self.shared.mailbox.lock();
                if mailbox.close_requested {
                    return None;
                }
                mailbox.queue.pop_front()
            };
            let Some(letter) = next else {
                break;
            };
            self.decide(letter);
            done += 1;
        }
        Some(done)
    }

    pub(super) fn decide(&mut self, letter: Letter) {
        let Letter { request, reply } = letter;
        let request_id = reply.request_id;
        let (generation, name) = request.subject();
        let input = self.audit().write(
            NewRecord::new(RecordType::Input, request_id, request.fact())
                .generation(generation)
                .name(name),
        );
        self.in_flight = Some((reply, input));
        self.effects_of_request = 0;
        if self.shared.fault.swap(false, Ordering::AcqRel) {
            panic!("injected control fault");
        }
        let answer = match request {
            Request::Add {
                name,
                generation,
                type_name,
                supplier,
            } => Some(self.apply_add(request_id, input, name, generation, type_name, supplier)),
            Request::Stop { name, generation } => {
                Some(self.apply_stop(request_id, input, name, generation))
            }
            Request::Service(broadcast) => Some(self.apply_service(request_id, input, broadcast)),
            Request::Admin {
                name,
                command,
                args,
            } => Some(self.apply_admin(request_id, input, name, command, args)),
            // answered once the capture is installed (or its open failed or timed out)
            Request::CaptureStart(start) => {
                let CaptureStart { identity, settings } = *start;
                self.apply_capture_start(request_id, input, identity, settings)
            }
            Request::CaptureStop { name, generation } => {
                Some(self.apply_capture_stop(request_id, input, name, generation))
            }
        };
        // the status shows the transition before anyone learns it applied
        self.settle();
        if let Some(answer) = answer {
            self.answer(answer);
        }
    }
}
