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
//!
//! A partition emptied past the committed offset (`DeleteRecords` up to its end,
//! retention of every record) gives no record to compare: its end event (librdkafka's
//! partition EOF, once per end reached) compares the log end with the offset expected
//! the same way, asking for the committed offset once when nothing was read yet.
//!
//! A reset heard with no record after it (the topic deleted right after librdkafka
//! reset its position, before a record of it was read: chaos kafka seed 1796658157036)
//! gives neither: librdkafka's WARN "T [P]: offset reset (at offset N ...)" comes
//! through the same queue as the records ([`ResetNotice`]), and the source asks the
//! partition's log start at once (one `ListOffsets` round trip per reset). A log start
//! past N is the gap; an answer that cannot be had (the topic already gone) is a loss of
//! an unknown count, reported as such. A gap is reported once, whichever way it is seen
//! first.
//!
//! A gap counts from the furthest offset every consumer of the feed is known to hold
//! ([`held_by_every_consumer`]), not from the committed offset alone: a commit lags
//! what the consumers saved (a ledger's state is synced before the acknowledgement that
//! moves the commit), so a run killed in between leaves a committed offset behind a
//! saved state. Records removed between the two were applied and saved, not lost. One
//! consumer that keeps no position, or holds the partition in another epoch, keeps the
//! committed offset as the start of the gap.

use std::collections::HashSet;
use std::ffi::CString;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

use mongoose_core::{ConsumerPosition, Epoch, Held};
use rdkafka::bindings::{rd_kafka_get_watermark_offsets, rd_kafka_resp_err_t};
use rdkafka::consumer::{BaseConsumer, Consumer};
use tracing::{debug, warn};

use super::partitions::Assigned;
use super::{KafkaSource, SourceContext};

/// What the source knows of its topic's log starts.
#[derive(Debug)]
pub(super) struct LogStarts {
    /// The topic as a C string, made once (the cached-watermark call needs one).
    topic: CString,
    /// True when a group without a usable offset starts at the end (`latest`): a reset
    /// then skips records that exist, which is a loss too.
    reset_to_latest: bool,
    /// librdkafka's resets heard and not checked yet.
    resets: ResetNotice,
    /// The gaps reported, by partition and offset expected: each once.
    reported: Mutex<HashSet<(i32, i64)>>,
}

/// librdkafka's notice that it reset a partition's position because the offset to read
/// was out of range, heard by the consumer's log callback (inside `poll`, on the
/// source's thread, in order with the records).
#[derive(Debug)]
pub(super) struct ResetNotice {
    /// `"<topic> ["`: the start of librdkafka's line after its thread.
    prefix: String,
    heard: AtomicBool,
    /// The partitions reset, each with the offset it was at.
    resets: Mutex<Vec<(i32, i64)>>,
}

/// What follows the partition in librdkafka's line.
const RESET_AT: &str = "]: offset reset (at offset ";

impl ResetNotice {
    fn new(topic: &str) -> Self {
        ResetNotice {
            prefix: format!("{topic} ["),
            heard: AtomicBool::new(false),
            resets: Mutex::new(Vec::new()),
        }
    }

    /// Whether the log line is librdkafka's reset of one of the topic's partitions from
    /// an offset (then it is kept until [`LogStarts::take_resets`]). A reset from a
    /// logical offset (`BEGINNING`: a retried query) is not one.
    fn hear(&self, facility: &str, message: &str) -> bool {
        if facility != "OFFSET" {
            return false;
        }
        // "[thrd:main]: <topic> [<partition>]: offset reset (at offset <N> (leader ..."
        let Some(line) = message.strip_prefix(self.prefix.as_str()).or_else(|| {
            let at = message.find(&format!(": {}", self.prefix))?;
            Some(&message[at + 2 + self.prefix.len()..])
        }) else {
            return false;
        };
        let Some((partition, rest)) = line.split_once(RESET_AT) else {
            return false;
        };
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (Ok(partition), Ok(offset)) = (partition.parse::<i32>(), rest[..digits].parse::<i64>())
        else {
            return false;
        };
        self.resets.lock().push((partition, offset));
        self.heard.store(true, Ordering::SeqCst);
        true
    }
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
            resets: ResetNotice::new(topic),
            reported: Mutex::new(HashSet::new()),
        }
    }

    /// Hears librdkafka's log line: true when it was a reset of the topic's partition
    /// (kept for [`LogStarts::take_resets`]; the line is logged all the same).
    pub(super) fn hear_reset(&self, facility: &str, message: &str) -> bool {
        self.resets.hear(facility, message)
    }

    /// The resets heard since the last call (one relaxed load when there are none).
    pub(super) fn take_resets(&self) -> Vec<(i32, i64)> {
        if !self.resets.heard.load(Ordering::Relaxed) {
            return Vec::new();
        }
        self.resets.heard.store(false, Ordering::SeqCst);
        std::mem::take(&mut *self.resets.resets.lock())
    }

    /// True the first time a gap of `partition` from `expected` is reported (a gap seen
    /// both at a reset and at the record after it is one loss).
    pub(super) fn first_report(&self, partition: i32, expected: i64) -> bool {
        self.reported.lock().insert((partition, expected))
    }

    /// A new incarnation of the topic: its offsets are new ones.
    pub(super) fn forget_reported(&self) {
        self.reported.lock().clear();
    }

    /// The gap of a reset of `partition` from `expected` (heard in librdkafka's log):
    /// asks the partition's log start (one round trip). `Ok(None)`: no loss (the log
    /// start is not past `expected`: the offset was past the log's end).
    pub(super) fn check_reset(
        &self,
        consumer: &BaseConsumer<SourceContext>,
        topic: &str,
        (partition, expected): (i32, i64),
        timeout: Duration,
    ) -> rdkafka::error::KafkaResult<Option<Gap>> {
        let (low, high) = consumer.fetch_watermarks(topic, partition, timeout)?;
        if low <= expected {
            return Ok(None);
        }
        let end = if self.reset_to_latest {
            high.max(low)
        } else {
            low
        };
        Ok(Some(Gap {
            partition,
            expected,
            end,
            log_start: low,
            resumed: end,
        }))
    }

    /// The log start librdkafka last saw for `partition` in a fetch response, without a
    /// round trip; `None` when it has none.
    fn cached(&self, consumer: &BaseConsumer<SourceContext>, partition: i32) -> Option<i64> {
        self.cached_watermarks(consumer, partition)
            .map(|(low, _)| low)
    }

    /// The log end (high watermark) librdkafka last saw for `partition`, without a round
    /// trip: where the consumer is at the partition's end event.
    pub(super) fn cached_end(
        &self,
        consumer: &BaseConsumer<SourceContext>,
        partition: i32,
    ) -> Option<i64> {
        self.cached_watermarks(consumer, partition)
            .and_then(|(_, high)| (high >= 0).then_some(high))
    }

    fn cached_watermarks(
        &self,
        consumer: &BaseConsumer<SourceContext>,
        partition: i32,
    ) -> Option<(i64, i64)> {
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
        (error == rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR && low >= 0)
            .then_some((low, high))
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
        None if assigned.epoch.is_some() => assigned.committed_at.or(assigned.expected_from_start),
        None => None,
    };
    if assigned.next.is_none() {
        // the first record of the assignment (a partition's end seen before it sets
        // `next`, having checked the skip to it already)
        assigned.first_read = Some(offset);
    }
    assigned.next = Some(offset + 1);
    expected.filter(|expected| offset > *expected)
}

/// What the end of a partition (librdkafka's partition EOF, once per end reached) has
/// to check: the consumer is at the log end, and the offsets from the one expected up
/// to it were skipped when it is past it (a partition emptied by `DeleteRecords` or
/// retention gives no record to compare).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum AtEnd {
    /// The offset expected next is known.
    Expected(i64),
    /// Nothing read in this assignment and its committed offset not known yet: one
    /// round trip asks for it (once per assignment).
    Committed,
    /// Nothing to compare (no committed offset: nothing to lose).
    Nothing,
}

/// The partition reached its end (called with the partitions locked): it is read to the
/// end, and what to compare the log end with.
pub(super) fn reached_end(assigned: &mut Assigned) -> AtEnd {
    assigned.at_end = true;
    match (assigned.next, assigned.epoch) {
        (Some(next), _) => AtEnd::Expected(next),
        (None, Some(_)) => assigned
            .committed_at
            .or(assigned.expected_from_start)
            .map_or(AtEnd::Nothing, AtEnd::Expected),
        (None, None) => AtEnd::Committed,
    }
}

impl KafkaSource {
    /// The offset up to which every consumer of the feed holds `partition` in the epoch
    /// it is read under ([`held_by_every_consumer`]). The epoch is the one decided
    /// for this assignment, or, before its first record, the owner's epoch when nobody
    /// else committed the partition since (one committed-offset round trip; only when a
    /// gap was found).
    pub(super) fn consumers_hold(
        &self,
        consumer: &BaseConsumer<SourceContext>,
        partition: i32,
    ) -> Option<i64> {
        let shared = &self.shared;
        let decided = shared
            .partitions
            .lock()
            .assigned
            .get(&partition)
            .and_then(|assigned| assigned.epoch);
        let epoch = match decided {
            Some(epoch) => epoch,
            None => {
                let slot = shared.epochs.as_ref()?.read(partition)?;
                let committed = crate::admin::committed_offset_of(
                    consumer,
                    &shared.topic,
                    partition,
                    shared.request_timeout,
                )
                .ok()?;
                match crate::epoch::decide(Some(slot), committed, None) {
                    crate::epoch::EpochDecision::Keep(epoch) => epoch,
                    crate::epoch::EpochDecision::Mint(_) => return None,
                }
            }
        };
        held_by_every_consumer(&self.output.consumer_positions(), partition, epoch)
    }

    /// `partition` (of `assignment`) reached its end: the offsets skipped up to the log
    /// end are checked like a record's (a partition emptied past the committed offset is
    /// a loss with no record after it). Not per record: once per end reached.
    pub(super) fn check_end(
        &self,
        consumer: &BaseConsumer<SourceContext>,
        partition: i32,
        (assignment, at_end): (u64, AtEnd),
    ) {
        let shared = &self.shared;
        let Some(end) = shared.log_starts.cached_end(consumer, partition) else {
            return;
        };
        let expected = match at_end {
            AtEnd::Nothing => None,
            AtEnd::Expected(expected) => Some(expected),
            AtEnd::Committed => {
                match crate::admin::committed_offset_of(
                    consumer,
                    &shared.topic,
                    partition,
                    shared.request_timeout,
                ) {
                    Ok(committed) => committed.or_else(|| expected_from_start(shared, consumer)),
                    Err(error) => {
                        // asked again at the partition's next end; its first record is
                        // checked against the committed offset anyway
                        debug!(feed = %shared.name, partition, %error,
                            "the committed offset could not be read at the partition's end");
                        return;
                    }
                }
            }
        };
        if let Some(expected) = expected.filter(|expected| end > *expected) {
            self.check_gap(consumer, partition, expected, end);
        }
        // the consumer is at `end`: a record read next is compared with it (and the skip
        // up to it is not reported twice)
        let mut partitions = shared.partitions.lock();
        if let Some(assigned) = partitions
            .assigned
            .get_mut(&partition)
            .filter(|assigned| assigned.assignment == assignment)
        {
            if assigned.next.is_none_or(|next| next < end) {
                assigned.next = Some(end);
            }
        }
    }
}

/// Where a partition the group has committed nothing of was to be read from: its start
/// (offset 0) when the group has committed another partition of the topic (it reads
/// the topic, and each partition from its start: records written to this one while
/// the group was stopped, then removed by retention, were never read: chaos kafka seeds
/// 1796645212008 and 1796645212014); `None` at the group's first start (a topic's early
/// records removed before the group existed are no loss of its). One round trip, once
/// per assignment of such a partition.
pub(super) fn expected_from_start(
    shared: &super::Shared,
    consumer: &BaseConsumer<SourceContext>,
) -> Option<i64> {
    let count = consumer
        .fetch_metadata(Some(&shared.topic), shared.request_timeout)
        .ok()?
        .topics()
        .iter()
        .find(|topic| topic.name() == shared.topic)
        .map(|topic| topic.partitions().len())?;
    let committed = crate::admin::committed_offsets_of(
        consumer,
        &shared.topic,
        i32::try_from(count).unwrap_or(i32::MAX),
        shared.request_timeout,
    )
    .ok()?;
    committed.iter().any(|offset| *offset >= 0).then_some(0)
}

/// The first offset read in this assignment when it is past the group's `committed`
/// offset, decided after the record was read: the skip to check.
pub(super) fn first_unchecked(assigned: &Assigned, committed: Option<i64>) -> Option<(i64, i64)> {
    let first = assigned.first_read?;
    let committed = committed?;
    (first > committed).then_some((committed, first))
}

/// The offset up to which every consumer of the feed holds `partition` in `epoch` (the
/// next offset none of them needs: a delivery's position is the record's offset + 1),
/// from what they reported before the source started
/// ([`mongoose_core::SourceOutput::consumer_positions`]). `None` when any consumer holds
/// nothing of it in that epoch: it keeps no position (a forward), its state holds
/// nothing, or its position is of another lane only or of another epoch. A consumer of
/// many lanes reports one position per lane.
pub(super) fn held_by_every_consumer(
    positions: &[ConsumerPosition],
    partition: i32,
    epoch: Epoch,
) -> Option<i64> {
    let lane = u32::try_from(partition).ok()?;
    let mut floor: Option<i64> = None;
    for (index, position) in positions.iter().enumerate() {
        if positions[..index]
            .iter()
            .any(|earlier| earlier.consumer == position.consumer)
        {
            continue; // this consumer was counted at its first report
        }
        let held = positions
            .iter()
            .filter(|other| other.consumer == position.consumer)
            .find_map(|other| match other.held {
                Held::Saved(Some((at_epoch, at))) | Held::Written((at_epoch, at))
                    if at_epoch == epoch && at.lane == lane =>
                {
                    i64::try_from(at.offset).ok()
                }
                _ => None,
            })?;
        floor = Some(floor.map_or(held, |floor| floor.min(held)));
    }
    floor
}

impl Gap {
    /// The gap less what every consumer holds: `held` is the offset up to which each
    /// consumer of the feed applied and saved the partition
    /// ([`held_by_every_consumer`]). `None` when they hold all of it (no loss).
    pub(super) fn less_held(self, held: Option<i64>) -> Option<Gap> {
        match held {
            Some(held) if held >= self.end => None,
            Some(held) if held > self.expected => Some(Gap {
                expected: held,
                ..self
            }),
            _ => Some(self),
        }
    }

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

    // a partition's end: compared with the offset expected, or the committed offset
    // asked for when nothing was read; a record after the end's check is not the first
    // record any more (the skip to the end is not checked twice)
    #[test]
    fn a_partitions_end_is_compared_with_the_offset_expected() {
        let mut assigned = Assigned::new(1);
        assert_eq!(reached_end(&mut assigned), AtEnd::Committed);
        assert!(assigned.at_end);
        assigned.next = Some(3_000); // what the end's check sets
        assert_eq!(follow(&mut assigned, 3_000), None);
        assert_eq!(first_unchecked(&assigned, Some(1_000)), None);
        assert_eq!(reached_end(&mut assigned), AtEnd::Expected(3_001));
        let mut assigned = Assigned::new(2);
        assigned.epoch = Some(Epoch(3));
        assert_eq!(reached_end(&mut assigned), AtEnd::Nothing);
        assigned.committed_at = Some(5);
        assert_eq!(reached_end(&mut assigned), AtEnd::Expected(5));
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

    // a run killed after its ledger saved the partition to 1,977 and before the group's
    // commit (334) caught up, then DeleteRecords moved the log start to 1,977: nothing
    // was lost, the gap counts from what every consumer holds, in the partition's epoch
    #[test]
    fn a_gap_counts_from_what_every_consumer_holds() {
        use mongoose_core::PositionValue;
        let epoch = Epoch(7);
        let at = |lane: u32, offset: u64| PositionValue { lane, offset };
        let ledger = |lane, offset| {
            ConsumerPosition::new("g/ledger", Held::Saved(Some((epoch, at(lane, offset)))))
        };
        let gap = Gap {
            partition: 0,
            expected: 334,
            end: 1_977,
            log_start: 1_977,
            resumed: 1_977,
        };
        let held = held_by_every_consumer(&[ledger(1, 50), ledger(0, 1_977)], 0, epoch);
        assert_eq!(held, Some(1_977));
        assert_eq!(
            gap.less_held(held),
            None,
            "the ledger holds every record removed"
        );
        // a state behind the log start: the rest is lost
        let held = held_by_every_consumer(&[ledger(0, 1_000)], 0, epoch);
        assert_eq!(gap.less_held(held).map(|gap| gap.lost()), Some(977));
        // the lowest consumer counts; a written position is a lower bound held
        let sink = ConsumerPosition::new("g/copy", Held::Written((epoch, at(0, 1_500))));
        assert_eq!(
            held_by_every_consumer(&[ledger(0, 1_977), sink], 0, epoch),
            Some(1_500)
        );
        // a forward keeps no position, another epoch, another lane, an empty state, no
        // consumer: the committed offset stays the start of the gap
        for positions in [
            vec![
                ledger(0, 1_977),
                ConsumerPosition::new("g/forward", Held::Nothing),
            ],
            vec![ConsumerPosition::new(
                "g/ledger",
                Held::Saved(Some((Epoch(6), at(0, 1_977)))),
            )],
            vec![ledger(1, 1_977)],
            vec![ConsumerPosition::new("g/ledger", Held::Saved(None))],
            vec![],
        ] {
            let held = held_by_every_consumer(&positions, 0, epoch);
            assert_eq!(held, None, "{positions:?}");
            assert_eq!(gap.less_held(held), Some(gap));
        }
    }

    // chaos kafka seed 1796658157036: librdkafka's reset of a partition, heard in its
    // log, is the offset the source checks the log start against; a retried reset from
    // a logical offset, another topic's and another facility's lines are not
    #[test]
    fn a_reset_is_heard_from_librdkafkas_line() {
        let starts = LogStarts::new("in.put", "earliest");
        assert!(starts.take_resets().is_empty());
        assert!(starts.hear_reset(
            "OFFSET",
            "[thrd:main]: in.put [1]: offset reset (at offset 388 (leader epoch -1), broker 1) to offset BEGINNING (leader epoch -1): fetch failed due to requested offset not available on the broker: Broker: Offset out of range"
        ));
        assert!(!starts.hear_reset(
            "OFFSET",
            "[thrd:main]: in.put [1]: offset reset (at offset BEGINNING (leader epoch -1), broker 1) to offset BEGINNING (leader epoch -1): failed to query logical offset: Broker: Unknown topic or partition"
        ));
        assert!(!starts.hear_reset(
            "OFFSET",
            "[thrd:main]: xin.put [0]: offset reset (at offset 7 (leader epoch -1), broker 1) to offset BEGINNING"
        ));
        assert!(!starts.hear_reset(
            "FETCH",
            "[thrd:main]: in.put [0]: offset reset (at offset 7 (leader epoch -1), broker 1) to offset BEGINNING"
        ));
        assert!(starts.hear_reset(
            "OFFSET",
            "in.put [12]: offset reset (at offset 9000, broker 2) to offset END"
        ));
        assert_eq!(starts.take_resets(), vec![(1, 388), (12, 9000)]);
        assert!(starts.take_resets().is_empty(), "taken once");
    }

    // a gap seen at the reset and again at the first record after it is one loss; a new
    // incarnation of the topic has offsets of its own
    #[test]
    fn a_gap_is_reported_once_per_incarnation() {
        let starts = LogStarts::new("t", "earliest");
        assert!(starts.first_report(0, 1_000));
        assert!(!starts.first_report(0, 1_000));
        assert!(starts.first_report(1, 1_000));
        starts.forget_reported();
        assert!(starts.first_report(0, 1_000));
    }
}
