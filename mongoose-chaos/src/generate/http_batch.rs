//! The `http-batch` family: HTTP sinks that send ndjson batches (`batch_max_lines`,
//! `batch_max_bytes`, gzip), over http or https, to a target that answers 413, 429 or
//! 5xx, closes mid-body or answers late.

use crate::scenario::{HttpBatch, Options, Scenario, SinkKind, SourceKind, Step};

use super::Builder;

impl Builder {
    /// The source and sink of an `http-batch` scenario.
    pub(crate) fn http_batch_shape(&mut self, options: &mut Options) -> (SourceKind, SinkKind) {
        options.http_batch = Some(HttpBatch {
            max_lines: self.between(2, 500),
            max_bytes: None,
            gzip: self.chance(50),
        });
        (
            self.pick(&[SourceKind::File, SourceKind::Glob]),
            SinkKind::Http,
        )
    }

    /// The steps of an `http-batch` scenario.
    pub(crate) fn http_batch_steps(&mut self, scenario: &mut Scenario) {
        let streams = scenario.options.streams;
        self.steps.push(Step::Start);
        self.append(streams, 100, 3_000);
        self.steps.push(Step::Settle);
    }
}
