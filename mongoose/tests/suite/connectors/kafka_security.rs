//! The Kafka connector's security settings (issue 27 item 5) against an Apache Kafka
//! node of the test's own with a SASL_SSL listener: SCRAM-SHA-256 credentials made
//! when its storage is formatted, and a certificate signed by a CA the test generates
//! (`openssl`; Kafka reads PEM keystores). The `mongoose` binary runs a ledger whose
//! feed, changelog and alerts sink all connect over SASL_SSL; a wrong password is an
//! error naming the feed, not a hang.

use crate::kafka_support;

use std::path::Path;
use std::process::Command;

use kafka_support::{
    check_changelog, committed_total, create_topic, expected_alerts, line, member_config,
    own_cluster, produce_lines, read_topic, unique_topic, Member, OwnCluster,
};
use mongoose_testkit::build_plugin;
use mongoose_testkit::kafka::{Cluster, ClusterBuilder};

const RECORDS: usize = 2_000;
const PARTITIONS: i32 = 3;
const USER: &str = "ledger";
const PASSWORD: &str = "correct-horse-battery-staple";

/// Runs `openssl` with `arguments` in `dir`.
fn openssl(dir: &Path, arguments: &[&str]) {
    let output = Command::new("openssl")
        .current_dir(dir)
        .args(arguments)
        .output()
        .expect("openssl runs (Debian's openssl package)");
    assert!(
        output.status.success(),
        "openssl {arguments:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A CA (`ca.pem`) and the broker's key and certificate signed by it, for 127.0.0.1
/// (`server.pem`: the unencrypted PKCS#8 key, then the certificate: a PEM keystore).
fn certificates(dir: &Path) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=mongoose-test-ca",
        ],
    );
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=localhost",
        ],
    );
    std::fs::write(
        dir.join("san.cnf"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )
    .expect("san.cnf");
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "2",
            "-extfile",
            "san.cnf",
        ],
    );
    let key = std::fs::read_to_string(dir.join("server.key")).expect("key");
    let certificate = std::fs::read_to_string(dir.join("server.crt")).expect("certificate");
    std::fs::write(dir.join("server.pem"), format!("{key}{certificate}")).expect("keystore");
}

/// A single node with a PLAINTEXT listener (the test's own admin and checks) and a
/// SASL_SSL one (`SECURE`) that takes SCRAM-SHA-256 for `USER`.
fn secured_cluster(test: &str, certificates: &Path) -> Option<OwnCluster> {
    let keystore = certificates.join("server.pem").display().to_string();
    let builder: ClusterBuilder = Cluster::builder(1)
        .listener("SECURE", "SASL_SSL")
        .property(
            "listener.name.secure.sasl.enabled.mechanisms",
            "SCRAM-SHA-256",
        )
        .property(
            "listener.name.secure.scram-sha-256.sasl.jaas.config",
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        )
        .property("listener.name.secure.ssl.keystore.type", "PEM")
        .property("listener.name.secure.ssl.keystore.location", &keystore)
        .format_argument("--add-scram")
        .format_argument(&format!("SCRAM-SHA-256=[name={USER},password={PASSWORD}]"));
    own_cluster(test, builder)
}

/// The security settings of a client of `USER` with the password in `password_file`.
fn security(password_file: &Path, ca: &Path) -> String {
    format!(
        r#", security_protocol = "SASL_SSL", sasl_mechanism = "SCRAM-SHA-256", sasl_username = "{USER}", sasl_password_file = "{}", ssl_ca_location = "{}""#,
        password_file.display(),
        ca.display()
    )
}

/// Records flow from a Kafka feed to the ledger's changelog and its Kafka alerts sink,
/// every client over SASL_SSL (SCRAM-SHA-256, the test's CA): every record applied once,
/// every alert in its topic.
#[test]
fn a_ledger_reads_and_writes_kafka_over_sasl_ssl() {
    let test = "a_ledger_reads_and_writes_kafka_over_sasl_ssl";
    let secrets = tempfile::tempdir().expect("a folder for the certificates");
    certificates(secrets.path());
    let Some(cluster) = secured_cluster(test, secrets.path()) else {
        return;
    };
    let library = build_plugin("kafka-plugin", &[]);
    let plain = cluster.bootstrap();
    let secure = cluster.bootstrap_of("SECURE");
    let topic = unique_topic("secure");
    let group = format!("{topic}-ledgers");
    let alerts = format!("{topic}-alerts");
    create_topic(&plain, &topic, PARTITIONS, &[]);
    create_topic(&plain, &alerts, 1, &[]);
    produce_lines(
        &kafka_support::batching_producer(&plain),
        &topic,
        0..RECORDS,
    );
    let password = secrets.path().join("kafka-password");
    std::fs::write(&password, format!("{PASSWORD}\n")).expect("password file");
    let security = security(&password, &secrets.path().join("ca.pem"));
    let config = member_config(
        &secure,
        &topic,
        &group,
        (
            &security,
            r#", alerts_sink = "alerts""#,
            &format!(
                "[[sinks]]\nname = \"alerts\"\nkind = \"kafka\"\nsettings = {{ brokers = \"{secure}\", topic = \"{alerts}\", delivery_timeout_ms = 30000{security} }}"
            ),
        ),
    );
    let mut member = Member::start(&library, &config);
    kafka_support::wait_members(&mut [&mut member], "committed every record", 180, &|_| {
        committed_total(&plain, &group, &topic, PARTITIONS) >= RECORDS as i64
    });
    member.stop();
    let lines: Vec<String> = (0..RECORDS).map(line).collect();
    let ends = kafka_support::committed(&plain, &group, &topic, PARTITIONS);
    check_changelog(
        &plain,
        &topic,
        &format!("{group}-ledger-changelog"),
        &ends,
        &lines,
    );
    let expected = expected_alerts(&lines);
    let written = read_topic(&plain, &alerts);
    let distinct: std::collections::BTreeSet<&String> = written.iter().collect();
    assert_eq!(
        distinct.len(),
        expected,
        "every alert in the alerts topic (written over SASL_SSL): {}",
        member.run.log()
    );
}

/// A wrong password: the server does not hang on a broker that refuses it; it exits
/// non-zero with the broker's authentication error, naming the feed.
#[test]
fn a_wrong_kafka_password_is_an_error_naming_the_feed_not_a_hang() {
    let test = "a_wrong_kafka_password_is_an_error_naming_the_feed_not_a_hang";
    let secrets = tempfile::tempdir().expect("a folder for the certificates");
    certificates(secrets.path());
    let Some(cluster) = secured_cluster(test, secrets.path()) else {
        return;
    };
    let library = build_plugin("kafka-plugin", &[]);
    let plain = cluster.bootstrap();
    let secure = cluster.bootstrap_of("SECURE");
    let topic = unique_topic("wrong-password");
    create_topic(&plain, &topic, 1, &[]);
    let password = secrets.path().join("kafka-password");
    std::fs::write(&password, "not-the-password\n").expect("password file");
    let config = member_config(
        &secure,
        &topic,
        &format!("{topic}-ledgers"),
        (
            &security(&password, &secrets.path().join("ca.pem")),
            r#", alerts = "alerts.txt""#,
            "",
        ),
    );
    let mut member = Member::start(&library, &config);
    // the member (killed when dropped) must exit on its own within 120 s
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let status = loop {
        let child = member.child.as_mut().expect("running");
        if let Some(status) = child.try_wait().expect("child status") {
            member.child = None;
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the server on a wrong password did not exit within 120 s: {}",
            member.run.log()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let log = member.run.log();
    assert!(!status.success(), "{log}");
    let error = log
        .lines()
        .find(|line| line.starts_with("mongoose:"))
        .unwrap_or_else(|| panic!("an error line: {log}"));
    eprintln!("the server's error: {error}");
    assert!(
        error.contains("kafka 'lines'")
            && error.contains("SASL authentication")
            && error.contains("check sasl_username"),
        "the error names the feed, the broker's refusal and what to check: {log}"
    );
}
