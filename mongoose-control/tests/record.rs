//! The recording hooks: what a group tells its recorder, in which order
//! (book: guarantees/completion-hooks.md: the completion callbacks run before the recorder
//! learns the item is over).

mod common;

use std::any::Any;
use std::sync::Arc;
use std::time::Instant;

use common::*;
use mongoose_control::{
    ControlConfig, ControlPlane, DeliveryFeeds, GroupOptions, GroupRecorder, IdleStrategy,
    ProcessorSupplier,
};
use mongoose_core::{
    CompletionKey, Delivery, DeliveryContext, Processor, ProcessorError, ProcessorId, SourceOutput,
    StartContext,
};
use mongoose_delivery::{Feed, FeedRegistry, Publisher};

struct Logging(Log, Option<Arc<Publisher<String, u64>>>);

impl GroupRecorder for Logging {
    fn processor_built(&mut self, processor: ProcessorId, name: &str, type_name: &'static str) {
        let short = type_name.rsplit("::").next().unwrap_or_default();
        self.0
            .lock()
            .push(format!("built {name} {} {short}", processor.0));
    }
    fn item_begins(&mut self) {
        self.0.lock().push("item".into());
    }
    fn dispatched(&mut self, _: ProcessorId, feed: &str, item: &dyn Any, result: Result<(), &str>) {
        let item = item.downcast_ref::<String>().cloned().unwrap_or_default();
        let position = DeliveryContext::current().map(|d| d.position().offset);
        self.0
            .lock()
            .push(format!("dispatched {feed} {item} {position:?} {result:?}"));
    }
    fn completed(&mut self, _: Option<ProcessorId>, _: CompletionKey, result: Result<(), &str>) {
        self.0.lock().push(format!("completed {result:?}"));
    }
    fn timer_fired(&mut self, _: ProcessorId, timer: u64, _: Result<(), &str>) {
        self.0.lock().push(format!("timer {timer}"));
    }
    fn stopped(&mut self, _: ProcessorId, by_request: bool, _: Result<(), &str>) {
        self.0.lock().push(format!("stopped {by_request}"));
    }
    fn item_finished(&mut self) {
        // the feed must not count the item as dispatched yet: it could commit it
        let dispatched = self
            .1
            .as_ref()
            .map_or(0, |feed| feed.status().subscribers[0].dispatched);
        self.0
            .lock()
            .push(format!("finished, dispatched {dispatched}"));
    }
    fn polled(&mut self) {
        let mut log = self.0.lock();
        if log.last().map(String::as_str) != Some("polled") {
            log.push("polled".into());
        }
    }
    fn closing(&mut self) {
        self.0.lock().push("closing".into());
    }
}

struct Saver;
impl Saver {
    #[allow(clippy::ptr_arg)] // a feed of String hands handlers &String
    fn on_line(&mut self, _: &String) -> Result<(), ProcessorError> {
        DeliveryContext::on_complete(CompletionKey::SAVE);
        Ok(())
    }
}
impl Processor for Saver {
    fn start(&mut self, context: &mut StartContext<'_>) -> Result<(), ProcessorError> {
        context.subscribe("lines", Saver::on_line)
    }
    fn on_delivery_complete(
        &mut self,
        _: CompletionKey,
        _: &Delivery,
    ) -> Result<(), ProcessorError> {
        Ok(())
    }
}

/// A plane with feed `lines` and group `g` recorded by [`Logging`] into the returned
/// log (with the feed's status at each poll's end when `with_feed`).
fn recorded_group(with_feed: bool) -> (ControlPlane, Arc<Publisher<String, u64>>, Log) {
    let feeds = DeliveryFeeds::new(FeedRegistry::default());
    let lines: Arc<Publisher<String, u64>> = Feed::builder("lines").queue_capacity(16).build();
    feeds.register(Arc::clone(&lines)).expect("registered");
    lines.start_complete();
    let plane = ControlPlane::new(ControlConfig::default(), Arc::new(feeds));
    let log = new_log();
    let feed = with_feed.then(|| Arc::clone(&lines));
    plane
        .create_group(
            "g",
            GroupOptions {
                idle: IdleStrategy::SleepingMillis(1),
                recorder: Some(Box::new(Logging(Arc::clone(&log), feed))),
                ..GroupOptions::default()
            },
        )
        .expect("group");
    (plane, lines, log)
}

// book: guarantees/completion-hooks.md: dispatch -> completion callbacks -> recorder, in the delivery
#[test]
fn a_recorder_hears_each_dispatch_then_its_callbacks_then_the_end_of_the_poll() {
    let (plane, lines, log) = recorded_group(true);
    let added = plane.add_processor("g", "saver", || Saver);
    assert!(added.reply.wait_for(WAIT).unwrap().applied());
    assert!(lines.try_publish("a".into(), 7).is_published());
    assert!(wait_until(|| log
        .lock()
        .iter()
        .any(|e| e.starts_with("completed"))));
    assert!(plane
        .stop_processor(&added.handle.unwrap())
        .wait_for(WAIT)
        .unwrap()
        .applied());
    assert!(plane.close_groups(Instant::now() + WAIT).is_empty());
    let log = log.lock().clone();
    let interesting: Vec<&str> = log.iter().map(String::as_str).collect();
    let start = interesting
        .iter()
        .position(|e| *e == "item")
        .expect("an item");
    assert_eq!(interesting[0], "built saver 1 Saver");
    assert_eq!(
        &interesting[start..start + 5],
        [
            "item",
            "dispatched lines a Some(7) Ok(())",
            "completed Ok(())",
            "finished, dispatched 0",
            "polled"
        ]
    );
    assert!(interesting.contains(&"stopped true"));
    assert_eq!(interesting.last(), Some(&"closing"));
}

// issue 12 item 5: one `add_processor` takes every kind of supplier (a closure of a
// typed processor, a boxed factory named or not) and the recorder hears each type
// name, which a recording keeps as the stream's provenance
#[test]
fn one_add_processor_takes_a_closure_or_a_boxed_factory_and_the_recorder_hears_its_type() {
    let (plane, _lines, log) = recorded_group(false);
    let typed = plane.add_processor("g", "typed", || Saver);
    let factory: Box<dyn FnOnce() -> Box<dyn Processor> + Send> =
        Box::new(|| Box::new(Saver) as Box<dyn Processor>);
    let named = plane.add_processor(
        "g",
        "named",
        ProcessorSupplier::boxed(factory).named("configured::saver"),
    );
    let anonymous = plane.add_processor(
        "g",
        "anonymous",
        ProcessorSupplier::boxed(|| Box::new(Saver) as Box<dyn Processor>),
    );
    for added in [typed, named, anonymous] {
        assert!(added.reply.wait_for(WAIT).unwrap().applied());
    }
    assert!(plane.close_groups(Instant::now() + WAIT).is_empty());
    let built: Vec<String> = log
        .lock()
        .iter()
        .filter(|entry| entry.starts_with("built"))
        .cloned()
        .collect();
    assert_eq!(
        built,
        [
            "built typed 1 Saver",
            "built named 2 saver",
            "built anonymous 3 "
        ]
    );
}
