//! What one chaos run does: a workload over a source kind into a sink kind, and the
//! steps of its schedule. A scenario is plain data (serde), printed as TOML so that a
//! failing schedule can be read, edited, minimised and replayed (`--schedule FILE`).

use serde::{Deserialize, Serialize};

mod describe;

/// One chaos schedule: what runs, and the steps done to it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// The seed the schedule was generated from (0 for a hand-written one); the runtime
    /// choices (kill delays, which byte is flipped, which HTTP request fails) derive from
    /// it too.
    pub seed: u64,
    /// The fault family the schedule was generated for (empty for a hand-written one).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub family: String,
    /// What the server runs.
    pub workload: Workload,
    /// Where its input comes from.
    pub source: SourceKind,
    /// Where its outputs go (the ledger's alerts, or the forwarded lines).
    pub sink: SinkKind,
    /// Writers into the one sink: 1, or 2 (two `forward` processors with disjoint
    /// filters, or the ledger's alerts plus a `forward` of its input).
    #[serde(default = "one")]
    pub writers: u8,
    /// Sizes and settings.
    #[serde(default)]
    pub options: Options,
    /// The schedule, in order. After the last step the harness heals every fault (frees
    /// the disks, brings the peers back) and runs the server with
    /// `--exit-when-settled` to its end.
    pub steps: Vec<Step>,
}

fn one() -> u8 {
    1
}

/// The processors the server runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Workload {
    /// The ledger: `account,amount` lines into balances and counts (exactly once), an
    /// alert per negative balance into the sink.
    Ledger,
    /// The built-in `forward`: each line copied into the sink.
    Forward,
    /// The `aggregate` processor kind (the `aggregate` family): the ledger's
    /// `account,amount` lines (CSV, or JSON with `Options::json`) on a few shared
    /// accounts per stream, grouped by account with a `count` and a `sum`, a rule
    /// emitting `alert,ACCOUNT,BALANCE` after every line that leaves the sum below zero
    /// (the ledger's alerts), and lines that do not parse (`Options::bad_percent`)
    /// dead-lettered into a second file sink.
    Aggregate,
}

/// The input's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceKind {
    /// One tailed file (`in/input.log`), COMMITED.
    File,
    /// A glob feed over `in/logs/*.log`, one file per stream.
    Glob,
    /// A journal (the journal plugin), appended to by `mongoose journal append`.
    Journal,
    /// An archive recording (the archive plugin) of an IPC publication
    /// (`mongoose archive publish --ipc`).
    ArchiveIpc,
    /// An archive recording of a UDP publication (the harness's own publisher peer,
    /// which can drop datagrams and keep a small retransmit buffer: recorded gaps).
    ArchiveUdp,
    /// A Kafka topic of the harness's own broker (the Kafka plugin's source), one
    /// partition per stream, produced to by the harness.
    Kafka,
}

/// The sink's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SinkKind {
    /// A file sink (`out/out.txt`): exactly once.
    File,
    /// An HTTP sink toward the harness's HTTP target peer: at least once, one key each.
    Http,
    /// A journal sink (the journal plugin): at least once.
    Journal,
    /// A TCP sink toward the harness's TCP receiver peer: at least once while the peer
    /// is not faulted.
    Tcp,
    /// The stdout sink: the server's standard output, kept by the harness across runs
    /// (`peers/stdout.txt`): at least once.
    Stdout,
    /// A Kafka topic of the harness's own broker (the Kafka plugin's sink), read
    /// `read_committed`: exactly once with `KafkaOptions::exactly_once`, else at least
    /// once.
    Kafka,
}

/// A consumer of the feed beside the workload's own processors (consumer `i + 1` is
/// `options.also[i]`; consumer 0 is the workload's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Also {
    /// A `forward` of every line into a sink of its own (`also<i>`, in a group of its
    /// own), each output prefixed `a<i> ` so that the check tells the consumers apart
    /// at a target they share.
    Forward {
        /// The sink's kind.
        sink: SinkKind,
    },
    /// A second ledger with `guard = false` (its state in `state-also<i>/`, alerts to
    /// no sink): at least once, never a line missing.
    LedgerUnguarded,
}

/// The HTTP sink's batches (`batch_max_lines` above 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpBatch {
    /// `batch_max_lines`.
    pub max_lines: u32,
    /// `batch_max_bytes` (default: the sink's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<u32>,
    /// `compression = "gzip"`.
    #[serde(default)]
    pub gzip: bool,
}

/// The Kafka settings of a scenario with a Kafka source or sink.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KafkaOptions {
    /// Partitions of the input topic (a Kafka source: one stream each).
    pub partitions: u32,
    /// A Kafka sink writes in transactions (`transactional_id`) and keeps what each
    /// committed (`positions_topic`): exactly once as a `read_committed` reader sees it.
    pub exactly_once: bool,
    /// The ledger keeps its state in a changelog topic (`state = "changelog"`) instead
    /// of `state/`.
    pub changelog: bool,
    /// The input topic's `segment.bytes` (at least 1 MiB: Apache Kafka 4 refuses less).
    pub segment_bytes: Option<u32>,
}

impl Default for KafkaOptions {
    fn default() -> Self {
        KafkaOptions {
            partitions: 1,
            exactly_once: false,
            changelog: false,
            segment_bytes: None,
        }
    }
}

/// Sizes and settings of a scenario; every field has a default.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Options {
    /// Streams of input: the files of a glob feed (each its own lane). Other sources
    /// have one stream.
    pub streams: u32,
    /// `max_open_files` of a glob feed.
    pub max_open_files: Option<u32>,
    /// Bytes of padding in each forwarded line.
    pub line_bytes: u32,
    /// Percent of the ledger's lines that subtract (and so make an alert).
    pub negative_percent: u32,
    /// Percent of the ledger's lines on a few shared accounts per stream (balances that
    /// carry over); the others each have an account of their own.
    pub hot_percent: u32,
    /// Mount the output folder (`out/`) on a tmpfs of this many KiB.
    pub output_tmpfs_kib: Option<u32>,
    /// Mount the ledger's state folder (`state/`) on a tmpfs of this many KiB.
    pub state_tmpfs_kib: Option<u32>,
    /// The sink's `batch`.
    pub batch: Option<u32>,
    /// The sink's `queue_capacity`.
    pub sink_queue_capacity: Option<u32>,
    /// The HTTP sink's `on_exhausted` (`hold` or `count_loss`).
    pub on_exhausted: Option<String>,
    /// The HTTP sink's `max_retries`.
    pub max_retries: Option<u32>,
    /// The HTTP sink's `initial_backoff_millis`.
    pub initial_backoff_millis: Option<u64>,
    /// The HTTP sink's `max_backoff_millis`.
    pub max_backoff_millis: Option<u64>,
    /// The HTTP sink's `response_timeout_millis`.
    pub response_timeout_millis: Option<u64>,
    /// Two file sinks on the same path, each written by its own `forward`.
    pub two_sinks_one_path: bool,
    /// The UDP publisher drops every n-th data datagram on its first send.
    pub udp_drop_every: Option<u32>,
    /// The UDP publisher's retransmit buffer, in bytes (flow control off when given:
    /// what leaves it before the archiver has it is a recorded gap).
    pub udp_retransmit_bytes: Option<u32>,
    /// The ledger's `compact_every`.
    pub compact_every: Option<u64>,
    /// How long the final run may take to end, in seconds.
    pub finish_seconds: u64,
    /// Consumers of the feed beside the workload's own (a file sink beside an HTTP
    /// forward, a ledger without its guard...).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub also: Vec<Also>,
    /// The server's `shutdown_timeout_millis` (default 20,000): how long a stop waits for
    /// the sinks (a SIGTERM with a target down waits it whole).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shutdown_timeout_millis: Option<u64>,
    /// The other consumers share one group (`also`): one queue, so a reload that
    /// replaces one of them leaves the queue (and its commit gates) to the others.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub shared_group: bool,
    /// The HTTP sinks' batches.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_batch: Option<HttpBatch>,
    /// The HTTP target serves https (a CA of the harness's own, given to the sink as
    /// `ca_file`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub https: bool,
    /// The Kafka settings (a Kafka source or sink).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kafka: Option<KafkaOptions>,
    /// Percent of the aggregate's lines that do not parse (counted, dead-lettered).
    #[serde(skip_serializing_if = "is_zero")]
    pub bad_percent: u32,
    /// The aggregate reads JSON lines (`{"account": ..., "amount": ...}`), not CSV.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub json: bool,
}

fn is_zero(value: &u32) -> bool {
    *value == 0
}

impl Default for Options {
    fn default() -> Self {
        Options {
            streams: 1,
            max_open_files: None,
            line_bytes: 24,
            negative_percent: 30,
            hot_percent: 10,
            output_tmpfs_kib: None,
            state_tmpfs_kib: None,
            batch: None,
            sink_queue_capacity: None,
            on_exhausted: None,
            max_retries: None,
            initial_backoff_millis: None,
            max_backoff_millis: None,
            response_timeout_millis: None,
            two_sinks_one_path: false,
            udp_drop_every: None,
            udp_retransmit_bytes: None,
            compact_every: None,
            finish_seconds: 90,
            also: Vec::new(),
            shutdown_timeout_millis: None,
            shared_group: false,
            http_batch: None,
            https: false,
            kafka: None,
            bad_percent: 0,
            json: false,
        }
    }
}

/// One step of a schedule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "do", rename_all = "snake_case", deny_unknown_fields)]
pub enum Step {
    /// Appends `lines` new lines to stream `stream` (a glob's file, else the one input).
    Append {
        /// How many.
        lines: u32,
        /// Which stream.
        #[serde(default)]
        stream: u32,
        /// Bytes of padding of these forwarded lines (default: `options.line_bytes`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bytes: Option<u32>,
    },
    /// Starts the server (`mongoose run`, no `--exit-when-settled`) when it is not
    /// running.
    Start,
    /// Waits.
    Wait {
        /// Milliseconds.
        ms: u64,
    },
    /// Waits (bounded) until the server's status says settled.
    Settle,
    /// SIGKILL of the server.
    Kill,
    /// SIGSTOP of the server, then SIGCONT after `ms`.
    Pause {
        /// Milliseconds stopped.
        ms: u64,
    },
    /// SIGTERM of the server, waiting for its exit.
    Term,
    /// A crash loop: `kills` times, append a burst, start, SIGKILL `min_ms..=max_ms`
    /// after the start.
    CrashLoop {
        /// How many kills.
        kills: u32,
        /// The shortest life.
        min_ms: u64,
        /// The longest life.
        max_ms: u64,
        /// The smallest burst of lines appended before each start.
        burst_min: u32,
        /// The largest burst.
        burst_max: u32,
        /// Every this many kills, what the consumers applied (or wrote) must have grown
        /// since the last check while lines wait: a crash loop makes progress.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        progress_every: Option<u32>,
    },
    /// A logrotate of stream `stream`'s file.
    Rotate {
        /// How.
        mode: RotateMode,
        /// Which stream.
        #[serde(default)]
        stream: u32,
    },
    /// Renames a glob's file to another name the glob matches.
    RenameInGlob {
        /// Which stream.
        stream: u32,
    },
    /// Deletes a glob's file (its unread lines are gone: a loss the run must report).
    DeleteInput {
        /// Which stream.
        stream: u32,
    },
    /// Deletes the source itself and makes it again at the same path (a journal
    /// `rm -rf` and new appends, an archive folder re-created, the input file
    /// deleted and written anew).
    RecreateSource,
    /// Deletes a piece of state (the server is stopped first).
    Delete {
        /// Which.
        what: StateFile,
    },
    /// Damages a piece of state (the server is stopped first).
    Damage {
        /// Which.
        what: StateFile,
        /// How.
        how: Damage,
    },
    /// Keeps a copy of a piece of state, for a later `older_copy` damage.
    KeepCopy {
        /// Which.
        what: StateFile,
    },
    /// Fills a tmpfs (the scenario mounts it) to its last byte.
    FillDisk {
        /// Which.
        under: Disk,
        /// Bytes given back after filling it (a nearly full disk: a small write fits,
        /// a large one does not).
        #[serde(default)]
        leave: u32,
    },
    /// Frees what `fill_disk` took.
    FreeDisk {
        /// Which.
        under: Disk,
    },
    /// Does something to a peer process.
    Peer {
        /// Which peer.
        peer: PeerKind,
        /// What.
        action: PeerAction,
    },
    /// How the HTTP target answers from now on.
    Http {
        /// The mode.
        mode: HttpMode,
    },
    /// The config file changed and the server sent SIGHUP (while it runs; a stopped
    /// server reads the file at its next start).
    Reload {
        /// What changes.
        change: ReloadChange,
    },
    /// From now on the server is started with its config named another way (the same
    /// file).
    Respell {
        /// How.
        how: Spelling,
    },
    /// Something done to the Kafka topics (a scenario with a Kafka source or sink).
    Kafka {
        /// What.
        op: KafkaOp,
    },
}

/// What a reload changes in the config file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "what", rename_all = "snake_case", deny_unknown_fields)]
pub enum ReloadChange {
    /// A consumer's sink and processor replaced by ones of new names writing to the
    /// same target (`also0` -> `also0-r1`): what the old sink held must reach the target.
    ReplaceSink {
        /// Which consumer (0: the workload's, `i + 1`: `options.also[i]`).
        consumer: u32,
    },
    /// A consumer's sink and processor removed (its group stays): the inputs of what
    /// its sink held stay uncommitted.
    Remove {
        /// Which consumer.
        consumer: u32,
    },
    /// A removed consumer added back under its names.
    AddBack {
        /// Which consumer.
        consumer: u32,
    },
    /// `data_dir` moved to another folder: refused (the state stays where it is).
    DataDir,
    /// The file cut in the middle of a line (a half-written save): refused, naming the
    /// file.
    HalfWritten,
    /// The file emptied (a truncating save): refused.
    Empty,
    /// The file as the harness means it now (after a refused change).
    Restore,
}

/// How the server's start names its config file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Spelling {
    /// `--config mongoose.toml` from the scenario's folder.
    Plain,
    /// Through `..`: `--config ../<folder>/mongoose.toml` from the scenario's folder.
    DotDot,
    /// Through a symbolic link to the scenario's folder (`<folder>.link`).
    Symlink,
    /// A relative path from another folder: `--config ../mongoose.toml` from `in/`.
    Elsewhere,
}

/// Something done to the Kafka topics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum KafkaOp {
    /// `DeleteRecords` of a partition of the input topic up to its end: what the group
    /// had not read is gone (a loss the run must report).
    DeleteRecords {
        /// Which partition.
        stream: u32,
    },
    /// The input topic's retention cut to the minimum until its old segments are gone,
    /// then set back: what the group had not read is gone (a loss the run must report).
    Retention,
    /// The input topic deleted and made again under its name: a new epoch, read from
    /// its start.
    RecreateTopic,
    /// Partitions added to the input topic (up to `to`): read from their start, soon.
    AddPartitions {
        /// The new partition count.
        to: u32,
    },
}

/// The logrotate modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RotateMode {
    /// `mv f f.N`; the writer makes `f` anew at its next line.
    Rename,
    /// logrotate's default `create`: the file is renamed, a new empty one made at once.
    /// Under a glob the new name matches the glob (`app0-1.log`, as `dateext` gives).
    Create,
    /// `copytruncate`: copied to `f.N`, then cut to 0 in place.
    Copytruncate,
    /// `compress` with `delaycompress`: `f.1` (the last rotation) is gzipped to
    /// `f.2.gz`, `f` becomes `f.1`, a new `f` is made.
    Compress,
}

/// A piece of durable state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StateFile {
    /// The file sink's `out.txt.sinkstate` (in the server's data folder).
    SinkState,
    /// The ledger's whole state folder.
    LedgerStateDir,
    /// The ledger's outbox segment(s).
    LedgerOutbox,
    /// The ledger's snapshot.
    LedgerSnapshot,
    /// A file feed's `.readPointer` (a glob's: the first stream's file), in the server's
    /// data folder.
    Pointer,
    /// A glob feed's lane registry.
    Lanes,
    /// The journal feed's tailer store.
    TailerStore,
    /// The archive feed's pointer.
    ArchivePointer,
    /// The input journal itself: one excerpt in its middle (a flipped byte of its
    /// payload). The excerpts from it on may stay unread; the run must say so.
    JournalExcerpt,
}

/// How a state file is damaged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Damage {
    /// One byte flipped, at this per-mille of the file (of its newest record where the
    /// harness knows the layout).
    FlipByte {
        /// Per-mille.
        at: u32,
    },
    /// The tail cut: the file keeps this per-mille of its bytes.
    CutTail {
        /// Per-mille kept.
        keep: u32,
    },
    /// Put back the copy a `keep_copy` step took.
    OlderCopy,
    /// Put in place the same file of another run (another input, another sink).
    Foreign,
}

/// A folder the scenario may mount on a small tmpfs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Disk {
    /// `state/`: the ledger's state.
    State,
    /// `out/`: the file sink's output.
    Outputs,
}

/// The processes beside the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PeerKind {
    /// The HTTP target of an HTTP sink.
    HttpTarget,
    /// `mongoose archive serve`.
    Archiver,
    /// `mongoose journal append` (a journal source's writer).
    Appender,
    /// The archive publisher.
    Publisher,
    /// The TCP receiver of a TCP sink.
    TcpReceiver,
    /// The Kafka broker of a Kafka scenario (a one-node cluster of the harness's own).
    Broker,
}

/// What is done to a peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PeerAction {
    /// SIGKILL (it stays down until `restart` or the final heal).
    Kill,
    /// SIGSTOP, then SIGCONT after `ms`.
    Pause {
        /// Milliseconds stopped.
        ms: u64,
    },
    /// Starts it again when it is down.
    Restart,
}

/// How the HTTP target answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HttpMode {
    /// 200 to everything.
    Ok,
    /// `percent` of the requests answered with `status` (5xx, 503, 429...).
    Fail {
        /// Percent failing.
        percent: u32,
        /// The status they get.
        status: u16,
    },
    /// `percent` of the requests never answered (the sink's response timeout runs out).
    Timeout {
        /// Percent.
        percent: u32,
    },
    /// `percent` of the requests read, then the connection closed without an answer.
    Close {
        /// Percent.
        percent: u32,
    },
    /// `percent` of the requests closed after half of their body was read (nothing
    /// taken).
    CloseMidBody {
        /// Percent.
        percent: u32,
    },
    /// `percent` of the requests taken and answered 200 after `ms` (past the sink's
    /// response timeout when `ms` is larger: uncertain, sent again under its key).
    Late {
        /// Percent.
        percent: u32,
        /// Milliseconds.
        ms: u64,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scenario_reads_back_from_its_toml() {
        let scenario = Scenario {
            seed: 7,
            family: "reload".to_owned(),
            workload: Workload::Forward,
            source: SourceKind::Glob,
            sink: SinkKind::Http,
            writers: 2,
            options: Options {
                max_open_files: Some(1),
                also: vec![
                    Also::Forward {
                        sink: SinkKind::Stdout,
                    },
                    Also::LedgerUnguarded,
                ],
                http_batch: Some(HttpBatch {
                    max_lines: 20,
                    max_bytes: None,
                    gzip: true,
                }),
                ..Options::default()
            },
            steps: vec![
                Step::Append {
                    lines: 10,
                    stream: 1,
                    bytes: Some(3),
                },
                Step::FillDisk {
                    under: Disk::Outputs,
                    leave: 100,
                },
                Step::Start,
                Step::Damage {
                    what: StateFile::SinkState,
                    how: Damage::FlipByte { at: 10 },
                },
                Step::Peer {
                    peer: PeerKind::HttpTarget,
                    action: PeerAction::Pause { ms: 5 },
                },
                Step::Http {
                    mode: HttpMode::Fail {
                        percent: 25,
                        status: 503,
                    },
                },
                Step::Rotate {
                    mode: RotateMode::Create,
                    stream: 0,
                },
                Step::Reload {
                    change: ReloadChange::ReplaceSink { consumer: 1 },
                },
                Step::Respell {
                    how: Spelling::Symlink,
                },
                Step::CrashLoop {
                    kills: 3,
                    min_ms: 1,
                    max_ms: 2,
                    burst_min: 0,
                    burst_max: 1,
                    progress_every: Some(1),
                },
            ],
        };
        let text = scenario.to_toml();
        assert_eq!(Scenario::from_toml(&text), Ok(scenario), "{text}");
    }
}
