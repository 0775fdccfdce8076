//! Shared fixtures of the replay tests (issue 12 item 7, "replay store"): the setups the
//! test files repeat. A group that records into a directory ([`recording_group`]), its
//! close ([`close_groups`]), a store written by hand ([`write_stream`]), a recording
//! read back ([`read_recording`]), and waiting for a condition with a generous deadline
//! ([`wait_until`], [`assert_eventually`]), never a fixed sleep.
//!
//! Each test file is its own crate and uses a part of this module.
#![allow(dead_code)]

use std::path::Path;
use std::time::{Duration, Instant};

use mongoose_control::{ControlPlane, GroupOptions, IdleStrategy};
use mongoose_replay::{
    Entry, FeedCodecs, RecordConfig, Recorder, Recording, RecordingHandle, ReplayStore,
    RECORDING_FILE,
};

/// How long a test waits for a condition before it gives up.
pub(crate) const WAIT: Duration = Duration::from_secs(30);

/// Waits up to [`WAIT`] for `condition`; true when it held.
pub(crate) fn wait_until(mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        if condition() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    condition()
}

/// Waits up to [`WAIT`] for `condition`; panics "timed out" when it does not hold.
pub(crate) fn assert_eventually(condition: impl FnMut() -> bool) {
    assert!(wait_until(condition), "timed out");
}

/// Creates the group `group` on `plane` (idle: sleeping 1 ms) with a [`Recorder`] that
/// records `processors` into `dir`, copying the items of `codecs`' feeds; returns the
/// recording's handle.
pub(crate) fn recording_group(
    plane: &ControlPlane,
    dir: &Path,
    group: &str,
    processors: &[&str],
    codecs: FeedCodecs,
) -> RecordingHandle {
    let options = GroupOptions {
        idle: IdleStrategy::SleepingMillis(1),
        ..GroupOptions::default()
    };
    recording_group_with(plane, dir, group, processors, codecs, options)
}

/// [`recording_group`] with the group's other `options` (its recorder is set here).
pub(crate) fn recording_group_with(
    plane: &ControlPlane,
    dir: &Path,
    group: &str,
    processors: &[&str],
    codecs: FeedCodecs,
    options: GroupOptions,
) -> RecordingHandle {
    let recorder = Recorder::create(dir, RecordConfig::new(processors.iter().copied(), codecs))
        .expect("recorder");
    let handle = recorder.handle();
    plane
        .create_group(
            group,
            GroupOptions {
                recorder: Some(Box::new(recorder)),
                ..options
            },
        )
        .expect("group");
    handle
}

/// Closes every group of `plane` within [`WAIT`] (their recorders close their
/// recordings) and checks that none was left open.
pub(crate) fn close_groups(plane: &ControlPlane) {
    assert!(plane.close_groups(Instant::now() + WAIT).is_empty());
}

/// Writes `entries` as the stream `key` (no provenance) of a new store in `dir`, made
/// durable but not closed: the recording reads as incomplete ("no closing frame").
pub(crate) fn write_stream(dir: &Path, key: &str, entries: &[Entry]) {
    let mut store = ReplayStore::open_for_record(dir.join(RECORDING_FILE)).expect("store");
    let stream = store.begin(key, None).expect("stream");
    for entry in entries {
        store.append(stream, entry).expect("appended");
    }
    store.sync().expect("synced");
}

/// The recording of the directory `dir`, read back.
pub(crate) fn read_recording(dir: &Path) -> Recording {
    Recording::read(dir.join(RECORDING_FILE)).expect("readable")
}
