//! Applying one line to a ledger's state: parsing it, the rejected log, the alert of a
//! balance that goes negative.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;

use mongoose_core::sink::OutputKey;

use crate::state::LedgerState;

use mongoose_core::ProcessorError;
use mongoose_source_file::Line;

use super::alerts::AlertSink;

/// Why a line is not applied.
pub(super) fn parse_line(line: &str) -> Result<(&str, i64), &'static str> {
    let (account, amount) = line.split_once(',').ok_or("expected account,amount")?;
    let valid_account = !account.is_empty()
        && account.len() <= 64
        && account
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-');
    if !valid_account {
        return Err("the account must be 1 to 64 of A-Z a-z 0-9 _ -");
    }
    let amount = amount
        .trim_end()
        .parse::<i64>()
        .map_err(|_| "the amount is not a signed 64-bit integer")?;
    Ok((account, amount))
}

/// Opens (creating) `rejected.log` in `state_dir` for appending.
pub(crate) fn open_rejected_log(state_dir: &Path) -> Result<File, ProcessorError> {
    let path = state_dir.join("rejected.log");
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|error| {
            ProcessorError::new(format!(
                "cannot open {} for appending: {error}",
                path.display()
            ))
        })
}

/// An alert the alerts sink did not take, as the processor's error: busy when the sink
/// is full (the line comes again), failed otherwise.
pub(crate) fn alert_error(error: std::io::Error) -> ProcessorError {
    if error.kind() == std::io::ErrorKind::WouldBlock {
        ProcessorError::busy(error.to_string())
    } else {
        ProcessorError::new(error.to_string())
    }
}

/// An alert written for a line: its text, and its output key when a keyed sink took it.
pub(crate) struct AlertWritten {
    pub(crate) key: Option<(OutputKey, String)>,
    pub(crate) payload: Vec<u8>,
}

/// What applying a line did.
pub(crate) enum Applied {
    /// The account's balance is now `balance`; `alert` when it went negative.
    Account {
        account: String,
        balance: i64,
        alert: Option<AlertWritten>,
    },
    /// The line was rejected (malformed, or the balance would overflow).
    Rejected,
}

/// Applies one line to `state` (the ledger's whole state, or one partition's): its
/// balances and counts, never its position. A malformed line (or one that would overflow the
/// balance) is appended to `rejected_log` with its `position` and reason; a balance that
/// goes negative writes the alert `position,account,balance` first (a full alerts sink
/// makes the ledger busy before anything changes, and the line comes again).
pub(crate) fn apply_line(
    state: &mut LedgerState,
    rejected_log: &mut File,
    alerts: &mut dyn AlertSink,
    position: &str,
    line: &Line,
) -> Result<Applied, ProcessorError> {
    // a line that is not UTF-8 has U+FFFD in its account or amount: rejected
    let text = line.text();
    let mut reject = |reason: &str, rejected_log: &mut File| -> Result<Applied, ProcessorError> {
        // written before it counts: a write that fails (a full disk) leaves the count
        // as it was, and the retry of the line counts it once
        writeln!(rejected_log, "{position},{reason},{line}")?;
        state.rejected += 1;
        static DESCRIBED: std::sync::Once = std::sync::Once::new();
        DESCRIBED.call_once(|| {
            metrics::describe_counter!(
                "mongoose_ledger_rejected_lines_total",
                "Input lines the ledger rejected (written to its rejected log)."
            );
        });
        metrics::counter!("mongoose_ledger_rejected_lines_total").increment(1);
        Ok(Applied::Rejected)
    };
    let (account, amount) = match parse_line(&text) {
        Err(reason) => return reject(reason, rejected_log),
        Ok(parsed) => parsed,
    };
    let balance = state.balances.get(account).copied().unwrap_or(0);
    let Some(updated) = balance.checked_add(amount) else {
        return reject("the balance would overflow", rejected_log);
    };
    let mut alert = None;
    if updated < 0 {
        let payload = format!("{position},{account},{updated}");
        let key = alerts.write_line(&payload).map_err(alert_error)?;
        alert = Some(AlertWritten {
            key,
            payload: payload.into_bytes(),
        });
    }
    state.balances.insert(account.to_owned(), updated);
    state.applied += 1;
    Ok(Applied::Account {
        account: account.to_owned(),
        balance: updated,
        alert,
    })
}
