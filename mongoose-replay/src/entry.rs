//! What a recording holds: one stream of [`Entry`] values per processor build, with the
//! stream's [`Provenance`], and the codecs that copy inline inputs.

use std::fmt;
use std::marker::PhantomData;

use mongoose_core::Delivery;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::ReplayError;

/// One recorded step of a processor, in the order it happened.
///
/// Timed entries carry `clock`: every clock reading the processor took while handling
/// the entry, in order, so a replay pins its clock to them.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Entry {
    /// An input from a journalled feed, received as the journal holds it.
    Indexed {
        /// The journalled feed.
        feed: String,
        /// The item's sequence number in the journal.
        sequence: u64,
        /// The route (subscription) it was delivered on.
        route: String,
        /// The delivery the processor could read, if the input had a source position.
        delivery: Option<Delivery>,
        /// The clock readings taken while handling it.
        clock: Vec<i64>,
    },
    /// Any other input (or a typed service call): a copy taken through the feed's codec
    /// just before the processor handled it.
    Inline {
        /// The item, encoded by its feed's [`EventCodec`].
        payload: Vec<u8>,
        /// The route (subscription) it was delivered on.
        route: String,
        /// The delivery the processor could read, if the input had a source position.
        delivery: Option<Delivery>,
        /// The clock readings taken while handling it.
        clock: Vec<i64>,
    },
    /// A timer the processor scheduled fired.
    TimerFired {
        /// The timer's schedule number.
        schedule: u64,
        /// The clock readings taken while handling it.
        clock: Vec<i64>,
    },
    /// A processor-owned admin command ran.
    AdminInvoked {
        /// The command's name.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// The clock readings taken while handling it.
        clock: Vec<i64>,
    },
    /// The recorded run failed here (a dispatch or a completion callback failed, an input
    /// could not be copied, or a control request was made off the processor's thread).
    /// A replay stops at it.
    Failed {
        /// Why.
        reason: String,
    },
    /// The processor was stopped by a request (not by its group closing).
    Stopped {
        /// The clock readings its stop took.
        clock: Vec<i64>,
    },
    /// A service was delivered to or withdrawn from the running processor after the
    /// server started.
    ServiceChanged {
        /// The service's name.
        service: String,
        /// Its registry version (0: an unversioned legacy entry).
        version: u64,
        /// True when it was delivered, false when withdrawn.
        delivered: bool,
        /// The clock readings taken while handling it.
        clock: Vec<i64>,
    },
    /// The processor made a control request.
    ControlCall {
        /// The request (`stopService`, `startService`, `stopProcessor`, ...).
        call: String,
        /// Its arguments, as text.
        args: Vec<String>,
        /// Its outcome.
        outcome: ControlOutcome,
    },
    /// An item of a feed was dropped by its overload policy before this processor got it.
    Dropped {
        /// The feed.
        feed: String,
        /// The dropped item's sequence number.
        sequence: u64,
    },
}

impl Entry {
    /// The delivery recorded with an input; `None` for an input without a position and
    /// for every other entry.
    pub fn delivery(&self) -> Option<&Delivery> {
        match self {
            Entry::Indexed { delivery, .. } | Entry::Inline { delivery, .. } => delivery.as_ref(),
            _ => None,
        }
    }

    /// The clock readings of a timed entry.
    pub fn clock(&self) -> Option<&[i64]> {
        match self {
            Entry::Indexed { clock, .. }
            | Entry::Inline { clock, .. }
            | Entry::TimerFired { clock, .. }
            | Entry::AdminInvoked { clock, .. }
            | Entry::Stopped { clock }
            | Entry::ServiceChanged { clock, .. } => Some(clock),
            Entry::Failed { .. } | Entry::ControlCall { .. } | Entry::Dropped { .. } => None,
        }
    }

    /// True for an input ([`Entry::Indexed`] or [`Entry::Inline`]).
    pub fn is_input(&self) -> bool {
        matches!(self, Entry::Indexed { .. } | Entry::Inline { .. })
    }

    /// The entry's kind, as the README and replay reports name it.
    pub fn kind(&self) -> &'static str {
        match self {
            Entry::Indexed { .. } => "Indexed",
            Entry::Inline { .. } => "Inline",
            Entry::TimerFired { .. } => "TimerFired",
            Entry::AdminInvoked { .. } => "AdminInvoked",
            Entry::Failed { .. } => "Failed",
            Entry::Stopped { .. } => "Stopped",
            Entry::ServiceChanged { .. } => "ServiceChanged",
            Entry::ControlCall { .. } => "ControlCall",
            Entry::Dropped { .. } => "Dropped",
        }
    }

    /// An [`Entry::Inline`] holding `item` encoded by `codec`.
    pub fn inline<T>(
        codec: &dyn EventCodec<T>,
        item: &T,
        route: &str,
        delivery: Option<Delivery>,
        clock: Vec<i64>,
    ) -> Result<Entry, ReplayError> {
        let mut payload = Vec::new();
        codec.encode(item, &mut payload)?;
        Ok(Entry::Inline {
            payload,
            route: route.to_owned(),
            delivery,
            clock,
        })
    }

    /// Decodes the item of an [`Entry::Inline`] with `codec`; `None` for other entries.
    pub fn decode_inline<T>(&self, codec: &dyn EventCodec<T>) -> Option<Result<T, ReplayError>> {
        match self {
            Entry::Inline { payload, .. } => Some(codec.decode(payload)),
            _ => None,
        }
    }
}

/// The outcome of a recorded control request.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub enum ControlOutcome {
    /// It succeeded.
    Ok,
    /// It failed, with the error's text (its type and payload are not recorded).
    Failed(String),
}

impl fmt::Display for ControlOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ControlOutcome::Ok => f.write_str("ok"),
            ControlOutcome::Failed(text) => write!(f, "failed: {text}"),
        }
    }
}

/// What built a stream, recorded when the stream begins and checked by a replay.
#[derive(Clone, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub struct Provenance {
    /// The processor's type.
    pub processor_type: String,
    /// The handler type it wraps (empty for a generated processor).
    pub handler_type: String,
    /// Its build ordinal (1 for the first build of its name in the group).
    pub ordinal: u32,
}

/// Copies the items of a feed that is not journalled into [`Entry::Inline`] payloads and
/// back.
pub trait EventCodec<T>: Send + Sync {
    /// Appends the encoding of `item` to `out`.
    fn encode(&self, item: &T, out: &mut Vec<u8>) -> Result<(), ReplayError>;

    /// Decodes an item that [`EventCodec::encode`] wrote.
    fn decode(&self, bytes: &[u8]) -> Result<T, ReplayError>;
}

/// A codec for any serde type, through postcard.
pub struct PostcardCodec<T> {
    _item: PhantomData<fn() -> T>,
}

impl<T> PostcardCodec<T> {
    /// The codec.
    pub const fn new() -> Self {
        PostcardCodec { _item: PhantomData }
    }
}

impl<T> Default for PostcardCodec<T> {
    fn default() -> Self {
        PostcardCodec::new()
    }
}

impl<T> fmt::Debug for PostcardCodec<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PostcardCodec<{}>", std::any::type_name::<T>())
    }
}

impl<T: Serialize + DeserializeOwned> EventCodec<T> for PostcardCodec<T> {
    fn encode(&self, item: &T, out: &mut Vec<u8>) -> Result<(), ReplayError> {
        let encoded =
            postcard::to_extend(item, std::mem::take(out)).map_err(|error| ReplayError::Codec {
                action: "encode",
                reason: error.to_string(),
            })?;
        *out = encoded;
        Ok(())
    }

    fn decode(&self, bytes: &[u8]) -> Result<T, ReplayError> {
        postcard::from_bytes(bytes).map_err(|error| ReplayError::Codec {
            action: "decode",
            reason: error.to_string(),
        })
    }
}

/// A codec for text items: the UTF-8 bytes.
#[derive(Clone, Copy, Default, Debug)]
pub struct Utf8Codec;

impl EventCodec<String> for Utf8Codec {
    fn encode(&self, item: &String, out: &mut Vec<u8>) -> Result<(), ReplayError> {
        out.extend_from_slice(item.as_bytes());
        Ok(())
    }

    fn decode(&self, bytes: &[u8]) -> Result<String, ReplayError> {
        String::from_utf8(bytes.to_vec()).map_err(|error| ReplayError::Codec {
            action: "decode",
            reason: error.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mongoose_core::{Epoch, PositionValue};
    use std::sync::Arc;

    #[test]
    fn an_inline_entry_decodes_to_the_item_its_codec_encoded() {
        let delivery = Delivery::new(Arc::from("lines"), 3, Epoch(1), PositionValue::at(9), 0);
        let entry =
            Entry::inline(&Utf8Codec, &"héllo".to_owned(), "r", Some(delivery), vec![]).unwrap();
        assert_eq!(entry.decode_inline(&Utf8Codec).unwrap().unwrap(), "héllo");
        let codec = PostcardCodec::<(u32, String)>::new();
        let entry = Entry::inline(&codec, &(7, "x".to_owned()), "r", None, vec![5]).unwrap();
        assert_eq!(
            entry.decode_inline(&codec).unwrap().unwrap(),
            (7, "x".to_owned())
        );
        assert_eq!(entry.clock(), Some(&[5][..]));
        assert!(entry.is_input());
    }

    #[test]
    fn a_codec_failure_says_it_was_a_decode() {
        let error = Utf8Codec.decode(&[0xff, 0xfe]).unwrap_err();
        assert!(error.to_string().contains("could not decode"), "{error}");
    }
}
