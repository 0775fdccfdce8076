//! The two sides as processes: building the Kafka Streams peer with Maven, the
//! configuration of ours, starting, measuring and stopping instances.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Which side a run measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Side {
    /// The `mongoose` binary with the ledger (`state = "changelog"`).
    Ours,
    /// The Kafka Streams peer (`peers/kafka-streams`).
    Theirs,
}

impl Side {
    /// Its name in the report.
    pub(super) fn name(self) -> &'static str {
        match self {
            Side::Ours => "mongoose",
            Side::Theirs => "kafka-streams",
        }
    }
}

/// What a side's instances are started from.
#[derive(Clone, Debug)]
pub(super) struct Programs {
    /// The release `mongoose` binary.
    pub(super) mongoose: PathBuf,
    /// `libkafka_plugin.so`.
    pub(super) kafka_plugin: PathBuf,
    /// The JVM.
    pub(super) java: PathBuf,
    /// The peer's classpath (its jar and its dependencies).
    pub(super) classpath: String,
}

/// The peer's source folder in the checkout.
fn peer_dir(root: &Path) -> PathBuf {
    root.join("peers").join("kafka-streams")
}

/// A fingerprint (FNV-1a, 64 bits) of the peer's pom and sources: the build is reused
/// while it is the same.
fn fingerprint(dir: &Path) -> u64 {
    fn walk(path: &Path, files: &mut Vec<PathBuf>) {
        if path.is_dir() {
            if let Ok(entries) = fs::read_dir(path) {
                for entry in entries.flatten() {
                    walk(&entry.path(), files);
                }
            }
        } else {
            files.push(path.to_path_buf());
        }
    }
    let mut files = vec![dir.join("pom.xml")];
    walk(&dir.join("src"), &mut files);
    files.sort();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for file in files {
        let bytes = file.display().to_string().into_bytes();
        for byte in bytes
            .iter()
            .chain(&fs::read(&file).unwrap_or_default())
            .copied()
        {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    hash
}

/// Builds the peer with Maven into `target/kafka-streams-peer` when its pom or sources
/// changed (offline when the local repository already holds what it needs, online the
/// first time), and returns its classpath: its jar and the jars Maven copied to `lib/`.
pub(super) fn build_peer(root: &Path) -> Result<String, String> {
    let dir = peer_dir(root);
    let build = root.join("target").join("kafka-streams-peer");
    let stamp = build.join("fingerprint");
    let wanted = format!("{:016x}", fingerprint(&dir));
    let jar = build.join("ledger-kafka-streams-1.jar");
    let fresh = fs::read_to_string(&stamp).is_ok_and(|saved| saved.trim() == wanted);
    if !(fresh && jar.is_file()) {
        let repository = mongoose_testkit::kafka::cache_root().join("m2");
        let maven = |offline: bool| {
            let mut command = Command::new("mvn");
            command
                .args(["-B", "-q", "-Dstyle.color=never", "-f"])
                .arg(dir.join("pom.xml"))
                .arg(format!("-Dmaven.repo.local={}", repository.display()))
                .arg(format!("-Dpeer.build={}", build.display()));
            if offline {
                command.arg("-o");
            }
            crate::run(command.args(["clean", "package"]))
        };
        let started = Instant::now();
        if !maven(true) {
            eprintln!(
                "mongoose-bench: the peer's dependencies are not all in {} yet: resolving them with Maven (about a minute and 130 MB the first time)",
                repository.display()
            );
            if !maven(false) {
                return Err(format!(
                    "Maven could not build {} (Java 17 and Maven are needed; see the output above)",
                    dir.display()
                ));
            }
        }
        eprintln!(
            "mongoose-bench: the Kafka Streams peer built in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        fs::write(&stamp, &wanted)
            .map_err(|error| format!("cannot write {}: {error}", stamp.display()))?;
    }
    let mut jars: Vec<PathBuf> = fs::read_dir(build.join("lib"))
        .map_err(|error| format!("cannot list {}/lib: {error}", build.display()))?
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "jar"))
        .collect();
    jars.sort();
    jars.insert(0, jar);
    Ok(jars
        .iter()
        .map(|jar| jar.display().to_string())
        .collect::<Vec<_>>()
        .join(":"))
}

/// Where one side's run keeps its topics and group.
#[derive(Clone, Debug)]
pub(super) struct Names {
    /// The input topic.
    pub(super) input: String,
    /// The alerts topic.
    pub(super) alerts: String,
    /// The consumer group (ours) or application id (theirs).
    pub(super) group: String,
}

/// The configuration of one of our instances: the ledger with its state in the
/// changelog (`<group>-ledger-changelog`) on a Kafka feed, its alerts to the alerts topic
/// in the changelog's transactions (exactly once, as theirs under `exactly_once_v2`); the
/// shapes of `mongoose/examples/scale_out_bench.rs`.
pub(super) fn our_config(brokers: &str, names: &Names) -> String {
    format!(
        r#"plugin_dir = "plugins"

[[feeds]]
name = "lines"
source = "kafka"
codec = "line"
queue_capacity = 65536
settings = {{ brokers = "{brokers}", group = "{group}", topic = "{input}", session_timeout_ms = 6000 }}

[[groups]]
name = "ledger"
idle_strategy = "sleeping-millis:1"

[[groups.processors]]
name = "ledger"
kind = "ledger"
settings = {{ state_dir = "state", alerts_topic = "{alerts}", state = "changelog" }}
"#,
        group = names.group,
        input = names.input,
        alerts = names.alerts,
    )
}

/// Ours' changelog topic.
pub(super) fn our_changelog(names: &Names) -> String {
    format!("{}-ledger-changelog", names.group)
}

/// Theirs' store changelog topic.
pub(super) fn their_changelog(names: &Names) -> String {
    format!("{}-balances-changelog", names.group)
}

/// A running instance.
#[derive(Debug)]
pub(super) struct Instance {
    child: Child,
    /// Its folder (config, state, log).
    pub(super) dir: PathBuf,
}

impl Instance {
    /// Starts instance `index` of `side` in `work/<index>`.
    pub(super) fn start(
        side: Side,
        programs: &Programs,
        brokers: &str,
        names: &Names,
        work: &Path,
        index: usize,
    ) -> Result<Instance, String> {
        let dir = work.join(format!("{}-{index}", side.name()));
        let io = |error: std::io::Error| format!("{}: {error}", dir.display());
        fs::create_dir_all(dir.join("plugins")).map_err(io)?;
        let log = fs::File::create(dir.join("instance.log")).map_err(io)?;
        let mut command = match side {
            Side::Ours => {
                let plugin = dir.join("plugins").join("libkafka_plugin.so");
                fs::copy(&programs.kafka_plugin, plugin).map_err(io)?;
                fs::write(dir.join("mongoose.toml"), our_config(brokers, names)).map_err(io)?;
                let mut command = Command::new(&programs.mongoose);
                command
                    .args(["run", "--config"])
                    .arg(dir.join("mongoose.toml"))
                    .env("RUST_LOG", "warn");
                command
            }
            Side::Theirs => {
                let mut command = Command::new(&programs.java);
                if let Ok(options) = std::env::var("VERSUS_JAVA_OPTS") {
                    command.args(options.split_whitespace());
                }
                command
                    .arg("-Dorg.slf4j.simpleLogger.defaultLogLevel=warn")
                    .arg("-cp")
                    .arg(&programs.classpath)
                    .arg("dev.mongoose.peer.LedgerStreams")
                    .args(["--brokers", brokers, "--app-id", &names.group])
                    .args(["--input", &names.input, "--alerts", &names.alerts])
                    .arg("--state-dir")
                    .arg(dir.join("state"));
                command
            }
        };
        let child = command
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone().map_err(io)?))
            .stderr(Stdio::from(log))
            .spawn()
            .map_err(|error| format!("cannot start {command:?}: {error}"))?;
        Ok(Instance { child, dir })
    }

    /// `Err` with the end of its log when it exited.
    pub(super) fn alive(&mut self) -> Result<(), String> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(format!(
                "an instance exited ({status}); its log {}:\n{}",
                self.dir.join("instance.log").display(),
                self.log_tail()
            )),
            Err(error) => Err(format!("cannot wait for an instance: {error}")),
        }
    }

    /// The last lines of its log.
    pub(super) fn log_tail(&self) -> String {
        let text = fs::read_to_string(self.dir.join("instance.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Its peak resident set so far, in KiB (`VmHWM` of `/proc/<pid>/status`).
    pub(super) fn peak_rss_kib(&self) -> Option<u64> {
        let status = fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmHWM:"))
            .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
    }

    /// The CPU time it used so far (user + system), in seconds (`/proc/<pid>/stat`).
    pub(super) fn cpu_seconds(&self) -> Option<f64> {
        let stat = fs::read_to_string(format!("/proc/{}/stat", self.child.id())).ok()?;
        // after the command's name (in parentheses, may hold spaces): state is field 3,
        // utime and stime fields 14 and 15
        let (_, fields) = stat.rsplit_once(')')?;
        let fields: Vec<&str> = fields.split_whitespace().collect();
        let utime: u64 = fields.get(11)?.parse().ok()?;
        let stime: u64 = fields.get(12)?.parse().ok()?;
        // SAFETY: sysconf reads a constant of the system; no memory is shared.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        (ticks > 0).then(|| (utime + stime) as f64 / ticks as f64)
    }

    /// Sends `signal` (SIGSTOP, SIGCONT) to the instance.
    pub(super) fn signal(&self, signal: libc::c_int) {
        // SAFETY: signals a child this process started and has not reaped; no memory is
        // shared.
        unsafe {
            libc::kill(self.child.id() as i32, signal);
        }
    }

    /// SIGTERM, then SIGKILL after 30 s; its exit status.
    pub(super) fn stop(mut self) -> Result<ExitStatus, String> {
        let pid = self.child.id() as i32;
        // SAFETY: signals a child this process started and has not reaped; no memory is
        // shared.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return Ok(status),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Ok(None) => {
                    let _ = self.child.kill();
                    let status = self.child.wait().map_err(|error| error.to_string())?;
                    return Err(format!(
                        "did not stop within 30 s of SIGTERM: killed ({status}); log {}",
                        self.dir.join("instance.log").display()
                    ));
                }
                Err(error) => return Err(format!("cannot wait for an instance: {error}")),
            }
        }
    }
}
