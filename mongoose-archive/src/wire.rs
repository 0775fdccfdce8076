//! The UDP datagram format between a [`crate::UdpPublication`] and an
//! [`crate::Archiver`].
//!
//! Every datagram starts with a 24-byte little-endian header:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 2 | magic `0x4D41` |
//! | 2 | 1 | version (1) |
//! | 3 | 1 | kind ([`Kind`]) |
//! | 4 | 4 | stream id |
//! | 8 | 4 | session id |
//! | 12 | 4 | reserved (0) |
//! | 16 | 8 | a stream position (meaning per kind) |
//!
//! A `Data` datagram carries, after the header, one frame `[len: u32][payload]` that
//! starts at the header's position. `Nak` and `GapLost` carry the end of the range
//! (`u64`) after the header.

/// The datagram magic.
pub(crate) const MAGIC: u16 = 0x4D41;
/// The datagram format version.
pub(crate) const VERSION: u8 = 1;
/// The header length.
pub(crate) const HEADER_LEN: usize = 24;
/// The largest UDP payload a publication sends (loopback carries up to 64 KiB).
pub(crate) const MAX_DATAGRAM: usize = 65_507;
/// The largest message a UDP publication accepts.
pub(crate) const MAX_UDP_MESSAGE: usize = MAX_DATAGRAM - HEADER_LEN - 4;

/// The kinds of datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    /// Publisher -> archiver: one frame at the position.
    Data = 1,
    /// Publisher -> archiver: "my stream ends at the position" (sent when idle).
    Heartbeat = 2,
    /// Publisher -> archiver: the publication is closed at the position.
    End = 3,
    /// Archiver -> publisher: please send again `[position, to)`.
    Nak = 4,
    /// Publisher -> archiver: `[position, to)` left the retransmit buffer: it is lost.
    GapLost = 5,
    /// Archiver -> publisher: recorded up to the position (flow control).
    Status = 6,
    /// Archiver -> publisher: the recording holds everything up to the end position.
    EndAck = 7,
}

impl Kind {
    fn from_u8(value: u8) -> Option<Kind> {
        Some(match value {
            1 => Kind::Data,
            2 => Kind::Heartbeat,
            3 => Kind::End,
            4 => Kind::Nak,
            5 => Kind::GapLost,
            6 => Kind::Status,
            7 => Kind::EndAck,
            _ => return None,
        })
    }
}

/// A decoded datagram header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) kind: Kind,
    pub(crate) stream: u32,
    pub(crate) session: u32,
    pub(crate) position: u64,
}

/// Writes a header into the first [`HEADER_LEN`] bytes of `buf`.
pub(crate) fn put_header(buf: &mut [u8], header: Header) {
    buf[0..2].copy_from_slice(&MAGIC.to_le_bytes());
    buf[2] = VERSION;
    buf[3] = header.kind as u8;
    buf[4..8].copy_from_slice(&header.stream.to_le_bytes());
    buf[8..12].copy_from_slice(&header.session.to_le_bytes());
    buf[12..16].copy_from_slice(&0u32.to_le_bytes());
    buf[16..24].copy_from_slice(&header.position.to_le_bytes());
}

/// Encodes a control datagram (no frame), with an optional range end.
pub(crate) fn control(header: Header, to: Option<u64>) -> ([u8; HEADER_LEN + 8], usize) {
    let mut buf = [0u8; HEADER_LEN + 8];
    put_header(&mut buf, header);
    match to {
        Some(to) => {
            buf[HEADER_LEN..].copy_from_slice(&to.to_le_bytes());
            (buf, HEADER_LEN + 8)
        }
        None => (buf, HEADER_LEN),
    }
}

/// Decodes a header; `None` for a datagram that is not ours.
pub(crate) fn header(buf: &[u8]) -> Option<Header> {
    if buf.len() < HEADER_LEN || u16::from_le_bytes([buf[0], buf[1]]) != MAGIC || buf[2] != VERSION
    {
        return None;
    }
    Some(Header {
        kind: Kind::from_u8(buf[3])?,
        stream: u32::from_le_bytes(buf[4..8].try_into().ok()?),
        session: u32::from_le_bytes(buf[8..12].try_into().ok()?),
        position: u64::from_le_bytes(buf[16..24].try_into().ok()?),
    })
}

/// The range end of a `Nak` or `GapLost` datagram.
pub(crate) fn range_end(buf: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(
        buf.get(HEADER_LEN..HEADER_LEN + 8)?.try_into().ok()?,
    ))
}

/// The payload of a `Data` datagram's frame.
pub(crate) fn frame_payload(buf: &[u8]) -> Option<&[u8]> {
    let len = u32::from_le_bytes(buf.get(HEADER_LEN..HEADER_LEN + 4)?.try_into().ok()?) as usize;
    buf.get(HEADER_LEN + 4..HEADER_LEN + 4 + len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_round_trips() {
        let header_in = Header {
            kind: Kind::Nak,
            stream: 7,
            session: 9,
            position: 1 << 40,
        };
        let (buf, len) = control(header_in, Some(99));
        assert_eq!(len, 32);
        assert_eq!(header(&buf[..len]), Some(header_in));
        assert_eq!(range_end(&buf[..len]), Some(99));
    }
}
