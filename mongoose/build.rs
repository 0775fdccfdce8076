//! Stamps the binary with the commit it was built from, for `mongoose --version`
//! (`mongoose 0.1.0 (1a2b3c4d5e6f)`, `-dirty` when tracked files differ from it).
//! Outside a git checkout (a source tarball, a vendored copy) the commit is `unknown`,
//! unless the packager names it: `MONGOOSE_COMMIT=1a2b3c4d5e6f cargo build --release`.

use std::path::PathBuf;
use std::process::Command;

/// `git` with `args` in this crate's folder, its trimmed stdout when it succeeded.
fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git")
        .args(args)
        // `git status` refreshes the index's file times and writes it back, and the
        // index is watched below: the next cargo command ran this script again and
        // compiled the binary again (the README's first command, then the tour's
        // build: issue 39, item 8). Without optional locks git writes nothing.
        .env("GIT_OPTIONAL_LOCKS", "0")
        .current_dir(manifest_dir())
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    let text = String::from_utf8(output.stdout).ok()?;
    Some(text.trim().to_owned())
}

/// This crate's folder (cargo runs the build script in it, and says so).
fn manifest_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(|| PathBuf::from("."), PathBuf::from)
}

fn main() {
    println!("cargo:rerun-if-env-changed=MONGOOSE_COMMIT");
    let commit = std::env::var("MONGOOSE_COMMIT")
        .ok()
        .filter(|commit| !commit.is_empty())
        .or_else(|| {
            let commit = git(&["rev-parse", "--short=12", "HEAD"])?;
            // tracked files only: a build's own untracked outputs do not make it dirty
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|status| !status.is_empty());
            // rebuild when HEAD moves (a checkout, a commit on the branch) or the index
            // changes (a `git add`, a commit); a worktree's HEAD is in its own git dir
            let mut watched = vec![
                "HEAD".to_owned(),
                "index".to_owned(),
                "packed-refs".to_owned(),
            ];
            if let Some(reference) = git(&["symbolic-ref", "-q", "HEAD"]) {
                watched.push(reference);
            }
            for path in watched {
                if let Some(path) = git(&["rev-parse", "--git-path", &path]) {
                    let path = manifest_dir().join(path);
                    if path.exists() {
                        println!("cargo:rerun-if-changed={}", path.display());
                    }
                }
            }
            Some(if dirty {
                format!("{commit}-dirty")
            } else {
                commit
            })
        })
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=MONGOOSE_COMMIT={commit}");
}
