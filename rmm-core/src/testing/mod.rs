//! Test support shared by every crate: the generic resource conformance suite, the multi-thread
//! hand-over stress test, and a seeded generator (SplitMix64, as the benchmark traces use).

pub mod callback;
pub mod conformance;
mod live_set;
mod splitmix;
pub mod stress;

pub use splitmix::SplitMix64;
