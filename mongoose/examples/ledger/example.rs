//! The ledger example's server, built as values. A module of the example
//! (`examples/ledger/main.rs`); `tests/logs_and_example.rs` includes it too.

use std::path::PathBuf;

use mongoose_ledger::{Ledger, LedgerSettings, SinkAlerts};
use mongoose_server::config::{
    AdminConfig, FeedConfig, GroupConfig, IdleStrategyConfig, OverloadConfig, ServerConfig,
    SourceKind,
};
use mongoose_server::{Server, ServerBuilder, ServerError};
use mongoose_source_file::ReadStrategy;

/// The ledger example's server (`cargo run --example ledger`), built as values rather
/// than as TOML text, so its paths may hold any character a file name can, U+200B or
/// a byte that is not UTF-8 included: a COMMITED file feed `lines` on `input`, a group
/// `ledger` with the ledger processor `ledger`, and the admin API if asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LedgerExample {
    /// The input file of `account,amount` lines (tailed).
    pub(crate) input: PathBuf,
    /// Where the state and `rejected.log` live.
    pub(crate) state_dir: PathBuf,
    /// The alerts file.
    pub(crate) alerts: PathBuf,
    /// Serve the admin API at this address (`127.0.0.1:PORT`).
    pub(crate) admin: Option<String>,
}

impl LedgerExample {
    /// The group and the processor's name.
    pub(crate) const GROUP: &'static str = "ledger";

    /// The server's configuration, checked as a file's is: the feed, the group (its
    /// processor is added by [`LedgerExample::server_builder`]: a config's processor
    /// settings are a TOML table, which holds UTF-8 text only) and the admin address.
    pub(crate) fn server_config(&self) -> Result<ServerConfig, ServerError> {
        ServerConfig {
            admin: self.admin.as_ref().map(|address| AdminConfig {
                address: address.clone(),
                token_file: None,
                export_root: None,
            }),
            feeds: vec![FeedConfig {
                name: self.ledger_settings().feed,
                source: SourceKind::File,
                path: self.input.clone(),
                settings: Default::default(),
                codec: None,
                read_strategy: ReadStrategy::Committed,
                queue_capacity: None,
                overload: OverloadConfig::default(),
                status_events: false,
                rotated: None,
                scan_interval_millis: None,
                max_open_files: None,
            }],
            groups: vec![GroupConfig {
                name: Self::GROUP.to_owned(),
                idle_strategy: IdleStrategyConfig::Backoff,
                core: None,
                processors: Vec::new(),
            }],
            // the feed's pointer (and everything the server keeps) under the state dir
            data_dir: self.state_dir.join("data"),
            base_dir: PathBuf::from("."),
            ..ServerConfig::default()
        }
        .validated()
    }

    /// The ledger's settings.
    pub(crate) fn ledger_settings(&self) -> LedgerSettings {
        LedgerSettings::new(self.state_dir.clone(), self.alerts.clone())
    }

    /// A builder of the server on `config` (from [`LedgerExample::server_config`])
    /// with the ledger added to its group. The ledger opens here: a state it cannot
    /// read (or an alerts file it cannot open) fails now, naming the file.
    pub(crate) fn server_builder(
        &self,
        config: ServerConfig,
    ) -> Result<ServerBuilder, ServerError> {
        let settings = self.ledger_settings();
        let refused = |message: String| ServerError::ProcessorSettings {
            name: Self::GROUP.to_owned(),
            kind: "ledger".to_owned(),
            message,
        };
        let builder = Server::builder(config);
        // the alerts file is a sink: each alert written once across any crash
        let alerts = SinkAlerts::file(
            &self.alerts,
            settings.sync,
            Some(builder.commit_gate(&settings.feed, Self::GROUP)),
        )
        .map_err(|error| {
            refused(format!(
                "cannot open the alerts file {}: {error}",
                self.alerts.display()
            ))
        })?;
        // the ledger's records are fsync'd in groups: the feed commits a line once its
        // record is durable
        let gate = builder.commit_gate(&settings.feed, Self::GROUP);
        let ledger = Ledger::open(settings, Box::new(alerts), Some(gate))
            .map_err(|error| refused(error.to_string()))?;
        Ok(builder.processor(Self::GROUP, Self::GROUP, move || ledger))
    }
}
