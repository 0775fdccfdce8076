//! Whether a server runs on a data folder, and whether it is what holds an address:
//! what lets `mongoose validate` check a running server's own config (book:
//! running/validation.md). Read from Linux's `/proc`, creating, locking and writing
//! nothing; elsewhere nothing is recognised (and a bound admin address stays refused).
//!
//! * The running server is the process whose id the data folder's `lock` file names
//!   ([`super::data_dir::DataFolderLock`] writes it), and only while that process holds
//!   the file's `flock` (`/proc/locks` names the holder and the file's inode): a lock
//!   file left by a server that ended, whose id another process now has, names no one.
//! * It holds an address when one of its open files is a listening TCP socket on that
//!   port (`/proc/net/tcp` and `tcp6` give the socket's inode, `/proc/<pid>/fd` the
//!   process's sockets).

use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The id of the process that holds the lock of the data folder `folder` now, if one
/// does.
pub fn lock_holder(folder: &Path) -> Option<u32> {
    let path = folder.join("lock");
    let pid: u32 = std::fs::read_to_string(&path).ok()?.trim().parse().ok()?;
    let inode = std::fs::metadata(&path).ok()?.ino();
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    holds_flock(&locks, pid, inode).then_some(pid)
}

/// Whether the `/proc/locks` text `locks` has an `flock` held (not waited for) by
/// `pid` on the file of inode `inode`:
/// `1: FLOCK  ADVISORY  WRITE 4242 fd:01:1234567 0 EOF`.
fn holds_flock(locks: &str, pid: u32, inode: u64) -> bool {
    locks.lines().any(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        fields.get(1) == Some(&"FLOCK")
            && fields.get(4).and_then(|held| held.parse::<u32>().ok()) == Some(pid)
            && fields
                .get(5)
                .and_then(|device_inode| device_inode.rsplit(':').next())
                .and_then(|held| held.parse::<u64>().ok())
                == Some(inode)
    })
}

/// Whether the process `pid` has a TCP socket listening on the port of `address`.
pub fn listens_on(pid: u32, address: SocketAddr) -> bool {
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        if let Ok(text) = std::fs::read_to_string(table) {
            inodes.extend(listening_inodes(&text, address.port()));
        }
    }
    if inodes.is_empty() {
        return false;
    }
    let Ok(files) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    files.filter_map(Result::ok).any(|file| {
        std::fs::read_link(file.path()).is_ok_and(|target| {
            let target = target.to_string_lossy();
            inodes
                .iter()
                .any(|inode| target == format!("socket:[{inode}]"))
        })
    })
}

/// The inodes of the sockets of a `/proc/net/tcp` table that listen (state `0A`) on
/// `port`: `0: 0100007F:1F99 00000000:0000 0A ... 0 123456 1 ...` (the inode is the
/// tenth field).
fn listening_inodes(table: &str, port: u16) -> Vec<u64> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let local_port = fields.get(1)?.rsplit(':').next()?;
            let listening = fields.get(3) == Some(&"0A");
            (listening && u16::from_str_radix(local_port, 16).ok()? == port)
                .then(|| fields.get(9)?.parse().ok())
                .flatten()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_flock_is_found_by_pid_and_inode() {
        let locks = "1: FLOCK  ADVISORY  WRITE 4242 fd:01:1234567 0 EOF\n\
                     1: -> FLOCK  ADVISORY  WRITE 99 fd:01:1234567 0 EOF\n\
                     2: POSIX  ADVISORY  WRITE 77 fd:01:42 0 EOF\n";
        assert!(holds_flock(locks, 4242, 1_234_567));
        assert!(!holds_flock(locks, 99, 1_234_567), "a waiter holds nothing");
        assert!(!holds_flock(locks, 4242, 42), "another file");
        assert!(
            !holds_flock(locks, 77, 42),
            "a POSIX lock is not the folder's"
        );
    }

    #[test]
    fn this_process_is_seen_listening_on_its_port() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
        let address = listener.local_addr().expect("address");
        assert!(listens_on(std::process::id(), address));
        drop(listener);
        assert!(!listens_on(std::process::id(), address));
    }

    #[test]
    fn the_lock_holder_is_the_process_holding_the_flock() {
        let folder = tempfile_folder("holder");
        assert_eq!(lock_holder(&folder), None, "no lock file");
        let lock = super::super::data_dir::DataFolderLock::acquire(&folder).expect("locked");
        assert_eq!(lock_holder(&folder), Some(std::process::id()));
        drop(lock);
        assert_eq!(lock_holder(&folder), None, "a lock file no one holds");
        std::fs::remove_dir_all(&folder).expect("cleaned");
    }

    fn tempfile_folder(name: &str) -> std::path::PathBuf {
        let folder =
            std::env::temp_dir().join(format!("mongoose-running-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&folder);
        folder
    }
}
