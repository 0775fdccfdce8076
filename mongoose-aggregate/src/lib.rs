//! The pure core of the `aggregate` processor (issue 40): keyed aggregates configured
//! in TOML, applied exactly once by position, with rules and tumbling event-time
//! windows. No I/O: the processor kind that saves the state with the feed's position
//! (the outbox, the Kafka changelog) is built on it.
//!
//! - [`AggregateSettings`]: the processor's `settings` table (`deny_unknown_fields`).
//! - [`Aggregator::compile`]: checks the settings and parses their expressions; every
//!   error names its key path, and for an expression the column with a caret line.
//! - [`Aggregate::apply`]: one line at its [`LinePosition`] -> an [`Outcome`]. A line at
//!   or before the position its lane's state already holds (same epoch) is
//!   [`Outcome::AlreadyApplied`] and changes nothing: saving the state with the
//!   positions and applying the input again after a crash gives exactly-once effect. A
//!   line that does not read is counted per reason and returned
//!   ([`Outcome::Rejected`]); a line whose window closed is counted and returned
//!   ([`Outcome::Late`]): never dropped silently.
//! - [`AggregateState`]: ordered maps only, `to_bytes`/`from_bytes` with a magic and
//!   a version; the same lines give the same bytes.
//! - [`Aggregate::key`]: one key's aggregates ([`KeyView`]).
//!
//! The rule language is parsed with [`winnow`]: it is the parser `toml_edit` (and so
//! this workspace's config loading) already builds on, well kept, with error offsets
//! and contexts that give the column of a syntax error; `nom` would add a second
//! parser crate for the same job, and `pest` a grammar file and a derive for a grammar
//! of six rules. CSV is read with `csv-core` (quoting, no allocation per line); JSON
//! with `serde_json`; decimals are fixed-point ([`Decimal`], an `i128` of units and a
//! scale: no floats for money); timestamps are parsed with `chrono`.
//!
//! # Example
//!
//! ```
//! use mongoose_aggregate::{Aggregate, AggregateSettings, Aggregator, LinePosition, Outcome};
//!
//! let settings: AggregateSettings = toml::from_str(r#"
//!     format = "csv"
//!     columns = ["account", "amount"]
//!     fields = { account = "string", amount = "decimal" }
//!     group_by = ["account"]
//!     aggregates = { balance = "sum(amount)", n = "count" }
//!     rules = [{ name = "overdraft", when = "balance < 0", emit = "{account} overdrawn: {balance}" }]
//! "#).unwrap();
//! let aggregator = Aggregator::compile(settings, "processors[balances].settings").unwrap();
//! let mut aggregate = Aggregate::new(aggregator);
//!
//! aggregate.apply(LinePosition::at(1, 10), b"alice,10.50");
//! let Outcome::Applied { emits, .. } = aggregate.apply(LinePosition::at(1, 22), b"alice,-12") else {
//!     panic!("applied")
//! };
//! assert_eq!(emits[0].text, "alice overdrawn: -1.50");
//! // the same line again (a re-read after a crash): nothing changes, nothing is emitted
//! assert_eq!(aggregate.apply(LinePosition::at(1, 22), b"alice,-12"), Outcome::AlreadyApplied);
//! let view = aggregate.key(&["alice"]).unwrap();
//! assert_eq!(view.to_json()["values"]["balance"], "-1.50");
//! assert_eq!(view.to_json()["values"]["n"], 2);
//! ```
#![forbid(unsafe_code)]

mod apply;
mod compile;
mod decimal;
mod error;
mod expr;
mod query;
mod record;
mod settings;
mod state;

pub use apply::{Aggregate, Emit, LateEvent, LinePosition, Outcome, WindowResult, KEY_SEPARATOR};
pub use compile::{Aggregator, MAX_RULES};
pub use decimal::{format_time, Decimal, Value, MAX_SCALE};
pub use error::AggregateError;
pub use query::{KeyView, WindowView};
pub use record::Rejection;
pub use settings::{
    AggregateSettings, FieldSpec, FieldTable, FieldType, Fire, Format, RuleSettings, StateMode,
    WindowSettings,
};
pub use state::{
    AggregateState, AggregateValue, Counters, KeyState, LanePosition, STATE_MAGIC, STATE_VERSION,
};
