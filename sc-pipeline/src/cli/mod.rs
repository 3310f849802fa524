//! The `scpipe` command: `run` (the preprocessing pipeline on a file or a generated demo
//! dataset) and `generate` (a synthetic h5ad file).

pub mod allocator;
pub mod device;
mod generate;
mod hvg_flavor;
pub mod launcher;
pub mod progress;
mod run;

use crate::{Error, Result};
use clap::{Parser, Subcommand};
use std::path::Path;

#[derive(Parser, Debug)]
#[command(
    name = "scpipe",
    version,
    about = "Single-cell RNA-seq preprocessing (the scanpy recipe), CPU or GPU"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Worker threads (default: all cores).
    #[arg(long, global = true)]
    pub threads: Option<usize>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the pipeline: QC, filters, normalize, log1p, HVG, scale, PCA, neighbors.
    Run(run::RunArgs),
    /// Write a synthetic counts dataset (BENCHMARKS.md section B) as h5ad.
    Generate(generate::GenerateArgs),
}

/// Parses the command line and runs it; returns the process exit code.
pub fn main() -> std::process::ExitCode {
    connect_nccl_at_init();
    // Interrupted (Ctrl-C, SIGTERM, SIGHUP: the handler cannot tell them apart): the partial
    // outputs go, as on an error, and the exit status is the shell's for an interrupted command.
    let _ = ctrlc::set_handler(|| crate::io::exit_interrupted());
    let cli = Cli::parse();
    // HDF5 would print its own error stack; every failure is reported by our error instead.
    hdf5::silence_errors(true);
    if let Some(n) = cli.threads {
        if let Err(e) = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global()
        {
            eprintln!("error: cannot start {n} threads: {e}");
            return std::process::ExitCode::FAILURE;
        }
    }
    let result = match cli.command {
        Command::Run(args) => run::run(args),
        Command::Generate(args) => generate::generate(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Has NCCL connect the ranks of a split run when they join (beside the input's read) rather
/// than at their first collective, inside QC and the filters (on 4 H100s those two steps took
/// 0.05-0.1 s less; `benches/RESULTS.md`). A value the user set is kept. Called first thing in
/// `main`, before any thread exists: the environment must not change under a reader.
fn connect_nccl_at_init() {
    const VAR: &str = "NCCL_RUNTIME_CONNECT";
    if std::env::var_os(VAR).is_none() {
        std::env::set_var(VAR, "0");
    }
}

/// Refuses, before any work, an output path that cannot be written: its directory missing or
/// not writable, or the path a directory. Found at the end, the error would cost the whole run.
pub(crate) fn check_output_place(flag: &'static str, path: &Path) -> Result<()> {
    use std::os::unix::ffi::OsStrExt;
    if path.is_dir() {
        return Err(Error::param(
            flag,
            format!("{} is a directory; name a file", path.display()),
        ));
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        return Err(Error::param(
            flag,
            format!("the directory {} does not exist", dir.display()),
        ));
    }
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| Error::param(flag, "the path contains a NUL byte"))?;
    // SAFETY: `c` is a NUL-terminated path; access reads nothing else.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(Error::param(
            flag,
            format!("cannot write in the directory {}: {e}", dir.display()),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_places_are_checked_before_any_work() {
        let dir = std::env::temp_dir().join(format!("scpipe-places-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert!(check_output_place("-o", &dir.join("out.h5ad")).is_ok());
        assert!(
            check_output_place("-o", Path::new("out.h5ad")).is_ok(),
            "the current directory"
        );
        let missing = check_output_place("--report", &dir.join("no/r.json")).unwrap_err();
        assert!(
            missing.to_string().contains("--report")
                && missing.to_string().contains("does not exist"),
            "{missing}"
        );
        let taken = check_output_place("-o", &dir).unwrap_err().to_string();
        assert!(taken.contains("is a directory"), "{taken}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
