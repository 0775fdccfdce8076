//! Apache Kafka brokers of a test's own: a [`Cluster`] of 1 or 3 combined KRaft nodes
//! (broker and controller in one JVM) started from the jars `cargo xtask broker start`
//! resolved (`classpath.txt` in its cache folder), on free loopback ports, in a
//! temporary folder. A test can SIGKILL one node and start it again, give extra broker
//! properties, listeners (a `SASL_SSL` one, say) and storage-format arguments (SCRAM
//! credentials), and the nodes are killed when the cluster is dropped.
//!
//! The building blocks (the node's `server.properties`, the JVM options, the storage
//! tool's arguments, the Metadata probe that tells a node answers) are public: `cargo
//! xtask broker` starts the shared test broker with the same ones.
//!
//! # Example
//!
//! ```no_run
//! use mongoose_testkit::kafka::Cluster;
//!
//! // three nodes, topics replicated three times, a batch acknowledged by two of them
//! let mut cluster = Cluster::builder(3)
//!     .property("min.insync.replicas", "2")
//!     .start()
//!     .expect("Apache Kafka's jars are resolved: `cargo xtask broker start`");
//! let brokers = cluster.bootstrap(); // "127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3"
//! cluster.kill(2); // SIGKILL node 2
//! cluster.restart(2); // the same node, its storage kept, answering again
//! # let _ = brokers;
//! ```

use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The JVM options of a broker node: a small heap (2 cores and the tests share the
/// machine) and the serial collector (fewer threads).
pub const BROKER_JVM: &[&str] = &["-Xms128m", "-Xmx512m", "-XX:+UseSerialGC"];

/// The JVM options of the storage tool, a short-lived process: the quick compiler only.
pub const TOOL_JVM: &[&str] = &["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"];

/// The `log4j2.properties` of a node: INFO from the broker itself, warnings from the
/// libraries.
pub const LOG4J2: &str = "status = error
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = out
logger.clients.name = org.apache.kafka.clients
logger.clients.level = WARN
logger.state.name = state.change.logger
logger.state.level = WARN
";

/// How long a start (or a restarted node) may take to answer.
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// The cache folder of `cargo xtask broker`: `$MONGOOSE_KAFKA_CACHE`, else
/// `$HOME/.cache/mongoose-kafka` (the Maven repository in `m2/`, the broker's classpath
/// in `classpath.txt`).
pub fn cache_root() -> PathBuf {
    if let Some(root) = std::env::var_os("MONGOOSE_KAFKA_CACHE") {
        return PathBuf::from(root);
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from);
    home.join(".cache").join("mongoose-kafka")
}

/// Java: `$JAVA_HOME/bin/java`, else `java` from the `PATH`.
pub fn java() -> PathBuf {
    std::env::var_os("JAVA_HOME").map_or_else(
        || PathBuf::from("java"),
        |home| PathBuf::from(home).join("bin").join("java"),
    )
}

/// The broker's classpath that `cargo xtask broker start` resolved, when every jar of
/// it is there (`None`: run `cargo xtask broker start` once).
pub fn cached_classpath() -> Option<String> {
    let classpath = fs::read_to_string(cache_root().join("classpath.txt")).ok()?;
    let classpath = classpath.trim().to_owned();
    (!classpath.is_empty() && classpath.split(':').all(|jar| Path::new(jar).exists()))
        .then_some(classpath)
}

/// A new KRaft cluster id: 16 random bytes in URL-safe base64 without padding.
pub fn cluster_id() -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut bytes = [0u8; 16];
    if let Ok(mut random) = fs::File::open("/dev/urandom") {
        let _ = random.read_exact(&mut bytes);
    }
    let bits = u128::from_be_bytes(bytes);
    // 22 characters of 6 bits hold 132 bits: the 128 bits followed by 4 zero bits
    let mut id = String::with_capacity(22);
    for index in 0..22u32 {
        let shift = 128i32 - 6 * (index as i32 + 1);
        let sextet = if shift >= 0 {
            (bits >> shift) & 0x3f
        } else {
            (bits << -shift) & 0x3f
        };
        id.push(ALPHABET[sextet as usize] as char);
    }
    id
}

/// The storage tool's arguments before the configuration file's path (`extra`, such
/// as `--add-scram`, go before `-c`).
pub fn format_arguments(id: &str, extra: &[String]) -> Vec<String> {
    let mut arguments = vec![
        "kafka.tools.StorageTool".to_owned(),
        "format".to_owned(),
        // `=`: an id may start with `-`, which would read as an option otherwise
        format!("--cluster-id={id}"),
    ];
    arguments.extend(extra.iter().cloned());
    arguments.push("-c".to_owned());
    arguments
}

/// What one node's `server.properties` says.
#[derive(Clone, Debug)]
pub struct NodeSettings<'a> {
    /// Its node id (1, 2, 3).
    pub node: u16,
    /// The number of nodes (every one a voter of the quorum).
    pub nodes: u16,
    /// `id@host:port` of every voter, comma-separated.
    pub voters: &'a str,
    /// Its client (PLAINTEXT, inter-broker) address.
    pub client: &'a str,
    /// Its controller address.
    pub controller: &'a str,
    /// More listeners: `(name, security protocol, address)`.
    pub listeners: &'a [(String, String, String)],
    /// Its storage folder.
    pub data: &'a Path,
    /// More properties, after the defaults (a later key wins in Java's properties).
    pub extra: &'a [(String, String)],
}

/// A node's `server.properties`: a combined broker and controller, the internal topics
/// replicated as far as the node count allows, few threads (2 cores are shared by the
/// nodes, the tests and the build), then `settings.extra`.
pub fn server_properties(settings: &NodeSettings<'_>) -> String {
    let NodeSettings {
        node,
        nodes,
        voters,
        client,
        controller,
        listeners,
        data,
        extra,
    } = settings;
    let replicas = (*nodes).min(3);
    let min_isr = (*nodes).min(2);
    let mut all_listeners = format!("PLAINTEXT://{client},CONTROLLER://{controller}");
    let mut advertised = format!("PLAINTEXT://{client}");
    let mut protocols = "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT".to_owned();
    for (name, protocol, address) in listeners.iter() {
        all_listeners.push_str(&format!(",{name}://{address}"));
        advertised.push_str(&format!(",{name}://{address}"));
        protocols.push_str(&format!(",{name}:{protocol}"));
    }
    let mut text = format!(
        "# node {node} of {nodes}
process.roles=broker,controller
node.id={node}
listeners={all_listeners}
advertised.listeners={advertised}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map={protocols}
controller.quorum.voters={voters}
log.dirs={data}
# topics a client names before they exist are created, with one partition (tests that
# need more create their topics first)
auto.create.topics.enable=true
num.partitions=1
default.replication.factor={replicas}
# the internal topics fit the node count; fewer partitions than the defaults (50) keep
# the first group and the first transaction quick on 2 cores
offsets.topic.replication.factor={replicas}
offsets.topic.num.partitions=10
transaction.state.log.replication.factor={replicas}
transaction.state.log.min.isr={min_isr}
transaction.state.log.num.partitions=10
share.coordinator.state.topic.replication.factor={replicas}
share.coordinator.state.topic.min.isr={min_isr}
# a group rebalances as soon as a member joins; the tests use short session timeouts
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=1000
# few threads: 2 cores are shared by the nodes, the tests and the build
num.network.threads=2
num.io.threads=2
background.threads=2
num.replica.fetchers=1
num.recovery.threads.per.data.dir=1
log.cleaner.threads=1
",
        data = data.display(),
    );
    for (key, value) in extra.iter() {
        text.push_str(&format!("{key}={value}\n"));
    }
    text
}

fn put_string(request: &mut Vec<u8>, text: &str) {
    request.extend_from_slice(&(text.len() as i16).to_be_bytes());
    request.extend_from_slice(text.as_bytes());
}

/// Sends a Kafka Metadata request (v4, no topics) to `address` (a PLAINTEXT listener)
/// and returns the number of brokers its answer lists, `None` when it does not answer
/// one. A TCP connect is not enough: a node accepts before its quorum has a leader.
pub fn metadata_brokers(address: &str) -> Option<usize> {
    let address: SocketAddr = address.parse().ok()?;
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_millis(500)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream
        .set_write_timeout(Some(Duration::from_secs(2)))
        .ok()?;
    // request header v1: api key 3 (Metadata), version 4, correlation id, client id;
    // body: an empty topic array, no auto-creation
    let mut request = Vec::new();
    request.extend_from_slice(&3i16.to_be_bytes());
    request.extend_from_slice(&4i16.to_be_bytes());
    request.extend_from_slice(&7i32.to_be_bytes());
    put_string(&mut request, "mongoose-testkit");
    request.extend_from_slice(&0i32.to_be_bytes());
    request.push(0);
    let mut framed = (request.len() as i32).to_be_bytes().to_vec();
    framed.extend_from_slice(&request);
    stream.write_all(&framed).ok()?;
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).ok()?;
    let size = i32::from_be_bytes(size);
    if !(12..1 << 20).contains(&size) {
        return None;
    }
    let mut answer = vec![0u8; size as usize];
    stream.read_exact(&mut answer).ok()?;
    // response: correlation id, throttle time, then the broker array's length
    let correlation = i32::from_be_bytes(answer[0..4].try_into().ok()?);
    let brokers = i32::from_be_bytes(answer[8..12].try_into().ok()?);
    (correlation == 7 && brokers >= 0).then_some(brokers as usize)
}

/// The last `lines` lines of the file at `path` (empty when it cannot be read).
pub fn file_tail(path: &Path, lines: usize) -> String {
    let text = fs::read(path).unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free loopback port")
}

/// How a [`Cluster`] is started: [`Cluster::builder`].
#[derive(Clone, Debug)]
pub struct ClusterBuilder {
    nodes: u16,
    properties: Vec<(String, String)>,
    listeners: Vec<(String, String)>,
    format: Vec<String>,
}

impl ClusterBuilder {
    /// Sets a broker property on every node (after the defaults: it wins).
    pub fn property(mut self, key: &str, value: &str) -> Self {
        self.properties.push((key.to_owned(), value.to_owned()));
        self
    }

    /// Adds a listener `name` (upper case, e.g. `SECURE`) with security `protocol`
    /// (`SASL_SSL`, `SSL`, `SASL_PLAINTEXT`) on a free port of each node; its
    /// settings (`listener.name.<name>.…`) are [`ClusterBuilder::property`]s. The
    /// PLAINTEXT listener stays the inter-broker one.
    pub fn listener(mut self, name: &str, protocol: &str) -> Self {
        self.listeners.push((name.to_owned(), protocol.to_owned()));
        self
    }

    /// Gives the storage tool `argument` when each node's storage is formatted (e.g.
    /// `--add-scram=SCRAM-SHA-256=[name=alice,password=secret]`).
    pub fn format_argument(mut self, argument: &str) -> Self {
        self.format.push(argument.to_owned());
        self
    }

    /// Formats each node's storage and starts the nodes, waiting until every one
    /// answers a Metadata request listing them all. `None` when Apache Kafka's jars
    /// are not resolved (`cargo xtask broker start` resolves them).
    ///
    /// # Panics
    /// When a node cannot be formatted or does not answer within 120 s (its log's tail
    /// is in the message).
    pub fn start(self) -> Option<Cluster> {
        let classpath = cached_classpath()?;
        let dir = tempfile::Builder::new()
            .prefix("kafka-cluster-")
            .tempdir()
            .expect("a temporary folder for the cluster");
        let nodes: Vec<Node> = (1..=self.nodes)
            .map(|id| Node {
                id,
                client: format!("127.0.0.1:{}", free_port()),
                controller: format!("127.0.0.1:{}", free_port()),
                listeners: self
                    .listeners
                    .iter()
                    .map(|(name, protocol)| {
                        (
                            name.clone(),
                            protocol.clone(),
                            format!("127.0.0.1:{}", free_port()),
                        )
                    })
                    .collect(),
                dir: dir.path().join(id.to_string()),
                child: None,
            })
            .collect();
        let voters: Vec<String> = nodes
            .iter()
            .map(|node| format!("{}@{}", node.id, node.controller))
            .collect();
        let voters = voters.join(",");
        let id = cluster_id();
        let mut formatting = Vec::new();
        for node in &nodes {
            fs::create_dir_all(&node.dir).expect("a node's folder");
            let properties = server_properties(&NodeSettings {
                node: node.id,
                nodes: self.nodes,
                voters: &voters,
                client: &node.client,
                controller: &node.controller,
                listeners: &node.listeners,
                data: &node.dir.join("data"),
                extra: &self.properties,
            });
            fs::write(node.dir.join("server.properties"), properties).expect("server.properties");
            fs::write(node.dir.join("log4j2.properties"), LOG4J2).expect("log4j2.properties");
            let log = node.log_file(false);
            let child = Command::new(java())
                .args(TOOL_JVM)
                .arg("-cp")
                .arg(&classpath)
                .arg(node.log4j_option())
                .args(format_arguments(&id, &self.format))
                .arg(node.dir.join("server.properties"))
                .stdin(Stdio::null())
                .stdout(log.try_clone().expect("the node's log"))
                .stderr(log)
                .spawn()
                .expect("Java runs Kafka's storage tool");
            formatting.push((node.id, child));
        }
        for (id, mut child) in formatting {
            let formatted = child.wait().is_ok_and(|status| status.success());
            let node = &nodes[usize::from(id - 1)];
            assert!(
                formatted,
                "formatting node {id}'s storage failed:\n{}",
                file_tail(&node.log_path(), 40)
            );
        }
        let mut cluster = Cluster {
            classpath,
            nodes,
            dir,
        };
        for id in 1..=cluster.nodes.len() as u16 {
            cluster.spawn(id);
        }
        for id in 1..=cluster.nodes.len() as u16 {
            cluster.wait_answering(id);
        }
        Some(cluster)
    }
}

/// One node of a [`Cluster`].
#[derive(Debug)]
struct Node {
    id: u16,
    client: String,
    controller: String,
    listeners: Vec<(String, String, String)>,
    dir: PathBuf,
    child: Option<Child>,
}

impl Node {
    fn log_path(&self) -> PathBuf {
        self.dir.join("broker.log")
    }

    fn log_file(&self, append: bool) -> fs::File {
        fs::OpenOptions::new()
            .create(true)
            .append(append)
            .write(true)
            .truncate(!append)
            .open(self.log_path())
            .expect("the node's log file")
    }

    fn log4j_option(&self) -> String {
        format!(
            "-Dlog4j2.configurationFile={}",
            self.dir.join("log4j2.properties").display()
        )
    }
}

/// Apache Kafka nodes of a test's own (see the [module](self)): started by
/// [`Cluster::builder`], every node killed (continued first) when dropped.
#[derive(Debug)]
pub struct Cluster {
    classpath: String,
    nodes: Vec<Node>,
    dir: tempfile::TempDir,
}

impl Cluster {
    /// A cluster of `nodes` (1 or 3) combined broker+controller nodes.
    ///
    /// # Panics
    /// When `nodes` is 0.
    pub fn builder(nodes: u16) -> ClusterBuilder {
        assert!(nodes > 0, "a cluster has at least one node");
        ClusterBuilder {
            nodes,
            properties: Vec::new(),
            listeners: Vec::new(),
            format: Vec::new(),
        }
    }

    /// A cluster of `nodes` nodes with the default settings ([`ClusterBuilder::start`]).
    pub fn start(nodes: u16) -> Option<Cluster> {
        Cluster::builder(nodes).start()
    }

    /// The PLAINTEXT address of every node, comma-separated (`bootstrap.servers`).
    pub fn bootstrap(&self) -> String {
        self.nodes
            .iter()
            .map(|node| node.client.clone())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The addresses of every node's listener `name`, comma-separated.
    ///
    /// # Panics
    /// When the cluster has no such listener.
    pub fn bootstrap_of(&self, name: &str) -> String {
        self.nodes
            .iter()
            .map(|node| {
                node.listeners
                    .iter()
                    .find(|(listener, _, _)| listener == name)
                    .map(|(_, _, address)| address.clone())
                    .unwrap_or_else(|| panic!("the cluster has no listener {name}"))
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The PLAINTEXT address of node `id` (1-based).
    pub fn address(&self, id: u16) -> &str {
        &self.node(id).client
    }

    /// The cluster's folder (each node's storage, properties and `broker.log` in
    /// `<folder>/<id>/`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The last 40 lines of node `id`'s log.
    pub fn log_tail(&self, id: u16) -> String {
        file_tail(&self.node(id).log_path(), 40)
    }

    /// The process id of node `id`, while it runs.
    pub fn pid(&self, id: u16) -> Option<u32> {
        self.node(id).child.as_ref().map(Child::id)
    }

    fn node(&self, id: u16) -> &Node {
        &self.nodes[usize::from(id - 1)]
    }

    fn spawn(&mut self, id: u16) {
        let classpath = self.classpath.clone();
        let node = &mut self.nodes[usize::from(id - 1)];
        assert!(node.child.is_none(), "node {id} runs already");
        let log = node.log_file(true);
        let child = Command::new(java())
            .args(BROKER_JVM)
            .arg("-cp")
            .arg(&classpath)
            .arg(node.log4j_option())
            .arg("kafka.Kafka")
            .arg(node.dir.join("server.properties"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("the node's log"))
            .stderr(log)
            .spawn()
            .expect("Java starts a Kafka node");
        node.child = Some(child);
    }

    /// Waits until node `id` answers a Metadata request listing every node.
    ///
    /// # Panics
    /// When it exits or does not within 120 s.
    pub fn wait_answering(&mut self, id: u16) {
        let nodes = self.nodes.len();
        let deadline = Instant::now() + START_TIMEOUT;
        let node = &mut self.nodes[usize::from(id - 1)];
        while metadata_brokers(&node.client) != Some(nodes) {
            let exited = node
                .child
                .as_mut()
                .is_none_or(|child| child.try_wait().ok().flatten().is_some());
            assert!(
                !exited && Instant::now() < deadline,
                "Kafka node {id} did not answer a Metadata request listing {nodes} broker(s) on {} within {} s{}:\n{}",
                node.client,
                START_TIMEOUT.as_secs(),
                if exited { " (it exited)" } else { "" },
                file_tail(&node.log_path(), 40)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// SIGKILLs node `id` and reaps it (its storage stays for [`Cluster::restart`]).
    pub fn kill(&mut self, id: u16) {
        let node = &mut self.nodes[usize::from(id - 1)];
        if let Some(mut child) = node.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts node `id` again on its storage and ports, and waits until it answers.
    pub fn restart(&mut self, id: u16) {
        self.spawn(id);
        self.wait_answering(id);
    }

    /// Sends `signal` (`"-STOP"`, `"-CONT"`) to node `id` with `kill(1)`.
    pub fn signal(&self, id: u16, signal: &str) {
        if let Some(pid) = self.pid(id) {
            let _ = Command::new("kill")
                .args([signal, &pid.to_string()])
                .status();
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for id in 1..=self.nodes.len() as u16 {
            // a stopped node acts on no signal but SIGKILL; continue it anyway
            self.signal(id, "-CONT");
            self.kill(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_id_is_22_url_safe_characters() {
        let id = cluster_id();
        assert_eq!(id.len(), 22, "{id}");
        assert!(id
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_'));
        assert_ne!(id, cluster_id());
    }

    #[test]
    fn a_cluster_id_starting_with_a_dash_is_not_read_as_an_option() {
        let arguments = format_arguments("-Bcdefghijklmnopqrstuvw", &[]);
        assert_eq!(arguments[2], "--cluster-id=-Bcdefghijklmnopqrstuvw");
        assert_eq!(arguments.last().map(String::as_str), Some("-c"));
    }

    #[test]
    fn a_listener_is_declared_advertised_and_mapped_to_its_protocol() {
        let listeners = [(
            "SECURE".to_owned(),
            "SASL_SSL".to_owned(),
            "127.0.0.1:30001".to_owned(),
        )];
        let extra = [("log.cleaner.backoff.ms".to_owned(), "100".to_owned())];
        let properties = server_properties(&NodeSettings {
            node: 2,
            nodes: 3,
            voters: "1@127.0.0.1:1,2@127.0.0.1:2,3@127.0.0.1:3",
            client: "127.0.0.1:20000",
            controller: "127.0.0.1:20001",
            listeners: &listeners,
            data: Path::new("/d"),
            extra: &extra,
        });
        assert!(properties.contains("node.id=2\n"));
        assert!(properties.contains(
            "listeners=PLAINTEXT://127.0.0.1:20000,CONTROLLER://127.0.0.1:20001,SECURE://127.0.0.1:30001\n"
        ));
        assert!(properties.contains(
            "advertised.listeners=PLAINTEXT://127.0.0.1:20000,SECURE://127.0.0.1:30001\n"
        ));
        assert!(properties.contains(
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SECURE:SASL_SSL\n"
        ));
        assert!(properties.contains("transaction.state.log.min.isr=2\n"));
        assert!(properties.ends_with("log.cleaner.backoff.ms=100\n"));
    }
}
