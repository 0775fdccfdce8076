//! Services: shared objects registered with the control plane and given to processors.
//!
//! A processor that wants services subscribes to the pseudo-feed [`SERVICES_FEED`] in
//! `start` with a handler of [`ServiceEvent`]; it is then told, on its own group
//! thread, of every service registered (once per service registration) and removed.

use std::any::{Any, TypeId};
use std::fmt;
use std::sync::Arc;

use mongoose_core::{Handler, ProcessorError};

/// The pseudo-feed a processor subscribes to for [`ServiceEvent`]s.
pub const SERVICES_FEED: &str = "mongoose.services";

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

/// The services handler a processor subscribed to [`SERVICES_FEED`] (erased as
/// `Subscriptions::subscribe_erased` hands it over), typed; an error naming both types
/// when the handler does not take [`ServiceEvent`]s.
pub fn services_handler(
    item_type: TypeId,
    item_type_name: &'static str,
    handler: Box<dyn Any + Send>,
) -> Result<Handler<ServiceEvent>, ProcessorError> {
    if item_type != TypeId::of::<ServiceEvent>() {
        return Err(ProcessorError::new(format!(
            "feed '{SERVICES_FEED}' carries {}, but the handler takes {item_type_name}",
            std::any::type_name::<ServiceEvent>()
        )));
    }
    handler
        .downcast::<Handler<ServiceEvent>>()
        .map(|handler| *handler)
        .map_err(|_| ProcessorError::new("service handler of an unexpected type"))
}

/// What a processor is told about a service.
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

/// A versioned registration or removal, broadcast to every group.
#[derive(Clone, Debug)]
pub struct ServiceBroadcast {
    /// The service name.
    pub name: String,
    /// The version of this change (each change of a name gets the next).
    pub version: u64,
    /// The change.
    pub change: ServiceChange,
}

/// A registration or a removal.
#[derive(Clone)]
pub enum ServiceChange {
    /// Registered.
    Registered(Arc<dyn Service>),
    /// Removed.
    Deregistered,
}

impl fmt::Debug for ServiceChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ServiceChange::Registered(_) => "Registered",
            ServiceChange::Deregistered => "Deregistered",
        })
    }
}

impl ServiceBroadcast {
    pub(crate) fn event(&self) -> ServiceEvent {
        match &self.change {
            ServiceChange::Registered(service) => ServiceEvent::Registered {
                name: self.name.clone(),
                version: self.version,
                service: Arc::clone(service),
            },
            ServiceChange::Deregistered => ServiceEvent::Deregistered {
                name: self.name.clone(),
                version: self.version,
            },
        }
    }
}
