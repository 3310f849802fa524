//! Test support shared by every crate: the generic resource conformance suite and a seeded
//! generator (SplitMix64, as the benchmark traces use).

pub mod conformance;
mod splitmix;

pub use splitmix::SplitMix64;
