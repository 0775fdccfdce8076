//! The plugin boundary with a real cdylib: `mongoose-plugin/fixture` (the template's kinds with the test variants) built by cargo in the
//! test (with test features for the refusals and the panic), loaded with its handshake,
//! its source run by the engine's source driver and its sink called through the host's
//! proxies.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mongoose_core::engine::PendingCompletion;
use mongoose_core::sink::{Output, OutputKey, Sink, SinkOutcome};
use mongoose_core::{
    Delivery, Epoch, EventSource, IdleStrategy, PositionValue, ProcessorError, SourceOutput,
};
use mongoose_delivery::{
    AnyFeed, DispatchOutcome, Dispatcher, Feed, Publisher, QueueReader, SourceDriver,
    SubscribeOptions,
};
use mongoose_plugin::abi;
use mongoose_plugin::host::{
    ItemCodec, PluginError, PluginLibrary, PluginRegistry, PluginSink, PluginSource, Role,
};
use mongoose_testkit::{build_plugin, plugin_dir};

fn template(features: &[&str]) -> PathBuf {
    build_plugin("fixture-plugin", features)
}

fn registry_of(parent: &Path, features: &[&str]) -> PluginRegistry {
    let dir = plugin_dir(parent, &[&template(features)]);
    PluginRegistry::load_dir(&dir).expect("the plugin folder is read")
}

fn bytes_codec() -> Arc<dyn ItemCodec<Bytes>> {
    Arc::new(|bytes: Bytes| bytes)
}

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

fn reader(feed: &Publisher<Bytes, PositionValue>) -> QueueReader<Bytes> {
    feed.subscribe("group", SubscribeOptions::default())
        .expect("subscribed")
        .take_reader()
        .expect("the reader")
}

fn pointer(path: &Path) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_plugin_built_from_plugins_is_loaded_and_its_source_delivers() {
    delivers_through_the_driver(false);
}

#[test]
fn a_plugin_source_publishing_in_batches_delivers_the_same() {
    delivers_through_the_driver(true);
}

/// The template's counter (per item, or in batches) through the source driver to a
/// slow consumer: every item once, in order, committed only after it was processed.
fn delivers_through_the_driver(batch: bool) {
    let scratch = tempfile::tempdir().expect("scratch");
    let registry = registry_of(scratch.path(), &[]);
    assert!(registry.refused().is_empty(), "{:?}", registry.refused());
    let plugin = &registry.plugins()[0];
    assert_eq!(plugin.name(), "fixture");
    assert_eq!(plugin.abi_version(), abi::ABI_VERSION);
    assert_eq!(registry.kinds(Role::Source), vec!["counter"]);
    assert_eq!(registry.kinds(Role::Sink), vec!["append"]);

    // a queue of 4 for 300 items: the source pauses again and again
    let feed: Arc<Publisher<Bytes, PositionValue>> =
        Feed::builder("counted").queue_capacity(4).build();
    let mut group = reader(&feed);
    let pointer_file = scratch.path().join("counter.pointer");
    let settings = format!(
        "limit = 300\npointer = \"{}\"\nbatch = {batch}\n",
        pointer_file.display()
    );
    let output: Arc<dyn SourceOutput<Bytes, PositionValue>> = feed.clone();
    let mut source = PluginSource::create(
        &registry,
        "counter",
        "counted",
        &settings,
        output,
        bytes_codec(),
    )
    .expect("the plugin creates its source");
    assert_eq!(source.name(), "counted");
    feed.start_complete();
    let driver = SourceDriver::new("counted", IdleStrategy::Yield);
    let stop = driver.stop_handle();
    let driven = Arc::clone(&feed);
    let thread = std::thread::spawn(move || {
        driver
            .run(&mut source, &*driven as &dyn AnyFeed)
            .expect("the source ran");
    });

    let deadline = Instant::now() + Duration::from_secs(120);
    let mut processed = Collect::default();
    while pointer(&pointer_file) < 300 {
        assert!(
            Instant::now() < deadline,
            "never committed everything: pointer {}, processed {}",
            pointer(&pointer_file),
            processed.0.len()
        );
        // commit after processing: never past what this consumer processed
        let before = processed.0.len() as u64;
        assert!(
            pointer(&pointer_file) <= before,
            "the pointer {} is ahead of the {before} items processed",
            pointer(&pointer_file)
        );
        group.poll(&mut processed, 1);
        std::thread::yield_now();
    }
    stop.stop();
    thread.join().expect("the driver's thread");
    let expected: Vec<String> = (0..300).map(|n| n.to_string()).collect();
    assert_eq!(processed.0, expected, "every item once, in order");
    let status = feed.status();
    assert!(
        status.pauses > 0,
        "a queue of 4 paused the source: {status:?}"
    );
    assert_eq!(status.dropped, 0);
    assert_eq!(status.state, "END_OF_STREAM");

    // a restart resumes at the committed position: nothing more to publish
    let restarted: Arc<Publisher<Bytes, PositionValue>> = Feed::builder("counted").build();
    let mut again = reader(&restarted);
    restarted.start_complete();
    let output: Arc<dyn SourceOutput<Bytes, PositionValue>> = restarted.clone();
    let mut source = PluginSource::create(
        &registry,
        "counter",
        "counted",
        &settings,
        output,
        bytes_codec(),
    )
    .expect("created again");
    SourceDriver::start_source(&mut source, &*restarted).expect("started");
    SourceDriver::cycle(&mut source, &*restarted).expect("a cycle");
    let mut nothing = Collect::default();
    assert_eq!(again.poll(&mut nothing, 16), 0, "nothing re-published");
    SourceDriver::stop_source(&mut source, &*restarted).expect("stopped");
}

#[test]
fn a_plugin_with_a_wrong_abi_version_is_refused_with_both_versions_named() {
    let library = template(&["wrong-abi"]);
    let refused = PluginLibrary::load(&library).expect_err("refused");
    let PluginError::Refused(message) = &refused else {
        panic!("not a handshake refusal: {refused}");
    };
    let ours = format!(
        "this server speaks ABI {} (mongoose-plugin 0.1.0)",
        abi::ABI_VERSION
    );
    for part in [
        "was built for ABI 999 with mongoose-plugin 0.1.0",
        ours.as_str(),
        "rebuild the plugin against mongoose-plugin 0.1.x",
        "libfixture_plugin.so",
    ] {
        assert!(message.contains(part), "'{part}' is not in: {message}");
    }
    // a folder holding it: refused with the same reason, nothing loaded
    let scratch = tempfile::tempdir().expect("scratch");
    let registry = registry_of(scratch.path(), &["wrong-abi"]);
    assert!(registry.plugins().is_empty());
    assert_eq!(registry.refused().len(), 1);
    assert!(registry.refused()[0].reason.contains("ABI 999"));
}

/// Issue 26, item 4, and issue 36: the ABI changes (the source protocol became types;
/// the host output's `saved_positions` became `consumer_positions`, every consumer with
/// what it holds), so a plugin built with the SDK of before (the ABI before this one)
/// must be refused, not called through vtables it does not have.
#[test]
fn a_plugin_built_for_the_previous_abi_is_refused_with_the_rebuild_message() {
    let library = template(&["previous-abi"]);
    let refused = PluginLibrary::load(&library).expect_err("refused");
    let PluginError::Refused(message) = &refused else {
        panic!("not a handshake refusal: {refused}");
    };
    let previous = format!(
        "was built for ABI {} with mongoose-plugin 0.1.0",
        abi::ABI_VERSION - 1
    );
    let ours = format!("this server speaks ABI {}", abi::ABI_VERSION);
    for part in [
        previous.as_str(),
        ours.as_str(),
        "rebuild the plugin against mongoose-plugin 0.1.x",
    ] {
        assert!(message.contains(part), "'{part}' is not in: {message}");
    }
}

#[test]
fn a_plugin_with_a_wrong_layout_fingerprint_is_refused_with_both_fingerprints_named() {
    let library = template(&["wrong-layout"]);
    let refused = PluginLibrary::load(&library).expect_err("refused");
    let message = refused.to_string();
    let theirs = format!("{:#018x}", abi::LAYOUT_FINGERPRINT ^ 0x5a5a);
    let ours = format!("{:#018x}", abi::LAYOUT_FINGERPRINT);
    assert!(
        message.contains(&format!("declares layout fingerprint {theirs}")),
        "{message}"
    );
    assert!(
        message.contains(&format!("this server's is {ours}")),
        "{message}"
    );
    assert!(message.contains("rebuild the plugin"), "{message}");
}

#[test]
fn a_panicking_plugin_source_is_caught_at_the_boundary_and_not_called_again() {
    let scratch = tempfile::tempdir().expect("scratch");
    let registry = registry_of(scratch.path(), &["panic-source"]);
    let feed: Arc<Publisher<Bytes, PositionValue>> = Feed::builder("panics").build();
    let _group = reader(&feed);
    feed.start_complete();
    let settings = format!("pointer = \"{}\"", scratch.path().join("p").display());
    let output: Arc<dyn SourceOutput<Bytes, PositionValue>> = feed.clone();
    let mut source = PluginSource::create(
        &registry,
        "counter",
        "panics",
        &settings,
        output,
        bytes_codec(),
    )
    .expect("created");
    SourceDriver::start_source(&mut source, &*feed).expect("started");
    let failed = SourceDriver::cycle(&mut source, &*feed).expect_err("the cycle failed");
    assert!(
        failed
            .to_string()
            .contains("panicked: the fixture source panics on purpose"),
        "{failed}"
    );
    assert!(source.failure().is_some());
    let detail = feed.status().detail.expect("a detail");
    assert!(
        detail.contains("FAILED") && detail.contains("panics on purpose"),
        "{detail}"
    );
    // never called again: the same failure, without a second panic
    let again = SourceDriver::cycle(&mut source, &*feed).expect_err("still failed");
    assert_eq!(again.to_string(), failed.to_string());
    SourceDriver::stop_source(&mut source, &*feed).expect("a failed source stops quietly");
}

#[test]
fn the_sink_of_a_plugin_publishes_with_outcomes() {
    let scratch = tempfile::tempdir().expect("scratch");
    let registry = registry_of(scratch.path(), &[]);
    let out = scratch.path().join("appended.txt");
    let mut sink = PluginSink::create(
        &registry,
        "append",
        "out",
        &format!("path = \"{}\"", out.display()),
    )
    .expect("the plugin creates its sink");
    let outputs: Vec<Output> = ["alpha", "beta", "gamma"]
        .iter()
        .enumerate()
        .map(|(index, text)| {
            Output::new(
                OutputKey::new("lines", Epoch(3), 0, 10, index as u32, 1),
                text.as_bytes().to_vec(),
            )
        })
        .collect();
    let mut outcomes = Vec::new();
    sink.publish(&outputs, &mut outcomes);
    assert_eq!(
        outcomes,
        vec![
            SinkOutcome::Published {
                evidence: "appended; the file holds 17 bytes".into()
            };
            3
        ]
    );
    assert_eq!(
        std::fs::read_to_string(&out).expect("written"),
        "alpha\nbeta\ngamma\n"
    );
    assert_eq!(
        sink.verify(&outputs[0].key),
        None,
        "the template cannot verify"
    );

    // settings the plugin refuses: its message, naming the kind
    let refused =
        PluginSink::create(&registry, "append", "bad", "colour = \"red\"").expect_err("refused");
    let message = refused.to_string();
    assert!(
        message.contains("kind 'append'") && message.contains("unknown key 'colour'"),
        "{message}"
    );
    assert!(matches!(
        PluginSink::create(&registry, "nope", "x", ""),
        Err(PluginError::UnknownKind { .. })
    ));
}

#[test]
fn a_panicking_plugin_sink_answers_its_batch_uncertain_and_is_not_called_again() {
    let scratch = tempfile::tempdir().expect("scratch");
    let registry = registry_of(scratch.path(), &["panic-sink"]);
    let out = scratch.path().join("appended.txt");
    let mut sink = PluginSink::create(
        &registry,
        "append",
        "out",
        &format!("path = \"{}\"", out.display()),
    )
    .expect("created");
    let outputs = vec![
        Output::new(OutputKey::new("lines", Epoch(1), 0, 5, 0, 1), b"a".to_vec()),
        Output::new(OutputKey::new("lines", Epoch(1), 0, 5, 1, 1), b"b".to_vec()),
    ];
    let mut outcomes = Vec::new();
    sink.publish(&outputs, &mut outcomes);
    assert_eq!(outcomes.len(), 2);
    for outcome in &outcomes {
        let SinkOutcome::Uncertain { evidence } = outcome else {
            panic!("a panic after the hand-off is uncertain, not {outcome:?}");
        };
        assert!(evidence.contains("panics on purpose"), "{evidence}");
    }
    // never called again: not sent, with the reason
    let mut later = Vec::new();
    sink.publish(&outputs[..1], &mut later);
    let [SinkOutcome::NotPublished {
        evidence,
        retryable: false,
    }] = &later[..]
    else {
        panic!("{later:?}");
    };
    assert!(evidence.starts_with("not sent:"), "{evidence}");
}

#[test]
fn a_kind_declared_by_two_plugins_is_an_error_naming_both_files() {
    let scratch = tempfile::tempdir().expect("scratch");
    let dir = plugin_dir(scratch.path(), &[&template(&[])]);
    std::fs::copy(template(&[]), dir.join("libcopy.so")).expect("a second copy");
    let error = PluginRegistry::load_dir(&dir).expect_err("refused");
    let message = error.to_string();
    assert!(
        message.contains("kind 'counter'")
            && message.contains("libcopy.so")
            && message.contains("libfixture_plugin.so"),
        "{message}"
    );
}
