//! Benchmarks live in `benches/`; this library holds their shared helpers.
