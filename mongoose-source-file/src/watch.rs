//! Folder change notification for the glob source: inotify on Linux, nothing elsewhere
//! (the periodic scan is the fallback, and stays on everywhere: a missed or overflowed
//! event queue only delays discovery to the next scan).
//!
//! Besides files created, moved and deleted (which make the glob scan at once), the
//! watch reports the names of files written to: a file that waits for an open-file
//! slot and is written to, then deleted before the next scan saw its size, held lines
//! that were never read (a loss the glob counts), where a file that was not written
//! to since the scan that saw it read to its end lost nothing.
//!
//! The events are read by a small thread that blocks until they come (it costs nothing
//! while nothing happens), gathers them for the next [`FolderWatch::poll`] and wakes
//! the source driver's thread, so an idle glob parks instead of polling its files
//! (issue 41, item 2).

use std::path::Path;
use std::sync::Arc;

use mongoose_core::Wakeup;
use parking_lot::Mutex;

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

/// The changes the watch's thread gathered for the next poll.
#[derive(Debug, Default)]
struct Gathered {
    changes: FolderChanges,
    /// Names created, moved or deleted since the last poll: a write after one of them
    /// is another file's (a file made again).
    renamed: Vec<std::ffi::OsString>,
    /// The watch ended (its folder is gone, or reading failed): only scans find changes.
    ended: bool,
}

/// Tells what changed in the watched folder since the last call.
pub(crate) struct FolderWatch {
    gathered: Arc<Mutex<Gathered>>,
    #[cfg(target_os = "linux")]
    reader: Option<WatchReader>,
}

/// The watch's thread and how to end it.
#[cfg(target_os = "linux")]
struct WatchReader {
    watches: inotify::Watches,
    folder: inotify::WatchDescriptor,
    closing: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

#[cfg(target_os = "linux")]
impl Drop for WatchReader {
    fn drop(&mut self) {
        self.closing
            .store(true, std::sync::atomic::Ordering::Release);
        // the removal queues an IN_IGNORED event: the blocked read returns
        let _ = self.watches.remove(self.folder.clone());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
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
            gathered: Arc::default(),
            #[cfg(target_os = "linux")]
            reader: None,
        }
    }

    /// Watches `folder` for files created, moved in or out, deleted or written to, and
    /// wakes `wakeup` (the source driver's thread) when something changed. Falls back
    /// to polling only (with a WARN) when the watch cannot be set up (no inotify
    /// instances left, a file system without notifications).
    pub(crate) fn new(source: &str, folder: &Path, wakeup: Option<Arc<Wakeup>>) -> Self {
        #[cfg(target_os = "linux")]
        {
            use inotify::{Inotify, WatchMask};
            let watched = Inotify::init().and_then(|inotify| {
                let descriptor = inotify.watches().add(
                    folder,
                    WatchMask::CREATE
                        | WatchMask::MOVED_TO
                        | WatchMask::MOVED_FROM
                        | WatchMask::DELETE
                        | WatchMask::MODIFY
                        | WatchMask::DELETE_SELF
                        | WatchMask::MOVE_SELF,
                )?;
                Ok((inotify, descriptor))
            });
            let (inotify, descriptor) = match watched {
                Ok(watched) => watched,
                Err(error) => {
                    tracing::warn!(source, folder = %folder.display(), %error,
                        "cannot watch the folder with inotify: new files are found by the periodic scan only (scan_interval_millis)");
                    return Self::none();
                }
            };
            let gathered: Arc<Mutex<Gathered>> = Arc::default();
            let closing = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let watches = inotify.watches();
            let thread = std::thread::Builder::new()
                .name(format!("watch:{source}"))
                .spawn({
                    let gathered = Arc::clone(&gathered);
                    let closing = Arc::clone(&closing);
                    let folder = descriptor.clone();
                    let source = source.to_owned();
                    move || {
                        gather(
                            inotify,
                            &folder,
                            &gathered,
                            wakeup.as_deref(),
                            &closing,
                            &source,
                        )
                    }
                });
            match thread {
                Ok(thread) => FolderWatch {
                    gathered,
                    reader: Some(WatchReader {
                        watches,
                        folder: descriptor,
                        closing,
                        thread: Some(thread),
                    }),
                },
                Err(error) => {
                    tracing::warn!(source, %error,
                        "cannot start the thread of the folder's watch: new files are found by the periodic scan only (scan_interval_millis)");
                    Self::none()
                }
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (source, folder, wakeup);
            Self::none()
        }
    }

    /// True when a notification is in use.
    pub(crate) fn is_active(&self) -> bool {
        #[cfg(target_os = "linux")]
        {
            self.reader.is_some() && !self.gathered.lock().ended
        }
        #[cfg(not(target_os = "linux"))]
        {
            false
        }
    }

    /// What changed since the last call (what the watch's thread gathered; never
    /// blocks).
    pub(crate) fn poll(&mut self) -> FolderChanges {
        let mut gathered = self.gathered.lock();
        gathered.renamed.clear();
        std::mem::take(&mut gathered.changes)
    }
}

/// The watch's thread: blocks until events come, gathers them for the next poll,
/// wakes the source, and returns when the watch closes or ends.
#[cfg(target_os = "linux")]
fn gather(
    mut inotify: inotify::Inotify,
    folder: &inotify::WatchDescriptor,
    gathered: &Mutex<Gathered>,
    wakeup: Option<&Wakeup>,
    closing: &std::sync::atomic::AtomicBool,
    source: &str,
) {
    use inotify::EventMask;
    let mut buffer = vec![0u8; 4096];
    loop {
        let events = match inotify.read_events_blocking(&mut buffer) {
            Ok(events) => events,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(error) => {
                tracing::warn!(source, %error,
                    "the folder's watch failed: new files are found by the periodic scan only (scan_interval_millis)");
                let mut gathered = gathered.lock();
                gathered.ended = true;
                gathered.changes.entries = true;
                drop(gathered);
                wakeup.inspect(|wakeup| wakeup.wake());
                return;
            }
        };
        if closing.load(std::sync::atomic::Ordering::Acquire) {
            return;
        }
        let mut gathered = gathered.lock();
        let Gathered {
            changes,
            renamed,
            ended,
            ..
        } = &mut *gathered;
        for event in events {
            if event.mask.contains(EventMask::MODIFY) {
                // a write after the name was created, moved or deleted since the last
                // poll is another file's (a file made again)
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
                if &event.wd == folder && event.mask.contains(EventMask::IGNORED) {
                    // the folder was deleted or unmounted: nothing more comes
                    *ended = true;
                }
            }
        }
        let ended = *ended;
        drop(gathered);
        if let Some(wakeup) = wakeup {
            wakeup.wake();
        }
        if ended {
            tracing::warn!(source, "the watched folder is gone (deleted or unmounted): new files are found by the periodic scan only (scan_interval_millis)");
            return;
        }
    }
}
