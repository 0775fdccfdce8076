use std::fs::File;
use std::io::Write;

use super::checks::{first_difference, Difference, GrowingFileLines};
use super::configs::{mongoose_config, rsyslog_config};
use super::report::{goal_line, median};
use super::runs::Measured;
use super::runs::{run_dd, run_peer, Peer};
use super::setup::{program_path, rsyslogd_path};
use super::*;

fn small_options() -> VersusOptions {
    VersusOptions {
        size_mib: 1,
        line_bytes: 100,
        runs: 1,
        keep: None,
    }
}

fn arguments(text: &str) -> Vec<String> {
    text.split_whitespace().map(str::to_owned).collect()
}

#[test]
fn the_options_default_to_the_issue_s_measurement_and_refuse_what_cannot_run() {
    let defaults = VersusOptions::parse(&[]).expect("no arguments are valid");
    assert_eq!(defaults, VersusOptions::default());
    assert_eq!(
        (defaults.size_mib, defaults.line_bytes, defaults.runs),
        (1024, 100, 3)
    );
    assert_eq!(defaults.lines(), 10_737_418);

    let given = VersusOptions::parse(&arguments(
        "--size-mib 64 --line-bytes 200 --runs 5 --keep /tmp/versus",
    ))
    .expect("valid arguments");
    assert_eq!(given.size_mib, 64);
    assert_eq!(given.line_bytes, 200);
    assert_eq!(given.runs, 5);
    assert_eq!(given.keep, Some(PathBuf::from("/tmp/versus")));
    assert_eq!(given.input_bytes(), given.lines() * 200);

    for wrong in [
        "--runs 0",
        "--runs",
        "--size-mib many",
        "--line-bytes 10",
        "--fast",
    ] {
        assert!(
            matches!(
                VersusOptions::parse(&arguments(wrong)),
                Err(VersusError::Usage(_))
            ),
            "{wrong} must be refused"
        );
    }
}

#[test]
fn the_input_is_whole_lines_of_the_asked_length_and_no_two_alike() {
    let folder = tempfile::tempdir().expect("a temp folder");
    let input = folder.path().join("lines.txt");
    let options = small_options();
    assert!(write_input(&options, &input).expect("the input is written"));
    let bytes = fs::read(&input).expect("the input reads");
    assert_eq!(bytes.len() as u64, options.input_bytes());
    let lines: Vec<&[u8]> = bytes.split_inclusive(|byte| *byte == b'\n').collect();
    assert_eq!(lines.len() as u64, options.lines());
    let mut seen = std::collections::HashSet::new();
    for line in &lines {
        assert_eq!(line.len(), 100);
        assert_eq!(line.iter().filter(|byte| **byte == b'\n').count(), 1);
        assert!(line[..99]
            .iter()
            .all(|byte| byte.is_ascii_graphic() || *byte == b' '));
        assert!(seen.insert(*line), "two lines alike");
    }
    // a kept input of the right size is reused, not written again
    assert!(!write_input(&options, &input).expect("the input is checked"));
    // the same options give the same bytes
    let again = folder.path().join("again.txt");
    write_input(&options, &again).expect("the input is written");
    assert_eq!(fs::read(&again).expect("reads"), bytes);
}

#[test]
fn an_output_that_differs_is_reported_at_its_first_differing_line() {
    let folder = tempfile::tempdir().expect("a temp folder");
    let input = folder.path().join("lines.txt");
    let options = small_options();
    write_input(&options, &input).expect("the input is written");
    let original = fs::read(&input).expect("the input reads");
    let output = folder.path().join("output.txt");
    let expected_bytes = original.len() as u64;

    fs::write(&output, &original).expect("write");
    assert_eq!(first_difference(&input, &output).expect("compares"), None);

    // one changed byte in line 9,000 (past the first 1 MiB block is not needed: the
    // comparison counts lines across blocks the same way)
    let mut changed = original.clone();
    changed[8_999 * 100 + 40] = b'#';
    fs::write(&output, &changed).expect("write");
    assert_eq!(
        first_difference(&input, &output).expect("compares"),
        Some(Difference {
            line: 9_000,
            expected_bytes,
            actual_bytes: expected_bytes
        })
    );

    // the last line missing
    fs::write(&output, &original[..original.len() - 100]).expect("write");
    let lines = options.lines();
    assert_eq!(
        first_difference(&input, &output).expect("compares"),
        Some(Difference {
            line: lines,
            expected_bytes,
            actual_bytes: expected_bytes - 100
        })
    );

    // a line written twice at the end
    let mut doubled = original.clone();
    doubled.extend_from_slice(&original[original.len() - 100..]);
    fs::write(&output, &doubled).expect("write");
    assert_eq!(
        first_difference(&input, &output).expect("compares"),
        Some(Difference {
            line: lines + 1,
            expected_bytes,
            actual_bytes: expected_bytes + 100
        })
    );

    // a leading space on every line (what a careless rsyslog template writes)
    let spaced: Vec<u8> = original
        .split_inclusive(|byte| *byte == b'\n')
        .flat_map(|line| std::iter::once(b' ').chain(line.iter().copied()))
        .collect();
    fs::write(&output, &spaced).expect("write");
    assert_eq!(
        first_difference(&input, &output)
            .expect("compares")
            .map(|difference| difference.line),
        Some(1)
    );
}

#[test]
fn a_growing_file_is_counted_by_what_was_appended() {
    let folder = tempfile::tempdir().expect("a temp folder");
    let path = folder.path().join("growing.txt");
    let mut counter = GrowingFileLines::default();
    assert!(!counter.advance(&path).expect("a missing file is no error"));
    let mut file = File::create(&path).expect("create");
    file.write_all(b"one\ntwo\nthr").expect("write");
    assert!(counter.advance(&path).expect("reads"));
    assert_eq!((counter.lines, counter.bytes), (2, 11));
    assert!(!counter.advance(&path).expect("reads"));
    file.write_all(b"ee\nfour\n").expect("write");
    assert!(counter.advance(&path).expect("reads"));
    assert_eq!((counter.lines, counter.bytes), (4, 19));
}

#[test]
fn our_config_is_the_forward_shape_the_server_reads() {
    let config = mongoose_config(
        Path::new("/data/in \"quoted\".txt"),
        Path::new("/data/out\\put.txt"),
    );
    let table: toml::Table = config.parse().expect("the generated config is TOML");
    let feed = &table["feeds"][0];
    assert_eq!(feed["name"].as_str(), Some("lines"));
    assert_eq!(feed["source"].as_str(), Some("file"));
    assert_eq!(feed["path"].as_str(), Some("/data/in \"quoted\".txt"));
    assert_eq!(feed["read_strategy"].as_str(), Some("COMMITED"));
    let sink = &table["sinks"][0];
    assert_eq!(sink["name"].as_str(), Some("out"));
    assert_eq!(sink["kind"].as_str(), Some("file"));
    assert_eq!(sink["path"].as_str(), Some("/data/out\\put.txt"));
    let group = &table["groups"][0];
    assert_eq!(group["name"].as_str(), Some("forward"));
    let processor = &group["processors"][0];
    assert_eq!(processor["name"].as_str(), Some("copy"));
    assert_eq!(processor["kind"].as_str(), Some("forward"));
    assert_eq!(processor["settings"]["feed"].as_str(), Some("lines"));
    assert_eq!(processor["settings"]["sink"].as_str(), Some("out"));
}

#[test]
fn rsyslog_s_config_reads_from_the_start_into_a_ruleset_of_its_own() {
    let config = rsyslog_config(
        Path::new("/w/input/lines.txt"),
        Path::new("/w/runs/rsyslog-1/output.txt"),
        Path::new("/w/runs/rsyslog-1/work"),
        100,
    );
    for expected in [
        r#"workDirectory="/w/runs/rsyslog-1/work""#,
        r#"freshStartTail="off""#,
        r#"ruleset="copy""#,
        r#"string="%msg%\n""#,
        r#"queue.workerThreads="1""#,
        r#"queue.type="Direct""#,
        r#"file="/w/input/lines.txt""#,
        r#"file="/w/runs/rsyslog-1/output.txt""#,
        r#"maxMessageSize="8192""#,
    ] {
        assert!(
            config.contains(expected),
            "{expected} missing from:\n{config}"
        );
    }
    // a long line raises the message size above it
    assert!(
        rsyslog_config(Path::new("i"), Path::new("o"), Path::new("w"), 20_000)
            .contains(r#"maxMessageSize="21024""#)
    );
}

#[test]
fn medians_and_thousands_read_as_the_report_prints_them() {
    assert_eq!(median(&[]), None);
    assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
    assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
    assert_eq!(thousands(456_000.4), "456,000");
    assert_eq!(thousands(999.0), "999");
    assert_eq!(thousands(10_737_418.0), "10,737,418");
}

#[test]
fn the_goal_line_takes_the_ratios_run_by_run_with_their_range() {
    let options = VersusOptions {
        size_mib: 100,
        runs: 3,
        ..small_options()
    };
    let run = |seconds: f64| -> runs::RunResult {
        Ok(Measured {
            seconds,
            peak_rss_bytes: 20_000_000,
        })
    };
    let sides = [
        Side {
            name: "ours",
            runs: vec![run(1.0), run(2.0), Err("MISMATCH: line 3".to_owned())],
        },
        Side {
            name: "rsyslog",
            runs: vec![run(10.0), run(10.0), run(10.0)],
        },
        Side {
            name: "dd-dsync",
            runs: vec![run(0.5), run(1.0), run(1.0)],
        },
    ];
    // ours: 100 and 50 MiB/s; against rsyslog 10x and 5x; against dd 50% and 50%
    assert_eq!(
        goal_line(&sides, &options),
        "durable forward: ours 75.0 (50.0-100.0) MiB/s; ours/rsyslog 7.50x (5.00x-10.00x) (goal 8x: not met); ours/dd 50% (50%-50%) (goal 80%: not met); peak RSS 20.0 MB (goal under 50 MB: met)"
    );
}

/// A kept layout in `folder` whose input folder exists (the input is not written).
fn kept_layout(folder: &Path) -> Layout {
    let input_dir = folder.join("input");
    fs::create_dir_all(&input_dir).expect("create");
    Layout {
        work: folder.to_path_buf(),
        input: input_dir.join(INPUT_NAME),
        keep: true,
    }
}

/// The rsyslog side for real, on 1 MiB, when rsyslogd is installed (CI does not install
/// it: `cargo mongoose-bench versus-rsyslog` does). Proves the config copies every line unchanged
/// (no leading space, no internal message, nothing escaped) and that the run ends.
#[test]
fn rsyslog_copies_a_small_input_line_for_line_when_installed() {
    let Some(program) = rsyslogd_path() else {
        eprintln!("rsyslogd is not installed: skipping the real rsyslog run");
        return;
    };
    let folder = tempfile::tempdir().expect("a temp folder");
    let layout = kept_layout(folder.path());
    let options = small_options();
    write_input(&options, &layout.input).expect("the input is written");
    let measured = run_peer(&layout, &options, 1, Peer::Rsyslog, &program)
        .expect("the harness runs")
        .expect("rsyslog copies every line unchanged");
    assert!(measured.seconds > 0.0);
    assert!(measured.peak_rss_bytes > 0);
    let output = layout.run_dir("rsyslog", 1).join("output.txt");
    assert_eq!(
        fs::read(&output).expect("the kept output"),
        fs::read(&layout.input).expect("the input")
    );
    // its state file is in the run's own work directory, not in /var/lib/rsyslog
    let state_files = fs::read_dir(layout.run_dir("rsyslog", 1).join("work"))
        .expect("the work directory")
        .count();
    assert!(
        state_files >= 1,
        "imfile's state file is in the private work directory"
    );
}

/// The syslog-ng side for real, on 1 MiB, when syslog-ng is installed or unpacked
/// (`cargo mongoose-bench versus-rsyslog` unpacks it into `target/peers`): every line copied unchanged, the run ends, and its
/// persist file is the run's own.
#[test]
fn syslog_ng_copies_a_small_input_line_for_line_when_installed() {
    let unpacked =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/peers/syslog-ng/usr/sbin/syslog-ng");
    let Some(program) =
        program_path("syslog-ng").or_else(|| unpacked.is_file().then_some(unpacked))
    else {
        eprintln!("syslog-ng is not installed: skipping the real syslog-ng run");
        return;
    };
    let folder = tempfile::tempdir().expect("a temp folder");
    let layout = kept_layout(folder.path());
    let options = small_options();
    write_input(&options, &layout.input).expect("the input is written");
    let measured = run_peer(&layout, &options, 1, Peer::SyslogNg, &program)
        .expect("the harness runs")
        .expect("syslog-ng copies every line unchanged");
    assert!(measured.seconds > 0.0);
    let run_dir = layout.run_dir("syslog-ng", 1);
    assert_eq!(
        fs::read(run_dir.join("output.txt")).expect("the kept output"),
        fs::read(&layout.input).expect("the input")
    );
    assert!(run_dir.join("syslog-ng.persist").exists());
}

/// The `dd oflag=dsync bs=1M` line: the same bytes copied, timed to its exit.
#[test]
fn dd_copies_the_input_byte_for_byte() {
    let folder = tempfile::tempdir().expect("a temp folder");
    let layout = kept_layout(folder.path());
    write_input(&small_options(), &layout.input).expect("the input is written");
    let measured = run_dd(&layout, 1)
        .expect("the harness runs")
        .expect("dd copies the input");
    assert!(measured.seconds > 0.0);
    assert_eq!(
        fs::read(layout.run_dir("dd", 1).join("output.txt")).expect("the kept output"),
        fs::read(&layout.input).expect("the input")
    );
}

/// A stand-in for `mongoose` (a shell script that copies the config's input path to its
/// output path, then does `tail`), to check how the harness times, measures and checks
/// our side until the `forward` kind is merged.
fn stand_in(folder: &Path, tail: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let script = folder.join("mongoose-stand-in");
    fs::write(
        &script,
        format!(
            "#!/bin/sh\n\
             [ \"$1 $2 $4\" = 'run --config --exit-when-settled' ] || {{ echo \"bad arguments: $*\" >&2; exit 2; }}\n\
             paths=$(sed -n 's/^path = \"\\(.*\\)\"$/\\1/p' \"$3\")\n\
             input=$(echo \"$paths\" | sed -n 1p)\n\
             output=$(echo \"$paths\" | sed -n 2p)\n\
             cp \"$input\" \"$output\"\n\
             {tail}\n"
        ),
    )
    .expect("write the stand-in");
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).expect("chmod");
    script
}

#[test]
fn our_side_is_timed_to_its_exit_and_its_output_checked_line_for_line() {
    let folder = tempfile::tempdir().expect("a temp folder");
    let input_dir = folder.path().join("input");
    fs::create_dir_all(&input_dir).expect("create");
    let layout = Layout {
        work: folder.path().to_path_buf(),
        input: input_dir.join(INPUT_NAME),
        keep: false,
    };
    write_input(&small_options(), &layout.input).expect("the input is written");
    // a pointer file left by an earlier run is removed: the next run reads from the start
    fs::write(input_dir.join("lines.txt.readPointer"), b"old").expect("write");

    let copies = stand_in(folder.path(), "exit 0");
    let measured = run_ours(&layout, &copies, 1)
        .expect("the harness runs")
        .expect("an exact copy is measured");
    assert!(measured.seconds > 0.0);
    assert!(measured.peak_rss_bytes > 0, "ru_maxrss of the exited child");
    assert!(!input_dir.join("lines.txt.readPointer").exists());
    assert!(
        !layout.run_dir("ours", 1).join("output.txt").exists(),
        "a checked output is removed unless kept"
    );

    let adds_a_line = stand_in(folder.path(), "echo extra >> \"$output\"");
    let mismatch = run_ours(&layout, &adds_a_line, 2)
        .expect("the harness runs")
        .expect_err("an extra line is no success");
    assert!(mismatch.starts_with("MISMATCH"), "{mismatch}");
    assert!(
        mismatch.contains(&format!("line {}", small_options().lines() + 1)),
        "{mismatch}"
    );

    let refuses = stand_in(
        folder.path(),
        "echo \"unknown processor kind 'forward'\" >&2; exit 2",
    );
    let unavailable = run_ours(&layout, &refuses, 3)
        .expect("the harness runs")
        .expect_err("a failed run has no figures");
    assert!(
        unavailable.contains("exited with 2") && unavailable.contains("unknown processor kind"),
        "{unavailable}"
    );
}
