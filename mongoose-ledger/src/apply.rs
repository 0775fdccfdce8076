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

/// Opens (creating) `rejected.log` in `state_dir` for appending; a new one's name is
/// synced into the folder (its lines are synced with the state that counts them).
pub(crate) fn open_rejected_log(state_dir: &Path) -> Result<File, ProcessorError> {
    let path = state_dir.join("rejected.log");
    let failed = |error: std::io::Error| {
        ProcessorError::new(format!(
            "cannot open {} for appending: {error}",
            path.display()
        ))
    };
    let existed = path.exists();
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(failed)?;
    if !existed {
        mongoose_durable::disk::sync_folder(state_dir).map_err(failed)?;
    }
    Ok(file)
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
    position: &(impl std::fmt::Display + ?Sized),
    line: &Line,
) -> Result<Applied, ProcessorError> {
    let mut account = String::new();
    Ok(
        match apply_line_to(state, rejected_log, alerts, position, line, &mut account)? {
            AppliedTo::Account { balance, alert } => Applied::Account {
                account,
                balance,
                alert,
            },
            AppliedTo::Rejected => Applied::Rejected,
        },
    )
}

/// What [`apply_line_to`] did (the account is in its `account` buffer).
pub(crate) enum AppliedTo {
    /// The account's balance is now `balance`; `alert` when it went negative.
    Account {
        balance: i64,
        alert: Option<AlertWritten>,
    },
    /// The line was rejected (malformed, or the balance would overflow).
    Rejected,
}

/// [`apply_line`] writing the account into the buffer `account` (its capacity kept
/// from line to line) instead of a new string, and formatting `position` only for a
/// rejected line or an alert: what the ledger does per line, without allocating.
pub(crate) fn apply_line_to(
    state: &mut LedgerState,
    rejected_log: &mut File,
    alerts: &mut dyn AlertSink,
    position: &(impl std::fmt::Display + ?Sized),
    line: &Line,
    account_out: &mut String,
) -> Result<AppliedTo, ProcessorError> {
    // a line that is not UTF-8 has U+FFFD in its account or amount: rejected
    let text = line.text();
    let (account, amount) = match parse_line(&text) {
        Err(reason) => return reject(state, rejected_log, position, reason, line),
        Ok(parsed) => parsed,
    };
    // one look-up of the account: its balance is updated in place
    let slot = state.balances.get_mut(account);
    let Some(updated) = slot.as_deref().copied().unwrap_or(0).checked_add(amount) else {
        return reject(
            state,
            rejected_log,
            position,
            "the balance would overflow",
            line,
        );
    };
    let mut alert = None;
    if updated < 0 {
        // written before anything changes: a full sink makes the line come again
        let payload = format!("{position},{account},{updated}");
        let key = alerts.write_line(&payload).map_err(alert_error)?;
        alert = Some(AlertWritten {
            key,
            payload: payload.into_bytes(),
        });
    }
    match slot {
        Some(balance) => *balance = updated,
        None => {
            state.balances.insert(account.to_owned(), updated);
        }
    }
    state.applied += 1;
    account_out.clear();
    account_out.push_str(account);
    Ok(AppliedTo::Account {
        balance: updated,
        alert,
    })
}

/// Appends a rejected line to `rejected_log` with its position and reason, then counts
/// it.
fn reject(
    state: &mut LedgerState,
    rejected_log: &mut File,
    position: &(impl std::fmt::Display + ?Sized),
    reason: &str,
    line: &Line,
) -> Result<AppliedTo, ProcessorError> {
    // written before it counts: a write that fails (a full disk) leaves the count as
    // it was, and the retry of the line counts it once
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
    Ok(AppliedTo::Rejected)
}
