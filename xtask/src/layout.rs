//! `cargo xtask layout`: the architecture as the manifests and the files show it,
//! checked (CI runs it).
//!
//! * **librdkafka only where Kafka is used.** `cargo tree -e normal` of the server
//!   library, and of the `mongoose` binary built without its `kafka` feature (the
//!   file-only build), holds no `rdkafka` crate; the server library depends on no
//!   application crate (`mongoose-ledger`).
//! * **The audit under control.** `mongoose-audit` (the control audit and audit
//!   capture) depends on no control, replay, server or delivery crate: control depends
//!   on it, never the other way (issue 42 item 3).
//! * **Files along their seams.** No `.rs` file under a crate's `src/` is longer than
//!   [`MAX_LINES`] lines (tests, examples and benches are not counted).
//! * **Invariants cited as listed.** Every `invariant N` in a Rust comment names an
//!   invariant of `docs/src/reference/invariants.md` (see [`crate::invariants`]).
//! * **One end-to-end test binary.** At most five `.rs` files (test binaries) directly
//!   in `mongoose/tests/`, and every `mongoose/tests/...` path the book, the README, the
//!   regression index, the chaos seeds and CI name exists (see [`crate::test_layout`]).
//! * **One HTTP target.** An `HTTP/1.1` status line or request line (the text
//!   [`RAW_HTTP`]) appears in a `.rs` file only under `mongoose-testkit/` (the one
//!   scripted target, `mongoose_testkit::http_target`) or in a test of
//!   [`RAW_HTTP_ALLOWED`] that writes raw bytes as a client on purpose (issue 42,
//!   item 4: six hand-written targets had drifted apart).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The longest a source file of a crate may be.
pub(crate) const MAX_LINES: usize = 800;

/// The text of a hand-written `HTTP/1.1` exchange (built so that this file does not hold
/// it).
const RAW_HTTP: &str = concat!("HTTP/1.1", " ");

/// Where [`RAW_HTTP`] may appear: the testkit, which holds the one scripted target.
const RAW_HTTP_HOME: &str = "mongoose-testkit/";

/// Tests that write raw HTTP bytes as a client on purpose (a server's parser checked
/// against what no library client sends), relative to the workspace root.
const RAW_HTTP_ALLOWED: &[&str] = &["mongoose/tests/suite/operating/admin_security.rs"];

/// A dependency tree that must not hold some crates.
struct TreeRule {
    /// What is checked, for the message.
    what: &'static str,
    /// `cargo tree` arguments.
    arguments: &'static [&'static str],
    /// Crates that must not appear in it.
    forbidden: &'static [&'static str],
    /// Where what was found belongs instead, for the message.
    instead: &'static str,
}

/// What the library rules tell to do with a forbidden crate found.
const BEHIND_A_FEATURE: &str = "keep them behind the binary's feature or in their plugin";

const TREE_RULES: &[TreeRule] = &[
    TreeRule {
        what: "the server library",
        arguments: &["-p", "mongoose-server"],
        forbidden: &[
            "rdkafka",
            "rdkafka-sys",
            "mongoose-kafka",
            "mongoose-ledger",
        ],
        instead: BEHIND_A_FEATURE,
    },
    TreeRule {
        what: "the file-only binary (mongoose --no-default-features)",
        arguments: &["-p", "mongoose", "--no-default-features"],
        forbidden: &["rdkafka", "rdkafka-sys", "mongoose-kafka"],
        instead: BEHIND_A_FEATURE,
    },
    TreeRule {
        what: "the ledger application",
        arguments: &["-p", "mongoose-ledger"],
        forbidden: &[
            "rdkafka",
            "rdkafka-sys",
            "mongoose-kafka",
            "mongoose-server",
        ],
        instead: BEHIND_A_FEATURE,
    },
    XTASK_RULE,
    AUDIT_RULE,
];

/// The audit crate sits under control (issue 42 item 3): the import loop it was cut
/// out of must not come back as a dependency.
const AUDIT_RULE: TreeRule = TreeRule {
    what: "the audit library (mongoose-audit)",
    arguments: &["-p", "mongoose-audit"],
    forbidden: &[
        "mongoose-control",
        "mongoose-replay",
        "mongoose-server",
        "mongoose-delivery",
    ],
    instead: "control depends on mongoose-audit, never the other way: mongoose-audit needs only mongoose-core and mongoose-durable (give it a trait where it must call up)",
};

/// The task runner builds in seconds (issue 42): librdkafka's C++ build and the
/// server's crates belong to the benchmark lab, `mongoose-bench`.
const XTASK_RULE: TreeRule = TreeRule {
    what: "the task runner (xtask)",
    arguments: &["-p", "xtask"],
    forbidden: &[
        "rdkafka",
        "rdkafka-sys",
        "mongoose-kafka",
        "mongoose-ledger",
        "mongoose-server",
    ],
    instead: "measure in mongoose-bench, probe a broker with mongoose_testkit::kafka",
};

/// Runs the checks; prints each finding and returns false when there is one.
pub(crate) fn layout(root: &Path) -> bool {
    let trees = check_trees(root);
    let sizes = check_sizes(root);
    let invariants = crate::invariants::check(root);
    let tests = crate::test_layout::check(root);
    let http = check_raw_http(root);
    trees && sizes && invariants && tests && http
}

fn check_trees(root: &Path) -> bool {
    let mut ok = true;
    for rule in TREE_RULES {
        match check_tree(root, rule) {
            Some(passed) => ok &= passed,
            None => return false,
        }
    }
    ok
}

/// Checks one rule: whether the tree holds none of its crates, or None when cargo tree
/// could not be run at all.
fn check_tree(root: &Path, rule: &TreeRule) -> Option<bool> {
    let output = Command::new(env!("CARGO"))
        .current_dir(root)
        .args([
            "tree", "-e", "normal", "--prefix", "none", "--format", "{p}",
        ])
        .args(rule.arguments)
        .output();
    let output = match output {
        Ok(output) if output.status.success() => output,
        Ok(output) => {
            eprintln!(
                "xtask layout: cargo tree {:?} failed: {}",
                rule.arguments,
                String::from_utf8_lossy(&output.stderr)
            );
            return Some(false);
        }
        Err(error) => {
            eprintln!("xtask layout: could not run cargo tree: {error}");
            return None;
        }
    };
    let tree = String::from_utf8_lossy(&output.stdout);
    let found = forbidden_in(&tree, rule.forbidden);
    if found.is_empty() {
        println!(
            "layout: {} depends on none of {:?}",
            rule.what, rule.forbidden
        );
        Some(true)
    } else {
        eprintln!(
            "xtask layout: {} depends on {} (cargo tree -e normal {}): {}",
            rule.what,
            found.join(", "),
            rule.arguments.join(" "),
            rule.instead
        );
        Some(false)
    }
}

/// The forbidden crates a `cargo tree --prefix none --format {p}` output names.
fn forbidden_in(tree: &str, forbidden: &[&str]) -> Vec<String> {
    let mut found: Vec<String> = tree
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| forbidden.contains(name))
        .map(str::to_owned)
        .collect();
    found.sort();
    found.dedup();
    found
}

fn check_sizes(root: &Path) -> bool {
    let mut files = Vec::new();
    collect_sources(root, &mut files);
    let mut longest: Option<(usize, PathBuf)> = None;
    let mut over = Vec::new();
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        let lines = text.lines().count();
        if longest.as_ref().is_none_or(|(most, _)| lines > *most) {
            longest = Some((lines, file.clone()));
        }
        if lines > MAX_LINES {
            over.push((lines, file));
        }
    }
    if let Some((lines, file)) = &longest {
        println!(
            "layout: the longest source file is {} ({lines} lines; at most {MAX_LINES})",
            relative(root, file)
        );
    }
    over.sort();
    for (lines, file) in &over {
        eprintln!(
            "xtask layout: {} has {lines} lines, over {MAX_LINES}: cut it along its seams into a module folder",
            relative(root, file)
        );
    }
    over.is_empty()
}

/// Every `.rs` file that holds [`RAW_HTTP`] outside [`RAW_HTTP_HOME`] and
/// [`RAW_HTTP_ALLOWED`], relative to `root`, sorted.
fn raw_http_outside_the_testkit(root: &Path) -> Vec<String> {
    let mut files = Vec::new();
    crate::invariants::rust_files(root, &mut files);
    let mut found: Vec<String> = files
        .iter()
        .map(|file| (relative(root, file), file))
        .filter(|(name, _)| {
            !name.starts_with(RAW_HTTP_HOME) && !RAW_HTTP_ALLOWED.contains(&name.as_str())
        })
        .filter(|(_, file)| std::fs::read_to_string(file).is_ok_and(|text| text.contains(RAW_HTTP)))
        .map(|(name, _)| name)
        .collect();
    found.sort();
    found
}

fn check_raw_http(root: &Path) -> bool {
    let found = raw_http_outside_the_testkit(root);
    if found.is_empty() {
        println!(
            "layout: {RAW_HTTP:?} appears only under {RAW_HTTP_HOME} and in {} raw-socket test(s)",
            RAW_HTTP_ALLOWED.len()
        );
        return true;
    }
    for name in &found {
        eprintln!(
            "xtask layout: {name} writes an HTTP exchange by hand: use mongoose_testkit::http_target::HttpTarget (a script answers each request), or, for a test that writes raw bytes as a client on purpose, add it to RAW_HTTP_ALLOWED in xtask/src/layout.rs"
        );
    }
    false
}

fn relative(root: &Path, file: &Path) -> String {
    file.strip_prefix(root)
        .unwrap_or(file)
        .display()
        .to_string()
}

/// Every `.rs` file under a `src/` folder of the workspace (not `target/`, not hidden
/// folders, not a crate's `tests/`, `examples/`, `benches/` or `fuzz/`).
fn collect_sources(root: &Path, files: &mut Vec<PathBuf>) {
    walk(root, false, files);
}

fn walk(dir: &Path, in_src: bool, files: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            if name.starts_with('.') || matches!(name.as_ref(), "target" | "fuzz") {
                continue;
            }
            if !in_src && matches!(name.as_ref(), "tests" | "examples" | "benches") {
                continue;
            }
            walk(&path, in_src || name == "src", files);
        } else if in_src && name.ends_with(".rs") {
            files.push(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forbidden_crate_anywhere_in_the_tree_is_found() {
        let tree = "mongoose-server v0.1.0 (/w/mongoose-server)\nrdkafka v0.38.0\nserde v1.0.0\nrdkafka v0.38.0\n";
        assert_eq!(
            forbidden_in(tree, &["rdkafka", "mongoose-ledger"]),
            ["rdkafka"]
        );
        assert!(forbidden_in("serde v1\n", &["rdkafka"]).is_empty());
    }

    #[test]
    fn raw_http_is_found_outside_the_testkit_and_its_allowed_tests() {
        let root = std::env::temp_dir().join(format!("xtask-raw-http-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let allowed = RAW_HTTP_ALLOWED[0];
        for dir in [
            "mongoose-testkit/src",
            "a/tests/support",
            "a/examples",
            "target/debug",
            Path::new(allowed).parent().unwrap().to_str().unwrap(),
        ] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
        }
        let server = format!("let answer = \"{RAW_HTTP}200 OK\\r\\n\";\n");
        for file in [
            "mongoose-testkit/src/target.rs",
            "a/tests/support/mod.rs",
            "a/examples/bench.rs",
            "target/debug/build.rs",
            allowed,
        ] {
            std::fs::write(root.join(file), &server).unwrap();
        }
        std::fs::write(root.join("a/tests/clean.rs"), "HTTP/2 only\n").unwrap();
        assert_eq!(
            raw_http_outside_the_testkit(&root),
            ["a/examples/bench.rs", "a/tests/support/mod.rs"]
        );
        assert!(!check_raw_http(&root));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn the_workspace_has_one_http_target() {
        let root = crate::workspace_root();
        assert_eq!(raw_http_outside_the_testkit(&root), Vec::<String>::new());
    }

    #[test]
    fn the_task_runner_links_no_librdkafka() {
        // the real workspace's tree (`cargo tree` reads the manifests and Cargo.lock)
        let root = crate::workspace_root();
        assert_eq!(check_tree(&root, &XTASK_RULE), Some(true));
    }

    #[test]
    fn the_audit_crate_depends_on_no_control_crate() {
        let root = crate::workspace_root();
        assert_eq!(check_tree(&root, &AUDIT_RULE), Some(true));
    }

    #[test]
    fn sources_are_what_lies_under_src() {
        let root = std::env::temp_dir().join(format!("xtask-layout-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for dir in ["a/src/deep", "a/tests", "a/examples", "target/debug/src"] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
        }
        for file in [
            "a/src/lib.rs",
            "a/src/deep/m.rs",
            "a/tests/t.rs",
            "a/examples/e.rs",
            "target/debug/src/x.rs",
        ] {
            std::fs::write(root.join(file), "fn f() {}\n").unwrap();
        }
        let mut files = Vec::new();
        collect_sources(&root, &mut files);
        files.sort();
        assert_eq!(
            files,
            [root.join("a/src/deep/m.rs"), root.join("a/src/lib.rs")]
        );
        std::fs::write(root.join("a/src/lib.rs"), "\n".repeat(MAX_LINES + 1)).unwrap();
        assert!(!check_sizes(&root));
        std::fs::write(root.join("a/src/lib.rs"), "\n".repeat(MAX_LINES)).unwrap();
        assert!(check_sizes(&root));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
