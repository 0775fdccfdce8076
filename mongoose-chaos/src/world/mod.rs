//! The folder one scenario runs in: its config, its inputs (and where each line went),
//! its processes, its small file systems and the state files a fault may touch.
//!
//! ```text
//! <dir>/mongoose.toml      the server's config (relative paths resolve against it)
//! <dir>/in/               the inputs: input.log, logs/*.log, journal/, archive/, ipc/
//! <dir>/out/              the sink's output (a tmpfs when the scenario asks)
//! <dir>/state/            the ledger's state (a tmpfs when the scenario asks)
//! <dir>/peers/            the peers' records (HTTP requests, TCP lines, UDP gaps)
//! <dir>/copies/           copies kept for `older_copy`
//! <dir>/server.log        every server run's stderr, each after a marker line
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use mongoose_ledger::LedgerState;
use mongoose_testkit::Tmpfs;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::peer::{PeerSpec, PEER_ENV};
use crate::process::{free_tcp_port, free_udp_port, Proc};
use crate::run::RunEnd;
use crate::scenario::{
    Disk, PeerKind, Scenario, SinkKind, SourceKind, Spelling, StateFile, Workload,
};
use crate::truth::{Failure, FailureKind, Truth};

pub mod aggregate;
mod config;
pub mod kafka;

pub use config::{HTTPS_CA_FILE, HTTP_PROTOCOL_LOG};

/// The stream id of the archive scenarios.
pub const ARCHIVE_STREAM: u32 = 7;

/// How the harness starts a peer process: a program (the harness's executable, or a
/// test binary with its peer entry) given the peer's spec in [`PEER_ENV`].
#[derive(Clone, Debug)]
pub struct Launcher {
    /// The program.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
}

/// The binaries a scenario runs.
#[derive(Clone, Debug)]
pub struct Binaries {
    /// The `mongoose` binary.
    pub mongoose: PathBuf,
    /// The plugin folder (the journal and archive plugins).
    pub plugin_dir: PathBuf,
    /// How peers are started.
    pub peer: Launcher,
}

/// One file (or journal, or recording) of a stream and the lines it holds.
#[derive(Clone, Debug)]
pub struct InputFile {
    /// Where it is now.
    pub path: PathBuf,
    /// The truth's indexes of its lines, in order.
    pub lines: Vec<usize>,
}

/// A stream's files: the live one last.
#[derive(Clone, Debug, Default)]
pub struct StreamFiles {
    /// The path new lines go to.
    pub live: PathBuf,
    /// Every file of the stream (the live one, when it exists, is the last).
    pub files: Vec<InputFile>,
    /// Rotations done (names the rotated files).
    pub rotations: u32,
    /// The file of the last rotation since the server last settled: a second rotation
    /// before the server caught up may leave it, and the file that rotation makes, a
    /// middle file that cannot be proven a rotation (read, or reported lost).
    pub unsettled_rotation: Option<PathBuf>,
}

/// One consumer of the feed through the schedule's reloads (consumer 0 is the
/// workload's, consumer `i + 1` is `options.also[i]`).
#[derive(Clone, Debug)]
pub struct ConsumerLife {
    /// In the config now.
    pub present: bool,
    /// How often its sink and processor were replaced (the names' suffix).
    pub replaced: u32,
    /// The line count when a reload removed it (while it is removed).
    pub removed_at: Option<usize>,
    /// The lines written while it was removed: it owes none of them.
    pub absent: Vec<std::ops::Range<usize>>,
}

impl Default for ConsumerLife {
    fn default() -> Self {
        ConsumerLife {
            present: true,
            replaced: 0,
            removed_at: None,
            absent: Vec::new(),
        }
    }
}

impl ConsumerLife {
    /// Whether it owes line `index` (it was in the config when the line was written and
    /// is at the end).
    pub fn owes(&self, index: usize) -> bool {
        self.present && !self.absent.iter().any(|range| range.contains(&index))
    }
}

/// The ports of a scenario.
#[derive(Clone, Copy, Debug)]
pub struct Ports {
    /// The admin API.
    pub admin: u16,
    /// The HTTP target.
    pub http: u16,
    /// The TCP receiver.
    pub tcp: u16,
    /// The archiver's UDP address.
    pub udp: u16,
}

/// A status sample of an HTTP sink and what the target had seen when it was taken.
#[derive(Clone, Debug)]
pub struct HttpSample {
    /// The server run it belongs to.
    pub run: u32,
    /// `not_published + uncertain` of the sink.
    pub failed_attempts: u64,
    /// `lost` of the sink.
    pub lost: u64,
    /// The length of the target's log when the run started: the run's records are
    /// those from there to the next run's start, read when the run is checked (a
    /// record the target writes after the sample is still the run's).
    pub log_from: u64,
    /// Whether the target was down (killed or paused) at some point of the run.
    pub target_was_down: bool,
}

/// One scenario's folder, processes and bookkeeping.
#[derive(Debug)]
pub struct World {
    /// The scenario.
    pub scenario: Scenario,
    /// The binaries.
    pub bins: Binaries,
    /// The folder.
    pub dir: PathBuf,
    /// Runtime choices (kill delays, bytes to damage).
    pub random: ChaCha8Rng,
    /// Every line written.
    pub truth: Truth,
    /// The streams' files.
    pub streams: Vec<StreamFiles>,
    /// The server, while it runs.
    pub server: Option<Proc>,
    /// Server runs started so far.
    pub runs: u32,
    /// When the current server run started.
    pub started: Option<Instant>,
    /// Whether a state file was deleted or damaged since the server last started.
    pub state_touched: bool,
    /// Whether the current (or last) server run started after a state fault.
    pub run_after_touch: bool,
    /// The state files deleted or damaged since a server last settled: a refusal (exit
    /// 1 or 2) naming one may still come.
    pub touched: Vec<crate::steps::Touched>,
    /// The peers that run.
    pub peers: BTreeMap<PeerKind, Proc>,
    /// Ports.
    pub ports: Ports,
    /// The small file systems, by folder.
    pub tmpfs: BTreeMap<Disk, Tmpfs>,
    /// The copies `keep_copy` took.
    pub copies: BTreeMap<StateFile, PathBuf>,
    /// The journal's generation (a re-created journal is a new one).
    pub generation: u32,
    /// The archive publisher's session.
    pub session: u32,
    /// What happened, with times, for the report.
    pub events: Vec<String>,
    /// Findings made during the schedule.
    pub failures: Vec<Failure>,
    /// Faults that may lose lines whose loss the run must report.
    pub lossy: Vec<String>,
    /// The faults of `lossy` after which the server cannot tell whether it lost
    /// anything (an input deleted while it was stopped: lines may have been appended
    /// after it last read): a report of a possible loss is honest even if nothing is
    /// missing.
    pub uncertain_losses: Vec<String>,
    /// Per partition of a Kafka input: the log start a `DeleteRecords` or a retention
    /// moved it to, and the fault's name. A broker killed before it checkpointed that
    /// log start gives the records back after its restart
    /// (`World::log_starts_after_restart`).
    pub removed_below: BTreeMap<u32, (i64, String)>,
    /// Inputs that vanished while the server ran and before it settled: a kill before
    /// it settled may have come before it saw them (an uncertain loss then).
    pub unsettled_vanished: Vec<String>,
    /// Whether an input was damaged (a run may then end with exit 1, naming it).
    pub input_damaged: bool,
    /// The number of lines written when an excerpt of the input journal was damaged:
    /// an appender opening it later refuses it, so lines from there on may never be
    /// written.
    pub journal_damaged_at: Option<usize>,
    /// The starts refused after a state fault (each repaired as its message says).
    pub refusals: Vec<String>,
    /// A config refused at load as promised (two file sinks on one path): the run ends.
    pub refused_config: Option<String>,
    /// The output files an operator moved away after a refusal (a new output file).
    pub moved_outputs: Vec<PathBuf>,
    /// HTTP sink status samples.
    pub http_samples: Vec<HttpSample>,
    /// The HTTP target's log length when the current run started.
    pub http_log_at_start: u64,
    /// Whether the HTTP target was down during the current run.
    pub http_down_in_run: bool,
    /// The server runs during which the HTTP target was down (killed or paused) or the
    /// server was paused: runs whose sink may have spent outputs' retries.
    pub http_down_runs: BTreeSet<u32>,
    /// Whether the HTTP target's mode fails, times out or closes some requests.
    pub http_failing: bool,
    /// The server runs whose `count_loss` HTTP sink may have counted outputs lost: the
    /// runs of `http_down_runs` and those during which the target's mode failed
    /// requests.
    pub http_fault_runs: BTreeSet<u32>,
    /// The runs that ended with an exit code (by themselves, on a SIGTERM, or the
    /// final run), in order: a killed run has none. A loss a run found is kept across
    /// kills and reported by the first run that ends after it (exit 3), not always by
    /// the final one.
    pub ends: Vec<RunEnd>,
    /// When the last fault of `lossy` was made.
    pub last_lossy_at: Option<Instant>,
    /// The output's bytes when the server last started (a refusal must leave them).
    pub output_at_start: Option<Vec<u8>>,
    /// The feed's consumers through the reloads.
    pub consumers: Vec<ConsumerLife>,
    /// How the server's start names its config.
    pub spelling: Spelling,
    /// A Kafka scenario's topics, group and producer (once its broker started).
    pub kafka: Option<kafka::KafkaWorld>,
    began: Instant,
}

impl World {
    /// Makes the folder `dir` (emptied first) for `scenario`, mounts its small file
    /// systems, writes its config and starts its peers.
    ///
    /// # Errors
    /// The folder, a mount or a peer could not be made.
    pub fn create(scenario: Scenario, bins: Binaries, dir: &Path) -> Result<World, String> {
        if dir.exists() {
            unmount_below(dir);
            std::fs::remove_dir_all(dir)
                .map_err(|error| format!("cannot empty {}: {error}", dir.display()))?;
        }
        for sub in ["in/logs", "in/ipc", "out", "state", "peers", "copies"] {
            std::fs::create_dir_all(dir.join(sub))
                .map_err(|error| format!("cannot make {}: {error}", dir.join(sub).display()))?;
        }
        let mut tmpfs = BTreeMap::new();
        if let Some(kib) = scenario.options.output_tmpfs_kib {
            tmpfs.insert(Disk::Outputs, mount(&dir.join("out"), kib)?);
        }
        if let Some(kib) = scenario.options.state_tmpfs_kib {
            tmpfs.insert(Disk::State, mount(&dir.join("state"), kib)?);
        }
        let streams = (0..scenario.options.streams.max(1))
            .map(|stream| StreamFiles {
                live: live_path(dir, scenario.source, stream),
                ..StreamFiles::default()
            })
            .collect();
        let truth = Truth::new(
            scenario.workload,
            scenario.writers,
            &scenario.options,
            scenario.seed,
        );
        let mut world = World {
            random: ChaCha8Rng::seed_from_u64(scenario.seed ^ 0x0072_756e_7469_6d65),
            truth,
            streams,
            server: None,
            runs: 0,
            started: None,
            state_touched: false,
            run_after_touch: false,
            touched: Vec::new(),
            peers: BTreeMap::new(),
            ports: Ports {
                admin: free_tcp_port(),
                http: free_tcp_port(),
                tcp: free_tcp_port(),
                udp: free_udp_port(),
            },
            tmpfs,
            copies: BTreeMap::new(),
            generation: 0,
            session: 1,
            events: Vec::new(),
            failures: Vec::new(),
            lossy: Vec::new(),
            uncertain_losses: Vec::new(),
            removed_below: BTreeMap::new(),
            unsettled_vanished: Vec::new(),
            refusals: Vec::new(),
            refused_config: None,
            moved_outputs: Vec::new(),
            input_damaged: false,
            journal_damaged_at: None,
            http_samples: Vec::new(),
            http_log_at_start: 0,
            http_down_in_run: false,
            http_down_runs: BTreeSet::new(),
            http_failing: false,
            http_fault_runs: BTreeSet::new(),
            ends: Vec::new(),
            last_lossy_at: None,
            output_at_start: None,
            consumers: vec![ConsumerLife::default(); 1 + scenario.options.also.len()],
            spelling: Spelling::Plain,
            kafka: None,
            began: Instant::now(),
            dir: dir.to_path_buf(),
            scenario,
            bins,
        };
        if world.scenario.workload == Workload::Aggregate {
            world.write_admin_token()?;
        }
        std::fs::write(world.path("mongoose.toml"), world.config())
            .map_err(|error| format!("cannot write the config: {error}"))?;
        for peer in world.peer_kinds() {
            world.start_peer(peer)?;
        }
        Ok(world)
    }

    /// A path inside the folder.
    pub fn path(&self, relative: &str) -> PathBuf {
        self.dir.join(relative)
    }

    /// Notes an event with the time since the scenario began.
    pub fn event(&mut self, text: impl Into<String>) {
        let text = text.into();
        self.events.push(format!(
            "{:>7.3}s {text}",
            self.began.elapsed().as_secs_f64()
        ));
    }

    /// Notes a failure found during the schedule.
    pub fn fail(&mut self, kind: FailureKind, detail: impl Into<String>) {
        let failure = Failure::new(kind, detail);
        self.event(format!("FAILURE {failure}"));
        self.failures.push(failure);
    }

    /// The peers the scenario needs from its start.
    pub fn peer_kinds(&self) -> Vec<PeerKind> {
        let mut peers = Vec::new();
        if matches!(self.scenario.source, SourceKind::Kafka) || self.uses_sink(SinkKind::Kafka) {
            peers.push(PeerKind::Broker);
        }
        if self.uses_sink(SinkKind::Http) {
            peers.push(PeerKind::HttpTarget);
        }
        if self.uses_sink(SinkKind::Tcp) {
            peers.push(PeerKind::TcpReceiver);
        }
        if matches!(
            self.scenario.source,
            SourceKind::ArchiveIpc | SourceKind::ArchiveUdp
        ) {
            peers.push(PeerKind::Archiver);
        }
        peers
    }

    /// Whether the workload's sink or another consumer's is of `kind`.
    pub fn uses_sink(&self, kind: SinkKind) -> bool {
        self.scenario.sink == kind
            || self
                .scenario
                .options
                .also
                .contains(&crate::scenario::Also::Forward { sink: kind })
    }

    /// The command of a peer.
    fn peer_command(&self, spec: &PeerSpec, log: &str) -> Result<Command, String> {
        let mut command = Command::new(&self.bins.peer.program);
        command
            .args(&self.bins.peer.args)
            .env(
                PEER_ENV,
                serde_json::to_string(spec).map_err(|error| error.to_string())?,
            )
            .stdout(std::process::Stdio::null())
            .stderr(self.log_file(log)?);
        Ok(command)
    }

    /// A log file of the folder, opened for appending (a child's stderr).
    pub fn log_file(&self, name: &str) -> Result<std::fs::File, String> {
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path(name))
            .map_err(|error| format!("cannot open {name}: {error}"))
    }

    /// A `mongoose` command in the folder.
    pub fn mongoose(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.bins.mongoose);
        command.args(args).current_dir(&self.dir);
        command
    }

    /// Starts `peer` when it is not running.
    ///
    /// # Errors
    /// It cannot be started.
    pub fn start_peer(&mut self, peer: PeerKind) -> Result<(), String> {
        if peer == PeerKind::Broker {
            return self.start_broker();
        }
        if let Some(running) = self.peers.get_mut(&peer) {
            if running.exited().is_none() {
                return Ok(());
            }
        }
        let (mut command, stdin) = match peer {
            PeerKind::HttpTarget => (
                self.peer_command(
                    &PeerSpec::HttpTarget(self.http_target_spec()),
                    "peers/http-target.stderr",
                )?,
                false,
            ),
            PeerKind::TcpReceiver => (
                self.peer_command(
                    &PeerSpec::TcpReceiver {
                        port: self.ports.tcp,
                        out: self.path("peers/tcp.txt"),
                    },
                    "peers/tcp-receiver.stderr",
                )?,
                false,
            ),
            PeerKind::Archiver => {
                let mut command =
                    self.mongoose(&["archive", "serve", "in/archive", "--ipc", "in/ipc"]);
                if self.scenario.source == SourceKind::ArchiveUdp {
                    command
                        .arg("--udp")
                        .arg(format!("127.0.0.1:{}", self.ports.udp));
                }
                command
                    .stdout(std::process::Stdio::null())
                    .stderr(self.log_file("peers/archiver.stderr")?);
                (command, false)
            }
            PeerKind::Appender => {
                let mut command = self.mongoose(&["journal", "append", "in/journal"]);
                command
                    .stdout(std::process::Stdio::null())
                    .stderr(self.log_file("peers/appender.stderr")?);
                (command, true)
            }
            PeerKind::Publisher => match self.scenario.source {
                SourceKind::ArchiveUdp => (
                    self.peer_command(
                        &PeerSpec::UdpPublisher {
                            archiver: ([127, 0, 0, 1], self.ports.udp).into(),
                            stream: ARCHIVE_STREAM,
                            session: self.session,
                            drop_every: self.scenario.options.udp_drop_every.map_or(0, u64::from),
                            retransmit_bytes: self
                                .scenario
                                .options
                                .udp_retransmit_bytes
                                .map(|bytes| bytes as usize),
                            gaps_file: self.path("peers/udp-gaps"),
                        },
                        "peers/publisher.stderr",
                    )?,
                    true,
                ),
                _ => {
                    let session = self.session.to_string();
                    let stream = ARCHIVE_STREAM.to_string();
                    let mut command = self.mongoose(&[
                        "archive",
                        "publish",
                        "--ipc",
                        "in/ipc",
                        "--stream",
                        &stream,
                        "--session",
                        &session,
                    ]);
                    command
                        .stdout(std::process::Stdio::null())
                        .stderr(self.log_file("peers/publisher.stderr")?);
                    (command, true)
                }
            },
            PeerKind::Broker => return self.start_broker(),
        };
        let name = format!("{peer:?}");
        let process = Proc::spawn(&name, &mut command, stdin)
            .map_err(|error| format!("cannot start the {name}: {error}"))?;
        self.event(format!("{name} started (pid {})", process.pid()));
        self.peers.insert(peer, process);
        if matches!(peer, PeerKind::HttpTarget | PeerKind::TcpReceiver) {
            let port = if peer == PeerKind::HttpTarget {
                self.ports.http
            } else {
                self.ports.tcp
            };
            wait_listening(port, Duration::from_secs(10))
                .map_err(|()| format!("the {name} never listened on {port}"))?;
        }
        Ok(())
    }

    /// Whether `peer` runs (and is not stopped).
    pub fn peer_up(&mut self, peer: PeerKind) -> bool {
        self.peers
            .get_mut(&peer)
            .is_some_and(|process| process.exited().is_none())
    }

    /// The path of a piece of state (a pointer, lane registry or sink state: in the
    /// server's data folder).
    pub fn state_path(&self, what: StateFile) -> PathBuf {
        let state = self.path("state");
        match what {
            // in the server's data folder (`data`, beside the config)
            StateFile::SinkState => {
                crate::foreign::state_folder_in(&self.dir, "sinks", "out").join("out.txt.sinkstate")
            }
            StateFile::LedgerStateDir => state,
            // the aggregate's state folder: `state.snapshot` and `outbox/` (the ledger's
            // outbox layout)
            StateFile::LedgerSnapshot if self.scenario.workload == Workload::Aggregate => {
                state.join("state.snapshot")
            }
            StateFile::LedgerOutbox => newest_file(&LedgerState::outbox_path(&state))
                .unwrap_or_else(|| LedgerState::outbox_path(&state).join("missing")),
            StateFile::LedgerSnapshot => LedgerState::path(&state),
            StateFile::Pointer => {
                let mut name = self.streams[0]
                    .live
                    .file_name()
                    .unwrap_or_default()
                    .to_os_string();
                name.push(".readPointer");
                crate::foreign::state_folder_in(&self.dir, "feeds", "lines").join(name)
            }
            StateFile::Lanes => {
                crate::foreign::state_folder_in(&self.dir, "feeds", "lines").join("lines.lanes")
            }
            StateFile::TailerStore => self.path("in/journal/tailers/lines.tailer"),
            StateFile::ArchivePointer => self.path("in/lines.pointer"),
            StateFile::JournalExcerpt => self.path("in/journal"),
        }
    }

    /// Appends `lines` new lines to `stream`: to its live file, or through its writer
    /// process (journal appender, archive publisher).
    ///
    /// # Errors
    /// The input could not be written (the harness cannot go on).
    pub fn append(&mut self, stream: u32, lines: u32, pad: Option<u32>) -> Result<(), String> {
        let stream = stream.min(self.streams.len() as u32 - 1);
        let range = self.truth.new_lines(stream, lines, pad);
        let text = self.truth.text_of(range.clone());
        let files = &mut self.streams[stream as usize];
        let live = files.live.clone();
        match files.files.last_mut() {
            Some(file) if file.path == live => file.lines.extend(range.clone()),
            _ => files.files.push(InputFile {
                path: live.clone(),
                lines: range.clone().collect(),
            }),
        }
        match self.scenario.source {
            SourceKind::File | SourceKind::Glob => {
                let mut file = OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&live)
                    .map_err(|error| format!("cannot open {}: {error}", live.display()))?;
                file.write_all(text.as_bytes())
                    .map_err(|error| format!("cannot append to {}: {error}", live.display()))?;
            }
            SourceKind::Journal => {
                if let Err(error) = self.write_through(PeerKind::Appender, text.as_bytes()) {
                    // an appender that refuses the journal (a damaged one) takes nothing
                    self.event(format!("the appender did not take the lines: {error}"));
                    if let Some(mut appender) = self.peers.remove(&PeerKind::Appender) {
                        appender.kill();
                    }
                    self.reconcile_journal()?;
                }
            }
            SourceKind::ArchiveIpc | SourceKind::ArchiveUdp => {
                self.write_through(PeerKind::Publisher, text.as_bytes())?
            }
            SourceKind::Kafka => self.produce(stream, &text)?,
        }
        self.event(format!(
            "appended {lines} lines to stream {stream} ({} written in all)",
            self.truth.lines.len()
        ));
        Ok(())
    }

    /// Writes `bytes` to a writer peer's standard input, (re)starting it first.
    fn write_through(&mut self, peer: PeerKind, bytes: &[u8]) -> Result<(), String> {
        self.start_peer(peer)?;
        let result = self
            .peers
            .get_mut(&peer)
            .map(|process| process.write_stdin(bytes));
        match result {
            Some(Ok(())) => Ok(()),
            Some(Err(error)) => Err(format!("cannot write to the {peer:?}: {error}")),
            None => Err(format!("the {peer:?} is not running")),
        }
    }

    /// Ends the input writers (their standard input closed) and waits for each to
    /// exit: everything appended is then in the journal or recorded by the archiver.
    pub fn close_writers(&mut self) {
        for peer in [PeerKind::Appender, PeerKind::Publisher] {
            if let Some(mut process) = self.peers.remove(&peer) {
                process.resume();
                process.close_stdin();
                match process.wait_for(Duration::from_secs(90)) {
                    Some(status) if status.success() => {
                        self.event(format!("{peer:?} finished its input"));
                    }
                    Some(status) => {
                        self.event(format!("{peer:?} ended with {status}"));
                        if peer == PeerKind::Appender {
                            self.appender_refused();
                        }
                    }
                    None => {
                        process.kill();
                        self.fail(
                            FailureKind::Harness,
                            format!("the {peer:?} did not finish its input in 90 s"),
                        );
                    }
                }
            }
        }
    }

    /// The gaps the UDP publisher answered "lost" (0 without one).
    pub fn udp_gaps(&self) -> u64 {
        std::fs::read_to_string(self.path("peers/udp-gaps"))
            .ok()
            .and_then(|text| text.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Unmounts the small file systems (also done when the world is dropped).
    pub fn unmount(&mut self) {
        self.tmpfs.clear();
    }
}

impl Drop for World {
    fn drop(&mut self) {
        if let Some(mut server) = self.server.take() {
            server.kill();
        }
        self.peers.clear();
        self.tmpfs.clear();
    }
}

/// The path new lines of `stream` go to.
fn live_path(dir: &Path, source: SourceKind, stream: u32) -> PathBuf {
    match source {
        SourceKind::File => dir.join("in/input.log"),
        SourceKind::Glob => dir.join(format!("in/logs/s{stream}.log")),
        SourceKind::Journal => dir.join("in/journal"),
        SourceKind::ArchiveIpc | SourceKind::ArchiveUdp => dir.join("in/archive"),
        // a partition of the input topic (no file: the name is the partition's)
        SourceKind::Kafka => dir.join(format!("in/kafka-{stream}")),
    }
}

fn mount(dir: &Path, kib: u32) -> Result<Tmpfs, String> {
    std::panic::catch_unwind(|| Tmpfs::mount_at(dir, &format!("{kib}k")))
        .map_err(|_| format!("cannot mount a tmpfs on {} (needs root)", dir.display()))
}

/// Unmounts whatever an earlier run left mounted below `dir` (a killed harness).
fn unmount_below(dir: &Path) {
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mounts") else {
        return;
    };
    let prefix = dir.to_string_lossy().into_owned();
    for line in mounts.lines() {
        if let Some(point) = line.split_whitespace().nth(1) {
            if point.starts_with(&prefix) {
                let _ = Command::new("umount").arg("-l").arg(point).status();
            }
        }
    }
}

/// The file of `dir` whose name sorts last.
fn newest_file(dir: &Path) -> Option<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    files.pop()
}

fn wait_listening(port: u16, patience: Duration) -> Result<(), ()> {
    let deadline = Instant::now() + patience;
    while Instant::now() < deadline {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Err(())
}
