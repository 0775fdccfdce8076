//! The harness's own peer processes: an HTTP target that fails on command
//! ([`crate::http_target`]), a TCP receiver, and a UDP archive publisher that drops
//! datagrams and keeps a small retransmit buffer. Each runs as a process of its own (so
//! it can be killed and paused like any peer), started from the harness's executable
//! with the peer's settings in [`PEER_ENV`].

use std::fs::OpenOptions;
use std::io::BufRead;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use mongoose_archive::{LossInjection, Offer, Publication, UdpPublication, UdpPublicationConfig};
use serde::{Deserialize, Serialize};

use crate::http_target::TargetSpec;
use crate::scenario::HttpMode;

/// The environment variable that makes the harness's executable (or a test binary's
/// peer entry) run a peer: the peer's [`PeerSpec`] as JSON.
pub const PEER_ENV: &str = "MONGOOSE_CHAOS_PEER";

/// What a peer process does.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "peer", rename_all = "snake_case")]
pub enum PeerSpec {
    /// An HTTP target ([`crate::http_target`]): each output line logged to its log as
    /// `status<TAB>key<TAB>attempt<TAB>body`, answered as the [`HttpMode`] in its mode
    /// file says (JSON; absent: 200), the failing requests chosen by its seed; over
    /// https with a CA of the harness's own when asked.
    HttpTarget(TargetSpec),
    /// A TCP receiver on `port` appending every whole line it receives to `out`.
    TcpReceiver {
        /// The port on 127.0.0.1.
        port: u16,
        /// The lines received.
        out: PathBuf,
    },
    /// A UDP publication to an archiver of each line of standard input.
    UdpPublisher {
        /// The archiver's UDP address.
        archiver: SocketAddr,
        /// The stream id.
        stream: u32,
        /// The session id.
        session: u32,
        /// Drop every n-th data datagram on its first send (0: none).
        drop_every: u64,
        /// The retransmit buffer (flow control off when given).
        retransmit_bytes: Option<usize>,
        /// Where the count of gaps the publisher answered "lost" is kept.
        gaps_file: PathBuf,
    },
}

/// Runs the peer named in [`PEER_ENV`], if any: `Some(exit code)` when it was a peer.
pub fn run_from_env() -> Option<i32> {
    let spec = std::env::var(PEER_ENV).ok()?;
    let spec: PeerSpec = match serde_json::from_str(&spec) {
        Ok(spec) => spec,
        Err(error) => {
            eprintln!("mongoose-chaos peer: cannot read {PEER_ENV}: {error}");
            return Some(2);
        }
    };
    let result = match spec {
        PeerSpec::HttpTarget(spec) => crate::http_target::serve(&spec),
        PeerSpec::TcpReceiver { port, out } => tcp_receiver(port, &out),
        PeerSpec::UdpPublisher {
            archiver,
            stream,
            session,
            drop_every,
            retransmit_bytes,
            gaps_file,
        } => udp_publisher(
            archiver,
            (stream, session),
            drop_every,
            retransmit_bytes,
            &gaps_file,
        ),
    };
    Some(match result {
        Ok(()) => 0,
        Err(error) => {
            eprintln!("mongoose-chaos peer: {error}");
            1
        }
    })
}

/// Reads the HTTP target's mode file (absent or unreadable: answer 200).
pub fn read_mode(mode_file: &Path) -> HttpMode {
    std::fs::read(mode_file)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or(HttpMode::Ok)
}

/// Writes the HTTP target's mode file (atomically: a temporary file renamed).
pub fn write_mode(mode_file: &Path, mode: HttpMode) -> std::io::Result<()> {
    let temporary = mode_file.with_extension("tmp");
    std::fs::write(
        &temporary,
        serde_json::to_vec(&mode).map_err(std::io::Error::other)?,
    )?;
    std::fs::rename(temporary, mode_file)
}

/// A well-mixed number from `seed` and `count` (splitmix64).
pub(crate) fn roll(seed: u64, count: u64) -> u64 {
    let mut z = seed ^ count.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The TCP receiver: the testkit's line target appending whole lines to `out` (a line
/// cut by a broken connection is not received), until it is killed.
fn tcp_receiver(port: u16, out: &Path) -> std::io::Result<()> {
    let out = OpenOptions::new().create(true).append(true).open(out)?;
    let _target = mongoose_testkit::tcp_target::TcpLineTarget::builder()
        .port(port)
        .append_to(out)
        .keep_lines(false)
        .try_start()?;
    loop {
        std::thread::park();
    }
}

fn udp_publisher(
    archiver: SocketAddr,
    (stream, session): (u32, u32),
    drop_every: u64,
    retransmit_bytes: Option<usize>,
    gaps_file: &Path,
) -> std::io::Result<()> {
    let mut config = UdpPublicationConfig {
        linger: Duration::from_secs(60),
        ..UdpPublicationConfig::default()
    };
    if let Some(bytes) = retransmit_bytes {
        config.retransmit_buffer_bytes = bytes;
        config.flow_control_window = None;
    }
    if drop_every > 0 {
        config.loss = Some(LossInjection { drop_every });
    }
    let mut publication = UdpPublication::connect_with(archiver, stream, session, config)
        .map_err(std::io::Error::other)?;
    let (lines, incoming) = mpsc::channel::<Vec<u8>>();
    std::thread::spawn(move || {
        let stdin = std::io::stdin().lock();
        for line in stdin.split(b'\n') {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let mut gaps = 0;
    let note_gaps = |publication: &UdpPublication, gaps: &mut u64| -> std::io::Result<()> {
        if publication.gaps_lost() != *gaps {
            *gaps = publication.gaps_lost();
            std::fs::write(gaps_file, gaps.to_string())?;
        }
        Ok(())
    };
    loop {
        match incoming.recv_timeout(Duration::from_millis(10)) {
            Ok(line) => loop {
                match publication.offer(&line).map_err(std::io::Error::other)? {
                    Offer::Accepted { .. } => break,
                    Offer::BackPressured => {
                        publication.service().map_err(std::io::Error::other)?;
                        std::thread::sleep(Duration::from_micros(200));
                    }
                }
            },
            Err(mpsc::RecvTimeoutError::Timeout) => {
                publication.service().map_err(std::io::Error::other)?;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        note_gaps(&publication, &mut gaps)?;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while !publication.close().map_err(std::io::Error::other)? && Instant::now() < deadline {
        note_gaps(&publication, &mut gaps)?;
        std::thread::sleep(Duration::from_millis(10));
    }
    note_gaps(&publication, &mut gaps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mode_file_reads_back() {
        let dir = tempfile_dir();
        let file = dir.join("mode");
        assert_eq!(read_mode(&file), HttpMode::Ok, "absent: 200");
        let mode = HttpMode::Fail {
            percent: 25,
            status: 503,
        };
        write_mode(&file, mode).expect("written");
        assert_eq!(read_mode(&file), mode);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn the_dice_are_spread() {
        let failing = (0..10_000)
            .filter(|count| roll(5, *count) % 100 < 25)
            .count();
        assert!((2_000..3_000).contains(&failing), "{failing}");
    }

    fn tempfile_dir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("chaos-peer-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a folder");
        dir
    }
}
