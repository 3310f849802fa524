//! What a neighbors search returns, and how its kNN's candidates were ranked (with what the
//! pruned exact search and the inverted file report of their work).

use crate::csr::CsrMatrix;
use crate::neighbors::knn::Knn;

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
    /// [`pruned`](super::pruned) keep.
    Pruned(PrunedStats),
    /// Approximate: within the lists of an inverted file (CPU or GPU), and how it did.
    Ivf(IvfStats),
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

/// What the pruned search did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PrunedStats {
    pub n_lists: usize,
    pub first_probes: usize,
    /// References in the lists the bounds keep, per cell, on average.
    pub refs_per_cell: f64,
    /// Whether pass 2 scanned all pairs (the bounds kept too many).
    pub all_pairs: bool,
    /// Queries the bound could not certify, scanned again in f32 within the kept lists.
    pub f32_queries: usize,
}

/// What the inverted file did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IvfStats {
    pub n_lists: usize,
    /// Lists each list's cells probed (at least; more where those held too few cells).
    pub n_probes: usize,
    /// The recall the probes were chosen for; `None`: a given count.
    pub target_recall: Option<f64>,
    /// References scanned per cell, on average.
    pub refs_per_cell: f64,
    pub recall: Option<Recall>,
    /// `Some(q)`: the probed lists were scanned on tensor cores, and `q` cells, not certified
    /// by the FP16 bound, scanned again in f32; `None`: in f32 (or on the CPU).
    pub f32_queries: Option<usize>,
    /// Lists (each list's nearest probes) the tensor scan's first pass bounded from; `None`:
    /// no tensor scan.
    pub bound_probes: Option<usize>,
    /// Rounds of the local join run after the scan.
    pub descent_rounds: usize,
    /// The scan's recall (before the local join; `recall` is the result's).
    pub scan_recall: Option<Recall>,
    /// Neighbours the local join put in rows that did not hold them.
    pub descent_replaced: usize,
    /// The sample's recall gain of the round that was tried and not run (under
    /// [`DESCENT_MIN_GAIN`](crate::neighbors::ivf::DESCENT_MIN_GAIN)); `None`: every round asked for ran (or none was asked for).
    pub descent_declined: Option<f64>,
}

/// recall@k of an approximate kNN: the share of the exact kNN's `k - 1` other neighbours of
/// the sampled cells that it found (a neighbour tied with the exact k-th counts as found).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Recall {
    pub value: f64,
    pub cells: usize,
    pub k: usize,
}
