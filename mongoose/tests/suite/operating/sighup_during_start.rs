//! A SIGHUP that arrives while the server starts does not end the process (its default
//! action): [`cli::Signals`] catches it from before the start, and the run loop serves
//! it as a reload once the server runs. Before, SIGHUP was not caught at all and ended
//! the process (exit 129, no ordered stop). Its own process (a child of the
//! suite's binary): it signals itself.

use crate::support;
use mongoose::kinds as ledger_kind;

use mongoose_server::cli::{self, EXIT_OK};
use mongoose_server::config::ServerConfig;
use mongoose_server::Server;
use support::own_process::in_own_process;
use support::{ledger_config, LedgerRun};

#[test]
fn a_sighup_during_the_start_is_served_as_a_reload_once_the_server_runs() {
    // it signals its own process, where every server of another test would see it
    in_own_process(
        module_path!(),
        "a_sighup_during_the_start_is_served_as_a_reload_once_the_server_runs",
        sighup_during_the_start,
    );
}

fn sighup_during_the_start() {
    let run = LedgerRun::new(
        &"a,1\n".repeat(100),
        &ledger_config(
            "",
            "",
            "state_dir = \"state\", alerts = \"alerts.txt\", sync = false",
        ),
    );
    let path = run.path("mongoose.toml");
    let config = ServerConfig::load(&path).expect("config");
    let signals = cli::Signals::install().expect("handlers");
    let server = ledger_kind::register(Server::builder(config))
        .build()
        .expect("built");
    // the signal arrives while the server is being built and started
    signal_hook::low_level::raise(signal_hook::consts::SIGHUP).expect("raised");
    server.start().expect("started");
    let outcome = cli::run_until_done_reloading(&server, true, &signals, &path).expect("ran");
    assert_eq!(outcome.code, EXIT_OK, "settled: {:?}", outcome.failures);
    let reload = server
        .last_reload()
        .expect("the SIGHUP was served as a reload");
    assert_eq!(reload.outcome, "unchanged", "{reload:?}");
    assert_eq!(server.config_generation(), 1);
}
