//! The processor kind `aggregate` (issue 40, second increment), against the real
//! `mongoose` binary run as a child process: its state saved with the feed's position
//! in the outbox (real SIGKILLs, the truth computed from the input), its outputs and
//! dead letters written once into file sinks, a full sink, its config errors at their
//! key, the ledger's rules expressed as an aggregate, and the query of a key's state
//! behind the admin token. `aggregate_recovery.rs` holds its recovery tests.
//!
//! No timing assertions: every wait is for a condition, with a generous deadline.

use crate::support;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use mongoose_aggregate::{AggregateSettings, Aggregator};
use support::aggregate::*;
use support::LedgerRun;

#[test]
fn an_aggregate_counts_and_sums_by_key_exactly_once_across_kills() {
    let lines = ledger_input(40_000);
    let total_bytes = text_of(&lines).len() as u64;
    let run = LedgerRun::new(&text_of(&lines), &config("", TOTALS));
    let mut kills = 0;
    let mut mid_way = 0;
    for round in 1..=6u64 {
        let mut child = run.spawn(false);
        let target = total_bytes * round / 8;
        run.wait_until(&mut child, &format!("committed {target} bytes"), || {
            committed(&run) >= target
        });
        child.kill().expect("SIGKILL");
        child.wait().expect("reaped");
        kills += 1;
        if committed(&run) < total_bytes {
            mid_way += 1;
        }
        // the committed position is never ahead of what the saved state holds
        let saved = state_of(&run, TOTALS)
            .state()
            .lanes
            .get(&0)
            .map_or(0, |lane| lane.offset);
        assert!(
            committed(&run) <= saved,
            "after kill {kills}: committed {} is ahead of the saved state's {saved}",
            committed(&run)
        );
    }
    assert!(
        mid_way >= 3,
        "the kills landed mid-way ({mid_way} of {kills})"
    );
    let code = run.finish();
    assert_eq!(code, 0, "{}", run.log());
    assert_truth(&run, &lines, &format!("after {kills} SIGKILLs"));
}

#[test]
fn a_line_that_does_not_parse_is_counted_and_dead_lettered_never_dropped() {
    let lines: Vec<String> = [
        "alice,10",
        "alice",
        "bob,x12",
        "bob,5",
        "carol,1,2",
        "alice,-20",
        "bob,7",
    ]
    .iter()
    .map(|line| (*line).to_owned())
    .collect();
    let run = LedgerRun::new(&text_of(&lines), &config("", TOTALS));
    assert_eq!(run.finish(), 0, "{}", run.log());
    let aggregate = state_of(&run, TOTALS);
    let counters = &aggregate.state().counters;
    assert_eq!(counters.applied, 4, "{counters:?}");
    assert_eq!(counters.rejected_total(), 3, "{counters:?}");
    assert!(
        counters.rejected.len() >= 2,
        "counted per reason: {counters:?}"
    );
    let dead = lines_of(&run, "dead.txt");
    assert_eq!(dead.len(), 3, "{dead:?}");
    let offsets: Vec<String> = dead
        .iter()
        .map(|line| {
            let json: serde_json::Value = serde_json::from_str(line).expect("JSON");
            assert!(json["rejected"].is_string(), "the reason: {line}");
            json["position"].as_str().expect("a position").to_owned()
        })
        .collect();
    // the offsets after "alice", "bob,x12" and "carol,1,2"
    assert_eq!(offsets, ["15", "23", "39"], "{dead:?}");
    assert_eq!(lines_of(&run, "out.txt"), ["alice negative: -10"]);
}

#[test]
fn a_window_result_is_emitted_once_when_it_closes() {
    // 40 minutes of payments on 4 cards, time going forward
    let mut lines = Vec::new();
    let mut truth: BTreeMap<(i64, String), (u64, i64)> = BTreeMap::new();
    let start = 1_700_000_040i64; // a minute's start
    for index in 0..3_000i64 {
        let ts = start + index * 40 * 60 / 3_000;
        let card = format!("card{}", (index * 7) % 4 + (index % 3) / 2);
        let amount = index % 50;
        let entry = truth.entry((ts / 60 * 60, card.clone())).or_default();
        entry.0 += 1;
        entry.1 += amount;
        lines.push(format!("{ts},{card},{amount}"));
    }
    let last_window = (start + 2_999 * 40 * 60 / 3_000) / 60 * 60;
    let total_bytes = text_of(&lines).len() as u64;
    let run = LedgerRun::new(&text_of(&lines), &config("", WINDOWED));
    for round in 1..=3u64 {
        let mut child = run.spawn(false);
        let target = total_bytes * round / 4;
        run.wait_until(&mut child, &format!("committed {target} bytes"), || {
            committed(&run) >= target
        });
        child.kill().expect("SIGKILL");
        child.wait().expect("reaped");
    }
    assert_eq!(run.finish(), 0, "{}", run.log());
    let out = lines_of(&run, "out.txt");
    let results: Vec<serde_json::Value> = out
        .iter()
        .filter(|line| line.starts_with('{'))
        .map(|line| serde_json::from_str(line).expect("a window result"))
        .collect();
    let mut seen: BTreeMap<(String, String), u64> = BTreeMap::new();
    for result in &results {
        let key = (
            result["window_start"].as_str().expect("start").to_owned(),
            result["key"][0].as_str().expect("card").to_owned(),
        );
        *seen.entry(key).or_default() += 1;
    }
    assert!(
        seen.values().all(|count| *count == 1),
        "each window's result once: {seen:?}"
    );
    // every window that closed (all but the last minute's) has its result, right
    let closed: Vec<_> = truth
        .iter()
        .filter(|((window, _), _)| *window < last_window)
        .collect();
    assert_eq!(results.len(), closed.len(), "{out:?}");
    for ((window, card), (count, spent)) in closed {
        let start = mongoose_aggregate::format_time(window * 1000);
        let result = results
            .iter()
            .find(|result| {
                result["window_start"] == start.as_str() && result["key"][0] == card.as_str()
            })
            .unwrap_or_else(|| panic!("the result of {card} at {start}"));
        assert_eq!(result["values"]["n"], *count, "{result}");
        assert_eq!(
            result["values"]["spent"].to_string().trim_matches('"'),
            spent.to_string(),
            "{result}"
        );
    }
    let busy = out.iter().filter(|line| line.starts_with("busy ")).count();
    let expected_busy = truth
        .iter()
        .filter(|((window, _), (count, _))| *window < last_window && *count > 3)
        .count();
    assert_eq!(busy, expected_busy, "each busy window's rule output once");
    assert!(lines_of(&run, "dead.txt").is_empty(), "no late line");
}

#[test]
fn a_rule_with_a_syntax_error_is_a_config_error_at_its_key() {
    let settings = TOTALS.replace("when = \"total < 0\"", "when = \"total < \"");
    let run = LedgerRun::new("alice,1\n", &config("", &settings));
    let config = run.path("mongoose.toml");
    let config = config.to_str().expect("utf-8");
    for command in ["validate", "run"] {
        let output = mongoose(&[command, "--config", config]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{command} refuses: {stderr}");
        assert!(
            stderr.contains("groups[0].processors[0].settings.rules[0].when")
                && stderr.contains("column"),
            "{command} names the key and the column: {stderr}"
        );
    }
    // the other settings are checked too: an unknown key, a bad type, an unknown sink
    for (from, to, key) in [
        (
            "snapshot_every = 300",
            "snapshot_evry = 300",
            "snapshot_evry",
        ),
        (
            "snapshot_every = 300",
            "snapshot_every = \"often\"",
            "snapshot_every",
        ),
        (
            "dead_letter = \"dead\"",
            "dead_letter = \"nope\"",
            "settings.dead_letter",
        ),
        ("sink = \"out\"", "sink = \"nope\"", "settings.sink"),
        (
            "snapshot_every = 300",
            "snapshot_every = 300\n[[groups.processors]]\nname = \"twin\"\nkind = \"aggregate\"\nsettings = { format = \"csv\", columns = [\"a\"], fields = { a = \"string\" }, state_dir = \"state\" }",
            "also the state_dir of the processor 'agg/twin'",
        ),
        (
            "\"sum(amount)\"",
            "\"sum(amont)\"",
            "settings.aggregates.total",
        ),
    ] {
        let settings = TOTALS.replace(from, to);
        std::fs::write(run.path("mongoose.toml"), self::config("", &settings)).expect("config");
        let output = mongoose(&["validate", "--config", config]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{to}: {stderr}");
        assert!(stderr.contains(key), "{to}: names {key}: {stderr}");
    }
}

#[test]
fn the_ledger_as_an_aggregate_config_gives_the_ledgers_balances_and_alerts() {
    let lines = ledger_input(3_000);
    let settings = r#"format = "csv"
columns = ["account", "amount"]
fields = { account = "string", amount = "integer" }
group_by = ["account"]
aggregates = { balance = "sum(amount)" }
rules = [{ name = "overdrawn", when = "balance < 0", emit = "{account},{balance}", fire = "every" }]
sink = "out"
dead_letter = "dead"
state_dir = "state"
"#;
    let both = format!(
        "{}
[[groups]]
name = \"ledger\"
idle_strategy = \"sleeping-millis:1\"

[[groups.processors]]
name = \"ledger\"
kind = \"ledger\"
settings = {{ state_dir = \"ledger-state\", alerts = \"alerts.txt\" }}
",
        config("", settings)
    );
    let run = LedgerRun::new(&text_of(&lines), &both);
    assert_eq!(run.finish(), 0, "{}", run.log());
    let ledger = run.state_in("ledger-state");
    let settings_of: AggregateSettings = toml::from_str(settings).expect("settings");
    let aggregator = Aggregator::compile(settings_of, "settings").expect("compiles");
    let aggregate =
        mongoose::aggregate::store::load(&run.path("state"), aggregator).expect("readable");
    let balances: BTreeMap<String, i64> = aggregate
        .state()
        .keys
        .keys()
        .map(|account| {
            let view = aggregate.key(&[account]).expect("a key").to_json();
            let balance = view["values"]["balance"]
                .to_string()
                .trim_matches('"')
                .parse()
                .expect("an integer balance");
            (account.clone(), balance)
        })
        .collect();
    assert_eq!(balances, ledger.balances, "the same balances");
    assert_eq!(aggregate.state().counters.applied, ledger.applied);
    assert_eq!(aggregate.state().counters.rejected_total(), ledger.rejected);
    // the ledger's alerts are `position,account,balance`
    let ledger_alerts: Vec<String> = lines_of(&run, "alerts.txt")
        .iter()
        .map(|alert| alert.split_once(',').expect("position,rest").1.to_owned())
        .collect();
    assert!(!ledger_alerts.is_empty());
    assert_eq!(lines_of(&run, "out.txt"), ledger_alerts, "the same alerts");
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("address").port()
}

fn http(address: &str, path: &str, token: Option<&str>) -> (u16, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into();
    let mut request = agent.get(format!("http://{address}{path}"));
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let mut response = request
        .call()
        .unwrap_or_else(|error| panic!("GET {path}: no answer: {error}"));
    let status = response.status().as_u16();
    (
        status,
        response.body_mut().read_to_string().unwrap_or_default(),
    )
}

const TOKEN: &str = "aggregate-admin-token-0123456789abcdef";

#[test]
fn the_state_of_a_key_can_be_queried_and_needs_the_token() {
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let settings = TOTALS
        .replace(
            "group_by = [\"account\"]",
            "group_by = [\"account\", \"amount\"]",
        )
        .replace("{account} negative", "{account} {amount} negative");
    let lines = ["alice,10", "alice,10", "bob,-3", "oops"];
    let run = LedgerRun::new(
        &text_of(&lines.map(str::to_owned)),
        &config(
            &format!("[admin]\naddress = \"{address}\"\ntoken_file = \"admin.token\"\n"),
            &settings,
        ),
    );
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(run.path("admin.token"), TOKEN).expect("token");
        std::fs::set_permissions(
            run.path("admin.token"),
            std::fs::Permissions::from_mode(0o600),
        )
        .expect("mode");
    }
    let mut child = run.spawn(false);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        assert!(Instant::now() < deadline, "never settled: {}", run.log());
        assert!(child.try_wait().expect("status").is_none(), "{}", run.log());
        if std::net::TcpStream::connect(&address).is_ok() {
            let (code, text) = http(&address, "/status", None);
            if code == 200 && text.contains("\"settled\":true") {
                let status: serde_json::Value = serde_json::from_str(&text).expect("JSON");
                let totals = &status["processors"]["agg/totals"];
                if totals["applied"] == 3 {
                    assert_eq!(totals["rejected"], 1, "{status}");
                    assert_eq!(totals["late"], 0, "{status}");
                    break;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let path = "/processors/agg/totals/state?key=alice,10";
    let (code, text) = http(&address, path, None);
    assert_eq!(code, 401, "the state needs the token: {text}");
    let (code, text) = http(&address, path, Some("wrong-token-wrong-token"));
    assert_eq!(code, 401, "{text}");
    let (code, text) = http(&address, path, Some(TOKEN));
    assert_eq!(code, 200, "{text}");
    let json: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(json["values"]["n"], 2, "{json}");
    assert_eq!(json["values"]["total"], 20, "{json}");
    let (code, text) = http(
        &address,
        "/processors/agg/totals/state?key=carol,1",
        Some(TOKEN),
    );
    assert_eq!(code, 404, "an unknown key: {text}");
    let (code, text) = http(
        &address,
        "/processors/agg/totals/state?key=alice",
        Some(TOKEN),
    );
    assert_eq!(
        code, 400,
        "a key of one value for two group_by fields: {text}"
    );
    let (code, text) = http(
        &address,
        "/processors/agg/nope/state?key=alice,10",
        Some(TOKEN),
    );
    assert_eq!(code, 404, "an unknown processor: {text}");
    let (code, text) = http(&address, "/metrics", None);
    assert_eq!(code, 200);
    assert!(
        text.contains("mongoose_aggregate_rejected_lines_total"),
        "rejected lines in /metrics: {text}"
    );
    // the CLI: `mongoose state --config C group/name key`
    let config = run.path("mongoose.toml");
    let config = config.to_str().expect("utf-8");
    let output = mongoose(&["state", "--config", config, "agg/totals", "bob,-3"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{stdout} {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let json: serde_json::Value = serde_json::from_str(&stdout).expect("JSON on stdout");
    assert_eq!(json["values"]["total"], -3, "{json}");
    let output = mongoose(&["state", "--config", config, "agg/totals", "nobody,1"]);
    assert_ne!(output.status.code(), Some(0), "an unknown key fails");
    assert_eq!(run.terminate(child), 0, "{}", run.log());
}

#[test]
fn a_late_event_is_counted_and_reported() {
    // minutes 0, 1, 2 of card c1, then a line of minute 0 again: its window closed
    let start = 1_700_000_040i64;
    let lines: Vec<String> = [0, 61, 122, 5, 130]
        .iter()
        .map(|offset| format!("{},c1,1", start + offset))
        .collect();
    let run = LedgerRun::new(&text_of(&lines), &config("", WINDOWED));
    assert_eq!(run.finish(), 0, "{}", run.log());
    let settings: AggregateSettings = toml::from_str(WINDOWED).expect("settings");
    let aggregator = Aggregator::compile(settings, "settings").expect("compiles");
    let aggregate =
        mongoose::aggregate::store::load(&run.path("state"), aggregator).expect("state");
    assert_eq!(
        aggregate.state().counters.late,
        1,
        "{:?}",
        aggregate.state().counters
    );
    assert_eq!(aggregate.state().counters.applied, 4);
    let dead = lines_of(&run, "dead.txt");
    assert_eq!(dead.len(), 1, "the late line dead-lettered: {dead:?}");
    let late: serde_json::Value = serde_json::from_str(&dead[0]).expect("JSON");
    assert_eq!(late["late"], true, "{late}");
    assert_eq!(late["line"], lines[3].as_str(), "{late}");
    assert!(
        late["watermark"].is_string() && late["position"].is_string(),
        "{late}"
    );
}

#[test]
fn a_full_sink_makes_the_aggregate_busy_and_each_output_is_written_once() {
    // 300 cards in one minute, then a line of the next minute closes their 300 windows
    // at once: 600 outputs for one line into a sink whose queue holds 4
    let start = 1_700_000_040i64;
    let mut lines: Vec<String> = (0..300)
        .flat_map(|card| {
            (0..5).map(move |n| format!("{},card{card},{}", start + (card + n) % 60, n + 1))
        })
        .collect();
    lines.push(format!("{},card0,1", start + 60));
    let text = config("", WINDOWED).replace(
        "path = \"out.txt\"",
        "path = \"out.txt\"\nqueue_capacity = 4",
    );
    let run = LedgerRun::new(&text_of(&lines), &text);
    assert_eq!(run.finish(), 0, "{}", run.log());
    let out = lines_of(&run, "out.txt");
    let results = out.iter().filter(|line| line.starts_with('{')).count();
    let busy = out.iter().filter(|line| line.starts_with("busy ")).count();
    assert_eq!((results, busy), (300, 300), "each output once");
    let mut sorted = out.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), out.len(), "no output twice");
}

#[test]
fn an_aggregate_on_a_kafka_feed_without_state_changelog_is_refused() {
    let run = LedgerRun::new("", "");
    let plugins = run.path("plugins");
    std::fs::create_dir_all(&plugins).expect("the plugin folder");
    let library = mongoose_testkit::build_plugin("kafka-plugin", &[]);
    std::fs::copy(&library, plugins.join(library.file_name().expect("a name"))).expect("copied");
    let text = config("plugin_dir = \"plugins\"", TOTALS).replace(
        "source = \"file\"\npath = \"input.txt\"\nread_strategy = \"COMMITED\"",
        "source = \"kafka\"\ncodec = \"line\"\nsettings = { brokers = \"127.0.0.1:19092\", topic = \"aggregate-refused\", group = \"aggregate-refused\" }",
    );
    std::fs::write(run.path("mongoose.toml"), text).expect("config");
    let config = run.path("mongoose.toml");
    let output = mongoose(&["validate", "--config", config.to_str().expect("utf-8")]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("groups[0].processors[0].settings.feed")
            && stderr.contains("state = \"changelog\""),
        "says why and what to do: {stderr}"
    );
}

#[test]
fn an_aggregate_that_a_reload_removes_is_no_longer_in_the_status() {
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let top = format!("[admin]\naddress = \"{address}\"\n");
    let run = LedgerRun::new("alice,1\nbob,-2\n", &config(&top, TOTALS));
    let mut child = run.spawn(false);
    let status = || -> serde_json::Value {
        if std::net::TcpStream::connect(&address).is_err() {
            return serde_json::Value::Null;
        }
        let (code, text) = http(&address, "/status", None);
        if code != 200 {
            return serde_json::Value::Null;
        }
        serde_json::from_str(&text).expect("JSON")
    };
    run.wait_until(&mut child, "reported the aggregate's two lines", || {
        status()["processors"]["agg/totals"]["applied"] == 2
    });
    // the same config with a forward in place of the aggregate
    let forward = config(&top, TOTALS)
        .split("[[groups.processors]]")
        .next()
        .expect("the head")
        .to_owned()
        + "[[groups.processors]]\nname = \"copy\"\nkind = \"forward\"\nsettings = { feed = \"lines\", sink = \"out\" }\n";
    std::fs::write(run.path("mongoose.toml"), forward).expect("config");
    let sent = Command::new("kill")
        .args(["-HUP", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(sent.success());
    run.wait_until(&mut child, "applied the reload", || {
        status()["lastReload"]["outcome"] == "applied"
    });
    let now = status();
    assert!(
        now["processors"].get("agg/totals").is_none(),
        "a removed aggregate is no longer in /status: {now}"
    );
    assert_eq!(run.terminate(child), 0, "{}", run.log());
}
