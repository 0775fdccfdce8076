//! Idle strategies: what a group's thread does when a duty cycle found no work. The
//! strategy is the core's [`IdleStrategy`]; the waiting is the engine's
//! [`Idler`](mongoose_delivery::Idler).

pub use mongoose_core::IdleStrategy;
pub(crate) use mongoose_delivery::Idler;
