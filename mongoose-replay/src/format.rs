//! The on-disk format of a replay store: its head, its frames and the wire types inside
//! them. The wire types are this module's own, so a change to [`Entry`] or to
//! `mongoose_core::Delivery` never changes the format silently; the layout tests pin it.

use std::borrow::Cow;
use std::sync::Arc;

use mongoose_core::{Delivery, Epoch, PositionValue};
use mongoose_durable::header::Header;
use mongoose_durable::log::{self, FrameFault};
use serde::{Deserialize, Serialize};
use std::path::Path;

use crate::entry::{ControlOutcome, Entry, Provenance};
use crate::error::ReplayError;

/// The format name in a store's header (the durable layer's, `mongoose_durable::header`).
pub const FORMAT_NAME: &str = "mongoose-replay-store";

/// The first 8 bytes of a store of the earlier head (format versions 1 and 2), still
/// read.
pub const MAGIC: [u8; 8] = *b"MGREPLAY";

/// The format version this build writes and the newest it reads. Version 3 opens with
/// the durable layer's header (its frames are those of version 2); version 2 added the
/// closing frame; version 1 stores (no closing frame) are still read, as incomplete.
pub const FORMAT_VERSION: u32 = 3;

/// The first format version with a closing frame.
pub(crate) const CLOSING_FRAME_VERSION: u32 = 2;

/// The head this build writes: the durable layer's header (magic `MGDH` 4, length 2,
/// version 4, name length 1, [`FORMAT_NAME`], owner length 1 = 0, CRC-32 4).
pub const HEADER_LEN: usize = 4 + 2 + 4 + 1 + FORMAT_NAME.len() + 1 + 4;

/// The earlier head (format versions 1 and 2): [`MAGIC`], then the format version as a
/// little-endian `u32`.
pub const EARLIER_HEADER_LEN: usize = 12;

/// A frame's own head: the body's length, then the checksum, each a little-endian `u32`.
pub const FRAME_HEAD_LEN: usize = 8;

/// The largest frame body (16 MiB).
pub const MAX_FRAME_LEN: usize = 16 << 20;

/// The head of a store of this build's version.
pub(crate) fn header() -> [u8; HEADER_LEN] {
    let bytes = Header::new(FORMAT_NAME, FORMAT_VERSION, Vec::new())
        .encode()
        .expect("a format name within the layer's limits");
    bytes.try_into().expect("HEADER_LEN bytes")
}

/// What a file's head says.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Head {
    /// No head, or a head torn while the store was being created: an empty store.
    Empty,
    /// A store of a version this build reads.
    Store {
        /// Its format version (1 ..= [`FORMAT_VERSION`]).
        version: u32,
        /// Where its first frame starts.
        len: usize,
    },
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum HeadError {
    NotAStore(&'static str),
    Newer(u32),
}

pub(crate) fn check_head(bytes: &[u8]) -> Result<Head, HeadError> {
    let layer_magic = &mongoose_durable::header::MAGIC;
    let prefix_of = |head: &[u8]| bytes.len() < head.len() && bytes == &head[..bytes.len()];
    // a head cut short while the store was created (this build's, or the earlier one's
    // magic): an empty store
    let earlier_magic_part = &bytes[..bytes.len().min(MAGIC.len())];
    if prefix_of(&header())
        || (bytes.len() < EARLIER_HEADER_LEN
            && earlier_magic_part == &MAGIC[..earlier_magic_part.len()])
    {
        return Ok(Head::Empty);
    }
    if bytes.starts_with(layer_magic) {
        return check_layer_head(bytes);
    }
    if bytes.len() < EARLIER_HEADER_LEN || bytes[..8] != MAGIC {
        return Err(HeadError::NotAStore(
            "it starts with neither the durable layer's header nor the store's earlier magic",
        ));
    }
    let version = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
    if version == 0 {
        return Err(HeadError::NotAStore("its format version is 0"));
    }
    if version >= FORMAT_VERSION {
        // no build wrote the earlier head with a later version: a newer layout
        return Err(HeadError::Newer(version));
    }
    Ok(Head::Store {
        version,
        len: EARLIER_HEADER_LEN,
    })
}

/// Checks a head of the durable layer's (format version 3 and later).
fn check_layer_head(bytes: &[u8]) -> Result<Head, HeadError> {
    let (found, len) = match Header::decode(Path::new(""), bytes) {
        Ok(found) => found,
        Err(mongoose_durable::DurableError::DamagedHeader { reason, .. }) => {
            return Err(HeadError::NotAStore(reason))
        }
        Err(_) => return Err(HeadError::NotAStore("its header cannot be read")),
    };
    if found.format != FORMAT_NAME {
        return Err(HeadError::NotAStore(
            "its header names another format than a replay store",
        ));
    }
    if found.version > FORMAT_VERSION {
        return Err(HeadError::Newer(found.version));
    }
    if found.version < FORMAT_VERSION {
        return Err(HeadError::NotAStore(
            "its header names a format version that only the earlier head carries",
        ));
    }
    if !found.owner.is_empty() {
        return Err(HeadError::NotAStore("its header names an owner"));
    }
    Ok(Head::Store {
        version: found.version,
        len,
    })
}

/// Appends one frame holding `frame` to `buffer`: the durable layer's frame
/// (`mongoose_durable::log`: the body's length, the CRC-32 of the length bytes then the
/// body, the body), built in place. On an error `buffer` is as it was.
pub(crate) fn push_frame(buffer: &mut Vec<u8>, frame: &WireFrame<'_>) -> Result<(), ReplayError> {
    let encode_error = |error: postcard::Error| ReplayError::Encode {
        reason: error.to_string(),
    };
    // measure first: an oversized entry is refused without building it, and the body is
    // then written into place in one pass
    let body_len = postcard::experimental::serialized_size(frame).map_err(encode_error)?;
    if body_len > MAX_FRAME_LEN {
        return Err(ReplayError::FrameTooLarge {
            size: body_len,
            limit: MAX_FRAME_LEN,
        });
    }
    let start = buffer.len();
    let framed = log::begin_frame(buffer);
    buffer.resize(start + FRAME_HEAD_LEN + body_len, 0);
    let written = postcard::to_slice(frame, &mut buffer[start + FRAME_HEAD_LEN..])
        .map(|body| body.len())
        .map_err(encode_error);
    if written.as_ref().ok() != Some(&body_len) {
        buffer.truncate(start);
        return Err(written.err().unwrap_or_else(|| ReplayError::Encode {
            reason: "the encoded size differs from the measured one".to_owned(),
        }));
    }
    // body_len <= MAX_FRAME_LEN, under the layer's limit
    log::finish_frame(buffer, framed).map_err(|error| ReplayError::Encode {
        reason: error.to_string(),
    })?;
    Ok(())
}

/// Appends a frame around an arbitrary `body` (tests of the reader).
#[cfg(test)]
pub(crate) fn push_raw_frame_for_tests(buffer: &mut Vec<u8>, body: &[u8]) {
    let framed = log::begin_frame(buffer);
    buffer.extend_from_slice(body);
    log::finish_frame(buffer, framed).expect("a body under the layer's limit");
}

/// One step of reading the frames.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum FrameRead<'a> {
    /// A frame whose checksum holds; the next frame starts at `next`.
    Frame { body: &'a [u8], next: usize },
    /// The end of the file, exactly at a frame boundary.
    End,
    /// The frame runs past the end of the file: a write was interrupted.
    Torn,
    /// The frame is damaged.
    Damaged(&'static str),
}

/// Reads the frame at `offset` (the durable layer's frame, with the store's own limits:
/// a body of 1 ..= [`MAX_FRAME_LEN`] bytes).
pub(crate) fn read_frame(bytes: &[u8], offset: usize) -> FrameRead<'_> {
    let rest = &bytes[offset.min(bytes.len())..];
    if rest.is_empty() {
        return FrameRead::End;
    }
    if rest.len() < FRAME_HEAD_LEN {
        return FrameRead::Torn;
    }
    let body_len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
    if body_len == 0 || body_len > MAX_FRAME_LEN {
        return FrameRead::Damaged("a frame length of 0 or past the limit");
    }
    match log::read_frame(bytes, offset) {
        Ok(frame) => FrameRead::Frame {
            body: frame.payload,
            next: frame.next,
        },
        Err(FrameFault::CutShort(_)) => FrameRead::Torn,
        Err(FrameFault::Bad(_)) => FrameRead::Damaged("a frame whose checksum does not match"),
    }
}

pub(crate) fn decode_frame(body: &[u8]) -> Result<WireFrame<'static>, &'static str> {
    match postcard::take_from_bytes::<WireFrame<'static>>(body) {
        Ok((frame, [])) => Ok(frame),
        Ok(_) => Err("a frame with bytes after its content"),
        Err(_) => Err("a frame this build cannot decode"),
    }
}

/// A frame's content. postcard writes the variant's index as a varint, then the fields
/// in order (see the crate documentation for the exact layout).
#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
pub(crate) enum WireFrame<'a> {
    /// 0: a stream begins; later frames name it by `id` (0, 1, 2, ... in file order).
    Stream {
        id: u32,
        key: Cow<'a, str>,
        provenance: Option<WireProvenance<'a>>,
    },
    /// 1: the delivery of the input whose frame follows it immediately.
    Delivery {
        stream: u32,
        delivery: WireDelivery<'a>,
    },
    /// 2: an entry of a stream.
    Entry { stream: u32, entry: WireEntry<'a> },
    /// 3 (format 2): the closing frame, written once at a clean close, always the last
    /// frame. `frames` counts every frame before it, `entries` the `Entry` frames among
    /// them, and `checksum` is the CRC-32 of the 8-byte heads of those frames, in order
    /// (each head holds its frame's length and CRC-32, so the checksum covers every
    /// frame byte and their order, for 8 bytes of work per frame). `sealed` names the files
    /// beside the store that the recording holds (its sidecars), each with its length
    /// and CRC-32 at the close.
    Close {
        frames: u64,
        entries: u64,
        checksum: u32,
        sealed: Vec<WireSealedFile<'a>>,
    },
}

/// A file beside the store, as the closing frame seals it.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub(crate) struct WireSealedFile<'a> {
    pub(crate) name: Cow<'a, str>,
    pub(crate) length: u64,
    pub(crate) checksum: u32,
}

#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub(crate) struct WireProvenance<'a> {
    pub(crate) processor_type: Cow<'a, str>,
    pub(crate) handler_type: Cow<'a, str>,
    pub(crate) ordinal: u32,
}

#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub(crate) struct WireDelivery<'a> {
    pub(crate) feed: Cow<'a, str>,
    pub(crate) sequence: u64,
    pub(crate) epoch: u64,
    pub(crate) lane: u32,
    pub(crate) offset: u64,
    pub(crate) attempt: u32,
}

/// An entry without its delivery; `delivered` says that a delivery frame of the same
/// stream precedes it immediately.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub(crate) enum WireEntry<'a> {
    /// 0
    Indexed {
        feed: Cow<'a, str>,
        sequence: u64,
        route: Cow<'a, str>,
        delivered: bool,
        clock: Cow<'a, [i64]>,
    },
    /// 1
    Inline {
        payload: Cow<'a, [u8]>,
        route: Cow<'a, str>,
        delivered: bool,
        clock: Cow<'a, [i64]>,
    },
    /// 2
    TimerFired {
        schedule: u64,
        clock: Cow<'a, [i64]>,
    },
    /// 3
    AdminInvoked {
        command: Cow<'a, str>,
        args: Cow<'a, [String]>,
        clock: Cow<'a, [i64]>,
    },
    /// 4
    Failed { reason: Cow<'a, str> },
    /// 5
    Stopped { clock: Cow<'a, [i64]> },
    /// 6
    ServiceChanged {
        service: Cow<'a, str>,
        version: u64,
        delivered: bool,
        clock: Cow<'a, [i64]>,
    },
    /// 7
    ControlCall {
        call: Cow<'a, str>,
        args: Cow<'a, [String]>,
        /// `None`: ok; `Some(text)`: failed with that text.
        failure: Option<Cow<'a, str>>,
    },
    /// 8
    Dropped { feed: Cow<'a, str>, sequence: u64 },
}

impl<'a> WireEntry<'a> {
    /// The borrowed wire form of `entry`, without its delivery.
    pub(crate) fn of(entry: &'a Entry) -> Self {
        let borrowed = |text: &'a String| Cow::Borrowed(text.as_str());
        let clock_of = |clock: &'a Vec<i64>| Cow::Borrowed(clock.as_slice());
        match entry {
            Entry::Indexed {
                feed,
                sequence,
                route,
                delivery,
                clock,
            } => WireEntry::Indexed {
                feed: borrowed(feed),
                sequence: *sequence,
                route: borrowed(route),
                delivered: delivery.is_some(),
                clock: clock_of(clock),
            },
            Entry::Inline {
                payload,
                route,
                delivery,
                clock,
            } => WireEntry::Inline {
                payload: Cow::Borrowed(payload.as_slice()),
                route: borrowed(route),
                delivered: delivery.is_some(),
                clock: clock_of(clock),
            },
            Entry::TimerFired { schedule, clock } => WireEntry::TimerFired {
                schedule: *schedule,
                clock: clock_of(clock),
            },
            Entry::AdminInvoked {
                command,
                args,
                clock,
            } => WireEntry::AdminInvoked {
                command: borrowed(command),
                args: Cow::Borrowed(args.as_slice()),
                clock: clock_of(clock),
            },
            Entry::Failed { reason } => WireEntry::Failed {
                reason: borrowed(reason),
            },
            Entry::Stopped { clock } => WireEntry::Stopped {
                clock: clock_of(clock),
            },
            Entry::ServiceChanged {
                service,
                version,
                delivered,
                clock,
            } => WireEntry::ServiceChanged {
                service: borrowed(service),
                version: *version,
                delivered: *delivered,
                clock: clock_of(clock),
            },
            Entry::ControlCall {
                call,
                args,
                outcome,
            } => WireEntry::ControlCall {
                call: borrowed(call),
                args: Cow::Borrowed(args.as_slice()),
                failure: match outcome {
                    ControlOutcome::Ok => None,
                    ControlOutcome::Failed(text) => Some(borrowed(text)),
                },
            },
            Entry::Dropped { feed, sequence } => WireEntry::Dropped {
                feed: borrowed(feed),
                sequence: *sequence,
            },
        }
    }

    /// True when the wire form says a delivery frame precedes it.
    pub(crate) fn delivered(&self) -> bool {
        match self {
            WireEntry::Indexed { delivered, .. } | WireEntry::Inline { delivered, .. } => {
                *delivered
            }
            _ => false,
        }
    }

    /// The entry, with `delivery` attached to an input.
    pub(crate) fn into_entry(self, delivery: Option<Delivery>) -> Entry {
        match self {
            WireEntry::Indexed {
                feed,
                sequence,
                route,
                clock,
                ..
            } => Entry::Indexed {
                feed: feed.into_owned(),
                sequence,
                route: route.into_owned(),
                delivery,
                clock: clock.into_owned(),
            },
            WireEntry::Inline {
                payload,
                route,
                clock,
                ..
            } => Entry::Inline {
                payload: payload.into_owned(),
                route: route.into_owned(),
                delivery,
                clock: clock.into_owned(),
            },
            WireEntry::TimerFired { schedule, clock } => Entry::TimerFired {
                schedule,
                clock: clock.into_owned(),
            },
            WireEntry::AdminInvoked {
                command,
                args,
                clock,
            } => Entry::AdminInvoked {
                command: command.into_owned(),
                args: args.into_owned(),
                clock: clock.into_owned(),
            },
            WireEntry::Failed { reason } => Entry::Failed {
                reason: reason.into_owned(),
            },
            WireEntry::Stopped { clock } => Entry::Stopped {
                clock: clock.into_owned(),
            },
            WireEntry::ServiceChanged {
                service,
                version,
                delivered,
                clock,
            } => Entry::ServiceChanged {
                service: service.into_owned(),
                version,
                delivered,
                clock: clock.into_owned(),
            },
            WireEntry::ControlCall {
                call,
                args,
                failure,
            } => Entry::ControlCall {
                call: call.into_owned(),
                args: args.into_owned(),
                outcome: match failure {
                    None => ControlOutcome::Ok,
                    Some(text) => ControlOutcome::Failed(text.into_owned()),
                },
            },
            WireEntry::Dropped { feed, sequence } => Entry::Dropped {
                feed: feed.into_owned(),
                sequence,
            },
        }
    }
}

impl<'a> WireDelivery<'a> {
    pub(crate) fn of(delivery: &'a Delivery) -> Self {
        WireDelivery {
            feed: Cow::Borrowed(delivery.feed()),
            sequence: delivery.sequence(),
            epoch: delivery.epoch().get(),
            lane: delivery.position().lane,
            offset: delivery.position().offset,
            attempt: delivery.attempt(),
        }
    }

    /// The delivery, with its feed name shared through `feeds` (one allocation per
    /// distinct feed name rather than per input).
    pub(crate) fn into_delivery(self, feeds: &mut Vec<Arc<str>>) -> Delivery {
        let feed = match feeds.iter().find(|known| ***known == *self.feed) {
            Some(known) => Arc::clone(known),
            None => {
                let created: Arc<str> = Arc::from(&*self.feed);
                if feeds.len() < 64 {
                    feeds.push(Arc::clone(&created));
                }
                created
            }
        };
        Delivery::new(
            feed,
            self.sequence,
            Epoch(self.epoch),
            PositionValue {
                lane: self.lane,
                offset: self.offset,
            },
            self.attempt,
        )
    }
}

impl<'a> WireProvenance<'a> {
    pub(crate) fn of(provenance: &'a Provenance) -> Self {
        WireProvenance {
            processor_type: Cow::Borrowed(&provenance.processor_type),
            handler_type: Cow::Borrowed(&provenance.handler_type),
            ordinal: provenance.ordinal,
        }
    }

    pub(crate) fn into_provenance(self) -> Provenance {
        Provenance {
            processor_type: self.processor_type.into_owned(),
            handler_type: self.handler_type.into_owned(),
            ordinal: self.ordinal,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // DESIGN.md "Binary formats carry a magic/version and have layout tests": these bytes
    // are the format of version 3 (the durable layer's header; the frames of version 2:
    // those of version 1 and the closing frame); changing them needs a new
    // FORMAT_VERSION.
    #[test]
    fn the_head_and_a_delivery_and_input_frame_have_the_documented_layout() {
        let mut head = b"MGDH".to_vec();
        head.extend_from_slice(&(HEADER_LEN as u16).to_le_bytes());
        head.extend_from_slice(&3u32.to_le_bytes());
        head.push(21);
        head.extend_from_slice(b"mongoose-replay-store");
        head.push(0); // no owner
        let crc = crc32fast::hash(&head);
        head.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(header()[..], head[..]);
        assert_eq!(HEADER_LEN, 37);
        // the earlier head is still read: magic and version 1 or 2
        let mut earlier = MAGIC.to_vec();
        earlier.extend_from_slice(&2u32.to_le_bytes());
        assert_eq!(
            check_head(&earlier),
            Ok(Head::Store {
                version: 2,
                len: EARLIER_HEADER_LEN
            })
        );
        for cut in 0..HEADER_LEN {
            assert_eq!(check_head(&header()[..cut]), Ok(Head::Empty), "{cut}");
        }
        for cut in 0..EARLIER_HEADER_LEN {
            assert_eq!(check_head(&earlier[..cut]), Ok(Head::Empty), "{cut}");
        }
        let delivery = Delivery::new(Arc::from("f"), 3, Epoch(2), PositionValue::at(300), 0);
        let entry = Entry::Indexed {
            feed: "f".into(),
            sequence: 5,
            route: "r".into(),
            delivery: Some(delivery.clone()),
            clock: vec![-1, 2],
        };
        let mut buffer = Vec::new();
        push_frame(
            &mut buffer,
            &WireFrame::Delivery {
                stream: 0,
                delivery: WireDelivery::of(&delivery),
            },
        )
        .unwrap();
        let delivery_body: &[u8] = &[
            1, // variant Delivery
            0, // stream 0
            1, b'f', // feed "f"
            3,    // sequence
            2,    // epoch
            0,    // lane
            0xAC, 0x02, // offset 300 as a varint
            0,    // attempt
        ];
        assert_eq!(&buffer[..4], &(delivery_body.len() as u32).to_le_bytes());
        assert_eq!(&buffer[8..], delivery_body);
        let split = buffer.len();
        push_frame(
            &mut buffer,
            &WireFrame::Entry {
                stream: 0,
                entry: WireEntry::of(&entry),
            },
        )
        .unwrap();
        let entry_body: &[u8] = &[
            2, // variant Entry
            0, // stream 0
            0, // entry variant Indexed
            1, b'f', // feed
            5,    // sequence
            1, b'r', // route
            1,    // delivered
            2, 1, 4, // clock: two readings, zigzag -1 and 2
        ];
        assert_eq!(&buffer[split + FRAME_HEAD_LEN..], entry_body);
        let mut checksum = crc32fast::Hasher::new();
        checksum.update(&(entry_body.len() as u32).to_le_bytes());
        checksum.update(entry_body);
        let checksum = checksum.finalize();
        assert_eq!(
            &buffer[split + 4..split + FRAME_HEAD_LEN],
            &checksum.to_le_bytes()
        );
    }

    // issue 10 item 10: the closing frame, written once at a clean close
    #[test]
    fn the_closing_frame_has_the_documented_layout() {
        let mut buffer = Vec::new();
        push_frame(
            &mut buffer,
            &WireFrame::Close {
                frames: 3,
                entries: 2,
                checksum: 0x0102_0304,
                sealed: vec![WireSealedFile {
                    name: "o".into(),
                    length: 300,
                    checksum: 0xA0B0_C0D0,
                }],
            },
        )
        .unwrap();
        let body: &[u8] = &[
            3, // variant Close
            3, // frames
            2, // entries
            0x84, 0x86, 0x88, 0x08, // checksum 0x01020304 as a varint
            1,    // one sealed file
            1, b'o', // its name
            0xAC, 0x02, // its length, 300
            0xD0, 0x81, 0xC3, 0x85, 0x0A, // its checksum 0xA0B0C0D0 as a varint
        ];
        assert_eq!(&buffer[FRAME_HEAD_LEN..], body);
        assert_eq!(&buffer[..4], &(body.len() as u32).to_le_bytes());
    }

    #[test]
    fn every_entry_kind_round_trips_through_its_wire_form() {
        let delivery = Delivery::new(Arc::from("lines"), 9, Epoch(4), PositionValue::at(70), 1);
        let entries = crate::store::tests_support::every_kind(Some(delivery));
        for entry in entries {
            let wire = WireEntry::of(&entry);
            let mut bytes = Vec::new();
            push_frame(
                &mut bytes,
                &WireFrame::Entry {
                    stream: 3,
                    entry: wire,
                },
            )
            .unwrap();
            let FrameRead::Frame { body, .. } = read_frame(&bytes, 0) else {
                panic!("no frame");
            };
            let WireFrame::Entry {
                stream,
                entry: read,
            } = decode_frame(body).unwrap()
            else {
                panic!("not an entry frame");
            };
            assert_eq!(stream, 3);
            let read = read.into_entry(entry.delivery().cloned());
            assert_eq!(read, entry);
        }
    }
}
