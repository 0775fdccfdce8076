//! The file-only binary (`mongoose` built without its `kafka` feature, so without
//! librdkafka): a ledger whose state would be a Kafka changelog is refused at load with
//! the key path and what to do, instead of running with its state somewhere else.
//!
//! The test exists only in that build: `cargo test -p mongoose --no-default-features
//! --test file_only` (`.ci/run` runs it). The Kafka plugin (the feed's source kind) is
//! built by cargo, as the plugin tests do; no broker is needed (`validate` connects to
//! nothing).
#![cfg(not(feature = "kafka"))]

use std::process::Command;

use mongoose_server::cli::EXIT_BAD_CONFIG;
use mongoose_testkit::{build_plugin, plugin_dir};

/// A ledger on a Kafka feed: `state` is `auto` (a changelog there) unless `state` says.
fn config(state: Option<&str>) -> String {
    let state = state.map_or(String::new(), |state| format!(", state = \"{state}\""));
    format!(
        r#"
plugin_dir = "plugins"

[[feeds]]
name = "payments"
source = "kafka"
settings = {{ brokers = "127.0.0.1:1", group = "ledgers", topic = "payments" }}

[[groups]]
name = "bank"

[[groups.processors]]
name = "ledger"
kind = "ledger"
settings = {{ feed = "payments", state_dir = "state", alerts = "alerts.txt"{state} }}
"#
    )
}

fn validate(dir: &std::path::Path, config: &str) -> (Option<i32>, String) {
    let file = dir.join("mongoose.toml");
    std::fs::write(&file, config).expect("config written");
    let output = Command::new(env!("CARGO_BIN_EXE_mongoose"))
        .arg("validate")
        .arg("--config")
        .arg(&file)
        .output()
        .expect("mongoose runs");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn without_the_kafka_feature_a_changelog_ledger_is_refused_at_load_with_what_to_do() {
    let dir = tempfile::tempdir().expect("temp dir");
    let library = build_plugin("kafka-plugin", &[]);
    let plugins = plugin_dir(dir.path(), &[&library]);
    assert_eq!(
        plugins,
        dir.path().join("plugins"),
        "the config names this folder"
    );

    for state in [None, Some("changelog")] {
        let (code, said) = validate(dir.path(), &config(state));
        assert_eq!(
            code,
            Some(i32::from(EXIT_BAD_CONFIG)),
            "state {state:?}: {said}"
        );
        assert!(
            said.contains("groups[0].processors[0].settings.state")
                && said.contains("without its kafka feature")
                && said.contains("state = \"local\""),
            "state {state:?}: the refusal names the key and what to do: {said}"
        );
    }
    // the same ledger with its state on local disk is a valid configuration
    let (code, said) = validate(dir.path(), &config(Some("local")));
    assert_eq!(code, Some(0), "{said}");
}
