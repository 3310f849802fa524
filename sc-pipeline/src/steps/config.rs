//! [`PipelineConfig`]: which steps a run makes and with what parameters, the options of the
//! steps that take several among them.

use sc_kernels::draw_graph::Fa2Params;
use sc_kernels::harmony::HarmonyParams;
use sc_kernels::hvg::Flavor;
use sc_kernels::kmeans::KMeansParams;
use sc_kernels::leiden::LeidenParams;
use sc_kernels::neighbors::ivf::IvfParams;
use sc_kernels::neighbors::KnnMethod;
use sc_kernels::rank_genes::{Method, RankGenesParams};
use sc_kernels::tsne::TsneParams;
use sc_kernels::umap::UmapParams;

/// Parameters of a run; [`PipelineConfig::default`] is the benchmark recipe
/// (`benches/WORKLOADS.md`, section B). A `None` switches its step off.
#[derive(Debug, Clone, PartialEq)]
pub struct PipelineConfig {
    /// Which genes form the `mt` QC variable (by the prefix of their names); `None`: no QC
    /// step.
    pub qc_mito_prefix: Option<MitoPrefix>,
    pub min_genes: Option<u64>,
    pub min_cells: Option<u64>,
    pub target_sum: Option<Option<f64>>,
    pub log1p: bool,
    pub hvg: Option<HvgOptions>,
    /// Subset X to the highly variable genes (after freezing `.raw`).
    pub subset_hvg: bool,
    /// `regress_out(keys=...)` before scale: obs columns (numeric, or one categorical); empty:
    /// no regress_out.
    pub regress_out: Vec<String>,
    /// `scrublet(...)` on the filtered counts, before normalize_total; `None`: no scrublet.
    pub scrublet: Option<ScrubletOptions>,
    /// `scale(max_value=...)`; `Some(None)` scales without clipping, `None` skips the step.
    pub scale_max_value: Option<Option<f64>>,
    pub n_comps: Option<usize>,
    /// `harmony_integrate` after pca (`obsm['X_pca_harmony']`); `None` skips it.
    pub harmony: Option<HarmonyOptions>,
    pub n_neighbors: Option<usize>,
    /// How neighbors searches the kNN (exact, an inverted file, or by size).
    pub knn_method: KnnMethod,
    /// The `obsm` key neighbors uses (scanpy's `use_rep`); `None`: `X_pca` as scanpy decides.
    pub neighbors_use_rep: Option<String>,
    /// `umap` on the neighbors graph (`obsm['X_umap']`); `None` skips it.
    pub umap: Option<UmapParams>,
    /// `tsne` on the representation neighbors reads (`obsm['X_tsne']`); `None` skips it.
    pub tsne: Option<TsneParams>,
    /// `draw_graph` (ForceAtlas2) on the neighbors graph (`obsm['X_draw_graph_fa']`); `None`
    /// skips it.
    pub draw_graph: Option<Fa2Params>,
    /// `diffmap(n_comps=...)` on the neighbors graph (`obsm['X_diffmap']`); `None` skips it.
    pub diffmap: Option<usize>,
    /// `dpt` from this root cell (an obs name) on the diffusion map (`obs['dpt_pseudotime']`);
    /// `None` skips it.
    pub dpt_root: Option<String>,
    /// dpt's `n_branchings` (scanpy's segments, `obs['dpt_groups']`); 0: the pseudotime only.
    pub dpt_branchings: usize,
    /// `louvain` on the neighbors graph (`obs['louvain']`); `None` skips it.
    pub louvain: Option<LouvainOptions>,
    /// `kmeans` on the representation neighbors reads (`obs['kmeans']`); `None` skips it.
    pub kmeans: Option<KMeansParams>,
    /// `paga` on the groups of a clustering (`uns['paga']`); `None` skips it.
    pub paga: Option<PagaOptions>,
    /// `embedding_density` on the UMAP (`obs['umap_density[_groupby]']`); `None` skips it.
    pub embedding_density: Option<EmbeddingDensityOptions>,
    /// `leiden` on the neighbors graph, one `obs` column per resolution; `None` skips it.
    pub leiden: Option<LeidenOptions>,
    /// `rank_genes_groups` (marker genes) by a grouping of the cells; `None` skips it.
    pub markers: Option<MarkerOptions>,
    /// `obs` columns that `filter_cells` keeps aside for every cell before removing any
    /// (`AnnData::obs_before_filter`: the QC plots of `--plot`); empty: none.
    pub keep_before_filter: Vec<String>,
}

impl Default for PipelineConfig {
    fn default() -> Self {
        PipelineConfig {
            qc_mito_prefix: Some(MitoPrefix::Detect),
            min_genes: Some(200),
            min_cells: Some(10),
            target_sum: Some(Some(1e4)),
            log1p: true,
            hvg: Some(HvgOptions::default()),
            subset_hvg: true,
            regress_out: Vec::new(),
            scrublet: None,
            scale_max_value: Some(Some(10.0)),
            n_comps: Some(50),
            harmony: None,
            n_neighbors: Some(15),
            knn_method: KnnMethod::Auto(IvfParams::default()),
            neighbors_use_rep: None,
            umap: Some(UmapParams::default()),
            tsne: None,
            draw_graph: None,
            diffmap: None,
            dpt_root: None,
            dpt_branchings: 0,
            louvain: None,
            kmeans: None,
            paga: None,
            embedding_density: None,
            leiden: Some(LeidenOptions::default()),
            markers: Some(MarkerOptions::default()),
            keep_before_filter: Vec::new(),
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
            umap: None,
            tsne: None,
            draw_graph: None,
            diffmap: None,
            dpt_root: None,
            louvain: None,
            kmeans: None,
            paga: None,
            embedding_density: None,
            leiden: None,
            markers: None,
            ..self.clone()
        }
    }

    /// Whether a step that reads counts in X runs (QC, the filters, normalize_total, log1p,
    /// highly_variable_genes): then X must hold counts. Without them (e.g. the marker genes
    /// alone on a finished run's output) X need only be finite.
    pub fn reads_counts(&self) -> bool {
        self.qc_mito_prefix.is_some()
            || self.min_genes.is_some()
            || self.min_cells.is_some()
            || self.target_sum.is_some()
            || self.log1p
            || self.hvg.is_some()
    }

    /// Whether any step over the cell x cell structure runs (harmony to the marker genes).
    pub fn has_cell_graph_steps(&self) -> bool {
        self.harmony.is_some()
            || self.n_neighbors.is_some()
            || self.runs_tsne()
            || self.runs_kmeans()
            || self.markers_groupby().is_some()
    }

    /// Whether tsne runs: asked for, on the representation PCA (or harmony) makes.
    pub fn runs_tsne(&self) -> bool {
        self.tsne.is_some() && self.n_comps.is_some()
    }

    /// Whether draw_graph runs: asked for, on the graph neighbors makes.
    pub fn runs_draw_graph(&self) -> bool {
        self.draw_graph.is_some() && self.n_neighbors.is_some()
    }

    /// Whether diffmap runs: asked for, on the graph neighbors makes.
    pub fn runs_diffmap(&self) -> bool {
        self.diffmap.is_some() && self.n_neighbors.is_some()
    }

    /// Whether dpt runs: asked for, on the diffusion map diffmap makes.
    pub fn runs_dpt(&self) -> bool {
        self.dpt_root.is_some() && self.runs_diffmap()
    }

    /// Whether louvain runs: asked for, on the graph neighbors makes.
    pub fn runs_louvain(&self) -> bool {
        self.louvain.is_some() && self.n_neighbors.is_some()
    }

    /// Whether kmeans runs: asked for, on the representation PCA (or harmony) makes.
    pub fn runs_kmeans(&self) -> bool {
        self.kmeans.is_some() && self.n_comps.is_some()
    }

    /// Whether embedding_density runs: asked for, on the UMAP the run makes.
    pub fn runs_embedding_density(&self) -> bool {
        self.embedding_density.is_some() && self.runs_umap()
    }

    /// Whether a clustering step of this run writes `obs[key]` (leiden's columns, `louvain`,
    /// `kmeans`): a step after them may group by it though the input lacks it.
    pub fn makes_obs_column(&self, key: &str) -> bool {
        let leiden = self.runs_leiden()
            && self
                .leiden
                .as_ref()
                .is_some_and(|l| (0..l.resolutions.len()).any(|i| l.key(i) == key));
        leiden
            || (self.runs_louvain() && key == "louvain")
            || (self.runs_kmeans() && key == "kmeans")
    }

    /// Whether umap runs: asked for, on the graph neighbors makes.
    pub fn runs_umap(&self) -> bool {
        self.umap.is_some() && self.n_neighbors.is_some()
    }

    /// Whether leiden runs: asked for, on the graph neighbors makes.
    pub fn runs_leiden(&self) -> bool {
        self.leiden.is_some() && self.n_neighbors.is_some()
    }

    /// The obs column the marker genes group by when they run: `groupby`, else leiden's first
    /// column when leiden runs; `None`: no markers.
    pub fn markers_groupby(&self) -> Option<String> {
        let m = self.markers.as_ref()?;
        m.groupby.clone().or_else(|| self.leiden_key())
    }

    /// Leiden's first column when leiden runs: the grouping the steps after it default to.
    fn leiden_key(&self) -> Option<String> {
        self.leiden
            .as_ref()
            .filter(|_| self.runs_leiden())
            .map(|l| l.key(0))
    }

    /// Whether paga runs: asked for, on the graph neighbors makes.
    pub fn runs_paga(&self) -> bool {
        self.paga.is_some() && self.n_neighbors.is_some()
    }

    /// The obs column PAGA groups by when asked for: `groups`, else leiden's first column
    /// when leiden runs, else `louvain` when louvain runs, else `leiden` (scanpy's default,
    /// which the input must then have).
    pub fn paga_groups(&self) -> Option<String> {
        let p = self.paga.as_ref()?;
        Some(
            p.groups
                .clone()
                .or_else(|| self.leiden_key())
                .or_else(|| self.runs_louvain().then(|| "louvain".to_string()))
                .unwrap_or_else(|| "leiden".to_string()),
        )
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

/// scrublet's parameters and the batch column whose batches it scores apart.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ScrubletOptions {
    pub params: sc_kernels::scrublet::ScrubletParams,
    /// `obs` column whose batches are scored apart.
    pub batch_key: Option<String>,
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
    /// The cutoffs used without `n_top_genes`, and the flavours' smoothing (scanpy's defaults).
    pub cutoffs: HvgCutoffs,
}

/// scanpy's `min_mean`, `max_mean`, `min_disp`, `max_disp` (the selection without
/// `n_top_genes`), `span` (seurat_v3's loess) and `n_bins` (seurat's mean bins).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HvgCutoffs {
    pub min_mean: f64,
    pub max_mean: f64,
    pub min_disp: f64,
    pub max_disp: f64,
    pub span: f64,
    pub n_bins: usize,
}

impl Default for HvgCutoffs {
    fn default() -> Self {
        let d = sc_kernels::hvg::HvgParams::default();
        HvgCutoffs {
            min_mean: d.min_mean,
            max_mean: d.max_mean,
            min_disp: d.min_disp,
            max_disp: d.max_disp,
            span: d.span,
            n_bins: d.n_bins,
        }
    }
}

impl Default for HvgOptions {
    fn default() -> Self {
        HvgOptions {
            flavor: Flavor::CellRanger,
            n_top_genes: Some(2000),
            batch_key: None,
            layer: None,
            cutoffs: HvgCutoffs::default(),
        }
    }
}

impl HvgOptions {
    /// seurat_v3 works on raw counts, the other flavours on log-normalized data.
    pub fn needs_counts(&self) -> bool {
        matches!(self.flavor, Flavor::SeuratV3 | Flavor::SeuratV3Paper)
    }
}

/// The prefix of the mitochondrial genes' names.
#[derive(Debug, Clone, PartialEq)]
pub enum MitoPrefix {
    /// `MT-` (human annotations) or `mt-` (mouse), whichever more gene names start with
    /// (`MT-` when neither does).
    Detect,
    /// This one (`--mito-prefix`).
    Given(String),
}

impl MitoPrefix {
    /// The prefixes [`MitoPrefix::Detect`] chooses from, the default first.
    pub const DETECTED: [&'static str; 2] = ["MT-", "mt-"];

    /// The prefix for these gene names, and whether it was detected.
    pub fn resolve<'a>(&'a self, genes: &[String]) -> (&'a str, bool) {
        match self {
            MitoPrefix::Given(p) => (p, false),
            MitoPrefix::Detect => {
                let count = |p: &str| genes.iter().filter(|g| g.starts_with(p)).count();
                let [human, mouse] = MitoPrefix::DETECTED;
                let prefix = if count(mouse) > count(human) {
                    mouse
                } else {
                    human
                };
                (prefix, true)
            }
        }
    }
}

/// A harmony run: the obs column with the batches and the algorithm's parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct HarmonyOptions {
    pub key: String,
    pub params: HarmonyParams,
}

/// Leiden's resolutions (one `obs` column each) and the algorithm's other parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct LeidenOptions {
    pub resolutions: Vec<f64>,
    /// The parameters but the resolution (scanpy's igraph flavour: 2 iterations, seed 0).
    pub params: LeidenParams,
}

impl Default for LeidenOptions {
    fn default() -> Self {
        LeidenOptions {
            resolutions: vec![1.0],
            params: LeidenParams::default(),
        }
    }
}

impl LeidenOptions {
    /// The obs column of resolution `i`: `leiden` for a single resolution, else scanpy's
    /// tutorial's `leiden_res_{r:4.2f}`.
    pub fn key(&self, i: usize) -> String {
        if self.resolutions.len() == 1 {
            "leiden".to_string()
        } else {
            format!("leiden_res_{:4.2}", self.resolutions[i])
        }
    }
}

/// embedding_density's grouping: each cell's density among all cells, or among the cells of
/// its `groupby` category (an obs column of the input or one a clustering step of the run makes).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EmbeddingDensityOptions {
    pub groupby: Option<String>,
}

/// PAGA's groups: a categorical obs column of the input or one a clustering step of the run
/// makes; `None`: scanpy's default (leiden's, else louvain's).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PagaOptions {
    pub groups: Option<String>,
}

/// Louvain's parameters (`LeidenParams::louvain`: no refinement, until nothing changes) and
/// whether it reads the connectivities' weights (scanpy's default: no, every edge 1).
#[derive(Debug, Clone, PartialEq)]
pub struct LouvainOptions {
    pub params: LeidenParams,
    pub use_weights: bool,
}

impl Default for LouvainOptions {
    fn default() -> Self {
        LouvainOptions {
            params: LeidenParams::louvain(1.0, 0),
            use_weights: false,
        }
    }
}

/// The marker genes' grouping and test.
#[derive(Debug, Clone, PartialEq)]
pub struct MarkerOptions {
    /// The obs column of the groups; `None`: leiden's (its first resolution's) column.
    pub groupby: Option<String>,
    /// The test, and the genes kept a group (`n_genes`, also logreg's).
    pub params: RankGenesParams,
    /// scanpy's `method='logreg'` in place of `params.method`: a logistic regression, on the
    /// host.
    pub logreg: Option<sc_kernels::rank_genes::logreg::LogregParams>,
}

impl Default for MarkerOptions {
    /// scanpy's clustering tutorial: Wilcoxon on leiden's clusters, 100 genes a group, without
    /// the tie correction (scanpy's default, `tie_correct=False`; `--tie-correct` turns it on).
    fn default() -> Self {
        MarkerOptions {
            groupby: None,
            params: RankGenesParams {
                method: Method::Wilcoxon,
                n_genes: Some(100),
                tie_correct: false,
            },
            logreg: None,
        }
    }
}
