//! [`Archiver`]: records UDP and IPC publications into recordings.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs;
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mongoose_durable::lock::FileLock;
use mongoose_durable::DurableError;

use crate::catalog::{now_unix_ms, Catalog, CatalogEvent, StopReason};
use crate::error::{ArchiveError, Result};
use crate::ipc::Ring;
use crate::segment::{RecordingIdentity, SegmentWriter};
use crate::wire::{self, Kind};

mod ipc;
mod udp;

use udp::{header, send, set_receive_buffer};

/// The default segment size: 64 MiB.
pub const DEFAULT_SEGMENT_BYTES: u64 = 64 << 20;

/// How an [`Archiver`] runs.
#[derive(Debug, Clone)]
pub struct ArchiverConfig {
    /// The archive directory: the catalog and one directory per recording.
    pub archive_dir: PathBuf,
    /// Where to receive UDP publications (`127.0.0.1:0` picks a free port; see
    /// [`Archiver::udp_addr`]). `None`: no UDP.
    pub udp_bind: Option<SocketAddr>,
    /// The directory where [`crate::IpcPublication`]s create their rings. `None`: no
    /// IPC.
    pub ipc_dir: Option<PathBuf>,
    /// The size at which a recording continues in a new segment file.
    pub segment_bytes: u64,
    /// How long a gap may stay open before its NAK is sent again.
    pub nak_retry: Duration,
    /// Bytes of out-of-order UDP data held per publication while a gap is filled; data
    /// beyond it is dropped and asked for again once the gap closed.
    pub hold_bytes: usize,
    /// A UDP publication not heard from for this long is stopped
    /// ([`StopReason::PublicationTimedOut`]); so is a recording recovered after a crash
    /// whose publication does not come back. An IPC ring does not time out: the ring
    /// file is the publication (an idle publisher and a dead one look the same), and
    /// its recording stays active until the ring is closed or the archiver stops.
    pub publication_timeout: Duration,
    /// How often new IPC rings are looked for.
    pub ipc_scan_interval: Duration,
}

impl ArchiverConfig {
    /// A configuration with defaults, recording into `archive_dir`, no transport yet.
    pub fn new(archive_dir: impl Into<PathBuf>) -> ArchiverConfig {
        ArchiverConfig {
            archive_dir: archive_dir.into(),
            udp_bind: None,
            ipc_dir: None,
            segment_bytes: DEFAULT_SEGMENT_BYTES,
            nak_retry: Duration::from_millis(20),
            hold_bytes: 16 << 20,
            publication_timeout: Duration::from_secs(10),
            ipc_scan_interval: Duration::from_millis(50),
        }
    }
}

/// Counters of an archiver's run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ArchiverCounters {
    /// Messages recorded.
    pub messages: u64,
    /// NAKs sent.
    pub naks_sent: u64,
    /// Gaps recorded as lost.
    pub gaps_recorded: u64,
    /// Out-of-order datagrams dropped because the hold was full (asked for again).
    pub held_overflow: u64,
    /// Recordings recovered after a crash.
    pub recovered: u64,
}

#[derive(Debug)]
enum Transport {
    /// Known from the catalog (a recording recovered after a crash), not heard yet.
    Awaiting,
    Udp(UdpState),
    Ipc(IpcState),
}

#[derive(Debug)]
struct UdpState {
    peer: SocketAddr,
    held: BTreeMap<u64, Vec<u8>>,
    held_bytes: usize,
    /// The end of the open gap the publisher was asked for, and when.
    nak: Option<(u64, Instant)>,
    /// The position the publisher said it reached (heartbeat, end).
    announced: u64,
    end: Option<u64>,
    status_sent: u64,
}

#[derive(Debug)]
struct IpcState {
    ring: Ring,
    scratch: Vec<u8>,
}

#[derive(Debug)]
struct Active {
    id: u64,
    stream: u32,
    session: u32,
    writer: SegmentWriter,
    transport: Transport,
    last_heard: Instant,
    dirty: bool,
}

/// Records publications into an archive directory.
///
/// One archiver owns an archive directory (it holds an exclusive lock on
/// `<archive>/lock`). Each `(stream, session)` is recorded into one recording at a
/// time; readers ([`crate::RecordingReader`]) read the recordings while it writes.
///
/// **Crash and restart.** The catalog is append-only and synced per event; recorded
/// data is written to the segment files after each batch (a process crash loses
/// nothing written; a power loss may lose the unsynced tail). When the archiver starts
/// again, each recording that was active is *resumed*: the torn tail of its last
/// segment (an incomplete or damaged last record) is cut and counted in the catalog
/// ([`crate::RecordingDescriptor::torn_tails_cut`]), and the recording continues under
/// the same id when its publication is heard again: a UDP publication is asked (NAK)
/// for everything after the recorded position; an IPC ring is read again from the
/// recorded position. A reader following the recording sees no gap and no duplicate
/// and keeps its epoch. A recovered recording whose publication does not come back
/// within [`ArchiverConfig::publication_timeout`] is stopped.
#[derive(Debug)]
pub struct Archiver {
    config: ArchiverConfig,
    _lock: FileLock,
    catalog: Catalog,
    socket: Option<UdpSocket>,
    active: HashMap<(u32, u32), Active>,
    /// Publications that ended, with their end, to answer a repeated `End`.
    ended: HashMap<(u32, u32), u64>,
    rings_seen: HashSet<PathBuf>,
    last_ipc_scan: Option<Instant>,
    last_timer_check: Instant,
    counters: ArchiverCounters,
    datagram: Vec<u8>,
}

impl Archiver {
    /// Opens the archive (creating it), locks it, and recovers the recordings that
    /// were active when a previous archiver stopped without a clean stop.
    pub fn open(config: ArchiverConfig) -> Result<Archiver> {
        let dir = &config.archive_dir;
        let new_archive = !dir.exists();
        fs::create_dir_all(dir).map_err(ArchiveError::io("create the archive directory", dir))?;
        if new_archive {
            let parent = match dir.parent() {
                Some(parent) if !parent.as_os_str().is_empty() => parent,
                _ => Path::new("."),
            };
            mongoose_durable::disk::sync_folder(parent)
                .map_err(ArchiveError::io("sync the archive's parent folder", parent))?;
        }
        let lock_path = dir.join("lock");
        let lock = match FileLock::acquire(&lock_path) {
            Ok(lock) => lock,
            Err(DurableError::Locked { .. }) => {
                return Err(ArchiveError::ArchiveLocked(dir.clone()))
            }
            Err(DurableError::Io { source, .. }) => {
                return Err(ArchiveError::io("open the archive lock", &lock_path)(
                    source,
                ))
            }
            Err(other) => {
                return Err(ArchiveError::io("open the archive lock", &lock_path)(
                    other.into(),
                ))
            }
        };
        if let Some(ipc_dir) = &config.ipc_dir {
            fs::create_dir_all(ipc_dir)
                .map_err(ArchiveError::io("create the IPC directory", ipc_dir))?;
        }
        let socket = match config.udp_bind {
            Some(addr) => {
                let socket = UdpSocket::bind(addr)
                    .map_err(ArchiveError::socket("bind the archiver's UDP socket"))?;
                socket
                    .set_nonblocking(true)
                    .map_err(ArchiveError::socket("make the UDP socket non-blocking"))?;
                set_receive_buffer(&socket, 8 << 20);
                Some(socket)
            }
            None => None,
        };
        let catalog = Catalog::open(dir)?;
        let mut archiver = Archiver {
            _lock: lock,
            catalog,
            socket,
            active: HashMap::new(),
            ended: HashMap::new(),
            rings_seen: HashSet::new(),
            last_ipc_scan: None,
            last_timer_check: Instant::now(),
            counters: ArchiverCounters::default(),
            datagram: vec![0u8; wire::MAX_DATAGRAM + 64],
            config,
        };
        archiver.recover()?;
        Ok(archiver)
    }

    fn recover(&mut self) -> Result<()> {
        let unfinished: Vec<_> = self
            .catalog
            .state
            .recordings
            .values()
            .filter(|recording| recording.stop_position.is_none())
            .map(RecordingIdentity::of)
            .collect();
        for identity in unfinished {
            let RecordingIdentity {
                id,
                stream,
                session,
                ..
            } = identity;
            let (writer, recovered) = SegmentWriter::recover(
                &self.config.archive_dir,
                identity,
                self.config.segment_bytes,
            )?;
            if recovered.torn_bytes > 0 {
                self.catalog.append(CatalogEvent::TornTailCut {
                    id,
                    position: recovered.end,
                    bytes: recovered.torn_bytes,
                })?;
            }
            if recovered.stopped {
                // stopped in the data, the catalog event lost in the crash
                self.catalog.append(CatalogEvent::Stopped {
                    id,
                    stop_position: recovered.end,
                    reason: StopReason::PublicationEnded,
                })?;
                continue;
            }
            tracing::info!(
                recording = id,
                stream,
                session,
                position = recovered.end,
                torn_bytes = recovered.torn_bytes,
                "resuming a recording after a crash of the archiver"
            );
            self.counters.recovered += 1;
            self.active.insert(
                (stream, session),
                Active {
                    id,
                    stream,
                    session,
                    writer,
                    transport: Transport::Awaiting,
                    last_heard: Instant::now(),
                    dirty: false,
                },
            );
        }
        Ok(())
    }

    /// The UDP address publications send to (with the port the system picked).
    pub fn udp_addr(&self) -> Option<SocketAddr> {
        self.socket
            .as_ref()
            .and_then(|socket| socket.local_addr().ok())
    }

    /// Counters of this run.
    pub fn counters(&self) -> ArchiverCounters {
        self.counters
    }

    /// Runs until `stop` is set, then stops every active recording
    /// ([`StopReason::ArchiverStopped`]) and syncs it. The entry point of
    /// `mongoose archive serve`.
    pub fn run_until(&mut self, stop: &AtomicBool) -> Result<()> {
        let mut idle = 0u32;
        while !stop.load(Ordering::Acquire) {
            if self.do_work()? > 0 {
                idle = 0;
            } else {
                idle = idle.saturating_add(1);
                if idle < 100 {
                    std::hint::spin_loop();
                } else if idle < 200 {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(Duration::from_micros(100));
                }
            }
        }
        self.stop()
    }

    /// Stops every active recording and syncs it (what [`Archiver::run_until`] does
    /// at the end).
    pub fn stop(&mut self) -> Result<()> {
        let keys: Vec<_> = self.active.keys().copied().collect();
        for key in keys {
            self.stop_recording(key, StopReason::ArchiverStopped)?;
        }
        Ok(())
    }

    /// One round of work: receive datagrams, read the rings, write the batch, answer.
    /// Returns how much was done (0 when idle).
    pub fn do_work(&mut self) -> Result<usize> {
        let mut work = 0;
        work += self.receive_udp()?;
        work += self.read_rings()?;
        for active in self.active.values_mut() {
            if active.dirty {
                active.writer.flush()?;
            }
        }
        self.after_flush()?;
        if self.last_timer_check.elapsed() >= Duration::from_millis(1) {
            self.last_timer_check = Instant::now();
            self.check_timers()?;
        }
        Ok(work)
    }

    /// Sends the status of the UDP publications that advanced, lets the IPC writers
    /// reuse what was recorded, and ends the publications that are complete.
    fn after_flush(&mut self) -> Result<()> {
        let mut finished = Vec::new();
        for (key, active) in self.active.iter_mut() {
            if !active.dirty {
                continue;
            }
            active.dirty = false;
            let end = active.writer.end();
            match &mut active.transport {
                Transport::Udp(udp) => {
                    if udp.end == Some(end) && udp.held.is_empty() {
                        finished.push(*key);
                    } else if end != udp.status_sent {
                        udp.status_sent = end;
                        if let Some(socket) = &self.socket {
                            send(socket, udp.peer, header(Kind::Status, *key, end), None);
                        }
                    }
                }
                Transport::Ipc(ipc) => {
                    ipc.ring.set_reader_position(end);
                }
                Transport::Awaiting => {}
            }
        }
        for key in finished {
            self.finish_udp(key)?;
        }
        Ok(())
    }

    fn finish_udp(&mut self, key: (u32, u32)) -> Result<()> {
        let peer = match self.active.get(&key).map(|active| &active.transport) {
            Some(Transport::Udp(udp)) => udp.peer,
            _ => return Ok(()),
        };
        let end = self.stop_recording(key, StopReason::PublicationEnded)?;
        self.ended.insert(key, end);
        if let Some(socket) = &self.socket {
            send(socket, peer, header(Kind::EndAck, key, end), None);
        }
        Ok(())
    }

    fn stop_recording(&mut self, key: (u32, u32), reason: StopReason) -> Result<u64> {
        let Some(mut active) = self.active.remove(&key) else {
            return Ok(0);
        };
        active.writer.stop()?;
        let end = active.writer.end();
        self.catalog.append(CatalogEvent::Stopped {
            id: active.id,
            stop_position: end,
            reason,
        })?;
        tracing::info!(recording = active.id, stream = active.stream, session = active.session, position = end, %reason, "recording stopped");
        if let Transport::Ipc(ipc) = &active.transport {
            ipc.ring.set_reader_position(end);
            if reason == StopReason::PublicationEnded {
                if let Err(error) = fs::remove_file(ipc.ring.path()) {
                    tracing::warn!(ring = %ipc.ring.path().display(), %error, "cannot remove a recorded IPC ring");
                }
                self.rings_seen.remove(ipc.ring.path());
            }
        }
        Ok(end)
    }

    /// Makes sure `(stream, session)` has an active recording, starting one at `start`.
    fn ensure_recording(&mut self, key: (u32, u32), start: u64, source: String) -> Result<()> {
        if !self.active.contains_key(&key) {
            let id = self.catalog.state.next_id();
            let identity = RecordingIdentity {
                id,
                stream: key.0,
                session: key.1,
                start_position: start,
                started_unix_ms: now_unix_ms(),
            };
            // the segments name the recording as the catalog's event does
            let writer = SegmentWriter::create(
                &self.config.archive_dir,
                identity,
                self.config.segment_bytes,
            )?;
            self.catalog.append(CatalogEvent::Started {
                id,
                stream: key.0,
                session: key.1,
                start_position: start,
                source: source.clone(),
                started_unix_ms: identity.started_unix_ms,
            })?;
            tracing::info!(recording = id, stream = key.0, session = key.1, start, %source, "recording started");
            self.active.insert(
                key,
                Active {
                    id,
                    stream: key.0,
                    session: key.1,
                    writer,
                    transport: Transport::Awaiting,
                    last_heard: Instant::now(),
                    dirty: false,
                },
            );
        }
        Ok(())
    }

    fn check_timers(&mut self) -> Result<()> {
        let timeout = self.config.publication_timeout;
        let nak_retry = self.config.nak_retry;
        let mut timed_out = Vec::new();
        for (key, active) in self.active.iter_mut() {
            match &mut active.transport {
                Transport::Ipc(_) => {}
                Transport::Awaiting | Transport::Udp(_)
                    if active.last_heard.elapsed() >= timeout =>
                {
                    timed_out.push(*key);
                }
                Transport::Udp(udp) => {
                    let expected = active.writer.end();
                    if let Some((gap_end, at)) = udp.nak {
                        if at.elapsed() >= nak_retry && gap_end > expected {
                            udp.nak = Some((gap_end, Instant::now()));
                            self.counters.naks_sent += 1;
                            if let Some(socket) = &self.socket {
                                send(
                                    socket,
                                    udp.peer,
                                    header(Kind::Nak, *key, expected),
                                    Some(gap_end),
                                );
                            }
                        }
                    }
                }
                Transport::Awaiting => {}
            }
        }
        for key in timed_out {
            tracing::warn!(
                stream = key.0,
                session = key.1,
                "the publication was not heard for the timeout; stopping its recording"
            );
            self.stop_recording(key, StopReason::PublicationTimedOut)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_archive_lock_held_for_an_instant_is_waited_for_and_a_kept_one_refused() {
        // a child forked while the last archiver had the lock keeps it until it execs
        let folder = tempfile::tempdir().expect("folder");
        let held = FileLock::try_acquire(&folder.path().join("lock")).expect("held");
        let letting_go = std::thread::spawn(move || {
            std::thread::sleep(mongoose_durable::lock::PAUSE * 5);
            drop(held);
        });
        let archiver = Archiver::open(ArchiverConfig::new(folder.path()))
            .expect("taken once the instant is over");
        letting_go.join().expect("thread");
        match Archiver::open(ArchiverConfig::new(folder.path())) {
            Err(ArchiveError::ArchiveLocked(_)) => {}
            other => panic!("a kept lock is refused: {:?}", other.err()),
        }
        drop(archiver);
    }
}
