//! The `kafka` family's own checks of what the server says: settled means every
//! partition committed to its end (during the schedule and after the final run), and a
//! server that the broker's fault left stuck is found.

use std::time::{Duration, Instant};

use crate::scenario::SourceKind;
use crate::truth::FailureKind;
use crate::world::World;

use super::{broker, client};

/// How long the group's committed offsets may take to reach the topic's end after the
/// server said settled.
/// (A member that joins after another was killed waits out its session first.)
const COMMIT_PATIENCE: Duration = Duration::from_secs(20);

/// How long a server that did not settle after the broker came back is watched for
/// progress.
const WEDGE_WINDOW: Duration = Duration::from_secs(10);

/// What a status says was done so far: read (the feeds' sequences), acknowledged and
/// committed, and published by the sinks.
fn progress(status: &serde_json::Value) -> [u64; 4] {
    let sum = |list: &str, field: &str| -> u64 {
        status[list].as_array().map_or(0, |items| {
            items.iter().filter_map(|item| item[field].as_u64()).sum()
        })
    };
    [
        sum("feeds", "sequence"),
        sum("feeds", "acknowledged"),
        sum("feeds", "committed"),
        sum("sinks", "published"),
    ]
}

impl World {
    /// After a `settle` step of a Kafka scenario: a server that says settled has
    /// committed every partition of its input to its end (the broker's records say
    /// otherwise when a partition waits unread: the status lies), and one that never
    /// settled after the broker came back from a kill or pause is stuck (a liveness
    /// failure: nothing is faulted any more).
    pub fn kafka_settled(&mut self) {
        if !self.server_running() {
            return;
        }
        let Some(kafka) = self.kafka.as_ref() else {
            return;
        };
        let (brokers, input, group, partitions) = (
            kafka.brokers.clone(),
            kafka.input.clone(),
            kafka.group.clone(),
            kafka.partitions,
        );
        let back_at = kafka.broker_back_at;
        let started = self.started;
        if broker::broker_down() {
            return;
        }
        let status = self.status();
        let settled = status
            .as_ref()
            .is_some_and(|status| status["settled"].as_bool() == Some(true));
        if !settled {
            // the broker came back during this run: the server must get going again
            // by itself (it may be slow; it must not be stuck)
            if let (Some(back_at), Some(status)) = (back_at, status) {
                if started.is_some_and(|started| started <= back_at) {
                    self.check_wedged(&status, back_at);
                }
            }
            return;
        }
        if self.scenario.source != SourceKind::Kafka {
            return;
        }
        let deadline = Instant::now() + COMMIT_PATIENCE;
        loop {
            let lagging = self.lagging(&brokers, &input, &group, partitions);
            match lagging {
                Ok(lagging) if lagging.is_empty() => return,
                Ok(lagging) if Instant::now() >= deadline => {
                    let detail = format!(
                        "server run {} says settled while the group has not committed {} of {input} ({} partitions) {} s later: the records there wait unread",
                        self.runs,
                        lagging.join(", "),
                        partitions,
                        COMMIT_PATIENCE.as_secs()
                    );
                    let run = format!("server run {} says settled", self.runs);
                    if self
                        .failures
                        .iter()
                        .any(|failure| failure.detail.starts_with(&run))
                    {
                        self.event(detail);
                    } else {
                        self.fail(FailureKind::DishonestCount, detail);
                    }
                    return;
                }
                Ok(_) => std::thread::sleep(Duration::from_millis(250)),
                Err(error) => {
                    self.event(format!(
                        "the settled check could not read the broker: {error}"
                    ));
                    return;
                }
            }
        }
    }

    /// After the final `--exit-when-settled` run of a Kafka feed: a run that ended
    /// settled (exit 0 or 3) has committed every partition of its input to its end;
    /// records it left unread are a status that lied (and lines the checks find lost).
    pub fn kafka_final_check(&mut self, exit_code: Option<i32>) {
        if self.scenario.source != SourceKind::Kafka || !matches!(exit_code, Some(0 | 3)) {
            return;
        }
        let Some(kafka) = self.kafka.as_ref() else {
            return;
        };
        let (brokers, input, group, partitions) = (
            kafka.brokers.clone(),
            kafka.input.clone(),
            kafka.group.clone(),
            kafka.partitions,
        );
        match self.lagging(&brokers, &input, &group, partitions) {
            Ok(lagging) if lagging.is_empty() => {}
            Ok(lagging) => self.fail(
                FailureKind::DishonestCount,
                format!(
                    "the final --exit-when-settled run exited {} (settled) while the group had not committed {} of {input}: records waited unread",
                    exit_code.unwrap_or_default(),
                    lagging.join(", ")
                ),
            ),
            Err(error) => self.event(format!("the final check could not read the broker: {error}")),
        }
    }

    /// A server that did not settle after the broker came back at `back_at`: stuck
    /// when it makes no progress at all (nothing read, published or committed) for
    /// [`WEDGE_WINDOW`].
    fn check_wedged(&mut self, status: &serde_json::Value, back_at: Instant) {
        let before = progress(status);
        std::thread::sleep(WEDGE_WINDOW);
        let Some(now) = self.status() else {
            return;
        };
        if now["settled"].as_bool() == Some(true) {
            self.event("settled at last");
            return;
        }
        let after = progress(&now);
        let run = format!("server run {} is stuck", self.runs);
        if after == before
            && self
                .failures
                .iter()
                .any(|failure| failure.detail.starts_with(&run))
        {
            self.event(format!("{run} still"));
        } else if after == before {
            self.fail(
                FailureKind::NeverEnded,
                format!(
                    "server run {} is stuck: not settled, and nothing read, published or committed in {} s, {:.0} s after the broker came back (nothing is faulted any more): {}",
                    self.runs,
                    WEDGE_WINDOW.as_secs(),
                    back_at.elapsed().as_secs_f64(),
                    crate::steps::stalled_reasons(&now)
                ),
            );
        } else {
            self.event(format!(
                "not settled, but going on after the broker came back: {before:?} -> {after:?} (read, acknowledged, committed, published)"
            ));
        }
    }

    /// The partitions whose committed offset is below their end, described.
    fn lagging(
        &self,
        brokers: &str,
        input: &str,
        group: &str,
        partitions: u32,
    ) -> Result<Vec<String>, String> {
        let committed = client::committed(brokers, group, input, partitions)?;
        let mut lagging = Vec::new();
        for partition in 0..partitions {
            let (low, high) = client::watermarks(brokers, input, partition)?;
            let offset = committed.get(partition as usize).copied().unwrap_or(-1);
            if high > low && offset < high {
                lagging.push(format!(
                    "partition {partition} ({} of its records {low}..{high})",
                    if offset < 0 {
                        "none".to_owned()
                    } else {
                        format!("{} past offset {offset}", high - offset.max(low))
                    }
                ));
            }
        }
        Ok(lagging)
    }
}
