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
use mongoose_ledger::{AlertSink, FileAlerts, Ledger, LedgerSettings};
use mongoose_server::{ServerBuilder, SettingsCheck, SettingsError};
use mongoose_sink::SinkWriter;

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
                FileAlerts::open(
                    &context.resolve(path),
                    settings.sync,
                    context.commit_gate(&settings.feed),
                )
                .map_err(|error| {
                    format!("cannot open the alerts file {}: {error}", path.display())
                })?,
            )),
            (None, Some(sink)) => open(Box::new(SinkAlerts(context.sink(sink)?))),
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

/// A configured sink the ledger writes its alerts to.
#[derive(Debug)]
struct SinkAlerts(SinkWriter);

impl AlertSink for SinkAlerts {
    fn write_line(
        &mut self,
        line: &str,
    ) -> std::io::Result<Option<(mongoose_core::sink::OutputKey, String)>> {
        let key = self
            .0
            .write(line.as_bytes().to_vec())
            .map_err(mongoose_ledger::send_error)?;
        Ok(Some((key, self.0.sink().to_owned())))
    }

    fn republish(
        &mut self,
        key: mongoose_core::sink::OutputKey,
        payload: Vec<u8>,
    ) -> std::io::Result<()> {
        self.0
            .republish(key, payload)
            .map_err(std::io::Error::other)
    }

    fn is_settled(&self) -> bool {
        self.0.is_settled()
    }
}
