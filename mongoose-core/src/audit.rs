//! A processor's audit records: what a handler writes for an investigation, kept
//! only while an operator captures that processor (book: guarantees/control-plane.md).
//!
//! A handler calls [`record`] (bytes) or [`audit!`](crate::audit!) (text, formatted
//! only when a capture is listening). The group that hosts the processor installs a
//! hook on its thread ([`install_hook`]); the hook routes a record to the capture of
//! the processor being called, or drops it when that processor is not captured.
//! Without a hook (a unit test, a replay) a record goes nowhere and [`record`] returns
//! `false`.
//!
//! ```
//! use mongoose_core::{audit, Processor, ProcessorError};
//!
//! struct Pricer;
//! impl Pricer {
//!     fn on_price(&mut self, price: &u64) -> Result<(), ProcessorError> {
//!         // formatted only while an operator captures this processor
//!         mongoose_core::audit!("priced {price}");
//!         audit::record(&price.to_le_bytes());
//!         Ok(())
//!     }
//! }
//! # impl Processor for Pricer {
//! #     fn start(&mut self, _: &mut mongoose_core::StartContext<'_>) -> Result<(), ProcessorError> { Ok(()) }
//! # }
//! Pricer.on_price(&7).unwrap();
//! assert!(!audit::is_capturing()); // no group hosts it here
//! ```

use std::marker::PhantomData;

use crate::context;

/// What a host installs on its thread so a processor's audit records reach its
/// capture: two plain functions (no allocation, no lock when nothing is captured).
#[derive(Clone, Copy, Debug)]
pub struct AuditHook {
    /// True when the processor being called on this thread is captured.
    pub capturing: fn() -> bool,
    /// Writes one record to that capture; `false` when there is none.
    pub record: fn(&[u8]) -> bool,
}

/// Installs `hook` on this thread (a group's thread, for as long as it runs); returns
/// what was installed before. `None` removes it. [`enter_hook`] restores what was
/// installed before by itself.
pub fn install_hook(hook: Option<AuditHook>) -> Option<AuditHook> {
    context::with(|context| context.audit_hook.replace(hook))
}

/// Installs `hook` on this thread until the guard is dropped, which restores what
/// was installed before (also when a panic unwinds through it).
pub fn enter_hook(hook: AuditHook) -> HookGuard {
    HookGuard {
        previous: install_hook(Some(hook)),
        _thread_bound: PhantomData,
    }
}

/// An audit hook installed on this thread ([`enter_hook`]): what was installed before
/// is restored when dropped. Not `Send`: the hook is the thread's.
#[derive(Debug)]
#[must_use = "the previous hook is restored as soon as the guard is dropped"]
pub struct HookGuard {
    previous: Option<AuditHook>,
    _thread_bound: PhantomData<*const ()>,
}

impl Drop for HookGuard {
    fn drop(&mut self) {
        install_hook(self.previous.take());
    }
}

/// True when the processor being called on this thread is captured: a record written
/// now is kept.
#[inline]
pub fn is_capturing() -> bool {
    context::with(|context| context.audit_hook.get()).is_some_and(|hook| (hook.capturing)())
}

/// Writes `bytes` as one audit record of the processor being called on this thread.
/// Returns whether a capture took it (`false`: nobody captures this processor now).
#[inline]
pub fn record(bytes: &[u8]) -> bool {
    context::with(|context| context.audit_hook.get()).is_some_and(|hook| (hook.record)(bytes))
}

/// Writes a formatted audit record (`format!` syntax) of the processor being called,
/// formatting it only when a capture listens ([`is_capturing`]). Evaluates to whether
/// a capture took it.
#[macro_export]
macro_rules! audit {
    ($($arg:tt)*) => {
        $crate::audit::is_capturing() && $crate::audit::record(format!($($arg)*).as_bytes())
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    thread_local! {
        static KEPT: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
    }

    fn capturing() -> bool {
        true
    }

    fn keep(bytes: &[u8]) -> bool {
        KEPT.with(|kept| kept.borrow_mut().push(bytes.to_vec()));
        true
    }

    #[test]
    fn records_reach_the_installed_hook_and_nothing_without_one() {
        assert!(!record(b"lost"));
        assert!(!crate::audit!("not formatted {}", 1));
        let before = install_hook(Some(AuditHook {
            capturing,
            record: keep,
        }));
        assert!(before.is_none());
        assert!(record(b"one"));
        assert!(crate::audit!("two {}", 2));
        install_hook(None);
        assert!(!record(b"three"));
        let kept = KEPT.with(|kept| kept.borrow().clone());
        assert_eq!(kept, vec![b"one".to_vec(), b"two 2".to_vec()]);
    }
}
