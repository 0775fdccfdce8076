//! A plugin's own `tracing` events, forwarded to the host's log.
//!
//! A plugin is a shared library with its own copy of `tracing`, whose events reach no
//! subscriber: a connector written against the core traits (the Kafka source's
//! assignments and revocations, a journal tailer's warnings) would log nothing in the
//! server. So the SDK installs, in the plugin's copy, a subscriber that forwards every
//! event at INFO and above to the host's `log` function, as the feed of the source the
//! host is calling into on that thread (while it runs `create`, `start`, `do_work` or
//! `stop`: the Kafka source's rebalance callbacks run inside `do_work`). An event
//! raised outside such a call (on a thread of the plugin's own, as librdkafka's
//! callbacks are, or by a sink) goes to the host's plugin-wide log instead, with the
//! plugin's name: [`abi::PluginDeclaration::set_log`].

use std::fmt::Write as _;
use std::sync::{Once, OnceLock};

use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::subscriber::Interest;
use tracing::{span, Event, Level, Metadata, Subscriber};

use mongoose_core::context::{ContextSlot, SlotGuard};

use crate::abi::{self, HostOutput, PluginLogFn, Str};

/// The feed the host is calling into on this thread: the plugin's part of the thread
/// context (the plugin's own copy of the core's).
static TARGET: ContextSlot<Option<HostOutput>> = ContextSlot::new();

/// The host's plugin-wide log and this plugin's name, for events outside a host call.
static PLUGIN_LOG: OnceLock<(PluginLogFn, &'static str)> = OnceLock::new();

/// Installs the plugin's subscriber (once).
fn install() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // fails only when something in the plugin set one already: that one stays
        let _ = tracing::subscriber::set_global_default(Forward);
    });
}

/// Sends the events raised outside any host call to `log`, as plugin `name`'s (the
/// first host's log stays: every host in a process is the same `mongoose-plugin`).
pub(crate) fn set_plugin_log(log: PluginLogFn, name: &'static str) {
    let _ = PLUGIN_LOG.set((log, name));
    install();
}

/// While alive, this thread's events go to `host`'s log; dropping it restores what was
/// there before (calls may nest: a source created inside another's call).
pub(crate) struct Forwarding {
    _entered: SlotGuard<Option<HostOutput>>,
}

impl Forwarding {
    /// Forwards this thread's events to `host` until dropped (installing the plugin's
    /// subscriber at the first call).
    pub(crate) fn to(host: HostOutput) -> Self {
        install();
        Forwarding {
            _entered: TARGET.enter(Some(host)),
        }
    }
}

/// The event's message and fields as one line: `message key=value ...`.
#[derive(Default)]
struct Line(String);

impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if !self.0.is_empty() {
            self.0.push(' ');
        }
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
        } else {
            let _ = write!(self.0, "{}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if !self.0.is_empty() {
            self.0.push(' ');
        }
        if field.name() == "message" {
            self.0.push_str(value);
        } else {
            let _ = write!(self.0, "{}={value}", field.name());
        }
    }
}

/// The plugin's subscriber: INFO and above, to the host of the current call, else to
/// the host's plugin-wide log.
struct Forward;

impl Subscriber for Forward {
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        // asked again at each event (whether a log to forward to is there changes)
        if *metadata.level() <= Level::INFO {
            Interest::sometimes()
        } else {
            Interest::never()
        }
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(LevelFilter::INFO)
    }

    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        *metadata.level() <= Level::INFO
            && (current_target().is_some() || PLUGIN_LOG.get().is_some())
    }

    fn new_span(&self, _span: &span::Attributes<'_>) -> span::Id {
        span::Id::from_u64(1)
    }

    fn record(&self, _span: &span::Id, _values: &span::Record<'_>) {}

    fn record_follows_from(&self, _span: &span::Id, _follows: &span::Id) {}

    fn event(&self, event: &Event<'_>) {
        let host = current_target();
        let plugin_log = PLUGIN_LOG.get();
        if host.is_none() && plugin_log.is_none() {
            return;
        }
        let mut line = Line::default();
        event.record(&mut line);
        let level = if *event.metadata().level() <= Level::WARN {
            abi::level::WARN
        } else {
            abi::level::INFO
        };
        match (host, plugin_log) {
            // SAFETY: `host` is the output of the source the host is calling into on
            // this thread (set for the call's length), valid until that source is
            // destroyed.
            (Some(host), _) => unsafe {
                ((*host.vtable).log)(host.context, level, Str::new(&line.0))
            },
            // SAFETY: the host's plugin-wide log is callable from any thread while the
            // library is loaded (the contract of `set_log`); the strings are borrowed
            // for the call.
            (None, Some((log, name))) => unsafe { log(Str::new(name), level, Str::new(&line.0)) },
            (None, None) => {}
        }
    }

    fn enter(&self, _span: &span::Id) {}

    fn exit(&self, _span: &span::Id) {}
}

/// The feed the host is calling into on this thread, if any (`None` too while the slot
/// is in use up the stack: an event raised while a forwarding is entered or left).
fn current_target() -> Option<HostOutput> {
    TARGET.try_with(|target| *target).flatten()
}
