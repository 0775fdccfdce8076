//! [`UdpPublication`]: length-framed messages over UDP, with a retransmit buffer that
//! answers the archiver's NAKs, and "gap lost" when a gap has left it.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use crate::error::{ArchiveError, Result};
use crate::wire::{self, Header, Kind, HEADER_LEN, MAX_UDP_MESSAGE};
use crate::{Offer, Publication};

/// The default retransmit buffer: one Aeron term, 16 MiB.
pub const DEFAULT_RETRANSMIT_BUFFER: usize = 16 << 20;

/// Loss injected on purpose, for tests and drills: the publication does not send some
/// `Data` datagrams the first time (a retransmit is always sent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LossInjection {
    /// Drop every `drop_every`-th data datagram on its first send (1-based: 3 drops the
    /// 3rd, 6th, ...). 0 drops nothing.
    pub drop_every: u64,
}

/// How a [`UdpPublication`] behaves.
#[derive(Debug, Clone)]
pub struct UdpPublicationConfig {
    /// Bytes of the stream kept for retransmission (whole frames; the oldest leave
    /// first). A NAK for bytes that left it is answered with "gap lost".
    pub retransmit_buffer_bytes: usize,
    /// Flow control: the publication runs at most this many bytes ahead of what the
    /// archiver reported recorded, and [`Publication::offer`] answers
    /// [`Offer::BackPressured`] beyond. `None` turns flow control off: then data may
    /// leave the retransmit buffer before the archiver has it, and such a loss is
    /// reported as a gap (never silent). Keep it at most `retransmit_buffer_bytes`
    /// for a stream without losses.
    pub flow_control_window: Option<u64>,
    /// Offers between two reads of the control socket (NAKs, status).
    pub control_poll_interval: u32,
    /// An idle publication tells the archiver its position this often, so a lost
    /// last datagram is noticed.
    pub heartbeat_interval: Duration,
    /// How long [`Publication::close`] waits for the archiver to confirm the end.
    pub linger: Duration,
    /// Loss injected on purpose (tests and drills).
    pub loss: Option<LossInjection>,
}

impl Default for UdpPublicationConfig {
    fn default() -> Self {
        UdpPublicationConfig {
            retransmit_buffer_bytes: DEFAULT_RETRANSMIT_BUFFER,
            flow_control_window: Some((DEFAULT_RETRANSMIT_BUFFER / 2) as u64),
            control_poll_interval: 64,
            heartbeat_interval: Duration::from_millis(50),
            linger: Duration::from_secs(10),
            loss: None,
        }
    }
}

/// A publication of length-framed messages on `(stream, session)` over UDP.
///
/// The position of a message is the byte position of its frame in the stream; each
/// message advances it by `4 + len` (the frame's length prefix and the payload). The
/// position after the last offered message is [`Publication::position`]. Aeron's
/// term id and offset are `position / term_length` and `position % term_length`.
///
/// The publication does its own work when called: it reads NAKs and status messages
/// from the archiver every [`UdpPublicationConfig::control_poll_interval`] offers and
/// in [`UdpPublication::service`], which an idle publisher should call now and then
/// (it also sends heartbeats).
#[derive(Debug)]
pub struct UdpPublication {
    socket: UdpSocket,
    stream: u32,
    session: u32,
    config: UdpPublicationConfig,
    buffer: RetransmitBuffer,
    status: u64,
    offers_since_poll: u32,
    data_datagrams: u64,
    last_send: Instant,
    end_acknowledged: bool,
    closed: bool,
    datagram: Vec<u8>,
    retransmitted: u64,
    gaps_lost: u64,
}

impl UdpPublication {
    /// Connects a publication to an archiver's UDP address, with the default
    /// configuration.
    pub fn connect(archiver: SocketAddr, stream: u32, session: u32) -> Result<UdpPublication> {
        UdpPublication::connect_with(archiver, stream, session, UdpPublicationConfig::default())
    }

    /// Connects a publication with a configuration.
    pub fn connect_with(
        archiver: SocketAddr,
        stream: u32,
        session: u32,
        config: UdpPublicationConfig,
    ) -> Result<UdpPublication> {
        let local: SocketAddr = if archiver.is_ipv4() {
            "0.0.0.0:0".parse().expect("an address")
        } else {
            "[::]:0".parse().expect("an address")
        };
        let socket = UdpSocket::bind(local).map_err(ArchiveError::socket("bind a UDP socket"))?;
        socket.connect(archiver).map_err(ArchiveError::socket(
            "connect the UDP socket to the archiver",
        ))?;
        socket
            .set_nonblocking(true)
            .map_err(ArchiveError::socket("make the UDP socket non-blocking"))?;
        Ok(UdpPublication {
            socket,
            stream,
            session,
            buffer: RetransmitBuffer::new(config.retransmit_buffer_bytes),
            config,
            status: 0,
            offers_since_poll: 0,
            data_datagrams: 0,
            last_send: Instant::now(),
            end_acknowledged: false,
            closed: false,
            datagram: vec![0u8; wire::MAX_DATAGRAM],
            retransmitted: 0,
            gaps_lost: 0,
        })
    }

    /// The local address the publication sends from (where NAKs come back).
    pub fn local_addr(&self) -> Result<SocketAddr> {
        self.socket
            .local_addr()
            .map_err(ArchiveError::socket("read the local address"))
    }

    /// Reads the archiver's NAKs and status messages and answers them; sends a
    /// heartbeat when nothing was sent for a while. Returns the number of control
    /// messages handled.
    pub fn service(&mut self) -> Result<usize> {
        let handled = self.poll_control()?;
        if self.last_send.elapsed() >= self.config.heartbeat_interval {
            let kind = if self.closed {
                Kind::End
            } else {
                Kind::Heartbeat
            };
            self.send_control(kind, self.buffer.end, None);
        }
        Ok(handled)
    }

    /// The position the archiver last reported recorded.
    pub fn archiver_position(&self) -> u64 {
        self.status
    }

    /// Frames sent again in answer to NAKs.
    pub fn retransmitted(&self) -> u64 {
        self.retransmitted
    }

    /// Gaps answered with "gap lost" (they had left the retransmit buffer).
    pub fn gaps_lost(&self) -> u64 {
        self.gaps_lost
    }

    fn header(&self, kind: Kind, position: u64) -> Header {
        Header {
            kind,
            stream: self.stream,
            session: self.session,
            position,
        }
    }

    fn send_control(&mut self, kind: Kind, position: u64, to: Option<u64>) {
        let (buf, len) = wire::control(self.header(kind, position), to);
        self.send_raw_owned(&buf[..len]);
    }

    fn send_raw_owned(&mut self, bytes: &[u8]) {
        // A send that fails (no archiver yet: connection refused; a full socket
        // buffer) loses nothing: the frame is in the retransmit buffer and the
        // archiver asks for it again when it sees the gap.
        if let Err(error) = self.socket.send(bytes) {
            tracing::trace!(%error, "udp send failed; the archiver will ask again");
        }
        self.last_send = Instant::now();
    }

    fn poll_control(&mut self) -> Result<usize> {
        self.offers_since_poll = 0;
        let mut handled = 0;
        let mut buf = [0u8; 64];
        loop {
            let len = match self.socket.recv(&mut buf) {
                Ok(len) => len,
                Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => break,
                // ICMP "port unreachable" from an earlier send: no archiver yet
                Err(error) if error.kind() == std::io::ErrorKind::ConnectionRefused => continue,
                Err(error) => return Err(ArchiveError::socket("read the control socket")(error)),
            };
            let Some(header) = wire::header(&buf[..len]) else {
                continue;
            };
            if header.stream != self.stream || header.session != self.session {
                continue;
            }
            handled += 1;
            match header.kind {
                Kind::Nak => {
                    if let Some(to) = wire::range_end(&buf[..len]) {
                        self.retransmit(header.position, to);
                    }
                }
                Kind::Status => self.status = self.status.max(header.position),
                Kind::EndAck => {
                    self.status = self.status.max(header.position);
                    if header.position == self.buffer.end {
                        self.end_acknowledged = true;
                    }
                }
                _ => {}
            }
        }
        Ok(handled)
    }

    fn retransmit(&mut self, from: u64, to: u64) {
        // at most 1 MiB per NAK: the archiver asks again for the rest (a restarted
        // archiver asking for a whole window must not overflow the socket buffers)
        let to = to.min(self.buffer.end).min(from.saturating_add(1 << 20));
        if from >= to {
            return;
        }
        let mut position = from;
        if position < self.buffer.start {
            let lost_to = to.min(self.buffer.start);
            tracing::warn!(
                stream = self.stream,
                session = self.session,
                from = position,
                to = lost_to,
                "a gap left the retransmit buffer; telling the archiver it is lost"
            );
            self.gaps_lost += 1;
            self.send_control(Kind::GapLost, position, Some(lost_to));
            position = lost_to;
        }
        let mut datagram = std::mem::take(&mut self.datagram);
        while position < to {
            let frame_len = self.buffer.frame_len(position);
            let total = 4 + frame_len;
            wire::put_header(&mut datagram, self.header(Kind::Data, position));
            self.buffer
                .read(position, &mut datagram[HEADER_LEN..HEADER_LEN + total]);
            self.send_raw_owned(&datagram[..HEADER_LEN + total]);
            self.retransmitted += 1;
            position += total as u64;
        }
        self.datagram = datagram;
    }
}

impl Publication for UdpPublication {
    fn offer(&mut self, message: &[u8]) -> Result<Offer> {
        if message.len() > MAX_UDP_MESSAGE {
            return Err(ArchiveError::MessageTooLarge {
                len: message.len(),
                max: MAX_UDP_MESSAGE,
            });
        }
        let frame = 4 + message.len() as u64;
        if let Some(window) = self.config.flow_control_window {
            if self.buffer.end + frame > self.status + window {
                self.service()?;
                if self.buffer.end + frame > self.status + window {
                    return Ok(Offer::BackPressured);
                }
            }
        }
        let position = self.buffer.end;
        let len_bytes = (message.len() as u32).to_le_bytes();
        self.buffer.append(&len_bytes, message);
        self.data_datagrams += 1;
        let dropped = self
            .config
            .loss
            .is_some_and(|loss| loss.drop_every != 0 && self.data_datagrams % loss.drop_every == 0);
        if !dropped {
            let mut datagram = std::mem::take(&mut self.datagram);
            wire::put_header(&mut datagram, self.header(Kind::Data, position));
            datagram[HEADER_LEN..HEADER_LEN + 4].copy_from_slice(&len_bytes);
            datagram[HEADER_LEN + 4..HEADER_LEN + 4 + message.len()].copy_from_slice(message);
            self.send_raw_owned(&datagram[..HEADER_LEN + 4 + message.len()]);
            self.datagram = datagram;
        }
        self.offers_since_poll += 1;
        if self.offers_since_poll >= self.config.control_poll_interval {
            self.poll_control()?;
        }
        Ok(Offer::Accepted {
            position: self.buffer.end,
        })
    }

    fn position(&self) -> u64 {
        self.buffer.end
    }

    fn stream_id(&self) -> u32 {
        self.stream
    }

    fn session_id(&self) -> u32 {
        self.session
    }

    fn close(&mut self) -> Result<bool> {
        self.closed = true;
        let deadline = Instant::now() + self.config.linger;
        let mut last_end: Option<Instant> = None;
        while !self.end_acknowledged && Instant::now() < deadline {
            if last_end.is_none_or(|sent| sent.elapsed() >= Duration::from_millis(20)) {
                self.send_control(Kind::End, self.buffer.end, None);
                last_end = Some(Instant::now());
            }
            if self.poll_control()? == 0 {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        if !self.end_acknowledged {
            tracing::warn!(
                stream = self.stream,
                session = self.session,
                position = self.buffer.end,
                "the archiver did not confirm the end of the publication"
            );
        }
        Ok(self.end_acknowledged)
    }
}

/// The last bytes of the stream, whole frames only, for retransmission.
#[derive(Debug)]
struct RetransmitBuffer {
    bytes: Vec<u8>,
    /// The stream position of the oldest frame kept (a frame start).
    start: u64,
    /// The stream position after the newest frame.
    end: u64,
}

impl RetransmitBuffer {
    fn new(capacity: usize) -> RetransmitBuffer {
        RetransmitBuffer {
            bytes: vec![0u8; capacity],
            start: 0,
            end: 0,
        }
    }

    fn append(&mut self, len_bytes: &[u8; 4], payload: &[u8]) {
        let frame = 4 + payload.len() as u64;
        let capacity = self.bytes.len() as u64;
        if frame > capacity {
            self.end += frame;
            self.start = self.end;
            return;
        }
        while self.end + frame - self.start > capacity {
            let oldest = self.frame_len(self.start) as u64;
            self.start += 4 + oldest;
        }
        let end = self.end;
        self.write(end, len_bytes);
        self.write(end + 4, payload);
        self.end += frame;
    }

    fn write(&mut self, position: u64, data: &[u8]) {
        let capacity = self.bytes.len();
        let at = (position % capacity as u64) as usize;
        let first = data.len().min(capacity - at);
        self.bytes[at..at + first].copy_from_slice(&data[..first]);
        self.bytes[..data.len() - first].copy_from_slice(&data[first..]);
    }

    fn read(&self, position: u64, out: &mut [u8]) {
        let capacity = self.bytes.len();
        let at = (position % capacity as u64) as usize;
        let first = out.len().min(capacity - at);
        out[..first].copy_from_slice(&self.bytes[at..at + first]);
        let rest = out.len() - first;
        out[first..].copy_from_slice(&self.bytes[..rest]);
    }

    fn frame_len(&self, position: u64) -> usize {
        let mut len = [0u8; 4];
        self.read(position, &mut len);
        u32::from_le_bytes(len) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_retransmit_buffer_keeps_whole_frames_and_drops_the_oldest() {
        let mut buffer = RetransmitBuffer::new(64);
        for index in 0..10u8 {
            let payload = [index; 10];
            buffer.append(&10u32.to_le_bytes(), &payload);
        }
        assert_eq!(buffer.end, 140);
        // 64 bytes hold 4 frames of 14
        assert_eq!(buffer.start, 84);
        let mut frame = [0u8; 14];
        buffer.read(84, &mut frame);
        assert_eq!(buffer.frame_len(84), 10);
        assert_eq!(frame[4..], [6u8; 10]);
    }
}
