//! A live sample of what passes one point of the pipeline (a feed's published items, a
//! sink's outputs), for an operator's `mongoose tap`, that never slows the pipeline.
//!
//! The point ([`TapPoint`]) sits on a hot path. While no tap is attached, a pass costs
//! one relaxed atomic load ([`TapPoint::is_attached`]) and allocates nothing. While
//! one is attached, [`TapPoint::offer`] hands a copy of the item's text (lossy UTF-8,
//! cut at [`TAP_TEXT_MAX`] bytes) to each attached [`TapReceiver`] through a bounded
//! channel, with `try_send` only: a receiver that does not keep up loses records *from
//! the tap*, counted in [`TapReceiver::dropped`], and the pipeline goes on as if no tap
//! were there. The hot path never waits: the list of receivers is taken with a
//! `try_lock` (an attach or a detach holds it for a moment; a pass that finds it held
//! counts a drop for every receiver instead of waiting), and the record is only made
//! for a receiver with room.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, PoisonError, TryLockError};

use crate::Epoch;

/// The longest item text a tap record carries (bytes of the item, before the lossy
/// UTF-8 conversion); the rest is cut and its length given in [`TapRecord::cut`].
pub const TAP_TEXT_MAX: usize = 1024;

/// The most receivers one point serves at once.
pub const TAP_RECEIVERS_MAX: usize = 8;

/// One item (or output) seen at a tap point.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TapRecord {
    /// A feed item's sequence number in its feed; for a sink output, 0.
    pub sequence: u64,
    /// The epoch of the item's position (for a sink output, its input's); `None` for an
    /// item published without a position.
    pub epoch: Option<Epoch>,
    /// The lane of the position (0 for a single-lane feed).
    pub lane: u32,
    /// The position within the lane (a file's byte offset after the line).
    pub position: u64,
    /// A sink output: the feed of the input it was made of (`-` for none) and its
    /// index within that input's delivery.
    pub output: Option<(Arc<str>, u32)>,
    /// A sink output: earlier attempts to publish it (0 for the first).
    pub attempt: u32,
    /// The item's text: lossy UTF-8 of its first [`TAP_TEXT_MAX`] bytes.
    pub text: String,
    /// How many bytes were cut off the end of the text (0: the whole item).
    pub cut: usize,
}

impl TapRecord {
    /// The tap text of `bytes`: lossy UTF-8 of at most [`TAP_TEXT_MAX`] bytes, and how
    /// many bytes were cut.
    pub fn text_of(bytes: &[u8]) -> (String, usize) {
        let kept = bytes.len().min(TAP_TEXT_MAX);
        (
            String::from_utf8_lossy(&bytes[..kept]).into_owned(),
            bytes.len() - kept,
        )
    }
}

struct Client {
    sender: SyncSender<TapRecord>,
    /// Records sent and not yet received (so a full receiver costs no record).
    queued: AtomicUsize,
    capacity: usize,
    dropped: AtomicU64,
}

#[derive(Default)]
struct Inner {
    attached: AtomicBool,
    clients: Mutex<Vec<Arc<Client>>>,
    /// Passes that found the list of receivers held by an attach or a detach: a drop
    /// for each receiver attached then.
    missed: AtomicU64,
}

/// A point of a hot path that an operator can tap: see the [module](self).
#[derive(Default)]
pub struct TapPoint {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for TapPoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TapPoint")
            .field("attached", &self.is_attached())
            .finish_non_exhaustive()
    }
}

impl TapPoint {
    /// Whether a tap is attached: one relaxed load, the only cost of a pass without one.
    #[inline]
    pub fn is_attached(&self) -> bool {
        self.inner.attached.load(Ordering::Relaxed)
    }

    /// Attaches a receiver that holds up to `capacity` records (at least 1) it has not
    /// read; more are dropped from it and counted. `None` when [`TAP_RECEIVERS_MAX`]
    /// receivers are attached already.
    pub fn attach(&self, capacity: usize) -> Option<TapReceiver> {
        let capacity = capacity.max(1);
        let (sender, receiver) = std::sync::mpsc::sync_channel(capacity);
        let client = Arc::new(Client {
            sender,
            queued: AtomicUsize::new(0),
            capacity,
            dropped: AtomicU64::new(0),
        });
        let mut clients = self
            .inner
            .clients
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if clients.len() >= TAP_RECEIVERS_MAX {
            return None;
        }
        clients.push(Arc::clone(&client));
        self.inner.attached.store(true, Ordering::Relaxed);
        Some(TapReceiver {
            missed_at_attach: self.inner.missed.load(Ordering::Relaxed),
            client,
            receiver,
            inner: Arc::clone(&self.inner),
        })
    }

    /// Offers the record `make` builds to every attached receiver with room (called
    /// only for those, so a full receiver costs no allocation); never waits. Call it
    /// only when [`TapPoint::is_attached`].
    pub fn offer(&self, make: impl Fn() -> TapRecord) {
        let clients = match self.inner.clients.try_lock() {
            Ok(clients) => clients,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => {
                self.inner.missed.fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        for client in clients.iter() {
            if client.queued.load(Ordering::Acquire) >= client.capacity {
                client.dropped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            client.queued.fetch_add(1, Ordering::AcqRel);
            match client.sender.try_send(make()) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) => {
                    client.queued.fetch_sub(1, Ordering::AcqRel);
                    client.dropped.fetch_add(1, Ordering::Relaxed);
                }
                // its receiver is being dropped: it detaches itself
                Err(TrySendError::Disconnected(_)) => {
                    client.queued.fetch_sub(1, Ordering::AcqRel);
                }
            }
        }
    }
}

/// What an attached tap reads; dropping it detaches it (the point costs one load a
/// pass again once the last one is dropped).
pub struct TapReceiver {
    client: Arc<Client>,
    receiver: Receiver<TapRecord>,
    inner: Arc<Inner>,
    missed_at_attach: u64,
}

impl std::fmt::Debug for TapReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TapReceiver")
            .field("dropped", &self.dropped())
            .finish_non_exhaustive()
    }
}

impl TapReceiver {
    /// The next record, if one is waiting; never waits.
    pub fn try_recv(&self) -> Option<TapRecord> {
        let record = self.receiver.try_recv().ok()?;
        self.client.queued.fetch_sub(1, Ordering::AcqRel);
        Some(record)
    }

    /// Records dropped from this tap so far (it was full, or the point was busy
    /// attaching another): the pipeline lost none of them.
    pub fn dropped(&self) -> u64 {
        let missed = self
            .inner
            .missed
            .load(Ordering::Relaxed)
            .saturating_sub(self.missed_at_attach);
        self.client.dropped.load(Ordering::Relaxed) + missed
    }
}

impl Drop for TapReceiver {
    fn drop(&mut self) {
        let mut clients = self
            .inner
            .clients
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        clients.retain(|client| !Arc::ptr_eq(client, &self.client));
        self.inner
            .attached
            .store(!clients.is_empty(), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(position: u64) -> TapRecord {
        let (text, cut) = TapRecord::text_of(b"line");
        TapRecord {
            sequence: position,
            epoch: Some(Epoch(1)),
            lane: 0,
            position,
            output: None,
            attempt: 0,
            text,
            cut,
        }
    }

    #[test]
    fn a_full_tap_drops_and_counts_and_a_dropped_receiver_detaches() {
        let point = TapPoint::default();
        assert!(!point.is_attached());
        let tap = point.attach(2).expect("attached");
        assert!(point.is_attached());
        for position in 0..5 {
            point.offer(|| record(position));
        }
        assert_eq!(tap.try_recv().map(|record| record.position), Some(0));
        assert_eq!(tap.try_recv().map(|record| record.position), Some(1));
        assert_eq!(tap.try_recv(), None);
        assert_eq!(tap.dropped(), 3);
        point.offer(|| record(5));
        assert_eq!(tap.try_recv().map(|record| record.position), Some(5));
        drop(tap);
        assert!(!point.is_attached());
    }

    #[test]
    fn a_long_item_is_cut_at_the_bound() {
        let long = vec![b'x'; TAP_TEXT_MAX + 10];
        let (text, cut) = TapRecord::text_of(&long);
        assert_eq!((text.len(), cut), (TAP_TEXT_MAX, 10));
        let (text, cut) = TapRecord::text_of(b"caf\xff");
        assert_eq!((text.as_str(), cut), ("caf\u{fffd}", 0));
    }
}
