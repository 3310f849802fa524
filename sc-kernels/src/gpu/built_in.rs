//! Kernel modules compiled ahead of time by `build.rs` and shipped in the binary: CUBIN for the
//! common GPU generations, PTX for later ones. A module is found by the hash of the very text
//! run-time NVRTC would compile, so a built-in image is never stale: a source the build did not
//! see simply has none, and `module_cache` compiles it.

use sha2::{Digest, Sha256};

/// One module's images.
struct BuiltIn {
    /// The file's stem (e.g. `knn_tensor`), for messages.
    name: &'static str,
    /// SHA-256 (hex) of the module's full source (common header and module).
    source_sha256: &'static str,
    /// `(target, CUBIN)`, e.g. `("sm_90", ...)`.
    cubins: &'static [(&'static str, &'static [u8])],
    /// PTX for the oldest target, which the driver compiles for any later GPU.
    ptx: &'static str,
}

include!(concat!(env!("OUT_DIR"), "/built_in_kernels.rs"));

/// The environment variable that, set to `0`, makes every module come from NVRTC (and its disk
/// cache) instead of the binary: for comparing the two, or a driver that rejects the images.
pub const BUILT_IN_ENV: &str = "SCPIPE_BUILT_IN_KERNELS";

/// Whether built-in images may be used (not switched off by [`BUILT_IN_ENV`]).
pub fn enabled() -> bool {
    std::env::var_os(BUILT_IN_ENV).is_none_or(|v| v != "0")
}

/// The NVRTC version that compiled the built-in modules (`None`: the build had no NVRTC).
pub fn nvrtc_version() -> Option<&'static str> {
    (!NVRTC.is_empty()).then_some(NVRTC)
}

/// The built-in modules, by their files' names.
pub fn module_names() -> Vec<&'static str> {
    MODULES.iter().map(|m| m.name).collect()
}

fn module(full_source: &str) -> Option<&'static BuiltIn> {
    let hash: String = Sha256::digest(full_source.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    MODULES.iter().find(|m| m.source_sha256 == hash)
}

/// `(major, minor)` of `sm_XY` / `sm_XYZ` (the last digit is the minor version).
fn version_of(target: &str) -> Option<(u32, u32)> {
    let digits = target.strip_prefix("sm_")?;
    let v: u32 = digits.parse().ok()?;
    Some((v / 10, v % 10))
}

/// Of `targets`, the one whose CUBIN runs on `arch`: a CUBIN runs on its own major version's
/// later minor versions only, so the newest target of `arch`'s major not above its minor.
pub fn cubin_target_for<'a>(arch: &str, targets: &[&'a str]) -> Option<&'a str> {
    let (major, minor) = version_of(arch)?;
    targets
        .iter()
        .copied()
        .filter_map(|t| version_of(t).map(|v| (v, t)))
        .filter(|&((ma, mi), _)| ma == major && mi <= minor)
        .max_by_key(|&(v, _)| v)
        .map(|(_, t)| t)
}

/// The built-in CUBIN of the module whose full source is `full_source`, for a GPU of `arch`.
pub fn cubin(full_source: &str, arch: &str) -> Option<&'static [u8]> {
    let m = module(full_source)?;
    let targets: Vec<&str> = m.cubins.iter().map(|(t, _)| *t).collect();
    let target = cubin_target_for(arch, &targets)?;
    m.cubins.iter().find(|(t, _)| *t == target).map(|(_, c)| *c)
}

/// The built-in PTX of the module whose full source is `full_source`.
pub fn ptx(full_source: &str) -> Option<&'static str> {
    module(full_source).map(|m| m.ptx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cubin_serves_its_own_major_version_only() {
        let t = ["sm_80", "sm_90", "sm_100", "sm_120"];
        assert_eq!(cubin_target_for("sm_80", &t), Some("sm_80"));
        assert_eq!(cubin_target_for("sm_86", &t), Some("sm_80"));
        assert_eq!(cubin_target_for("sm_89", &t), Some("sm_80"));
        assert_eq!(cubin_target_for("sm_90", &t), Some("sm_90"));
        assert_eq!(cubin_target_for("sm_103", &t), Some("sm_100"));
        assert_eq!(cubin_target_for("sm_121", &t), Some("sm_120"));
        assert_eq!(cubin_target_for("sm_75", &t), None);
        assert_eq!(cubin_target_for("sm_110", &t), None);
        assert_eq!(
            cubin_target_for("sm_86", &["sm_80", "sm_86", "sm_87"]),
            Some("sm_86")
        );
        assert_eq!(cubin_target_for("garbage", &t), None);
    }

    /// The build compiles every module it finds; this checks that what it found is what the
    /// crate loads (same text, so the same hash), and that each image is what it claims.
    #[test]
    fn every_module_is_built_in_for_every_target() {
        if nvrtc_version().is_none() {
            // The build found no NVRTC and said so in a cargo warning. `run-tests` installs
            // it, so CI never takes this branch.
            eprintln!("skipped: this build has no built-in kernels (no NVRTC at build time)");
            return;
        }
        let common = super::super::COMMON;
        for m in crate::warm_up::all_modules() {
            let full = super::super::module_cache::full_source(common, m);
            assert!(module(&full).is_some(), "`{}` is not built in", m.name);
            for arch in ["sm_80", "sm_86", "sm_90", "sm_100", "sm_120"] {
                let c = cubin(&full, arch).unwrap_or_else(|| panic!("{} {arch}", m.name));
                assert_eq!(&c[..4], b"\x7fELF", "{} {arch} is no CUBIN", m.name);
            }
            let p = ptx(&full).unwrap();
            assert!(p.contains(".target sm_80"), "{}: PTX for sm_80", m.name);
            for k in m.kernel_names() {
                assert!(
                    p.contains(&format!(".entry {k}(")),
                    "{}: no kernel {k}",
                    m.name
                );
            }
        }
        assert_eq!(module_names().len(), crate::warm_up::all_modules().len());
    }
}
