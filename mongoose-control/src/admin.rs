//! Processor-owned admin commands: a processor registers them while it starts, and an
//! operator runs them through the control plane (`ControlPlane::invoke_admin_command`,
//! or the server's `POST /processors/{group}/{name}/commands/{command}`).
//!
//! A command is a method of the processor, typed like a feed handler:
//! `fn(&mut P, &[String]) -> Result<String, ProcessorError>`. It is registered with
//! [`mongoose_core::StartContext::register_command`] in [`mongoose_core::Processor::start`]
//! and runs on the group's
//! thread, through the group's control mailbox: between two items, never while a
//! handler runs, so it reads and changes the processor's state without locks.
//!
//! What an invocation answers (one [`crate::ControlReply`], exactly once):
//!
//! | the command | reply |
//! |---|---|
//! | returned `Ok(text)` | APPLIED, `output` = the text |
//! | returned `Err(error)` | FAILED (`FAILED_EFFECT`), the error's message; the processor keeps running |
//! | panicked | FAILED; the panic is a failure of the processor, contained like a handler's: it is quarantined unless it is retry-safe (reply kind `QUARANTINED` then) |
//! | is not registered by the processor | REFUSED (`REFUSED_STATE`), the reason lists the commands it has |
//! | names no running processor | REFUSED (`REFUSED_STATE`), the reason lists the group's processors |
//! | names a quarantined processor | REFUSED (`QUARANTINED`): its commands went with its routes |
//!
//! An error a command returns is its answer to the operator (a usage error, an unknown
//! account), not a failure of the processor: it does not quarantine. A panic is the
//! counterpart of the Java original's thrown exception, whose failure "still
//! propagates its dispatch failure to the host" (book: guarantees/control-plane.md: "A command that ran and then failed ..."), so the
//! group contains it as it contains a failed handler.
//!
//! A processor's commands go when it stops or is quarantined. A group's recorder
//! (`mongoose-replay`) writes each invocation as an `AdminInvoked` entry, and a replay
//! calls the command the replayed processor registered with the recorded arguments.
//!
//! # Example
//!
//! ```
//! use std::collections::BTreeMap;
//! use mongoose_control::FeedSubscriptions;
//! use mongoose_core::{ErasedHandler, Processor, ProcessorError, StartContext};
//!
//! #[derive(Default)]
//! struct Ledger {
//!     balances: BTreeMap<String, i64>,
//! }
//!
//! impl Ledger {
//!     /// `balance ACCOUNT`
//!     fn balance(&mut self, args: &[String]) -> Result<String, ProcessorError> {
//!         let [account] = args else {
//!             return Err("usage: balance ACCOUNT".into());
//!         };
//!         match self.balances.get(account) {
//!             Some(balance) => Ok(balance.to_string()),
//!             None => Err(format!("no account '{account}'").into()),
//!         }
//!     }
//! }
//!
//! impl Processor for Ledger {
//!     fn start(&mut self, context: &mut StartContext<'_>) -> Result<(), ProcessorError> {
//!         context.register_command("balance", Ledger::balance);
//!         Ok(())
//!     }
//! }
//!
//! // A processor host (what a group and a replay call processors through) keeps the
//! // commands its processor registers in start().
//! struct NoFeeds;
//! impl FeedSubscriptions for NoFeeds {
//!     fn subscribe(&mut self, feed: &str, _: ErasedHandler) -> Result<(), ProcessorError> {
//!         Err(format!("no feed '{feed}'").into())
//!     }
//! }
//! let mut ledger = Ledger::default();
//! ledger.balances.insert("acc1".into(), -7);
//! let mut host =
//!     mongoose_control::ProcessorHost::build(mongoose_core::ProcessorId(1), "ledger", move || ledger)
//!         .unwrap();
//! host.start(&mut NoFeeds, None).unwrap();
//! assert_eq!(host.command_names(), ["balance"]);
//!
//! let reply = host.invoke_admin("balance", &["acc1".to_string()], None);
//! assert_eq!(reply, Ok(Ok("-7".to_owned())));
//! let unknown = host.invoke_admin("balance", &["nobody".to_string()], None);
//! assert_eq!(unknown, Ok(Err("no account 'nobody'".to_owned())));
//! assert!(!host.has_command("close"));
//! ```

use std::collections::BTreeMap;
use std::fmt;

use mongoose_core::{CommandHandler, Processor, ProcessorError};

pub use mongoose_core::{is_valid_command_name, MAX_COMMAND_NAME};

/// The admin commands one processor registered in its `start`, by name.
#[derive(Default)]
pub struct AdminCommands {
    commands: BTreeMap<String, CommandHandler>,
}

impl fmt::Debug for AdminCommands {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdminCommands")
            .field("commands", &self.names())
            .finish()
    }
}

impl AdminCommands {
    /// The command names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.commands.keys().cloned().collect()
    }

    /// True when a command of this name is registered.
    pub fn contains(&self, command: &str) -> bool {
        self.commands.contains_key(command)
    }

    /// True when no command is registered.
    pub fn is_empty(&self) -> bool {
        self.commands.is_empty()
    }

    /// Forgets every command (the processor stopped or was quarantined).
    pub fn clear(&mut self) {
        self.commands.clear();
    }

    /// Runs `command` on `processor` with `args`; `None` when no such command is
    /// registered. A panic is not caught here: the caller decides what it means.
    pub fn invoke(
        &mut self,
        processor: &mut dyn Processor,
        command: &str,
        args: &[String],
    ) -> Option<Result<String, ProcessorError>> {
        let handler = self.commands.get(command)?;
        Some(handler(processor, args))
    }

    /// The names as one text for a refusal: `a, b` or `none`.
    pub fn listing(&self) -> String {
        if self.commands.is_empty() {
            "none".to_owned()
        } else {
            self.names().join(", ")
        }
    }

    pub(crate) fn insert(&mut self, name: &str, handler: CommandHandler) -> bool {
        if self.commands.contains_key(name) {
            return false;
        }
        self.commands.insert(name.to_owned(), handler);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Counter {
        count: u64,
    }

    impl Processor for Counter {}

    struct Other;
    impl Processor for Other {}

    fn add(processor: &mut dyn Processor, args: &[String]) -> Result<String, ProcessorError> {
        let any: &mut dyn std::any::Any = processor;
        let Some(counter) = any.downcast_mut::<Counter>() else {
            return Err("another processor type".into());
        };
        let by: u64 = match args {
            [] => 1,
            [by] => by
                .parse()
                .map_err(|_| ProcessorError::new("not a number"))?,
            _ => return Err("usage: add [N]".into()),
        };
        counter.count += by;
        Ok(counter.count.to_string())
    }

    #[test]
    fn the_first_registration_of_a_name_stays_and_commands_run_on_their_processor() {
        let mut commands = AdminCommands::default();
        assert!(commands.insert("add", Box::new(add)));
        assert!(!commands.insert("add", Box::new(|_, _| Ok("second".into()))));
        assert_eq!(commands.names(), ["add"]);
        assert_eq!(commands.listing(), "add");
        let mut counter = Counter { count: 0 };
        let reply = commands.invoke(&mut counter, "add", &["5".into()]);
        assert_eq!(reply.expect("registered").expect("ran"), "5");
        assert_eq!(counter.count, 5);
        assert!(commands
            .invoke(&mut Other, "add", &[])
            .expect("registered")
            .is_err());
        assert!(commands.invoke(&mut counter, "nope", &[]).is_none());
        commands.clear();
        assert_eq!(commands.listing(), "none");
    }
}
