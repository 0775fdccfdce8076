//! `mongoose completions bash|zsh|fish` (issue 39, item 8): each shell's script is
//! printed, exit 0, and it completes every subcommand.

use std::process::Command;

/// The subcommands a script must complete.
const SUBCOMMANDS: &[&str] = &[
    "run",
    "validate",
    "replay",
    "plugins",
    "audit",
    "status",
    "top",
    "archive",
    "journal",
    "completions",
];

#[test]
fn each_shells_completion_script_is_printed_and_names_every_subcommand() {
    for shell in ["bash", "zsh", "fish"] {
        let output = Command::new(env!("CARGO_BIN_EXE_mongoose"))
            .args(["completions", shell])
            .output()
            .expect("mongoose completions runs");
        assert!(output.status.success(), "{shell}: {output:?}");
        let script = String::from_utf8(output.stdout).expect("utf-8");
        assert!(script.contains("mongoose"), "{shell}: {script}");
        for subcommand in SUBCOMMANDS {
            assert!(
                script.contains(subcommand),
                "the {shell} script completes `{subcommand}`"
            );
        }
        // a nested subcommand too
        assert!(script.contains("describe"), "{shell}: archive describe");
    }
}

#[test]
fn an_unknown_shell_is_refused_naming_the_ones_there_are() {
    let output = Command::new(env!("CARGO_BIN_EXE_mongoose"))
        .args(["completions", "cmd"])
        .output()
        .expect("mongoose completions runs");
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("bash") && stderr.contains("zsh") && stderr.contains("fish"),
        "{stderr}"
    );
}
