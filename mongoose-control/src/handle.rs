//! Processor handles: one registration of a processor, scoped to one server, and what
//! an add returns ([`AddedProcessor`]: the handle and the reply).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use crate::reply::ReplyHandle;

static NEXT_SERVER_ID: AtomicU64 = AtomicU64::new(1);

/// Identifies one control plane (one server) in this process, so a handle from another
/// server is refused and stops nothing.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub struct ServerId(pub u64);

impl ServerId {
    /// A server id not used before in this process.
    pub fn fresh() -> ServerId {
        ServerId(NEXT_SERVER_ID.fetch_add(1, Ordering::Relaxed))
    }
}

/// Names exactly one registration of a processor: its group, its name and its
/// generation. A stop through it can never reach a later processor of the same name.
#[derive(Clone, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub struct ProcessorHandle {
    pub(crate) server: ServerId,
    pub(crate) group: String,
    pub(crate) name: String,
    pub(crate) generation: u64,
}

impl ProcessorHandle {
    /// The group.
    pub fn group(&self) -> &str {
        &self.group
    }

    /// The processor name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The registration's generation.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The server the handle belongs to.
    pub fn server(&self) -> ServerId {
        self.server
    }
}

impl fmt::Display for ProcessorHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}#{}", self.group, self.name, self.generation)
    }
}

/// The result of a stage-style add: the handle of the registration it admitted (none
/// when refused before admission) and its reply.
#[derive(Debug)]
pub struct AddedProcessor {
    /// The registration admitted, or `None` when refused before admission.
    pub handle: Option<ProcessorHandle>,
    /// The add's reply: APPLIED once started, FAILED once a failed start was released.
    pub reply: ReplyHandle,
}
