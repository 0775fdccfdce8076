//! Helpers of the archive tests: child processes (the test binary run again with a
//! role), numbered messages, reading a recording to the end.

#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use mongoose_archive::{RecordingReader, ReplayEvent};

/// The length of a test message.
pub const MESSAGE_LEN: usize = 100;
/// The stream position a test message takes.
pub const FRAME_LEN: u64 = 4 + MESSAGE_LEN as u64;

/// A numbered 100-byte message.
pub fn message(index: u64) -> [u8; MESSAGE_LEN] {
    let mut bytes = [0u8; MESSAGE_LEN];
    bytes[..8].copy_from_slice(&index.to_le_bytes());
    for (offset, byte) in bytes[8..].iter_mut().enumerate() {
        *byte = (index as u8).wrapping_add(offset as u8);
    }
    bytes
}

/// The number of a test message (checking its filler).
pub fn index_of(payload: &[u8]) -> u64 {
    assert_eq!(payload.len(), MESSAGE_LEN, "a test message");
    let index = u64::from_le_bytes(payload[..8].try_into().expect("8 bytes"));
    assert_eq!(payload, message(index), "the bytes of message {index}");
    index
}

/// A child process killed (SIGKILL) and reaped when dropped, so a failing test leaves
/// no process behind.
#[derive(Debug)]
pub struct ChildGuard(pub Child);

impl std::ops::Deref for ChildGuard {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for ChildGuard {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Runs this test binary again as the child `role` (an ignored test) with `envs`.
pub fn spawn_child(role: &str, envs: &[(&str, String)]) -> ChildGuard {
    let mut command = Command::new(std::env::current_exe().expect("the test binary"));
    command
        .args([
            "--exact",
            role,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (key, value) in envs {
        command.env(key, value);
    }
    ChildGuard(command.spawn().expect("spawn a child"))
}

/// The lines a child prints, read by a thread (so a test waits for them with a
/// deadline instead of blocking on a child that hangs).
#[derive(Debug)]
pub struct ChildLines(Receiver<String>);

/// Starts reading the child's stdout.
pub fn lines(child: &mut ChildGuard) -> ChildLines {
    let stdout = child.stdout.take().expect("a piped stdout");
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    ChildLines(receiver)
}

/// Waits (up to two minutes) for a line of the child's that contains `prefix`;
/// returns the rest of it.
pub fn wait_for_line(lines: &mut ChildLines, prefix: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut output = String::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = match lines.0.recv_timeout(left) {
            Ok(line) => line,
            Err(RecvTimeoutError::Timeout) => {
                panic!("timed out waiting for the child to print {prefix:?}: {output}")
            }
            Err(RecvTimeoutError::Disconnected) => {
                panic!("the child ended before printing {prefix:?}: {output}")
            }
        };
        output.push_str(&line);
        output.push('\n');
        // libtest prints "test NAME ... " before the child's first line
        if let Some(at) = line.find(prefix) {
            return line[at + prefix.len()..].trim().to_string();
        }
    }
}

/// Waits for `condition` up to `deadline`, panicking with `what` after it.
pub fn wait_until(what: &str, deadline: Duration, mut condition: impl FnMut() -> bool) {
    let start = Instant::now();
    while !condition() {
        assert!(start.elapsed() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits for a child to end successfully.
pub fn wait_success(child: &mut Child, what: &str) {
    let status = child.wait().expect("wait for the child");
    assert!(status.success(), "{what} failed: {status}");
}

/// What a reader saw.
#[derive(Debug, Default)]
pub struct Seen {
    /// Message numbers, in the order read.
    pub indexes: Vec<u64>,
    /// The position after each message.
    pub positions: Vec<u64>,
    /// Gaps reported.
    pub gaps: Vec<(u64, u64)>,
    /// Polls that found nothing new while the recording was not ended (live waits).
    pub empty_polls: u64,
}

/// Polls `reader` until `done(seen)` or the recording ended, up to `deadline`.
pub fn read_until(
    reader: &mut RecordingReader,
    deadline: Duration,
    mut done: impl FnMut(&Seen) -> bool,
) -> Seen {
    let mut seen = Seen::default();
    let start = Instant::now();
    while !done(&seen) && !reader.is_ended() {
        assert!(
            start.elapsed() < deadline,
            "timed out reading: {} messages, {} gaps, at {}",
            seen.indexes.len(),
            seen.gaps.len(),
            reader.position()
        );
        let events = reader
            .poll(1024, |event| match event {
                ReplayEvent::Message { position, payload } => {
                    seen.indexes.push(index_of(payload));
                    seen.positions.push(position);
                }
                ReplayEvent::Gap { from, to } => seen.gaps.push((from, to)),
            })
            .expect("poll the recording");
        if events == 0 && !reader.is_ended() {
            seen.empty_polls += 1;
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    seen
}

/// Asserts `indexes` is exactly `0..count`.
pub fn assert_each_once_in_order(indexes: &[u64], count: u64) {
    for (expected, &index) in indexes.iter().enumerate() {
        assert_eq!(
            index, expected as u64,
            "message {expected} expected, {index} read (a gap or a duplicate)"
        );
    }
    assert_eq!(indexes.len() as u64, count, "every message read once");
}

/// A file the child archiver watches: its existence asks for a clean stop.
pub fn stop_file(dir: &Path) -> std::path::PathBuf {
    dir.join("stop-archiver")
}
