//! A partition's epoch, kept in the metadata of its committed offset.
//!
//! Kafka offsets never repeat within a partition, but the state that applied them
//! changes hands: a processor that stores `(epoch, position)` with its state
//! ([`mongoose_core::Delivery::already_applied`]) must recognise re-deliveries of what
//! *its own* state holds (a restart after `kill -9`: exactly once) and must never take a
//! position saved during an earlier ownership for proof that it holds the records of
//! another owner's time in between. So the epoch follows the owner:
//!
//! * every commit writes `mongoose:1:<epoch hex>:<owner>` as the offset's metadata
//!   ([`EpochTag`]);
//! * when a partition is assigned, the source reads the committed metadata before it
//!   publishes any record of it. Tagged with this source's own owner: the partition
//!   keeps that epoch (nobody else committed since this owner did). Anything else (another
//!   owner, no tag, no commit, no owner configured): a new epoch is minted
//!   ([`mint_epoch`]: greater than the tag's and than the clock in microseconds, so
//!   it is unique in practice and increases along the partition's history) and committed
//!   at the offset of the first record read, with this owner's tag, before the record is
//!   published. A state saved from then on is in the new epoch, which a restart of the
//!   same owner finds in the tag again.
//!
//! The owner is the identity of the state that processes the partitions
//! (`KafkaSourceConfig::owner`: for a server, its state directory's name); two live
//! members must never share one. Without an owner every assignment gets a new epoch: a
//! restarted member re-applies what its state held past the committed offset
//! (at-least-once), which is right for a processor that stores no positions.

use std::time::{SystemTime, UNIX_EPOCH};

use mongoose_core::Epoch;

/// The prefix and version of the metadata this connector writes with its commits.
pub const TAG_PREFIX: &str = "mongoose:1:";

/// The epoch and owner written with a committed offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EpochTag {
    /// The partition's epoch when the offset was committed.
    pub epoch: Epoch,
    /// The owner that committed it (empty: none configured).
    pub owner: String,
}

impl EpochTag {
    /// The metadata string: `mongoose:1:<epoch hex>:<owner>`.
    pub fn encode(&self) -> String {
        format!("{TAG_PREFIX}{:x}:{}", self.epoch.0, self.owner)
    }

    /// Reads a metadata string this connector wrote; `None` for anything else (another
    /// client's metadata, an empty string).
    pub fn decode(metadata: &str) -> Option<EpochTag> {
        let rest = metadata.strip_prefix(TAG_PREFIX)?;
        let (epoch, owner) = rest.split_once(':')?;
        let epoch = u64::from_str_radix(epoch, 16).ok()?;
        Some(EpochTag {
            epoch: Epoch(epoch),
            owner: owner.to_owned(),
        })
    }
}

/// What the source decides for a partition it was assigned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EpochDecision {
    /// The partition comes back to the owner that last committed it: keep the epoch.
    Keep(Epoch),
    /// The partition comes from another owner or from nobody: this new epoch must be
    /// committed before any record is published.
    Mint(Epoch),
}

impl EpochDecision {
    /// The epoch decided on.
    pub fn epoch(self) -> Epoch {
        match self {
            EpochDecision::Keep(epoch) | EpochDecision::Mint(epoch) => epoch,
        }
    }
}

/// A new epoch after `previous`: greater than it and than the clock in microseconds.
pub fn mint_epoch(previous: Option<Epoch>) -> Epoch {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(1, |since| since.as_micros() as u64);
    let after = previous.map_or(1, |epoch| epoch.0.saturating_add(1));
    Epoch(now.max(after).max(1))
}

/// Decides the epoch of a partition assigned to `owner` whose committed offset carries
/// `metadata` (`None`: nothing committed).
pub fn decide(owner: Option<&str>, metadata: Option<&str>) -> EpochDecision {
    let tag = metadata.and_then(EpochTag::decode);
    match (owner, &tag) {
        (Some(owner), Some(tag)) if !owner.is_empty() && tag.owner == owner && tag.epoch.0 != 0 => {
            EpochDecision::Keep(tag.epoch)
        }
        _ => EpochDecision::Mint(mint_epoch(tag.map(|tag| tag.epoch))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_round_trips_and_foreign_metadata_is_no_tag() {
        let tag = EpochTag {
            epoch: Epoch(0xabc),
            owner: "server-a:with:colons".into(),
        };
        assert_eq!(tag.encode(), "mongoose:1:abc:server-a:with:colons");
        assert_eq!(EpochTag::decode(&tag.encode()), Some(tag));
        assert_eq!(EpochTag::decode(""), None);
        assert_eq!(EpochTag::decode("mongoose:1:zz:a"), None);
        assert_eq!(EpochTag::decode("someone else's"), None);
    }

    #[test]
    fn the_same_owner_keeps_its_epoch_and_another_owner_gets_a_greater_one() {
        let mine = EpochTag {
            epoch: Epoch(7),
            owner: "a".into(),
        }
        .encode();
        assert_eq!(decide(Some("a"), Some(&mine)), EpochDecision::Keep(Epoch(7)));
        let theirs = decide(Some("b"), Some(&mine));
        assert!(matches!(theirs, EpochDecision::Mint(epoch) if epoch > Epoch(7)));
        // no owner: always a new epoch, even over its own (empty) tag
        let anonymous = EpochTag {
            epoch: Epoch(9),
            owner: String::new(),
        }
        .encode();
        assert!(matches!(decide(None, Some(&anonymous)), EpochDecision::Mint(_)));
        assert!(matches!(decide(Some(""), Some(&anonymous)), EpochDecision::Mint(_)));
        assert!(matches!(decide(Some("a"), None), EpochDecision::Mint(_)));
        // a tag from the far future still gives a greater epoch
        let future = EpochTag {
            epoch: Epoch(u64::MAX - 1),
            owner: "b".into(),
        }
        .encode();
        assert_eq!(decide(Some("a"), Some(&future)).epoch(), Epoch(u64::MAX));
    }
}
