//! A small real tmpfs, mounted for a test and unmounted when dropped.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A tmpfs of a given size, mounted for a test and unmounted when dropped. Mounting
/// needs root (CI and the development machines run the tests as root); without it the
/// mount panics with a message that says so.
#[derive(Debug)]
pub struct Tmpfs {
    mount_point: PathBuf,
    /// The temporary directory that holds the mount point, when the tmpfs made one;
    /// removed after the unmount.
    temporary_dir: Option<tempfile::TempDir>,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (as `mount -o size=` spells it: `64k`, `1m`) on a
    /// fresh temporary directory.
    pub fn mount(size: &str) -> Tmpfs {
        let dir = tempfile::tempdir().expect("a temporary directory for the mount point");
        let mut tmpfs = Tmpfs::mount_at(&dir.path().join("fs"), size);
        tmpfs.temporary_dir = Some(dir);
        tmpfs
    }

    /// Mounts a tmpfs of `size` on `dir`, creating the directory first.
    pub fn mount_at(dir: &Path, size: &str) -> Tmpfs {
        fs::create_dir_all(dir).expect("mount point");
        let point = dir.to_str().expect("a UTF-8 path");
        run(
            "mount",
            &["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs", point],
        )
        .unwrap_or_else(|error| {
            panic!("cannot mount a tmpfs at {point}: these tests need root ({error})")
        });
        Tmpfs {
            mount_point: dir.to_path_buf(),
            temporary_dir: None,
        }
    }

    /// Where the tmpfs is mounted.
    pub fn path(&self) -> &Path {
        &self.mount_point
    }

    /// Remounts with other options: `ro`, `rw`, or a new `size=64m` (the operator
    /// freed space).
    pub fn remount(&self, options: &str) {
        let point = self.mount_point.to_str().expect("a UTF-8 path");
        run("mount", &["-o", &format!("remount,{options}"), point])
            .unwrap_or_else(|error| panic!("cannot remount the test's tmpfs: {error}"));
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let point = self.mount_point.to_string_lossy().into_owned();
        // A process the test killed may still hold a file open for a moment: detach
        // lazily then, rather than leave the mount behind.
        if run("umount", &[&point]).is_err() {
            if let Err(error) = run("umount", &["-l", &point]) {
                eprintln!("cannot unmount the test's tmpfs: {error}");
            }
        }
    }
}

/// Runs `program` with `args`; its stderr on failure.
fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let output = Command::new(program)
        .args(args)
        .output()
        .map_err(|error| format!("cannot run {program}: {error}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{program} {args:?}: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}
