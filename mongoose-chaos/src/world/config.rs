//! The server's config file of a scenario: its feed, the workload's processors and sink,
//! and the other consumers of the feed as they stand (a reload removes, adds back or
//! replaces them).

use crate::http_target::{Expected, TargetSpec};
use crate::scenario::{Also, SinkKind, SourceKind, Workload};

use super::kafka::SESSION_TIMEOUT_MS;
use super::{World, ARCHIVE_STREAM};

/// Where the HTTP target's CA certificate is written when the target serves https
/// (relative to the scenario's folder, as the sink's `ca_file`).
pub const HTTPS_CA_FILE: &str = "peers/https-ca.pem";

/// The admin token's file of an aggregate scenario (relative to its folder).
pub(super) const ADMIN_TOKEN_FILE: &str = "admin.token";

/// The admin token of an aggregate scenario (the state query needs it).
pub(super) const ADMIN_TOKEN: &str = "chaos-aggregate-admin-token-0123456789";

/// The aggregate family's dead-letter file (relative to the scenario's folder).
pub(super) const DEAD_LETTER_FILE: &str = "out/dead.txt";

/// Where the HTTP target notes the requests that break the sink's documented form
/// (relative to the scenario's folder).
pub const HTTP_PROTOCOL_LOG: &str = "peers/http-protocol.log";

impl World {
    /// The config of the scenario, as the harness means it now.
    pub fn config(&self) -> String {
        self.config_with(None)
    }

    /// The config of the scenario with `data_dir` set (a reload that moves it).
    pub fn config_with(&self, data_dir: Option<&str>) -> String {
        let scenario = &self.scenario;
        let options = &scenario.options;
        let mut text = format!(
            "plugin_dir = \"{}\"\nshutdown_timeout_millis = {}\n",
            self.bins.plugin_dir.display(),
            options.shutdown_timeout_millis.unwrap_or(20_000),
        );
        if let Some(data_dir) = data_dir {
            text.push_str(&format!("data_dir = \"{data_dir}\"\n"));
        }
        text.push_str(&format!(
            "\n[admin]\naddress = \"127.0.0.1:{}\"\n",
            self.ports.admin
        ));
        if scenario.workload == Workload::Aggregate {
            // the state query needs the token (the check asks with it)
            text.push_str(&format!("token_file = \"{ADMIN_TOKEN_FILE}\"\n"));
        }
        text.push('\n');
        text.push_str("[[feeds]]\nname = \"lines\"\n");
        match scenario.source {
            SourceKind::File => text.push_str(
                "source = \"file\"\npath = \"in/input.log\"\nread_strategy = \"COMMITED\"\n",
            ),
            SourceKind::Glob => {
                text.push_str(
                    "source = \"file\"\npath = \"in/logs/*.log\"\nread_strategy = \"COMMITED\"\nscan_interval_millis = 50\n",
                );
                if let Some(max) = options.max_open_files {
                    text.push_str(&format!("max_open_files = {max}\n"));
                }
            }
            SourceKind::Journal => text.push_str(
                "source = \"journal\"\ncodec = \"line\"\nsettings = { path = \"in/journal\" }\n",
            ),
            SourceKind::ArchiveIpc | SourceKind::ArchiveUdp => text.push_str(&format!(
                "source = \"archive\"\ncodec = \"line\"\nsettings = {{ archive = \"in/archive\", stream = {ARCHIVE_STREAM}, pointer = \"in/lines.pointer\" }}\n",
            )),
            SourceKind::Kafka => text.push_str(&self.kafka_feed_settings()),
        }
        text.push('\n');
        let sinks: &[&str] = if options.two_sinks_one_path {
            &["out", "out2"]
        } else {
            &["out"]
        };
        for name in sinks {
            text.push_str(&self.sink_block(name, scenario.sink, None));
        }
        let second_sink = sinks.last().copied().unwrap_or("out");
        match scenario.workload {
            Workload::Ledger => {
                let mut settings = String::from("state_dir = \"state\", alerts_sink = \"out\"");
                if let Some(every) = options.compact_every {
                    settings.push_str(&format!(", compact_every = {every}"));
                }
                settings.push_str(&self.ledger_state_settings());
                text.push_str(&format!(
                    "[[groups]]\nname = \"ledger\"\n[[groups.processors]]\nname = \"ledger\"\nkind = \"ledger\"\nsettings = {{ {settings} }}\n\n"
                ));
                if scenario.writers > 1 {
                    text.push_str(&format!(
                        "[[groups]]\nname = \"copy\"\n[[groups.processors]]\nname = \"copy\"\nkind = \"forward\"\nsettings = {{ feed = \"lines\", sink = \"{second_sink}\" }}\n"
                    ));
                }
            }
            Workload::Aggregate => text.push_str(&self.aggregate_block()),
            Workload::Forward => {
                text.push_str("[[groups]]\nname = \"forward\"\n");
                if scenario.writers > 1 {
                    text.push_str(
                        "[[groups.processors]]\nname = \"copy-e\"\nkind = \"forward\"\nsettings = { feed = \"lines\", sink = \"out\", keep = \"^E\" }\n",
                    );
                    // the second writer in a group of its own on odd seeds
                    if scenario.seed % 2 == 1 {
                        text.push_str("\n[[groups]]\nname = \"forward-w\"\n");
                    }
                    text.push_str(&format!(
                        "[[groups.processors]]\nname = \"copy-w\"\nkind = \"forward\"\nsettings = {{ feed = \"lines\", sink = \"{second_sink}\", keep = \"^W\" }}\n"
                    ));
                } else {
                    text.push_str(
                        "[[groups.processors]]\nname = \"copy\"\nkind = \"forward\"\nsettings = { feed = \"lines\", sink = \"out\" }\n",
                    );
                }
            }
        }
        for (index, also) in options.also.iter().enumerate() {
            text.push_str(&self.also_block(index, *also));
        }
        text
    }

    /// The aggregate family's dead-letter sink and `aggregate` processor (`agg/agg`):
    /// the ledger's lines grouped by account, a count and a sum, the ledger's alerts
    /// as a rule (`alert,ACCOUNT,BALANCE` after every line that leaves the sum below
    /// zero) into the sink `out`, the lines that do not parse into `dead`.
    fn aggregate_block(&self) -> String {
        let options = &self.scenario.options;
        let format = if options.json {
            "format = \"json\"\n"
        } else {
            "format = \"csv\"\ncolumns = [\"account\", \"amount\"]\n"
        };
        let mut text = format!(
            "[[sinks]]\nname = \"dead\"\nkind = \"file\"\npath = \"{DEAD_LETTER_FILE}\"\n\n[[groups]]\nname = \"agg\"\n[[groups.processors]]\nname = \"agg\"\nkind = \"aggregate\"\n[groups.processors.settings]\nfeed = \"lines\"\nstate_dir = \"state\"\n{format}fields = {{ account = \"string\", amount = \"integer\" }}\ngroup_by = [\"account\"]\naggregates = {{ n = \"count\", total = \"sum(amount)\" }}\nrules = [{{ name = \"negative\", when = \"total < 0\", emit = \"alert,{{account}},{{total}}\", fire = \"every\" }}]\nsink = \"out\"\ndead_letter = \"dead\"\n"
        );
        if let Some(every) = options.compact_every {
            text.push_str(&format!("snapshot_every = {every}\n"));
        }
        text.push('\n');
        text
    }

    /// The names of consumer `index + 1`'s sink and processor as they stand: `also0`
    /// and `copy`, `also0-r2` and `copy-r2` after two replacements.
    pub fn also_names(&self, index: usize) -> (String, String) {
        let replaced = self
            .consumers
            .get(index + 1)
            .map_or(0, |life| life.replaced);
        if replaced == 0 {
            (format!("also{index}"), "copy".to_owned())
        } else {
            (
                format!("also{index}-r{replaced}"),
                format!("copy-r{replaced}"),
            )
        }
    }

    /// The text an also-consumer's outputs start with: `a0 `.
    pub fn also_prefix(index: usize) -> String {
        format!("a{index} ")
    }

    /// The group of consumer `index + 1` (its group stays when the consumer is
    /// removed): its sink and processor when present. With `shared_group` the others
    /// are all in the group `also`, named once.
    fn also_block(&self, index: usize, also: Also) -> String {
        let present = self
            .consumers
            .get(index + 1)
            .is_none_or(|life| life.present);
        let shared = self.scenario.options.shared_group;
        let group = if shared {
            if index == 0 {
                "[[groups]]\nname = \"also\"\n".to_owned()
            } else {
                String::new()
            }
        } else {
            format!("[[groups]]\nname = \"also{index}\"\n")
        };
        let mut text = String::new();
        match also {
            Also::Forward { sink } => {
                let (sink_name, processor) = self.also_names(index);
                if present {
                    text.push_str(&self.sink_block(&sink_name, sink, Some(index)));
                }
                text.push_str(&group);
                if present {
                    let processor = if shared {
                        format!("{processor}{index}")
                    } else {
                        processor
                    };
                    text.push_str(&format!(
                        "[[groups.processors]]\nname = \"{processor}\"\nkind = \"forward\"\nsettings = {{ feed = \"lines\", sink = \"{sink_name}\", template = \"{}{{line}}\" }}\n",
                        Self::also_prefix(index)
                    ));
                }
            }
            Also::LedgerUnguarded => {
                text.push_str(&group);
                if present {
                    text.push_str(&format!(
                        "[[groups.processors]]\nname = \"ledger{index}\"\nkind = \"ledger\"\nsettings = {{ state_dir = \"state-also{index}\", alerts = \"out/also{index}-alerts.txt\", guard = false }}\n"
                    ));
                }
            }
        }
        text.push('\n');
        text
    }

    /// A `[[sinks]]` entry named `name` of `kind`: the workload's (`also` `None`) or
    /// consumer `also + 1`'s, each with its own file, path or topic.
    fn sink_block(&self, name: &str, kind: SinkKind, also: Option<usize>) -> String {
        let options = &self.scenario.options;
        let mut text = format!("[[sinks]]\nname = \"{name}\"\n");
        match kind {
            SinkKind::File => text.push_str(&format!(
                "kind = \"file\"\npath = \"{}\"\n",
                also.map_or("out/out.txt".to_owned(), |index| format!(
                    "out/also{index}.txt"
                ))
            )),
            SinkKind::Http => {
                let path = also.map_or("/events".to_owned(), |index| format!("/also{index}"));
                text.push_str(&self.http_sink_settings(&path));
            }
            SinkKind::Journal => text.push_str(&format!(
                "kind = \"journal\"\nsettings = {{ path = \"{}\" }}\n",
                also.map_or("out/journal".to_owned(), |index| format!(
                    "out/journal-also{index}"
                ))
            )),
            SinkKind::Tcp => text.push_str(&format!(
                "kind = \"tcp\"\naddress = \"127.0.0.1:{}\"\n",
                self.ports.tcp
            )),
            SinkKind::Stdout => text.push_str("kind = \"stdout\"\n"),
            SinkKind::Kafka => text.push_str(&self.kafka_sink_settings(also)),
        }
        if let Some(batch) = options.batch {
            text.push_str(&format!("batch = {batch}\n"));
        }
        if let Some(capacity) = options.sink_queue_capacity {
            text.push_str(&format!("queue_capacity = {capacity}\n"));
        }
        text.push('\n');
        text
    }

    /// What the HTTP target peer is told: its port and logs, https with the harness's
    /// CA (written to [`HTTPS_CA_FILE`]) when the scenario asks, and the form of the
    /// sink's requests (its batches), which it checks.
    pub fn http_target_spec(&self) -> TargetSpec {
        let options = &self.scenario.options;
        TargetSpec {
            port: self.ports.http,
            log: self.path("peers/http.log"),
            mode_file: self.path("peers/http.mode"),
            seed: self.scenario.seed,
            https_ca: options.https.then(|| self.path(HTTPS_CA_FILE)),
            expected: Expected {
                batch: options.http_batch,
            },
            protocol_log: Some(self.path(HTTP_PROTOCOL_LOG)),
        }
    }

    /// An HTTP sink's settings toward the target's `path`.
    fn http_sink_settings(&self, path: &str) -> String {
        let options = &self.scenario.options;
        let scheme = if options.https { "https" } else { "http" };
        let mut text = format!(
            "kind = \"http\"\nurl = \"{scheme}://127.0.0.1:{}{path}\"\n",
            self.ports.http
        );
        if options.https {
            text.push_str(&format!("ca_file = \"{HTTPS_CA_FILE}\"\n"));
        }
        let http_settings = [
            ("max_retries", options.max_retries.map(u64::from)),
            ("initial_backoff_millis", options.initial_backoff_millis),
            ("max_backoff_millis", options.max_backoff_millis),
            ("response_timeout_millis", options.response_timeout_millis),
            (
                "batch_max_lines",
                options.http_batch.map(|batch| u64::from(batch.max_lines)),
            ),
            (
                "batch_max_bytes",
                options
                    .http_batch
                    .and_then(|batch| batch.max_bytes.map(u64::from)),
            ),
        ];
        for (key, value) in http_settings {
            if let Some(value) = value {
                text.push_str(&format!("{key} = {value}\n"));
            }
        }
        if options.http_batch.is_some_and(|batch| batch.gzip) {
            text.push_str("compression = \"gzip\"\n");
        }
        if let Some(policy) = &options.on_exhausted {
            text.push_str(&format!("on_exhausted = \"{policy}\"\n"));
        }
        text
    }

    /// The broker's address, or a placeholder until it started (the config is written
    /// again once it has: [`World::start_broker`]).
    fn kafka_brokers(&self) -> String {
        self.kafka.as_ref().map_or_else(
            || "the-harness-broker-is-not-started-yet:9092".to_owned(),
            |kafka| kafka.brokers.clone(),
        )
    }

    /// The feed settings of a Kafka source (the `kafka` family): the scenario's topic
    /// and group; a member out of the group after [`SESSION_TIMEOUT_MS`] stopped; an
    /// epoch file beside the config unless the ledger keeps its state in a changelog
    /// (which needs a new epoch at each assignment, and refuses one).
    fn kafka_feed_settings(&self) -> String {
        let (topic, group) = self.kafka.as_ref().map_or_else(
            || ("input".to_owned(), "group".to_owned()),
            |kafka| (kafka.input.clone(), kafka.group.clone()),
        );
        let epoch_file = if self.changelog_ledger() {
            String::new()
        } else {
            ", epoch_file = \"kafka.epochs\"".to_owned()
        };
        format!(
            "source = \"kafka\"\ncodec = \"line\"\nsettings = {{ brokers = \"{}\", group = \"{group}\", topic = \"{topic}\", session_timeout_ms = {SESSION_TIMEOUT_MS}{epoch_file} }}\n",
            self.kafka_brokers()
        )
    }

    /// The settings of a Kafka sink (the `kafka` family) of the workload (`also`
    /// `None`) or of consumer `also + 1`: its own topic; with
    /// `KafkaOptions::exactly_once`, transactions and a positions topic of its own.
    fn kafka_sink_settings(&self, also: Option<usize>) -> String {
        let consumer = also.map_or(0, |index| index + 1);
        let topic = self.kafka.as_ref().map_or_else(
            || format!("output-{consumer}"),
            |kafka| kafka.output_of(consumer),
        );
        let exactly_once = self
            .scenario
            .options
            .kafka
            .is_some_and(|kafka| kafka.exactly_once);
        let transactions = if exactly_once {
            format!(", transactional_id = \"{topic}-tx\", positions_topic = \"{topic}-positions\"")
        } else {
            String::new()
        };
        format!(
            "kind = \"kafka\"\nsettings = {{ brokers = \"{}\", topic = \"{topic}\", name = \"{topic}\"{transactions} }}\n",
            self.kafka_brokers()
        )
    }

    /// More of the ledger's settings where its state is not `state/` alone: on a
    /// Kafka feed, `state = "changelog"` (`KafkaOptions::changelog`, a topic per the
    /// feed's group) or `state = "local"`; empty otherwise.
    fn ledger_state_settings(&self) -> String {
        if self.scenario.source != SourceKind::Kafka {
            String::new()
        } else if self.changelog_ledger() {
            ", state = \"changelog\"".to_owned()
        } else {
            ", state = \"local\"".to_owned()
        }
    }
}
