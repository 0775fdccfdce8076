//! Agent threads: the threads that run processor groups and sources.
//!
//! An agent thread must never block on a reply, a full queue or a lock held across I/O
//! (invariant 3). Code that might wait asks [`is_agent_thread`] first and, on
//! an agent thread, queues, pauses or refuses instead.
//!
//! ```
//! use mongoose_core::agent;
//!
//! assert!(!agent::is_agent_thread());
//! let guard = agent::mark_current_thread("group-a");
//! assert!(agent::is_agent_thread());
//! assert_eq!(agent::current_agent_name().as_deref(), Some("group-a"));
//! drop(guard);
//! assert!(!agent::is_agent_thread());
//! ```

use std::marker::PhantomData;

use crate::context;

/// Clears the agent mark of the thread that took it when dropped.
#[derive(Debug)]
#[must_use = "the mark is cleared when the guard is dropped"]
pub struct AgentThreadGuard {
    previous: Option<String>,
    // the guard must be dropped on the thread it marks
    _not_send: PhantomData<*const ()>,
}

/// Marks the current thread as an agent thread named `name` until the guard drops.
pub fn mark_current_thread(name: &str) -> AgentThreadGuard {
    let previous = context::with(|context| context.agent.replace(Some(name.to_owned())));
    AgentThreadGuard {
        previous,
        _not_send: PhantomData,
    }
}

impl Drop for AgentThreadGuard {
    fn drop(&mut self) {
        let previous = self.previous.take();
        context::with(|context| *context.agent.borrow_mut() = previous);
    }
}

/// True when the calling thread runs an agent (a processor group or a source).
pub fn is_agent_thread() -> bool {
    context::with(|context| context.agent.borrow().is_some())
}

/// The name of the agent the calling thread runs, if it is an agent thread.
pub fn current_agent_name() -> Option<String> {
    context::with(|context| context.agent.borrow().clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_nest_and_restore_the_outer_name() {
        let outer = mark_current_thread("outer");
        {
            let _inner = mark_current_thread("inner");
            assert_eq!(current_agent_name().as_deref(), Some("inner"));
        }
        assert_eq!(current_agent_name().as_deref(), Some("outer"));
        drop(outer);
        assert!(!is_agent_thread());
    }

    #[test]
    fn the_mark_is_per_thread() {
        let _guard = mark_current_thread("here");
        let elsewhere = std::thread::spawn(is_agent_thread)
            .join()
            .expect("thread ran");
        assert!(!elsewhere);
    }
}
