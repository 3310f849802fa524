//! Test support shared by every crate: the generic resource conformance suite, the multi-thread
//! hand-over stress test, a seeded generator (SplitMix64, as the benchmark traces use), and the
//! fragmentation of a pool replaying an allocation log.

pub mod callback;
pub mod conformance;
mod fragmentation;
mod live_set;
mod splitmix;
pub mod stress;

pub use fragmentation::{fragmentation_at_peak, Fragmentation};
pub use splitmix::SplitMix64;
