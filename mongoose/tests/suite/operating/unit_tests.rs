//! `mongoose test` (issue 39, item 7): a config's unit tests, as `vector test`, run by
//! the real binary on the book's example (`docs/examples/unit-tests/`): a passing file
//! exits 0, a failing one exits 1 with a diff per failing case, a broken one exits 2;
//! nothing is read or written where the config points.

use crate::support;

use std::path::Path;
use std::process::Command;

use support::binary;

fn mongoose_test(config: &Path, tests: Option<&Path>) -> (i32, String, String) {
    let mut command = Command::new(binary());
    command.arg("test").arg("--config").arg(config);
    if let Some(tests) = tests {
        command.arg("--tests").arg(tests);
    }
    let output = command
        .env("RUST_LOG", "warn")
        .output()
        .expect("mongoose test runs");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn mongoose_test_runs_a_configs_unit_tests() {
    let dir = tempfile::tempdir().expect("dir");
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/examples/unit-tests");
    for file in ["pipeline.toml", "pipeline.tests.toml"] {
        std::fs::copy(example.join(file), dir.path().join(file)).expect("the example");
    }
    let config = dir.path().join("pipeline.toml");

    // the example's own tests, found beside the config: they pass
    let (code, stdout, stderr) = mongoose_test(&config, None);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.contains("test 'errors and warnings become alerts, every line is archived': ok"),
        "{stdout}"
    );
    assert!(stdout.contains("2 tests, 2 passed, 0 failed"), "{stdout}");

    // a failing file: a wrong expectation, and a sink given a line it was not expected
    // to be given
    let failing = dir.path().join("failing.tests.toml");
    std::fs::write(
        &failing,
        r#"
[[tests]]
name = "passes"
feed = "app"
input = ["ERROR one"]
[tests.outputs]
alerts = ["app: ERROR one"]
archive = ["ERROR one"]

[[tests]]
name = "expects the wrong alert"
feed = "app"
input = ["ERROR disk full", "INFO fine"]
[tests.outputs]
alerts = ["app: ERROR disk ful"]
archive = ["ERROR disk full", "INFO fine"]

[[tests]]
name = "forgets the archive"
feed = "app"
input = ["DEBUG tick"]
"#,
    )
    .expect("failing tests");
    let (code, stdout, stderr) = mongoose_test(&config, Some(&failing));
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stdout.contains("test 'passes': ok"), "{stdout}");
    assert!(
        stdout.contains(
            "test 'expects the wrong alert': FAILED\nsink alerts: expected 1 lines, given 1\n  - app: ERROR disk ful\n  + app: ERROR disk full\n"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "test 'forgets the archive': FAILED\nsink archive: expected 0 lines, given 1\n  + DEBUG tick\n"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("3 tests, 1 passed, 2 failed"), "{stdout}");

    // a case naming a feed the config does not have: the file is broken, exit 2
    let broken = dir.path().join("broken.tests.toml");
    std::fs::write(
        &broken,
        "[[tests]]\nname = \"typo\"\nfeed = \"ap\"\ninput = [\"x\"]\n",
    )
    .expect("broken tests");
    let (code, _, stderr) = mongoose_test(&config, Some(&broken));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("names the feed 'ap'"), "{stderr}");

    // the config's files were neither read nor written
    for file in ["alerts.txt", "archive.txt", "logs", "data"] {
        assert!(!dir.path().join(file).exists(), "{file} was made");
    }
}
