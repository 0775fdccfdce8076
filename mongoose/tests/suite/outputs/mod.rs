//! The outputs (book: outputs/sinks.md): the file sink's exactly-once, the HTTP sink
//! over http and https, the `forward` kind, and `/ready` while a sink cannot deliver.

mod file_sink;
mod forward;
mod http_sink;
mod https_sink;
mod ready_sinks;
