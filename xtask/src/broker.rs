//! `cargo xtask broker start|stop|status`: the Kafka-protocol test broker (`tansu`) that
//! the Kafka connector's tests run against.
//!
//! * `start` installs tansu into its cache folder when it is missing (`cargo install
//!   tansu --version 0.6.0 --locked --features dynostore --root CACHE`, several minutes
//!   the first time),
//!   starts `tansu broker` on 127.0.0.1:19092 with in-memory storage, in its own process
//!   group in the background, with its pid in `target/tansu/broker.pid` and its output in
//!   `target/tansu/broker.log`, and waits until the port answers. A broker already
//!   running (the pid file's process alive) is left as it is; so is one this checkout
//!   did not start that already answers on the port (the tests use it, `stop` leaves it).
//! * `stop` sends SIGINT (tansu ignores SIGTERM), waits up to 10 s, then SIGKILL, and
//!   removes the pid file.
//! * `status` prints whether it runs; exits non-zero when it does not.
//!
//! The cache folder is `$MONGOOSE_TANSU_ROOT`, else `$HOME/.cache/mongoose-tansu`; the
//! binary is `bin/tansu` in it (`$MONGOOSE_TANSU` names another binary).

use std::fs;
use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The tansu release the tests were written against (its gaps are listed in the
/// mongoose-kafka crate's documentation); a newer one may close them and change what
/// the tests see.
const TANSU_VERSION: &str = "0.6.0";

/// The address the broker listens on and advertises.
pub(crate) const BROKER_ADDRESS: &str = "127.0.0.1:19092";

fn cache_root() -> PathBuf {
    if let Some(root) = std::env::var_os("MONGOOSE_TANSU_ROOT") {
        return PathBuf::from(root);
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from);
    home.join(".cache").join("mongoose-tansu")
}

fn tansu_binary() -> PathBuf {
    std::env::var_os("MONGOOSE_TANSU")
        .map_or_else(|| cache_root().join("bin").join("tansu"), PathBuf::from)
}

fn state_dir(root: &Path) -> PathBuf {
    root.join("target").join("tansu")
}

fn pid_file(root: &Path) -> PathBuf {
    state_dir(root).join("broker.pid")
}

fn log_file(root: &Path) -> PathBuf {
    state_dir(root).join("broker.log")
}

fn port_answers() -> bool {
    let address: SocketAddr = BROKER_ADDRESS.parse().expect("a valid socket address");
    TcpStream::connect_timeout(&address, Duration::from_millis(500)).is_ok()
}

fn alive(pid: i32) -> bool {
    // an exited process its parent has not reaped yet (a zombie) is not running
    if let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) {
        if let Some((_, after_name)) = stat.rsplit_once(')') {
            if after_name.trim_start().starts_with('Z') {
                return false;
            }
        }
    }
    // SAFETY: kill with signal 0 only checks that the process exists; no memory is shared.
    unsafe { libc::kill(pid, 0) == 0 }
}

fn signal(pid: i32, signal: i32) {
    // SAFETY: sends a signal to the broker process we started; no memory is shared.
    unsafe {
        libc::kill(pid, signal);
    }
}

fn running_pid(root: &Path) -> Option<i32> {
    let text = fs::read_to_string(pid_file(root)).ok()?;
    let pid: i32 = text.trim().parse().ok()?;
    alive(pid).then_some(pid)
}

fn log_tail(root: &Path) -> String {
    let mut text = String::new();
    if let Ok(mut file) = fs::File::open(log_file(root)) {
        let _ = file.read_to_string(&mut text);
    }
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// Installs tansu into the cache folder unless the binary is there.
fn ensure_installed() -> bool {
    let binary = tansu_binary();
    if binary.exists() {
        return true;
    }
    let root = cache_root();
    eprintln!(
        "xtask: {} is missing: installing tansu into {} (several minutes the first time)",
        binary.display(),
        root.display()
    );
    let installed = crate::run(
        Command::new(env!("CARGO"))
            .args(["install", "tansu", "--version", TANSU_VERSION, "--locked"])
            .args(["--features", "dynostore", "--root"])
            .arg(&root),
    );
    installed && binary.exists()
}

fn start(root: &Path) -> bool {
    if let Some(pid) = running_pid(root) {
        eprintln!("xtask: the broker already runs (pid {pid}) on {BROKER_ADDRESS}");
        return true;
    }
    if port_answers() {
        // not ours (no pid file): used as it is, and `stop` leaves it running
        eprintln!(
            "xtask: a broker this checkout did not start already listens on {BROKER_ADDRESS}: the tests use it (stop it yourself to run them on a fresh one)"
        );
        return true;
    }
    if !ensure_installed() {
        eprintln!("xtask: tansu could not be installed: see cargo's output above");
        return false;
    }
    if let Err(error) = fs::create_dir_all(state_dir(root)) {
        eprintln!(
            "xtask: cannot create {}: {error}",
            state_dir(root).display()
        );
        return false;
    }
    let log = match fs::File::create(log_file(root)) {
        Ok(log) => log,
        Err(error) => {
            eprintln!("xtask: cannot create {}: {error}", log_file(root).display());
            return false;
        }
    };
    let Ok(log_err) = log.try_clone() else {
        return false;
    };
    let listener = format!("tcp://{BROKER_ADDRESS}");
    let mut command = Command::new(tansu_binary());
    command
        .args(["broker", "--listener-url", &listener])
        .args(["--advertised-listener-url", &listener])
        .args(["--storage-engine", "memory://tansu/"])
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        // its own process group: a Ctrl-C at the terminal that started it does not stop it
        .process_group(0);
    let child = match command.spawn() {
        Ok(child) => child,
        Err(error) => {
            eprintln!("xtask: cannot start {}: {error}", tansu_binary().display());
            return false;
        }
    };
    let pid = child.id() as i32;
    if let Err(error) = fs::write(pid_file(root), format!("{pid}\n")) {
        eprintln!("xtask: cannot write the pid file: {error}");
        signal(pid, libc::SIGKILL);
        return false;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while !port_answers() {
        if !alive(pid) || Instant::now() > deadline {
            eprintln!(
                "xtask: the broker did not answer on {BROKER_ADDRESS} (its log, {}):\n{}",
                log_file(root).display(),
                log_tail(root)
            );
            signal(pid, libc::SIGKILL);
            let _ = fs::remove_file(pid_file(root));
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // the child is not waited for: it runs on after xtask exits (reparented to init)
    std::mem::forget(child);
    eprintln!(
        "xtask: broker started (pid {pid}) on {BROKER_ADDRESS}; log {}",
        log_file(root).display()
    );
    true
}

fn stop(root: &Path) -> bool {
    let Some(pid) = running_pid(root) else {
        eprintln!(
            "xtask: no broker runs (no live pid in {})",
            pid_file(root).display()
        );
        let _ = fs::remove_file(pid_file(root));
        return true;
    };
    // a stopped broker must be continued to act on a signal; tansu 0.6 stops on SIGINT
    // (Ctrl-C) and ignores SIGTERM
    signal(pid, libc::SIGCONT);
    signal(pid, libc::SIGINT);
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(pid) && Instant::now() < deadline {
        reap(pid);
        std::thread::sleep(Duration::from_millis(100));
    }
    if alive(pid) {
        eprintln!("xtask: the broker (pid {pid}) did not stop on SIGINT in 10 s: SIGKILL");
        signal(pid, libc::SIGKILL);
    }
    let _ = fs::remove_file(pid_file(root));
    eprintln!("xtask: broker stopped (pid {pid})");
    true
}

/// Reaps `pid` if it is our own exited child (it is not, when another xtask started it).
fn reap(pid: i32) {
    let mut status = 0;
    // SAFETY: waitpid with WNOHANG on a pid; the status is a local integer.
    unsafe {
        libc::waitpid(pid, &mut status, libc::WNOHANG);
    }
}

fn status(root: &Path) -> bool {
    match running_pid(root) {
        Some(pid) => {
            let answering = port_answers();
            println!(
                "broker running: pid {pid}, {BROKER_ADDRESS} {}",
                if answering {
                    "answers"
                } else {
                    "does not answer"
                }
            );
            answering
        }
        None => {
            println!("broker not running");
            false
        }
    }
}

/// Runs `cargo xtask broker ARGUMENTS`.
pub(crate) fn broker(root: &Path, arguments: &[String]) -> bool {
    match arguments.first().map(String::as_str) {
        Some("start") => start(root),
        Some("stop") => stop(root),
        Some("status") => status(root),
        _ => {
            eprintln!("usage: cargo xtask broker start|stop|status");
            false
        }
    }
}
