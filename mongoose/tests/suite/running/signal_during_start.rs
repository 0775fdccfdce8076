//! A SIGTERM that arrives while the server starts stops the run cleanly: the handlers
//! are installed before the start ([`cli::Signals`]), so the signal is kept and the
//! run loop runs the ordered shutdown as soon as it begins. Before, the binary
//! installed them only once the server had started (and its admin API was serving): a
//! signal in between ended the process with the default action, no ordered stop (a
//! test saw exit -1 on a loaded machine). Its own process (a child of the
//! suite's binary): it signals itself.

use crate::support;
use mongoose::kinds as ledger_kind;

use mongoose_server::cli::{self, EXIT_OK};
use mongoose_server::config::ServerConfig;
use mongoose_server::Server;
use support::own_process::in_own_process;
use support::{ledger_config, LedgerRun};

#[test]
fn a_sigterm_during_the_start_stops_the_run_cleanly() {
    // it signals its own process, where every server of another test would see it
    in_own_process(
        module_path!(),
        "a_sigterm_during_the_start_stops_the_run_cleanly",
        sigterm_during_the_start,
    );
}

fn sigterm_during_the_start() {
    let run = LedgerRun::new(
        &"a,1\n".repeat(100),
        &ledger_config(
            "",
            "",
            "state_dir = \"state\", alerts = \"alerts.txt\", sync = false",
        ),
    );
    let config = ServerConfig::load(&run.path("mongoose.toml")).expect("config");
    let signals = cli::Signals::install().expect("handlers");
    let server = ledger_kind::register(Server::builder(config))
        .build()
        .expect("built");
    // the signal arrives while the server is being started
    signal_hook::low_level::raise(signal_hook::consts::SIGTERM).expect("raised");
    assert!(signals.received(), "kept, not the default action");
    server.start().expect("started");
    let outcome = cli::run_until_done_with_signals(&server, false, &signals).expect("ran");
    assert_eq!(
        outcome.code, EXIT_OK,
        "a clean, complete stop: {:?}",
        outcome.failures
    );
}
