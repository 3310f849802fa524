// Included by the crate (`gpu::module_cache`) and by `build.rs` (kernels compiled ahead of
// time), so both compile the same text with the same options: a built-in module is one that
// run-time NVRTC would have made.

/// Options every module is compiled with (IEEE division and square root, as the CPU computes).
pub const OPTIONS: &[&str] = &["--std=c++17", "-default-device"];

/// What NVRTC compiles for a module: the common header, then the module's own source.
pub fn full_source(common: &str, module: &str) -> String {
    format!("{common}\n{module}")
}
