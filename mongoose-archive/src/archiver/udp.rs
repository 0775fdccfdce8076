//! The archiver's UDP side: receiving datagrams, recording them in order, asking for
//! what is missing (NAKs) and telling the publisher what is recorded.

use crate::catalog::CatalogEvent;
use crate::error::{ArchiveError, Result};
use crate::wire::{self, Header, Kind};
use std::collections::BTreeMap;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Instant;

use super::{Active, Archiver, ArchiverCounters, Transport, UdpState};

impl Archiver {
    pub(super) fn receive_udp(&mut self) -> Result<usize> {
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
}

/// Appends the held datagrams that are next in order.
pub(super) fn drain_held(active: &mut Active, counters: &mut ArchiverCounters) -> Result<()> {
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

pub(super) fn header(kind: Kind, key: (u32, u32), position: u64) -> Header {
    Header {
        kind,
        stream: key.0,
        session: key.1,
        position,
    }
}

pub(super) fn wire_header(kind: Kind, key: (u32, u32), position: u64) -> Header {
    header(kind, key, position)
}

pub(super) fn send(socket: &UdpSocket, peer: SocketAddr, header: Header, to: Option<u64>) {
    let (buf, len) = wire::control(header, to);
    if let Err(error) = socket.send_to(&buf[..len], peer) {
        tracing::debug!(%peer, %error, "cannot send a control datagram; it is sent again when due");
    }
}

pub(super) fn set_receive_buffer(socket: &UdpSocket, bytes: libc::c_int) {
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
