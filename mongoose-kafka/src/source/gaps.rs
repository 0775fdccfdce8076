//! Records removed before they were read: a partition's log start (retention,
//! `DeleteRecords`) passed the offset the source had to read next, so the consumer
//! resumed further on (`auto.offset.reset`) and the records in between are gone.
//!
//! Each record's offset is compared with the one expected next: the group's committed
//! offset for the first record of an assignment, the previous record's offset + 1 after
//! it. Offsets skip for other reasons that lose nothing (a transaction's commit marker,
//! an aborted transaction, compaction), so a skip is a loss only when the partition's
//! log start is past the offset expected: librdkafka's cached low watermark (from the
//! fetch response that brought the record: no round trip), or, when it has none, one
//! `ListOffsets` round trip. A skip happens once per transaction or per reset, never per
//! record; the per-record cost is one comparison.

use std::ffi::CString;
use std::time::Duration;

use rdkafka::bindings::{rd_kafka_get_watermark_offsets, rd_kafka_resp_err_t};
use rdkafka::consumer::{BaseConsumer, Consumer};
use tracing::{debug, warn};

use super::partitions::Assigned;
use super::SourceContext;

/// What the source knows of its topic's log starts.
#[derive(Debug)]
pub(super) struct LogStarts {
    /// The topic as a C string, made once (the cached-watermark call needs one).
    topic: CString,
    /// True when a group without a usable offset starts at the end (`latest`): a reset
    /// then skips records that exist, which is a loss too.
    reset_to_latest: bool,
}

/// A skip of offsets that lost records: `expected` was the next offset to read,
/// `log_start` the partition's first offset when the skip was seen, `resumed` the
/// offset read instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Gap {
    pub(super) partition: i32,
    pub(super) expected: i64,
    /// The offset after the last one never read: the log start, or, after a reset to
    /// `latest`, where the reset resumed (the records it skipped are lost too).
    pub(super) end: i64,
    pub(super) log_start: i64,
    pub(super) resumed: i64,
}

impl LogStarts {
    pub(super) fn new(topic: &str, start_from: &str) -> Self {
        LogStarts {
            // a topic name never holds a NUL (the broker refuses one): an empty name
            // only disables the cached read (the round trip answers instead)
            topic: CString::new(topic).unwrap_or_default(),
            reset_to_latest: start_from.eq_ignore_ascii_case("latest")
                || start_from.eq_ignore_ascii_case("end")
                || start_from.eq_ignore_ascii_case("largest"),
        }
    }

    /// The log start librdkafka last saw for `partition` in a fetch response, without a
    /// round trip; `None` when it has none.
    fn cached(&self, consumer: &BaseConsumer<SourceContext>, partition: i32) -> Option<i64> {
        if self.topic.as_bytes().is_empty() {
            return None;
        }
        let mut low = -1i64;
        let mut high = -1i64;
        // SAFETY: the client pointer is the live consumer's (borrowed for the call); the
        // topic is a NUL-terminated string that outlives the call; `low` and `high` are
        // valid for writes. The call only reads librdkafka's cached partition state.
        let error = unsafe {
            rd_kafka_get_watermark_offsets(
                consumer.client().native_ptr(),
                self.topic.as_ptr(),
                partition,
                &mut low,
                &mut high,
            )
        };
        (error == rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR && low >= 0).then_some(low)
    }

    /// Whether the skip from `expected` to `resumed` in `partition` lost records: the
    /// gap when the log start is past `expected`, `None` when the skip is a transaction
    /// marker, an aborted transaction or compaction (or the log start cannot be read:
    /// logged, nothing reported).
    pub(super) fn check(
        &self,
        consumer: &BaseConsumer<SourceContext>,
        (name, topic): (&str, &str),
        partition: i32,
        (expected, resumed): (i64, i64),
        timeout: Duration,
    ) -> Option<Gap> {
        let cached = self.cached(consumer, partition);
        let log_start = match cached {
            Some(low) if low > expected => low,
            Some(_) => return None,
            None => match consumer.fetch_watermarks(topic, partition, timeout) {
                Ok((low, _)) => low,
                Err(error) => {
                    warn!(feed = %name, partition, expected, resumed, %error,
                        "offsets skipped and the partition's log start cannot be read: not known whether records were removed before they were read");
                    return None;
                }
            },
        };
        if log_start <= expected {
            debug!(feed = %name, partition, expected, resumed, log_start,
                "offsets skipped below the log start's reach (a transaction marker, an aborted transaction, compaction): no loss");
            return None;
        }
        // removed below the log start; after a reset to `latest`, also what it skipped
        let removed_end = log_start.min(resumed);
        let end = if self.reset_to_latest {
            resumed.max(removed_end)
        } else {
            removed_end
        };
        Some(Gap {
            partition,
            expected,
            end,
            log_start,
            resumed,
        })
    }
}

/// What a record read at `offset` says of its partition (called with the partitions
/// locked, once per record: comparisons only). Returns the offset expected instead when
/// the record is past it (a skip to check), `None` otherwise; the first record of an
/// assignment is checked against the group's committed offset once that is known
/// ([`first_unchecked`]).
pub(super) fn follow(assigned: &mut Assigned, offset: i64) -> Option<i64> {
    assigned.at_end = false;
    let expected = match assigned.next {
        Some(next) => Some(next),
        // the first record of the assignment: the group's committed offset is the one
        // expected when already read (else the epoch decision checks it)
        None if assigned.epoch.is_some() => assigned.committed_at,
        None => None,
    };
    assigned.first_read.get_or_insert(offset);
    assigned.next = Some(offset + 1);
    expected.filter(|expected| offset > *expected)
}

/// The first offset read in this assignment when it is past the group's `committed`
/// offset, decided after the record was read: the skip to check.
pub(super) fn first_unchecked(assigned: &Assigned, committed: Option<i64>) -> Option<(i64, i64)> {
    let first = assigned.first_read?;
    let committed = committed?;
    (first > committed).then_some((committed, first))
}

impl Gap {
    /// How many records were never read.
    pub(super) fn lost(&self) -> u64 {
        (self.end - self.expected).max(0) as u64
    }

    /// What the feed's loss report says: the topic, the partition, the offsets and the
    /// count.
    pub(super) fn describe(&self, topic: &str) -> String {
        format!(
            "kafka {topic} partition {}: {} records never read (offsets {} to {}): the log start moved to {} (retention or DeleteRecords) before they were read; the consumer resumed at {}",
            self.partition,
            self.lost(),
            self.expected,
            self.end - 1,
            self.log_start,
            self.resumed
        )
    }
}

#[cfg(test)]
mod tests {
    use mongoose_core::Epoch;

    use super::*;

    // the per-record check: the first record of an assignment against the committed
    // offset (once known), then each against the previous one + 1
    #[test]
    fn a_skip_is_seen_against_the_committed_offset_then_the_previous_record() {
        let mut assigned = Assigned::new(1);
        // read before the committed offset is known: checked by the epoch decision
        assert_eq!(follow(&mut assigned, 1_600), None);
        assert_eq!(
            first_unchecked(&assigned, Some(1_000)),
            Some((1_000, 1_600))
        );
        assert_eq!(first_unchecked(&assigned, Some(1_600)), None);
        assert_eq!(
            first_unchecked(&assigned, None),
            None,
            "no committed offset: no loss"
        );
        assert_eq!(follow(&mut assigned, 1_601), None);
        assert_eq!(follow(&mut assigned, 1_603), Some(1_602), "a skip to check");
        // the committed offset known before the first record
        let mut assigned = Assigned::new(2);
        assigned.epoch = Some(Epoch(7));
        assigned.committed_at = Some(100);
        assigned.at_end = true;
        assert_eq!(follow(&mut assigned, 101), Some(100));
        assert!(!assigned.at_end, "a record read: not at the end any more");
        assert_eq!(follow(&mut assigned, 102), None);
    }

    #[test]
    fn a_gap_counts_what_was_removed_and_what_a_reset_to_latest_skipped() {
        let gap = Gap {
            partition: 0,
            expected: 1_000,
            end: 1_600,
            log_start: 1_600,
            resumed: 1_600,
        };
        assert_eq!(gap.lost(), 600);
        assert!(gap
            .describe("t")
            .contains("kafka t partition 0: 600 records never read (offsets 1000 to 1599)"));
    }
}
