//! Approximate kNN by an inverted file ("IVF-flat"), for data too large for the exact scan's
//! `O(n^2)` work.
//!
//! The index: k-means (Lloyd, `TRAIN_ITERS` rounds) on a seeded sample of `TRAIN_PER_LIST`
//! cells per list gives `n_lists` centroids; every cell goes to the list of its nearest
//! centroid. The search is blocked by list: the cells of one list are queried together
//! against the lists of the `n_probes` centroids nearest to their own list's centroid (their
//! own first; more where those hold fewer than the candidates kept), so a block of 64 queries
//! shares every reference it loads, as in the exact scan. Within the probed lists the search is
//! exact: the same f32 candidates and f64 refinement as [`super::knn_exact`], so a neighbour
//! that is found has its exact distance, and the result differs from the exact kNN only where
//! a true neighbour lies in a list that was not probed.
//!
//! The scan's result then runs [`descent`](super::descent)'s local join (up to
//! [`IvfParams::descent_rounds`] rounds, default [`super::descent::DEFAULT_ROUNDS`]): the cells
//! that found a cell bring it their own neighbours. Each round is tried on the recall sample
//! first and runs only where it raises the sample's recall by [`DESCENT_MIN_GAIN`] or more: on
//! real cells (pbmc68k's PCs) a round finds much of what few probes miss, on the generated
//! atlas's blobs it found 0.5% more in 2.7 s (`benches/RESULTS.md`).
//!
//! Recall is measured, not assumed: [`recall`] compares the result with the exact kNN of a
//! seeded sample of [`RECALL_CELLS`] cells (exact on the device on the GPU), after the scan and
//! after the local join.
//!
//! On the GPU the lists are laid out one after another (each starting at a multiple of 4, the
//! scan's vector loads), `ivf_scan` runs one block per 64 cells of a list, and `knn_refine`
//! picks the neighbours; the centroid assignments run on the exact scan's kernel (`k = 1`).
//! Several GPUs each build the same index (the same kernels on the same data) and take a
//! share of the blocks.

mod gpu;
mod gpu_index;
mod host;
mod probes;
mod recall;
mod tensor_search;
#[cfg(test)]
mod tests;

pub use crate::neighbors::result::{IvfStats, Recall};
pub use gpu::{
    device_bytes, finish_gpu, join_parts, knn_ivf_across, knn_ivf_gpu, knn_ivf_gpu_with,
    plan_ivf_gpu, IvfRows,
};
pub use host::knn_ivf;
pub use probes::probes_for;
pub use recall::{recall, SampleKnn};

use crate::error::{KernelError, Result};
use crate::neighbors::descent::DEFAULT_ROUNDS;

/// Cells whose exact kNN measures the recall.
pub const RECALL_CELLS: usize = 2048;

/// Most rounds of the local join a search takes (each round after the first finds little).
pub const MAX_DESCENT_ROUNDS: usize = 8;

/// The rise of the sample's recall@k for which a round of the local join runs.
pub const DESCENT_MIN_GAIN: f64 = 0.01;

/// Lists the tensor scan's first pass bounds from where [`IvfParams::bound_probes`] is not
/// given: the nearer half of the `n_probes`, and at least 32 (all where fewer). On the atlas's
/// PCs (3,369 lists, 138 probes, H100, session 53): pass 1 over all took 15.2 s and pass 2
/// 14.4 s; over 64, 7.8 and 15.6 s (437 cells scanned again in f32); over 32, 4.4 and 17.2 s
/// (91,638); over 16, 2.5 and 24.9 s (741,028): past half, the looser bound's f32 re-scans
/// cost more than pass 1 saves.
pub fn default_bound_probes(n_probes: usize) -> usize {
    n_probes.div_ceil(2).max(n_probes.min(32))
}

/// recall@k that the probes are chosen to reach when no probe count is given. 0.96, not 0.95:
/// on the 1 M generated cells, Leiden's modularity on the exact graph missed its quality gate by
/// less than 0.0001 at 0.95 (25 probes) and passed at 0.96 (28), and the 11.4 M atlas stays
/// under a minute (58.2 s on an H100, 150 probes instead of 138; `benches/RESULTS.md` (b4)).
pub const DEFAULT_TARGET_RECALL: f64 = 0.96;

/// The inverted file's size; `None`: the default for the data (see [`IvfParams::settle`]).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct IvfParams {
    pub n_lists: Option<usize>,
    /// Lists each list's cells probe; `None`: the fewest that reach `target_recall` on the
    /// recall sample (see [`probes_for`]).
    pub n_probes: Option<usize>,
    /// The recall@k the chosen probes reach on the sample (without `n_probes`); `None`:
    /// [`DEFAULT_TARGET_RECALL`]. The scan's recall: the local join then raises it.
    pub target_recall: Option<f64>,
    /// Rounds of NN-descent's local join after the scan ([`super::descent`]); `None`:
    /// [`DEFAULT_ROUNDS`], 0: the scan's result as it is.
    pub descent_rounds: Option<usize>,
    /// Lists (the nearest of each list's probes) over which the tensor scan's first pass
    /// bounds each cell's `k`-th distance; `None`: [`default_bound_probes`]. Any subset gives
    /// a valid bound, so the result does not change; fewer lists make pass 1 cheaper and the
    /// bound looser (more candidates, more cells the f32 scan takes).
    pub bound_probes: Option<usize>,
}

/// How many lists are probed: a given count, or the fewest that reach a recall on the sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Probes {
    Fixed(usize),
    Target(f64),
}

/// Lists and probes settled for `n` cells.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IvfShape {
    pub n_lists: usize,
    pub probes: Probes,
    pub descent_rounds: usize,
    /// See [`IvfParams::bound_probes`] (more than the probes: all of them).
    pub bound_probes: Option<usize>,
}

impl IvfParams {
    /// The shape for `n` cells: `n_lists` defaults to `sqrt(n)` (at least 1), the probes to
    /// those reaching [`DEFAULT_TARGET_RECALL`]; a named error for 0, more lists than cells,
    /// more probes than lists, a recall outside (0, 1], or both a probe count and a recall.
    pub fn settle(&self, n: usize) -> Result<IvfShape> {
        let n_lists = self
            .n_lists
            .unwrap_or_else(|| ((n as f64).sqrt().round() as usize).clamp(1, n.max(1)));
        if n_lists == 0 || n_lists > n {
            return Err(KernelError::param(
                "n_lists",
                format!("must be between 1 and the number of cells ({n}), got {n_lists}"),
            ));
        }
        let probes = match (self.n_probes, self.target_recall) {
            (Some(_), Some(_)) => {
                return Err(KernelError::param(
                    "target_recall",
                    "n_probes and target_recall both choose the probes: give one",
                ))
            }
            (Some(p), None) if p == 0 || p > n_lists => {
                return Err(KernelError::param(
                    "n_probes",
                    format!("must be between 1 and n_lists ({n_lists}), got {p}"),
                ))
            }
            (Some(p), None) => Probes::Fixed(p),
            (None, Some(t)) if !(t > 0.0 && t <= 1.0) => {
                return Err(KernelError::param(
                    "target_recall",
                    format!("must be above 0 and at most 1, got {t}"),
                ))
            }
            (None, t) => Probes::Target(t.unwrap_or(DEFAULT_TARGET_RECALL)),
        };
        let descent_rounds = self.descent_rounds.unwrap_or(DEFAULT_ROUNDS);
        if descent_rounds > MAX_DESCENT_ROUNDS {
            return Err(KernelError::param(
                "descent_rounds",
                format!("must be at most {MAX_DESCENT_ROUNDS}, got {descent_rounds}"),
            ));
        }
        if self.bound_probes == Some(0) {
            return Err(KernelError::param(
                "bound_probes",
                "must be at least 1, got 0",
            ));
        }
        Ok(IvfShape {
            n_lists,
            probes,
            descent_rounds,
            bound_probes: self.bound_probes,
        })
    }
}
