//! What a run found: the kinds of failure and one finding (re-exported by
//! [`crate::truth`], which finds most of them).

use std::fmt;

/// The kinds of failure, the first column of the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FailureKind {
    /// An input that had to be applied (or an output that had to be written) is not.
    Lost,
    /// Applied (or written, where exactly once is promised) twice, or under two keys.
    Doubled,
    /// Something in the state or the output that is in no input.
    Invented,
    /// A known loss, and the run said lossless (exit 0).
    FalseLossless,
    /// Nothing lost, no fault that could lose, and the run said not lossless.
    FalseAlarm,
    /// An exit code that the run's outcome does not explain.
    BadExit,
    /// The final `--exit-when-settled` run did not end by its deadline.
    NeverEnded,
    /// A counter of the status that the peers' own records contradict.
    DishonestCount,
    /// A refusal that changed what it refused to start on (an output cut).
    CutOutput,
    /// A refusal where none is promised, or one that does not name what it refuses
    /// (the damaged file, the key).
    BadRefusal,
    /// A reload that ended otherwise than promised (a `data_dir` change applied, a
    /// half-written file taken, a replacement refused).
    BadReload,
    /// A crash loop whose kills left nothing more applied while lines waited.
    NoProgress,
    /// A request the HTTP target cannot read as the sink's documentation promises
    /// (one key per ndjson line, the content type, gzip, the batch limits).
    BadRequest,
    /// The harness itself could not do a step (a setup problem, not a finding).
    Harness,
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            FailureKind::Lost => "lost",
            FailureKind::Doubled => "doubled",
            FailureKind::Invented => "invented",
            FailureKind::FalseLossless => "false-lossless",
            FailureKind::FalseAlarm => "false-alarm",
            FailureKind::BadExit => "bad-exit",
            FailureKind::NeverEnded => "never-ended",
            FailureKind::DishonestCount => "dishonest-count",
            FailureKind::CutOutput => "cut-output",
            FailureKind::BadRefusal => "bad-refusal",
            FailureKind::BadReload => "bad-reload",
            FailureKind::NoProgress => "no-progress",
            FailureKind::BadRequest => "bad-request",
            FailureKind::Harness => "harness",
        };
        f.write_str(text)
    }
}

/// One finding of a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// Its kind.
    pub kind: FailureKind,
    /// What, with figures.
    pub detail: String,
}

impl Failure {
    /// A failure of `kind`.
    pub fn new(kind: FailureKind, detail: impl Into<String>) -> Failure {
        Failure {
            kind,
            detail: detail.into(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.detail)
    }
}
