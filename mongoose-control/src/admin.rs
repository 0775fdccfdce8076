//! Processor-owned admin commands: a processor registers them while it starts, and an
//! operator runs them through the control plane (`ControlPlane::invoke_admin_command`,
//! or the server's `POST /processors/{group}/{name}/commands/{command}`).
//!
//! A command is a method of the processor, typed like a feed handler:
//! `fn(&mut P, &[String]) -> Result<String, ProcessorError>`. It is registered with
//! [`register_command`] from [`mongoose_core::Processor::start`] and runs on the group's
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
//! propagates its dispatch failure to the host" (control-plane-contracts "Generated
//! processor failure containment": "A command that ran and then failed ..."), so the
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
//! use mongoose_control::admin;
//! use mongoose_core::{Processor, ProcessorError, Subscriptions};
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
//!     fn start(&mut self, _subscriptions: &mut dyn Subscriptions) -> Result<(), ProcessorError> {
//!         admin::register_command("balance", Ledger::balance);
//!         Ok(())
//!     }
//! }
//!
//! // A processor host (what a group and a replay call processors through) collects
//! // the commands around start().
//! struct NoFeeds;
//! impl Subscriptions for NoFeeds {
//!     fn subscribe_erased(
//!         &mut self,
//!         _: &str,
//!         _: std::any::TypeId,
//!         _: &'static str,
//!         _: Box<dyn std::any::Any + Send>,
//!     ) -> Result<(), ProcessorError> {
//!         Ok(())
//!     }
//! }
//! let mut ledger = Ledger::default();
//! ledger.balances.insert("acc1".into(), -7);
//! let mut host = mongoose_control::ProcessorHost::build(
//!     mongoose_core::ProcessorId(1),
//!     "ledger",
//!     "Ledger",
//!     move || Box::new(ledger),
//! )
//! .unwrap();
//! host.start(&mut NoFeeds, None).unwrap();
//! assert_eq!(host.command_names(), ["balance"]);
//!
//! let reply = host.invoke_admin("balance", &["acc1".to_string()], None);
//! assert_eq!(reply, Ok(Ok("-7".to_owned())));
//! let unknown = host.invoke_admin("balance", &["nobody".to_string()], None);
//! assert_eq!(unknown, Ok(Err("no account 'nobody'".to_owned())));
//! assert!(!host.has_command("close"));
//!
//! // outside a start that a host runs, nothing registers
//! assert!(!admin::register_command("balance", Ledger::balance));
//! ```

use std::any::Any;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;

use mongoose_core::{Processor, ProcessorError};

/// An admin command erased over the processor type: the group calls it with the
/// processor that registered it.
pub type AdminHandler =
    Box<dyn FnMut(&mut dyn Processor, &[String]) -> Result<String, ProcessorError> + Send>;

/// The longest command name.
pub const MAX_COMMAND_NAME: usize = 64;

/// The admin commands one processor registered in its `start`, by name.
#[derive(Default)]
pub struct AdminCommands {
    commands: BTreeMap<String, AdminHandler>,
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
        let handler = self.commands.get_mut(command)?;
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

    fn insert(&mut self, name: &str, handler: AdminHandler) -> bool {
        if self.commands.contains_key(name) {
            return false;
        }
        self.commands.insert(name.to_owned(), handler);
        true
    }
}

thread_local! {
    static COLLECTING: RefCell<Option<AdminCommands>> = const { RefCell::new(None) };
}

/// Restores the previous collection when dropped (also on a panic).
struct Collection {
    previous: Option<AdminCommands>,
}

impl Drop for Collection {
    fn drop(&mut self) {
        let previous = self.previous.take();
        COLLECTING.with(|slot| *slot.borrow_mut() = previous);
    }
}

/// Runs `start` (a processor's `start`) while collecting the admin commands it
/// registers with [`register_command`], and returns them. A [`crate::ProcessorHost`]
/// calls it around its processor's `start`, live and in a replay.
pub(crate) fn collect_commands<R>(start: impl FnOnce() -> R) -> (R, AdminCommands) {
    let previous = COLLECTING.with(|slot| slot.replace(Some(AdminCommands::default())));
    let guard = Collection { previous };
    let result = start();
    let commands = COLLECTING
        .with(|slot| slot.borrow_mut().take())
        .unwrap_or_default();
    drop(guard);
    (result, commands)
}

/// True for a name an operator can type and a URL path segment can carry:
/// 1 to [`MAX_COMMAND_NAME`] of `A-Z a-z 0-9 _ - .`.
pub fn is_valid_command_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_COMMAND_NAME
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'-' | b'.'))
}

/// Registers the admin command `name` of the processor being started: call it from
/// [`mongoose_core::Processor::start`]. `handler` is a method of the processor, typed
/// like a feed handler; what it returns is the invocation's reply (see the module
/// docs).
///
/// Returns `false`, registering nothing, outside a `start` that a
/// [`crate::ProcessorHost`] runs, for a name that is not
/// [valid](is_valid_command_name), and for a name the processor already registered
/// (the first stays). Commands are registered only in `start`, so a replay that
/// rebuilds the processor registers the same ones.
pub fn register_command<P>(
    name: &str,
    handler: fn(&mut P, &[String]) -> Result<String, ProcessorError>,
) -> bool
where
    P: Processor,
{
    if !is_valid_command_name(name) {
        tracing::warn!(
            command = name,
            "admin command not registered: a name is 1 to {MAX_COMMAND_NAME} of A-Z a-z 0-9 _ - ."
        );
        return false;
    }
    let erased: AdminHandler = Box::new(move |processor: &mut dyn Processor, args: &[String]| {
        let any: &mut dyn Any = processor;
        match any.downcast_mut::<P>() {
            Some(processor) => handler(processor, args),
            None => Err(ProcessorError::new(format!(
                "admin command registered for {} called with another processor type",
                std::any::type_name::<P>()
            ))),
        }
    });
    COLLECTING.with(|slot| match slot.borrow_mut().as_mut() {
        Some(commands) => {
            let inserted = commands.insert(name, erased);
            if !inserted {
                tracing::warn!(
                    command = name,
                    "admin command registered twice by one processor: the first stays"
                );
            }
            inserted
        }
        None => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Counter {
        count: u64,
    }

    impl Counter {
        fn add(&mut self, args: &[String]) -> Result<String, ProcessorError> {
            let by: u64 = match args {
                [] => 1,
                [by] => by
                    .parse()
                    .map_err(|_| ProcessorError::new("not a number"))?,
                _ => return Err("usage: add [N]".into()),
            };
            self.count += by;
            Ok(self.count.to_string())
        }
    }

    impl Processor for Counter {}

    struct Other;
    impl Processor for Other {}

    #[test]
    fn commands_registered_during_a_collected_start_are_returned_and_run() {
        let (registered, mut commands) = collect_commands(|| {
            [
                register_command("add", Counter::add),
                register_command("add", Counter::add),
                register_command("bad name", Counter::add),
            ]
        });
        assert_eq!(registered, [true, false, false]);
        assert_eq!(commands.names(), ["add"]);
        let mut counter = Counter { count: 0 };
        let reply = commands.invoke(&mut counter, "add", &["5".into()]);
        assert_eq!(reply.expect("registered").expect("ran"), "5");
        assert_eq!(counter.count, 5);
        let error = commands
            .invoke(&mut Other, "add", &[])
            .expect("registered")
            .expect_err("another type");
        assert!(
            error.message().contains("another processor type"),
            "{error}"
        );
    }

    #[test]
    fn nothing_registers_outside_a_collection_and_a_panicking_start_restores_it() {
        assert!(!register_command("add", Counter::add));
        let outer = collect_commands(|| {
            let inner = std::panic::catch_unwind(|| {
                collect_commands(|| {
                    register_command("inner", Counter::add);
                    panic!("start panicked");
                })
            });
            assert!(inner.is_err());
            register_command("outer", Counter::add)
        });
        assert!(outer.0);
        assert_eq!(outer.1.names(), ["outer"]);
        assert!(!register_command("add", Counter::add));
    }
}
