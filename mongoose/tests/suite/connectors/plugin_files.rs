//! A bad plugin file never crashes the host (issue 25, item 8): a `.so` cut inside its
//! loadable segments is refused with a message by `plugins list`, `validate` and `run`
//! (before the fix each died of SIGBUS, exit 135, with no message), and a plugin file
//! overwritten in place (`cp` over it) while a server runs does not touch that server
//! (before the fix the server died of SIGBUS or SIGSEGV at the plugin's next call).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mongoose_testkit::{build_plugin, plugin_dir};

const PATIENCE: Duration = Duration::from_secs(180);

fn template() -> PathBuf {
    build_plugin("fixture-plugin", &[])
}

fn mongoose(dir: &Path, arguments: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_mongoose"))
        .current_dir(dir)
        .args(arguments)
        .env("RUST_LOG", "info")
        .output()
        .expect("the mongoose binary runs")
}

/// The template's counter feed copied by a forward processor to the template's append
/// sink.
fn counter_config(limit: u64) -> String {
    format!(
        r#"
plugin_dir = "plugins"

[[feeds]]
name = "counted"
source = "counter"
[feeds.settings]
limit = {limit}
pointer = "counter.pointer"

[[sinks]]
name = "appended"
kind = "append"
settings = {{ path = "out.txt" }}

[[groups]]
name = "copy"
idle_strategy = "sleeping-millis:1"

[[groups.processors]]
name = "copy"
kind = "forward"
settings = {{ feed = "counted", sink = "appended" }}
"#
    )
}

/// The file offset and size of every `PT_LOAD` segment of a 64-bit little-endian ELF
/// file (read by hand here so that the test does not share the loader's parser).
fn loadable_segments(bytes: &[u8]) -> Vec<(u64, u64)> {
    assert_eq!(&bytes[..4], b"\x7fELF", "an ELF file");
    let u16_at = |at: usize| u16::from_le_bytes(bytes[at..at + 2].try_into().expect("2"));
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4"));
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8"));
    let table = u64_at(0x20) as usize;
    let entry = usize::from(u16_at(0x36));
    let count = usize::from(u16_at(0x38));
    (0..count)
        .map(|index| table + index * entry)
        .filter(|&header| u32_at(header) == 1)
        .map(|header| (u64_at(header + 8), u64_at(header + 32)))
        .collect()
}

fn assert_refused_naming(output: &std::process::Output, file: &Path, what: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.code().is_some(),
        "{what} was killed by a signal ({:?}) instead of refusing the plugin: {stderr}",
        output.status
    );
    assert!(
        !output.status.success(),
        "{what} succeeded: {stdout}{stderr}"
    );
    let name = file.file_name().expect("a name").to_string_lossy();
    let said = format!("{stdout}{stderr}");
    assert!(
        said.contains(name.as_ref()) && said.contains("cut short"),
        "{what} names the file and says it is cut short: {said}"
    );
}

#[test]
fn a_truncated_plugin_is_refused_with_a_message() {
    let dir = tempfile::tempdir().expect("scratch");
    let root = dir.path();
    let plugins = plugin_dir(root, &[&template()]);
    let library = plugins.join("libfixture_plugin.so");
    let bytes = std::fs::read(&library).expect("the plugin");
    // cut in the middle of the largest loadable segment (the code)
    let (offset, size) = loadable_segments(&bytes)
        .into_iter()
        .max_by_key(|&(_, size)| size)
        .expect("a loadable segment");
    let cut = usize::try_from(offset + size / 2).expect("fits");
    std::fs::write(&library, &bytes[..cut]).expect("cut the plugin");
    std::fs::write(root.join("mongoose.toml"), counter_config(100)).expect("config");

    let listed = mongoose(root, &["plugins", "list", "--plugin-dir", "plugins"]);
    assert_refused_naming(&listed, &library, "plugins list");
    let validated = mongoose(root, &["validate", "--config", "mongoose.toml"]);
    assert_refused_naming(&validated, &library, "validate");
    assert_eq!(validated.status.code(), Some(2), "a config error");
    let ran = mongoose(
        root,
        &["run", "--config", "mongoose.toml", "--exit-when-settled"],
    );
    assert_refused_naming(&ran, &library, "run");
    assert_eq!(ran.status.code(), Some(2), "a config error");
    assert!(!root.join("out.txt").exists(), "nothing ran");
}

fn lines_of(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn wait_for_more(child: &mut Child, root: &Path, than: usize) -> usize {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let now = lines_of(&root.join("out.txt")).len();
        if now > than {
            return now;
        }
        if let Some(status) = child.try_wait().expect("child status") {
            panic!(
                "the server ended ({status:?}) with {now} lines written: {}",
                std::fs::read_to_string(root.join("server.log")).unwrap_or_default()
            );
        }
        assert!(Instant::now() < deadline, "no progress past {than} lines");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn overwriting_a_loaded_plugin_does_not_crash_the_server() {
    let dir = tempfile::tempdir().expect("scratch");
    let root = dir.path();
    let plugins = plugin_dir(root, &[&template()]);
    let library = plugins.join("libfixture_plugin.so");
    std::fs::write(root.join("mongoose.toml"), counter_config(1_000_000_000)).expect("config");
    let log = std::fs::File::create(root.join("server.log")).expect("log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_mongoose"))
        .current_dir(root)
        .args(["run", "--config", "mongoose.toml"])
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .spawn()
        .expect("the server starts");
    let before = wait_for_more(&mut child, root, 0);
    // `cp other.so libfixture_plugin.so`: the same file truncated and written again,
    // first with a shorter prefix of itself (pages past its end would fault), then
    // with other bytes
    let bytes = std::fs::read(&library).expect("the plugin");
    std::fs::write(&library, &bytes[..bytes.len() / 3]).expect("cut in place");
    let during = wait_for_more(&mut child, root, before);
    let garbage: Vec<u8> = bytes.iter().map(|byte| byte ^ 0x5a).collect();
    std::fs::write(&library, &garbage).expect("overwrite in place");
    let after = wait_for_more(&mut child, root, during);
    assert!(after > during && during > before);
    // SIGTERM: a clean stop, every item written once, in order
    let pid = child.id().to_string();
    Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    let deadline = Instant::now() + PATIENCE;
    let status = loop {
        if let Some(status) = child.try_wait().expect("child status") {
            break status;
        }
        assert!(Instant::now() < deadline, "the server never stopped");
        std::thread::sleep(Duration::from_millis(20));
    };
    let log = std::fs::read_to_string(root.join("server.log")).unwrap_or_default();
    assert_eq!(status.code(), Some(0), "a clean stop: {status:?} {log}");
    let written = lines_of(&root.join("out.txt"));
    let expected: Vec<String> = (0..written.len()).map(|n| n.to_string()).collect();
    assert_eq!(written, expected, "every item once, in order");
}
