//! The data folder (issue 28, item 1): everything the server writes for a feed or a
//! sink lives below `data_dir` (default `data`, beside the config), so a log folder the
//! server may only read is tailed; an older run's pointer beside its input is adopted
//! once; two servers never share a data folder. Real processes, real SIGKILL.

mod support;

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use support::LedgerRun;

/// A forward of feed `lines` on `input` into the file sink `out` on `output`.
fn forward_config(input: &str, output: &str) -> String {
    format!(
        r#"
[[feeds]]
name = "lines"
source = "file"
path = "{input}"
read_strategy = "COMMITED"

[[sinks]]
name = "out"
kind = "file"
path = "{output}"
batch = 512

[[groups]]
name = "forward"
[[groups.processors]]
name = "copy"
kind = "forward"
settings = {{ feed = "lines", sink = "out" }}
"#
    )
}

fn lines(from: usize, count: usize) -> String {
    (from..from + count)
        .map(|index| format!("{index:08} {}\n", "y".repeat(index % 53)))
        .collect()
}

/// The names in `folder`.
fn listing(folder: &Path) -> BTreeSet<String> {
    std::fs::read_dir(folder)
        .expect("list")
        .map(|entry| {
            entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

/// The epoch a pointer file holds (bytes 8..16).
fn epoch_of(pointer: &Path) -> u64 {
    let bytes = std::fs::read(pointer).expect("the pointer");
    u64::from_be_bytes(bytes[8..16].try_into().expect("8 bytes"))
}

#[test]
fn a_read_only_input_folder_is_tailed_killed_and_resumed_exactly_once() {
    // before: the pointer was `logs/input.txt.readPointer`, beside the input: a folder
    // the server may only read could not be tailed ("cannot open pointer file ...:
    // Permission denied", exit 1), and as root the folder was written to
    let text = lines(0, 400_000);
    let mut run = LedgerRun::new("", &forward_config("logs/input.txt", "out.txt"));
    run.log_filter = "warn,mongoose_server::cli=info,mongoose_sink=info";
    let logs = run.path("logs");
    std::fs::create_dir(&logs).expect("logs");
    std::fs::write(logs.join("input.txt"), &text).expect("input");
    std::fs::set_permissions(logs.join("input.txt"), PermissionsExt::from_mode(0o444))
        .expect("chmod input");
    std::fs::set_permissions(&logs, PermissionsExt::from_mode(0o555)).expect("chmod folder");
    // as root a chmod stops no write: that nothing new appears in the folder is the
    // property itself
    let before = listing(&logs);
    let mut child = run.spawn(false);
    run.wait_until(&mut child, "wrote part of the output", || {
        std::fs::metadata(run.path("out.txt")).is_ok_and(|meta| meta.len() > 200_000)
    });
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    let written = std::fs::metadata(run.path("out.txt")).map_or(0, |meta| meta.len());
    assert!(
        written < text.len() as u64,
        "killed mid-run ({written} of {} bytes)",
        text.len()
    );
    assert_eq!(listing(&logs), before, "nothing new in the input folder");
    assert!(
        run.pointer_path_of("logs/input.txt").exists(),
        "the pointer is in the data folder: {}",
        run.log()
    );
    assert_eq!(run.finish(), 0, "the restart settles: {}", run.log());
    assert_eq!(listing(&logs), before, "nothing new in the input folder");
    let out = std::fs::read_to_string(run.path("out.txt")).expect("output");
    assert!(
        out == text,
        "every line exactly once, in order ({} lines out of {}): {}",
        out.lines().count(),
        text.lines().count(),
        run.log()
    );
    std::fs::set_permissions(&logs, PermissionsExt::from_mode(0o755)).expect("chmod back");
}

#[test]
fn a_pointer_beside_the_input_from_an_older_run_is_adopted_and_resumed_from() {
    let first = lines(0, 20_000);
    let mut run = LedgerRun::new(&first, &forward_config("input.txt", "out.txt"));
    run.log_filter = "warn,mongoose_server::cli=info,mongoose_sink=info,mongoose_source_file=info";
    assert_eq!(run.finish(), 0, "{}", run.log());
    // the layout an older run left: the pointer beside the input, the sink's state
    // beside its file, no data folder
    let pointer = run.pointer_path();
    let sink_state = run.sink_state("out", "out.txt");
    let epoch = epoch_of(&pointer);
    let (old_pointer, old_state) = (
        run.path("input.txt.readPointer"),
        run.path("out.txt.sinkstate"),
    );
    std::fs::rename(&pointer, &old_pointer).expect("pointer beside the input");
    std::fs::rename(&sink_state, &old_state).expect("state beside the output");
    std::fs::remove_dir_all(run.path("data")).expect("no data folder");
    let second = lines(20_000, 5_000);
    let mut input = std::fs::OpenOptions::new()
        .append(true)
        .open(run.path("input.txt"))
        .expect("input");
    std::io::Write::write_all(&mut input, second.as_bytes()).expect("appended");
    assert_eq!(run.finish(), 0, "{}", run.log());
    let log = run.log();
    for (old, new) in [(&old_pointer, &pointer), (&old_state, &sink_state)] {
        assert!(!old.exists(), "{} moved away: {log}", old.display());
        assert!(new.exists(), "{} adopted: {log}", new.display());
        assert!(
            log.lines().any(|line| line.contains("adopted")
                && line.contains(&old.display().to_string())
                && line.contains(&new.display().to_string())),
            "the adoption is logged with both paths: {log}"
        );
    }
    assert_eq!(
        epoch_of(&pointer),
        epoch,
        "the same pointer (its epoch), not a new one: {log}"
    );
    assert_eq!(
        log.matches("no pointer file: a new one was created")
            .count(),
        1,
        "only the first run made a pointer: {log}"
    );
    let out = std::fs::read_to_string(run.path("out.txt")).expect("output");
    assert!(
        out == format!("{first}{second}"),
        "every line exactly once ({} lines): {log}",
        out.lines().count()
    );
    // a third run finds nothing to adopt and nothing to do
    assert_eq!(run.finish(), 0, "{}", run.log());
    assert_eq!(
        std::fs::read_to_string(run.path("out.txt")).expect("output"),
        out
    );
}

#[test]
fn a_second_server_on_the_same_data_folder_is_refused() {
    let run = LedgerRun::new(&lines(0, 1_000), &forward_config("input.txt", "out.txt"));
    // the second config shares nothing with the first but its folder, so its data
    // folder: another input, another output
    std::fs::write(run.path("other.txt"), lines(0, 10)).expect("other input");
    std::fs::write(
        run.path("second.toml"),
        forward_config("other.txt", "other-out.txt"),
    )
    .expect("second config");
    let mut first = run.spawn(false);
    let pid = first.id().to_string();
    run.wait_until(&mut first, "holds its data folder", || {
        run.path("data/lock").exists()
            && std::fs::read_to_string(run.path("data/lock")).is_ok_and(|held| held.trim() == pid)
    });
    let second = Command::new(env!("CARGO_BIN_EXE_mongoose"))
        .args(["run", "--exit-when-settled", "--config"])
        .arg(run.path("second.toml"))
        .env("RUST_LOG", "warn")
        .output()
        .expect("the second server runs");
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert_eq!(
        second.status.code(),
        Some(1),
        "the second server exits 1: {stderr}"
    );
    let data = run.path("data");
    assert!(
        stderr.contains(&data.display().to_string())
            && stderr.contains(&format!("the process {}", first.id())),
        "the refusal names the folder and the holder's pid: {stderr}"
    );
    assert!(
        !run.path("other-out.txt").exists(),
        "the second server opened nothing"
    );
    assert_eq!(run.terminate(first), 0, "{}", run.log());
    // once the first is gone, the folder is free
    let again = Command::new(env!("CARGO_BIN_EXE_mongoose"))
        .args(["run", "--exit-when-settled", "--config"])
        .arg(run.path("second.toml"))
        .env("RUST_LOG", "warn")
        .output()
        .expect("the second server runs");
    assert_eq!(
        again.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
}

#[test]
fn a_globs_pointers_and_lane_registry_beside_its_files_are_adopted_and_resumed_from() {
    let mut run = LedgerRun::new("", &forward_config("logs/*.log", "out.txt"));
    run.log_filter = "warn,mongoose_server::cli=info,mongoose_source_file=info";
    std::fs::create_dir(run.path("logs")).expect("logs");
    let names = ["a.log", "b.log", "c.log"];
    let mut expected = Vec::new();
    for (index, name) in names.iter().enumerate() {
        let text = lines(index * 100_000, 3_000);
        std::fs::write(run.path("logs").join(name), &text).expect("input");
        expected.extend(text.lines().map(str::to_owned));
    }
    assert_eq!(run.finish(), 0, "{}", run.log());
    // the layout an older run left: pointers and the lane registry in the glob's folder
    let state = support::feed_state(run.dir.path(), "lines", "logs/*.log", "");
    let moved: Vec<String> = listing(&state).into_iter().collect();
    assert!(
        moved.iter().any(|name| name == "lines.lanes")
            && names
                .iter()
                .all(|name| moved.contains(&format!("{name}.readPointer"))),
        "the state folder holds the registry and a pointer per file: {moved:?}"
    );
    for name in &moved {
        std::fs::rename(state.join(name), run.path("logs").join(name)).expect("moved back");
    }
    std::fs::rename(
        run.sink_state("out", "out.txt"),
        run.path("out.txt.sinkstate"),
    )
    .expect("the sink state beside its file");
    std::fs::remove_dir_all(run.path("data")).expect("no data folder");
    for (index, name) in names.iter().enumerate() {
        let text = lines(index * 100_000 + 3_000, 500);
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(run.path("logs").join(name))
            .expect("input");
        std::io::Write::write_all(&mut file, text.as_bytes()).expect("appended");
        expected.extend(text.lines().map(str::to_owned));
    }
    assert_eq!(run.finish(), 0, "{}", run.log());
    let log = run.log();
    for name in &moved {
        assert!(
            !run.path("logs").join(name).exists() && state.join(name).exists(),
            "{name} adopted into the data folder: {log}"
        );
    }
    assert!(
        listing(&run.path("logs")) == names.iter().map(|name| (*name).to_owned()).collect(),
        "nothing but the inputs is left in the glob's folder: {log}"
    );
    let mut out: Vec<String> = std::fs::read_to_string(run.path("out.txt"))
        .expect("output")
        .lines()
        .map(str::to_owned)
        .collect();
    out.sort();
    expected.sort();
    assert!(
        out == expected,
        "every line of every file exactly once ({} of {}): {log}",
        out.len(),
        expected.len()
    );
}
