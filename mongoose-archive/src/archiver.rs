//! [`Archiver`]: records UDP and IPC publications into recordings.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::catalog::{now_unix_ms, Catalog, CatalogEvent, StopReason};
use crate::error::{ArchiveError, Result};
use crate::ipc::{Ring, RING_EXTENSION};
use crate::segment::SegmentWriter;
use crate::wire::{self, Header, Kind};

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
    _lock: File,
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
        fs::create_dir_all(dir).map_err(ArchiveError::io("create the archive directory", dir))?;
        let lock_path = dir.join("lock");
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .map_err(ArchiveError::io("open the archive lock", &lock_path))?;
        // SAFETY: flock on a file descriptor this function owns; no memory involved.
        let locked = unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if locked != 0 {
            return Err(ArchiveError::ArchiveLocked(dir.clone()));
        }
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
            .map(|recording| {
                (
                    recording.id,
                    recording.stream,
                    recording.session,
                    recording.start_position,
                )
            })
            .collect();
        for (id, stream, session, start) in unfinished {
            let (writer, recovered) = SegmentWriter::recover(
                &self.config.archive_dir,
                id,
                start,
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
            let writer = SegmentWriter::create(
                &self.config.archive_dir,
                id,
                start,
                self.config.segment_bytes,
            )?;
            self.catalog.append(CatalogEvent::Started {
                id,
                stream: key.0,
                session: key.1,
                start_position: start,
                source: source.clone(),
                started_unix_ms: now_unix_ms(),
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

    fn receive_udp(&mut self) -> Result<usize> {
        let Some(socket) = self.socket.take() else {
            return Ok(0);
        };
        let mut datagram = std::mem::take(&mut self.datagram);
        let mut received = 0;
        let outcome = (|| -> Result<()> {
            while received < 4096 {
                let (len, peer) = match socket.recv_from(&mut datagram) {
                    Ok(received) => received,
                    Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(error) if error.kind() == std::io::ErrorKind::ConnectionRefused => continue,
                    Err(error) => return Err(ArchiveError::socket("receive datagrams")(error)),
                };
                received += 1;
                self.on_datagram(&socket, &datagram[..len], peer)?;
            }
            Ok(())
        })();
        self.datagram = datagram;
        self.socket = Some(socket);
        outcome.map(|()| received)
    }

    fn on_datagram(&mut self, socket: &UdpSocket, datagram: &[u8], peer: SocketAddr) -> Result<()> {
        let Some(header) = wire::header(datagram) else {
            return Ok(());
        };
        let key = (header.stream, header.session);
        if matches!(header.kind, Kind::Data | Kind::Heartbeat | Kind::End) {
            if let Some(&end) = self.ended.get(&key) {
                // the publication ended and was recorded: answer a repeated End only
                if header.kind == Kind::End {
                    send(socket, peer, wire_header(Kind::EndAck, key, end), None);
                }
                return Ok(());
            }
        }
        let hold_limit = self.config.hold_bytes;
        let nak_retry = self.config.nak_retry;
        match header.kind {
            Kind::Data | Kind::Heartbeat | Kind::End | Kind::GapLost => {
                self.ensure_recording(key, 0, format!("udp {peer}"))?
            }
            _ => return Ok(()),
        }
        let Archiver {
            active: actives,
            catalog,
            counters,
            ..
        } = self;
        let active = actives.get_mut(&key).expect("ensured above");
        active.last_heard = Instant::now();
        if !matches!(active.transport, Transport::Udp(_)) {
            let position = active.writer.end();
            active.transport = Transport::Udp(UdpState {
                peer,
                held: BTreeMap::new(),
                held_bytes: 0,
                nak: None,
                announced: position,
                end: None,
                status_sent: u64::MAX,
            });
            active.dirty = true;
        }
        let Transport::Udp(udp) = &mut active.transport else {
            unreachable!("set above")
        };
        udp.peer = peer;
        let expected = active.writer.end();
        match header.kind {
            Kind::Data => {
                let Some(payload) = wire::frame_payload(datagram) else {
                    return Ok(());
                };
                let frame_end = header.position + 4 + payload.len() as u64;
                udp.announced = udp.announced.max(frame_end);
                if header.position == expected {
                    active.writer.append_message(header.position, payload)?;
                    counters.messages += 1;
                    active.dirty = true;
                    drain_held(active, counters)?;
                } else if header.position > expected {
                    if udp.held_bytes + payload.len() <= hold_limit {
                        if udp.held.insert(header.position, payload.to_vec()).is_none() {
                            udp.held_bytes += payload.len();
                        }
                    } else {
                        counters.held_overflow += 1;
                    }
                }
            }
            Kind::Heartbeat => udp.announced = udp.announced.max(header.position),
            Kind::End => {
                udp.announced = udp.announced.max(header.position);
                udp.end = Some(header.position);
                active.dirty = true;
            }
            Kind::GapLost => {
                let Some(to) = wire::range_end(datagram) else {
                    return Ok(());
                };
                if header.position <= expected && to > expected {
                    tracing::warn!(
                        recording = active.id,
                        stream = key.0,
                        session = key.1,
                        from = expected,
                        to,
                        "the publication lost a gap (it left its retransmit buffer); recording it as lost"
                    );
                    active.writer.append_gap(expected, to)?;
                    catalog.append(CatalogEvent::Gap {
                        id: active.id,
                        from: expected,
                        to,
                    })?;
                    counters.gaps_recorded += 1;
                    active.dirty = true;
                    if let Transport::Udp(udp) = &mut active.transport {
                        udp.nak = None;
                    }
                    drain_held(active, counters)?;
                }
            }
            _ => {}
        }
        // a gap: ask for it (again, when the last ask is old)
        let expected = active.writer.end();
        let Transport::Udp(udp) = &mut active.transport else {
            unreachable!("set above")
        };
        let gap_end = udp.held.keys().next().copied().unwrap_or(udp.announced);
        if gap_end > expected {
            let due = match udp.nak {
                Some((asked_to, at)) => asked_to != gap_end || at.elapsed() >= nak_retry,
                None => true,
            };
            if due {
                udp.nak = Some((gap_end, Instant::now()));
                counters.naks_sent += 1;
                send(
                    socket,
                    udp.peer,
                    wire_header(Kind::Nak, key, expected),
                    Some(gap_end),
                );
            }
        } else {
            udp.nak = None;
        }
        Ok(())
    }

    fn read_rings(&mut self) -> Result<usize> {
        let Some(ipc_dir) = self.config.ipc_dir.clone() else {
            return Ok(0);
        };
        if self
            .last_ipc_scan
            .is_none_or(|at| at.elapsed() >= self.config.ipc_scan_interval)
        {
            self.last_ipc_scan = Some(Instant::now());
            self.scan_rings(&ipc_dir)?;
        }
        let mut work = 0;
        let mut finished = Vec::new();
        for (key, active) in self.active.iter_mut() {
            let Transport::Ipc(ipc) = &mut active.transport else {
                continue;
            };
            let mut position = active.writer.end();
            let writer = &mut active.writer;
            let frames =
                ipc.ring
                    .read_frames(&mut position, 4096, &mut ipc.scratch, |at, payload| {
                        writer.append_message(at, payload)
                    })?;
            if frames > 0 {
                self.counters.messages += frames as u64;
                active.dirty = true;
                active.last_heard = Instant::now();
                work += frames;
            } else if ipc.ring.is_closed() && position == ipc.ring.write_position() {
                finished.push(*key);
            }
        }
        for key in finished {
            self.stop_recording(key, StopReason::PublicationEnded)?;
        }
        Ok(work)
    }

    fn scan_rings(&mut self, ipc_dir: &Path) -> Result<()> {
        let entries =
            fs::read_dir(ipc_dir).map_err(ArchiveError::io("list the IPC directory", ipc_dir))?;
        for entry in entries {
            let entry = entry.map_err(ArchiveError::io("list the IPC directory", ipc_dir))?;
            let path = entry.path();
            if path.extension().and_then(|ext| ext.to_str()) != Some(RING_EXTENSION)
                || self.rings_seen.contains(&path)
            {
                continue;
            }
            let ring = match Ring::open(&path) {
                Ok(ring) => ring,
                Err(error) => {
                    tracing::warn!(ring = %path.display(), %error, "cannot open an IPC ring; skipping it");
                    self.rings_seen.insert(path);
                    continue;
                }
            };
            self.rings_seen.insert(path.clone());
            let key = (ring.stream(), ring.session());
            let start = ring.reader_position();
            let source = format!("ipc {}", path.display());
            self.ensure_recording(key, start, source)?;
            let active = self.active.get_mut(&key).expect("ensured above");
            let from = active.writer.end();
            // The previous reader position is a frame start, and the writer never
            // overwrote anything after it; bytes before it may be overwritten.
            let released = ring.reader_position();
            // the writer may reuse nothing before `from` from now on
            ring.set_reader_position(from.min(released));
            let oldest_intact = ring.write_position().saturating_sub(ring.capacity());
            if from < oldest_intact && from < released {
                // the recording lost a tail the ring had already released (a power
                // loss took unsynced segment bytes): the ring resumes at the released
                // position, a frame start; what lies between is recorded as lost
                tracing::warn!(
                    recording = active.id,
                    from,
                    to = released,
                    "the IPC ring no longer holds the cut tail; recording it as lost"
                );
                active.writer.append_gap(from, released)?;
                self.catalog.append(CatalogEvent::Gap {
                    id: active.id,
                    from,
                    to: released,
                })?;
                self.counters.gaps_recorded += 1;
                ring.set_reader_position(released);
            }
            tracing::info!(recording = active.id, ring = %path.display(), from = active.writer.end(), "recording an IPC ring");
            active.transport = Transport::Ipc(IpcState {
                ring,
                scratch: Vec::new(),
            });
            active.last_heard = Instant::now();
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

/// Appends the held datagrams that are next in order.
fn drain_held(active: &mut Active, counters: &mut ArchiverCounters) -> Result<()> {
    let Transport::Udp(udp) = &mut active.transport else {
        return Ok(());
    };
    loop {
        let expected = active.writer.end();
        // drop what the gap-lost range or a retransmit already covered
        while let Some((&position, _)) = udp.held.first_key_value() {
            if position >= expected {
                break;
            }
            let (_, payload) = udp.held.pop_first().expect("a first entry");
            udp.held_bytes -= payload.len();
        }
        match udp.held.first_key_value() {
            Some((&position, _)) if position == expected => {
                let (_, payload) = udp.held.pop_first().expect("a first entry");
                udp.held_bytes -= payload.len();
                active.writer.append_message(position, &payload)?;
                counters.messages += 1;
            }
            _ => return Ok(()),
        }
    }
}

fn header(kind: Kind, key: (u32, u32), position: u64) -> Header {
    Header {
        kind,
        stream: key.0,
        session: key.1,
        position,
    }
}

fn wire_header(kind: Kind, key: (u32, u32), position: u64) -> Header {
    header(kind, key, position)
}

fn send(socket: &UdpSocket, peer: SocketAddr, header: Header, to: Option<u64>) {
    let (buf, len) = wire::control(header, to);
    if let Err(error) = socket.send_to(&buf[..len], peer) {
        tracing::debug!(%peer, %error, "cannot send a control datagram; it is sent again when due");
    }
}

fn set_receive_buffer(socket: &UdpSocket, bytes: libc::c_int) {
    // SAFETY: setsockopt on a socket this process owns, with a pointer to a c_int that
    // lives for the call and its exact size.
    let outcome = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&bytes as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if outcome != 0 {
        tracing::debug!("cannot enlarge the UDP receive buffer; losses are repaired by NAKs");
    }
}
