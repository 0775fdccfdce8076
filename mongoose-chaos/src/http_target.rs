//! The harness's HTTP target (a peer process, see [`crate::peer`]): it takes what an
//! HTTP sink posts, one output per request or ndjson batches, plain or gzipped, over
//! http or https, answers as the scenario's [`HttpMode`] says, and logs **one record
//! per output line** in `peers/http.log`:
//!
//! ```text
//! status<TAB>key<TAB>attempt<TAB>body
//! ```
//!
//! A batch of n lines (`Content-Type: application/x-ndjson`, the keys of its lines in
//! `Idempotency-Keys`) gives n records, each line with its own key and the request's
//! `X-Mongoose-Attempt`, all with the request's status; a single output
//! (`Idempotency-Key`) gives one. So every check that reads the log (each output at
//! least once under one key, the sink's failure counters against the requests the
//! target failed, the outputs a `count_loss` sink may give up) reads a batch as the
//! outputs it carries, whatever the batches' sizes.
//!
//! The statuses of the records:
//!
//! | status | the target | the sink (its module docs' table) |
//! |---|---|---|
//! | `200` | took the lines | published |
//! | `200-late` | took the lines, answered 200 after the mode's delay | published, or uncertain past its response timeout (sent again under the same keys) |
//! | `413`, `400`, other 4xx | refused them | not published, for good: `hold` keeps them until a restart, `count_loss` counts them lost at once |
//! | `408`, `429`, `503` | refused them | not published, retried |
//! | `500` and other 5xx | failed | uncertain, retried |
//! | `timeout` | never answered | uncertain (its response timeout) |
//! | `close` | read the request, closed without an answer | uncertain |
//! | `close-mid-body` | read half the body, closed its side without an answer | uncertain |
//!
//! A record's status starts with `2` exactly when the target took the line
//! ([`taken`]); [`may_fail`] says which records the sink may count as a failed attempt
//! (every other one, and a late answer). A request's records are written at once,
//! before its answer, except those of a mid-body close, written once the rest of the
//! body is read (the sink has seen the close by then): the checks read a run's records
//! once the run is over.
//!
//! The target also checks that each request has the form the sink's documentation
//! promises ([`Expected`]): one key per ndjson line, the content type, gzip when asked
//! and only then, at most `batch_max_lines` lines and `batch_max_bytes` bytes before
//! compression (one line larger than that alone). A request that breaks the promise is
//! noted in the protocol log (`peers/http-protocol.log`, one line each), which the
//! run's checks read ([`protocol_breaches`]); it is still answered as the mode says.
//!
//! The server is the testkit's scripted target
//! ([`mongoose_testkit::http_target::HttpTarget`]); this module is its script: the
//! answers from the mode file and the dice, the records, the checks of the form.
//!
//! Over https the target's certificate is issued by a CA of the harness's own
//! ([`mongoose_testkit::https::TestCa`]): the CA's certificate is written to the
//! scenario's `peers/https-ca.pem` (the sink's `ca_file`) before the target listens,
//! and a restarted target serves the same certificate (a running server keeps the CA
//! it read at its start).

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mongoose_testkit::http_target::{Answer, HttpTarget, Request, Script};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::ServerConfig;
use serde::{Deserialize, Serialize};

use crate::peer::{read_mode, roll};
use crate::scenario::{HttpBatch, HttpMode};

/// The status of a record the target took and answered late ([`HttpMode::Late`]): it
/// starts with `2` (taken), and the sink may count it uncertain.
pub const LATE: &str = "200-late";

/// The status of a record whose request was closed after half its body.
pub const CLOSED_MID_BODY: &str = "close-mid-body";

/// The sink's default `batch_max_bytes` (1 MiB).
const DEFAULT_MAX_BYTES: usize = 1 << 20;

/// What the target needs to know of its sink: https, the batches, the logs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetSpec {
    /// The port on 127.0.0.1.
    pub port: u16,
    /// The request log (`status<TAB>key<TAB>attempt<TAB>body`, a record per line).
    pub log: PathBuf,
    /// The mode file ([`crate::peer::write_mode`]).
    pub mode_file: PathBuf,
    /// Chooses which requests the mode fails.
    pub seed: u64,
    /// Serve https, the CA's certificate written here (its certificate and key beside
    /// it, kept for a restart).
    pub https_ca: Option<PathBuf>,
    /// The form the sink's requests must have.
    pub expected: Expected,
    /// Where requests that break it are noted.
    pub protocol_log: Option<PathBuf>,
}

/// The form of the sink's requests, from its settings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Expected {
    /// The sink's batches (`None`: one output per request, no compression).
    pub batch: Option<HttpBatch>,
}

impl Expected {
    /// The breaches of the sink's documented form by a request with `headers`, whose
    /// body (before compression) is `plain` bytes in `lines` lines with `keys`.
    pub fn breaches(
        &self,
        headers: &Headers,
        plain: usize,
        lines: usize,
        keys: usize,
    ) -> Vec<String> {
        let mut breaches = Vec::new();
        let max_lines = self.batch.map_or(1, |batch| batch.max_lines.max(1)) as usize;
        let max_bytes = self
            .batch
            .and_then(|batch| batch.max_bytes)
            .map_or(DEFAULT_MAX_BYTES, |bytes| bytes as usize);
        let gzip = self.batch.is_some_and(|batch| batch.gzip);
        let gzipped = headers.get("content-encoding") == Some("gzip");
        if gzipped != gzip {
            breaches.push(format!(
                "Content-Encoding {:?}, and the sink {} compression = \"gzip\"",
                headers.get("content-encoding"),
                if gzip { "has" } else { "has no" }
            ));
        }
        if headers
            .get("x-mongoose-attempt")
            .and_then(|attempt| attempt.parse::<u32>().ok())
            .is_none()
        {
            breaches.push(format!(
                "X-Mongoose-Attempt {:?} is not a count",
                headers.get("x-mongoose-attempt")
            ));
        }
        if max_lines > 1 {
            if headers.get("content-type") != Some("application/x-ndjson") {
                breaches.push(format!(
                    "a batch with Content-Type {:?}, not application/x-ndjson",
                    headers.get("content-type")
                ));
            }
            if headers.get("idempotency-keys").is_none() {
                breaches.push("a batch without Idempotency-Keys".to_owned());
            }
            if keys != lines {
                breaches.push(format!("{keys} keys in Idempotency-Keys for {lines} lines"));
            }
            if lines > max_lines {
                breaches.push(format!("{lines} lines, batch_max_lines is {max_lines}"));
            }
            if lines > 1 && plain > max_bytes {
                breaches.push(format!(
                    "{plain} bytes in {lines} lines, batch_max_bytes is {max_bytes} (only one line may be larger)"
                ));
            }
        } else {
            if headers.get("content-type") != Some("application/octet-stream") {
                breaches.push(format!(
                    "one output with Content-Type {:?}, not application/octet-stream",
                    headers.get("content-type")
                ));
            }
            if headers.get("idempotency-key").is_none() {
                breaches.push("one output without Idempotency-Key".to_owned());
            }
        }
        breaches
    }
}

/// A request's headers, names in lowercase.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Headers(Vec<(String, String)>);

impl Headers {
    /// The value of `name` (lowercase).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    fn of(request: &Request) -> Headers {
        Headers(request.headers.clone())
    }
}

/// Whether a record's status says the target took its line.
pub fn taken(status: &str) -> bool {
    status.starts_with('2')
}

/// Whether the sink may count the attempt of a record as failed (not published or
/// uncertain): the target did not take it, or answered it late.
pub fn may_fail(status: &str) -> bool {
    !taken(status) || status == LATE
}

/// Whether a record's status refuses its line for good, as the sink's table reads it:
/// a 4xx other than 408 and 429, and the redirects 301, 307, 308.
pub fn refuses_for_good(status: &str) -> bool {
    match status.parse::<u16>() {
        Ok(408 | 429) => false,
        Ok(code) => (400..500).contains(&code) || matches!(code, 301 | 307 | 308),
        Err(_) => false,
    }
}

/// For each of `records` (a run's, in the order written), whether the sink may have
/// counted its attempt as failed (not published or uncertain): the target did not
/// take it, answered it late ([`may_fail`]), or took it and got the same key again
/// later in `records`. The sink sends an output again only while it has not seen it
/// published, so a line taken and sent again was answered after the sink's response
/// timeout: the target or the sink was slow (a loaded machine stalls either for longer
/// than 500 ms), an uncertain attempt the target could not tell from a prompt one.
pub fn maybe_failed(records: &[Record]) -> Vec<bool> {
    let mut later: HashSet<&str> = HashSet::new();
    let mut flags = vec![false; records.len()];
    for (index, record) in records.iter().enumerate().rev() {
        flags[index] = may_fail(&record.status) || later.contains(record.key.as_str());
        later.insert(record.key.as_str());
    }
    flags
}

/// One record of the request log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The status (see the module's table).
    pub status: String,
    /// The line's key.
    pub key: String,
    /// The request's `X-Mongoose-Attempt`.
    pub attempt: String,
    /// The line.
    pub body: String,
}

/// The records of a request log's text (lines that are not records are skipped: a
/// target killed mid-write leaves no half record, each request's records are written
/// at once, but a torn last line is possible on a full disk).
pub fn records(log: &str) -> Vec<Record> {
    log.lines()
        .filter_map(|line| {
            let mut fields = line.splitn(4, '\t');
            Some(Record {
                status: fields.next()?.to_owned(),
                key: fields.next()?.to_owned(),
                attempt: fields.next()?.to_owned(),
                body: fields.next()?.to_owned(),
            })
        })
        .collect()
}

/// The breaches the target noted in its protocol log (none when there is none).
pub fn protocol_breaches(protocol_log: &Path) -> Vec<String> {
    std::fs::read_to_string(protocol_log)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Runs the target until it is killed.
///
/// # Errors
/// The port cannot be bound, a log cannot be opened, or the https material cannot be
/// made or read.
pub fn serve(spec: &TargetSpec) -> std::io::Result<()> {
    let mut target = HttpTarget::builder()
        .port(spec.port)
        // a peer that runs as long as a scenario keeps nothing: its log is the record
        .keep_requests(false)
        .script(Shared {
            log: Mutex::new(append(&spec.log)?),
            protocol: match &spec.protocol_log {
                Some(path) => Some(Mutex::new(append(path)?)),
                None => None,
            },
            mode_file: spec.mode_file.clone(),
            seed: spec.seed,
            expected: spec.expected,
        });
    if let Some(ca) = &spec.https_ca {
        target = target.tls(tls_config(ca)?);
    }
    let _target = target.try_start()?;
    loop {
        std::thread::park();
    }
}

fn append(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// The https material: the CA's certificate at `ca`, the target's certificate and key
/// beside it (`https-target.crt`, `https-target.key`), made at the first start and
/// read back at a restart.
fn tls_config(ca: &Path) -> std::io::Result<Arc<ServerConfig>> {
    let cert = ca.with_file_name("https-target.crt");
    let key = ca.with_file_name("https-target.key");
    if !(ca.exists() && cert.exists() && key.exists()) {
        let authority = mongoose_testkit::https::TestCa::new("mongoose-chaos test CA");
        let issued = authority.issue(&["127.0.0.1", "localhost"]);
        // the CA last: a sink's ca_file appears only with a certificate to trust
        for (path, text) in [
            (&cert, &issued.cert_pem),
            (&key, &issued.key_pem),
            (&ca.to_path_buf(), &authority.cert_pem()),
        ] {
            let temporary = path.with_extension("tmp");
            std::fs::write(&temporary, text)?;
            std::fs::rename(&temporary, path)?;
        }
    }
    let invalid = |what: &Path, error: &dyn std::fmt::Display| {
        std::io::Error::other(format!(
            "{} is not usable ({error}): delete the scenario's peers/https-* files to make new ones",
            what.display()
        ))
    };
    let chain = CertificateDer::pem_file_iter(&cert)
        .map_err(|error| invalid(&cert, &error))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| invalid(&cert, &error))?;
    let private = PrivateKeyDer::from_pem_file(&key).map_err(|error| invalid(&key, &error))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|error| invalid(ca, &error))?
        .with_no_client_auth()
        .with_single_cert(chain, private)
        .map_err(|error| invalid(&cert, &error))?;
    Ok(Arc::new(config))
}

/// The target's script: what the connections share.
struct Shared {
    log: Mutex<File>,
    protocol: Option<Mutex<File>>,
    mode_file: PathBuf,
    seed: u64,
    expected: Expected,
}

impl Shared {
    /// Writes a request's records at once.
    fn log(&self, records: &[Record]) -> std::io::Result<()> {
        let mut text = String::new();
        for record in records {
            let body = record.body.replace(['\n', '\t'], " ");
            text.push_str(&format!(
                "{}\t{}\t{}\t{body}\n",
                record.status, record.key, record.attempt
            ));
        }
        let mut log = self
            .log
            .lock()
            .map_err(|_| std::io::Error::other("log lock"))?;
        log.write_all(text.as_bytes())
    }

    fn breach(&self, key: &str, breaches: &[String]) {
        if breaches.is_empty() {
            return;
        }
        eprintln!("mongoose-chaos http target: a request (first key {key}) breaks the sink's documented form: {}", breaches.join("; "));
        if let Some(protocol) = &self.protocol {
            if let Ok(mut file) = protocol.lock() {
                let _ = writeln!(file, "first key {key}: {}", breaches.join("; "));
            }
        }
    }
}

impl Script for Shared {
    /// Every answer is decided from the mode and the dice before the body is read.
    fn before_body(&self, request: &Request) -> Option<Answer> {
        let dice = roll(self.seed, request.number) % 100;
        let hit = |percent: u32| dice < u64::from(percent);
        Some(match read_mode(&self.mode_file) {
            HttpMode::Fail { percent, status } if hit(percent) => Answer::Status(status),
            HttpMode::Timeout { percent } if hit(percent) => Answer::Hang,
            HttpMode::Close { percent } if hit(percent) => Answer::Close,
            HttpMode::CloseMidBody { percent } if hit(percent) => Answer::CloseMidBody,
            HttpMode::Late { percent, ms } if hit(percent) => {
                Answer::Late(Duration::from_millis(ms), 200)
            }
            _ => Answer::Status(200),
        })
    }

    fn answer(&self, _request: &Request) -> Answer {
        Answer::Status(200)
    }

    /// Logs a request's records: before its answer, or once the rest of a body cut
    /// mid-way is read (a body cut short, the server killed meanwhile, is logged as far
    /// as it came, its form not checked).
    fn observe(&self, request: &Request, answer: &Answer) -> std::io::Result<()> {
        let status = match answer {
            Answer::Late(..) => LATE.to_owned(),
            Answer::Hang => "timeout".to_owned(),
            Answer::Close => "close".to_owned(),
            Answer::CloseMidBody => CLOSED_MID_BODY.to_owned(),
            other => other.status().unwrap_or(200).to_string(),
        };
        let records = lines_of(request, &status, self);
        self.log(&records)
    }

    fn connection_failed(&self, error: &std::io::Error) {
        // a client gone (a killed server, a timeout) ends its connection here
        if !matches!(
            error.kind(),
            std::io::ErrorKind::UnexpectedEof
                | std::io::ErrorKind::ConnectionReset
                | std::io::ErrorKind::BrokenPipe
        ) {
            eprintln!("mongoose-chaos http target: a connection ended: {error}");
        }
    }
}

/// The records of one request: a line each with its key (a batch), or the one output;
/// the form of a complete body checked against what the sink promises.
fn lines_of(request: &Request, status: &str, shared: &Shared) -> Vec<Record> {
    let headers = &Headers::of(request);
    let attempt = headers.get("x-mongoose-attempt").unwrap_or("-").to_owned();
    let first_key = headers
        .get("idempotency-keys")
        .or(headers.get("idempotency-key"))
        .and_then(|keys| keys.split(',').next())
        .unwrap_or("-");
    let mut breaches = Vec::new();
    // what decodes of a cut body is kept
    if let Some(error) = &request.decode_error {
        breaches.push(format!("a gzip body that does not decode ({error})"));
    }
    let plain = &request.body;
    let text = String::from_utf8_lossy(plain);
    let record = |key: &str, body: &str| Record {
        status: status.to_owned(),
        key: key.to_owned(),
        attempt: attempt.clone(),
        body: body.to_owned(),
    };
    let records: Vec<Record> = match headers.get("idempotency-keys") {
        Some(keys) => {
            let keys: Vec<&str> = keys.split(',').map(str::trim).collect();
            let lines: Vec<&str> = match text.strip_suffix('\n') {
                Some(whole) => whole.split('\n').collect(),
                None if text.is_empty() => Vec::new(),
                // no line break at the end: the last line is cut (or the form is broken)
                None => {
                    breaches.push("an ndjson body without a final line break".to_owned());
                    text.split('\n').collect()
                }
            };
            breaches.extend(shared.expected.breaches(
                headers,
                plain.len(),
                lines.len(),
                keys.len(),
            ));
            let mut records: Vec<Record> = keys
                .iter()
                .enumerate()
                .map(|(index, key)| record(key, lines.get(index).copied().unwrap_or("<no line>")))
                .collect();
            records.extend(
                lines
                    .iter()
                    .skip(keys.len())
                    .map(|line| record("<no key>", line)),
            );
            records
        }
        None => {
            breaches.extend(shared.expected.breaches(headers, plain.len(), 1, 1));
            vec![record(first_key, &text)]
        }
    };
    if request.complete {
        shared.breach(first_key, &breaches);
    }
    records
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> Headers {
        Headers(
            pairs
                .iter()
                .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
                .collect(),
        )
    }

    #[test]
    fn the_statuses_read_as_the_sinks_table() {
        for taken_status in ["200", LATE] {
            assert!(taken(taken_status));
        }
        assert!(may_fail(LATE), "a late answer may be past the timeout");
        assert!(!may_fail("200"));
        for failed in [
            "413",
            "429",
            "503",
            "500",
            "timeout",
            "close",
            CLOSED_MID_BODY,
        ] {
            assert!(!taken(failed) && may_fail(failed), "{failed}");
        }
        for permanent in ["413", "400", "404", "301", "308"] {
            assert!(refuses_for_good(permanent), "{permanent}");
        }
        for retried in ["408", "429", "503", "500", "timeout", CLOSED_MID_BODY, LATE] {
            assert!(!refuses_for_good(retried), "{retried}");
        }
    }

    #[test]
    fn a_batch_breaking_the_documented_form_is_named() {
        let expected = Expected {
            batch: Some(HttpBatch {
                max_lines: 3,
                max_bytes: Some(10),
                gzip: true,
            }),
        };
        let good = headers(&[
            ("content-type", "application/x-ndjson"),
            ("content-encoding", "gzip"),
            ("idempotency-keys", "a,b"),
            ("x-mongoose-attempt", "0"),
        ]);
        assert_eq!(expected.breaches(&good, 10, 2, 2), Vec::<String>::new());
        assert_eq!(
            expected.breaches(&good, 50, 1, 1),
            Vec::<String>::new(),
            "one line larger than batch_max_bytes goes alone"
        );
        let breaches = expected.breaches(&good, 11, 4, 3);
        assert_eq!(breaches.len(), 3, "{breaches:?}");
        let plain = headers(&[
            ("content-type", "application/octet-stream"),
            ("idempotency-key", "a"),
            ("x-mongoose-attempt", "2"),
        ]);
        assert_eq!(
            Expected::default().breaches(&plain, 100, 1, 1),
            Vec::<String>::new()
        );
        assert_eq!(
            expected.breaches(&plain, 1, 1, 1).len(),
            3,
            "no gzip, no ndjson, no Idempotency-Keys"
        );
    }

    #[test]
    fn records_read_back_from_the_log() {
        let log = "200\tk1\t0\tE0x1 xx\n413\tk2\t1\tE0x2 a b\ntorn";
        let read = records(log);
        assert_eq!(read.len(), 2);
        assert_eq!(read[1].status, "413");
        assert_eq!(read[1].body, "E0x2 a b");
    }
}
