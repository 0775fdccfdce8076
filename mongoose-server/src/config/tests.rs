use super::validate::{available_cores, cpus_allowed_list, globs_disjoint};
use super::*;

fn parse(text: &str) -> Result<ServerConfig, ServerError> {
    ServerConfig::parse(text, Path::new("/etc/mongoose"))
}

const GOOD: &str = r#"
control_wait_millis = 5000
[admin]
address = "127.0.0.1:9000"
[[feeds]]
name = "lines"
source = "file"
path = "input.txt"
[feeds.overload]
policy = "PAUSE"
[feeds.overload.subscribers.audit]
policy = "DROP_AFTER_SPIN"
[[groups]]
name = "ledger"
idle_strategy = "sleeping-millis:1"
[[groups.processors]]
name = "ledger"
kind = "ledger"
settings = { state_dir = "state" }
"#;

#[test]
fn a_feed_takes_a_rotated_glob() {
    let config = parse(&GOOD.replace(
        "path = \"input.txt\"\n",
        "path = \"input.txt\"\nrotated = \"input-*.txt\"\n",
    ))
    .expect("valid");
    assert_eq!(config.feeds[0].rotated.as_deref(), Some("input-*.txt"));
    assert_eq!(parse(GOOD).expect("valid").feeds[0].rotated, None);
}

#[test]
fn globs_are_disjoint_only_when_a_literal_prefix_or_suffix_tells_them_apart() {
    assert!(globs_disjoint("*.log", "*.csv"));
    assert!(globs_disjoint("app-*", "web-*"));
    assert!(!globs_disjoint("*.log", "app*"));
    assert!(!globs_disjoint("*.log", "*.log"));
    assert!(!globs_disjoint("*.log", "*-1.log"));
    assert!(!globs_disjoint("a*", "ab*"));
    assert!(globs_disjoint("[ab].log", "[ab].csv"));
}

#[test]
fn a_glob_feed_takes_a_scan_interval_and_max_open_files_in_range() {
    let glob = |extra: &str| {
        parse(&GOOD.replace(
            "path = \"input.txt\"\n",
            &format!("path = \"logs/*.log\"\n{extra}"),
        ))
    };
    let config = glob("scan_interval_millis = 250\nmax_open_files = 8\n").expect("valid");
    assert!(config.feeds[0].is_glob());
    assert_eq!(config.feeds[0].scan_interval_millis, Some(250));
    assert_eq!(config.feeds[0].max_open_files, Some(8));
    let error = glob("scan_interval_millis = 1\n").expect_err("too short");
    assert!(
        error.to_string().contains("feeds[0].scan_interval_millis"),
        "{error}"
    );
    let error = glob("max_open_files = 0\n").expect_err("none");
    assert!(
        error.to_string().contains("feeds[0].max_open_files"),
        "{error}"
    );
    let error = parse(&GOOD.replace(
        "path = \"input.txt\"\n",
        "path = \"input.txt\"\nmax_open_files = 4\n",
    ))
    .expect_err("not a glob");
    assert!(
        error
            .to_string()
            .contains("only a feed whose path is a glob"),
        "{error}"
    );
    let error = parse(&GOOD.replace("path = \"input.txt\"\n", "path = \"logs-*/*.log\"\n"))
        .expect_err("a wildcard folder");
    assert!(error.to_string().contains("only the file name"), "{error}");
}

#[test]
fn a_good_config_loads_with_defaults() {
    let config = parse(GOOD).expect("valid");
    assert_eq!(config.control_wait_millis, 5000);
    assert_eq!(config.shutdown_timeout_millis, 30_000);
    assert_eq!(config.feeds[0].read_strategy, ReadStrategy::Committed);
    assert_eq!(
        config.groups[0].idle_strategy,
        IdleStrategyConfig::SleepingMillis(1)
    );
    assert_eq!(
        config.resolve(Path::new("input.txt")),
        PathBuf::from("/etc/mongoose/input.txt")
    );
    let overrides = config.feed_overrides(0).expect("valid overrides");
    assert_eq!(overrides[0].0, "audit");
    assert_eq!(overrides[0].1.policy, OverloadPolicy::DropAfterSpin);
}

#[test]
fn the_default_config_is_an_empty_file() {
    let empty = ServerConfig::parse("", Path::new("")).expect("valid");
    assert_eq!(empty, ServerConfig::default());
}

#[test]
fn an_unknown_key_names_its_path_and_the_expected_keys() {
    let error =
        parse(&GOOD.replace("policy = \"PAUSE\"", "polcy = \"PAUSE\"")).expect_err("unknown key");
    let message = error.to_string();
    assert!(message.contains("feeds[0].overload"), "{message}");
    assert!(message.contains("unknown field `polcy`"), "{message}");
    assert!(
        message.contains("policy"),
        "the expected keys are listed: {message}"
    );
}

#[test]
fn a_bad_policy_names_the_accepted_ones() {
    let error = parse(&GOOD.replace("\"PAUSE\"", "\"SOMETIMES\"")).expect_err("bad value");
    let message = error.to_string();
    assert!(message.contains("feeds[0].overload.policy"), "{message}");
    assert!(
        message.contains("PAUSE") && message.contains("DROP_AFTER_SPIN"),
        "{message}"
    );
}

#[test]
fn a_block_deadline_with_pause_is_refused() {
    let error = parse(&GOOD.replace(
        "policy = \"PAUSE\"",
        "policy = \"PAUSE\"\nblock_deadline_millis = 50",
    ))
    .expect_err("deadline with PAUSE");
    let message = error.to_string();
    assert!(message.contains("feeds[0].overload"), "{message}");
    assert!(message.contains("not allowed with PAUSE"), "{message}");
}

#[test]
fn a_duplicate_processor_name_in_a_group_fails_boot() {
    let twice = format!("{GOOD}[[groups.processors]]\nname = \"ledger\"\nkind = \"ledger\"\n");
    let error = parse(&twice).expect_err("duplicate");
    let message = error.to_string();
    assert!(
        message.contains("groups[0].processors[1].name"),
        "{message}"
    );
    assert!(
        message.contains("duplicate processor name 'ledger'"),
        "{message}"
    );
}

// issue 10, item 1: `address = "0.0.0.0:8089"` was accepted without a word
#[test]
fn a_non_loopback_admin_address_needs_a_token_file() {
    for address in ["0.0.0.0:9000", "[::]:9000", "10.1.2.3:9000"] {
        let error = parse(&GOOD.replace("127.0.0.1:9000", address)).expect_err(address);
        let message = error.to_string();
        assert!(message.contains("admin.address"), "{message}");
        assert!(
            message.contains("token_file = \"admin.token\""),
            "{message}"
        );
    }
    let with_token = GOOD.replace(
        "127.0.0.1:9000\"",
        "0.0.0.0:9000\"\ntoken_file = \"admin.token\"\nexport_root = \"audits\"",
    );
    let config = parse(&with_token).expect("a token file makes it valid");
    let admin = config.admin.expect("admin");
    assert!(!admin.is_loopback());
    assert_eq!(admin.export_root, Some(PathBuf::from("audits")));
    assert!(parse(&GOOD.replace("127.0.0.1:9000", "[::1]:9000")).is_ok());
}

#[test]
fn two_feeds_whose_paths_differ_only_by_dots_are_refused() {
    // issue 9 item 5, where no folder of the path exists: compared lexically
    let twice = format!(
        "{GOOD}[[feeds]]\nname = \"again\"\nsource = \"file\"\npath = \"x/./../input.txt\"\n"
    );
    let message = parse(&twice).expect_err("one file, two feeds").to_string();
    assert!(message.contains("feeds[1].path"), "{message}");
    assert!(
        message.contains("'lines'") && message.contains("'again'"),
        "{message}"
    );
    assert!(message.contains("/etc/mongoose/input.txt"), "{message}");
    let apart = twice.replace("x/./../input.txt", "x/../other.txt");
    parse(&apart).expect("two files");
}

#[test]
fn a_kill_switch_needs_a_policy_that_latches() {
    // issue 9 item 12
    let error = parse(&GOOD.replace(
        "policy = \"DROP_AFTER_SPIN\"",
        "policy = \"DROP_AFTER_SPIN\"\nkill_switch = true",
    ))
    .expect_err("a drop queue never latches");
    assert!(
        error
            .to_string()
            .contains("feeds[0].overload.subscribers.audit.kill_switch"),
        "{error}"
    );
    let block = GOOD.replace(
        "policy = \"DROP_AFTER_SPIN\"",
        "policy = \"BLOCK_WITH_DEADLINE\"\nblock_deadline_millis = 50\nkill_switch = true",
    );
    let config = parse(&block).expect("a BLOCK queue latches");
    assert!(
        config.feed_overrides(0).expect("overrides")[0]
            .1
            .kill_switch
    );
}

#[test]
fn names_are_1_to_64_of_a_z_digits_dot_underscore_dash_and_never_dot_or_dot_dot() {
    // issue 10 item 5: a group named `../../../tmp/x` recorded outside record.dir
    for good in ["a", "Az09._-", "...", ".hidden", &"n".repeat(MAX_NAME_LEN)] {
        assert_eq!(name_problem(good), None, "{good}");
    }
    for bad in [
        "",
        ".",
        "..",
        "../x",
        "a/b",
        "a\\b",
        "a b",
        "é",
        "a\0",
        &"n".repeat(MAX_NAME_LEN + 1),
    ] {
        assert!(name_problem(bad).is_some(), "{bad:?} is refused");
    }
    let error = parse(&GOOD.replace("name = \"ledger\"\nidle", "name = \"../x\"\nidle"))
        .expect_err("refused");
    assert!(error.to_string().contains("groups[0].name"), "{error}");
}

#[test]
fn ranges_name_the_key_and_the_accepted_values() {
    // issue 10 item 6
    for (text, key) in [
        (
            "shutdown_timeout_millis = 0\nshutdown_drain_timeout_millis = 0\n",
            "shutdown_timeout_millis",
        ),
        ("control_wait_millis = 3600001\n", "control_wait_millis"),
    ] {
        let error = parse(&format!(
            "{text}{}",
            GOOD.replace("control_wait_millis = 5000\n", "")
        ))
        .expect_err("out of range");
        assert!(
            matches!(&error, ServerError::Config { path, .. } if path == key),
            "{error}"
        );
        assert!(error.to_string().contains("3600000"), "{error}");
    }
    let error = parse(&GOOD.replace("sleeping-millis:1", "sleeping-millis:60001"))
        .expect_err("out of range");
    assert!(
        error.to_string().contains("groups[0].idle_strategy"),
        "{error}"
    );
    parse(&GOOD.replace("sleeping-millis:1", "sleeping-millis:60000")).expect("the maximum");
    let capacity = |capacity: usize| {
        parse(&GOOD.replace(
            "path = \"input.txt\"",
            &format!("path = \"input.txt\"\nqueue_capacity = {capacity}"),
        ))
    };
    capacity(MAX_QUEUE_CAPACITY).expect("the maximum");
    let error = capacity(MAX_QUEUE_CAPACITY + 1).expect_err("over the maximum");
    assert!(
        error.to_string().contains("feeds[0].queue_capacity"),
        "{error}"
    );
}

#[test]
fn the_cores_allowed_are_read_from_the_process_status() {
    let status = "Name:\tmongoose\nCpus_allowed:\tf\nCpus_allowed_list:\t0-2,5,7-8\n";
    assert_eq!(cpus_allowed_list(status), Some(vec![0, 1, 2, 5, 7, 8]));
    assert_eq!(cpus_allowed_list("Cpus_allowed_list:\t3\n"), Some(vec![3]));
    assert_eq!(cpus_allowed_list("Cpus_allowed_list:\t3-x\n"), None);
    assert_eq!(cpus_allowed_list("Name:\tx\n"), None);
    assert!(!available_cores().is_empty());
}

#[test]
fn a_value_cut_short_at_the_end_says_so_and_where() {
    // found by the config_loader fuzz target: the message was empty
    let error =
        parse("control_wait_millis = 1\nshutdown_timeout_millis = ").expect_err("cut short");
    let message = error.to_string();
    assert!(
        message.contains("missing or cut short") && message.contains("line 2, column 27"),
        "{message}"
    );
}

#[test]
fn a_bad_idle_strategy_and_a_bad_address_say_what_is_expected() {
    let error = parse(&GOOD.replace("sleeping-millis:1", "nap")).expect_err("bad idle");
    assert!(error.to_string().contains("sleeping-millis:N"), "{error}");
    let error = parse(&GOOD.replace("127.0.0.1:9000", "localhost")).expect_err("bad address");
    assert!(error.to_string().contains("admin.address"), "{error}");
}

#[test]
fn the_audit_section_takes_a_capture_dir_and_an_open_timeout_in_range() {
    let config = parse(&format!(
        "{GOOD}[audit]\ncapture_dir = \"caps\"\nopen_timeout_millis = 500\nstore = \"file\"\n"
    ))
    .expect("valid");
    assert_eq!(
        config.audit,
        AuditSection {
            enabled: true,
            capture_dir: PathBuf::from("caps"),
            open_timeout_millis: 500,
            store: CaptureStore::File,
        }
    );
    assert_eq!(parse(GOOD).expect("valid").audit, AuditSection::default());
    let error =
        parse(&format!("{GOOD}[audit]\nopen_timeout_millis = 0\n")).expect_err("out of range");
    assert!(
        matches!(&error, ServerError::Config { path, .. } if path == "audit.open_timeout_millis"),
        "{error}"
    );
    let error = parse(&format!("{GOOD}[audit]\ncapture_dir = \"\"\n")).expect_err("empty");
    assert!(error.to_string().contains("audit.capture_dir"), "{error}");
}

// issue 39 (the operator's first day): a feed without `source` was refused with
// "missing field `source` (line 1, column 1)" and no word of what to write
#[test]
fn a_feed_without_a_source_says_what_to_write() {
    let error = parse("[[feeds]]\nname = \"lines\"\npath = \"in.txt\"\n").expect_err("no source");
    let message = error.to_string();
    assert!(
        message.contains("feeds[0]") && message.contains("source = \"file\""),
        "{message}"
    );
}
