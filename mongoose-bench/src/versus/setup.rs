//! Setup: finding or installing the peers (rsyslog, syslog-ng) and building `mongoose`.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::VersusError;

/// The program `name` on `PATH`, or in `/usr/sbin` or `/sbin` (daemons live there).
pub(super) fn program_path(name: &str) -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect())
        .unwrap_or_default();
    candidates.extend(["/usr/sbin", "/sbin"].map(PathBuf::from));
    candidates
        .into_iter()
        .map(|folder| folder.join(name))
        .find(|path| path.is_file())
}

#[cfg(test)]
pub(super) fn rsyslogd_path() -> Option<PathBuf> {
    program_path("rsyslogd")
}

/// The program `name`, installed from the Debian package `package` when missing (the
/// package lists are refreshed once if the first try fails). No service is started.
pub(super) fn ensure_program(name: &str, package: &str) -> Option<PathBuf> {
    if let Some(path) = program_path(name) {
        return Some(path);
    }
    let install = || {
        crate::run(
            Command::new("apt-get")
                .args(["install", "-y", "-q", "--no-install-recommends", package])
                .env("DEBIAN_FRONTEND", "noninteractive"),
        )
    };
    if !install() {
        crate::run(Command::new("apt-get").args(["update", "-q"]));
        install();
    }
    program_path(name)
}

/// syslog-ng: the installed one, else the Debian package `syslog-ng-core` unpacked (not
/// installed: it conflicts with rsyslog's package, and installing one removes the other)
/// into `<target>/peers/syslog-ng`, with the shared libraries it needs installed from
/// Debian (they conflict with nothing). Returns the `syslog-ng` program.
pub(super) fn ensure_syslog_ng(root: &Path) -> Option<PathBuf> {
    if let Some(path) = program_path("syslog-ng") {
        return Some(path);
    }
    let unpacked = root.join("target").join("peers").join("syslog-ng");
    let program = unpacked.join("usr").join("sbin").join("syslog-ng");
    if program.is_file() {
        return Some(program);
    }
    let downloads = root.join("target").join("peers").join("downloads");
    std::fs::create_dir_all(&downloads).ok()?;
    let libraries = [
        "libglib2.0-0",
        "libivykis0",
        "libjson-c5",
        "libnet1",
        "libpcre3",
        "libwrap0",
        "libcap2",
        "libssl3",
        "libsystemd0",
    ];
    // only the missing ones: naming an installed package to apt-get upgrades it
    let missing: Vec<&str> = libraries
        .into_iter()
        .filter(|package| {
            !Command::new("dpkg")
                .args(["-s", package])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|status| status.success())
        })
        .collect();
    let install = || {
        (missing.is_empty()
            || crate::run(
                Command::new("apt-get")
                    .args(["install", "-y", "-q", "--no-install-recommends"])
                    .args(&missing)
                    .env("DEBIAN_FRONTEND", "noninteractive"),
            ))
            && crate::run(
                Command::new("apt-get")
                    .args(["download", "-q", "syslog-ng-core"])
                    .current_dir(&downloads),
            )
    };
    if !install() {
        crate::run(Command::new("apt-get").args(["update", "-q"]));
        install();
    }
    let package = std::fs::read_dir(&downloads)
        .ok()?
        .flatten()
        .map(|entry| entry.path())
        .find(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with("syslog-ng-core_") && name.ends_with(".deb"))
        })?;
    crate::run(Command::new("dpkg").arg("-x").arg(&package).arg(&unpacked));
    program.is_file().then_some(program)
}

/// For a syslog-ng unpacked by [`ensure_syslog_ng`] (not installed): the folder of its
/// shared libraries and of its modules, which it must be told.
pub(super) fn syslog_ng_unpacked_paths(program: &Path) -> Option<(PathBuf, PathBuf)> {
    let root = program.parent()?.parent()?.parent()?;
    if root == Path::new("/") || root.as_os_str().is_empty() {
        return None;
    }
    let libraries = root.join("usr").join("lib").join("syslog-ng");
    let modules = std::fs::read_dir(&libraries)
        .ok()?
        .flatten()
        .map(|entry| entry.path())
        .find(|path| path.is_dir())?;
    Some((libraries, modules))
}

/// Installs rsyslog from Debian's packages when `rsyslogd` is missing. The service is
/// never started here.
pub(super) fn ensure_rsyslog() -> Result<PathBuf, VersusError> {
    ensure_program("rsyslogd", "rsyslog").ok_or(VersusError::NoRsyslog)
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
