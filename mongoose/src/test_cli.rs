//! `mongoose test --config C [--tests T]`: runs a config's unit tests
//! ([`mongoose_server::unit_tests`]) and prints, per case, `ok` or `FAILED` with its
//! diff. Exits 0 when every case passed, 1 when one failed, 2 when the config or the
//! tests file is invalid.

use std::path::Path;

use mongoose_server::config::ServerConfig;
use mongoose_server::unit_tests::{self, TestFile};
use mongoose_server::{cli, Server, ServerError};

/// `mongoose test`: the exit code, or the code and error of an invalid config or file.
pub fn run(config_path: &Path, tests: Option<&Path>) -> Result<u8, (u8, ServerError)> {
    let invalid = |error| (cli::EXIT_BAD_CONFIG, error);
    let config = ServerConfig::load(config_path).map_err(invalid)?;
    let tests_path = tests
        .map(Path::to_path_buf)
        .unwrap_or_else(|| unit_tests::default_tests_file(config_path));
    let file = TestFile::load(&tests_path).map_err(invalid)?;
    let reports = unit_tests::run_tests(&config, &file, &|config| {
        crate::kinds::register(Server::builder(config))
    })
    .map_err(invalid)?;
    let failed = reports.iter().filter(|report| !report.passed()).count();
    for report in &reports {
        if report.passed() {
            crate::outln!("test '{}': ok", report.name);
        } else {
            crate::outln!("test '{}': FAILED", report.name);
            crate::out!("{}", report.diff);
        }
    }
    crate::outln!(
        "{}: {} tests, {} passed, {failed} failed",
        tests_path.display(),
        reports.len(),
        reports.len() - failed
    );
    Ok(if failed == 0 {
        cli::EXIT_OK
    } else {
        cli::EXIT_FAILED
    })
}
