//! Admin commands in a recording: each run of a processor-owned admin command is an
//! `AdminInvoked` entry in position, with the clock readings it took; a replay calls the
//! command the replayed processor registered and collects its replies
//! (book: running/record-and-replay.md: AdminInvoked in "What is recorded" and
//! "What a replay does with each entry", and "entry N could not be delivered within").

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use mongoose_control::memory::MemoryFeeds;
use mongoose_control::{ControlConfig, ControlPlane};
use mongoose_core::{Processor, ProcessorError, StartContext};
use mongoose_replay::cli::replay_report;
use mongoose_replay::{
    AdminReply, Clock, Entry, FeedCodecs, OutputSink, RecordedAdminReply, Replayer,
    ADMIN_REPLIES_FILE,
};

mod support;
use support::{assert_eventually, close_groups, read_recording, recording_group, WAIT};

/// Applies `account,amount` lines; `balance ACCOUNT` answers with the balance and the
/// time it read; `audit` sends an output; `crash` panics.
struct Teller {
    balances: BTreeMap<String, i64>,
    clock: Clock,
    sink: OutputSink,
    register: bool,
}

impl Teller {
    #[allow(clippy::ptr_arg)] // a feed of String hands handlers &String
    fn on_line(&mut self, line: &String) -> Result<(), ProcessorError> {
        let (account, amount) = line.split_once(',').ok_or("expected account,amount")?;
        let amount: i64 = amount.parse().map_err(|_| "not an amount")?;
        *self.balances.entry(account.to_owned()).or_insert(0) += amount;
        self.sink.send(format!("applied {line}"));
        Ok(())
    }

    fn balance(&mut self, args: &[String]) -> Result<String, ProcessorError> {
        let [account] = args else {
            return Err("usage: balance ACCOUNT".into());
        };
        let at = self.clock.now();
        match self.balances.get(account) {
            Some(balance) => Ok(format!("{account}={balance} at {at}")),
            None => Err(format!("no account '{account}' at {at}").into()),
        }
    }

    fn audit(&mut self, _args: &[String]) -> Result<String, ProcessorError> {
        self.sink
            .send(format!("audit of {} accounts", self.balances.len()));
        Ok("sent".into())
    }

    fn crash(&mut self, _args: &[String]) -> Result<String, ProcessorError> {
        panic!("the teller crashed");
    }
}

impl Processor for Teller {
    fn start(&mut self, context: &mut StartContext<'_>) -> Result<(), ProcessorError> {
        context.subscribe("lines", Teller::on_line)?;
        if self.register {
            context.register_command("balance", Teller::balance);
            context.register_command("audit", Teller::audit);
            context.register_command("crash", Teller::crash);
        }
        Ok(())
    }
}

fn ticking() -> Clock {
    let next = Arc::new(AtomicI64::new(1_000));
    Clock::from_fn(move || next.fetch_add(1, Ordering::AcqRel))
}

fn codecs() -> FeedCodecs {
    FeedCodecs::new().feed::<String>("lines")
}

fn teller(register: bool, sink: OutputSink) -> Teller {
    Teller {
        balances: BTreeMap::new(),
        clock: ticking(),
        sink,
        register,
    }
}

/// Records a run: lines and commands in the order of `script` (a line `"a,5"`, or a
/// command `"!balance a"`). Returns the live replies (output or error text).
fn record(dir: &std::path::Path, script: &[&str]) -> Vec<Result<String, String>> {
    let feeds = MemoryFeeds::default();
    let lines = feeds.feed::<String>("lines");
    let plane = ControlPlane::new(ControlConfig::default(), Arc::new(feeds.clone()));
    recording_group(&plane, dir, "bank", &["teller"], codecs());
    let (sink, _sent) = OutputSink::collecting("out");
    let added = plane
        .add_processor("bank", "teller", move || teller(true, sink))
        .reply
        .wait_for(WAIT)
        .expect("added");
    assert!(added.applied(), "{added:?}");
    let mut replies = Vec::new();
    let mut published = 0;
    for step in script {
        match step.strip_prefix('!') {
            None => {
                lines.publish((*step).to_owned());
                published += 1;
                // the command comes after the line in the processor's stream
                assert_eventually(|| feeds.dispatched("lines", "bank") == published);
            }
            Some(command_line) => {
                let mut words = command_line.split(' ').map(str::to_owned);
                let command = words.next().expect("a command");
                let reply = plane
                    .invoke_admin_command("bank", "teller", &command, words.collect())
                    .wait_for(WAIT)
                    .expect("answered");
                replies.push(reply.output.clone().ok_or(reply.reason.clone()));
            }
        }
    }
    close_groups(&plane);
    replies
}

fn replayer(dir: &std::path::Path, register: bool) -> Replayer {
    Replayer::open(dir, codecs()).processor("teller", move || {
        teller(register, OutputSink::new("out", |_| {}))
    })
}

// "What is recorded": AdminInvoked, "a processor-owned admin command ran: its name and
// arguments"; "Every timed entry carries every clock reading the processor took"
#[test]
fn an_admin_command_is_recorded_in_position_with_its_arguments_and_clock_readings() {
    let dir = tempfile::tempdir().expect("dir");
    let live = record(
        dir.path(),
        &["a,5", "!balance a", "b,-2", "!balance z", "!audit"],
    );
    assert_eq!(
        live,
        [
            Ok("a=5 at 1000".to_owned()),
            Err("admin command 'balance' failed: no account 'z' at 1001".to_owned()),
            Ok("sent".to_owned()),
        ]
    );

    let recording = read_recording(dir.path());
    let entries = recording.stream("teller").expect("stream").entries();
    let shape: Vec<String> = entries
        .iter()
        .map(|entry| match entry {
            Entry::AdminInvoked {
                command,
                args,
                clock,
            } => format!("admin {command} {args:?} {clock:?}"),
            other => other.kind().to_owned(),
        })
        .collect();
    assert_eq!(
        shape,
        [
            "Inline",
            r#"admin balance ["a"] [1000]"#,
            "Inline",
            // an error is the command's answer: recorded like any run of it
            r#"admin balance ["z"] [1001]"#,
            "admin audit [] []",
        ]
    );

    // the live answers beside the recording
    let text = std::fs::read_to_string(dir.path().join(ADMIN_REPLIES_FILE)).expect("replies");
    let recorded: Vec<RecordedAdminReply> = text
        .lines()
        .map(|line| serde_json::from_str(line).expect("a reply"))
        .collect();
    assert_eq!(recorded.len(), 3);
    assert_eq!(recorded[0].stream, "teller");
    assert_eq!(
        recorded[1].reply,
        AdminReply {
            command: "balance".into(),
            args: vec!["z".into()],
            result: Err("no account 'z' at 1001".into()),
        }
    );
}

// "What a replay does with each entry": AdminInvoked is "rebuilt from the command the
// replayed processor registered; replies are collected in adminReplies()"
#[test]
fn a_replay_calls_the_registered_command_and_collects_the_same_replies() {
    let dir = tempfile::tempdir().expect("dir");
    record(
        dir.path(),
        &[
            "a,5",
            "!balance a",
            "b,-2",
            "!balance z",
            "!audit",
            "a,1",
            "!balance a",
        ],
    );
    let replay = replayer(dir.path(), true).run();
    assert_eq!(replay.stopped("teller"), None);
    let replies: Vec<String> = replay
        .admin_replies("teller")
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        replies,
        [
            "balance a -> a=5 at 1000",
            "balance z -> error: no account 'z' at 1001",
            "audit -> sent",
            "balance a -> a=6 at 1002",
        ],
        "the clock pinned to the recorded readings gives the live answers"
    );
    // the command's output through a sink is captured in position
    assert_eq!(
        replay.outputs("teller"),
        [
            "applied a,5",
            "applied b,-2",
            "audit of 2 accounts",
            "applied a,1"
        ]
    );

    let report = replay_report(dir.path(), replayer(dir.path(), true));
    assert!(report.reproduced(), "{report}");
    let text = report.to_string();
    assert!(
        text.contains("admin replies: 4 replayed, identical to the recorded run"),
        "{text}"
    );
}

// the report diffs the replayed admin replies against the recorded ones
#[test]
fn the_report_shows_where_replayed_admin_replies_differ_from_the_live_ones() {
    let dir = tempfile::tempdir().expect("dir");
    record(dir.path(), &["a,5", "!balance a"]);
    // the live answer as another build gave it (the edit breaks the closing frame's seal
    // of admin.jsonl, so the recording is incomplete too; the diff is still shown)
    let path = dir.path().join(ADMIN_REPLIES_FILE);
    let text = std::fs::read_to_string(&path).expect("replies");
    std::fs::write(&path, text.replace("a=5 at 1000", "a=50 at 1000")).expect("edited");
    let report = replay_report(dir.path(), replayer(dir.path(), true));
    assert!(!report.reproduced());
    let text = report.to_string();
    assert!(
        text.contains("admin replies: 1 replayed, 1 recorded, 1 differ (compared with what could be read of the damaged admin.jsonl):")
            && text.contains("@0 - balance a -> a=50 at 1000")
            && text.contains("@0 + balance a -> a=5 at 1000"),
        "{text}"
    );
}

// "When a replay stops": "entry N could not be delivered within": "A route or admin command
// the replayed configuration never makes would otherwise stall the replay silently"
#[test]
fn a_replay_stops_when_the_replayed_processor_has_no_such_admin_command() {
    let dir = tempfile::tempdir().expect("dir");
    record(dir.path(), &["a,5", "!balance a", "b,1"]);
    let replay = replayer(dir.path(), false).run();
    let reason = replay.stopped("teller").expect("stopped");
    assert_eq!(
        reason,
        "entry 2 could not be delivered within the replay: the replayed processor has no \
         admin command 'balance' (its commands: none)"
    );
    assert_eq!(replay.processor("teller").expect("replayed").replayed, 1);
    assert!(replay.admin_replies("teller").is_empty());
    assert!(replay.complete(), "a stopped replay counts as done");
}

// "Failed: a dispatch threw" / "the recorded run failed here": a command that panicked live
// failed the processor (it was quarantined), so the recording marks it Failed
#[test]
fn a_command_that_panicked_live_is_recorded_failed_and_the_replay_stops_there() {
    let dir = tempfile::tempdir().expect("dir");
    let live = record(dir.path(), &["a,5", "!crash"]);
    assert_eq!(
        live,
        [Err(
            "admin command 'crash' panicked: the teller crashed".to_owned()
        )]
    );
    let recording = read_recording(dir.path());
    let entries = recording.stream("teller").expect("stream").entries();
    assert_eq!(entries.len(), 2);
    assert_eq!(
        entries[1],
        Entry::Failed {
            reason: "admin command crash failed: panicked: the teller crashed".into()
        }
    );
    let replay = replayer(dir.path(), true).run();
    let reason = replay.stopped("teller").expect("stopped");
    assert!(
        reason.starts_with("the recorded run failed here (entry 2)"),
        "{reason}"
    );
}
