//! The archive connector in the server (issue 16): `mongoose archive serve` records an
//! IPC stream that `mongoose archive publish` (another process) writes while the
//! `mongoose` server runs the ledger on an `archive` feed (the plugin built by cargo in
//! the test from `plugins/archive`). The server is killed with SIGKILL several times
//! and restarted: the committed position never passes the ledger's saved one, and in
//! the end every message is applied exactly once (replay from the committed position,
//! then live, with the consumer-side guard).

use crate::support;

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use mongoose_testkit::{build_plugin, plugin_dir};
use support::{assert_applied_once, copy_dir, plugin_ledger_config, wait_exit, LedgerRun};

const MESSAGES: usize = 20_000;
const STREAM: u32 = 7;

fn line(index: usize) -> String {
    let amount = (index % 7) as i64 - 3;
    format!("acc{},{amount}", index % 30)
}

fn mongoose(arguments: &[&str], dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mongoose"));
    command.args(arguments).current_dir(dir);
    command
}

/// `mongoose archive publish` fed `MESSAGES` lines in paced chunks by a thread.
fn publisher(dir: &Path) -> (Child, std::thread::JoinHandle<()>) {
    let ipc = dir.join("ipc");
    let mut child = mongoose(&["archive", "publish", "--stream", "7", "--ipc"], dir)
        .arg(&ipc)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the publisher starts");
    let mut stdin = child.stdin.take().expect("stdin");
    let feeder = std::thread::spawn(move || {
        for chunk in (0..MESSAGES).collect::<Vec<_>>().chunks(500) {
            let text: String = chunk.iter().map(|index| line(*index) + "\n").collect();
            stdin
                .write_all(text.as_bytes())
                .expect("the publisher reads");
            std::thread::sleep(Duration::from_millis(5));
        }
    });
    (child, feeder)
}

fn config(dir: &Path) -> String {
    plugin_ledger_config(
        "plugins",
        "archive",
        &format!(
            r#"archive = "{}", stream = {STREAM}, pointer = "{}""#,
            dir.join("archive").display(),
            dir.join("lines.pointer").display()
        ),
        r#"state_dir = "state", alerts = "alerts.txt", guard = true"#,
    )
}

/// The archive pointer's line (`<recording> <position> <epoch> <identity>`), the one
/// record of its durable log; `None` before any commit.
fn pointer_line(dir: &Path) -> Option<String> {
    let path = dir.join("lines.pointer");
    let bytes = std::fs::read(&path).ok()?;
    if !bytes.starts_with(&mongoose_durable::header::MAGIC) {
        return Some(String::from_utf8(bytes).expect("an earlier layout's text"));
    }
    let header = mongoose_durable::header::Header::new("mongoose-archive-pointer", 1, Vec::new());
    let mut recovery = mongoose_durable::log::read(&path, &header).expect("a whole pointer");
    assert_eq!(recovery.records.len(), 1, "one record");
    Some(String::from_utf8(recovery.records.remove(0)).expect("text"))
}

/// The committed `(recording, position)` (`(0, 0)` before any commit).
fn committed(dir: &Path) -> (u64, u64) {
    let Some(text) = pointer_line(dir) else {
        return (0, 0);
    };
    let mut parts = text
        .split_whitespace()
        .map(|part| part.parse().expect("a number"));
    (
        parts.next().expect("a recording"),
        parts.next().expect("a position"),
    )
}

#[test]
fn a_publisher_and_an_archiver_while_the_server_is_killed_apply_every_message_exactly_once() {
    let library = build_plugin("archive-plugin", &[]);
    let run = LedgerRun::new("", "");
    let dir = run.dir.path().to_path_buf();
    plugin_dir(&dir, &[&library]);
    std::fs::create_dir_all(dir.join("ipc")).expect("ipc folder");
    std::fs::write(run.path("mongoose.toml"), config(&dir)).expect("config");

    let mut archiver = mongoose(&["archive", "serve", "archive", "--ipc", "ipc"], &dir)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the archiver starts");
    let (mut publishing, feeder) = publisher(&dir);

    let kills = run.kill_rounds(4, (2_000, 1_500, MESSAGES as u64), || committed(&dir).1);
    feeder.join().expect("feeder");
    let status = wait_exit(&mut publishing, "the publisher");
    assert!(status.success(), "the publisher failed: {status}");

    assert_eq!(
        run.finish(),
        0,
        "the last run settled lossless: {}",
        run.log()
    );
    let state = run.state_in("state");
    let expected: Vec<String> = (0..MESSAGES).map(line).collect();
    assert_applied_once(
        &state,
        &expected,
        &format!("the messages after {kills} kills: {}", run.log()),
    );
    assert_eq!(
        committed(&dir).1,
        state.position,
        "the final commit covers everything"
    );

    let stopped = Command::new("kill")
        .args(["-TERM", &archiver.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(stopped.success());
    let status = wait_exit(&mut archiver, "the archiver");
    assert!(status.success(), "the archiver stopped cleanly: {status}");
}

/// An archiver of the `mongoose-archive` library on a thread of the test.
struct ArchiverThread {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
    udp: Option<std::net::SocketAddr>,
}

impl ArchiverThread {
    fn start(config: mongoose_archive::ArchiverConfig) -> ArchiverThread {
        let mut archiver = mongoose_archive::Archiver::open(config).expect("open the archiver");
        let udp = archiver.udp_addr();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopping = stop.clone();
        let handle = std::thread::spawn(move || {
            archiver.run_until(&stopping).expect("run the archiver");
        });
        ArchiverThread {
            stop,
            handle: Some(handle),
            udp,
        }
    }
}

impl Drop for ArchiverThread {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

/// Offers each of `lines` until it is accepted.
fn offer_all(publication: &mut dyn mongoose_archive::Publication, lines: &[String]) {
    for line in lines {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while matches!(
            publication.offer(line.as_bytes()).expect("offer"),
            mongoose_archive::Offer::BackPressured
        ) {
            assert!(
                std::time::Instant::now() < deadline,
                "the archiver never took a message"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Waits until the archive in `archive` recorded `position` bytes of its newest
/// recording of `STREAM`.
fn wait_recorded(archive: &Path, lines: usize) {
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let mut reader = mongoose_archive::RecordingReader::open(
            archive,
            mongoose_archive::RecordingSelector::LatestForStream(STREAM),
            None,
        );
        if let Ok(reader) = reader.as_mut() {
            let mut messages = 0;
            while reader.poll(1024, |_| messages += 1).expect("read") > 0 {}
            if messages >= lines {
                return;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the archiver never recorded {lines} messages"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Issue 25, item 5: a gap the archive recorded (the UDP publication answered a NAK with
/// "gap lost": its retransmit buffer no longer had the bytes) is a loss. Before the fix
/// it was committed past as if filtered: the run said lossless and exited 0.
#[test]
fn an_archive_gap_is_a_loss_not_a_filter() {
    const COUNT: usize = 2_000;
    let library = build_plugin("archive-plugin", &[]);
    let run = LedgerRun::new("", "");
    let dir = run.dir.path().to_path_buf();
    plugin_dir(&dir, &[&library]);
    std::fs::write(run.path("mongoose.toml"), config(&dir)).expect("config");

    let archive = dir.join("archive");
    let mut archiver_config = mongoose_archive::ArchiverConfig::new(&archive);
    archiver_config.udp_bind = Some("127.0.0.1:0".parse().expect("an address"));
    let archiver = ArchiverThread::start(archiver_config);
    let mut publication = mongoose_archive::UdpPublication::connect_with(
        archiver.udp.expect("a UDP address"),
        STREAM,
        1,
        mongoose_archive::UdpPublicationConfig {
            retransmit_buffer_bytes: 1024,
            flow_control_window: None,
            loss: Some(mongoose_archive::LossInjection { drop_every: 100 }),
            ..mongoose_archive::UdpPublicationConfig::default()
        },
    )
    .expect("a UDP publication");
    let lines: Vec<String> = (0..COUNT).map(line).collect();
    offer_all(&mut publication, &lines);
    use mongoose_archive::Publication;
    assert!(
        publication.close().expect("close"),
        "the archiver has the end"
    );
    drop(archiver);
    let recording = mongoose_archive::list(&archive).expect("the recordings")[0].clone();
    assert!(!recording.gaps.is_empty(), "the recording has gaps");
    let lost = recording.gaps.len();

    let (code, log) = run.finish_with_log();
    let state = run.state_in("state");
    assert!(
        state.applied < COUNT as u64,
        "the messages in the gaps are not applied: {}",
        state.applied
    );
    assert_eq!(
        code, 3,
        "a run that committed past {lost} recorded gaps is not lossless: {log}"
    );
    assert!(
        log.contains("lost stream bytes"),
        "each gap is logged: {log}"
    );

    // a later run over the same recording still says what the recording lost
    let (code, log) = run.finish_with_log();
    assert_eq!(
        code, 3,
        "the recording's known losses are reported again: {log}"
    );
    assert_eq!(
        run.state_in("state").applied,
        state.applied,
        "nothing applied twice"
    );
}

/// Issue 25, item 5: the archive folder re-created (`rm -rf`) under a feed whose pointer
/// holds recording 1 at a position past the end of the new live recording 1. Before the
/// fix the new recording's messages up to the old position were skipped silently
/// (settled and lossless). A recording that is not the pointer's is detected by its
/// identity: a new epoch, read from its start.
#[test]
fn a_pointer_past_a_recreated_recording_never_skips() {
    let library = build_plugin("archive-plugin", &[]);
    let run = LedgerRun::new("", "");
    let dir = run.dir.path().to_path_buf();
    plugin_dir(&dir, &[&library]);
    std::fs::write(run.path("mongoose.toml"), config(&dir)).expect("config");
    let archive = dir.join("archive");
    let ipc = dir.join("ipc");
    let archiver_config = || {
        let mut config = mongoose_archive::ArchiverConfig::new(&archive);
        config.ipc_dir = Some(ipc.clone());
        config
    };

    let old: Vec<String> = (0..100)
        .map(|index| format!("old{},1", index % 10))
        .collect();
    let archiver = ArchiverThread::start(archiver_config());
    let mut publication =
        mongoose_archive::IpcPublication::create(&ipc, STREAM, 1).expect("a publication");
    offer_all(&mut publication, &old);
    wait_recorded(&archive, old.len());
    let (code, log) = run.finish_with_log();
    assert_eq!(code, 0, "the first run settles lossless: {log}");
    assert_applied_once(&run.state_in("state"), &old, &format!("first run: {log}"));
    drop(publication);
    drop(archiver);

    // the archive is made again; its recording 1 is live and shorter than the pointer
    std::fs::remove_dir_all(&archive).expect("rm -rf the archive");
    std::fs::remove_dir_all(&ipc).expect("rm -rf the rings");
    let fresh: Vec<String> = (0..50)
        .map(|index| format!("new{},{}", index % 10, 1 + index % 3))
        .collect();
    let archiver = ArchiverThread::start(archiver_config());
    let mut publication =
        mongoose_archive::IpcPublication::create(&ipc, STREAM, 2).expect("a publication");
    offer_all(&mut publication, &fresh);
    wait_recorded(&archive, fresh.len());
    assert_eq!(
        mongoose_archive::list(&archive).expect("the recordings")[0].id,
        committed(&dir).0,
        "the new recording has the pointer's id"
    );
    let (code, log) = run.finish_with_log();
    let all: Vec<String> = old.iter().chain(&fresh).cloned().collect();
    assert_applied_once(
        &run.state_in("state"),
        &all,
        &format!("the re-created archive's run: {log}"),
    );
    assert_eq!(code, 0, "settled lossless: {log}");
    assert!(
        log.contains("not the recording"),
        "the other recording is reported: {log}"
    );
    drop(publication);
    drop(archiver);
}

/// Issue 25, item 5 (the companion of the driver's
/// `a_source_whose_cycle_keeps_failing_stalls_with_its_reason`, on the binary): a
/// pointer inside a frame made every cycle fail for ever (BEHIND, stalled null,
/// `--exit-when-settled` never ended). The feed is reported stalled with the reason,
/// and the run ends with exit 1.
#[test]
fn a_pointer_inside_a_frame_stalls_the_run_with_its_reason() {
    let library = build_plugin("archive-plugin", &[]);
    let run = LedgerRun::new("", "");
    let dir = run.dir.path().to_path_buf();
    plugin_dir(&dir, &[&library]);
    std::fs::write(
        run.path("mongoose.toml"),
        format!("stalled_exit_millis = 3000\n{}", config(&dir)),
    )
    .expect("config");
    let archive = dir.join("archive");
    let ipc = dir.join("ipc");
    let mut archiver_config = mongoose_archive::ArchiverConfig::new(&archive);
    archiver_config.ipc_dir = Some(ipc.clone());
    let archiver = ArchiverThread::start(archiver_config);
    let lines: Vec<String> = (0..100).map(line).collect();
    let mut publication =
        mongoose_archive::IpcPublication::create(&ipc, STREAM, 1).expect("a publication");
    offer_all(&mut publication, &lines);
    wait_recorded(&archive, lines.len());
    let (code, log) = run.finish_with_log();
    assert_eq!(code, 0, "the first run settles: {log}");
    // the pointer moved inside message 11's frame (the position after message 10, plus
    // 2), its recording, epoch and identity kept: the ledger's state is past it
    let pointer = pointer_line(&dir).expect("pointer");
    let mut fields: Vec<String> = pointer.split_whitespace().map(str::to_owned).collect();
    let inside: u64 = lines[..10]
        .iter()
        .map(|line| 4 + line.len() as u64)
        .sum::<u64>()
        + 2;
    fields[1] = inside.to_string();
    std::fs::write(dir.join("lines.pointer"), fields.join(" ") + "\n").expect("pointer");

    let (code, log) = run.finish_with_log();
    assert_eq!(code, 1, "a run that cannot go on ends with exit 1: {log}");
    assert!(
        log.contains(&inside.to_string()) && log.contains("failed 30 times"),
        "the stall names the position and the failures: {log}"
    );
    drop(publication);
    drop(archiver);
}

/// Issue 25, item 7 (the archive's part): the plugin boundary carries the consumers'
/// saved positions. A ledger state restored from an older copy is behind the archive
/// pointer: before, the source resumed at the pointer and the messages between were
/// never applied. Now it resumes at the saved position; and a deleted pointer resumes
/// at the saved position, not at the recording's start.
#[test]
fn an_archive_pointer_ahead_of_or_without_the_ledgers_state_resumes_at_the_saved_position() {
    let library = build_plugin("archive-plugin", &[]);
    let run = LedgerRun::new("", "");
    let dir = run.dir.path().to_path_buf();
    plugin_dir(&dir, &[&library]);
    std::fs::write(run.path("mongoose.toml"), config(&dir)).expect("config");
    let archive = dir.join("archive");
    let ipc = dir.join("ipc");
    let mut archiver_config = mongoose_archive::ArchiverConfig::new(&archive);
    archiver_config.ipc_dir = Some(ipc.clone());
    let archiver = ArchiverThread::start(archiver_config);
    let mut publication =
        mongoose_archive::IpcPublication::create(&ipc, STREAM, 1).expect("a publication");
    let lines: Vec<String> = (0..3_000).map(line).collect();

    offer_all(&mut publication, &lines[..1_000]);
    wait_recorded(&archive, 1_000);
    let (code, log) = run.finish_with_log();
    assert_eq!(code, 0, "{log}");
    copy_dir(&run.path("state"), &run.path("state-copy"));
    offer_all(&mut publication, &lines[1_000..2_000]);
    wait_recorded(&archive, 2_000);
    let (code, log) = run.finish_with_log();
    assert_eq!(code, 0, "{log}");

    // the state restored from the older copy: 1,000 messages behind the pointer
    std::fs::remove_dir_all(run.path("state")).expect("the state");
    copy_dir(&run.path("state-copy"), &run.path("state"));
    let (code, log) = run.finish_with_log();
    assert_applied_once(
        &run.state_in("state"),
        &lines[..2_000],
        &format!("after the state was restored: {log}"),
    );
    assert_eq!(code, 0, "{log}");

    // the pointer deleted: resumes at the saved position, not at the start
    std::fs::remove_file(dir.join("lines.pointer")).expect("the pointer");
    offer_all(&mut publication, &lines[2_000..]);
    wait_recorded(&archive, 3_000);
    let (code, log) = run.finish_with_log();
    assert_applied_once(
        &run.state_in("state"),
        &lines,
        &format!("after the pointer was deleted: {log}"),
    );
    assert_eq!(code, 0, "{log}");
    assert!(
        log.contains("the lowest position a consumer needs (ledger/ledger's saved state"),
        "the source resumes at the ledger's saved position: {log}"
    );

    // the pointer damaged: resumes at the saved position too, where it refused to start
    // before (exit 1, "delete it to read the recording from its start")
    std::fs::write(dir.join("lines.pointer"), "1 10261 1790959763141874x1c9\n")
        .expect("damage the pointer");
    let (code, log) = run.finish_with_log();
    assert_eq!(
        code, 0,
        "a damaged pointer with saved positions is not a refusal: {log}"
    );
    assert!(log.contains("is damaged"), "the damage is reported: {log}");
    assert_applied_once(
        &run.state_in("state"),
        &lines,
        &format!("after the pointer was damaged: {log}"),
    );
    drop(publication);
    drop(archiver);
}
