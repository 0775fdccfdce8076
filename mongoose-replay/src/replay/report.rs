//! What a replay returns: a [`Replay`] with one [`ProcessorReplay`] per replayed build,
//! its [`Loss`]es and its [`AdminReply`]s (also the type of a recorded admin reply).

use std::fmt;

use serde::{Deserialize, Serialize};

/// An item the recorded processor never got: the delivery engine dropped it for its
/// queue (a `Dropped` entry). A replay carries on past it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Loss {
    /// The stream it was recorded in.
    pub stream: String,
    /// The feed.
    pub feed: String,
    /// The dropped item's sequence number.
    pub sequence: u64,
}

/// The replay of one processor build.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct ProcessorReplay {
    /// The stream key (`name`, `name#2`, ...).
    pub key: String,
    /// The processor's name.
    pub name: String,
    /// The recorded processor type (empty when no provenance was recorded).
    pub recorded_type: String,
    /// Entries in the stream.
    pub entries: usize,
    /// Entries replayed before the end or the stop.
    pub replayed: usize,
    /// Why the replay stopped, or `None` when every entry was replayed.
    pub stopped: Option<String>,
    /// Items lost live (`Dropped` entries).
    pub losses: Vec<Loss>,
    /// What the replayed processor sent to its [`crate::OutputSink`]s (captured, not
    /// delivered).
    pub outputs: Vec<String>,
    /// What the replayed processor's admin commands answered, one per replayed
    /// `AdminInvoked` entry, in order (the Java original's `adminReplies()`).
    pub admin_replies: Vec<AdminReply>,
}

/// What one admin command answered: in a replay, or live (recorded beside the
/// recording in `admin.jsonl`, see [`crate::RecordedAdminReply`]).
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct AdminReply {
    /// The command.
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Its output, or the error it returned.
    pub result: Result<String, String>,
}

impl fmt::Display for AdminReply {
    /// `command arg1 arg2 -> output`, or `... -> error: reason`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.command)?;
        for arg in &self.args {
            write!(f, " {arg}")?;
        }
        match &self.result {
            Ok(output) => write!(f, " -> {output}"),
            Err(error) => write!(f, " -> error: {error}"),
        }
    }
}

/// The result of a replay: one [`ProcessorReplay`] per replayed build.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct Replay {
    pub(super) processors: Vec<ProcessorReplay>,
    pub(super) incomplete: Vec<String>,
    pub(super) unreadable: Option<String>,
    pub(super) unclaimed: Vec<String>,
}

impl Replay {
    /// True when every processor's replay is done: replayed to its end, or stopped (a
    /// stopped replay counts as done; check [`Replay::stopped`]). Not proof that the
    /// run was reproduced: compare [`Replay::outputs`].
    pub fn complete(&self) -> bool {
        self.processors
            .iter()
            .all(|p| p.stopped.is_some() || p.replayed == p.entries)
    }

    /// True when every processor's replay reached the end of its stream.
    pub fn all_replayed(&self) -> bool {
        self.processors.iter().all(|p| p.stopped.is_none())
    }

    /// Why the replay of stream `key` stopped, or `None` (also `None` for a key that
    /// was not replayed).
    pub fn stopped(&self, key: &str) -> Option<&str> {
        self.processor(key).and_then(|p| p.stopped.as_deref())
    }

    /// The outputs the replayed processor of stream `key` sent (empty when none).
    pub fn outputs(&self, key: &str) -> &[String] {
        self.processor(key).map_or(&[], |p| &p.outputs)
    }

    /// What the replayed processor of stream `key`'s admin commands answered, one per
    /// replayed `AdminInvoked` entry (empty when none).
    pub fn admin_replies(&self, key: &str) -> &[AdminReply] {
        self.processor(key).map_or(&[], |p| &p.admin_replies)
    }

    /// Items lost live, across every replayed stream.
    pub fn losses(&self) -> Vec<&Loss> {
        self.processors.iter().flat_map(|p| &p.losses).collect()
    }

    /// True when no replayed stream records a loss. Completeness checks read it beside
    /// [`Replay::complete`].
    pub fn lossless(&self) -> bool {
        self.processors.iter().all(|p| p.losses.is_empty())
    }

    /// The replay of stream `key`.
    pub fn processor(&self, key: &str) -> Option<&ProcessorReplay> {
        self.processors.iter().find(|p| p.key == key)
    }

    /// Every replayed build, in build order.
    pub fn processors(&self) -> &[ProcessorReplay] {
        &self.processors
    }

    /// Why the recording is incomplete (its replay covers the prefix that was read):
    /// the store's reasons ([`crate::Incomplete`]: no closing frame, a torn or damaged
    /// frame, ...), then its journal's, each prefixed `journal.replay: `.
    pub fn recording_incomplete(&self) -> &[String] {
        &self.incomplete
    }

    /// Why the store could not be read at all (then nothing was replayed), or `None`.
    pub fn recording_unreadable(&self) -> Option<&str> {
        self.unreadable.as_deref()
    }

    /// True when the store was read, ends with its closing frame and holds every frame
    /// it counts, and so does its journal (when it has one). A replay of a recording
    /// that is not complete covers only what could be read: it is partial.
    pub fn recording_complete(&self) -> bool {
        self.unreadable.is_none() && self.incomplete.is_empty()
    }

    /// Recorded streams that no replayed build claimed.
    pub fn unclaimed_streams(&self) -> &[String] {
        &self.unclaimed
    }
}
