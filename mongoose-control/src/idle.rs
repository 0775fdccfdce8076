//! Idle strategies: what a group's thread does when a duty cycle found no work. The
//! strategy and the waiting are the core's [`IdleStrategy`] and
//! [`Idler`](mongoose_core::Idler).

pub use mongoose_core::IdleStrategy;
pub(crate) use mongoose_core::Idler;
