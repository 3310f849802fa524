//! `calculate_qc_metrics` (scanpy's `pp.calculate_qc_metrics`).
//!
//! Writes into `obs`: `n_genes_by_counts`, `log1p_n_genes_by_counts`, `total_counts`,
//! `log1p_total_counts`, `pct_counts_in_top_{n}_genes`, and for each QC variable `q`:
//! `total_counts_{q}`, `log1p_total_counts_{q}`, `pct_counts_{q}`. Into `var`:
//! `n_cells_by_counts`, `mean_counts`, `log1p_mean_counts`, `pct_dropout_by_counts`,
//! `total_counts`, `log1p_total_counts`.

use super::kernel_error;
use super::step::{
    no_budget_check, no_device_bytes, no_input_check, OnGenerated, Phase, Step, StepEnv,
};
use crate::anndata::{ArrayData, Column};
use crate::steps::GeneratedPass;
use crate::{AnnData, Error, Result};
use sc_kernels::qc::{QcMetrics, QcParams};

/// The pipeline's row: the `mt` genes by `--mito-prefix`, scanpy's default `percent_top`.
pub(crate) const ROW: Step = Step {
    name: "calculate_qc_metrics",
    phase: Phase::PerCell,
    enabled: |c| c.qc_mito_prefix.is_some(),
    run: run_step,
    generated: Some(OnGenerated {
        name: "calculate_qc_metrics",
        run: run_generated,
    }),
    device_bytes: no_device_bytes,
    kernels: &[sc_kernels::qc::KERNELS],
    check_input: no_input_check,
    check_budget: no_budget_check,
    beside: false,
    waits_for_beside: false,
};

/// The `mt` genes' prefix for `a`'s gene names, and whether it was detected.
fn mito_prefix<'a>(env: &StepEnv<'a>, a: &AnnData) -> (&'a str, bool) {
    env.config
        .qc_mito_prefix
        .as_ref()
        .expect("the row runs only with a prefix")
        .resolve(&a.var.index)
}

fn run_step(a: &mut AnnData, env: &StepEnv<'_>) -> Result<String> {
    let prefix = mito_prefix(env, a);
    let n_mt = annotate_gene_prefix(a, "mt", prefix.0)?;
    let tops = default_percent_top(a.n_vars());
    calculate_qc_metrics(a, &["mt"], &tops, true)?;
    Ok(mito_qc_note(n_mt, prefix, a.n_vars()))
}

fn run_generated(
    a: &mut AnnData,
    env: &StepEnv<'_>,
    pass: &mut GeneratedPass<'_>,
) -> Result<String> {
    let prefix = mito_prefix(env, a);
    let n_mt = annotate_gene_prefix(a, "mt", prefix.0)?;
    let mask = match a.var.column("mt") {
        Some(Column::Values(ArrayData::Bool(m))) => m.clone(),
        _ => {
            return Err(Error::invalid(
                "var['mt']",
                "the mitochondrial flags are missing",
            ))
        }
    };
    let params = QcParams {
        qc_vars: vec![("mt".into(), mask)],
        percent_top: default_percent_top(a.n_vars()),
        log1p: true,
    };
    let plan = super::generated_ahead_plan(env.config, a);
    let (metrics, ahead) = super::generated_ahead::qc_pass(pass, &params, plan.as_ref())
        .map_err(kernel_error("calculate_qc_metrics"))?;
    if pass.source.non_negative() && pass.chain.is_identity() {
        if let Some(sc_kernels::columns::Column::I32(genes)) =
            metrics.obs_column("n_genes_by_counts")
        {
            pass.genes_per_cell = Some(genes.clone());
        }
    }
    store_qc_metrics(a, metrics)?;
    let ahead_note = match &ahead {
        Some(_) => "; in the same pass, what filter_genes, HVG and scale read",
        None => "",
    };
    pass.ahead = ahead;
    Ok(mito_qc_note(n_mt, prefix, a.n_vars()) + ahead_note)
}

/// Adds the boolean `var[name]`: genes whose name starts with `prefix` (scanpy's recipe
/// `adata.var['mt'] = adata.var_names.str.startswith('MT-')`). Returns how many genes match.
pub fn annotate_gene_prefix(adata: &mut AnnData, name: &str, prefix: &str) -> Result<usize> {
    let flags: Vec<bool> = adata
        .var
        .index
        .iter()
        .map(|g| g.starts_with(prefix))
        .collect();
    let n = flags.iter().filter(|&&f| f).count();
    adata.var.set_values(name, ArrayData::Bool(flags))?;
    Ok(n)
}

/// scanpy's default `percent_top` positions.
const DEFAULT_PERCENT_TOP: [usize; 4] = [50, 100, 200, 500];

/// The positions of scanpy's default `percent_top` that a matrix of `n_vars` genes holds: the
/// pipeline's QC keeps the `pct_counts_in_top_N_genes` columns it can compute on a targeted
/// panel of fewer than 500 genes, where scanpy's default would refuse the data.
pub fn default_percent_top(n_vars: usize) -> Vec<usize> {
    DEFAULT_PERCENT_TOP
        .into_iter()
        .filter(|&n| n <= n_vars)
        .collect()
}

/// The pipeline's QC step's note: the mitochondrial genes (`n_mt` whose names start with
/// `prefix`, detected or given), then which default `percent_top` positions a panel of `n_vars`
/// genes leaves out.
fn mito_qc_note(n_mt: usize, (prefix, detected): (&str, bool), n_vars: usize) -> String {
    let how = match (n_mt, detected) {
        (0, true) => format!(
            "; no gene starts with {}: pct_counts_mt is 0, give --mito-prefix",
            crate::steps::MitoPrefix::DETECTED
                .map(|p| format!("'{p}'"))
                .join(" or ")
        ),
        (0, false) => ": pct_counts_mt is 0".to_string(),
        (_, true) => ", found in the gene names".to_string(),
        _ => String::new(),
    };
    format!(
        "qc_vars=['mt'] ({n_mt} genes start with '{prefix}'{how}){}",
        percent_top_note(n_vars)
    )
}

/// The end of the QC step's note: which default `percent_top` positions a panel of `n_vars`
/// genes leaves out, if any.
fn percent_top_note(n_vars: usize) -> String {
    let tops = default_percent_top(n_vars);
    match tops.last() {
        _ if tops.len() == DEFAULT_PERCENT_TOP.len() => String::new(),
        None => format!("; no pct_counts_in_top_N_genes: {n_vars} genes, fewer than 50"),
        Some(top) => format!("; pct_counts_in_top_N_genes up to N={top} only: {n_vars} genes"),
    }
}

/// Computes the QC metrics of the counts in X. `qc_vars` names boolean `var` columns (such as
/// the `mt` column of [`annotate_gene_prefix`]).
pub fn calculate_qc_metrics(
    adata: &mut AnnData,
    qc_vars: &[&str],
    percent_top: &[usize],
    log1p: bool,
) -> Result<()> {
    const STEP: &str = "calculate_qc_metrics";
    let mut masks = Vec::with_capacity(qc_vars.len());
    for &q in qc_vars {
        let mask = match adata.var.column(q) {
            Some(Column::Values(ArrayData::Bool(v))) => v.clone(),
            Some(_) => {
                return Err(Error::param(
                    STEP,
                    format!("qc_vars: var['{q}'] is not a boolean column"),
                ))
            }
            None => {
                return Err(Error::Missing {
                    step: STEP,
                    problem: format!("qc_vars: var has no column '{q}'"),
                })
            }
        };
        masks.push((q.to_string(), mask));
    }
    let params = QcParams {
        qc_vars: masks,
        percent_top: percent_top.to_vec(),
        log1p,
    };
    let metrics = if adata.comm().size() > 1 {
        qc_across(adata, &params)
    } else if let Some((ctx, x, block)) = super::streamed_csr(adata) {
        sc_kernels::qc::calculate_qc_metrics_streamed(&ctx, x, &params, block)
    } else if let Some((ctx, x)) = super::device_csr(adata) {
        sc_kernels::qc::calculate_qc_metrics_gpu(&ctx, x, &params)
    } else {
        sc_kernels::qc::calculate_qc_metrics(adata.x.to_csr()?.as_ref(), &params)
    }
    .map_err(kernel_error(STEP))?;
    store_qc_metrics(adata, metrics)
}

/// Writes the metrics' columns into `obs` and `var`.
fn store_qc_metrics(adata: &mut AnnData, metrics: QcMetrics) -> Result<()> {
    for (name, col) in metrics.obs {
        adata.obs.set_values(name, col.into())?;
    }
    for (name, col) in metrics.var {
        adata.var.set_values(name, col.into())?;
    }
    Ok(())
}

/// The metrics of one rank's cells: per-cell sums of its own, per-gene sums added over the ranks
/// (the per-gene columns describe all cells).
fn qc_across(adata: &AnnData, params: &QcParams) -> sc_kernels::Result<QcMetrics> {
    use sc_kernels::comm::{all_reduce_counts, sum_count};
    let comm = adata.comm();
    let ns = sc_kernels::qc::check_params(adata.n_vars(), params)?;
    let mut sums = if let Some((ctx, x)) = super::device_csr(adata) {
        sc_kernels::qc::qc_sums_gpu(&ctx, x, params, &ns)?
    } else {
        let x = adata
            .x
            .to_csr()
            .map_err(|e| sc_kernels::KernelError::Unsupported(e.to_string()))?;
        x.check_finite()?;
        sc_kernels::qc::qc_sums(x.as_ref(), params, &ns)
    };
    all_reduce_counts(comm, &mut sums.gene_n_cells)?;
    comm.all_reduce_sum(&mut sums.gene_sums)?;
    let n_all = sum_count(comm, adata.n_obs())?;
    Ok(sc_kernels::qc::assemble::<f32>(&sums, params, &ns, n_all))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_panel_keeps_the_top_positions_it_holds() {
        assert_eq!(default_percent_top(20_000), [50, 100, 200, 500]);
        assert_eq!(percent_top_note(500), "");
        assert_eq!(default_percent_top(343), [50, 100, 200]);
        assert!(percent_top_note(343).contains("up to N=200 only: 343 genes"));
        assert!(default_percent_top(49).is_empty());
        assert!(percent_top_note(49).contains("fewer than 50"));
    }

    #[test]
    fn the_mitochondrial_prefix_is_found_for_human_and_mouse_names() {
        use crate::steps::MitoPrefix;
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let human = names(&["MT-CO1", "MT-ND1", "ACTB", "mt-odd"]);
        let mouse = names(&["mt-Co1", "mt-Nd1", "Actb", "Gapdh"]);
        let neither = names(&["ACTB", "GAPDH"]);
        assert_eq!(MitoPrefix::Detect.resolve(&human), ("MT-", true));
        assert_eq!(MitoPrefix::Detect.resolve(&mouse), ("mt-", true));
        assert_eq!(MitoPrefix::Detect.resolve(&neither), ("MT-", true));
        let given = MitoPrefix::Given("Mt-".into());
        assert_eq!(given.resolve(&mouse), ("Mt-", false));
        assert!(mito_qc_note(2, ("mt-", true), 20_000).contains("found in the gene names"));
        let none = mito_qc_note(0, ("MT-", true), 20_000);
        assert!(
            none.contains("'MT-' or 'mt-'") && none.contains("--mito-prefix"),
            "{none}"
        );
    }
}
