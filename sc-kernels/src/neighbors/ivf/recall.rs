//! Recall measured, not assumed: the exact kNN of a seeded sample of cells (on the CPU or the
//! device) and the share of its neighbours an approximate kNN found.

use crate::dense::DenseMatrix;
use crate::error::Result;
use crate::gpu::{DeviceVec, GpuContext};
use crate::neighbors::ivf::{Recall, DESCENT_MIN_GAIN, RECALL_CELLS};
use crate::neighbors::knn::{Knn, EXTRA};
use crate::neighbors::lists::{gather, sample_rows, SEED};
use crate::neighbors::scan::device::{scan_table, RefTable, QT};
use crate::neighbors::scan::host::{exact_best, products, Candidates};
use faer::MatRef;
use rayon::prelude::*;

/// The exact kNN of a seeded sample of the cells: what [`recall`] compares with.
#[derive(Debug, Clone, PartialEq)]
pub struct SampleKnn {
    pub cells: Vec<u32>,
    pub k: usize,
    pub indices: Vec<u32>,
    pub distances: Vec<f32>,
}

/// The sample's cells: [`RECALL_CELLS`] of the `n` (all of them when fewer), seeded.
pub(crate) fn recall_cells(n: usize) -> Vec<u32> {
    sample_rows(n, RECALL_CELLS, SEED ^ 0x7ec0)
}

/// recall@k of `approx` against the exact kNN of a sample of its cells.
pub fn recall(sample: &SampleKnn, approx: &Knn) -> Recall {
    recall_of(sample, |_, c| approx.row(c as usize).1)
}

/// recall@k of the rows whose distances `dist(s, cell)` gives for the sample's `s`-th cell.
fn recall_of<'a>(sample: &SampleKnn, dist: impl Fn(usize, u32) -> &'a [f32]) -> Recall {
    let k = sample.k;
    let mut found = 0usize;
    for (s, &c) in sample.cells.iter().enumerate() {
        let kth = sample.distances[(s + 1) * k - 1];
        found += dist(s, c)[1..]
            .iter()
            .filter(|&&v| v <= kth)
            .count()
            .min(k - 1);
    }
    let total = sample.cells.len() * (k - 1);
    Recall {
        value: if total == 0 {
            1.0
        } else {
            found as f64 / total as f64
        },
        cells: sample.cells.len(),
        k,
    }
}

/// Whether a round of the local join runs: its rows for the recall sample (a trial) must raise
/// the sample's recall by [`DESCENT_MIN_GAIN`].
pub(crate) struct Gate<'a> {
    sample: &'a SampleKnn,
    recall: f64,
    pub(crate) declined: Option<f64>,
}

impl<'a> Gate<'a> {
    pub(crate) fn new(sample: &'a SampleKnn, recall: f64) -> Self {
        Gate {
            sample,
            recall,
            declined: None,
        }
    }

    /// The trial's distances (`k` per sampled cell, in the sample's order).
    pub(crate) fn worth(&mut self, dist: &[f32]) -> bool {
        let k = self.sample.k;
        let after = recall_of(self.sample, |s, _| &dist[s * k..(s + 1) * k]).value;
        let gain = after - self.recall;
        if gain >= DESCENT_MIN_GAIN {
            self.recall = after;
            true
        } else {
            self.declined = Some(gain);
            false
        }
    }
}

/// The sample's exact kNN on the CPU.
pub(crate) fn exact_sample_host(
    xf: &[f32],
    norms: &[f32],
    n: usize,
    d: usize,
    k: usize,
) -> SampleKnn {
    let cells = recall_cells(n);
    let kc = (k + EXTRA).min(n);
    let qx = gather(xf, d, &cells);
    let a = MatRef::from_row_major_slice(&qx, cells.len(), d);
    const REFS: usize = 4096;
    let parts: Vec<Candidates> = (0..n.div_ceil(REFS))
        .into_par_iter()
        .map(|b| {
            let r0 = b * REFS;
            let nr = REFS.min(n - r0);
            let rb = MatRef::from_row_major_slice(&xf[r0 * d..(r0 + nr) * d], nr, d);
            let prod = products(rb, a);
            let mut c = Candidates::new(cells.len(), kc);
            c.offer(prod.as_ref(), &norms[r0..r0 + nr], |j| (r0 + j) as u32);
            c
        })
        .collect();
    let cand: Vec<Vec<u32>> = (0..cells.len())
        .map(|q| {
            parts
                .iter()
                .flat_map(|p| p.lists[q].iter().map(|e| e.1))
                .collect()
        })
        .collect();
    exact_rows(xf, d, k, cells, &cand)
}

/// The exact best `k` of each sampled cell's candidates (ids of cells; ~0: none).
fn exact_rows(xf: &[f32], d: usize, k: usize, cells: Vec<u32>, cand: &[Vec<u32>]) -> SampleKnn {
    let mut indices = vec![0u32; cells.len() * k];
    let mut distances = vec![0f32; cells.len() * k];
    indices
        .par_chunks_mut(k)
        .zip(distances.par_chunks_mut(k))
        .enumerate()
        .for_each(|(s, (oi, od))| {
            let c = cand[s].iter().copied().filter(|&j| j != u32::MAX);
            exact_best(xf, d, cells[s] as usize, c, oi, od);
        });
    SampleKnn {
        cells,
        k,
        indices,
        distances,
    }
}

/// The exact kNN of the sampled `cells` on the device: their candidates from the whole table
/// (of the cells in list order, `perm` giving each position's cell, or in their own order),
/// in spans of references so that the few queries fill the device; each span's candidates,
/// then the best of all on the host.
pub(crate) fn exact_sample_gpu(
    ctx: &GpuContext,
    xf: &[f32],
    table: &RefTable,
    perm: Option<&DeviceVec<u32>>,
    cells: Vec<u32>,
    k: usize,
) -> Result<SampleKnn> {
    let (n, d, positions) = (xf.len() / table.d, table.d, table.n);
    let kc = (k + EXTRA).min(n);
    let q = cells.len();
    if q == 0 {
        return Ok(exact_rows(xf, d, k, cells, &[]));
    }
    let qs = ctx.upload(&gather(xf, d, &cells))?;
    let blocks = q.div_ceil(QT);
    let spans = (4 * ctx.multiprocessors() as usize)
        .div_ceil(blocks)
        .min(positions.div_ceil(4096))
        .max(1);
    let sc = ctx.alloc::<u32>(spans * q * kc)?;
    scan_table(ctx, table, perm, &qs, kc, 0..q, None, spans, &sc)?;
    let sc = ctx.download(&sc)?;
    let cand: Vec<Vec<u32>> = (0..q)
        .map(|r| {
            (0..spans)
                .flat_map(|y| &sc[(y * q + r) * kc..(y * q + r + 1) * kc])
                .copied()
                .collect()
        })
        .collect();
    Ok(exact_rows(xf, d, k, cells, &cand))
}

/// The exact kNN of the sampled `cells` of `x` (`xd` on the device), on a table of the cells
/// in their own order: what a GPU measures before any index exists.
pub(crate) fn exact_sample_unlisted(
    ctx: &GpuContext,
    x: &DenseMatrix<f32>,
    xd: &DeviceVec<f32>,
    cells: Vec<u32>,
    k: usize,
) -> Result<SampleKnn> {
    if cells.is_empty() {
        return Ok(exact_rows(&x.data, x.n_cols, k, cells, &[]));
    }
    let table = RefTable::new(ctx, xd, x.n_rows, x.n_cols, 0)?;
    exact_sample_gpu(ctx, &x.data, &table, None, cells, k)
}

/// The parts of a sample, measured a share each, as one (the parts in the sample's order).
pub(crate) fn join_samples(k: usize, parts: impl IntoIterator<Item = SampleKnn>) -> SampleKnn {
    let mut all = SampleKnn {
        cells: Vec::new(),
        k,
        indices: Vec::new(),
        distances: Vec::new(),
    };
    for p in parts {
        all.cells.extend(p.cells);
        all.indices.extend(p.indices);
        all.distances.extend(p.distances);
    }
    all
}
