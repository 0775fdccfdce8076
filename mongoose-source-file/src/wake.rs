//! Wakes an idle file source's thread when its file may have changed, so an idle feed
//! parks instead of polling (issue 41, item 2).
//!
//! One inotify instance per source, read by a small thread that blocks in `read` and
//! costs nothing while nothing happens. It watches the file's folder for the file's
//! name (written, truncated, attributes changed, created, moved in or out, deleted)
//! and the open file itself, by inode (written, attributes changed, moved, deleted:
//! a file renamed out of the folder is still followed), and wakes the source's thread
//! on any of them, or on a lost event (the queue overflowed): the source's next duty
//! cycle looks at the file as a poll did (reads to its end, compares the identity at
//! the path), so a rotation, a truncation or a re-created file is seen as before. The
//! source parks for at most [`SAFETY_LOOK`] between two looks all the same (a file
//! system without notifications, such as some network mounts).
//!
//! Linux only; elsewhere there is no watch and the source is polled.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mongoose_core::Wakeup;

/// The longest an idle file source parks without a notification: a look at the file
/// then covers a change that no event announced.
pub(crate) const SAFETY_LOOK: Duration = Duration::from_secs(30);

/// The watch of one file source's file; the thread that reads it ends when it drops.
pub(crate) struct FileWake {
    #[cfg(target_os = "linux")]
    watches: inotify::Watches,
    #[cfg(target_os = "linux")]
    folder: inotify::WatchDescriptor,
    #[cfg(target_os = "linux")]
    file: Option<inotify::WatchDescriptor>,
    /// The reading thread ended (an error): the source is polled again.
    ended: Arc<AtomicBool>,
    /// Set before the folder's watch is removed at drop: the reader returns.
    closing: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for FileWake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileWake")
            .field("active", &self.is_active())
            .finish()
    }
}

impl FileWake {
    /// Watches `path` (its folder, for its name) and wakes `wakeup` on a change.
    /// `None`, with a WARN, when no watch can be set up: the source is then polled.
    pub(crate) fn new(source: &str, path: &Path, wakeup: Arc<Wakeup>) -> Option<Self> {
        #[cfg(target_os = "linux")]
        {
            use inotify::{Inotify, WatchMask};
            let name = path.file_name()?.to_owned();
            let folder = match path.parent() {
                Some(folder) if !folder.as_os_str().is_empty() => folder.to_path_buf(),
                _ => std::path::PathBuf::from("."),
            };
            let watched = Inotify::init().and_then(|inotify| {
                let descriptor = inotify.watches().add(
                    &folder,
                    WatchMask::CREATE
                        | WatchMask::MOVED_TO
                        | WatchMask::MOVED_FROM
                        | WatchMask::DELETE
                        | WatchMask::MODIFY
                        | WatchMask::ATTRIB
                        | WatchMask::CLOSE_WRITE
                        | WatchMask::DELETE_SELF
                        | WatchMask::MOVE_SELF,
                )?;
                Ok((inotify, descriptor))
            });
            let (inotify, descriptor) = match watched {
                Ok(watched) => watched,
                Err(error) => {
                    tracing::warn!(source, folder = %folder.display(), %error,
                        "cannot watch the input's folder with inotify: the idle source polls its file");
                    return None;
                }
            };
            let watches = inotify.watches();
            let ended = Arc::new(AtomicBool::new(false));
            let closing = Arc::new(AtomicBool::new(false));
            let reader = {
                let ended = Arc::clone(&ended);
                let closing = Arc::clone(&closing);
                let source = source.to_owned();
                let folder = descriptor.clone();
                move || {
                    read_events(
                        inotify,
                        (&folder, &name),
                        &wakeup,
                        &closing,
                        &ended,
                        &source,
                    )
                }
            };
            let thread = std::thread::Builder::new()
                .name(format!("watch:{source}"))
                .spawn(reader);
            match thread {
                Ok(thread) => Some(FileWake {
                    watches,
                    folder: descriptor,
                    file: None,
                    ended,
                    closing,
                    thread: Some(thread),
                }),
                Err(error) => {
                    tracing::warn!(source, %error,
                        "cannot start the thread of the input's watch: the idle source polls its file");
                    None
                }
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (source, path, wakeup);
            None
        }
    }

    /// The file at `path` was opened: its inode is watched too (the watch follows the
    /// file where it is renamed to), instead of the one opened before.
    pub(crate) fn follow_open_file(&mut self, path: &Path) {
        #[cfg(target_os = "linux")]
        {
            use inotify::WatchMask;
            let added = self.watches.add(
                path,
                WatchMask::MODIFY
                    | WatchMask::ATTRIB
                    | WatchMask::MOVE_SELF
                    | WatchMask::DELETE_SELF,
            );
            let added = added.ok();
            if let Some(old) = self.file.take() {
                if Some(&old) != added.as_ref() {
                    let _ = self.watches.remove(old);
                }
            }
            self.file = added;
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = path;
        }
    }

    /// True while the watch wakes the source (its thread did not end on an error).
    pub(crate) fn is_active(&self) -> bool {
        !self.ended.load(Ordering::Acquire)
    }
}

impl Drop for FileWake {
    fn drop(&mut self) {
        self.closing.store(true, Ordering::Release);
        #[cfg(target_os = "linux")]
        {
            // the removal queues an IN_IGNORED event: the blocked read returns
            let _ = self.watches.remove(self.folder.clone());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The watch's thread: blocks until events come, wakes the source on one about its
/// file (or a lost one), and returns when the watch closes or reading fails.
#[cfg(target_os = "linux")]
fn read_events(
    mut inotify: inotify::Inotify,
    (folder, name): (&inotify::WatchDescriptor, &std::ffi::OsStr),
    wakeup: &Wakeup,
    closing: &AtomicBool,
    ended: &AtomicBool,
    source: &str,
) {
    let mut buffer = [0u8; 4096];
    loop {
        match inotify.read_events_blocking(&mut buffer) {
            Ok(events) => {
                if closing.load(Ordering::Acquire) {
                    return;
                }
                let mut about_the_file = false;
                let mut folder_gone = false;
                for event in events {
                    // an event without a name is about the open file itself, the
                    // folder, or lost events (an overflow): all are worth a look
                    about_the_file |= event.name.is_none_or(|changed| changed == name);
                    folder_gone |=
                        &event.wd == folder && event.mask.contains(inotify::EventMask::IGNORED);
                }
                if folder_gone {
                    // the folder was deleted or unmounted: nothing wakes the source now
                    tracing::warn!(source, "the input's folder is no longer watched (deleted or unmounted): the idle source polls its file");
                    ended.store(true, Ordering::Release);
                    wakeup.wake();
                    return;
                }
                if about_the_file {
                    wakeup.wake();
                }
            }
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(error) => {
                tracing::warn!(source, %error,
                    "the input's watch failed: the idle source polls its file");
                ended.store(true, Ordering::Release);
                wakeup.wake();
                return;
            }
        }
    }
}
