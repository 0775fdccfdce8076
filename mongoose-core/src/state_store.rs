//! State that follows its partitions: the trait a stateful processor on a partitioned
//! feed keeps its state behind ([`PartitionStateStore`]), and the records a store reads
//! back. The Kafka connector implements it with a compacted changelog topic
//! (`mongoose_kafka::changelog::Changelog`); the processor knows only this trait, so
//! it builds without the connector's client library.
//!
//! The model: each change of a partition's state is one record keyed by the state's
//! key, carrying the input position it follows `(epoch, partition, offset)`. A write is
//! durable when the store says so through [`OnDurable`] (the processor holds its
//! input's commit until then). The member that takes a partition over in a new epoch
//! restores it ([`PartitionStateStore::restore`]): the store fences off what an older
//! owner still writes and folds the rest into the last value per key and the position
//! the state holds the partition through.
//!
//! ```
//! use std::sync::Mutex;
//! use std::time::Duration;
//! use mongoose_core::state_store::{PartitionStateStore, RestoredPartition, StoredRecord};
//! use mongoose_core::{CoreError, Epoch};
//!
//! /// A store in memory, without fencing: enough to show the calls.
//! #[derive(Debug, Default)]
//! struct Memory(Mutex<Vec<StoredRecord>>);
//!
//! impl PartitionStateStore for Memory {
//!     fn location(&self) -> &str {
//!         "memory"
//!     }
//!     fn write(&self, partition: i32, epoch: Epoch, offset: u64, key: &[u8], value: &[u8], _tag: u64)
//!         -> Result<(), CoreError> {
//!         let mut log = self.0.lock().unwrap();
//!         let at = log.len() as i64;
//!         log.push(StoredRecord::entry(at, epoch, partition, offset, key, value));
//!         Ok(())
//!     }
//!     fn restore(&self, partition: i32, _epoch: Epoch, counted: &mut dyn FnMut(&StoredRecord))
//!         -> Result<RestoredPartition, CoreError> {
//!         let mut restored = RestoredPartition::default();
//!         for record in self.0.lock().unwrap().iter().filter(|r| r.partition == partition) {
//!             restored.entries.insert(record.key.clone(), (record.log_offset, record.value.clone()));
//!             restored.position = Some((record.epoch, record.offset));
//!             restored.counted += 1;
//!             counted(record);
//!         }
//!         Ok(restored)
//!     }
//!     fn flush(&self, _timeout: Duration) -> Result<(), CoreError> {
//!         Ok(())
//!     }
//! }
//!
//! let store = Memory::default();
//! store.write(2, Epoch(7), 41, b"account-1", b"120", 1)?;
//! // the member that takes partition 2 over in epoch 8
//! let restored = store.restore(2, Epoch(8), &mut |_record| {})?;
//! assert_eq!(restored.position, Some((Epoch(7), 41))); // skip input offsets <= 41
//! assert_eq!(restored.last_entry(), Some(&b"120"[..]));
//! # Ok::<(), CoreError>(())
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::CoreError;
use crate::position::Epoch;

/// Called when a write is durable (`Ok`) or will never be (`Err`, with why), on the
/// store's own thread: `(tag, result)`.
pub type OnDurable = Arc<dyn Fn(u64, Result<(), WriteFailure>) + Send + Sync>;

/// Why a write will never be durable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteFailure {
    /// The store gave it up (its delivery timeout, a transaction it had to abort): the
    /// state in memory is ahead of the store; a restart restores from the store.
    GivenUp(String),
    /// Another owner took `partition` over and the store refuses this owner's writes of
    /// it for good (a transactional store whose producer the broker fenced): the writes
    /// of the partition since its last durable one are gone, and so is this owner's
    /// claim on it. The partition's other lines in the same epoch must not be applied.
    Fenced {
        /// The partition taken over.
        partition: i32,
        /// The epoch this owner held it in (a later epoch of the same partition, taken
        /// over again, is not concerned).
        epoch: Epoch,
        /// What the store was told.
        message: String,
    },
}

impl fmt::Display for WriteFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WriteFailure::GivenUp(message) => write!(f, "given up: {message}"),
            WriteFailure::Fenced {
                partition,
                epoch,
                message,
            } => write!(
                f,
                "partition {partition} (held in epoch {epoch}) was taken over by another owner, which fenced this one: {message}"
            ),
        }
    }
}

/// What a stored record is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RecordKind {
    /// A change: the key's new value (an empty value removes the key).
    Entry,
    /// A new owner's fence: records of other epochs after it do not count.
    Marker,
    /// A reader's end-of-partition probe: counts for nothing.
    Probe,
}

/// One record of a partition's state log, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredRecord {
    /// Its offset in the state log's partition.
    pub log_offset: i64,
    /// What it is.
    pub kind: RecordKind,
    /// The epoch of the input delivery it follows (a marker: its owner's epoch).
    pub epoch: Epoch,
    /// The input partition.
    pub partition: i32,
    /// The input position it follows (the offset after the input record).
    pub offset: u64,
    /// The state's key.
    pub key: Vec<u8>,
    /// The state's value.
    pub value: Vec<u8>,
}

impl StoredRecord {
    /// A change record: `key` has `value` after input `offset` of `partition` in `epoch`.
    pub fn entry(
        log_offset: i64,
        epoch: Epoch,
        partition: i32,
        offset: u64,
        key: &[u8],
        value: &[u8],
    ) -> Self {
        StoredRecord {
            log_offset,
            kind: RecordKind::Entry,
            epoch,
            partition,
            offset,
            key: key.to_vec(),
            value: value.to_vec(),
        }
    }
}

/// The state of one partition as a restore gives it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RestoredPartition {
    /// The last value of each key, with the log offset it was written at.
    pub entries: BTreeMap<Vec<u8>, (i64, Vec<u8>)>,
    /// The `(epoch, input position)` of the last counted record: the state holds the
    /// input partition through this position.
    pub position: Option<(Epoch, u64)>,
    /// Entries counted.
    pub counted: u64,
    /// Entries fenced off (written in an old epoch behind a newer owner's marker).
    pub fenced: u64,
    /// Markers read.
    pub markers: u64,
}

impl RestoredPartition {
    /// The value of the entry written last (the latest counted record), if any.
    pub fn last_entry(&self) -> Option<&[u8]> {
        self.entries
            .values()
            .max_by_key(|(log_offset, _)| *log_offset)
            .map(|(_, value)| value.as_slice())
    }
}

/// A per-partition state store whose state follows its partitions from member to member
/// of a consumer group (see the module docs for the model).
pub trait PartitionStateStore: Send + Sync + fmt::Debug {
    /// Where the state lives (a topic name), for messages.
    fn location(&self) -> &str;

    /// Sends one change of `partition`'s state: `key` now has `value` (empty: removed),
    /// after the input record whose position is `offset`, delivered in `epoch`. `tag`
    /// comes back through the store's [`OnDurable`] once the change is durable (or was
    /// given up).
    ///
    /// # Errors
    /// The key is reserved by the store, or the store refused the change for good.
    fn write(
        &self,
        partition: i32,
        epoch: Epoch,
        offset: u64,
        key: &[u8],
        value: &[u8],
        tag: u64,
    ) -> Result<(), CoreError>;

    /// Takes `partition` over in `epoch`: fences off older owners, reads the partition's
    /// state and folds it; `counted` sees each counted entry in log order. Writes of this
    /// partition follow the call.
    ///
    /// # Errors
    /// The fence is not durable, or the partition cannot be read in time.
    fn restore(
        &self,
        partition: i32,
        epoch: Epoch,
        counted: &mut dyn FnMut(&StoredRecord),
    ) -> Result<RestoredPartition, CoreError>;

    /// After `partition`'s writes in `epoch` were reported [`WriteFailure::Fenced`]: true
    /// when this member is still the partition's newest owner (the fencer was a stale
    /// one) and the store wrote again what the fenced writes held, whose tags come back
    /// through [`OnDurable`] once durable; false when a newer owner holds the partition
    /// (the default: a store that cannot tell). A fenced write's tag must not let its
    /// input be committed before this says false: the input would be committed
    /// unapplied.
    ///
    /// # Errors
    /// The store could not tell now: the fenced writes stay kept, ask again later.
    fn retake(&self, partition: i32, epoch: Epoch) -> Result<bool, CoreError> {
        let _ = (partition, epoch);
        Ok(false)
    }

    /// Waits until every write sent so far is durable or given up.
    ///
    /// # Errors
    /// Some are still in flight after `timeout`.
    fn flush(&self, timeout: Duration) -> Result<(), CoreError>;

    /// Where the outputs written with the state go ([`PartitionStateStore::write_output`]),
    /// or `None` for a store that writes no outputs (the default).
    fn outputs_location(&self) -> Option<&str> {
        None
    }

    /// Writes an output (an alert, say) of `partition` that becomes visible exactly when
    /// the state changes written with it do: a transactional store commits it in the same
    /// transaction as the partition's next change, so an output exists if and only if the
    /// change of the input that caused it does. Write it before that change.
    ///
    /// # Errors
    /// The store writes no outputs (the default), the partition is fenced, or the store
    /// refused the output for good.
    fn write_output(&self, partition: i32, key: &[u8], payload: &[u8]) -> Result<(), CoreError> {
        let _ = (partition, key, payload);
        Err(CoreError::StateStore {
            store: self.location().to_owned(),
            error: "this state store writes no outputs: send them to a sink".into(),
        })
    }
}
