//! The stdout sink.

use std::io::Write;

use mongoose_core::sink::{Output, Sink, SinkOutcome};

/// Writes lines to the process's standard output, flushed per batch: published once
/// written (a pipe's reader is not asked).
#[derive(Debug, Default)]
pub struct StdoutSink {
    buffer: Vec<u8>,
}

impl Sink for StdoutSink {
    fn publish(&mut self, outputs: &[Output], outcomes: &mut Vec<SinkOutcome>) {
        self.buffer.clear();
        for output in outputs {
            self.buffer.extend_from_slice(&output.payload);
            self.buffer.push(b'\n');
        }
        let mut stdout = std::io::stdout().lock();
        let result = stdout.write_all(&self.buffer).and_then(|()| stdout.flush());
        for _ in outputs {
            outcomes.push(match &result {
                Ok(()) => SinkOutcome::Published {
                    evidence: "written to standard output".to_owned(),
                },
                Err(error) => SinkOutcome::Uncertain {
                    evidence: format!("writing to standard output failed part way ({error})"),
                },
            });
        }
    }
}
