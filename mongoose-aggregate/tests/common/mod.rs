//! Helpers shared by the aggregate's tests.
#![allow(dead_code, unreachable_pub)]

use mongoose_aggregate::{
    Aggregate, AggregateError, AggregateSettings, Aggregator, LinePosition, Outcome,
};

/// The settings table path the tests compile at.
pub const AT: &str = "processors[alerts].settings";

/// Compiles a settings table written in TOML.
pub fn compile(settings: &str) -> Result<Aggregator, AggregateError> {
    let settings: AggregateSettings = toml::from_str(settings).expect("the settings deserialize");
    Aggregator::compile(settings, AT)
}

/// A new aggregate of a settings table written in TOML.
pub fn aggregate(settings: &str) -> Aggregate {
    Aggregate::new(compile(settings).expect("the settings compile"))
}

/// Applies `lines` in order at positions 1, 2, 3... of lane 0, epoch 1.
pub fn apply_all(aggregate: &mut Aggregate, lines: &[String]) -> Vec<Outcome> {
    lines
        .iter()
        .enumerate()
        .map(|(index, line)| {
            aggregate.apply(LinePosition::at(1, index as u64 + 1), line.as_bytes())
        })
        .collect()
}

/// A tiny seeded generator (xorshift64*), for inputs that tests repeat exactly.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }
}
