//! `cargo xtask broker start [--brokers 1|3] [--port P] | stop | status`: the Apache Kafka
//! broker (4.x, KRaft mode, from its jars) that the Kafka connector's tests run against.
//!
//! * `start` asks Maven for the runtime classpath of the broker artifact that
//!   `xtask/kafka/pom.xml` names (`mvn dependency:build-classpath` into a local repository
//!   in the cache folder; about 45 s and 65 MB the first time, nothing at all later: the
//!   classpath is kept beside a copy of the pom and reused while the pom is unchanged).
//!   It then formats fresh KRaft storage for each node in `target/kafka/<node>/data`
//!   (`kafka.tools.StorageTool format`, a new cluster id each start: the broker starts
//!   empty, as the tests expect) and starts one combined broker+controller per node
//!   (`java -cp ... kafka.Kafka server.properties`, heap at most 512 MB) in its own
//!   process group in the background: node 1 listens on 127.0.0.1:P (default 19092),
//!   nodes 2 and 3 on P+1 and P+2, their controllers on P+100.. (a static quorum of every
//!   node). Each node's output goes to `target/kafka/<node>/broker.log`, its pid to
//!   `target/kafka/<node>/broker.pid`. It waits until every node answers a Kafka
//!   Metadata request listing all the nodes (a TCP connect is not enough: the node
//!   accepts before the quorum has a leader), and fails with the log's tail when one
//!   does not within 120 s. A broker already running (a live pid file) is left as it is;
//!   so is one this checkout did not start that already answers on the port (the tests
//!   use it, `stop` leaves it).
//! * `stop` sends SIGTERM to every node, waits up to 20 s, then SIGKILL, and removes the
//!   pid files (the storage is formatted anew by the next `start`).
//! * `status` prints whether each node runs and answers; exits non-zero when one does
//!   not.
//!
//! The cache folder is `$MONGOOSE_KAFKA_CACHE`, else `$HOME/.cache/mongoose-kafka`: the
//! Maven repository in `m2/`, the classpath in `classpath.txt` (tests that start a broker
//! of their own read it). Java is `$JAVA_HOME/bin/java`, else `java` (17 or newer).
//!
//! A node's settings, JVM options, storage-format arguments and the Metadata probe are
//! `mongoose_testkit::kafka`'s, the same that the tests' own clusters
//! (`mongoose_testkit::kafka::Cluster`) use; what is xtask's own is the fixed ports,
//! the pid files and nodes that outlive the command.

use std::fs;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mongoose_testkit::kafka;

/// The client port of node 1 (node n listens on this + n - 1).
const FIRST_PORT: u16 = 19092;

/// A node's controller port is its client port plus this.
const CONTROLLER_OFFSET: u16 = 100;

/// How long `start` waits for every node to answer.
const START_TIMEOUT: Duration = Duration::from_secs(120);

fn state_dir(root: &Path) -> PathBuf {
    root.join("target").join("kafka")
}

fn node_dir(root: &Path, node: u16) -> PathBuf {
    state_dir(root).join(node.to_string())
}

fn pid_file(root: &Path, node: u16) -> PathBuf {
    node_dir(root, node).join("broker.pid")
}

fn log_file(root: &Path, node: u16) -> PathBuf {
    node_dir(root, node).join("broker.log")
}

/// The file naming the running cluster: its node count and first port.
fn cluster_file(root: &Path) -> PathBuf {
    state_dir(root).join("cluster")
}

/// The client address of `node` when node 1 listens on `port`.
fn address(port: u16, node: u16) -> String {
    format!("127.0.0.1:{}", port + node - 1)
}

fn alive(pid: i32) -> bool {
    // an exited process its parent has not reaped yet (a zombie) is not running
    if let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) {
        if let Some((_, after_name)) = stat.rsplit_once(')') {
            if after_name.trim_start().starts_with('Z') {
                return false;
            }
        }
    }
    // SAFETY: kill with signal 0 only checks that the process exists; no memory is shared.
    unsafe { libc::kill(pid, 0) == 0 }
}

fn signal(pid: i32, signal: i32) {
    // SAFETY: sends a signal to a broker process this checkout started; no memory is shared.
    unsafe {
        libc::kill(pid, signal);
    }
}

fn running_pid(root: &Path, node: u16) -> Option<i32> {
    let text = fs::read_to_string(pid_file(root, node)).ok()?;
    let pid: i32 = text.trim().parse().ok()?;
    alive(pid).then_some(pid)
}

/// The (node count, first port) of the cluster `start` last wrote.
fn cluster(root: &Path) -> Option<(u16, u16)> {
    let text = fs::read_to_string(cluster_file(root)).ok()?;
    let mut numbers = text.split_whitespace().map(str::parse::<u16>);
    Some((numbers.next()?.ok()?, numbers.next()?.ok()?))
}

fn log_tail(root: &Path, node: u16) -> String {
    let mut text = String::new();
    if let Ok(mut file) = fs::File::open(log_file(root, node)) {
        let _ = file.read_to_string(&mut text);
    }
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// The broker's runtime classpath, resolved with Maven the first time (and again when
/// `xtask/kafka/pom.xml` changes), from the cache after that.
fn classpath(root: &Path) -> Option<String> {
    let cache = kafka::cache_root();
    let pom = root.join("xtask").join("kafka").join("pom.xml");
    let wanted = match fs::read(&pom) {
        Ok(wanted) => wanted,
        Err(error) => {
            eprintln!("xtask: cannot read {}: {error}", pom.display());
            return None;
        }
    };
    let saved = cache.join("classpath.txt");
    let saved_pom = cache.join("pom.xml");
    if fs::read(&saved_pom).ok().as_ref() == Some(&wanted) {
        if let Ok(classpath) = fs::read_to_string(&saved) {
            let classpath = classpath.trim().to_owned();
            if !classpath.is_empty() && classpath.split(':').all(|jar| Path::new(jar).exists()) {
                return Some(classpath);
            }
        }
    }
    if let Err(error) = fs::create_dir_all(&cache) {
        eprintln!("xtask: cannot create {}: {error}", cache.display());
        return None;
    }
    eprintln!(
        "xtask: resolving Apache Kafka's jars with Maven into {} (about a minute and 65 MB the first time)",
        cache.display()
    );
    let started = Instant::now();
    let fresh = cache.join("classpath.txt.new");
    let resolved = crate::run(
        Command::new("mvn")
            .args(["-B", "-q", "-Dstyle.color=never", "-f"])
            .arg(&pom)
            .arg(format!("-Dmaven.repo.local={}", cache.join("m2").display()))
            .arg(format!("-Dmdep.outputFile={}", fresh.display()))
            .args(["-Dmdep.includeScope=runtime", "dependency:build-classpath"]),
    );
    if !resolved {
        eprintln!("xtask: Maven could not resolve {}", pom.display());
        return None;
    }
    let classpath = fs::read_to_string(&fresh).ok()?.trim().to_owned();
    if classpath.is_empty()
        || fs::rename(&fresh, &saved).is_err()
        || fs::write(&saved_pom, &wanted).is_err()
    {
        eprintln!("xtask: cannot keep the classpath in {}", saved.display());
        return None;
    }
    eprintln!(
        "xtask: Apache Kafka resolved in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Some(classpath)
}

/// The `server.properties` of `node` in a cluster of `nodes` whose node 1 listens on
/// `port` (the testkit's, which the tests' own clusters use too).
fn server_properties(root: &Path, node: u16, nodes: u16, port: u16) -> String {
    let voters: Vec<String> = (1..=nodes)
        .map(|voter| format!("{voter}@127.0.0.1:{}", port + voter - 1 + CONTROLLER_OFFSET))
        .collect();
    let client = address(port, node);
    let controller = format!("127.0.0.1:{}", port + node - 1 + CONTROLLER_OFFSET);
    let data = node_dir(root, node).join("data");
    let properties = kafka::server_properties(&kafka::NodeSettings {
        node,
        nodes,
        voters: &voters.join(","),
        client: &client,
        controller: &controller,
        listeners: &[],
        data: &data,
        extra: &[],
    });
    format!("# written by `cargo xtask broker start`\n{properties}")
}

/// Writes each node's configuration and formats its storage (the nodes in parallel).
fn format(root: &Path, classpath: &str, nodes: u16, port: u16) -> bool {
    let id = kafka::cluster_id();
    let mut formatting: Vec<(u16, Child)> = Vec::new();
    for node in 1..=nodes {
        let dir = node_dir(root, node);
        let _ = fs::remove_dir_all(&dir);
        let written = fs::create_dir_all(&dir)
            .and_then(|()| {
                fs::write(
                    dir.join("server.properties"),
                    server_properties(root, node, nodes, port),
                )
            })
            .and_then(|()| fs::write(dir.join("log4j2.properties"), kafka::LOG4J2));
        let Some((log, log_err)) = written
            .and_then(|()| fs::File::create(log_file(root, node)))
            .and_then(|log| Ok((log.try_clone()?, log)))
            .ok()
        else {
            eprintln!("xtask: cannot prepare {}", dir.display());
            return false;
        };
        let child = Command::new(kafka::java())
            .args(kafka::TOOL_JVM)
            .arg("-cp")
            .arg(classpath)
            .arg(log4j_option(root, node))
            .args(kafka::format_arguments(&id, &[]))
            .arg(dir.join("server.properties"))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn();
        match child {
            Ok(child) => formatting.push((node, child)),
            Err(error) => {
                eprintln!("xtask: cannot start {}: {error}", kafka::java().display());
                return false;
            }
        }
    }
    let mut formatted = true;
    for (node, mut child) in formatting {
        if !child.wait().is_ok_and(|status| status.success()) {
            eprintln!(
                "xtask: formatting node {node}'s storage failed ({}):\n{}",
                log_file(root, node).display(),
                log_tail(root, node)
            );
            formatted = false;
        }
    }
    formatted
}

fn log4j_option(root: &Path, node: u16) -> String {
    format!(
        "-Dlog4j2.configurationFile={}",
        node_dir(root, node).join("log4j2.properties").display()
    )
}

/// Starts `node` in its own process group and writes its pid file.
fn spawn_node(root: &Path, classpath: &str, node: u16) -> Option<i32> {
    let Some((log, log_err)) = fs::OpenOptions::new()
        .append(true)
        .open(log_file(root, node))
        .and_then(|log| Ok((log.try_clone()?, log)))
        .ok()
    else {
        eprintln!("xtask: cannot open {}", log_file(root, node).display());
        return None;
    };
    let mut command = Command::new(kafka::java());
    command
        .args(kafka::BROKER_JVM)
        .arg("-cp")
        .arg(classpath)
        .arg(log4j_option(root, node))
        .arg("kafka.Kafka")
        .arg(node_dir(root, node).join("server.properties"))
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        // its own process group: a Ctrl-C at the terminal that started it does not stop it
        .process_group(0);
    let child = match command.spawn() {
        Ok(child) => child,
        Err(error) => {
            eprintln!("xtask: cannot start {}: {error}", kafka::java().display());
            return None;
        }
    };
    let pid = child.id() as i32;
    // the child is not waited for: it runs on after xtask exits (reparented to init)
    std::mem::forget(child);
    if let Err(error) = fs::write(pid_file(root, node), format!("{pid}\n")) {
        eprintln!("xtask: cannot write the pid file: {error}");
        signal(pid, libc::SIGKILL);
        return None;
    }
    Some(pid)
}

/// Waits until every node answers a Metadata request listing all `nodes`.
fn wait_answering(root: &Path, nodes: u16, port: u16, pids: &[i32]) -> bool {
    let deadline = Instant::now() + START_TIMEOUT;
    for node in 1..=nodes {
        let node_address = address(port, node);
        while kafka::metadata_brokers(&node_address) != Some(usize::from(nodes)) {
            let pid = pids[usize::from(node - 1)];
            if !alive(pid) || Instant::now() > deadline {
                eprintln!(
                    "xtask: node {node} did not answer a Kafka Metadata request listing {nodes} broker(s) on {node_address} within {} s{} (its log, {}):\n{}",
                    START_TIMEOUT.as_secs(),
                    if alive(pid) { "" } else { ": it exited" },
                    log_file(root, node).display(),
                    log_tail(root, node)
                );
                return false;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    true
}

fn start(root: &Path, nodes: u16, port: u16) -> bool {
    if let Some((running, running_port)) = cluster(root) {
        let pids: Vec<i32> = (1..=running)
            .filter_map(|node| running_pid(root, node))
            .collect();
        if !pids.is_empty() {
            eprintln!(
                "xtask: the broker already runs ({running} node(s) from {}, pids {pids:?}){}",
                address(running_port, 1),
                if running == nodes && running_port == port {
                    ""
                } else {
                    ": stop it first to start another shape"
                }
            );
            return running == nodes && running_port == port;
        }
    }
    let first = address(port, 1);
    if kafka::metadata_brokers(&first).is_some() {
        // not ours (no pid file): used as it is, and `stop` leaves it running
        eprintln!(
            "xtask: a broker this checkout did not start already answers on {first}: the tests use it (stop it yourself to run them on a fresh one)"
        );
        return true;
    }
    let started = Instant::now();
    let Some(classpath) = classpath(root) else {
        return false;
    };
    let resolved = started.elapsed();
    if let Err(error) = fs::create_dir_all(state_dir(root)) {
        eprintln!(
            "xtask: cannot create {}: {error}",
            state_dir(root).display()
        );
        return false;
    }
    for node in 1..=3 {
        let _ = fs::remove_dir_all(node_dir(root, node));
    }
    if !format(root, &classpath, nodes, port) {
        return false;
    }
    if let Err(error) = fs::write(cluster_file(root), format!("{nodes} {port}\n")) {
        eprintln!(
            "xtask: cannot write {}: {error}",
            cluster_file(root).display()
        );
        return false;
    }
    let mut pids = Vec::new();
    for node in 1..=nodes {
        match spawn_node(root, &classpath, node) {
            Some(pid) => pids.push(pid),
            None => {
                stop(root);
                return false;
            }
        }
    }
    if !wait_answering(root, nodes, port, &pids) {
        stop(root);
        return false;
    }
    eprintln!(
        "xtask: Apache Kafka started: {nodes} node(s) on {} (pids {pids:?}) in {:.1} s ({:.1} s of it resolving the jars); logs in {}/<node>/broker.log",
        (1..=nodes)
            .map(|node| address(port, node))
            .collect::<Vec<_>>()
            .join(","),
        started.elapsed().as_secs_f64(),
        resolved.as_secs_f64(),
        state_dir(root).display()
    );
    true
}

fn stop(root: &Path) -> bool {
    let nodes = cluster(root).map_or(3, |(nodes, _)| nodes);
    let pids: Vec<(u16, i32)> = (1..=nodes)
        .filter_map(|node| running_pid(root, node).map(|pid| (node, pid)))
        .collect();
    if pids.is_empty() {
        eprintln!(
            "xtask: no broker runs (no live pid in {}/<node>/broker.pid)",
            state_dir(root).display()
        );
    }
    for &(_, pid) in &pids {
        // a stopped node must be continued to act on a signal
        signal(pid, libc::SIGCONT);
        signal(pid, libc::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while pids.iter().any(|&(_, pid)| alive(pid)) && Instant::now() < deadline {
        for &(_, pid) in &pids {
            reap(pid);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    for &(node, pid) in &pids {
        if alive(pid) {
            eprintln!("xtask: node {node} (pid {pid}) did not stop on SIGTERM in 20 s: SIGKILL");
            signal(pid, libc::SIGKILL);
        }
        eprintln!("xtask: node {node} stopped (pid {pid})");
    }
    for node in 1..=nodes {
        let _ = fs::remove_file(pid_file(root, node));
    }
    let _ = fs::remove_file(cluster_file(root));
    true
}

/// Reaps `pid` if it is our own exited child (it is not, when another xtask started it).
fn reap(pid: i32) {
    let mut status = 0;
    // SAFETY: waitpid with WNOHANG on a pid; the status is a local integer.
    unsafe {
        libc::waitpid(pid, &mut status, libc::WNOHANG);
    }
}

fn status(root: &Path) -> bool {
    let Some((nodes, port)) = cluster(root) else {
        println!("broker not running");
        return false;
    };
    let mut healthy = true;
    for node in 1..=nodes {
        let node_address = address(port, node);
        match running_pid(root, node) {
            Some(pid) => {
                let answer = kafka::metadata_brokers(&node_address);
                println!(
                    "broker node {node} running: pid {pid}, {node_address} {}",
                    match answer {
                        Some(brokers) => format!("answers ({brokers} broker(s) listed)"),
                        None => "does not answer".to_owned(),
                    }
                );
                healthy &= answer.is_some();
            }
            None => {
                println!("broker node {node} ({node_address}) not running");
                healthy = false;
            }
        }
    }
    healthy
}

/// What `cargo xtask broker` does.
#[derive(Debug, PartialEq, Eq, clap::Subcommand)]
pub(crate) enum BrokerAction {
    /// Starts the broker in the background (fresh storage; a broker already running is
    /// left as it is) and waits until every node answers a Metadata request.
    Start {
        /// Nodes, each a combined broker and controller: 1 or 3.
        #[arg(long, default_value_t = 1, value_parser = node_count)]
        brokers: u16,
        /// Node 1's client port (node n listens on P + n - 1).
        #[arg(long, default_value_t = FIRST_PORT, value_parser = clap::value_parser!(u16).range(1024..60000))]
        port: u16,
    },
    /// Stops the nodes this checkout started (SIGTERM, then SIGKILL after 20 s).
    Stop,
    /// Prints whether each node runs and answers; fails when one does not.
    Status,
}

/// `--brokers`' value: 1 or 3 (a quorum of two has no majority to spare).
fn node_count(text: &str) -> Result<u16, String> {
    match text {
        "1" => Ok(1),
        "3" => Ok(3),
        _ => Err(format!("wants 1 or 3 nodes, not {text}")),
    }
}

/// Runs `cargo xtask broker ACTION`.
pub(crate) fn broker(root: &Path, action: &BrokerAction) -> bool {
    match *action {
        BrokerAction::Start { brokers, port } => start(root, brokers, port),
        BrokerAction::Stop => stop(root),
        BrokerAction::Status => status(root),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_nodes_form_one_quorum_on_consecutive_ports() {
        let properties = server_properties(Path::new("/r"), 2, 3, 19092);
        assert!(properties.contains("node.id=2\n"));
        assert!(properties
            .contains("listeners=PLAINTEXT://127.0.0.1:19093,CONTROLLER://127.0.0.1:19193\n"));
        assert!(properties.contains(
            "controller.quorum.voters=1@127.0.0.1:19192,2@127.0.0.1:19193,3@127.0.0.1:19194\n"
        ));
        assert!(properties.contains("transaction.state.log.min.isr=2\n"));
        assert!(properties.contains("log.dirs=/r/target/kafka/2/data\n"));
    }

    #[test]
    fn start_takes_brokers_1_or_3_and_a_port() {
        use clap::Parser;
        let action = |line: &str| {
            crate::Cli::try_parse_from(line.split_whitespace()).map(|cli| match cli.task {
                crate::Task::Broker { action } => action,
                other => panic!("{line} parsed as {other:?}"),
            })
        };
        assert_eq!(
            action("xtask broker start").ok(),
            Some(BrokerAction::Start {
                brokers: 1,
                port: 19092
            })
        );
        assert_eq!(
            action("xtask broker start --brokers 3 --port 29092").ok(),
            Some(BrokerAction::Start {
                brokers: 3,
                port: 29092
            })
        );
        assert_eq!(action("xtask broker stop").ok(), Some(BrokerAction::Stop));
        for wrong in [
            "xtask broker start --brokers 2",
            "xtask broker start --brokers",
            "xtask broker start --port 80",
            "xtask broker stop now",
            "xtask broker",
        ] {
            assert!(action(wrong).is_err(), "{wrong} must be refused");
        }
    }
}
