//! The harness's HTTP target peer against the real HTTP sink: a real peer process (the
//! harness's own executable, as the chaos runs start it) and `mongoose_sink::HttpSink`
//! posting to it over real sockets, ndjson batches, gzip and https with the CA the peer
//! makes. What is pinned: one record per output line under that line's key, whatever
//! the batch; each answer of the target read by the sink as its table says; the form
//! the sink's documentation promises checked by the peer; the certificate kept across
//! a restart of the peer.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use mongoose_chaos::http_target::{self, Expected, Record, TargetSpec, CLOSED_MID_BODY, LATE};
use mongoose_chaos::peer::{write_mode, PeerSpec, PEER_ENV};
use mongoose_chaos::process::{free_tcp_port, Proc};
use mongoose_chaos::scenario::{HttpBatch, HttpMode};
use mongoose_core::sink::{Output, OutputKey, Sink, SinkOutcome};
use mongoose_core::Epoch;
use mongoose_sink::{HttpCompression, HttpSink, HttpSinkConfig, HttpTlsConfig};

/// A target peer process in `dir`: its spec, and the process (killed when dropped).
struct Target {
    spec: TargetSpec,
    process: Proc,
}

impl Target {
    fn start(dir: &Path, https: bool, batch: Option<HttpBatch>) -> Target {
        let spec = TargetSpec {
            port: free_tcp_port(),
            log: dir.join("http.log"),
            mode_file: dir.join("http.mode"),
            seed: 7,
            https_ca: https.then(|| dir.join("https-ca.pem")),
            expected: Expected { batch },
            protocol_log: Some(dir.join("http-protocol.log")),
        };
        let process = launch(&spec);
        Target { spec, process }
    }

    fn restart(&mut self) {
        self.process.kill();
        self.process = launch(&self.spec);
    }

    fn mode(&self, mode: HttpMode) {
        write_mode(&self.spec.mode_file, mode).expect("the mode file");
    }

    fn records(&self) -> Vec<Record> {
        http_target::records(&std::fs::read_to_string(&self.spec.log).unwrap_or_default())
    }

    /// The records after the first `before`, once there are `count` of them (or 30 s
    /// passed): a request closed mid-body is logged after the sink saw the close (the
    /// target reads the rest of the body first).
    fn records_after(&self, before: usize, count: usize) -> Vec<Record> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let records = self.records().split_off(before);
            if records.len() >= count || Instant::now() >= deadline {
                return records;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn breaches(&self) -> Vec<String> {
        http_target::protocol_breaches(self.spec.protocol_log.as_deref().expect("a log"))
    }

    fn sink(&self, batch_max_lines: usize, batch_max_bytes: usize, gzip: bool) -> HttpSink {
        let scheme = if self.spec.https_ca.is_some() {
            "https"
        } else {
            "http"
        };
        HttpSink::new(
            "out",
            HttpSinkConfig {
                url: format!("{scheme}://127.0.0.1:{}/events", self.spec.port),
                response_timeout_millis: 400,
                batch_max_lines,
                batch_max_bytes,
                compression: if gzip {
                    HttpCompression::Gzip
                } else {
                    HttpCompression::None
                },
                tls: HttpTlsConfig {
                    ca_file: self.spec.https_ca.clone(),
                    ..HttpTlsConfig::default()
                },
                ..HttpSinkConfig::default()
            },
        )
        .expect("the sink's settings")
    }
}

fn launch(spec: &TargetSpec) -> Proc {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mongoose-chaos"));
    command.env(
        PEER_ENV,
        serde_json::to_string(&PeerSpec::HttpTarget(spec.clone())).expect("json"),
    );
    let process = Proc::spawn("http target", &mut command, false).expect("the peer starts");
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", spec.port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "the HTTP target never listened on {}",
            spec.port
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    process
}

/// `count` outputs of lines `first..`: `E0x<n> xxxx`, keyed by their position.
fn outputs(first: u64, count: u64) -> Vec<Output> {
    (first..first + count)
        .map(|n| {
            Output::new(
                OutputKey::new("lines", Epoch(3), 0, n * 100, 0, 42),
                format!("E0x{n:08} xxxxxxxx").into_bytes(),
            )
        })
        .collect()
}

fn publish(sink: &mut HttpSink, outputs: &[Output]) -> Vec<SinkOutcome> {
    let mut outcomes = Vec::new();
    sink.publish(outputs, &mut outcomes);
    outcomes
}

/// Each output's key and line, as the target's records must hold them.
fn keyed(outputs: &[Output]) -> Vec<(String, String)> {
    outputs
        .iter()
        .map(|output| {
            (
                output.key.to_string(),
                String::from_utf8_lossy(&output.payload).into_owned(),
            )
        })
        .collect()
}

fn keyed_records(records: &[Record]) -> Vec<(String, String)> {
    records
        .iter()
        .map(|record| (record.key.clone(), record.body.clone()))
        .collect()
}

fn scratch() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("scratch");
    let path = dir.path().to_path_buf();
    (dir, path)
}

#[test]
fn a_gzipped_https_batch_is_logged_a_record_per_line_under_its_key() {
    let (_keep, dir) = scratch();
    let batch = HttpBatch {
        max_lines: 4,
        max_bytes: None,
        gzip: true,
    };
    let target = Target::start(&dir, true, Some(batch));
    assert!(
        std::fs::read_to_string(dir.join("https-ca.pem"))
            .is_ok_and(|pem| pem.contains("BEGIN CERTIFICATE")),
        "the CA is written before the target listens"
    );
    let mut sink = target.sink(4, 1 << 20, true);
    let sent = outputs(1, 10);
    let outcomes = publish(&mut sink, &sent);
    assert!(
        outcomes.iter().all(SinkOutcome::is_published) && outcomes.len() == 10,
        "{outcomes:?}"
    );
    let records = target.records();
    assert_eq!(keyed_records(&records), keyed(&sent));
    assert!(records.iter().all(|record| record.status == "200"));
    assert_eq!(target.breaches(), Vec::<String>::new());
}

#[test]
fn bytes_too_few_for_two_lines_send_each_output_alone_as_a_batch_of_one() {
    let (_keep, dir) = scratch();
    let batch = HttpBatch {
        max_lines: 50,
        max_bytes: Some(5),
        gzip: false,
    };
    let target = Target::start(&dir, false, Some(batch));
    let mut sink = target.sink(50, 5, false);
    let sent = outputs(1, 6);
    let outcomes = publish(&mut sink, &sent);
    assert!(
        outcomes.iter().all(SinkOutcome::is_published),
        "{outcomes:?}"
    );
    assert_eq!(keyed_records(&target.records()), keyed(&sent));
    assert_eq!(target.breaches(), Vec::<String>::new());
}

#[test]
fn a_batch_larger_than_the_settings_allow_is_noted_as_a_breach() {
    let (_keep, dir) = scratch();
    // the target is told batches of 2; the sink sends 4
    let batch = HttpBatch {
        max_lines: 2,
        max_bytes: None,
        gzip: false,
    };
    let target = Target::start(&dir, false, Some(batch));
    let mut sink = target.sink(4, 1 << 20, false);
    publish(&mut sink, &outputs(1, 4));
    // the target notes the breach as it takes the request; on a loaded machine the
    // sink may give up waiting for the answer (400 ms) first, and send it again
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut breaches = target.breaches();
    while breaches.is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
        breaches = target.breaches();
    }
    assert!(!breaches.is_empty(), "the oversized batch was noted");
    assert!(
        breaches
            .iter()
            .all(|breach| breach.contains("4 lines, batch_max_lines is 2")),
        "{breaches:?}"
    );
}

#[test]
fn each_answer_of_the_target_reads_as_the_sinks_table_says() {
    let (_keep, dir) = scratch();
    let batch = HttpBatch {
        max_lines: 3,
        max_bytes: None,
        gzip: true,
    };
    let target = Target::start(&dir, false, Some(batch));
    let mut sink = target.sink(3, 1 << 20, true);
    let cases = [
        (
            HttpMode::Fail {
                percent: 100,
                status: 413,
            },
            "413",
        ),
        (
            HttpMode::Fail {
                percent: 100,
                status: 429,
            },
            "429",
        ),
        (HttpMode::CloseMidBody { percent: 100 }, CLOSED_MID_BODY),
        // far past the sink's response timeout of 400 ms
        (
            HttpMode::Late {
                percent: 100,
                ms: 5_000,
            },
            LATE,
        ),
    ];
    let mut first = 1;
    for (mode, status) in cases {
        target.mode(mode);
        let before = target.records().len();
        let sent = outputs(first, 3);
        first += 3;
        let outcomes = publish(&mut sink, &sent);
        let records = target.records_after(before, sent.len());
        assert_eq!(keyed_records(&records), keyed(&sent), "{mode:?}");
        assert!(
            records.iter().all(|record| record.status == status),
            "{mode:?}: {records:?}"
        );
        assert_eq!(outcomes.len(), 3, "{mode:?}: {outcomes:?}");
        for outcome in &outcomes {
            let as_the_table_says = match mode {
                // any other 4xx: refused for good, every line of the batch
                HttpMode::Fail { status: 413, .. } => matches!(
                    outcome,
                    SinkOutcome::NotPublished {
                        retryable: false,
                        ..
                    }
                ),
                HttpMode::Fail { .. } => matches!(
                    outcome,
                    SinkOutcome::NotPublished {
                        retryable: true,
                        ..
                    }
                ),
                _ => matches!(outcome, SinkOutcome::Uncertain { .. }),
            };
            assert!(as_the_table_says, "{mode:?}: {outcome:?}");
        }
        for record in &records {
            assert!(http_target::may_fail(&record.status), "{record:?}");
            assert_eq!(
                http_target::taken(&record.status),
                status == LATE,
                "{record:?}"
            );
            assert_eq!(
                http_target::refuses_for_good(&record.status),
                status == "413",
                "{record:?}"
            );
        }
    }
    assert_eq!(target.breaches(), Vec::<String>::new());
}

#[test]
fn a_restarted_https_target_keeps_the_certificate_the_sink_trusts() {
    let (_keep, dir) = scratch();
    let mut target = Target::start(&dir, true, None);
    let mut sink = target.sink(1, 1 << 20, false);
    let ca = std::fs::read(dir.join("https-ca.pem")).expect("the CA");
    assert!(publish(&mut sink, &outputs(1, 2))
        .iter()
        .all(SinkOutcome::is_published));
    target.restart();
    assert_eq!(
        std::fs::read(dir.join("https-ca.pem")).expect("the CA"),
        ca,
        "the same CA after a restart"
    );
    // the sink read its ca_file once, when it was made
    let outcomes = publish(&mut sink, &outputs(3, 2));
    assert!(
        outcomes.iter().all(SinkOutcome::is_published),
        "{outcomes:?}"
    );
    let records = target.records();
    assert_eq!(records.len(), 4, "{records:?}");
    assert_eq!(target.breaches(), Vec::<String>::new());
}
