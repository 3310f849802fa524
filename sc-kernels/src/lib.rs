//! Single-cell kernels. Each step has a CPU reference implementation that follows scanpy's
//! definitions (see `ARCHITECTURE.md`, "Reference definitions", and each module's documentation
//! for the exact formulas, dtypes and rounding); GPU kernels are checked against them.
//!
//! | step (scanpy name) | module |
//! |---|---|
//! | `calculate_qc_metrics` | [`qc`] |
//! | `filter_cells`, `filter_genes` | [`filter`] |
//! | `normalize_total` | [`normalize`] |
//! | `log1p` | [`mod@log1p`] |
//! | `highly_variable_genes` (seurat, cell_ranger, seurat_v3; `batch_key`) | [`hvg`] |
//! | `scale` | [`scale`] |
//! | `pca` (covariance route, dense and sparse input) | [`pca`] |
//! | `neighbors` (exact kNN, UMAP connectivities) | [`neighbors`] |
//! | `external.pp.harmony_integrate` (harmony2 / harmony1; LISI) | [`harmony`] |
//! | `tl.umap` | [`umap`] |
//! | `tl.rank_genes_groups` (t-test, t-test_overestim_var, wilcoxon; reference `rest`) | [`rank_genes`] |
//! | `tl.leiden` | [`leiden`] |
//! | `pp.scrublet`, `pp.scrublet_simulate_doublets` | [`scrublet`] |
//! | `tl.score_genes` | [`score_genes`] |
//! | `get.aggregate` | [`aggregate`] |
//! | `pp.combat` | [`combat`] |
//! | `tl.kmeans` (and harmony's clustering) | [`kmeans`] |
//! | `tl.diffmap` | [`diffmap`] |
//! | `tl.dpt` (pseudotime, no branchings) | [`dpt`] |
//! | `tl.draw_graph` (ForceAtlas2, layout `'fa'`) | [`draw_graph`] |
//! | `tl.embedding_density` | [`embedding_density`] |
//! | `tl.paga` (v1.2 connectivities) | [`paga`] |
//! | `tl.tsne` (Barnes-Hut, 2-D) | [`tsne`] |
//!
//! Every step is multithreaded with rayon (it runs in the current rayon pool).

pub mod aggregate;
pub mod columns;
pub mod combat;
pub mod comm;
pub mod csr;
pub mod dense;
pub mod diffmap;
pub mod dpt;
pub mod draw_graph;
pub mod eigsh;
pub mod embedding_density;
pub mod error;
pub mod fastmath;
pub mod filter;
pub mod first_match;
pub mod gpu;
pub mod graph;
pub mod group_by;
pub mod harmony;
pub mod hvg;
pub mod ingest;
pub mod kmeans;
pub mod leiden;
pub mod log1p;
pub mod neighbors;
pub mod normalize;
pub mod paga;
pub mod pca;
pub mod pearson;
pub mod qc;
pub mod quadtree;
pub mod random;
pub mod rank_genes;
pub mod real;
pub mod regress;
pub mod scale;
pub mod score_genes;
pub mod scrublet;
pub mod stats;
pub mod synth;
pub mod tsne;
pub mod umap;
pub mod warm_up;

pub use columns::{Column, NamedColumns};
pub use comm::{Communicator, SingleRank};
pub use csr::CsrMatrix;
pub use dense::DenseMatrix;
pub use error::{CsrError, KernelError, Result};
pub use real::Real;

/// Runs `f` in a rayon pool of `threads` threads (the tests that a result does not depend on
/// the thread count).
#[cfg(test)]
pub(crate) fn on_threads<R: Send>(threads: usize, f: impl FnOnce() -> R + Send) -> R {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("a thread pool")
        .install(f)
}
