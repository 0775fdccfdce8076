//! Overload policies: what a publish does when a subscriber queue is full.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::CoreError;

/// What a full subscriber queue does to a publish.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum OverloadPolicy {
    /// Spin up to the spin bound, then drop this item's copy for the queue (counted;
    /// the feed is no longer lossless).
    DropAfterSpin,
    /// All-or-nothing: a publish off an agent thread waits (without the publish lock)
    /// up to the deadline for room in every blocking queue, then is refused. On an
    /// agent thread a push publish downgrades to drop (counted); `try_publish` pauses.
    BlockWithDeadline,
    /// `try_publish` returns "paused" and the source keeps the item: nothing is lost
    /// and nothing waits. The default of re-readable sources (a file feed).
    Pause,
}

impl OverloadPolicy {
    /// The name used in configuration and in feed status.
    pub fn as_str(self) -> &'static str {
        match self {
            OverloadPolicy::DropAfterSpin => "DROP_AFTER_SPIN",
            OverloadPolicy::BlockWithDeadline => "BLOCK_WITH_DEADLINE",
            OverloadPolicy::Pause => "PAUSE",
        }
    }

    /// A never-drop policy latches on any loss (BLOCK and PAUSE).
    pub fn never_drops(self) -> bool {
        !matches!(self, OverloadPolicy::DropAfterSpin)
    }
}

impl fmt::Display for OverloadPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for OverloadPolicy {
    type Err = CoreError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "DROP_AFTER_SPIN" | "BACKOFF" => Ok(OverloadPolicy::DropAfterSpin),
            "BLOCK_WITH_DEADLINE" => Ok(OverloadPolicy::BlockWithDeadline),
            "PAUSE" => Ok(OverloadPolicy::Pause),
            other => Err(CoreError::InvalidOverload(format!(
                "unknown overload policy '{other}': expected DROP_AFTER_SPIN, BLOCK_WITH_DEADLINE or PAUSE"
            ))),
        }
    }
}

/// A policy with its bounds.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct OverloadSettings {
    /// The policy.
    pub policy: OverloadPolicy,
    /// How long a drop spins on a full queue before dropping (also the bound of a push
    /// publish's fallback on a PAUSE queue). Default 10 ms.
    pub spin_bound: Duration,
    /// BLOCK_WITH_DEADLINE only: how long a publish may wait for room.
    pub block_deadline: Option<Duration>,
    /// DROP_AFTER_SPIN: a degraded queue is healthy again after this long without
    /// loss. Default 60 s, at least 1 s.
    pub quiet_period: Duration,
    /// BLOCK_WITH_DEADLINE: run the kill-switch hook once per latch.
    pub kill_switch: bool,
}

impl OverloadSettings {
    /// The default spin bound.
    pub const DEFAULT_SPIN_BOUND: Duration = Duration::from_millis(10);
    /// The default quiet period.
    pub const DEFAULT_QUIET_PERIOD: Duration = Duration::from_secs(60);

    /// DROP_AFTER_SPIN with the default bounds.
    pub const fn drop_after_spin() -> Self {
        OverloadSettings {
            policy: OverloadPolicy::DropAfterSpin,
            spin_bound: Self::DEFAULT_SPIN_BOUND,
            block_deadline: None,
            quiet_period: Self::DEFAULT_QUIET_PERIOD,
            kill_switch: false,
        }
    }

    /// PAUSE with the default spin bound (used only by a push publish's fallback).
    pub const fn pause() -> Self {
        OverloadSettings {
            policy: OverloadPolicy::Pause,
            ..Self::drop_after_spin()
        }
    }

    /// BLOCK_WITH_DEADLINE with the given deadline.
    pub const fn block_with_deadline(deadline: Duration) -> Self {
        OverloadSettings {
            policy: OverloadPolicy::BlockWithDeadline,
            block_deadline: Some(deadline),
            ..Self::drop_after_spin()
        }
    }

    /// Checks the settings are consistent: a deadline only with BLOCK (and required
    /// there), a quiet period of at least one second.
    pub fn validate(&self) -> Result<(), CoreError> {
        match (self.policy, self.block_deadline) {
            (OverloadPolicy::BlockWithDeadline, None) => {
                return Err(CoreError::InvalidOverload(
                    "BLOCK_WITH_DEADLINE needs a block deadline: set block_deadline_millis".into(),
                ))
            }
            (OverloadPolicy::Pause, Some(_)) => {
                return Err(CoreError::InvalidOverload(
                    "block_deadline_millis is not allowed with PAUSE: PAUSE never waits; remove it or use BLOCK_WITH_DEADLINE".into(),
                ))
            }
            (OverloadPolicy::DropAfterSpin, Some(_)) => {
                return Err(CoreError::InvalidOverload(
                    "block_deadline_millis is only allowed with BLOCK_WITH_DEADLINE: remove it or use that policy".into(),
                ))
            }
            _ => {}
        }
        if self.quiet_period < Duration::from_secs(1) {
            return Err(CoreError::InvalidOverload(
                "quiet_period_millis must be at least 1000 (one second)".into(),
            ));
        }
        Ok(())
    }
}

impl Default for OverloadSettings {
    fn default() -> Self {
        Self::drop_after_spin()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_with_pause_is_rejected_with_what_to_do() {
        let settings = OverloadSettings {
            block_deadline: Some(Duration::from_millis(5)),
            ..OverloadSettings::pause()
        };
        let error = settings.validate().expect_err("rejected").to_string();
        assert!(error.contains("not allowed with PAUSE"), "{error}");
    }

    #[test]
    fn block_needs_a_deadline_and_backoff_means_drop() {
        let settings = OverloadSettings {
            block_deadline: None,
            ..OverloadSettings::pause()
        };
        assert!(settings.validate().is_ok());
        let block = OverloadSettings {
            policy: OverloadPolicy::BlockWithDeadline,
            ..OverloadSettings::drop_after_spin()
        };
        assert!(block.validate().is_err());
        assert_eq!(
            "BACKOFF".parse::<OverloadPolicy>().ok(),
            Some(OverloadPolicy::DropAfterSpin)
        );
        assert!("SOMETIMES".parse::<OverloadPolicy>().is_err());
        assert_eq!(
            serde_json::to_string(&OverloadPolicy::Pause)
                .ok()
                .as_deref(),
            Some("\"PAUSE\"")
        );
    }

    // issue 12, item 6: the messages name the TOML keys an operator writes, not the
    // Java original's
    #[test]
    fn the_messages_name_the_toml_keys() {
        let no_deadline = OverloadSettings {
            policy: OverloadPolicy::BlockWithDeadline,
            ..OverloadSettings::drop_after_spin()
        };
        let short_quiet = OverloadSettings {
            quiet_period: Duration::from_millis(10),
            ..OverloadSettings::drop_after_spin()
        };
        let drop_with_deadline = OverloadSettings {
            block_deadline: Some(Duration::from_millis(5)),
            ..OverloadSettings::drop_after_spin()
        };
        for (settings, key) in [
            (no_deadline, "block_deadline_millis"),
            (short_quiet, "quiet_period_millis"),
            (drop_with_deadline, "block_deadline_millis"),
        ] {
            let error = settings.validate().expect_err("rejected").to_string();
            assert!(error.contains(key), "{error}");
            assert!(!error.contains("Millis"), "a Java key: {error}");
        }
    }
}
