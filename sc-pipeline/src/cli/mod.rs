//! The `scpipe` command: `run` (the preprocessing pipeline on a file or a generated demo
//! dataset) and `generate` (a synthetic h5ad file).

pub mod device;
mod generate;
mod graph_steps;
mod hvg_flavor;
pub mod progress;
mod run;

use clap::{Parser, Subcommand};

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
    /// Run the pipeline: QC, filters, normalize, log1p, HVG, scale, PCA, neighbors, UMAP,
    /// Leiden and marker genes.
    Run(run::RunArgs),
    /// Write a synthetic counts dataset (benches/WORKLOADS.md section B) as h5ad.
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
/// 0.05-0.1 s less; `benches/results/LOG.md`, 2026-11-26). A value the user set is kept. Called first thing in
/// `main`, before any thread exists: the environment must not change under a reader.
fn connect_nccl_at_init() {
    const VAR: &str = "NCCL_RUNTIME_CONNECT";
    if std::env::var_os(VAR).is_none() {
        std::env::set_var(VAR, "0");
    }
}
