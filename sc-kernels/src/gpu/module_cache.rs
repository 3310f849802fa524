//! Kernel modules loaded into a context, once per process and device. A module comes from the
//! first of:
//! 1. the binary ([`super::built_in`]: CUBIN compiled ahead of time for the GPU's generation);
//! 2. the disk cache of CUBIN that run-time NVRTC compiled on this machine before;
//! 3. NVRTC now (the result stored in that cache);
//! 4. the binary's PTX, compiled by the driver, when this machine has no NVRTC library.
//!
//! So a GPU of a generation the build compiled for never waits for NVRTC, nor loads it.
//!
//! The disk key hashes the complete source, the GPU architecture (`sm_XY`), the NVRTC version
//! and the compile options: any change to one of them is a new entry, never a stale module. The
//! cache lives in `$SCPIPE_KERNEL_CACHE`, else the user's cache directory (`~/.cache/scpipe/
//! kernels` on Linux). Entries are written to a temporary name and renamed, so a crashed or
//! concurrent writer never leaves a torn file; an unreadable cache only costs a compile.

use rmm_cuda::cudarc::driver::{CudaContext, CudaModule};
use rmm_cuda::cudarc::nvrtc::{sys, Ptx};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::ffi::{c_char, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

/// One kernel module: a name (for messages and file names) and its CUDA C source, without the
/// common header (added here).
#[derive(Debug, Clone, Copy)]
pub struct KernelSource {
    pub name: &'static str,
    pub source: &'static str,
}

impl KernelSource {
    /// The names of the module's kernels (its `extern "C" __global__` functions), in source
    /// order.
    pub fn kernel_names(&self) -> Vec<&'static str> {
        const MARK: &str = "__global__ void";
        let mut names = Vec::new();
        let mut rest = self.source;
        while let Some(at) = rest.find(MARK) {
            rest = rest[at + MARK.len()..].trim_start();
            if let Some(after) = rest.strip_prefix("__launch_bounds__") {
                // `__launch_bounds__(...)` before the name: skip its parentheses.
                rest = after.split_once(')').map_or("", |(_, r)| r).trim_start();
            }
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            if end > 0 {
                names.push(&rest[..end]);
            }
        }
        names
    }
}

mod nvrtc_options {
    include!("nvrtc_options.rs");
}
use nvrtc_options::OPTIONS;

/// The text NVRTC compiles for `src`: `common` (the shared header), then the module's source.
pub fn full_source(common: &str, src: KernelSource) -> String {
    nvrtc_options::full_source(common, src.source)
}

/// The environment variable that overrides the cache directory (an empty value disables it).
pub const CACHE_ENV: &str = "SCPIPE_KERNEL_CACHE";

/// Where compiled modules are kept on disk; `None` when caching is disabled.
pub fn cache_dir() -> Option<PathBuf> {
    match std::env::var_os(CACHE_ENV) {
        Some(v) if v.is_empty() => None,
        Some(v) => Some(PathBuf::from(v)),
        None => dirs::cache_dir().map(|d| d.join("scpipe").join("kernels")),
    }
}

/// The disk key of a module: SHA-256 over everything that decides the compiled code.
pub fn cache_key(
    full_source: &str,
    arch: &str,
    nvrtc_version: (i32, i32),
    options: &[&str],
) -> String {
    let mut h = Sha256::new();
    for part in [
        full_source.as_bytes(),
        arch.as_bytes(),
        format!("nvrtc {}.{}", nvrtc_version.0, nvrtc_version.1).as_bytes(),
        options.join(" ").as_bytes(),
    ] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The file of a module in `dir`.
pub fn cache_path(dir: &Path, name: &str, key: &str) -> PathBuf {
    dir.join(format!("{name}-{}.cubin", &key[..32]))
}

/// Process-wide compile figures: how many modules came from the binary, how many NVRTC compiled
/// and for how long, how many came from disk, and how many the driver compiled from PTX.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CompileStats {
    pub built_in: u64,
    pub compiled: u64,
    pub compile_seconds: f64,
    pub disk_hits: u64,
    pub from_ptx: u64,
}

static BUILT_IN: AtomicU64 = AtomicU64::new(0);
static COMPILED: AtomicU64 = AtomicU64::new(0);
static COMPILE_NANOS: AtomicU64 = AtomicU64::new(0);
static DISK_HITS: AtomicU64 = AtomicU64::new(0);
static FROM_PTX: AtomicU64 = AtomicU64::new(0);

/// What this process compiled and found on disk so far.
pub fn compile_stats() -> CompileStats {
    CompileStats {
        built_in: BUILT_IN.load(Ordering::Relaxed),
        compiled: COMPILED.load(Ordering::Relaxed),
        compile_seconds: COMPILE_NANOS.load(Ordering::Relaxed) as f64 * 1e-9,
        disk_hits: DISK_HITS.load(Ordering::Relaxed),
        from_ptx: FROM_PTX.load(Ordering::Relaxed),
    }
}

/// A module's slot: filled once, by whichever thread asks first.
type Slot = Arc<OnceLock<Result<Arc<CudaModule>, String>>>;

/// Modules loaded into one CUDA context, by name. The map is locked only to find a module's
/// slot: compiling one module never holds up a thread that needs another (the warm-up thread
/// compiles every module while the steps ask for theirs).
#[derive(Default)]
pub struct ModuleCache {
    loaded: Mutex<HashMap<&'static str, Slot>>,
}

impl std::fmt::Debug for ModuleCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<_> = self.loaded.lock().unwrap().keys().copied().collect();
        write!(f, "ModuleCache({names:?})")
    }
}

impl ModuleCache {
    /// The module, loaded into `ctx` on first use (see the module's documentation for where it
    /// comes from).
    pub fn get(
        &self,
        ctx: &Arc<CudaContext>,
        arch: &str,
        src: KernelSource,
    ) -> Result<Arc<CudaModule>, String> {
        let slot = self
            .loaded
            .lock()
            .unwrap()
            .entry(src.name)
            .or_default()
            .clone();
        slot.get_or_init(|| load(ctx, arch, src)).clone()
    }
}

fn load(ctx: &Arc<CudaContext>, arch: &str, src: KernelSource) -> Result<Arc<CudaModule>, String> {
    let full = full_source(super::COMMON, src);
    let name = src.name;
    let mut rejected = None;
    if let Some(image) = super::built_in::cubin(&full, arch).filter(|_| super::built_in::enabled())
    {
        match ctx.load_module(Ptx::from_binary(image.to_vec())) {
            Ok(m) => {
                BUILT_IN.fetch_add(1, Ordering::Relaxed);
                return Ok(m);
            }
            // E.g. a driver older than the build's NVRTC: compile here instead.
            Err(e) => rejected = Some(format!("the built-in CUBIN was rejected ({e:?})")),
        }
    }
    let cubin = match cubin_for(name, &full, arch) {
        Ok(cubin) => cubin,
        Err(e) => {
            // No NVRTC here: the driver compiles the built-in PTX, if there is one.
            let Some(ptx) = super::built_in::ptx(&full).filter(|_| nvrtc_version().is_err()) else {
                let why = rejected.map_or(String::new(), |r| format!("; {r}"));
                return Err(format!("kernel module `{name}`: {e}{why}"));
            };
            let m = ctx.load_module(Ptx::from_src(ptx)).map_err(|p| {
                format!("kernel module `{name}`: {e}; the driver rejected its PTX: {p:?}")
            })?;
            FROM_PTX.fetch_add(1, Ordering::Relaxed);
            return Ok(m);
        }
    };
    ctx.load_module(Ptx::from_binary(cubin))
        .map_err(|e| format!("loading kernel module `{name}`: {e:?}"))
}

/// The CUBIN of a module: from the disk cache, else compiled (and stored).
fn cubin_for(name: &str, full: &str, arch: &str) -> Result<Vec<u8>, String> {
    let version = nvrtc_version()?;
    let key = cache_key(full, arch, version, OPTIONS);
    let dir = cache_dir();
    if let Some(dir) = &dir {
        if let Ok(bytes) = std::fs::read(cache_path(dir, name, &key)) {
            if !bytes.is_empty() {
                DISK_HITS.fetch_add(1, Ordering::Relaxed);
                return Ok(bytes);
            }
        }
    }
    let start = Instant::now();
    let cubin = compile_cubin(name, full, arch)?;
    COMPILE_NANOS.fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
    COMPILED.fetch_add(1, Ordering::Relaxed);
    if let Some(dir) = &dir {
        // A cache that cannot be written costs the next process a compile, nothing else.
        let _ = store(dir, &cache_path(dir, name, &key), &cubin);
    }
    Ok(cubin)
}

fn store(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

fn nvrtc_version() -> Result<(i32, i32), String> {
    if !unsafe { sys::is_culib_present() } {
        return Err(
            "the NVRTC library (libnvrtc) was not found; it comes with the CUDA toolkit".into(),
        );
    }
    let (mut major, mut minor) = (0, 0);
    // SAFETY: two out-parameters.
    check(
        unsafe { sys::nvrtcVersion(&mut major, &mut minor) },
        "nvrtcVersion",
    )?;
    Ok((major, minor))
}

fn check(r: sys::nvrtcResult, call: &str) -> Result<(), String> {
    if r == sys::nvrtcResult::NVRTC_SUCCESS {
        Ok(())
    } else {
        Err(format!("{call} failed: {r:?}"))
    }
}

/// Compiles `full` to CUBIN for `arch` (e.g. `sm_90`), with the compiler's log in the error.
fn compile_cubin(name: &str, full: &str, arch: &str) -> Result<Vec<u8>, String> {
    let src = CString::new(full).map_err(|_| format!("kernel `{name}` source holds a NUL"))?;
    let cname = CString::new(format!("{name}.cu")).expect("no NUL in module names");
    let mut prog: sys::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: valid C strings; no headers.
    check(
        unsafe {
            sys::nvrtcCreateProgram(
                &mut prog,
                src.as_ptr(),
                cname.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            )
        },
        "nvrtcCreateProgram",
    )?;
    let result = (|| {
        let mut opts: Vec<CString> = OPTIONS.iter().map(|o| CString::new(*o).unwrap()).collect();
        opts.push(CString::new(format!("--gpu-architecture={arch}")).unwrap());
        let ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();
        // SAFETY: `prog` is live; the option strings outlive the call.
        let r = unsafe { sys::nvrtcCompileProgram(prog, ptrs.len() as i32, ptrs.as_ptr()) };
        if r != sys::nvrtcResult::NVRTC_SUCCESS {
            return Err(format!(
                "NVRTC could not compile kernel module `{name}` for {arch} ({r:?}):\n{}",
                program_log(prog)
            ));
        }
        let mut size = 0usize;
        // SAFETY: compiled program, out-parameter.
        check(
            unsafe { sys::nvrtcGetCUBINSize(prog, &mut size) },
            "nvrtcGetCUBINSize",
        )?;
        let mut cubin = vec![0u8; size];
        // SAFETY: `cubin` has the size NVRTC reported.
        check(
            unsafe { sys::nvrtcGetCUBIN(prog, cubin.as_mut_ptr() as *mut c_char) },
            "nvrtcGetCUBIN",
        )?;
        Ok(cubin)
    })();
    // SAFETY: created above, destroyed once.
    unsafe { sys::nvrtcDestroyProgram(&mut prog) };
    result
}

fn program_log(prog: sys::nvrtcProgram) -> String {
    let mut size = 0usize;
    // SAFETY: live program.
    if unsafe { sys::nvrtcGetProgramLogSize(prog, &mut size) } != sys::nvrtcResult::NVRTC_SUCCESS {
        return "(no log)".into();
    }
    let mut log = vec![0 as c_char; size.max(1)];
    // SAFETY: buffer of the reported size.
    unsafe { sys::nvrtcGetProgramLog(prog, log.as_mut_ptr()) };
    // SAFETY: NVRTC writes a NUL-terminated string.
    unsafe { CStr::from_ptr(log.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_names_are_read_from_the_source() {
        let src = KernelSource {
            name: "t",
            source: "extern \"C\" __global__ void a(int x) {}\n__device__ void not_a_kernel() {}\n\
                     extern \"C\" __global__ void __launch_bounds__(256, 2) b_2(float* y) {}",
        };
        assert_eq!(src.kernel_names(), ["a", "b_2"]);
    }

    #[test]
    fn key_changes_with_each_input_and_is_stable() {
        let k = cache_key("src", "sm_90", (13, 0), &["-a"]);
        assert_eq!(k.len(), 64);
        assert_eq!(k, cache_key("src", "sm_90", (13, 0), &["-a"]));
        for other in [
            cache_key("src2", "sm_90", (13, 0), &["-a"]),
            cache_key("src", "sm_80", (13, 0), &["-a"]),
            cache_key("src", "sm_90", (13, 1), &["-a"]),
            cache_key("src", "sm_90", (13, 0), &["-b"]),
            // Length prefixes keep moved boundaries apart.
            cache_key("srcs", "m_90", (13, 0), &["-a"]),
        ] {
            assert_ne!(k, other);
        }
    }

    #[test]
    fn cache_dir_follows_the_environment() {
        // One test touches the variable, so no other test races it.
        std::env::set_var(CACHE_ENV, "/tmp/x-kernels");
        assert_eq!(cache_dir(), Some(PathBuf::from("/tmp/x-kernels")));
        std::env::set_var(CACHE_ENV, "");
        assert_eq!(cache_dir(), None);
        std::env::remove_var(CACHE_ENV);
        assert!(cache_dir().is_some_and(|d| d.ends_with("scpipe/kernels")));
    }

    #[test]
    fn store_writes_whole_files_only() {
        let dir = std::env::temp_dir().join(format!("scpipe-cache-test-{}", std::process::id()));
        let p = cache_path(&dir, "qc", &"ab".repeat(32));
        store(&dir, &p, b"cubin bytes").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"cubin bytes");
        let leftovers: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.path() != p)
            .collect();
        assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
