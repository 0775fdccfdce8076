//! Running a server from a config (book: running/config.md, running/validation.md,
//! running/exit-codes-and-logs.md, running/record-and-replay.md,
//! getting-started/ledger-demo.md and getting-started/install.md): what `validate`
//! checks, exit codes and logs, signals during the start, record and replay, the
//! book's configs, the demo and the shell completions.

mod book_configs;
mod completions;
mod config_checks;
mod demo;
mod honest_logs;
mod logs_and_example;
mod record_replay;
mod signal_during_start;
mod validate_like_run;
