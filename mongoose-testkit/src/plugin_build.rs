//! Building the plugins of `plugins/` from a test: the real cdylib, with cargo features,
//! into a cache shared by every test process (builds are serialized by a file lock).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace root (this crate's parent folder).
pub fn workspace_root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(Path::to_path_buf).unwrap_or(manifest)
}

/// Builds package `package` (a crate under `plugins/`, e.g. `template-plugin`) with
/// `features` and returns its shared library, kept at
/// `target/plugin-builds/<features>/lib<crate>.so` (replaced atomically, so a process
/// that loaded an earlier build is not disturbed). Cargo's own up-to-date check makes
/// a repeated call cheap.
///
/// # Panics
/// When cargo fails (the build's output is in the message).
pub fn build_plugin(package: &str, features: &[&str]) -> PathBuf {
    let root = workspace_root();
    let builds = root.join("target").join("plugin-builds");
    std::fs::create_dir_all(&builds).expect("create target/plugin-builds");
    let _lock = BuildLock::take(&builds.join(".lock"));
    let target_dir = builds.join("target");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(&root)
        .args(["build", "--offline", "-p", package, "--target-dir"])
        .arg(&target_dir)
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTFLAGS");
    if !features.is_empty() {
        command.args(["--features", &features.join(",")]);
    }
    let output = command.output().expect("run cargo build for the plugin");
    assert!(
        output.status.success(),
        "cargo build -p {package} --features {features:?} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let file = format!("lib{}.so", package.replace('-', "_"));
    let tag = if features.is_empty() {
        "default".to_owned()
    } else {
        features.join("+")
    };
    let dir = builds.join(tag);
    std::fs::create_dir_all(&dir).expect("create the plugin's cache folder");
    let built = target_dir.join("debug").join(&file);
    let kept = dir.join(&file);
    let temporary = dir.join(format!("{file}.tmp"));
    std::fs::copy(&built, &temporary).expect("copy the built plugin");
    std::fs::rename(&temporary, &kept).expect("put the built plugin in place");
    kept
}

/// A fresh plugin folder under `parent` holding a copy of each of `libraries`.
pub fn plugin_dir(parent: &Path, libraries: &[&Path]) -> PathBuf {
    let dir = parent.join("plugins");
    std::fs::create_dir_all(&dir).expect("create the plugin folder");
    for library in libraries {
        let name = library.file_name().expect("a library file");
        std::fs::copy(library, dir.join(name)).expect("copy the plugin");
    }
    dir
}

/// A lock across test processes: a folder created atomically, holding the owner's pid;
/// a lock whose owner is gone (a killed test) is taken over. (`File::lock` needs Rust
/// 1.89; the workspace's minimum is 1.86.)
struct BuildLock {
    dir: PathBuf,
}

impl BuildLock {
    fn take(dir: &Path) -> BuildLock {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(600);
        loop {
            match std::fs::create_dir(dir) {
                Ok(()) => {
                    std::fs::write(dir.join("pid"), std::process::id().to_string())
                        .expect("write the lock's pid");
                    return BuildLock {
                        dir: dir.to_path_buf(),
                    };
                }
                Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
                    let owner = std::fs::read_to_string(dir.join("pid")).unwrap_or_default();
                    let gone = !owner.is_empty() && !Path::new("/proc").join(owner.trim()).exists();
                    if gone {
                        let _ = std::fs::remove_dir_all(dir);
                        continue;
                    }
                    assert!(
                        std::time::Instant::now() < deadline,
                        "the plugin build lock {} was held for 10 minutes",
                        dir.display()
                    );
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                Err(error) => panic!(
                    "cannot take the plugin build lock {}: {error}",
                    dir.display()
                ),
            }
        }
    }
}

impl Drop for BuildLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
