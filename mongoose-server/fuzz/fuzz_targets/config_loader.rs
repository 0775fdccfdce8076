//! The config loader on arbitrary text: `ServerConfig::parse` and then every check the
//! server builder makes before it builds anything (`ServerBuilder::check`: names,
//! ranges, paths, overrides, record.processors, each processor kind's settings check)
//! return a config or an error with a key path, and never panic (issue 10). Run with
//! `cargo fuzz run -s none config_loader` from mongoose-server/ (or `cargo xtask fuzz`).
//!
//! The checks only look at the disk (whether a path exists, is a directory, resolves
//! to the same file as another): relative paths resolve against a folder that does
//! not exist, and nothing is opened or created.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use mongoose_server::config::ServerConfig;
use mongoose_server::{Server, ServerError};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let base = Path::new("/nonexistent/mongoose-fuzz");
    match ServerConfig::parse(text, base) {
        Ok(config) => {
            // a config that loads is checked again, as `mongoose validate` does
            let _ = Server::builder(config.clone()).check();
            let _ = config.validated();
        }
        Err(ServerError::Config { path, message }) => {
            assert!(
                !message.is_empty(),
                "a config error says what is wrong at {path}"
            );
        }
        Err(_) => {}
    }
});
