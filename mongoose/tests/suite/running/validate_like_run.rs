//! `mongoose validate` is `run`'s checks without side effects (issue 28, item 7): every
//! refusal `run` would meet before starting (a missing or unreadable input folder, a
//! sink folder or data folder that cannot be written or created, an admin address in
//! use) is given by both commands with exit 2 and the same message, and `validate`
//! creates and writes nothing (the whole config folder, data folder included, is the
//! same before and after).
//!
//! Tests may run as root (CI does), whom a chmod does not stop: an uncreatable folder is
//! one below a regular file, and the unreadable-folder variant is skipped when the
//! chmod does not stop this process (said on stderr).

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

/// The binary under test: `MONGOOSE_BIN` runs the tests against another build (e.g.
/// an older one, to see them fail).
fn binary() -> String {
    std::env::var("MONGOOSE_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_mongoose").into())
}

/// How long a command may take before the test calls it a hang.
const HANG: Duration = Duration::from_secs(120);

const FORWARD: &str = r#"
[[groups]]
name = "forward"
[[groups.processors]]
name = "copy"
kind = "forward"
settings = { feed = "lines", sink = "out" }
"#;

/// A forward config: feed `lines` on `input`, file sink `out` on `output`, `top` first.
fn config(top: &str, input: &str, output: &str) -> String {
    format!(
        "{top}\n[[feeds]]\nname = \"lines\"\nsource = \"file\"\npath = \"{input}\"\n\
         read_strategy = \"COMMITED\"\n\n[[sinks]]\nname = \"out\"\nkind = \"file\"\npath = \"{output}\"\n{FORWARD}"
    )
}

struct Folder {
    dir: tempfile::TempDir,
}

impl Folder {
    fn new(config: &str) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("input.txt"), "a\nb\nc\n").expect("input");
        std::fs::write(dir.path().join("mongoose.toml"), config).expect("config");
        Folder { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `mongoose <command> --config mongoose.toml [extra]` to its end: the exit code
    /// and stderr (written outside the folder, so the folder's snapshot holds only what
    /// the server made).
    fn mongoose(&self, command: &str, extra: &[&str]) -> (i32, String) {
        let log = tempfile::NamedTempFile::new().expect("log file");
        let mut child = Command::new(binary())
            .arg(command)
            .arg("--config")
            .arg(self.path("mongoose.toml"))
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::from(log.reopen().expect("log")))
            .spawn()
            .expect("the mongoose binary starts");
        let deadline = Instant::now() + HANG;
        let status = loop {
            if let Some(status) = child.try_wait().expect("child status") {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("`mongoose {command}` still ran after {HANG:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let stderr = std::fs::read_to_string(log.path()).expect("log");
        (status.code().expect("exited, not signalled"), stderr)
    }
}

/// The line `mongoose: ...` a refusal ends with.
fn reason(stderr: &str) -> String {
    stderr
        .lines()
        .rev()
        .find(|line| line.starts_with("mongoose: "))
        .unwrap_or_else(|| panic!("no `mongoose: ` reason in stderr:\n{stderr}"))
        .to_owned()
}

/// Both commands refuse `folder`'s config with exit 2 and the same reason, which
/// says each of `says`.
fn assert_both_refuse(case: &str, folder: &Folder, says: &[&str]) {
    let (validate_code, validate_stderr) = folder.mongoose("validate", &[]);
    let (run_code, run_stderr) = folder.mongoose("run", &["--exit-when-settled"]);
    assert_eq!(
        validate_code, 2,
        "{case}: validate exits 2; stderr:\n{validate_stderr}"
    );
    assert_eq!(run_code, 2, "{case}: run exits 2; stderr:\n{run_stderr}");
    let (validate_reason, run_reason) = (reason(&validate_stderr), reason(&run_stderr));
    assert_eq!(
        validate_reason, run_reason,
        "{case}: validate and run give the same message"
    );
    for needle in says {
        assert!(
            validate_reason.contains(needle),
            "{case}: the message says {needle:?}: {validate_reason}"
        );
    }
}

/// Whether a chmod stops this process (not root, no CAP_DAC_OVERRIDE).
fn chmod_binds_us() -> bool {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("locked");
    std::fs::write(&file, "x").expect("write");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o000)).expect("chmod");
    std::fs::read(&file).is_err()
}

#[test]
fn a_missing_input_folder_is_refused_by_validate_and_run_alike() {
    let folder = Folder::new(&config("", "missing/input.txt", "out.txt"));
    assert_both_refuse(
        "a missing input folder",
        &folder,
        &["feeds[0].path", "does not exist", "missing"],
    );
}

#[test]
fn an_input_folder_that_is_a_file_is_refused_by_validate_and_run_alike() {
    let folder = Folder::new(&config("", "blocker/input.txt", "out.txt"));
    std::fs::write(folder.path("blocker"), "a file").expect("blocker");
    assert_both_refuse(
        "an input folder that is a file",
        &folder,
        &["feeds[0].path", "not a folder"],
    );
}

#[test]
fn an_unreadable_input_folder_is_refused_by_validate_and_run_alike() {
    if !chmod_binds_us() {
        eprintln!("SKIPPED: a chmod does not stop this process (root): an unreadable folder cannot be made");
        return;
    }
    let folder = Folder::new(&config("", "closed/input.txt", "out.txt"));
    std::fs::create_dir(folder.path("closed")).expect("folder");
    std::fs::set_permissions(
        folder.path("closed"),
        std::fs::Permissions::from_mode(0o000),
    )
    .expect("chmod");
    assert_both_refuse(
        "an unreadable input folder",
        &folder,
        &["feeds[0].path", "cannot be read"],
    );
    std::fs::set_permissions(
        folder.path("closed"),
        std::fs::Permissions::from_mode(0o755),
    )
    .expect("chmod back");
}

#[test]
fn a_sink_folder_that_cannot_be_created_is_refused_by_validate_and_run_alike() {
    let folder = Folder::new(&config("", "input.txt", "blocker/sub/out.txt"));
    std::fs::write(folder.path("blocker"), "a file").expect("blocker");
    assert_both_refuse(
        "an uncreatable sink folder",
        &folder,
        &["sinks[0].path", "cannot be created", "blocker"],
    );
}

#[test]
fn a_data_folder_that_cannot_be_created_is_refused_by_validate_and_run_alike() {
    let folder = Folder::new(&config(
        "data_dir = \"blocker/data\"",
        "input.txt",
        "out.txt",
    ));
    std::fs::write(folder.path("blocker"), "a file").expect("blocker");
    assert_both_refuse(
        "an uncreatable data folder",
        &folder,
        &["data_dir", "cannot be created", "blocker"],
    );
}

#[test]
fn an_admin_address_in_use_is_refused_by_validate_and_run_alike() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let address = taken.local_addr().expect("address");
    let folder = Folder::new(&config(
        &format!("[admin]\naddress = \"{address}\""),
        "input.txt",
        "out.txt",
    ));
    assert_both_refuse(
        "an admin address in use",
        &folder,
        &["admin.address", &address.to_string()],
    );
    drop(taken);
}

#[test]
fn a_good_config_passes_validate_and_runs_to_settled() {
    let folder = Folder::new(&config("", "input.txt", "out/out.txt"));
    let (code, stderr) = folder.mongoose("validate", &[]);
    assert_eq!(code, 0, "validate passes; stderr:\n{stderr}");
    let (code, stderr) = folder.mongoose("run", &["--exit-when-settled"]);
    assert_eq!(code, 0, "run settles; stderr:\n{stderr}");
    assert_eq!(
        std::fs::read_to_string(folder.path("out/out.txt")).expect("output"),
        "a\nb\nc\n"
    );
}

/// Every path below `root` with its kind, length, permissions and modification time,
/// and a regular file's bytes.
fn snapshot(root: &Path) -> BTreeMap<PathBuf, (String, u64, u32, SystemTime, Vec<u8>)> {
    let mut found = BTreeMap::new();
    let mut folders = vec![root.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).expect("list") {
            let path = entry.expect("entry").path();
            let metadata = std::fs::symlink_metadata(&path).expect("metadata");
            let bytes = if metadata.is_file() {
                std::fs::read(&path).expect("read")
            } else {
                Vec::new()
            };
            if metadata.is_dir() {
                folders.push(path.clone());
            }
            found.insert(
                path,
                (
                    format!("{:?}", metadata.file_type()),
                    metadata.len(),
                    metadata.permissions().mode(),
                    metadata.modified().expect("mtime"),
                    bytes,
                ),
            );
        }
    }
    found
}

#[test]
fn validate_creates_and_writes_nothing() {
    // before: validate built the server, which created the sink's output file and its
    // 64 KiB `.sinkstate`
    let folder = Folder::new(&config(
        "[admin]\naddress = \"127.0.0.1:0\"",
        "input.txt",
        "out/out.txt",
    ));
    // a first run made the data folder; an older run's pointer beside the input (which
    // a run would adopt) must stay where it is
    let (code, stderr) = folder.mongoose("run", &["--exit-when-settled"]);
    assert_eq!(code, 0, "the first run settles; stderr:\n{stderr}");
    std::fs::write(folder.path("input.txt.readPointer"), vec![0u8; 1024]).expect("old pointer");
    let empty = Folder::new(&config("", "input.txt", "out/out.txt"));
    for (case, folder) in [("after a run", &folder), ("before any run", &empty)] {
        let before = snapshot(folder.dir.path());
        // a modification made now would show a later time
        std::thread::sleep(Duration::from_millis(20));
        let (code, stderr) = folder.mongoose("validate", &[]);
        assert_eq!(code, 0, "{case}: validate passes; stderr:\n{stderr}");
        let after = snapshot(folder.dir.path());
        let made: Vec<_> = after
            .keys()
            .filter(|path| !before.contains_key(*path))
            .collect();
        assert!(made.is_empty(), "{case}: validate made {made:?}");
        assert_eq!(before, after, "{case}: validate changed nothing");
    }
}

/// A free port on loopback (bound, then released).
fn free_address() -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    listener.local_addr().expect("address")
}

/// `mongoose run --config mongoose.toml` of `folder` in the background, once its admin
/// API at `address` accepts connections. Killed when dropped.
struct Running(std::process::Child);

impl Running {
    fn start(folder: &Folder, address: std::net::SocketAddr) -> Self {
        let child = Command::new(binary())
            .arg("run")
            .arg("--config")
            .arg(folder.path("mongoose.toml"))
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the mongoose binary starts");
        let mut running = Running(child);
        let deadline = Instant::now() + HANG;
        while std::net::TcpStream::connect(address).is_err() {
            assert!(
                running.0.try_wait().expect("child status").is_none(),
                "the server exited before its admin API answered"
            );
            assert!(Instant::now() < deadline, "the admin API never answered");
            std::thread::sleep(Duration::from_millis(20));
        }
        running
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn validate_beside_a_running_server_on_the_same_data_folder_passes() {
    // issue 39, item 1: the systemd chapter's reload is `validate`, then `reload`; on
    // the running server's own config validate exited 2, its admin port "in use"
    let address = free_address();
    let folder = Folder::new(&config(
        &format!("[admin]\naddress = \"{address}\""),
        "input.txt",
        "out.txt",
    ));
    let running = Running::start(&folder, address);
    let (code, stderr) = folder.mongoose("validate", &[]);
    assert_eq!(
        code, 0,
        "validate passes beside the server running on its data folder; stderr:\n{stderr}"
    );
    // the rest is still checked: a missing input folder is refused while it runs
    let broken = config(
        &format!("[admin]\naddress = \"{address}\""),
        "missing/input.txt",
        "out.txt",
    );
    std::fs::write(folder.path("mongoose.toml"), broken).expect("config");
    let (code, stderr) = folder.mongoose("validate", &[]);
    assert_eq!(code, 2, "the rest is checked; stderr:\n{stderr}");
    assert!(reason(&stderr).contains("feeds[0].path"), "{stderr}");
    drop(running);
}

#[test]
fn validate_refuses_an_admin_port_a_server_on_another_data_folder_holds() {
    // the port is held by a server, but not by the one on this config's data folder
    let address = free_address();
    let other = Folder::new(&config(
        &format!("[admin]\naddress = \"{address}\""),
        "input.txt",
        "out.txt",
    ));
    let running = Running::start(&other, address);
    let folder = Folder::new(&config(
        &format!("[admin]\naddress = \"{address}\""),
        "input.txt",
        "out.txt",
    ));
    let (code, stderr) = folder.mongoose("validate", &[]);
    assert_eq!(
        code, 2,
        "another server's port is refused; stderr:\n{stderr}"
    );
    let reason = reason(&stderr);
    assert!(
        reason.contains("admin.address") && reason.contains(&address.to_string()),
        "{reason}"
    );
    // the server on this very data folder runs, but another process holds the port
    // the config now names: not the server's, refused
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let held = taken.local_addr().expect("address");
    std::fs::write(
        other.path("mongoose.toml"),
        config(
            &format!("[admin]\naddress = \"{held}\""),
            "input.txt",
            "out.txt",
        ),
    )
    .expect("config");
    let (code, stderr) = other.mongoose("validate", &[]);
    assert_eq!(
        code, 2,
        "a port the running server does not hold is refused; stderr:\n{stderr}"
    );
    assert!(stderr.contains(&held.to_string()), "{stderr}");
    drop(taken);
    drop(running);
}

#[test]
fn a_feed_nothing_consumes_is_refused_by_validate() {
    // issue 39, item 3: a feed no processor reads passed validate, then `run
    // --exit-when-settled` waited 30 s for it and exited 1
    let text = format!(
        "{}\n[[feeds]]\nname = \"orphan\"\nsource = \"file\"\npath = \"other.txt\"\n",
        config("", "input.txt", "out.txt")
    );
    let folder = Folder::new(&text);
    assert_both_refuse(
        "a feed nothing consumes",
        &folder,
        &["feeds[1]", "'orphan'", "no processor"],
    );
}

#[test]
fn a_wildcard_in_a_folder_says_where_a_wildcard_may_be() {
    // issue 39, item 9: "the input folder logs/* does not exist"
    let folder = Folder::new(&config("", "logs/*/app.log", "out.txt"));
    assert_both_refuse(
        "a wildcard in a folder",
        &folder,
        &["feeds[0].path", "only in the file name"],
    );
}
