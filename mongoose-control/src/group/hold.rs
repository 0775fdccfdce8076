//! A hold on a group's feed reads: while one is held the group answers its mailbox and
//! fires its timers but takes no event from its feeds, so a change of its processors
//! made of several letters (a reload's replacement: a stop, then an add) lands between
//! two events, never with events in between that only some processors saw.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{GroupShared, ProcessorGroup};

/// Holds a group's feed reads while it lives ([`ProcessorGroup::hold_dispatch`]); the
/// group reads again when the last hold is dropped.
#[must_use = "the group reads its feeds again as soon as the hold is dropped"]
pub struct DispatchHold {
    shared: Arc<GroupShared>,
}

impl std::fmt::Debug for DispatchHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DispatchHold")
            .field("group", &self.shared.name)
            .finish()
    }
}

impl ProcessorGroup {
    /// Stops the group from taking events from its feeds until the returned hold is
    /// dropped (holds nest). The events wait in the feeds' queues (a full queue pauses
    /// a re-readable source, as for any slow consumer); the mailbox is still answered.
    /// A reload holds a group whose processor it replaces, so the lines between the
    /// old one's stop and the new one's start are not taken by the group's other
    /// processors alone.
    pub fn hold_dispatch(&self) -> DispatchHold {
        self.shared.dispatch_holds.fetch_add(1, Ordering::AcqRel);
        DispatchHold {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl GroupShared {
    /// True while a [`DispatchHold`] lives.
    pub(super) fn dispatch_held(&self) -> bool {
        self.dispatch_holds.load(Ordering::Acquire) > 0
    }
}

impl Drop for DispatchHold {
    fn drop(&mut self) {
        if self.shared.dispatch_holds.fetch_sub(1, Ordering::AcqRel) == 1 {
            // the group may be idle with events waiting: it reads again now
            if let Some(thread) = self.shared.thread.lock().as_ref() {
                thread.unpark();
            }
        }
    }
}
