//! The feed's tap: a live sample of the items it publishes, for an operator
//! ([`mongoose_core::tap`]). A publish checks [`TapPoint::is_attached`] (one relaxed
//! load) and offers the item's text only while a tap is attached.

use mongoose_core::tap::{TapPoint, TapReceiver, TapRecord};
use mongoose_core::{Epoch, Position, PositionValue};

use super::Publisher;

/// How an item of type `T` reads as text for a tap (a line's bytes, say).
pub type TapText<T> = fn(&T) -> &[u8];

impl<T: Send + Sync + 'static, P: Position> Publisher<T, P> {
    /// Sets how an item reads as text for a tap (once; the first one set stays). A feed
    /// without one cannot be tapped.
    pub fn set_tap_text(&self, text: TapText<T>) {
        let _ = self.tap_text.set(text);
    }

    /// Attaches a tap holding up to `capacity` unread items: every item published from
    /// now on is offered to it, dropped from it (and counted) when it is full. `None`
    /// when the feed's items have no text ([`Publisher::set_tap_text`]) or the feed has
    /// as many taps as it serves.
    pub fn attach_tap(&self, capacity: usize) -> Option<TapReceiver> {
        self.tap_text.get()?;
        self.tap.attach(capacity)
    }

    /// Offers a published item to the attached taps (the caller checked
    /// [`TapPoint::is_attached`]).
    #[cold]
    pub(super) fn offer_to_tap(
        tap: &TapPoint,
        text: Option<&TapText<T>>,
        item: &T,
        sequence: u64,
        position: Option<(Epoch, PositionValue)>,
    ) {
        let Some(text) = text else {
            return;
        };
        tap.offer(|| {
            let (text, cut) = TapRecord::text_of(text(item));
            TapRecord {
                sequence,
                epoch: position.map(|(epoch, _)| epoch),
                lane: position.map_or(0, |(_, value)| value.lane),
                position: position.map_or(0, |(_, value)| value.offset),
                output: None,
                attempt: 0,
                text,
                cut,
            }
        });
    }
}
