//! The options of the steps after neighbors: `umap`, `leiden` and `rank_genes_groups` (on by
//! default, each with a `--no-...` to skip it), and `tsne`, `draw_graph`, `diffmap`, `dpt`,
//! `louvain`, `kmeans`, `paga` and `embedding_density` (off by default, `--tsne`,
//! `--draw-graph`, `--diffmap`, `--dpt-root CELL`, `--louvain`, `--kmeans N`, `--paga`,
//! `--embedding-density`), turned into their parts of the configuration.

use crate::run::{
    EmbeddingDensityOptions, LeidenOptions, LouvainOptions, MarkerOptions, PagaOptions,
};
use crate::{Error, Result};
use sc_kernels::draw_graph::Fa2Params;
use sc_kernels::kmeans::KMeansParams;
use sc_kernels::leiden::LeidenParams;
use sc_kernels::rank_genes::logreg::LogregParams;
use sc_kernels::rank_genes::{Method, RankGenesParams};
use sc_kernels::tsne::TsneParams;
use sc_kernels::umap::{Init, UmapParams};

#[derive(clap::Args, Debug)]
pub struct GraphStepArgs {
    #[arg(long, help = "Skip umap")]
    pub no_umap: bool,
    /// umap(min_dist=...).
    #[arg(long, default_value_t = 0.5)]
    pub min_dist: f64,
    /// umap(spread=...).
    #[arg(long, default_value_t = 1.0)]
    pub spread: f64,
    /// UMAP's epochs (default: 500 up to 10,000 cells, else 200, as umap-learn).
    #[arg(long)]
    pub umap_epochs: Option<usize>,
    /// UMAP's start: spectral (the graph's Laplacian eigenvectors) or random.
    #[arg(long, default_value = "spectral", value_parser = ["spectral", "random"])]
    pub umap_init: String,
    #[arg(
        long,
        help = "Run tsne on the PCA (or --harmony's) embedding: obsm['X_tsne'], scanpy's tl.tsne (on the GPU when the run has one)"
    )]
    pub tsne: bool,
    /// tsne(perplexity=...).
    #[arg(long, default_value_t = 30.0)]
    pub tsne_perplexity: f64,
    #[arg(
        long,
        help = "Run draw_graph on the neighbors graph: obsm['X_draw_graph_fa'], scanpy's tl.draw_graph (ForceAtlas2 from scanpy's start of seed 0; on the GPU when there is one)"
    )]
    pub draw_graph: bool,
    /// draw_graph(maxiter=...): ForceAtlas2's iterations.
    #[arg(long, default_value_t = 500)]
    pub draw_graph_iterations: usize,
    #[arg(
        long,
        help = "Run diffmap on the neighbors graph: obsm['X_diffmap'], scanpy's tl.diffmap (on the GPU when there is one)"
    )]
    pub diffmap: bool,
    /// diffmap(n_comps=...).
    #[arg(long, default_value_t = 15)]
    pub diffmap_comps: usize,
    #[arg(
        long,
        value_name = "CELL",
        help = "Run dpt from the cell of this obs name on the diffusion map (with --diffmap): obs['dpt_pseudotime'], scanpy's tl.dpt with uns['iroot'] that cell (10 components; on the CPU)"
    )]
    pub dpt_root: Option<String>,
    #[arg(
        long,
        value_name = "N",
        default_value_t = 0,
        help = "dpt's n_branchings (with --dpt-root): scanpy's segments into obs['dpt_groups'], dpt_order, dpt_order_indices and uns['dpt_changepoints'], uns['dpt_grouptips'] (min_group_size 0.01; on the CPU)"
    )]
    pub dpt_branchings: usize,
    #[arg(
        long,
        help = "Run louvain on the neighbors graph: obs['louvain'], scanpy's tl.louvain (every edge 1, as scanpy; on the GPU when the run has one)"
    )]
    pub louvain: bool,
    /// louvain(resolution=...).
    #[arg(long, default_value_t = 1.0)]
    pub louvain_resolution: f64,
    #[arg(
        long,
        value_name = "N",
        help = "Run kmeans with N clusters on the PCA (or --harmony's) embedding: obs['kmeans'], rapids-singlecell's tl.kmeans (seed 42; on the CPU)"
    )]
    pub kmeans: Option<usize>,
    #[arg(
        long,
        help = "Run paga on the clusters: uns['paga'] (connectivities and their spanning tree), scanpy's tl.paga (model v1.2; on the CPU)"
    )]
    pub paga: bool,
    /// paga(groups=...): a categorical obs column of the input, or leiden's, louvain or kmeans
    /// when the run makes it (default: leiden's first column, else louvain).
    #[arg(long, value_name = "KEY")]
    pub paga_groups: Option<String>,
    #[arg(
        long,
        help = "Run embedding_density on the UMAP: obs['umap_density'], scanpy's tl.embedding_density (on the GPU when the run has one)"
    )]
    pub embedding_density: bool,
    /// embedding_density(groupby=...): each cell's density among the cells of its category of
    /// this obs column (one of the input's, or leiden, louvain, kmeans when the run makes it).
    #[arg(long, value_name = "KEY")]
    pub embedding_density_groupby: Option<String>,
    #[arg(long, help = "Skip leiden")]
    pub no_leiden: bool,
    /// leiden(resolution=...); several (comma-separated) give one obs column each,
    /// leiden_res_{r:4.2f}.
    #[arg(long, value_delimiter = ',', default_value = "1.0")]
    pub resolution: Vec<f64>,
    /// Leiden's iterations (scanpy's igraph flavour: 2); negative: until nothing changes.
    #[arg(long, default_value_t = 2, allow_negative_numbers = true)]
    pub leiden_iterations: i32,
    /// Seed of umap and leiden (scanpy's random_state).
    #[arg(long, default_value_t = 0)]
    pub random_state: u64,
    #[arg(long, help = "Skip rank_genes_groups (marker genes)")]
    pub no_markers: bool,
    /// obs column the marker genes group by (default: leiden's).
    #[arg(long, value_name = "KEY")]
    pub groupby: Option<String>,
    /// rank_genes_groups(method=...); logreg: a logistic regression (names and scores only, as
    /// scanpy writes them; its passes over the cells on the GPU with more cells than genes).
    #[arg(long, default_value = "wilcoxon", value_parser = ["wilcoxon", "t-test", "t-test_overestim_var", "logreg"])]
    pub markers_method: String,
    /// Marker genes kept per group (rank_genes_groups(n_genes=...)).
    #[arg(long, default_value_t = 100)]
    pub markers_n_genes: usize,
    /// logreg markers: L-BFGS iterations at most (scikit-learn's max_iter, scanpy's default).
    #[arg(long, default_value_t = 100, value_name = "N")]
    pub logreg_max_iter: usize,
    /// logreg markers: the mean loss's gradient at which the fit stops (scikit-learn's tol).
    #[arg(long, default_value_t = 1e-4, value_name = "TOL")]
    pub logreg_tol: f64,
    #[arg(
        long,
        help = "Wilcoxon with the tie correction of its variance (rank_genes_groups(tie_correct=True); off by default, as in scanpy)"
    )]
    pub tie_correct: bool,
    /// The default since the tie correction is off by default (scanpy's); kept so that
    /// scripts which asked for it still run.
    #[arg(long, hide = true, conflicts_with = "tie_correct")]
    pub no_tie_correct: bool,
}

impl GraphStepArgs {
    /// tsne's parameters, when asked for (it needs the PCA, `pca`).
    pub fn tsne(&self, pca: bool) -> Result<Option<TsneParams>> {
        if !self.tsne {
            return Ok(None);
        }
        if !pca {
            return Err(Error::param("--tsne", "needs the PCA (drop --no-pca)"));
        }
        if !(self.tsne_perplexity > 0.0 && self.tsne_perplexity.is_finite()) {
            return Err(Error::param(
                "--tsne-perplexity",
                format!("must be a number > 0, not {}", self.tsne_perplexity),
            ));
        }
        Ok(Some(TsneParams {
            perplexity: self.tsne_perplexity,
            random_state: self.random_state,
            ..TsneParams::default()
        }))
    }

    /// draw_graph's parameters, when asked for (it needs the neighbors graph).
    pub fn draw_graph(&self, neighbors: bool) -> Result<Option<Fa2Params>> {
        if !self.draw_graph {
            return Ok(None);
        }
        if !neighbors {
            return Err(Error::param("--draw-graph", "needs the neighbors graph"));
        }
        Ok(Some(Fa2Params {
            iterations: self.draw_graph_iterations,
            ..Fa2Params::default()
        }))
    }

    /// diffmap's component count, when asked for (it needs the neighbors graph).
    pub fn diffmap(&self, neighbors: bool) -> Result<Option<usize>> {
        if !self.diffmap {
            return Ok(None);
        }
        if !neighbors {
            return Err(Error::param("--diffmap", "needs the neighbors graph"));
        }
        if self.diffmap_comps <= 2 {
            return Err(Error::param(
                "--diffmap-comps",
                format!(
                    "must be greater than 2 (scanpy's rule), not {}",
                    self.diffmap_comps
                ),
            ));
        }
        Ok(Some(self.diffmap_comps))
    }

    /// dpt's root cell, when asked for (it needs diffmap's components, at least dpt's 10).
    pub fn dpt_root(&self) -> Result<Option<String>> {
        let Some(root) = &self.dpt_root else {
            return Ok(None);
        };
        if !self.diffmap {
            return Err(Error::param("--dpt-root", "needs --diffmap"));
        }
        let n_dcs = crate::steps::DPT_N_DCS;
        if self.diffmap_comps < n_dcs {
            return Err(Error::param(
                "--dpt-root",
                format!(
                    "dpt reads {n_dcs} diffusion components; --diffmap-comps is {}",
                    self.diffmap_comps
                ),
            ));
        }
        Ok(Some(root.clone()))
    }

    /// dpt's branchings, when asked for (they need dpt's root).
    pub fn dpt_branchings(&self) -> Result<usize> {
        if self.dpt_branchings > 0 && self.dpt_root.is_none() {
            return Err(Error::param("--dpt-branchings", "needs --dpt-root"));
        }
        Ok(self.dpt_branchings)
    }

    /// louvain's options, when asked for (it needs the neighbors graph).
    pub fn louvain(&self, neighbors: bool) -> Result<Option<LouvainOptions>> {
        if !self.louvain {
            return Ok(None);
        }
        if !neighbors {
            return Err(Error::param("--louvain", "needs the neighbors graph"));
        }
        let r = self.louvain_resolution;
        if !(r > 0.0 && r.is_finite()) {
            return Err(Error::param(
                "--louvain-resolution",
                format!("{r} is not positive"),
            ));
        }
        Ok(Some(LouvainOptions {
            params: LeidenParams::louvain(r, self.random_state),
            use_weights: false,
        }))
    }

    /// kmeans' parameters, when asked for (it needs the PCA, `pca`).
    pub fn kmeans(&self, pca: bool) -> Result<Option<KMeansParams>> {
        let Some(n_clusters) = self.kmeans else {
            return Ok(None);
        };
        if !pca {
            return Err(Error::param("--kmeans", "needs the PCA (drop --no-pca)"));
        }
        if n_clusters == 0 {
            return Err(Error::param("--kmeans", "give at least 1 cluster"));
        }
        Ok(Some(KMeansParams {
            n_clusters,
            ..KMeansParams::default()
        }))
    }

    /// paga's options, when asked for (it needs the neighbors graph).
    pub fn paga(&self, neighbors: bool) -> Result<Option<PagaOptions>> {
        if !self.paga {
            if self.paga_groups.is_some() {
                return Err(Error::param("--paga-groups", "only with --paga"));
            }
            return Ok(None);
        }
        if !neighbors {
            return Err(Error::param("--paga", "needs the neighbors graph"));
        }
        Ok(Some(PagaOptions {
            groups: self.paga_groups.clone(),
        }))
    }

    /// embedding_density's options, when asked for (it needs the UMAP, `umap`).
    pub fn embedding_density(&self, umap: bool) -> Result<Option<EmbeddingDensityOptions>> {
        if !self.embedding_density {
            if self.embedding_density_groupby.is_some() {
                return Err(Error::param(
                    "--embedding-density-groupby",
                    "only with --embedding-density",
                ));
            }
            return Ok(None);
        }
        if !umap {
            return Err(Error::param(
                "--embedding-density",
                "needs the UMAP (drop --no-umap)",
            ));
        }
        Ok(Some(EmbeddingDensityOptions {
            groupby: self.embedding_density_groupby.clone(),
        }))
    }

    /// umap's parameters, when it runs (it needs the neighbors graph).
    pub fn umap(&self, neighbors: bool) -> Result<Option<UmapParams>> {
        if self.no_umap || !neighbors {
            return Ok(None);
        }
        if !(self.spread > 0.0 && self.spread.is_finite()) {
            return Err(Error::param(
                "--spread",
                format!("{} must be positive", self.spread),
            ));
        }
        if !(self.min_dist >= 0.0 && self.min_dist <= self.spread) {
            return Err(Error::param(
                "--min-dist",
                format!(
                    "{} must be in [0, --spread = {}]",
                    self.min_dist, self.spread
                ),
            ));
        }
        if self.umap_epochs == Some(0) {
            return Err(Error::param("--umap-epochs", "must be at least 1"));
        }
        Ok(Some(UmapParams {
            min_dist: self.min_dist,
            spread: self.spread,
            n_epochs: self.umap_epochs,
            init: if self.umap_init == "random" {
                Init::Random
            } else {
                Init::Spectral
            },
            random_state: self.random_state,
            ..UmapParams::default()
        }))
    }

    /// leiden's options, when it runs (it needs the neighbors graph).
    pub fn leiden(&self, neighbors: bool) -> Result<Option<LeidenOptions>> {
        if self.no_leiden || !neighbors {
            return Ok(None);
        }
        if self.resolution.is_empty() {
            return Err(Error::param("--resolution", "give at least one resolution"));
        }
        if let Some(r) = self
            .resolution
            .iter()
            .find(|r| !(**r > 0.0 && r.is_finite()))
        {
            return Err(Error::param("--resolution", format!("{r} is not positive")));
        }
        if self.leiden_iterations == 0 {
            return Err(Error::param(
                "--leiden-iterations",
                "0: at least 1, or negative to iterate until nothing changes",
            ));
        }
        Ok(Some(LeidenOptions {
            resolutions: self.resolution.clone(),
            params: LeidenParams {
                n_iterations: self.leiden_iterations,
                random_state: self.random_state,
                ..LeidenParams::default()
            },
        }))
    }

    /// The marker genes' options, when they run: they need groups, `--groupby`'s or leiden's.
    pub fn markers(&self, leiden: bool) -> Result<Option<MarkerOptions>> {
        if self.no_markers || (self.groupby.is_none() && !leiden) {
            return Ok(None);
        }
        if self.markers_n_genes == 0 {
            return Err(Error::param("--markers-n-genes", "must be at least 1"));
        }
        let logreg = self.markers_method == "logreg";
        if self.logreg_max_iter == 0 {
            return Err(Error::param("--logreg-max-iter", "must be at least 1"));
        }
        if !(self.logreg_tol > 0.0 && self.logreg_tol.is_finite()) {
            return Err(Error::param(
                "--logreg-tol",
                format!("must be > 0, got {}", self.logreg_tol),
            ));
        }
        let method: Method = if logreg {
            Method::Wilcoxon // unused: logreg ranks in its place
        } else {
            self.markers_method
                .parse()
                .map_err(|e: sc_kernels::KernelError| {
                    Error::param("--markers-method", e.to_string())
                })?
        };
        Ok(Some(MarkerOptions {
            groupby: self.groupby.clone(),
            params: RankGenesParams {
                method,
                n_genes: Some(self.markers_n_genes),
                tie_correct: self.tie_correct,
            },
            logreg: logreg.then_some(LogregParams {
                max_iter: self.logreg_max_iter,
                tol: self.logreg_tol,
                ..LogregParams::default()
            }),
        }))
    }
}
