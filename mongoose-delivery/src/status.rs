//! Feed status (book: guarantees/status.md): one report per feed and a top level, serialized with exactly the
//! field names of the book (book: reference/status-fields.md).

use mongoose_core::FileLag;
use serde::{Deserialize, Serialize};

use crate::queue::OverloadState;

/// One subscriber queue of a feed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubscriberStatus {
    /// The queue's name: `group/feed`.
    pub queue: String,
    /// Items (and in-band statuses) the publisher put in the queue.
    pub position: u64,
    /// Items the reader finished (dispatch and completion callbacks).
    pub dispatched: u64,
    /// `dispatched == position`.
    pub drained: bool,
    /// The queue's overload health.
    #[serde(skip, default)]
    pub overload: OverloadState,
}

/// The delivery status of one feed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FeedStatus {
    /// The feed.
    pub feed: String,
    /// The source's state: STARTING, BEHIND, CAUGHT_UP or END_OF_STREAM.
    pub state: String,
    /// True for a source that ends (a once read).
    pub bounded: bool,
    /// The last sequence published.
    pub sequence: u64,
    /// Bumped at each state report.
    pub version: u64,
    /// Why the source is where it is (e.g. why it is behind), or null.
    pub detail: Option<String>,
    /// Every subscriber queue dispatched everything put in it, nothing cached or
    /// waiting.
    pub drained: bool,
    /// The feed is complete: caught up or ended, drained, not paused, not stalled,
    /// and (for a positioned feed) everything acknowledged to the source and committed
    /// by it (`committed == acknowledged`).
    pub settled: bool,
    /// `dropped == 0 && refused == 0 && completionFailures == 0 && earlierLosses == 0
    /// && rotatedUnreadBytes == 0 && rotatedUnreadFiles == 0`.
    pub lossless: bool,
    /// The feed's effective default policy.
    pub policy: String,
    /// Queue copies dropped (including backlogs released by an operator).
    pub dropped: u64,
    /// BLOCK_WITH_DEADLINE publishes refused.
    pub refused: u64,
    /// Publishes that could neither wait nor pause (any loss is in `dropped`).
    pub downgraded: u64,
    /// Paused now.
    pub paused: bool,
    /// Pause episodes.
    pub pauses: u64,
    /// The highest sequence handed to the source's committer (0 without positions).
    pub acknowledged: u64,
    /// The highest sequence whose commit succeeded (the source made it durable). Below
    /// `acknowledged` while a commit failed and is being retried; equal to it for a feed
    /// without a committer (nothing to commit).
    pub committed: u64,
    /// Runs of positioned items awaiting acknowledgement (the window).
    pub pending_acks: u64,
    /// The subscriber queues.
    pub subscribers: Vec<SubscriberStatus>,
    /// Subscriber queues that can consume now (not fenced, not dead).
    pub consumers: u64,
    /// For a positioned feed, why it holds its position and cannot complete; null
    /// otherwise.
    pub stalled: Option<String>,
    /// Bytes after the last terminator a bounded read ended without publishing.
    pub unterminated: u64,
    /// Delivery-complete callbacks skipped after their retries (their items are held,
    /// never committed, in this run).
    pub completion_failures: u64,
    /// Losses of earlier runs reported at this start (records kept beside the feed's
    /// pointer by a run that ended not lossless or had a position released): this run
    /// reports them once, as not lossless, then they are marked reported.
    #[serde(default)]
    pub earlier_losses: u64,
    /// Bytes of rotated inputs proven unread (a rotated file compressed or deleted
    /// before the source read it to its end). Non-zero makes the feed not lossless.
    #[serde(default)]
    pub rotated_unread_bytes: u64,
    /// Rotated inputs that held, or may have held, unread bytes the source could not
    /// read (their byte count is in `rotatedUnreadBytes` when known, else unknown).
    /// Non-zero makes the feed not lossless.
    #[serde(default)]
    pub rotated_unread_files: u64,
    /// Losses the source reported: input it knows it will never deliver (a gap an
    /// archive recorded: stream bytes the publication no longer had). Non-zero makes the
    /// feed not lossless.
    #[serde(default)]
    pub losses: u64,
    /// The bytes of those losses, where the source knows them.
    #[serde(default)]
    pub lost_bytes: u64,
    /// The input files of a many-file (glob) feed: lane, path, committed offset, size
    /// and lag, as of the source's last scan. Empty for other feeds (and then not
    /// serialized).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<FileLag>,
}

/// The status of every feed, with the settled and lossless verdicts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusReport {
    /// Every feed is settled.
    pub settled: bool,
    /// Every feed is lossless.
    pub lossless: bool,
    /// Feeds whose source never reported a state: their settled verdict rests on
    /// `drained` alone.
    pub fallback_feeds: Vec<String>,
    /// One entry per feed.
    pub feeds: Vec<FeedStatus>,
}

impl StatusReport {
    /// Builds the top level from per-feed statuses.
    pub fn from_feeds(feeds: Vec<FeedStatus>) -> Self {
        let settled = feeds.iter().all(|feed| feed.settled);
        let lossless = feeds.iter().all(|feed| feed.lossless);
        let fallback_feeds = feeds
            .iter()
            .filter(|feed| feed.state == "STARTING")
            .map(|feed| feed.feed.clone())
            .collect();
        StatusReport {
            settled,
            lossless,
            fallback_feeds,
            feeds,
        }
    }

    /// The status of one feed.
    pub fn feed(&self, name: &str) -> Option<&FeedStatus> {
        self.feeds.iter().find(|feed| feed.feed == name)
    }
}
