//! Records per second through the outbox with fsync on: 100-byte state and one
//! 100-byte output per record. Median of 3 runs each, of:
//!
//! - the default group commit (a group at 1024 pending records or 2 ms);
//! - `group_records = 1` (a group as soon as one record is pending; groups still grow
//!   while the syncer is busy);
//! - one fdatasync per record: `group_records = 1` and the writer waits for each record
//!   to be durable before the next (what a caller that fsyncs each line pays);
//! - sync off: what the writer and the syncer's write(2)s reach without fdatasync.
//!
//! ```text
//! cargo run --release -p mongoose-outbox --example outbox_bench -- [--dir DIR] [--records N] [--single N]
//! ```
//!
//! `--dir` must be on the disk to measure (the default is a temporary folder in the
//! current directory; a tmpfs would make fdatasync free).

use std::path::{Path, PathBuf};
use std::time::Instant;

use mongoose_core::sink::OutputKey;
use mongoose_core::Epoch;
use mongoose_outbox::{Admission, AdmittedOutput, AdmittedPosition, Outbox, OutboxConfig};

fn main() {
    let mut dir: Option<PathBuf> = None;
    let mut records: u64 = 1_000_000;
    let mut single: u64 = 2_000;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().expect("a value after the flag");
        match arg.as_str() {
            "--dir" => dir = Some(PathBuf::from(value())),
            "--records" => records = value().parse().expect("--records N"),
            "--single" => single = value().parse().expect("--single N"),
            other => panic!("unknown argument {other}: see the example's doc comment"),
        }
    }
    let parent = dir.unwrap_or_else(|| PathBuf::from("."));
    std::fs::create_dir_all(&parent).expect("the bench folder");

    let runs: [(&str, usize, u64, bool, bool); 4] = [
        (
            "default group commit (1024 records / 2 ms)",
            1024,
            records,
            false,
            true,
        ),
        ("group_records 1", 1, records, false, true),
        (
            "fdatasync per record (group_records 1, each waited for)",
            1,
            single,
            true,
            true,
        ),
        (
            "sync off (no fdatasync: the ceiling)",
            1024,
            records,
            false,
            false,
        ),
    ];
    for (label, group_records, count, wait_each, sync) in runs {
        let mut rates: Vec<f64> = (0..3)
            .map(|_| run(&parent, group_records, count, wait_each, sync))
            .collect();
        rates.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!(
            "{label}: median {:.0} records/s ({count} records; runs {:.0} / {:.0} / {:.0})",
            rates[1], rates[0], rates[1], rates[2]
        );
    }
}

/// Admits `count` records into a fresh outbox and waits until they are durable (each
/// one, with `wait_each`): records per second.
fn run(parent: &Path, group_records: usize, count: u64, wait_each: bool, sync: bool) -> f64 {
    let dir = tempfile::tempdir_in(parent).expect("a temporary folder");
    let mut config = OutboxConfig::new(dir.path());
    config.group_records = group_records;
    config.sync = sync;
    let (mut outbox, _) = Outbox::open(config).expect("the outbox opens");
    let mut admission = Admission {
        state: vec![7u8; 100],
        positions: vec![AdmittedPosition {
            feed: "lines".into(),
            epoch: Epoch(1),
            lane: 0,
            position: 0,
        }],
        outputs: vec![AdmittedOutput {
            sink: "out".into(),
            key: OutputKey::new("lines", Epoch(1), 0, 0, 0, 1),
            payload: vec![b'x'; 100],
        }],
    };
    let started = Instant::now();
    for number in 1..=count {
        admission.state[..8].copy_from_slice(&number.to_le_bytes());
        admission.positions[0].position = number;
        admission.outputs[0].key.position = number;
        outbox.admit(&admission).expect("admitted");
        if wait_each {
            outbox.sync().expect("durable");
        }
    }
    let durable = outbox.sync().expect("durable");
    let elapsed = started.elapsed();
    assert_eq!(durable, count);
    outbox.close().expect("closed");
    count as f64 / elapsed.as_secs_f64()
}
