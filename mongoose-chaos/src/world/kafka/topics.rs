//! What the `kafka` family does to the input topic, and what each change takes away
//! from the truth: records deleted (`DeleteRecords`, a retention that catches up with
//! the group), the topic deleted and made again, partitions added.

use std::time::{Duration, Instant};

use crate::scenario::{KafkaOp, SourceKind};
use crate::world::{StreamFiles, World};

use super::{broker, client};

/// Topic settings as the admin calls take them.
pub(super) fn pairs(config: &[(String, String)]) -> Vec<(&str, &str)> {
    config
        .iter()
        .map(|(key, value)| (key.as_str(), value.as_str()))
        .collect()
}

impl World {
    /// Does `op` to the topics.
    ///
    /// # Errors
    /// The broker did not do it.
    pub fn kafka_op(&mut self, op: KafkaOp) -> Result<(), String> {
        if self.scenario.source != SourceKind::Kafka {
            self.event("skipped: the source is not a Kafka topic");
            return Ok(());
        }
        if broker::broker_down() {
            return Err(format!(
                "kafka {op:?}: the broker is down (the schedule must restart it first)"
            ));
        }
        match op {
            KafkaOp::DeleteRecords { stream } => self.delete_records(stream),
            KafkaOp::Retention => self.retention(),
            KafkaOp::RecreateTopic => self.recreate_topic(),
            KafkaOp::AddPartitions { to } => self.add_partitions(to),
        }
    }

    /// Deletes the input topic and makes it again under its name (as many partitions):
    /// the lines the group had not committed are gone with no loss to report; the new
    /// topic's lines must all be applied.
    ///
    /// # Errors
    /// The broker did not do it.
    pub fn recreate_topic(&mut self) -> Result<(), String> {
        let (brokers, input, group, partitions) = self.kafka_names()?;
        let committed = self.committed_or_none(&brokers, &group, &input, partitions);
        client::delete_topic(&brokers, &input)?;
        let config = self
            .kafka
            .as_ref()
            .map(|kafka| kafka.topic_config.clone())
            .unwrap_or_default();
        client::create_topic(&brokers, &input, partitions, &pairs(&config))?;
        let mut gone = Vec::new();
        let mut kept = 0usize;
        for (stream, files) in self.streams.iter_mut().enumerate() {
            let from = committed
                .as_ref()
                .and_then(|offsets| offsets.get(stream))
                .map_or(0, |offset| (*offset).max(0) as usize);
            for file in files.files.drain(..) {
                kept += from.min(file.lines.len());
                gone.extend(file.lines.iter().skip(from).copied());
            }
        }
        self.event(format!(
            "deleted the topic {input} and made it again ({partitions} partitions): {kept} lines were committed, {} were not (gone, no loss to report)",
            gone.len()
        ));
        self.truth.mark_maybe(gone, false);
        if let Some(kafka) = self.kafka.as_mut() {
            // an idempotent producer's sequence numbers belong to the old topic
            kafka.producer = None;
        }
        Ok(())
    }

    /// The group's committed offsets, `None` (and an event) when they cannot be read.
    fn committed_or_none(
        &mut self,
        brokers: &str,
        group: &str,
        topic: &str,
        partitions: u32,
    ) -> Option<Vec<i64>> {
        match client::committed(brokers, group, topic, partitions) {
            Ok(offsets) => Some(offsets),
            Err(error) => {
                self.event(format!("the committed offsets cannot be read: {error}"));
                None
            }
        }
    }

    /// The lines of stream `stream`'s live topic at offsets `from..to`.
    fn lines_at(&self, stream: u32, from: i64, to: i64) -> Vec<usize> {
        let Some(files) = self.streams.get(stream as usize) else {
            return Vec::new();
        };
        let lines: Vec<usize> = files
            .files
            .iter()
            .filter(|file| file.path == files.live)
            .flat_map(|file| file.lines.iter().copied())
            .collect();
        let from = from.max(0) as usize;
        let to = (to.max(0) as usize).min(lines.len());
        lines
            .get(from..to)
            .map(<[usize]>::to_vec)
            .unwrap_or_default()
    }

    /// `DeleteRecords` of partition `stream` up to its end: what the group had not
    /// committed is gone, a loss the run must report.
    fn delete_records(&mut self, stream: u32) -> Result<(), String> {
        let (brokers, input, group, partitions) = self.kafka_names()?;
        let stream = stream.min(partitions - 1);
        let (low, high) = client::watermarks(&brokers, &input, stream)?;
        let committed = self
            .committed_or_none(&brokers, &group, &input, partitions)
            .and_then(|offsets| offsets.get(stream as usize).copied())
            .unwrap_or(-1);
        client::delete_records(&brokers, &input, stream, high)?;
        let gone = self.records_deleted(
            stream,
            committed,
            (low, high),
            &format!("kafka DeleteRecords of partition {stream}"),
        );
        self.event(format!(
            "deleted the records of {input} partition {stream} below {high} (log start was {low}, the group committed {committed}): {gone} lines never read are gone"
        ));
        Ok(())
    }

    /// The log start of `partition` moved from `log_start.0` to `log_start.1` (records
    /// deleted) while the group had committed `committed`: the lines at the offsets from
    /// the committed one up to the new log start were never read and are gone, a loss
    /// the run must report (`Maybe { report: true }`: missing only if a run after the
    /// fault says it lost something). `fault` names it in the report. Returns how many.
    pub(crate) fn records_deleted(
        &mut self,
        partition: u32,
        committed: i64,
        log_start: (i64, i64),
        fault: &str,
    ) -> usize {
        let (old, new) = log_start;
        let gone = self.lines_at(partition, committed.max(old), new);
        let count = gone.len();
        if count > 0 {
            self.truth.mark_maybe(gone, true);
            self.note_lossy(fault);
        }
        if new > old {
            self.removed_below
                .insert(partition, (new, fault.to_owned()));
        }
        count
    }

    /// The log starts a restarted broker answers (`(partition, log start)`), against
    /// those `DeleteRecords` or a retention moved them to: Apache Kafka checkpoints a
    /// moved log start every minute (`log.flush.start.offset.checkpoint.interval.ms`),
    /// so a broker killed before that restarts with the earlier one and the removed
    /// records can be read again (chaos kafka seed 1796685595091: 1,643 records the
    /// server reported removed, rightly when it looked, were read after the broker's
    /// restart). The server's report was honest, and whether the records come back is
    /// the broker's doing: an exit 3 with nothing missing is then no false alarm.
    pub(crate) fn log_starts_after_restart(&mut self, starts: &[(u32, i64)]) {
        for (partition, low) in starts {
            let Some((removed_to, fault)) = self.removed_below.get(partition).cloned() else {
                continue;
            };
            if *low < removed_to {
                self.event(format!(
                    "the restarted broker's log start of partition {partition} is {low}, back from {removed_to}: records removed by {fault} can be read again"
                ));
                self.uncertain_losses.push(format!(
                    "{fault}, given back by the broker's restart (log start {low}, was {removed_to})"
                ));
                self.removed_below.remove(partition);
            }
        }
    }

    /// The input topic's retention cut to a second until every record written so far
    /// is gone (retention is checked every second on the harness's broker), then set
    /// back: what the group had not committed is gone, a loss the run must report.
    fn retention(&mut self) -> Result<(), String> {
        let (brokers, input, group, partitions) = self.kafka_names()?;
        let committed = self
            .committed_or_none(&brokers, &group, &input, partitions)
            .unwrap_or_default();
        let mut before = Vec::new();
        for partition in 0..partitions {
            before.push(client::watermarks(&brokers, &input, partition)?);
        }
        let mut config: Vec<(String, String)> = self
            .kafka
            .as_ref()
            .map(|kafka| kafka.topic_config.clone())
            .unwrap_or_default();
        let kept = config.clone();
        config.push(("retention.ms".to_owned(), "1000".to_owned()));
        client::set_topic_config(&brokers, &input, &pairs(&config))?;
        let began = Instant::now();
        let deadline = began + Duration::from_secs(60);
        let mut after = before.clone();
        loop {
            let mut done = true;
            for partition in 0..partitions {
                let (low, high) = client::watermarks(&brokers, &input, partition)?;
                after[partition as usize] = (low, high);
                if low < before[partition as usize].1 {
                    done = false;
                }
            }
            if done || Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        client::set_topic_config(&brokers, &input, &pairs(&kept))?;
        let mut described = Vec::new();
        for partition in 0..partitions {
            let (old_low, high) = before[partition as usize];
            let (new_low, _) = after[partition as usize];
            let committed = committed.get(partition as usize).copied().unwrap_or(-1);
            let gone = self.records_deleted(
                partition,
                committed,
                (old_low, new_low),
                &format!("kafka retention of partition {partition}"),
            );
            described.push(format!(
                "partition {partition}: log start {old_low} -> {new_low} of {high}, committed {committed}, {gone} unread gone"
            ));
        }
        self.event(format!(
            "retention.ms of {input} was 1000 for {:.1} s: {}",
            began.elapsed().as_secs_f64(),
            described.join("; ")
        ));
        Ok(())
    }

    /// Partitions added to the input topic (up to `to`), each a new stream.
    fn add_partitions(&mut self, to: u32) -> Result<(), String> {
        let (brokers, input, _, partitions) = self.kafka_names()?;
        if to <= partitions {
            self.event(format!("{input} has {partitions} partitions already"));
            return Ok(());
        }
        client::add_partitions(&brokers, &input, to)?;
        for stream in partitions..to {
            let live = self.path(&format!("in/kafka-{stream}"));
            self.streams.push(StreamFiles {
                live,
                ..StreamFiles::default()
            });
        }
        if let Some(kafka) = self.kafka.as_mut() {
            kafka.partitions = to;
            // a producer that knows the new partitions
            kafka.producer = None;
        }
        self.event(format!("{input}: {partitions} -> {to} partitions"));
        Ok(())
    }
}
