//! The processor kind `ledger` of the `mongoose` binary: the adapter between the
//! server's kind API ([`ServerBuilder::processor_kind_checked`]) and the
//! `mongoose-ledger` crate.
//!
//! Not a part of the server's library: the binary declares this module, and the
//! examples and tests that build a server with the ledger kind in their own process
//! include this file (`#[path = ".../src/ledger_kind.rs"] mod ledger_kind;`). It
//! cannot live in the ledger crate, which would then depend on the server, whose
//! binary depends on the ledger (a cycle).

use mongoose_core::Processor;
use mongoose_ledger::{AlertSink, Ledger, LedgerSettings, SinkAlerts};
use mongoose_server::{ServerBuilder, SettingsCheck, SettingsError};

/// Registers the processor kind `ledger` on `builder`: its settings are checked when
/// the server is built (and by `mongoose validate`), the ledger opens at start.
pub(crate) fn register(builder: ServerBuilder) -> ServerBuilder {
    builder.processor_kind_checked("ledger", check, |context| {
        let mut settings: LedgerSettings = context.settings()?;
        settings.state_dir = context.resolve(&settings.state_dir);
        let open = |alerts: Box<dyn AlertSink>| {
            Ledger::open(
                settings.clone(),
                alerts,
                context.commit_gate(&settings.feed),
            )
            .map(|ledger| Box::new(ledger) as Box<dyn Processor>)
            .map_err(|error| error.to_string())
        };
        match (&settings.alerts, &settings.alerts_sink) {
            (Some(path), None) => open(Box::new(
                SinkAlerts::file(
                    &context.resolve(path),
                    settings.sync,
                    context.commit_gate(&settings.feed),
                )
                .map_err(|error| {
                    format!("cannot open the alerts file {}: {error}", path.display())
                })?,
            )),
            (None, Some(sink)) => open(Box::new(SinkAlerts::writer(context.sink(sink)?))),
            _ => Err(
                "give the ledger exactly one of alerts (a file) or alerts_sink \
                 (a configured sink)"
                    .to_owned(),
            ),
        }
    })
}

/// The ledger kind's settings check (its `validate(settings)` hook, run when the
/// server is built and by `mongoose validate`): the settings deserialize (no unknown
/// key, `state_dir` given), the feed is one the server has, an `alerts_sink` is a
/// configured sink, and the ledger's own checks ([`LedgerSettings::check`]).
fn check(check: &SettingsCheck<'_>) -> Result<(), SettingsError> {
    let settings: LedgerSettings = check.settings()?;
    check.feed("feed", &settings.feed)?;
    if let (None, Some(sink)) = (&settings.alerts, &settings.alerts_sink) {
        check.sink("alerts_sink", sink)?;
    }
    settings
        .check(|path| check.resolve(path))
        .map_err(|refusal| match refusal.key {
            Some(key) => SettingsError::at(key, refusal.message),
            None => SettingsError::new(refusal.message),
        })
}
