//! The plane as what a processor's controller reaches ([`ControlRequests`]): the
//! groups hold it as that trait, so nothing on the group side names the plane.

use std::sync::Arc;

use crate::controller::ControlRequests;
use crate::error::ControlError;
use crate::handle::AddedProcessor;
use crate::reply::ReplyHandle;
use crate::services::Service;
use crate::supplier::ProcessorSupplier;

use super::Plane;

impl ControlRequests for Plane {
    fn stop_processor_now(&self, group: &str, name: &str) -> Result<ReplyHandle, ControlError> {
        Plane::stop_processor_now(self, group, name)
    }

    fn register_service(&self, name: &str, service: Arc<dyn Service>) -> Result<(), ControlError> {
        Plane::register_service(self, name, service)
    }

    fn remove_service(&self, name: &str) {
        Plane::remove_service(self, name);
    }

    fn add_processor(
        &self,
        group: &str,
        name: &str,
        supplier: ProcessorSupplier,
    ) -> AddedProcessor {
        Plane::add_processor(self, group, name, supplier)
    }
}
