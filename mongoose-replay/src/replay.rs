//! REPLAY: a [`Replayer`] feeds each recorded stream to a freshly built processor of
//! the recorded type, alone, and reports per processor whether its replay completed or
//! stopped, and why.
//!
//! * [`calls`]: the replayed processor's control requests, matched with the recorded
//!   ones and answered from the recording;
//! * [`journal`]: the items of journalled feeds, read from `journal.replay`;
//! * [`report`]: what a replay returns ([`Replay`], [`ProcessorReplay`], [`Loss`],
//!   [`AdminReply`]).

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;

use mongoose_control::{
    FeedSubscriptions, ProcessorHost, ProcessorSupplier, Service, ServiceEvent,
};
use mongoose_core::{engine, Delivery, ErasedHandler, ProcessorError, ProcessorId};

use crate::entry::Entry;
use crate::feeds::{FeedCodecs, ReplayRoute};
use crate::key::{parse_stream_key, StreamKeys};
use crate::record::{JOURNAL_FILE, RECORDING_FILE};
use crate::store::{RecordedStream, Recording};
use crate::tap;

mod calls;
mod journal;
mod report;

use calls::{CallMatch, Interception};
use journal::{read_journal, Journal};
pub use report::{AdminReply, Loss, ProcessorReplay, Replay};

/// A replayed processor's handlers by feed, typed through the feed's codec (none: a
/// feed the replay's codecs do not declare).
type Handlers = HashMap<String, Option<Box<dyn ReplayRoute>>>;

struct Build {
    name: String,
    type_name: &'static str,
    /// Taken when the build is replayed.
    supplier: Option<ProcessorSupplier>,
}

/// Replays a recording directory written by [`crate::Recorder`].
///
/// Declare the feeds (the same [`FeedCodecs`] as the recording) and the processor
/// builds, in the order the recorded group built them; each build gets the stream of
/// its key ([`StreamKeys`]). Then [`Replayer::run`] replays each stream on the calling
/// thread, one processor at a time:
///
/// * `Inline` / `Indexed`: decoded (an `Indexed` item from the journal) and given to
///   the processor's handler for the recorded feed, with the recorded delivery entered
///   into `DeliveryContext` for the whole cycle (handler and completion callbacks) and
///   cleared after, and its [`crate::Clock`]s pinned to the recorded readings;
/// * `TimerFired`: `on_timer` with the recorded schedule; `Stopped`: `stop()`;
/// * `AdminInvoked`: the admin command of that name the processor registered in its
///   `start` (`mongoose_control::admin`), with the recorded arguments and the clock
///   pinned; its answer joins [`Replay::admin_replies`]. No such command stops the
///   replay at once with "entry N could not be delivered within" (a replay is
///   synchronous: there is no delivery timeout to wait for);
/// * `ServiceChanged`: the service the replay was given at the recorded version
///   ([`Replayer::service`]) is delivered (or withdrawn) through the processor's
///   services callback, with the clock pinned;
/// * `Failed`: stops the replay; `Dropped`: a loss, the replay carries on;
/// * `ControlCall`: the request the processor must make while the entry before it is
///   replayed (before its first entry: in its build and `start()`); answered from the
///   recording, never executed live (see the crate's "Control requests").
///
/// What the processor sends to [`crate::OutputSink`]s is captured, not delivered.
pub struct Replayer {
    dir: PathBuf,
    recording: Result<Recording, String>,
    journal: Option<Result<Journal, String>>,
    /// Why the journal is incomplete (empty: complete, or no journal).
    journal_incomplete: Vec<String>,
    feeds: FeedCodecs,
    builds: Vec<Build>,
    /// The replay's service registry: instances by name and registry version.
    services: HashMap<String, BTreeMap<u64, Arc<dyn Service>>>,
}

impl fmt::Debug for Replayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Replayer")
            .field("dir", &self.dir)
            .field("builds", &self.builds.len())
            .finish()
    }
}

impl Replayer {
    /// Opens the recording directory `dir`. A store that cannot be read is not an
    /// error here: every processor's replay stops with "the replay store could not be
    /// read".
    pub fn open(dir: impl AsRef<Path>, feeds: FeedCodecs) -> Self {
        let dir = dir.as_ref().to_path_buf();
        let recording = Recording::read(dir.join(RECORDING_FILE)).map_err(|e| e.to_string());
        let journal_path = dir.join(JOURNAL_FILE);
        let mut journal_incomplete = Vec::new();
        let journal = journal_path.exists().then(|| {
            read_journal(&journal_path)
                .map(|(items, incomplete)| {
                    journal_incomplete = incomplete;
                    items
                })
                .map_err(|e| e.to_string())
        });
        Replayer {
            dir,
            recording,
            journal,
            journal_incomplete,
            feeds,
            builds: Vec::new(),
            services: HashMap::new(),
        }
    }

    /// Gives the replay the service `name` at registry `version`: a `ServiceChanged`
    /// entry that delivered `name` at `version` in the recorded run delivers `service`
    /// to the replayed processor at that point (its services callback runs with the
    /// recorded clock readings), and a recorded withdrawal withdraws it. Give the
    /// versions the recording names (`mongoose replay` prints them when it stops): a
    /// recorded version this replay was not given stops that processor's replay with
    /// "recorded service S at version V is unavailable"; neither a later instance nor
    /// another version is substituted.
    pub fn service(mut self, name: &str, version: u64, service: Arc<dyn Service>) -> Self {
        self.services
            .entry(name.to_owned())
            .or_default()
            .insert(version, service);
        self
    }

    /// Adds a build of processor `name` (its first build replays stream `name`, its
    /// second `name#2`, ...).
    ///
    /// `supplier` is what a live group is given: a closure returning the processor
    /// (named after its type, which is checked against the recorded provenance), or a
    /// [`ProcessorSupplier::boxed`] factory of a configured one, named or not (`""`:
    /// not checked).
    pub fn processor(mut self, name: &str, supplier: impl Into<ProcessorSupplier>) -> Self {
        let supplier = supplier.into();
        self.builds.push(Build {
            name: name.to_owned(),
            type_name: supplier.type_name(),
            supplier: Some(supplier),
        });
        self
    }

    /// The recording as read (`Err` with the reason when it could not be read).
    pub fn recording(&self) -> Result<&Recording, &str> {
        self.recording.as_ref().map_err(String::as_str)
    }

    /// Replays every build's stream.
    pub fn run(mut self) -> Replay {
        let mut replay = Replay::default();
        let mut keys = StreamKeys::new();
        let mut claimed = Vec::new();
        let builds = std::mem::take(&mut self.builds);
        for (index, mut build) in builds.into_iter().enumerate() {
            let key = keys.built(&build.name);
            let mut result = ProcessorReplay {
                key: key.key().to_owned(),
                name: build.name.clone(),
                recorded_type: String::new(),
                entries: 0,
                replayed: 0,
                stopped: None,
                losses: Vec::new(),
                outputs: Vec::new(),
                admin_replies: Vec::new(),
            };
            let recording = match &self.recording {
                Ok(recording) => recording,
                Err(error) => {
                    result.stopped = Some(format!("the replay store could not be read: {error}"));
                    replay.processors.push(result);
                    continue;
                }
            };
            let stream = match recording.stream(key.key()) {
                Some(stream) => stream,
                None => {
                    if key.ordinal() > 1 {
                        result.stopped = Some(format!(
                            "no stream was recorded for {} (build {} of {:?}): it is not replayed as empty",
                            key.key(),
                            key.ordinal(),
                            build.name
                        ));
                    } else if let (Some(_), Err(error)) =
                        (recording.stream(&build.name), parse_stream_key(&build.name))
                    {
                        claimed.push(build.name.clone());
                        result.stopped = Some(error.to_string());
                    }
                    // a first build with no stream got no input live: replayed as empty
                    replay.processors.push(result);
                    continue;
                }
            };
            claimed.push(stream.key().to_owned());
            result.entries = stream.entries().len();
            if let Some(provenance) = stream.provenance() {
                result.recorded_type = provenance.processor_type.clone();
            }
            self.replay_stream(
                ProcessorId(index as u64 + 1),
                &mut build,
                stream,
                &mut result,
            );
            replay.processors.push(result);
        }
        match &self.recording {
            Ok(recording) => replay
                .incomplete
                .extend(recording.incomplete().iter().map(ToString::to_string)),
            Err(error) => replay.unreadable = Some(error.clone()),
        }
        match &self.journal {
            Some(Err(error)) => replay
                .incomplete
                .push(format!("{JOURNAL_FILE} could not be read: {error}")),
            Some(Ok(_)) => replay.incomplete.extend(
                self.journal_incomplete
                    .iter()
                    .map(|reason| format!("{JOURNAL_FILE}: {reason}")),
            ),
            None => {}
        }
        if let Ok(recording) = &self.recording {
            replay.unclaimed = recording
                .streams()
                .iter()
                .map(|stream| stream.key().to_owned())
                .filter(|key| !claimed.contains(key))
                .collect();
        }
        replay
    }

    fn replay_stream(
        &self,
        id: ProcessorId,
        build: &mut Build,
        stream: &RecordedStream,
        result: &mut ProcessorReplay,
    ) {
        if let Some(provenance) = stream.provenance() {
            if !provenance.processor_type.is_empty()
                && !build.type_name.is_empty()
                && provenance.processor_type != build.type_name
            {
                result.stopped = Some(format!(
                    "the replayed processor is not the recorded one: stream {} was recorded by {}, the replay builds {}",
                    stream.key(),
                    provenance.processor_type,
                    build.type_name
                ));
                return;
            }
        }
        // the processor's control requests are answered from the recording, never
        // executed live (book: guarantees/control-plane.md)
        let calls = Rc::new(RefCell::new(CallMatch::default()));
        let entries = stream.entries();
        // the requests its build and start() made are recorded before the first input
        let mut index = calls
            .borrow_mut()
            .expect(entries, 0, "in start()".to_owned());
        // called through the host a live group calls it through; its control requests
        // are answered from the recording
        let Some(supplier) = build.supplier.take() else {
            result.stopped = Some(format!("processor {} was already replayed", build.name));
            return;
        };
        let built = ProcessorHost::build_intercepted(
            id,
            &build.name,
            supplier,
            Box::new(Interception(Rc::clone(&calls))),
        );
        let mut host = match built {
            Ok(host) => host,
            Err(panic) => {
                result.stopped = Some(format!(
                    "the replayed processor could not be built: {panic}"
                ));
                return;
            }
        };
        let mut routes = Routes {
            feeds: &self.feeds,
            handlers: HashMap::new(),
        };
        // the admin commands it registers in start are the ones its AdminInvoked
        // entries call; its services callback is the one ServiceChanged entries call
        let started = host
            .start(&mut routes, None)
            .map_err(|reason| format!("the replayed processor could not be started: {reason}"));
        if let Some(reason) = calls.borrow_mut().verdict(started.err()) {
            result.stopped = Some(reason);
            return;
        }
        result.replayed += index;
        let mut routed = Routed {
            handlers: routes.handlers,
            services: HashSet::new(),
        };
        while index < entries.len() {
            let number = index + 1;
            let entry = &entries[index];
            // the requests made while handling this entry follow it
            let next = calls
                .borrow_mut()
                .expect(entries, index + 1, format!("at entry {number}"));
            let outcome = self.replay_entry(&mut host, &mut routed, number, entry, result);
            let failed = match outcome {
                Step::Next => None,
                Step::Stop(reason) => Some(reason),
            };
            if let Some(reason) = calls.borrow_mut().verdict(failed) {
                result.stopped = Some(reason);
                return;
            }
            result.replayed += next - index;
            index = next;
        }
    }

    /// Replays a `ServiceChanged` entry from the replay's service registry
    /// ([`Replayer::service`]), through the processor's services callback with the clock
    /// pinned (book: running/record-and-replay.md, service changes).
    #[allow(clippy::too_many_arguments)]
    fn replay_service(
        &self,
        host: &mut ProcessorHost,
        held: &mut HashSet<String>,
        number: usize,
        (service, version, delivered, clock): (&String, u64, bool, &Vec<i64>),
        result: &mut ProcessorReplay,
    ) -> Step {
        let not_delivered = |why: &str| {
            Step::Stop(format!(
                "recorded service callback for {service} was not delivered (entry {number}): {why}"
            ))
        };
        if !host.subscribes_to_services() {
            return not_delivered("the replayed processor does not subscribe to services");
        }
        let event = if delivered {
            if held.contains(service) {
                return not_delivered(
                    "the replayed processor already held it: it reached the processor before its recorded position",
                );
            }
            let versions = self.services.get(service);
            let Some(instance) = versions.and_then(|versions| versions.get(&version)) else {
                return Step::Stop(match versions {
                    Some(versions) => format!(
                        "recorded service {service} at version {version} is unavailable (entry {number}): the replay was given version(s) {}",
                        versions.keys().map(u64::to_string).collect::<Vec<_>>().join(", ")
                    ),
                    None => format!(
                        "recorded service {service} at version {version} is unavailable (entry {number}): give it to the replay with Replayer::service(\"{service}\", {version}, ...)"
                    ),
                });
            };
            ServiceEvent::Registered {
                name: service.clone(),
                version,
                service: Arc::clone(instance),
            }
        } else {
            if !held.contains(service) {
                return Step::Stop(format!(
                    "recorded withdrawal of service {service} has no delivered incarnation (entry {number}): the replayed processor never held it"
                ));
            }
            ServiceEvent::Deregistered {
                name: service.clone(),
                version,
            }
        };
        let mut failed = None;
        let step = run_pinned(number, clock, result, || {
            if let Err(reason) = host.deliver_service(&event, None) {
                failed = Some(reason);
            }
            Ok(())
        });
        if let Some(reason) = failed {
            return not_delivered(&reason);
        }
        if matches!(step, Step::Next) {
            if delivered {
                held.insert(service.clone());
            } else {
                held.remove(service);
            }
        }
        step
    }

    fn replay_entry(
        &self,
        host: &mut ProcessorHost,
        routed: &mut Routed,
        number: usize,
        entry: &Entry,
        result: &mut ProcessorReplay,
    ) -> Step {
        match entry {
            Entry::Indexed {
                feed,
                sequence,
                route,
                delivery,
                clock,
            } => {
                let payload = match &self.journal {
                    None => {
                        return Step::Stop(format!(
                            "the journal holds no item {sequence} of feed {feed} (entry {number}): the recording has no journal"
                        ))
                    }
                    Some(Err(error)) => {
                        return Step::Stop(format!("the replay store could not be read: its journal: {error}"))
                    }
                    Some(Ok(journal)) => match journal.get(&(feed.clone(), *sequence)) {
                        Some(payload) => payload,
                        None => {
                            return Step::Stop(format!(
                                "the journal holds no item {sequence} of feed {feed} (entry {number})"
                            ))
                        }
                    },
                };
                self.replay_input(
                    host,
                    &mut routed.handlers,
                    number,
                    route,
                    payload,
                    delivery.as_ref(),
                    clock,
                    result,
                )
            }
            Entry::Inline {
                payload,
                route,
                delivery,
                clock,
            } => self.replay_input(
                host,
                &mut routed.handlers,
                number,
                route,
                payload,
                delivery.as_ref(),
                clock,
                result,
            ),
            Entry::TimerFired { schedule, clock } => {
                run_pinned(number, clock, result, || host.fire_timer(*schedule, None))
            }
            Entry::Stopped { clock } => {
                run_pinned(number, clock, result, || host.stop(false, None))
            }
            Entry::Failed { reason } => Step::Stop(format!(
                "the recorded run failed here (entry {number}): {reason}"
            )),
            Entry::Dropped { feed, sequence } => {
                result.losses.push(Loss {
                    stream: result.key.clone(),
                    feed: feed.clone(),
                    sequence: *sequence,
                });
                Step::Next
            }
            Entry::AdminInvoked {
                command,
                args,
                clock,
            } => replay_admin(host, number, (command, args, clock), result),
            Entry::ServiceChanged {
                service,
                version,
                delivered,
                clock,
            } => self.replay_service(
                host,
                &mut routed.services,
                number,
                (service, *version, *delivered, clock),
                result,
            ),
            // the stream loop takes these as the requests it expects after each entry
            // (and before the first): one cannot get here
            Entry::ControlCall { .. } => Step::Stop(format!(
                "entry {number} could not be replayed: a ControlCall entry out of place"
            )),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn replay_input(
        &self,
        host: &mut ProcessorHost,
        handlers: &mut Handlers,
        number: usize,
        route: &str,
        payload: &[u8],
        delivery: Option<&Delivery>,
        clock: &[i64],
        result: &mut ProcessorReplay,
    ) -> Step {
        let Some(codec) = self.feeds.feeds.get(route) else {
            return Step::Stop(format!(
                "entry {number} could not be replayed: feed '{route}' is not declared in the replay's FeedCodecs"
            ));
        };
        let item = match (codec.decode)(payload) {
            Ok(item) => item,
            Err(error) => {
                return Step::Stop(format!("entry {number} could not be replayed: {error}"))
            }
        };
        let Some(Some(typed)) = handlers.get(route) else {
            return Step::Stop(format!(
                "entry {number} could not be replayed: the replayed processor does not subscribe to feed '{route}'"
            ));
        };
        run_pinned(number, clock, result, || {
            // entered for the whole replayed cycle, cleared after
            let _entered = delivery.map(engine::enter_delivery);
            typed.call_handler(host, route, &*item)?;
            let Some(delivery) = delivery else {
                return Ok(());
            };
            // the callbacks run inside the input's replay, where they ran live (book: guarantees/completion-hooks.md)
            while let Some(completion) = engine::take_next_completion() {
                host.complete(completion.key, delivery, None)
                    .map_err(|reason| {
                        format!(
                            "a delivery-complete callback (key {}) failed: {reason}",
                            completion.key.0
                        )
                    })?;
            }
            Ok(())
        })
    }
}

/// Replays an `AdminInvoked` entry: the command the replayed processor registered in
/// its start, called with the recorded arguments and the clock pinned to the recorded
/// readings; its answer joins the admin replies. A replay is synchronous, so a command
/// the processor never registered stops the replay at once (the Java original waits up
/// to its delivery timeout first).
fn replay_admin(
    host: &mut ProcessorHost,
    number: usize,
    (command, args, clock): (&String, &Vec<String>, &Vec<i64>),
    result: &mut ProcessorReplay,
) -> Step {
    if !host.has_command(command) {
        return Step::Stop(format!(
            "entry {number} could not be delivered within the replay: the replayed processor \
             has no admin command '{command}' (its commands: {})",
            host.command_listing()
        ));
    }
    let mut answer = None;
    let step = run_pinned(number, clock, result, || {
        // a command that panicked stops the replay here, as it failed live
        answer = Some(host.invoke_admin(command, args, None)?);
        Ok(())
    });
    if let Some(answer) = answer {
        result.admin_replies.push(AdminReply {
            command: command.clone(),
            args: args.clone(),
            result: answer,
        });
    }
    step
}

enum Step {
    Next,
    Stop(String),
}

/// Runs one replayed entry's calls (through the processor's host, which contains
/// their failures) with the clock pinned; checks the readings.
fn run_pinned(
    number: usize,
    clock: &[i64],
    result: &mut ProcessorReplay,
    call: impl FnOnce() -> Result<(), String>,
) -> Step {
    tap::pin(clock);
    let outcome = call();
    let pin = tap::unpin();
    result.outputs.extend(pin.outputs);
    if let Err(reason) = outcome {
        return Step::Stop(format!("entry {number} could not be replayed: {reason}"));
    }
    let taken = clock.len() - pin.readings.len() + pin.extra;
    if taken != clock.len() {
        return Step::Stop(format!(
            "clock divergence at entry {number}: the recorded cycle read the clock {} times, the replayed one {taken}",
            clock.len()
        ));
    }
    Step::Next
}

/// The handlers a replayed processor subscribes in `start`.
struct Routes<'a> {
    feeds: &'a FeedCodecs,
    handlers: Handlers,
}

/// What a replayed processor set up in `start` beside what its host keeps (its admin
/// commands and services callback), which its entries are replayed through.
struct Routed {
    handlers: Handlers,
    /// The services it holds.
    services: HashSet<String>,
}

impl FeedSubscriptions for Routes<'_> {
    fn subscribe(&mut self, feed: &str, handler: ErasedHandler) -> Result<(), ProcessorError> {
        let route = match self.feeds.feeds.get(feed) {
            Some(codec) if codec.item_type != handler.item_type() => {
                return Err(ProcessorError::new(format!(
                    "feed '{feed}' is declared with items {}, but the handler takes {}",
                    codec.type_name,
                    handler.item_type_name()
                )))
            }
            Some(codec) => Some((codec.route)(handler)?),
            None => None,
        };
        self.handlers.insert(feed.to_owned(), route);
        Ok(())
    }
}
