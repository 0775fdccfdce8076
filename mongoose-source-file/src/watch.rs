//! Folder change notification for the glob source: inotify on Linux, nothing elsewhere
//! (the periodic scan is the fallback, and stays on everywhere: a missed or overflowed
//! event queue only delays discovery to the next scan).

use std::path::Path;

/// Tells whether the watched folder's entries changed since the last call.
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
                        | WatchMask::DELETE,
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

    /// True when the folder changed since the last call (reads every pending event;
    /// never blocks).
    pub(crate) fn changed(&mut self) -> bool {
        #[cfg(target_os = "linux")]
        {
            let Some(inotify) = self.inotify.as_mut() else {
                return false;
            };
            let mut changed = false;
            loop {
                match inotify.read_events(&mut self.buffer) {
                    Ok(events) => {
                        let mut any = false;
                        for _ in events {
                            any = true;
                        }
                        if !any {
                            return changed;
                        }
                        changed = true;
                    }
                    // nothing pending, or an error: the periodic scan still runs
                    Err(_) => return changed,
                }
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            false
        }
    }
}
