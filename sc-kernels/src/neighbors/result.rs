//! What a neighbors search returns, and how its kNN's candidates were ranked.

use crate::csr::CsrMatrix;
use crate::neighbors::knn::Knn;
use crate::neighbors::{ivf, pruned};

/// How a kNN's candidates were ranked before their exact f64 distances chose the neighbours.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scan {
    /// On the CPU (f32 matrix products).
    Cpu,
    /// On the GPU's CUDA cores (f32).
    F32,
    /// On tensor cores (FP16), `f32_queries` of the queries not certified by the bound and
    /// scanned again in f32.
    Tensor { f32_queries: usize },
    /// Exact, on tensor cores within the lists of an inverted file that the bounds of
    /// [`pruned`] keep.
    Pruned(pruned::PrunedStats),
    /// Approximate: within the lists of an inverted file (CPU or GPU), and how it did.
    Ivf(ivf::IvfStats),
}

impl Scan {
    /// Two parts of one kNN (e.g. the row ranges of several GPUs) as one.
    pub fn join(self, other: Scan) -> Scan {
        match (self, other) {
            (Scan::Tensor { f32_queries: a }, Scan::Tensor { f32_queries: b }) => {
                Scan::Tensor { f32_queries: a + b }
            }
            (Scan::Tensor { .. }, o) | (o, Scan::Tensor { .. }) => o,
            (a, _) => a,
        }
    }
}

/// What `neighbors` produces.
#[derive(Debug, Clone)]
pub struct NeighborsResult {
    /// The `n_neighbors` actually used (scanpy lowers it on tiny data).
    pub n_neighbors: usize,
    pub knn: Knn,
    /// `obsp['distances']`: `k - 1` non-self neighbours per row.
    pub distances: CsrMatrix<f32>,
    /// `obsp['connectivities']`: the symmetric fuzzy union.
    pub connectivities: CsrMatrix<f32>,
    /// How the kNN's candidates were ranked.
    pub scan: Scan,
}
