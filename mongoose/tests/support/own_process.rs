//! One test of the suite in a process of its own: for a test that does to its process
//! what every other test running in it would feel (it raises a signal at itself, and
//! every server of the process has its handlers installed).

use std::process::Command;

/// Set in the child process [`in_own_process`] starts: the test it runs the body of.
const CHILD: &str = "MONGOOSE_TEST_IN_OWN_PROCESS";

/// Runs `body` in a child process of this test binary that runs only the test `test`
/// of module `module` (`module_path!()` of the test's file), and fails with the
/// child's output when that test fails there or does not run. In that child, runs
/// `body`.
pub fn in_own_process(module: &str, test: &str, body: impl FnOnce()) {
    // libtest names a test by its path without the crate's name
    let module = module.split_once("::").map_or("", |(_, rest)| rest);
    let name = format!("{module}::{test}");
    if std::env::var_os(CHILD).is_some_and(|running| running == name.as_str()) {
        body();
        return;
    }
    let binary = std::env::current_exe().expect("the test binary's path");
    let output = Command::new(binary)
        .args([name.as_str(), "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, &name)
        .output()
        .expect("the test binary runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "{name} in a process of its own: {}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        output.status
    );
}
