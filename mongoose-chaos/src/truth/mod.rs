//! The truth model: every line the harness wrote, what the run must have done with it,
//! and the checks of what it did.
//!
//! Each ledger line has an account of its own (`u<stream>x<seq>,±1`) unless it is one
//! of a few shared ("hot") accounts per stream, so the ledger's balances say, line by
//! line, whether it was applied never, once or twice. Each forwarded line is unique
//! (`E<stream>x<seq> ...`), so the output says the same. A line is `Must` (applied
//! exactly once; present exactly once where the sink promises exactly once) or
//! `Maybe` (a fault took it away before the server could have read it: absent only if
//! the run says it lost something, when `report` is set; never twice).

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

pub use crate::failure::{Failure, FailureKind};

mod aggregate;
mod ledger;
mod outputs;
use crate::scenario::{Options, Workload};
pub use aggregate::{dead_letter_line, AggregateView, KeyTotals};

/// What the run must have done with a line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// Applied exactly once, every output of it present.
    Must,
    /// May be missing; when `report`, a missing one must make the run not lossless.
    Maybe {
        /// Whether its loss must be reported.
        report: bool,
    },
}

/// One line the harness wrote.
#[derive(Clone, Debug)]
pub struct LineRecord {
    /// Its stream (a glob's file).
    pub stream: u32,
    /// The text, without its newline.
    pub text: String,
    /// The ledger account (ledger lines).
    pub account: String,
    /// The ledger amount (ledger lines).
    pub amount: i64,
    /// On a shared account.
    pub hot: bool,
    /// A line that does not parse (the aggregate's: counted and dead-lettered, never
    /// applied).
    pub rejected: bool,
    /// What the run must have done with it.
    pub expect: Expect,
}

/// Every line written, in the order written per stream.
#[derive(Debug)]
pub struct Truth {
    workload: Workload,
    writers: u8,
    negative_percent: u32,
    hot_percent: u32,
    line_bytes: u32,
    bad_percent: u32,
    json: bool,
    random: ChaCha8Rng,
    /// Every line, in the order written.
    pub lines: Vec<LineRecord>,
    /// Streams whose lines may be applied out of the order written (a file renamed
    /// inside a glob and the new file at its name are two lanes, read at once): a
    /// shared account's alerts cannot be told in advance, its sum can.
    pub unordered: BTreeSet<u32>,
    next_seq: BTreeMap<u32, u64>,
}

/// How a sink's outputs are promised.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Promise {
    /// Each output exactly once (the file sink).
    ExactlyOnce,
    /// Each output at least once, under one key (HTTP).
    AtLeastOnceKeyed,
    /// Each output at least once (journal, TCP).
    AtLeastOnce,
}

/// One output the sink's target holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputRecord {
    /// Its key, where the target sees one (HTTP's `Idempotency-Key`).
    pub key: Option<String>,
    /// The line.
    pub body: String,
}

/// What the outputs' check counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OutputCounts {
    /// Outputs expected (must and maybe).
    pub expected: usize,
    /// Outputs present.
    pub present: usize,
    /// Maybe-outputs missing.
    pub missing_maybe: usize,
    /// Must-outputs missing (each one in the `Lost` failure).
    pub missing_must: usize,
    /// Outputs missing that the target refused as often as the sink may try (the
    /// `excused` of [`Truth::check_outputs`]): the sink's `count_loss` counted them.
    pub missing_excused: usize,
}

impl Truth {
    /// The truth of a scenario with `options`.
    pub fn new(workload: Workload, writers: u8, options: &Options, seed: u64) -> Truth {
        Truth {
            workload,
            writers,
            negative_percent: options.negative_percent.min(100),
            hot_percent: options.hot_percent.min(100),
            line_bytes: options.line_bytes,
            bad_percent: options.bad_percent.min(100),
            json: options.json,
            random: ChaCha8Rng::seed_from_u64(seed ^ 0x6c69_6e65_7321),
            lines: Vec::new(),
            unordered: BTreeSet::new(),
            next_seq: BTreeMap::new(),
        }
    }

    /// Makes `count` new lines of `stream`; their indexes.
    /// `pad`: bytes of padding of forwarded lines (default: the options' `line_bytes`).
    pub fn new_lines(&mut self, stream: u32, count: u32, pad: Option<u32>) -> Range<usize> {
        let start = self.lines.len();
        for _ in 0..count {
            let seq = {
                let next = self.next_seq.entry(stream).or_insert(0);
                *next += 1;
                *next
            };
            let record = match self.workload {
                Workload::Ledger => {
                    let hot = self.random.random_range(0..100) < self.hot_percent;
                    let negative = self.random.random_range(0..100) < self.negative_percent;
                    let (account, amount) = if hot {
                        let account = format!("h{stream}x{}", self.random.random_range(0..4));
                        let size = self.random.random_range(1..=3);
                        (account, if negative { -size } else { size })
                    } else {
                        (format!("u{stream}x{seq}"), if negative { -1 } else { 1 })
                    };
                    LineRecord {
                        stream,
                        text: format!("{account},{amount}"),
                        account,
                        amount,
                        hot,
                        rejected: false,
                        expect: Expect::Must,
                    }
                }
                Workload::Aggregate => self.aggregate_line(stream, seq),
                Workload::Forward => {
                    let tag = if seq % 2 == 0 { 'W' } else { 'E' };
                    let pad = "x".repeat(pad.unwrap_or(self.line_bytes) as usize);
                    LineRecord {
                        stream,
                        text: format!("{tag}{stream}x{seq:08} {pad}"),
                        account: String::new(),
                        amount: 0,
                        hot: false,
                        rejected: false,
                        expect: Expect::Must,
                    }
                }
            };
            self.lines.push(record);
        }
        start..self.lines.len()
    }

    /// The lines of `range`, each with its newline.
    pub fn text_of(&self, range: Range<usize>) -> String {
        let mut text = String::new();
        for record in &self.lines[range] {
            text.push_str(&record.text);
            text.push('\n');
        }
        text
    }

    /// Lines a fault may have taken away.
    pub fn mark_maybe(&mut self, indexes: impl IntoIterator<Item = usize>, report: bool) {
        for index in indexes {
            if let Some(record) = self.lines.get_mut(index) {
                record.expect = match record.expect {
                    // a loss to report stays one to report
                    Expect::Maybe { report: earlier } => Expect::Maybe {
                        report: earlier || report,
                    },
                    Expect::Must => Expect::Maybe { report },
                };
            }
        }
    }

    /// Lines that were never input (given to a writer that refused them, or never
    /// written): they may be missing and their absence is no loss to report, whatever
    /// an earlier mark said (a damage that marked them while the harness still held them
    /// for input).
    pub fn mark_no_input(&mut self, indexes: impl IntoIterator<Item = usize>) {
        for index in indexes {
            if let Some(record) = self.lines.get_mut(index) {
                record.expect = Expect::Maybe { report: false };
            }
        }
    }

    /// Whether any line is a maybe.
    pub fn has_maybe(&self) -> bool {
        self.lines
            .iter()
            .any(|record| matches!(record.expect, Expect::Maybe { .. }))
    }

    /// Streams with a maybe line: their shared accounts cannot be checked to the unit.
    /// The streams whose shared accounts' alerts cannot be told in advance: a line
    /// may be gone, or the lines may be applied out of the order written.
    fn unpredictable_alert_streams(&self) -> Vec<u32> {
        let mut streams = self.uncertain_streams();
        streams.extend(self.unordered.iter().copied());
        streams.sort_unstable();
        streams.dedup();
        streams
    }

    fn uncertain_streams(&self) -> Vec<u32> {
        let mut streams: Vec<u32> = self
            .lines
            .iter()
            .filter(|record| matches!(record.expect, Expect::Maybe { .. }))
            .map(|record| record.stream)
            .collect();
        streams.sort_unstable();
        streams.dedup();
        streams
    }
}

/// What identifies an output of `workload` in the checks: a forwarded line itself; a
/// ledger's alert by account and balance (`None`: no output of the workload looks so).
pub fn identity_of(workload: Workload, body: &str) -> Option<String> {
    match workload {
        Workload::Forward => Some(body.to_owned()),
        Workload::Ledger | Workload::Aggregate => ledger_output_identity(body),
    }
}

/// An alert as the check compares it: account and balance (its position depends on
/// which file and epoch the line was read in).
fn alert_identity(account: &str, balance: i64) -> String {
    format!("alert {account} {balance}")
}

/// The identity of a ledger run's output: an alert `position,account,balance`, or a
/// forwarded input line `account,amount`.
fn ledger_output_identity(body: &str) -> Option<String> {
    let fields: Vec<&str> = body.split(',').collect();
    match fields.as_slice() {
        [_position, account, balance] => {
            let balance: i64 = balance.parse().ok()?;
            Some(alert_identity(account, balance))
        }
        [_account, _amount] => Some(body.to_owned()),
        _ => None,
    }
}

fn sample(items: &[&str]) -> String {
    let mut shown: Vec<&str> = items.iter().take(3).copied().collect();
    shown.sort_unstable();
    shown.join(", ")
}

#[cfg(test)]
pub(crate) mod testing {
    //! What the truth's tests share: a small truth and a ledger state built from it.

    use mongoose_ledger::LedgerState;

    use super::*;

    /// A truth of 20 lines of `workload`, each on an account of its own.
    pub(crate) fn truth(workload: Workload) -> Truth {
        let options = Options {
            hot_percent: 0,
            negative_percent: 50,
            ..Options::default()
        };
        let mut truth = Truth::new(workload, 1, &options, 3);
        truth.new_lines(0, 20, None);
        truth
    }

    /// The ledger state that applied line `index` `times(index)` times.
    pub(crate) fn state_of(truth: &Truth, times: impl Fn(usize) -> i64) -> LedgerState {
        let mut state = LedgerState::default();
        for (index, record) in truth.lines.iter().enumerate() {
            let count = times(index);
            if count > 0 {
                *state.balances.entry(record.account.clone()).or_insert(0) += record.amount * count;
                state.applied += count as u64;
            }
        }
        state
    }
}
