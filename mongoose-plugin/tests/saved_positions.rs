//! What crosses the plugin boundary besides items (issue 25, item 7): a plugin source
//! sees the consumers' saved positions, so one whose own committed position was lost
//! resumes where the consumers' state is instead of reading everything again (a real
//! cdylib: `mongoose-plugin/fixture` (the template's kinds with the test variants), whose counter resumes at the least saved position when
//! its pointer file is missing).
//!
//! Before the fix the boundary did not carry them: the plugin saw none and counted from
//! 0 again, so a consumer that had applied 60 items was given them a second time.

use std::sync::Arc;

use bytes::Bytes;
use mongoose_core::engine::PendingCompletion;
use mongoose_core::{
    ConsumerPosition, Delivery, Epoch, Held, PositionValue, ProcessorError, SourceOutput,
};
use mongoose_delivery::{
    DispatchOutcome, Dispatcher, Feed, FeedStatus, Publisher, SourceDriver, SubscribeOptions,
};
use mongoose_plugin::host::{ItemCodec, PluginRegistry, PluginSource};
use mongoose_testkit::{build_plugin, plugin_dir};

/// Collects the items it is given as text.
#[derive(Default)]
struct Collect(Vec<String>);

impl Dispatcher<Bytes> for Collect {
    fn dispatch(&mut self, item: &Bytes, _attempt: u32) -> DispatchOutcome {
        self.0.push(String::from_utf8_lossy(item).into_owned());
        DispatchOutcome::Done
    }

    fn complete(&mut self, _: PendingCompletion, _: &Delivery) -> Result<(), ProcessorError> {
        Ok(())
    }
}

/// The counter (limit 100) started with no pointer file and `saved` noted on its feed:
/// the items it publishes.
fn first_run_with(saved: &[ConsumerPosition]) -> Vec<String> {
    first_run_with_status(saved).0
}

/// [`first_run_with`], and the feed's status after it.
fn first_run_with_status(saved: &[ConsumerPosition]) -> (Vec<String>, FeedStatus) {
    let scratch = tempfile::tempdir().expect("scratch");
    let dir = plugin_dir(scratch.path(), &[&build_plugin("fixture-plugin", &[])]);
    let registry = PluginRegistry::load_dir(&dir).expect("the plugin folder is read");
    let feed: Arc<Publisher<Bytes, PositionValue>> = Feed::builder("counted").build();
    let mut group = feed
        .subscribe("group", SubscribeOptions::default())
        .expect("subscribed")
        .take_reader()
        .expect("the reader");
    for position in saved {
        feed.note_consumer_position(position.clone());
    }
    let pointer = scratch.path().join("counter.pointer");
    let settings = format!("limit = 100\npointer = \"{}\"\n", pointer.display());
    let output: Arc<dyn SourceOutput<Bytes, PositionValue>> = feed.clone();
    let codec: Arc<dyn ItemCodec<Bytes>> = Arc::new(|bytes: Bytes| bytes);
    let mut source =
        PluginSource::create(&registry, "counter", "counted", &settings, output, codec)
            .expect("the plugin creates its source");
    feed.start_complete();
    if let Err(error) = SourceDriver::start_source(&mut source, &*feed) {
        return (vec![format!("refused: {error}")], feed.status());
    }
    SourceDriver::cycle(&mut source, &*feed).expect("a cycle");
    let mut items = Collect::default();
    while group.poll(&mut items, 256) > 0 {}
    SourceDriver::stop_source(&mut source, &*feed).expect("stopped");
    (items.0, feed.status())
}

fn saved(consumer: &str, epoch: u64, offset: u64) -> ConsumerPosition {
    ConsumerPosition::new(
        consumer,
        Held::Saved(Some((Epoch(epoch), PositionValue { lane: 0, offset }))),
    )
}

#[test]
fn a_plugin_source_whose_pointer_is_lost_resumes_at_the_consumers_saved_position() {
    // one consumer applied items 0..60 (its state holds offset 60), another 0..75:
    // the counter resumes at the least, 60
    let items = first_run_with(&[saved("g/a", 1, 60), saved("g/b", 1, 75)]);
    let expected: Vec<String> = (60..100).map(|n| n.to_string()).collect();
    assert_eq!(items, expected, "resumed at the least saved position");

    // a state of another epoch past its start could be applied twice: refused
    let items = first_run_with(&[saved("g/a", 7, 60)]);
    assert!(
        items
            .first()
            .is_some_and(|item| item.starts_with("refused")),
        "{items:?}"
    );
    // a consumer whose state holds nothing of the feed: from the start
    let nothing = ConsumerPosition::new("g/a", Held::Saved(None));
    let items = first_run_with(&[saved("g/b", 1, 75), nothing]);
    assert_eq!(items.len(), 100, "{items:?}");
    // a consumer that keeps no position (a forward into HTTP): from the start too
    // (issue 36.1: it was skipped to the others' position)
    let keyless = ConsumerPosition::new("http/copy", Held::Nothing);
    let items = first_run_with(&[saved("g/b", 1, 75), keyless]);
    assert_eq!(items.len(), 100, "{items:?}");
    // no consumer stores positions: a first run, from the start
    assert_eq!(first_run_with(&[]).len(), 100);
}

// The file list crosses too: the template reports its pointer as its one file at start
// (a many-file plugin source reports its files for the feed's status).
#[test]
fn a_plugin_sources_files_reach_the_feeds_status() {
    let (items, status) = first_run_with_status(&[saved("g/a", 1, 40)]);
    assert_eq!(items.len(), 60);
    let [file] = status.files.as_slice() else {
        panic!("one file reported: {:?}", status.files);
    };
    assert!(file.path.ends_with("counter.pointer"), "{file:?}");
    assert_eq!((file.committed, file.size, file.lag), (40, 100, 60));
}
