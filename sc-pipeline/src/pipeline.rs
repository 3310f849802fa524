//! The classic scanpy preprocessing flow as one configurable run, timing every step.
//!
//! Order (each step can be switched off): QC metrics (with the `mt` genes), filter cells,
//! filter genes, normalize_total, log1p, highly_variable_genes (seurat_v3, which needs the
//! counts, runs before normalize_total instead), freeze `.raw` (log-normalized, all genes that
//! passed the filters), subset to the highly variable genes, scale, pca, neighbors.

use crate::report::{StepRecord, StepTimer};
use crate::steps::{self, CellFilter, GeneFilter, NormalizeParams, ScaleParams};
use crate::{AnnData, Result};

/// Parameters of a run; [`PipelineConfig::default`] is BENCHMARKS.md section B.
#[derive(Debug, Clone, PartialEq)]
pub struct PipelineConfig {
    /// Genes whose name starts with this prefix form the `mt` QC variable; `None`: no QC step.
    pub qc_mito_prefix: Option<String>,
    pub min_genes: Option<u64>,
    pub min_cells: Option<u64>,
    pub target_sum: Option<Option<f64>>,
    pub log1p: bool,
    pub hvg: Option<steps::HvgOptions>,
    /// Subset X to the highly variable genes (after freezing `.raw`).
    pub subset_hvg: bool,
    /// `scale(max_value=...)`; `Some(None)` scales without clipping, `None` skips the step.
    pub scale_max_value: Option<Option<f64>>,
    pub n_comps: Option<usize>,
    pub n_neighbors: Option<usize>,
}

impl Default for PipelineConfig {
    fn default() -> Self {
        PipelineConfig {
            qc_mito_prefix: Some("MT-".to_string()),
            min_genes: Some(200),
            min_cells: Some(10),
            target_sum: Some(Some(1e4)),
            log1p: true,
            hvg: Some(steps::HvgOptions::default()),
            subset_hvg: true,
            scale_max_value: Some(Some(10.0)),
            n_comps: Some(50),
            n_neighbors: Some(15),
        }
    }
}

/// Told when each step starts and ends (the command line draws progress from it).
pub trait StepObserver {
    fn started(&mut self, step: &str);
    fn finished(&mut self, record: &StepRecord);
}

/// An observer that does nothing.
pub struct Silent;
impl StepObserver for Silent {
    fn started(&mut self, _: &str) {}
    fn finished(&mut self, _: &StepRecord) {}
}

struct Runner<'a> {
    records: Vec<StepRecord>,
    observer: &'a mut dyn StepObserver,
}

impl Runner<'_> {
    fn step<T>(
        &mut self,
        name: &str,
        adata: &mut AnnData,
        f: impl FnOnce(&mut AnnData) -> Result<(T, String)>,
    ) -> Result<T> {
        self.observer.started(name);
        let timer = StepTimer::start(name);
        let (out, note) = f(adata)?;
        let record = timer.finish(adata.n_obs(), adata.n_vars(), note);
        self.observer.finished(&record);
        self.records.push(record);
        Ok(out)
    }
}

fn hvg_step(r: &mut Runner<'_>, adata: &mut AnnData, hvg: &steps::HvgOptions) -> Result<()> {
    r.step("highly_variable_genes", adata, |a| {
        let n = steps::highly_variable_genes(a, hvg)?;
        Ok((
            (),
            format!("flavor={}: {n} genes selected", hvg.flavor.name()),
        ))
    })
}

/// Runs the configured steps on `adata` (raw counts in X); returns one record per step.
pub fn run_pipeline(
    adata: &mut AnnData,
    config: &PipelineConfig,
    observer: &mut dyn StepObserver,
) -> Result<Vec<StepRecord>> {
    let mut r = Runner {
        records: Vec::new(),
        observer,
    };
    check_counts(adata)?;
    if let Some(prefix) = &config.qc_mito_prefix {
        r.step("calculate_qc_metrics", adata, |a| {
            let n_mt = steps::annotate_gene_prefix(a, "mt", prefix)?;
            steps::calculate_qc_metrics(a, &["mt"], &[50, 100, 200, 500], true)?;
            Ok((
                (),
                format!("qc_vars=['mt'] ({n_mt} genes start with '{prefix}')"),
            ))
        })?;
    }
    if let Some(min_genes) = config.min_genes {
        r.step("filter_cells", adata, |a| {
            let removed = steps::filter_cells(a, CellFilter::MinGenes(min_genes))?;
            Ok((
                (),
                format!("min_genes={min_genes}: {removed} cells removed"),
            ))
        })?;
    }
    if let Some(min_cells) = config.min_cells {
        r.step("filter_genes", adata, |a| {
            let removed = steps::filter_genes(a, GeneFilter::MinCells(min_cells))?;
            Ok((
                (),
                format!("min_cells={min_cells}: {removed} genes removed"),
            ))
        })?;
    }
    // seurat_v3 needs the counts: it runs before normalisation (its results are per gene and
    // survive normalize_total and log1p), which spares a copy of X. The other flavours run on
    // the log-normalized data.
    let counts_hvg = config.hvg.as_ref().filter(|h| h.needs_counts());
    if let Some(hvg) = counts_hvg {
        hvg_step(&mut r, adata, hvg)?;
    }
    if let Some(target_sum) = config.target_sum {
        r.step("normalize_total", adata, |a| {
            let used = steps::normalize_total(
                a,
                &NormalizeParams {
                    target_sum,
                    ..Default::default()
                },
            )?;
            Ok(((), format!("target_sum={}", used.target_sum)))
        })?;
    }
    if config.log1p {
        r.step("log1p", adata, |a| {
            steps::log1p(a, None).map(|()| ((), String::new()))
        })?;
    }
    if let Some(hvg) = config.hvg.as_ref().filter(|h| !h.needs_counts()) {
        hvg_step(&mut r, adata, hvg)?;
    }
    if config.hvg.is_some() && config.subset_hvg {
        r.step("subset to HVG (raw frozen)", adata, |a| {
            let keep = steps::highly_variable_mask(a)?;
            a.freeze_raw_and_select_var(&keep)?;
            Ok(((), ".raw = log-normalized, all filtered genes".to_string()))
        })?;
    }
    if let Some(max_value) = config.scale_max_value {
        r.step("scale", adata, |a| {
            steps::scale(
                a,
                &ScaleParams {
                    zero_center: true,
                    max_value,
                },
            )?;
            Ok((
                (),
                max_value.map_or("no clipping".into(), |m| format!("max_value={m}")),
            ))
        })?;
    }
    if let Some(n_comps) = config.n_comps {
        r.step("pca", adata, |a| {
            let used = steps::pca(a, n_comps)?;
            Ok(((), format!("n_comps={used}")))
        })?;
    }
    if let Some(k) = config.n_neighbors {
        r.step("neighbors", adata, |a| {
            steps::neighbors(a, k)?;
            Ok(((), format!("n_neighbors={k}, exact, euclidean")))
        })?;
    }
    Ok(r.records)
}

/// The input must be counts: finite and non-negative.
fn check_counts(adata: &AnnData) -> Result<()> {
    adata
        .x
        .to_csr()
        .check_counts()
        .map_err(|e| crate::Error::invalid("X", format!("the pipeline needs raw counts in X: {e}")))
}
