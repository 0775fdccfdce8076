//! Logs that do not cry wolf (issue 39, item 4), with the real `mongoose` binary: an
//! ordinary logrotate (`copytruncate` after every byte was read, a rename with a new
//! file at the path) is said at INFO as what it is, never as a truncation WARN or a
//! file "forgotten"; a restart after `kill -9` says where each feed resumed and why;
//! a PAUSE feed's subscription line says PAUSE.
//!
//! Before: every rotation logged `WARN ... the input file ... was truncated: ... resetting
//! the pointer to 0`, a rename `WARN reading the old file to its end, then reopening`, a
//! glob's renamed file "forgotten", the restart nothing about where it resumed, and a
//! COMMITED feed without an explicit policy `subscribed ... policy=DROP_AFTER_SPIN`
//! although its queue pauses.

use crate::support;

use std::collections::BTreeSet;

use support::{forward_config, LedgerRun};

fn lines(range: std::ops::Range<usize>) -> String {
    range.map(|index| format!("line {index}\n")).collect()
}

/// The lines the file sink wrote, each once (a repeat is an assertion failure).
fn written_once(run: &LedgerRun) -> BTreeSet<String> {
    let text = std::fs::read_to_string(run.path("out.txt")).unwrap_or_default();
    let mut seen = BTreeSet::new();
    for line in text.lines() {
        assert!(seen.insert(line.to_owned()), "{line} written twice");
    }
    seen
}

fn wait_written(run: &LedgerRun, child: &mut std::process::Child, count: usize) {
    run.wait_until(child, &format!("wrote {count} lines"), || {
        std::fs::read_to_string(run.path("out.txt"))
            .map(|text| text.lines().count() >= count)
            .unwrap_or(false)
    });
}

/// The lines of `log` at WARN or above that mention `word`.
fn warnings_about<'a>(log: &'a str, word: &str) -> Vec<&'a str> {
    log.lines()
        .filter(|line| line.contains(" WARN ") || line.contains(" ERROR "))
        .filter(|line| line.to_lowercase().contains(word))
        .collect()
}

/// The line of `log` that holds `text`, asserted to be at INFO.
fn info_line<'a>(log: &'a str, text: &str) -> &'a str {
    let line = log
        .lines()
        .find(|line| line.contains(text))
        .unwrap_or_else(|| panic!("no line holds '{text}': {log}"));
    assert!(line.contains(" INFO "), "'{line}' is INFO: {log}");
    line
}

#[test]
fn an_ordinary_logrotate_logs_no_truncation_warning() {
    let mut run = LedgerRun::new(&lines(0..100), &forward_config(""));
    run.log_filter = "info";
    let bytes_before_copytruncate = lines(0..100).len();
    let mut child = run.spawn(false);
    wait_written(&run, &mut child, 100);

    // logrotate's copytruncate, after every byte was read and written
    std::fs::copy(run.path("input.txt"), run.path("input.txt.1")).expect("copy");
    std::fs::OpenOptions::new()
        .write(true)
        .open(run.path("input.txt"))
        .expect("input")
        .set_len(0)
        .expect("truncate");
    run.wait_for_log(&mut child, "rotated by truncation");
    std::fs::write(run.path("input.txt"), lines(100..150)).expect("new content");
    wait_written(&run, &mut child, 150);

    // a rotation by rename: the old file renamed, a new file at the path
    std::fs::rename(run.path("input.txt"), run.path("input.txt.2")).expect("rotate");
    std::fs::write(run.path("input.txt"), lines(150..200)).expect("new file");
    wait_written(&run, &mut child, 200);
    run.wait_for_log(&mut child, "rotated: ");

    // a crash, and a restart
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    let mut child = run.spawn(false);
    run.wait_for_log(&mut child, "resumed ");
    std::fs::OpenOptions::new()
        .append(true)
        .open(run.path("input.txt"))
        .and_then(|mut file| std::io::Write::write_all(&mut file, lines(200..210).as_bytes()))
        .expect("appended");
    wait_written(&run, &mut child, 210);
    assert_eq!(run.terminate(child), 0);

    let log = run.log();
    let expected: BTreeSet<String> = lines(0..210).lines().map(str::to_owned).collect();
    assert_eq!(written_once(&run), expected, "every line once: {log}");

    info_line(
        &log,
        &format!(
            "rotated by truncation: all {bytes_before_copytruncate} bytes were read before; reading the new content from 0"
        ),
    );
    let renamed = info_line(&log, "rotated: ");
    assert!(
        renamed.contains("input.txt was renamed to ")
            && renamed.contains("input.txt.2; read to its end, then the new file at ")
            && renamed.contains("input.txt is read from its start"),
        "{renamed}"
    );
    let restart = &log[log.rfind("server starting").expect("the restart's log")..];
    let resumed = info_line(restart, "resumed ");
    assert!(
        resumed.contains("the pointer's offset") && resumed.contains("bytes will be read again"),
        "the restart says where and why: {resumed}"
    );
    assert_eq!(
        warnings_about(&log, "truncat"),
        Vec::<&str>::new(),
        "no truncation warning: {log}"
    );
    assert_eq!(
        warnings_about(&log, "forgotten"),
        Vec::<&str>::new(),
        "nothing forgotten: {log}"
    );
    assert_eq!(
        warnings_about(&log, "reopening"),
        Vec::<&str>::new(),
        "no reopening warning: {log}"
    );

    // a COMMITED feed without an explicit policy pauses, and says so
    let subscribed = info_line(&log, "subscribed");
    assert!(
        subscribed.contains("policy=PAUSE"),
        "the subscription line states the real policy: {subscribed}"
    );
    assert!(!log.contains("policy=DROP_AFTER_SPIN"), "{log}");
}

#[test]
fn a_glob_files_rotation_by_rename_is_said_as_a_rotation_not_forgotten() {
    let mut run = LedgerRun::new(
        "",
        &forward_config("").replace("path = \"input.txt\"", "path = \"logs/*.log\""),
    );
    run.log_filter = "info";
    std::fs::create_dir(run.path("logs")).expect("logs");
    std::fs::write(run.path("logs/app.log"), lines(0..100)).expect("first file");
    let mut child = run.spawn(false);
    wait_written(&run, &mut child, 100);

    // renamed out of the glob; the writer opens the path again a moment later
    std::fs::rename(run.path("logs/app.log"), run.path("logs/app.log.1")).expect("rotate");
    run.wait_for_log(&mut child, "rotated: ");
    std::fs::write(run.path("logs/app.log"), lines(100..150)).expect("new file");
    wait_written(&run, &mut child, 150);
    // renamed with the new file made at once
    std::fs::rename(run.path("logs/app.log"), run.path("logs/app.log.2")).expect("rotate");
    std::fs::write(run.path("logs/app.log"), lines(150..200)).expect("new file");
    wait_written(&run, &mut child, 200);
    assert_eq!(run.terminate(child), 0);

    let log = run.log();
    let expected: BTreeSet<String> = lines(0..200).lines().map(str::to_owned).collect();
    assert_eq!(written_once(&run), expected, "every line once: {log}");
    for rotated in ["app.log.1", "app.log.2"] {
        let line = info_line(
            &log,
            &format!("{rotated}; read to its end, then the new file at"),
        );
        assert!(
            line.contains("rotated: ") && line.contains("app.log was renamed to "),
            "{line}"
        );
    }
    for word in ["forgotten", "truncat", "reopening"] {
        assert_eq!(
            warnings_about(&log, word),
            Vec::<&str>::new(),
            "no warning about '{word}': {log}"
        );
    }
    assert!(!log.contains("forgotten"), "nothing 'forgotten': {log}");
}

// issue 39 (the operator's first day): the first start of a feed warned "the pointer
// file is missing, damaged or another input's" right after "no pointer file: a new one
// was created"; a pointer deleted while the sink holds outputs of the feed still warns
#[test]
fn a_first_start_warns_of_no_lost_pointer_and_a_deleted_one_does() {
    let mut run = LedgerRun::new(&lines(0..10), &forward_config(""));
    run.log_filter = "info";
    let (code, log) = run.finish_with_log();
    assert_eq!(code, 0, "{log}");
    assert!(
        warnings_about(&log, "pointer").is_empty(),
        "a first start warns of no pointer: {log}"
    );
    info_line(
        &log,
        "no consumer holds a position of this input: read from its start",
    );
    std::fs::remove_file(run.pointer_path()).expect("the pointer deleted");
    let (code, log) = run.finish_with_log();
    assert_eq!(code, 0, "{log}");
    assert_eq!(
        warnings_about(&log, "the pointer file is missing").len(),
        1,
        "a pointer deleted while the sink holds the feed's outputs is warned of: {log}"
    );
    assert_eq!(written_once(&run).len(), 10, "{log}");
}
