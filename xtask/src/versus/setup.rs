//! Setup: finding or installing rsyslog and building `mongoose`.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::VersusError;

pub(super) fn rsyslogd_path() -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect())
        .unwrap_or_default();
    candidates.extend(["/usr/sbin", "/sbin"].map(PathBuf::from));
    candidates
        .into_iter()
        .map(|folder| folder.join("rsyslogd"))
        .find(|path| path.is_file())
}

/// Installs rsyslog from Debian's packages when `rsyslogd` is missing (the package
/// lists are refreshed once if the first try fails). The service is never started here.
pub(super) fn ensure_rsyslog() -> Result<PathBuf, VersusError> {
    if let Some(path) = rsyslogd_path() {
        return Ok(path);
    }
    let install = || {
        crate::run(
            Command::new("apt-get")
                .args(["install", "-y", "-q", "rsyslog"])
                .env("DEBIAN_FRONTEND", "noninteractive"),
        )
    };
    if !install() {
        crate::run(Command::new("apt-get").args(["update", "-q"]));
        install();
    }
    rsyslogd_path().ok_or(VersusError::NoRsyslog)
}

/// Builds the release `mongoose` binary and returns its path.
pub(crate) fn build_mongoose(root: &Path) -> Result<PathBuf, String> {
    let built = crate::run(Command::new(env!("CARGO")).current_dir(root).args([
        "build",
        "--release",
        "-p",
        "mongoose",
        "--bin",
        "mongoose",
    ]));
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let binary = target.join("release").join("mongoose");
    if built && binary.is_file() {
        Ok(binary)
    } else {
        Err("`cargo build --release -p mongoose --bin mongoose` failed".to_owned())
    }
}
