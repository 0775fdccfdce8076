//! Sinks of Mongoose-rs: where processors' outputs go, each attempt answered with an
//! honest [`mongoose_core::sink::SinkOutcome`] (published, verified not published, or
//! uncertain).
//!
//! The contract (keys, outputs, outcomes, the retry budget) is in
//! [`mongoose_core::sink`]; this crate holds the sinks that implement it ([`file`](mod@file):
//! the file sink with exactly-once lines and the stdout sink; [`tcp`]; [`http`]), the
//! [`runner`] that runs one sink on its own thread (batches, retries within a budget,
//! the operator's policy for what cannot be published, status), and the [`writer`] a
//! processor writes through, which keys each output by its input and holds the input's
//! commit until the output is over.
//!
//! ```
//! use mongoose_core::sink::{Output, OutputKey, Sink, SinkOutcome};
//! use mongoose_core::Epoch;
//!
//! struct Discard;
//! impl Sink for Discard {
//!     fn publish(&mut self, outputs: &[Output], outcomes: &mut Vec<SinkOutcome>) {
//!         outcomes.extend(outputs.iter().map(|_| SinkOutcome::NotPublished {
//!             evidence: "discarded".into(),
//!             retryable: false,
//!         }));
//!     }
//! }
//! let mut outcomes = Vec::new();
//! Discard.publish(&[Output::new(OutputKey::new("f", Epoch(1), 0, 1, 0, 1), b"x".to_vec())], &mut outcomes);
//! assert!(!outcomes[0].may_retry());
//! ```
#![forbid(unsafe_code)]

mod error;
pub mod file;
pub mod http;
pub mod runner;
pub mod tcp;
pub mod writer;

pub use error::SinkError;
pub use file::{FileSink, FileSinkConfig, StdoutSink};
pub use http::{HttpCompression, HttpSink, HttpSinkConfig, HttpTlsConfig};
pub use runner::{
    GateId, HeldOutput, LossRecorder, LostOutput, RetryRequested, Retune, RunnerConfig, SendError,
    SinkHandle, SinkRunner, SinkStatus,
};
pub use tcp::{TcpSink, TcpSinkConfig};
pub use writer::{GateSource, SinkWriter};
