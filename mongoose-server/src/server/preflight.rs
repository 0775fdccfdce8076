//! [`ServerBuilder::preflight`]: everything `run` checks before it starts anything, which
//! `validate` runs too (one function, one verdict, one message), without creating or
//! writing anything.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use rustix::fs::Access;

use crate::ServerError;

use super::build::glob_source_config;
use super::ServerBuilder;

impl ServerBuilder {
    /// Checks the configuration ([`ServerBuilder::check`]), loads the plugins, and checks
    /// the machine it would run on, creating and writing nothing: each file feed's
    /// folder exists and can be read (and its input, when there, can be read); the data
    /// folder (when the server keeps state there), each file sink's folder and the
    /// recording folder can be written, or created (the nearest existing folder above
    /// them can be written); the admin address can be bound (bound and let go). The
    /// `mongoose` binary's `validate` runs exactly this, and `run` runs it first (exit
    /// 2 on a refusal).
    ///
    /// # Errors
    /// The first refusal, with its key path and what to do.
    pub fn preflight(&self) -> Result<(), ServerError> {
        self.preflight_beside(false).map(|_| ())
    }

    /// [`ServerBuilder::preflight`] for `mongoose validate`, which may run beside the
    /// server it checks the config of: an admin address held by the server running on
    /// this config's data folder (the process the folder's lock names, while it holds
    /// the lock: [`crate::config::running`]) is its own, not a conflict; held by anything
    /// else it is refused as `preflight` refuses it. Returns the running server's
    /// process id when its address was recognised.
    ///
    /// # Errors
    /// As [`ServerBuilder::preflight`].
    pub fn preflight_beside_running(&self) -> Result<Option<u32>, ServerError> {
        self.preflight_beside(true)
    }

    fn preflight_beside(&self, running_may_hold: bool) -> Result<Option<u32>, ServerError> {
        self.preflight_folders()?;
        self.check_every_feed_consumed()?;
        let Some(admin) = &self.config.admin else {
            return Ok(None);
        };
        let Err(error) = std::net::TcpListener::bind(admin.address.as_str()) else {
            return Ok(None);
        };
        if running_may_hold && error.kind() == io::ErrorKind::AddrInUse {
            let folder = self.config.canonical_data_folder();
            let holder = crate::config::running::lock_holder(&folder);
            let address = admin.address.parse().ok();
            if let (Some(pid), Some(address)) = (holder, address) {
                if crate::config::running::listens_on(pid, address) {
                    return Ok(Some(pid));
                }
            }
        }
        Err(ServerError::invalid(
            "admin.address",
            format!(
                "cannot listen on {} for the admin API ({error}): stop what holds it, or give another address",
                admin.address
            ),
        ))
    }

    /// [`ServerBuilder::preflight`] but for the admin address: what a reload checks (the
    /// running server holds the address, and a reload cannot change it).
    pub(super) fn preflight_folders(&self) -> Result<(), ServerError> {
        self.check()?;
        self.plugins()?;
        let config = &self.config;
        crate::sinks::check_network_sinks(config)?;
        for (index, feed) in config.feeds.iter().enumerate() {
            if !feed.is_file() {
                continue;
            }
            let key = format!("feeds[{index}].path");
            let input = config.resolve(&feed.path);
            let folder = if feed.is_glob() {
                glob_source_config(config, index).folder()
            } else {
                parent_of(&input)
            };
            readable_folder(&key, &folder)?;
            if !feed.is_glob() {
                match fs::File::open(&input) {
                    Ok(_) => {}
                    Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                    Err(error) => {
                        return Err(ServerError::invalid(
                            key,
                            format!(
                                "the input {} cannot be read ({error}): give the server read access to it",
                                input.display()
                            ),
                        ))
                    }
                }
            }
        }
        if config.keeps_state() {
            writable_folder("data_dir", &config.data_folder())?;
        }
        for (index, sink) in config.sinks.iter().enumerate() {
            let Some(path) = sink.path.as_deref().filter(|_| sink.kind == "file") else {
                continue;
            };
            let key = format!("sinks[{index}].path");
            let output = config.resolve(path);
            writable_folder(&key, &parent_of(&output))?;
            if output.exists() && rustix::fs::access(&output, Access::WRITE_OK).is_err() {
                return Err(ServerError::invalid(
                    key,
                    format!(
                        "the sink's file {} cannot be written: give the server write access to it",
                        output.display()
                    ),
                ));
            }
        }
        if let Some(record) = &config.record {
            writable_folder("record.dir", &config.resolve(&record.dir))?;
        }
        Ok(())
    }
}

/// The folder of `path` (`.` for a bare file name).
fn parent_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Refuses a folder that is missing, not a folder, or cannot be listed and entered.
fn readable_folder(key: &str, folder: &Path) -> Result<(), ServerError> {
    let refuse = |why: String| Err(ServerError::invalid(key, why));
    match fs::metadata(folder) {
        // `logs/*/app.log`: a glob reads the files of one folder
        Err(error)
            if error.kind() == io::ErrorKind::NotFound
                && folder.to_string_lossy().contains(['*', '?', '[']) =>
        {
            refuse(format!(
                "the input folder {} does not exist, and it holds a wildcard: a glob's wildcard may be only in the file name \
                 (logs/*.log reads the files of one folder; give one feed per folder)",
                folder.display()
            ))
        }
        Err(error) if error.kind() == io::ErrorKind::NotFound => refuse(format!(
            "the input folder {} does not exist: create it, or fix the path",
            folder.display()
        )),
        Err(error) => refuse(format!(
            "the input folder {} cannot be read ({error}): give the server read access to it",
            folder.display()
        )),
        Ok(metadata) if !metadata.is_dir() => refuse(format!(
            "{} is not a folder: fix the path",
            folder.display()
        )),
        Ok(_) => match fs::read_dir(folder) {
            Ok(_) if rustix::fs::access(folder, Access::READ_OK | Access::EXEC_OK).is_ok() => {
                Ok(())
            }
            Ok(_) => refuse(format!(
                "the input folder {} cannot be read: give the server read access to it",
                folder.display()
            )),
            Err(error) => refuse(format!(
                "the input folder {} cannot be read ({error}): give the server read access to it",
                folder.display()
            )),
        },
    }
}

/// Refuses a folder that cannot be written, or created: the nearest existing path at
/// or above it must be a folder the server may write and enter.
fn writable_folder(key: &str, folder: &Path) -> Result<(), ServerError> {
    let mut existing = folder;
    loop {
        match fs::metadata(existing) {
            Ok(metadata) if metadata.is_dir() => break,
            Ok(_) => {
                return Err(ServerError::invalid(
                    key,
                    format!(
                        "the folder {} cannot be created: {} is a file, not a folder; fix the path",
                        folder.display(),
                        existing.display()
                    ),
                ))
            }
            Err(error)
                if matches!(
                    error.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
                ) =>
            {
                existing = match existing.parent() {
                    Some(parent) if !parent.as_os_str().is_empty() => parent,
                    _ => Path::new("."),
                };
            }
            Err(error) => {
                return Err(ServerError::invalid(
                    key,
                    format!(
                        "the folder {} cannot be reached ({error}): give the server access to {}",
                        folder.display(),
                        existing.display()
                    ),
                ))
            }
        }
    }
    if rustix::fs::access(existing, Access::WRITE_OK | Access::EXEC_OK).is_err() {
        let what = if existing == folder {
            format!("the folder {} cannot be written", folder.display())
        } else {
            format!(
                "the folder {} cannot be created ({} cannot be written)",
                folder.display(),
                existing.display()
            )
        };
        return Err(ServerError::invalid(
            key,
            format!("{what}: give the server write access, or choose another folder"),
        ));
    }
    Ok(())
}
