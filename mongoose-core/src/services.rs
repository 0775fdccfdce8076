//! Services: shared objects registered with the control plane and given to processors
//! ([`crate::StartContext::services`]).

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use crate::error::ProcessorError;

/// A service: any shared object with optional lifecycle hooks.
pub trait Service: Any + Send + Sync {
    /// Called once after injection, before processors are told of the service.
    fn start(&self) -> Result<(), ProcessorError> {
        Ok(())
    }

    /// Called once, only after every group confirmed the withdrawal (or at shutdown).
    fn stop(&self) -> Result<(), ProcessorError> {
        Ok(())
    }

    /// Another service is available (injection, outside the service lock).
    fn inject(&self, name: &str, other: &Arc<dyn Service>) {
        let _ = (name, other);
    }
}

/// What a processor is told about a service, on its group's thread.
#[derive(Clone)]
pub enum ServiceEvent {
    /// A service was registered (or existed when the processor was added).
    Registered {
        /// The service name.
        name: String,
        /// The registration's version.
        version: u64,
        /// The service.
        service: Arc<dyn Service>,
    },
    /// A service was removed: drop every reference to it.
    Deregistered {
        /// The service name.
        name: String,
        /// The removal's version.
        version: u64,
    },
}

impl fmt::Debug for ServiceEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServiceEvent::Registered { name, version, .. } => f
                .debug_struct("Registered")
                .field("name", name)
                .field("version", version)
                .finish(),
            ServiceEvent::Deregistered { name, version } => f
                .debug_struct("Deregistered")
                .field("name", name)
                .field("version", version)
                .finish(),
        }
    }
}

impl ServiceEvent {
    /// The service name.
    pub fn name(&self) -> &str {
        match self {
            ServiceEvent::Registered { name, .. } | ServiceEvent::Deregistered { name, .. } => name,
        }
    }

    /// The registered service as a `T`, if it is one.
    pub fn service_as<T: Service>(&self) -> Option<Arc<T>> {
        match self {
            ServiceEvent::Registered { service, .. } => {
                let any: Arc<dyn Any + Send + Sync> = Arc::clone(service) as _;
                any.downcast::<T>().ok()
            }
            ServiceEvent::Deregistered { .. } => None,
        }
    }
}
