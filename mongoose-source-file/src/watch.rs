//! Folder change notification for the glob source: inotify on Linux, nothing elsewhere
//! (the periodic scan is the fallback, and stays on everywhere: a missed or overflowed
//! event queue only delays discovery to the next scan).
//!
//! Besides files created, moved and deleted (which make the glob scan at once), the
//! watch reports the names of files written to: a file that waits for an open-file
//! slot and is written to, then deleted before the next scan saw its size, held lines
//! that were never read (a loss the glob counts), where a file that was not written
//! to since the scan that saw it read to its end lost nothing.

use std::path::Path;

/// What changed in the watched folder since the last [`FolderWatch::poll`].
#[derive(Debug, Default)]
pub(crate) struct FolderChanges {
    /// Files were created, moved in or out, or deleted (or events were lost): scan.
    pub(crate) entries: bool,
    /// The names of files written to.
    pub(crate) written: Vec<std::ffi::OsString>,
    /// Events were lost (the queue overflowed): any file may have been written to.
    pub(crate) overflowed: bool,
}

/// Tells what changed in the watched folder since the last call.
pub(crate) struct FolderWatch {
    #[cfg(target_os = "linux")]
    inotify: Option<inotify::Inotify>,
    #[cfg(target_os = "linux")]
    buffer: Vec<u8>,
}

impl std::fmt::Debug for FolderWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FolderWatch")
            .field("active", &self.is_active())
            .finish()
    }
}

impl FolderWatch {
    /// A watch that never reports a change (polling only).
    pub(crate) fn none() -> Self {
        FolderWatch {
            #[cfg(target_os = "linux")]
            inotify: None,
            #[cfg(target_os = "linux")]
            buffer: Vec::new(),
        }
    }

    /// Watches `folder` for files created, moved in or out, or deleted. Falls back to
    /// polling only (with a WARN) when the watch cannot be set up (no inotify
    /// instances left, a file system without notifications).
    pub(crate) fn new(source: &str, folder: &Path) -> Self {
        #[cfg(target_os = "linux")]
        {
            use inotify::{Inotify, WatchMask};
            let watched = Inotify::init().and_then(|inotify| {
                inotify.watches().add(
                    folder,
                    WatchMask::CREATE
                        | WatchMask::MOVED_TO
                        | WatchMask::MOVED_FROM
                        | WatchMask::DELETE
                        | WatchMask::MODIFY,
                )?;
                Ok(inotify)
            });
            match watched {
                Ok(inotify) => FolderWatch {
                    inotify: Some(inotify),
                    buffer: vec![0u8; 4096],
                },
                Err(error) => {
                    tracing::warn!(source, folder = %folder.display(), %error,
                        "cannot watch the folder with inotify: new files are found by the periodic scan only (scan_interval_millis)");
                    Self::none()
                }
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (source, folder);
            Self::none()
        }
    }

    /// True when a notification is in use.
    pub(crate) fn is_active(&self) -> bool {
        #[cfg(target_os = "linux")]
        {
            self.inotify.is_some()
        }
        #[cfg(not(target_os = "linux"))]
        {
            false
        }
    }

    /// What changed since the last call (reads every pending event; never blocks).
    pub(crate) fn poll(&mut self) -> FolderChanges {
        let mut changes = FolderChanges::default();
        #[cfg(target_os = "linux")]
        {
            use inotify::EventMask;
            let Some(inotify) = self.inotify.as_mut() else {
                return changes;
            };
            let mut renamed: Vec<std::ffi::OsString> = Vec::new();
            loop {
                match inotify.read_events(&mut self.buffer) {
                    Ok(events) => {
                        let mut any = false;
                        for event in events {
                            any = true;
                            if event.mask.contains(EventMask::MODIFY) {
                                // a write after the name was created, moved or deleted
                                // in this batch is another file's (a file made again)
                                if let Some(name) = event.name {
                                    if !changes.written.iter().any(|seen| seen == name)
                                        && !renamed.iter().any(|seen| seen == name)
                                    {
                                        changes.written.push(name.to_owned());
                                    }
                                }
                            } else {
                                // created, moved, deleted, or the queue overflowed
                                changes.entries = true;
                                changes.overflowed |= event.mask.contains(EventMask::Q_OVERFLOW);
                                if let Some(name) = event.name {
                                    renamed.push(name.to_owned());
                                }
                            }
                        }
                        if !any {
                            return changes;
                        }
                    }
                    // nothing pending, or an error: the periodic scan still runs
                    Err(_) => return changes,
                }
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            changes
        }
    }
}
