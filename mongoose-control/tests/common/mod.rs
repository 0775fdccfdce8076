//! Test doubles shared by the integration tests.
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use mongoose_control::memory::{MemoryFeeds, MemoryPublisher};
use mongoose_control::{context, ControlConfig, ControlPlane, IdleStrategy, ServiceEvent};
use mongoose_core::{agent, Processor, ProcessorError, StartContext};
use parking_lot::Mutex;

/// Generous: the machine is shared and noisy; tests wait for conditions, not times.
pub const WAIT: Duration = Duration::from_secs(30);

pub type Log = Arc<Mutex<Vec<String>>>;

pub fn new_log() -> Log {
    Arc::new(Mutex::new(Vec::new()))
}

pub fn count(log: &Log, entry: &str) -> usize {
    log.lock().iter().filter(|e| e.as_str() == entry).count()
}

pub fn wait_until(mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        if condition() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    condition()
}

pub fn config() -> ControlConfig {
    ControlConfig {
        control_wait: WAIT,
        idle: IdleStrategy::SleepingMillis(1),
        ..ControlConfig::default()
    }
}

pub fn plane_with_feed() -> (ControlPlane, MemoryPublisher<u64>, MemoryFeeds) {
    let feeds = MemoryFeeds::default();
    let numbers = feeds.feed::<u64>("numbers");
    let plane = ControlPlane::new(config(), Arc::new(feeds.clone()));
    (plane, numbers, feeds)
}

type ItemFn = Box<dyn FnMut(&str, u64) -> Result<(), ProcessorError> + Send>;
type TimerFn = Box<dyn FnMut(&str, u64) -> Result<(), ProcessorError> + Send>;
type ServiceFn = Box<dyn FnMut(&ServiceEvent) -> Result<(), ProcessorError> + Send>;

/// A processor whose behaviour each test scripts. It logs `name:item`, `name:timer:N`,
/// `name:stop`, `name:service:+svc` / `-svc`, and `name:start-thread:<agent?>`.
pub struct Scripted {
    pub name: String,
    pub log: Log,
    pub feed: Option<&'static str>,
    pub services: bool,
    pub retry_safe: bool,
    pub fail_start: Option<String>,
    pub on_item: Option<ItemFn>,
    pub on_timer: Option<TimerFn>,
    pub on_service: Option<ServiceFn>,
    pub on_start: Option<Box<dyn FnMut() + Send>>,
}

impl Scripted {
    pub fn new(name: &str, log: &Log) -> Self {
        Scripted {
            name: name.to_owned(),
            log: Arc::clone(log),
            feed: Some("numbers"),
            services: false,
            retry_safe: false,
            fail_start: None,
            on_item: None,
            on_timer: None,
            on_service: None,
            on_start: None,
        }
    }

    pub fn no_feed(mut self) -> Self {
        self.feed = None;
        self
    }

    pub fn with_services(mut self) -> Self {
        self.services = true;
        self
    }

    pub fn retry_safe(mut self) -> Self {
        self.retry_safe = true;
        self
    }

    pub fn failing_start(mut self, reason: &str) -> Self {
        self.fail_start = Some(reason.to_owned());
        self
    }

    pub fn on_item(
        mut self,
        f: impl FnMut(&str, u64) -> Result<(), ProcessorError> + Send + 'static,
    ) -> Self {
        self.on_item = Some(Box::new(f));
        self
    }

    pub fn on_timer(
        mut self,
        f: impl FnMut(&str, u64) -> Result<(), ProcessorError> + Send + 'static,
    ) -> Self {
        self.on_timer = Some(Box::new(f));
        self
    }

    pub fn on_service(
        mut self,
        f: impl FnMut(&ServiceEvent) -> Result<(), ProcessorError> + Send + 'static,
    ) -> Self {
        self.on_service = Some(Box::new(f));
        self
    }

    pub fn on_start(mut self, f: impl FnMut() + Send + 'static) -> Self {
        self.on_start = Some(Box::new(f));
        self
    }

    fn handle(&mut self, item: &u64) -> Result<(), ProcessorError> {
        let result = match self.on_item.as_mut() {
            Some(f) => f(&self.name, *item),
            None => Ok(()),
        };
        if result.is_ok() {
            self.log.lock().push(format!("{}:{item}", self.name));
        }
        result
    }

    fn service(&mut self, event: &ServiceEvent) -> Result<(), ProcessorError> {
        if let Some(f) = self.on_service.as_mut() {
            f(event)?;
        }
        let sign = match event {
            ServiceEvent::Registered { .. } => "+",
            ServiceEvent::Deregistered { .. } => "-",
        };
        let on_agent = agent::is_agent_thread();
        self.log.lock().push(format!(
            "{}:service:{sign}{}:{}",
            self.name,
            event.name(),
            if on_agent { "agent" } else { "caller" }
        ));
        Ok(())
    }
}

impl Processor for Scripted {
    fn start(&mut self, context: &mut StartContext<'_>) -> Result<(), ProcessorError> {
        self.log.lock().push(format!(
            "{}:start-thread:{}",
            self.name,
            agent::current_agent_name().unwrap_or_default()
        ));
        if let Some(f) = self.on_start.as_mut() {
            f();
        }
        if let Some(reason) = &self.fail_start {
            return Err(ProcessorError::new(reason.clone()));
        }
        if let Some(feed) = self.feed {
            context.subscribe(feed, Scripted::handle)?;
        }
        if self.services {
            context.services(Scripted::service);
        }
        Ok(())
    }

    fn stop(&mut self) -> Result<(), ProcessorError> {
        self.log.lock().push(format!("{}:stop", self.name));
        Ok(())
    }

    fn on_timer(&mut self, timer: u64) -> Result<(), ProcessorError> {
        let result = match self.on_timer.as_mut() {
            Some(f) => f(&self.name, timer),
            None => Ok(()),
        };
        self.log.lock().push(format!("{}:timer:{timer}", self.name));
        result
    }

    fn retry_safe(&self) -> bool {
        self.retry_safe
    }
}

/// Schedules a timer from inside a handler (on the group thread).
pub fn schedule(delay: Duration, timer: u64) -> bool {
    context::schedule_timer(delay, timer)
}

/// Holds a group's thread inside a handler until opened, so its mailbox fills.
#[derive(Clone, Default)]
pub struct Gate {
    state: Arc<(Mutex<(bool, bool)>, parking_lot::Condvar)>,
}

impl Gate {
    /// Called from the handler: marks entry and waits for `open` (bounded by WAIT).
    pub fn enter_and_wait(&self) {
        let (lock, signal) = &*self.state;
        let mut state = lock.lock();
        state.0 = true;
        signal.notify_all();
        let deadline = Instant::now() + WAIT;
        while !state.1 {
            if signal.wait_until(&mut state, deadline).timed_out() {
                break;
            }
        }
    }

    pub fn wait_entered(&self) -> bool {
        let (lock, signal) = &*self.state;
        let mut state = lock.lock();
        let deadline = Instant::now() + WAIT;
        while !state.0 {
            if signal.wait_until(&mut state, deadline).timed_out() {
                break;
            }
        }
        state.0
    }

    pub fn open(&self) {
        let (lock, signal) = &*self.state;
        lock.lock().1 = true;
        signal.notify_all();
    }
}

/// Adds a processor that blocks its group inside a handler on item `u64::MAX`, and
/// blocks the group now. Returns the gate to open.
pub fn block_group(plane: &ControlPlane, numbers: &MemoryPublisher<u64>, group: &str) -> Gate {
    let gate = Gate::default();
    let inner = gate.clone();
    let log = new_log();
    let reply = plane
        .add_processor(group, "blocker", move || {
            Scripted::new("blocker", &log).on_item(move |_, item| {
                if item == u64::MAX {
                    inner.enter_and_wait();
                }
                Ok(())
            })
        })
        .reply
        .wait_for(WAIT)
        .expect("blocker added");
    assert!(reply.applied(), "{reply:?}");
    numbers.publish(u64::MAX);
    assert!(gate.wait_entered(), "the group is blocked");
    gate
}
