//! `scpipe generate N_CELLS N_GENES -o FILE.h5ad [--seed S]`.

use crate::synthetic::{generate_to_h5ad, SyntheticParams};
use crate::{Error, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args, Debug)]
pub struct GenerateArgs {
    /// Number of cells.
    pub n_cells: usize,
    /// Number of genes.
    pub n_genes: usize,
    /// Output h5ad file.
    #[arg(short, long)]
    pub output: PathBuf,
    /// Seed of the generator (same seed, same file, whatever the thread count).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Distinct genes a normal cell expresses, as MIN-MAX.
    #[arg(long, default_value = "1500-2500", value_parser = parse_range)]
    pub genes_per_cell: (usize, usize),
}

pub(crate) fn parse_range(s: &str) -> std::result::Result<(usize, usize), String> {
    let (a, b) = s
        .split_once('-')
        .ok_or_else(|| format!("'{s}' is not MIN-MAX"))?;
    let a: usize = a
        .trim()
        .parse()
        .map_err(|_| format!("'{a}' is not a number"))?;
    let b: usize = b
        .trim()
        .parse()
        .map_err(|_| format!("'{b}' is not a number"))?;
    if a > b {
        return Err(format!("{a} is larger than {b}"));
    }
    Ok((a, b))
}

pub fn generate(args: GenerateArgs) -> Result<()> {
    if args.n_cells == 0 {
        return Err(Error::param("generate", "N_CELLS must be at least 1"));
    }
    crate::run::plan::check_output_place("-o", &args.output)?;
    let mut params = SyntheticParams::new(args.n_cells, args.n_genes, args.seed);
    params.genes_per_cell = args.genes_per_cell;
    let start = Instant::now();
    let bar =
        ProgressBar::with_draw_target(Some(args.n_cells as u64), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template(
            "generating {bar:40} {pos}/{len} cells ({elapsed}, eta {eta})",
        )
        .expect("valid template"),
    );
    let written = generate_to_h5ad(&params, &args.output, &|cells| {
        bar.set_position(cells as u64)
    });
    bar.finish_and_clear();
    let nnz = written?;
    println!(
        "wrote {}: {} cells x {} genes, {nnz} stored counts in {:.2} s",
        args.output.display(),
        args.n_cells,
        args.n_genes,
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
