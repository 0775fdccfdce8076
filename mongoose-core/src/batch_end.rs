//! Outputs held back until the end of the batch a thread is handling.
//!
//! A processor group's thread handles the items of a feed in batches (one poll of its
//! queue). A writer that hands each output to another thread (a sink's runner) pays a
//! hand-off per output; on a thread that [batches](batching) it may instead keep its
//! outputs and [defer] one hand-off to the batch's end, when the group calls
//! [`end_batch`]. Nothing else changes: the outputs' inputs are held uncommitted from
//! the moment they are written (their commit gates know them), so an output still
//! held when the thread dies is only late, never lost: its input comes again.
//!
//! A thread that does not batch (a test, a service callback's thread) sees
//! [`is_batching`] false, and a writer hands each output over at once.
//!
//! ```
//! use std::sync::{Arc, Mutex};
//! use mongoose_core::batch_end::{self, DeferredOutputs};
//!
//! #[derive(Default)]
//! struct Held(Mutex<Vec<u32>>, Mutex<Vec<u32>>);
//! impl DeferredOutputs for Held {
//!     fn flush(&self) {
//!         let taken = std::mem::take(&mut *self.0.lock().unwrap());
//!         self.1.lock().unwrap().extend(taken);
//!     }
//! }
//!
//! let held = Arc::new(Held::default());
//! assert!(!batch_end::is_batching());
//! {
//!     let _batching = batch_end::batching();
//!     assert!(batch_end::is_batching());
//!     held.0.lock().unwrap().push(7);
//!     batch_end::defer(held.clone());
//!     assert!(held.1.lock().unwrap().is_empty());
//!     assert_eq!(batch_end::end_batch(), 1);
//!     assert_eq!(*held.1.lock().unwrap(), vec![7]);
//! }
//! assert!(!batch_end::is_batching());
//! ```

use std::marker::PhantomData;
use std::sync::Arc;

use crate::context;

/// Outputs a writer keeps until its thread's batch ends.
pub trait DeferredOutputs: Send + Sync {
    /// Hands the kept outputs over (the batch ended).
    fn flush(&self);
}

/// True when this thread batches: a writer may [`defer`] its hand-off to the batch's
/// end.
#[inline]
pub fn is_batching() -> bool {
    context::with(|context| context.batching.get())
}

/// Asks for `outputs.flush()` at this thread's next [`end_batch`] (once per call: a
/// writer defers itself once per batch). On a thread that does not batch it is
/// flushed at once.
pub fn defer(outputs: Arc<dyn DeferredOutputs>) {
    let deferred = context::with(|context| {
        if !context.batching.get() {
            return Some(outputs);
        }
        context.deferred.borrow_mut().push(outputs);
        None
    });
    if let Some(outputs) = deferred {
        outputs.flush();
    }
}

/// Ends this thread's batch: flushes every deferred writer, in the order they
/// deferred; returns how many.
pub fn end_batch() -> usize {
    let mut flushed = 0;
    loop {
        // taken out of the context first: a flush may defer again
        let deferred = context::with(|context| std::mem::take(&mut *context.deferred.borrow_mut()));
        if deferred.is_empty() {
            return flushed;
        }
        flushed += deferred.len();
        for outputs in deferred {
            outputs.flush();
        }
    }
}

/// This thread batching ([`batching`]) until dropped: the drop ends the batch and
/// restores what was there before (also when a panic unwinds through it).
#[must_use = "the thread stops batching as soon as the guard is dropped"]
#[derive(Debug)]
pub struct Batching {
    previous: bool,
    _thread_bound: PhantomData<*const ()>,
}

/// Makes this thread batch until the returned guard is dropped: call [`end_batch`]
/// after each batch of items.
pub fn batching() -> Batching {
    let previous = context::with(|context| context.batching.replace(true));
    Batching {
        previous,
        _thread_bound: PhantomData,
    }
}

impl Drop for Batching {
    fn drop(&mut self) {
        end_batch();
        context::with(|context| context.batching.set(self.previous));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Count(AtomicUsize);
    impl DeferredOutputs for Count {
        fn flush(&self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn a_thread_that_does_not_batch_flushes_at_once() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        defer(count.clone());
        assert_eq!(count.0.load(Ordering::Relaxed), 1);
        assert_eq!(end_batch(), 0);
    }

    #[test]
    fn the_guard_ends_the_batch_and_restores_the_thread() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        {
            let _outer = batching();
            {
                let _inner = batching();
                defer(count.clone());
                assert_eq!(count.0.load(Ordering::Relaxed), 0);
            }
            // the inner guard ended its batch; the thread still batches
            assert_eq!(count.0.load(Ordering::Relaxed), 1);
            assert!(is_batching());
        }
        assert!(!is_batching());
    }
}
