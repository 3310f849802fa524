//! [`PipelineConfig`]: which steps a run makes and with what parameters, the options of the
//! steps that take several among them.

use sc_kernels::harmony::HarmonyParams;
use sc_kernels::hvg::Flavor;

/// Parameters of a run; [`PipelineConfig::default`] is the benchmark recipe
/// (`benches/WORKLOADS.md`, section B). A `None` switches its step off.
#[derive(Debug, Clone, PartialEq)]
pub struct PipelineConfig {
    /// Genes whose name starts with this prefix form the `mt` QC variable; `None`: no QC step.
    pub qc_mito_prefix: Option<String>,
    pub min_genes: Option<u64>,
    pub min_cells: Option<u64>,
    pub target_sum: Option<Option<f64>>,
    pub log1p: bool,
    pub hvg: Option<HvgOptions>,
    /// Subset X to the highly variable genes (after freezing `.raw`).
    pub subset_hvg: bool,
    /// `scale(max_value=...)`; `Some(None)` scales without clipping, `None` skips the step.
    pub scale_max_value: Option<Option<f64>>,
    pub n_comps: Option<usize>,
    /// `harmony_integrate` after pca (`obsm['X_pca_harmony']`); `None` skips it.
    pub harmony: Option<HarmonyOptions>,
    pub n_neighbors: Option<usize>,
    /// The `obsm` key neighbors uses (scanpy's `use_rep`); `None`: `X_pca` as scanpy decides.
    pub neighbors_use_rep: Option<String>,
}

impl Default for PipelineConfig {
    fn default() -> Self {
        PipelineConfig {
            qc_mito_prefix: Some("MT-".to_string()),
            min_genes: Some(200),
            min_cells: Some(10),
            target_sum: Some(Some(1e4)),
            log1p: true,
            hvg: Some(HvgOptions::default()),
            subset_hvg: true,
            scale_max_value: Some(Some(10.0)),
            n_comps: Some(50),
            harmony: None,
            n_neighbors: Some(15),
            neighbors_use_rep: None,
        }
    }
}

impl PipelineConfig {
    /// This configuration without the steps over the cell x cell structure (harmony and
    /// neighbors): what each rank of a split run runs, and what runs before the output's X and
    /// `.raw` are final.
    pub fn per_cell_steps(&self) -> PipelineConfig {
        PipelineConfig {
            harmony: None,
            n_neighbors: None,
            ..self.clone()
        }
    }

    /// Whether harmony or neighbors run.
    pub fn has_cell_graph_steps(&self) -> bool {
        self.harmony.is_some() || self.n_neighbors.is_some()
    }

    /// The genes X keeps after the highly variable subset, of `n_vars` (all of them without
    /// the subset): what scale makes dense and PCA runs on.
    pub fn genes_after_subset(&self, n_vars: usize) -> usize {
        match (&self.hvg, self.subset_hvg) {
            (Some(h), true) => h.n_top_genes.unwrap_or(n_vars).min(n_vars),
            _ => n_vars,
        }
    }
}

/// What to compute, with the pipeline's defaults (cell_ranger, 2000 genes, no batch key).
#[derive(Debug, Clone, PartialEq)]
pub struct HvgOptions {
    pub flavor: Flavor,
    pub n_top_genes: Option<usize>,
    /// `obs` column with the batch of each cell.
    pub batch_key: Option<String>,
    /// Layer to compute on instead of X (seurat_v3 needs counts).
    pub layer: Option<String>,
}

impl Default for HvgOptions {
    fn default() -> Self {
        HvgOptions {
            flavor: Flavor::CellRanger,
            n_top_genes: Some(2000),
            batch_key: None,
            layer: None,
        }
    }
}

impl HvgOptions {
    /// seurat_v3 works on raw counts, the other flavours on log-normalized data.
    pub fn needs_counts(&self) -> bool {
        matches!(self.flavor, Flavor::SeuratV3 | Flavor::SeuratV3Paper)
    }
}

/// A harmony run: the obs column with the batches and the algorithm's parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct HarmonyOptions {
    pub key: String,
    pub params: HarmonyParams,
}
