//! The thread's context: every piece of state the host keeps per thread, in one
//! thread-local.
//!
//! A thread that runs an agent (a processor group, a source) or calls a processor
//! carries ambient state: the agent's name ([`crate::agent`]), the audit hook
//! ([`crate::audit`](mod@crate::audit)), the delivery being processed and the
//! processor being called ([`crate::DeliveryContext`], [`crate::engine`]), and what
//! the crates above the core keep there for a group or a call (a group's link to the
//! control plane, a captured processor's capture, a replay's clock tap). All of it is one context per thread, as
//! tokio keeps a runtime thread's state in one `CONTEXT`: each part is set by a guard
//! that restores what was there before when it is dropped, so a panic that unwinds
//! through a call cannot leave the thread half-configured.
//!
//! A crate above the core keeps its part in a [`ContextSlot`] (a value of its own
//! type, which the core does not know) and, for a check on the hot path, a
//! [`ContextFlag`] (one bit, no borrow, no downcast):
//!
//! ```
//! use mongoose_core::context::{ContextFlag, ContextSlot};
//!
//! #[derive(Default, Debug, PartialEq)]
//! struct Notes(Vec<&'static str>);
//!
//! static NOTES: ContextSlot<Notes> = ContextSlot::new();
//! static NOTED: ContextFlag = ContextFlag::new();
//!
//! {
//!     let _entered = NOTES.enter(Notes(vec!["outer"]));
//!     NOTES.with(|notes| notes.0.push("more"));
//!     NOTED.set(true);
//!     assert!(NOTED.get());
//!     assert_eq!(NOTES.with(|notes| notes.0.len()), 2);
//! }
//! // the guard restored what was there before: the default
//! assert_eq!(NOTES.with(|notes| std::mem::take(notes)), Notes::default());
//! ```

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::audit::AuditHook;
use crate::delivery::DeliveryState;

/// How many [`ContextSlot`]s a process may use (the crates of this workspace use 5).
pub const MAX_CONTEXT_SLOTS: usize = 8;

/// How many [`ContextFlag`]s a process may use.
pub const MAX_CONTEXT_FLAGS: usize = 64;

/// The state of one thread (see the [module documentation](self)).
pub(crate) struct ThreadContext {
    /// The name of the agent this thread runs ([`crate::agent`]).
    pub(crate) agent: RefCell<Option<String>>,
    /// The audit hook of the group this thread runs ([`crate::audit`]).
    pub(crate) audit_hook: Cell<Option<AuditHook>>,
    /// The delivery being processed and the processor being called.
    pub(crate) delivery: DeliveryState,
    /// True while the thread batches ([`crate::batch_end`]).
    pub(crate) batching: Cell<bool>,
    /// The writers that deferred their hand-off to the batch's end.
    pub(crate) deferred: RefCell<Vec<std::sync::Arc<dyn crate::batch_end::DeferredOutputs>>>,
    /// This thread's token ([`thread_token`]), 0 until first asked.
    token: Cell<u64>,
    /// The [`ContextFlag`]s, one bit each.
    flags: Cell<u64>,
    /// The [`ContextSlot`]s' values, created on a slot's first use on this thread.
    slots: [RefCell<Option<Box<dyn Any>>>; MAX_CONTEXT_SLOTS],
}

thread_local! {
    static CONTEXT: ThreadContext = const {
        ThreadContext {
            agent: RefCell::new(None),
            audit_hook: Cell::new(None),
            delivery: DeliveryState::new(),
            batching: Cell::new(false),
            deferred: RefCell::new(Vec::new()),
            token: Cell::new(0),
            flags: Cell::new(0),
            slots: [const { RefCell::new(None) }; MAX_CONTEXT_SLOTS],
        }
    };
}

/// Calls `f` with this thread's context.
#[inline]
pub(crate) fn with<R>(f: impl FnOnce(&ThreadContext) -> R) -> R {
    CONTEXT.with(f)
}

/// A number that identifies the calling thread for as long as the process runs: never
/// 0, never the same for two threads (also after a thread ended).
#[inline]
pub fn thread_token() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    with(|context| {
        let token = context.token.get();
        if token != 0 {
            return token;
        }
        let token = NEXT.fetch_add(1, Ordering::Relaxed);
        context.token.set(token);
        token
    })
}

/// Hands out slot numbers: `next` is the first free one.
#[cold]
fn assign(number: &AtomicUsize, next: &AtomicUsize, limit: usize, what: &str) -> usize {
    let candidate = next.fetch_add(1, Ordering::Relaxed);
    assert!(
        candidate < limit,
        "more than {limit} {what} in this process: raise the limit in mongoose-core's context"
    );
    // stored as number + 1 (0: not assigned yet); a racing first use keeps the winner's
    match number.compare_exchange(0, candidate + 1, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => candidate,
        Err(assigned) => assigned - 1,
    }
}

/// One part of the thread's context, of a type `T` the core does not know: declared
/// as a `static` by the crate that keeps it, one `T` per thread (its default until
/// set). Borrowed for the length of a [`ContextSlot::with`]; entered with a guard
/// ([`ContextSlot::enter`]) that restores the previous value.
pub struct ContextSlot<T> {
    /// The slot's number + 1 (0: not used yet in this process).
    number: AtomicUsize,
    _type: PhantomData<fn() -> T>,
}

impl<T> fmt::Debug for ContextSlot<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ContextSlot")
            .field("type", &std::any::type_name::<T>())
            .finish()
    }
}

impl<T: Default + 'static> Default for ContextSlot<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Default + 'static> ContextSlot<T> {
    /// A slot (declare it as a `static`).
    pub const fn new() -> Self {
        ContextSlot {
            number: AtomicUsize::new(0),
            _type: PhantomData,
        }
    }

    #[inline]
    fn number(&self) -> usize {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        match self.number.load(Ordering::Acquire) {
            0 => assign(&self.number, &NEXT, MAX_CONTEXT_SLOTS, "context slots"),
            assigned => assigned - 1,
        }
    }

    /// Calls `f` with this thread's value; `None` when it is borrowed already (a
    /// [`ContextSlot::with`] of the same slot up the stack).
    #[inline]
    pub fn try_with<R>(&'static self, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        let number = self.number();
        with(|context| {
            let mut value = context.slots[number].try_borrow_mut().ok()?;
            let value = value.get_or_insert_with(|| Box::new(T::default()));
            value.downcast_mut::<T>().map(f)
        })
    }

    /// Calls `f` with this thread's value.
    ///
    /// # Panics
    /// When the slot is borrowed already (a [`ContextSlot::with`] of the same slot up
    /// the stack).
    #[inline]
    pub fn with<R>(&'static self, f: impl FnOnce(&mut T) -> R) -> R {
        self.try_with(f)
            .expect("a context slot used again while it is in use on this thread")
    }

    /// Sets this thread's value to `value`; returns the previous one.
    pub fn replace(&'static self, value: T) -> T {
        self.with(|slot| std::mem::replace(slot, value))
    }

    /// Sets this thread's value to `value` until the guard is dropped, which restores
    /// the previous one (also when a panic unwinds through it).
    pub fn enter(&'static self, value: T) -> SlotGuard<T> {
        SlotGuard {
            slot: self,
            previous: Some(self.replace(value)),
            _thread_bound: PhantomData,
        }
    }
}

/// A value entered in a [`ContextSlot`] on this thread: the previous one is restored
/// when dropped. Not `Send`: the context is the thread's.
#[must_use = "the previous value is restored as soon as the guard is dropped"]
pub struct SlotGuard<T: Default + 'static> {
    slot: &'static ContextSlot<T>,
    previous: Option<T>,
    _thread_bound: PhantomData<*const ()>,
}

impl<T: Default + 'static> fmt::Debug for SlotGuard<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlotGuard")
            .field("slot", self.slot)
            .finish()
    }
}

impl<T: Default + 'static> Drop for SlotGuard<T> {
    fn drop(&mut self) {
        if let Some(previous) = self.previous.take() {
            // dropped outside the slot's borrow: a value whose drop uses the slot again
            // does not find it borrowed
            let entered = self.slot.replace(previous);
            drop(entered);
        }
    }
}

/// One bit of the thread's context, for a check on the hot path (one thread-local
/// read, no borrow): declared as a `static` by the crate that keeps it; `false` on
/// every thread until set there.
pub struct ContextFlag {
    /// The flag's bit (0: not used yet in this process).
    mask: AtomicU64,
}

impl fmt::Debug for ContextFlag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ContextFlag").finish_non_exhaustive()
    }
}

impl Default for ContextFlag {
    fn default() -> Self {
        Self::new()
    }
}

impl ContextFlag {
    /// A flag (declare it as a `static`).
    pub const fn new() -> Self {
        ContextFlag {
            mask: AtomicU64::new(0),
        }
    }

    #[inline]
    fn mask(&self) -> u64 {
        match self.mask.load(Ordering::Acquire) {
            0 => self.assign_mask(),
            mask => mask,
        }
    }

    #[cold]
    fn assign_mask(&self) -> u64 {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let number = NEXT.fetch_add(1, Ordering::Relaxed);
        assert!(
            number < MAX_CONTEXT_FLAGS,
            "more than {MAX_CONTEXT_FLAGS} context flags in this process: raise the limit in mongoose-core's context"
        );
        // a racing first use keeps the winner's bit
        match self
            .mask
            .compare_exchange(0, 1 << number, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => 1 << number,
            Err(mask) => mask,
        }
    }

    /// This thread's value.
    #[inline]
    pub fn get(&self) -> bool {
        let mask = self.mask();
        with(|context| context.flags.get() & mask != 0)
    }

    /// Sets this thread's value.
    #[inline]
    pub fn set(&self, value: bool) {
        let mask = self.mask();
        with(|context| {
            let flags = context.flags.get();
            context
                .flags
                .set(if value { flags | mask } else { flags & !mask });
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default, Debug, PartialEq)]
    struct Marker(u32);

    static MARKER: ContextSlot<Marker> = ContextSlot::new();
    static OTHER: ContextSlot<Vec<u8>> = ContextSlot::new();
    static FLAG: ContextFlag = ContextFlag::new();

    #[test]
    fn slots_are_per_thread_and_their_guards_restore_the_previous_value() {
        let outer = MARKER.enter(Marker(1));
        OTHER.with(|other| other.push(9));
        {
            let _inner = MARKER.enter(Marker(2));
            assert_eq!(MARKER.with(|marker| marker.0), 2);
        }
        assert_eq!(MARKER.with(|marker| marker.0), 1);
        let elsewhere = std::thread::spawn(|| MARKER.with(|marker| marker.0))
            .join()
            .expect("thread ran");
        assert_eq!(elsewhere, 0);
        drop(outer);
        assert_eq!(MARKER.with(|marker| marker.0), 0);
        assert_eq!(OTHER.with(|other| other.clone()), vec![9]);
    }

    #[test]
    fn a_slot_in_use_is_not_lent_twice() {
        MARKER.with(|_| assert!(MARKER.try_with(|_| ()).is_none()));
        assert!(MARKER.try_with(|_| ()).is_some());
    }

    #[test]
    fn a_panic_through_an_entered_slot_restores_it() {
        let unwound = std::panic::catch_unwind(|| {
            let _entered = MARKER.enter(Marker(5));
            panic!("inside");
        });
        assert!(unwound.is_err());
        assert_eq!(MARKER.with(|marker| marker.0), 0);
    }

    #[test]
    fn flags_and_tokens_are_per_thread() {
        FLAG.set(true);
        assert!(FLAG.get());
        let token = thread_token();
        assert_ne!(token, 0);
        assert_eq!(thread_token(), token);
        let (elsewhere_flag, elsewhere_token) = std::thread::spawn(|| (FLAG.get(), thread_token()))
            .join()
            .expect("thread ran");
        assert!(!elsewhere_flag);
        assert_ne!(elsewhere_token, token);
        FLAG.set(false);
        assert!(!FLAG.get());
    }
}
