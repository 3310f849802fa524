//! Compiles every kernel module ahead of time, so a run loads machine code from the binary
//! instead of waiting for NVRTC (seconds on a machine's first process): CUBIN for the common
//! GPU generations and PTX as the fallback the driver can compile for newer ones. The run-time
//! NVRTC path stays for every other GPU (`gpu::module_cache`).
//!
//! NVRTC is a library, not a GPU: it comes from the `nvidia-cuda-nvrtc` wheel that
//! `scripts/env.sh` installs into the workspace's `.venv`, or from `SCPIPE_NVRTC` (the path of
//! `libnvrtc.so`; empty to build without built-in kernels). Without either, the build still
//! works and every module is compiled at run time, as before. A module that does not compile
//! fails the build, with NVRTC's log: CI compiles every kernel for every target.
//!
//! Compiled images are kept in `OUT_DIR` by a hash of what decides them, so a rerun (any change
//! under `src/`) compiles only the modules whose text changed.

use libloading::Library;
use sha2::{Digest, Sha256};
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};

mod nvrtc_options {
    include!("src/gpu/nvrtc_options.rs");
}

/// CUBIN targets: each runs on its generation's later minor versions (sm_80 on sm_86 and
/// sm_89, sm_100 on sm_103, sm_120 on sm_121).
const CUBIN_TARGETS: &[&str] = &["sm_80", "sm_90", "sm_100", "sm_120"];
/// PTX for any later generation, compiled by the driver on first load.
const PTX_TARGET: &str = "compute_80";

type Prog = *mut c_void;

/// The NVRTC functions the build uses, resolved from one loaded library.
struct Nvrtc {
    _builtins: Option<Library>,
    lib: Library,
}

impl Nvrtc {
    fn open(path: &Path) -> Result<Nvrtc, String> {
        // libnvrtc opens its builtins library by name; loading it first from the same folder
        // makes that work without LD_LIBRARY_PATH (the wheel's folder is on no search path).
        let builtins = std::fs::read_dir(path.parent().unwrap_or(Path::new(".")))
            .ok()
            .and_then(|d| {
                d.filter_map(|e| e.ok()).map(|e| e.path()).find(|p| {
                    let n = p.file_name().unwrap_or_default().to_string_lossy();
                    n.starts_with("libnvrtc-builtins.so") && !n.contains(".alt.")
                })
            });
        // SAFETY: loading NVRTC's own libraries, whose initialisers are safe to run.
        let builtins = match builtins {
            Some(b) => Some(unsafe { Library::new(&b) }.map_err(|e| format!("{b:?}: {e}"))?),
            None => None,
        };
        let lib = unsafe { Library::new(path) }.map_err(|e| format!("{path:?}: {e}"))?;
        Ok(Nvrtc {
            _builtins: builtins,
            lib,
        })
    }

    fn sym<T: Copy>(&self, name: &str) -> T {
        // SAFETY: each name below is declared with NVRTC's documented signature.
        unsafe {
            *self
                .lib
                .get::<T>(name.as_bytes())
                .unwrap_or_else(|e| panic!("{name}: {e}"))
        }
    }

    fn check(&self, r: c_int, call: &str) -> Result<(), String> {
        if r == 0 {
            return Ok(());
        }
        let msg: unsafe extern "C" fn(c_int) -> *const c_char = self.sym("nvrtcGetErrorString");
        // SAFETY: NVRTC returns a static NUL-terminated string.
        let text = unsafe { CStr::from_ptr(msg(r)) }.to_string_lossy();
        Err(format!("{call}: {text}"))
    }

    fn version(&self) -> (i32, i32) {
        let f: unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int = self.sym("nvrtcVersion");
        let (mut a, mut b) = (0, 0);
        // SAFETY: two out-parameters.
        self.check(unsafe { f(&mut a, &mut b) }, "nvrtcVersion")
            .unwrap();
        (a, b)
    }

    /// The `sm_XY` targets this NVRTC can compile for.
    fn supported(&self) -> Vec<String> {
        let num: unsafe extern "C" fn(*mut c_int) -> c_int = self.sym("nvrtcGetNumSupportedArchs");
        let list: unsafe extern "C" fn(*mut c_int) -> c_int = self.sym("nvrtcGetSupportedArchs");
        let mut n = 0;
        // SAFETY: out-parameter, then a buffer of the size NVRTC reported.
        self.check(unsafe { num(&mut n) }, "nvrtcGetNumSupportedArchs")
            .unwrap();
        let mut archs = vec![0; n as usize];
        self.check(
            unsafe { list(archs.as_mut_ptr()) },
            "nvrtcGetSupportedArchs",
        )
        .unwrap();
        archs.iter().map(|a| format!("sm_{a}")).collect()
    }

    /// `full` compiled for `target`: CUBIN for `sm_XY`, PTX for `compute_XY`.
    fn compile(&self, name: &str, full: &str, target: &str) -> Result<Vec<u8>, String> {
        type Create = unsafe extern "C" fn(
            *mut Prog,
            *const c_char,
            *const c_char,
            c_int,
            *const *const c_char,
            *const *const c_char,
        ) -> c_int;
        type Compile = unsafe extern "C" fn(Prog, c_int, *const *const c_char) -> c_int;
        type Size = unsafe extern "C" fn(Prog, *mut usize) -> c_int;
        type Get = unsafe extern "C" fn(Prog, *mut c_char) -> c_int;
        type Destroy = unsafe extern "C" fn(*mut Prog) -> c_int;
        let ptx = target.starts_with("compute_");
        let (size_fn, get_fn) = if ptx {
            ("nvrtcGetPTXSize", "nvrtcGetPTX")
        } else {
            ("nvrtcGetCUBINSize", "nvrtcGetCUBIN")
        };
        let src = CString::new(full).map_err(|_| format!("`{name}` holds a NUL"))?;
        let cname = CString::new(format!("{name}.cu")).unwrap();
        let mut prog: Prog = std::ptr::null_mut();
        let create: Create = self.sym("nvrtcCreateProgram");
        // SAFETY: valid C strings; no headers.
        self.check(
            unsafe {
                create(
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
            let mut opts: Vec<CString> = nvrtc_options::OPTIONS
                .iter()
                .map(|o| CString::new(*o).unwrap())
                .collect();
            opts.push(CString::new(format!("--gpu-architecture={target}")).unwrap());
            let ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();
            let compile: Compile = self.sym("nvrtcCompileProgram");
            // SAFETY: live program; the option strings outlive the call.
            let r = unsafe { compile(prog, ptrs.len() as c_int, ptrs.as_ptr()) };
            if r != 0 {
                return Err(format!(
                    "NVRTC could not compile `{name}` for {target}:\n{}",
                    self.log(prog)
                ));
            }
            let mut size = 0usize;
            let size_of: Size = self.sym(size_fn);
            let get: Get = self.sym(get_fn);
            // SAFETY: compiled program; a buffer of the reported size.
            self.check(unsafe { size_of(prog, &mut size) }, size_fn)?;
            let mut out = vec![0u8; size];
            self.check(
                unsafe { get(prog, out.as_mut_ptr() as *mut c_char) },
                get_fn,
            )?;
            if ptx {
                // PTX comes NUL-terminated; the crate embeds it as text.
                while out.last() == Some(&0) {
                    out.pop();
                }
            }
            Ok(out)
        })();
        let destroy: Destroy = self.sym("nvrtcDestroyProgram");
        // SAFETY: created above, destroyed once.
        unsafe { destroy(&mut prog) };
        result
    }

    fn log(&self, prog: Prog) -> String {
        let size_of: unsafe extern "C" fn(Prog, *mut usize) -> c_int =
            self.sym("nvrtcGetProgramLogSize");
        let get: unsafe extern "C" fn(Prog, *mut c_char) -> c_int = self.sym("nvrtcGetProgramLog");
        let mut size = 0usize;
        // SAFETY: live program; a buffer of the reported size.
        if unsafe { size_of(prog, &mut size) } != 0 {
            return "(no log)".into();
        }
        let mut log = vec![0 as c_char; size.max(1)];
        unsafe { get(prog, log.as_mut_ptr()) };
        // SAFETY: NVRTC writes a NUL-terminated string.
        unsafe { CStr::from_ptr(log.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    }
}

/// Where NVRTC is: `SCPIPE_NVRTC` (`Some(None)` when set empty: built-in kernels off), else the
/// workspace venv's wheel, else a CUDA toolkit's.
fn nvrtc_path(manifest: &Path) -> Option<PathBuf> {
    if let Some(v) = std::env::var_os("SCPIPE_NVRTC") {
        return (!v.is_empty()).then(|| PathBuf::from(v));
    }
    let venv_lib = manifest.join("../.venv/lib");
    let wheels = std::fs::read_dir(&venv_lib)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .map(|e| {
            e.path()
                .join("site-packages/nvidia/cu13/lib/libnvrtc.so.13")
        });
    let toolkits = [
        std::env::var_os("CUDA_PATH"),
        Some("/usr/local/cuda".into()),
    ]
    .into_iter()
    .flatten()
    .map(|p| PathBuf::from(p).join("lib64/libnvrtc.so"));
    wheels.chain(toolkits).find(|p| p.exists())
}

fn cu_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            cu_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "cu") {
            out.push(p);
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").unwrap());
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-env-changed=SCPIPE_NVRTC");
    println!("cargo:rerun-if-env-changed=CUDA_PATH");
    let table = out_dir.join("built_in_kernels.rs");
    let Some(path) = nvrtc_path(&manifest) else {
        // Set empty by choice (`./scpipe` on a machine without NVIDIA's driver): nothing to say.
        if std::env::var_os("SCPIPE_NVRTC").is_none() {
            println!(
                "cargo:warning=no NVRTC found (scripts/env.sh installs it into .venv): kernels \
                 will be compiled at run time"
            );
        }
        std::fs::write(
            &table,
            "const NVRTC: &str = \"\";\nconst MODULES: &[BuiltIn] = &[];\n",
        )
        .unwrap();
        return;
    };
    println!("cargo:rerun-if-changed={}", path.display());
    let nvrtc = Nvrtc::open(&path).unwrap_or_else(|e| panic!("loading NVRTC: {e}"));
    let version = nvrtc.version();
    let supported = nvrtc.supported();
    let targets: Vec<&str> = CUBIN_TARGETS
        .iter()
        .copied()
        .filter(|t| supported.iter().any(|s| s == t))
        .chain([PTX_TARGET])
        .collect();

    let common = std::fs::read_to_string(manifest.join("src/gpu/common.cuh")).unwrap();
    let mut files = Vec::new();
    cu_files(&manifest.join("src"), &mut files);
    let images_dir = out_dir.join("kernels");
    std::fs::create_dir_all(&images_dir).unwrap();

    // (module, its source's hash, target, image file): compiled unless already in OUT_DIR.
    let mut jobs = Vec::new();
    for file in &files {
        let name = file.file_stem().unwrap().to_string_lossy().into_owned();
        let full = nvrtc_options::full_source(&common, &std::fs::read_to_string(file).unwrap());
        let source_hash = hex(&Sha256::digest(full.as_bytes()));
        for &target in &targets {
            let mut key = Sha256::new();
            for part in [
                full.as_str(),
                target,
                &format!("{version:?}"),
                &nvrtc_options::OPTIONS.join(" "),
            ] {
                key.update((part.len() as u64).to_le_bytes());
                key.update(part.as_bytes());
            }
            let ext = if target.starts_with("sm_") {
                "cubin"
            } else {
                "ptx"
            };
            let image = images_dir.join(format!(
                "{name}.{target}.{}.{ext}",
                &hex(&key.finalize())[..16]
            ));
            jobs.push((
                name.clone(),
                full.clone(),
                source_hash.clone(),
                target,
                image,
            ));
        }
    }
    let threads = std::env::var("NUM_JOBS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2usize)
        .max(1);
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some((name, full, _, target, image)) = jobs.get(i) else {
                    return;
                };
                if image.exists() {
                    continue;
                }
                let bytes = nvrtc
                    .compile(name, full, target)
                    .unwrap_or_else(|e| panic!("{e}"));
                let tmp = image.with_extension("tmp");
                std::fs::write(&tmp, bytes).unwrap();
                std::fs::rename(&tmp, image).unwrap();
            });
        }
    });

    let mut rs = format!("const NVRTC: &str = \"{}.{}\";\n", version.0, version.1);
    rs += "const MODULES: &[BuiltIn] = &[\n";
    for chunk in jobs.chunks(targets.len()) {
        let (name, _, hash, _, _) = &chunk[0];
        rs += &format!("    BuiltIn {{ name: {name:?}, source_sha256: {hash:?}, cubins: &[\n");
        for (_, _, _, target, image) in chunk.iter().filter(|j| j.3.starts_with("sm_")) {
            rs += &format!("        ({target:?}, include_bytes!({:?})),\n", image);
        }
        let ptx = &chunk.iter().find(|j| j.3 == PTX_TARGET).unwrap().4;
        rs += &format!("    ], ptx: include_str!({ptx:?}) }},\n");
    }
    rs += "];\n";
    std::fs::write(&table, rs).unwrap();
}
