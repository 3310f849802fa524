//! Batch-balanced kNN (bbknn, Polański et al. 2020; rapids-singlecell's `pp.bbknn`): each
//! cell's `neighbors_within_batch` nearest cells in every batch (the exact search, bbknn's
//! `cKDTree` / rapids-singlecell's brute force), those `n_batches x within` neighbours sorted by
//! distance, the UMAP connectivities of that kNN (scanpy's `neighbors`), then bbknn's trim: an
//! edge stays when its weight is at least the `trim`-th largest of each of its two cells' rows
//! (`trim` defaults to 10 times the neighbours a cell; 0 keeps every edge).

use super::connectivities::{distance_matrix, umap_connectivities};
use super::exact::{knn_among, knn_of_first_rows_gpu};
use super::knn::{Knn, EXTRA};
use super::scan::device::{MAX_DIMS, MAX_K};
use crate::csr::CsrMatrix;
use crate::dense::DenseMatrix;
use crate::error::{KernelError, Result};
use crate::gpu::{DeviceVec, GpuContext};
use crate::group_by::{check_labels, group_members};
use rayon::prelude::*;

/// bbknn's parameters and defaults.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BbknnParams {
    pub neighbors_within_batch: usize,
    /// `None`: 10 times the neighbours a cell.
    pub trim: Option<usize>,
    pub set_op_mix_ratio: f64,
    pub local_connectivity: f64,
}

impl Default for BbknnParams {
    fn default() -> Self {
        BbknnParams {
            neighbors_within_batch: 3,
            trim: None,
            set_op_mix_ratio: 1.0,
            local_connectivity: 1.0,
        }
    }
}

/// The graph and what was used.
#[derive(Debug, Clone, PartialEq)]
pub struct Bbknn {
    pub distances: CsrMatrix<f32>,
    pub connectivities: CsrMatrix<f32>,
    /// Neighbours a cell: `n_batches x neighbors_within_batch`.
    pub n_neighbors: usize,
    pub trim: usize,
}

/// The batch-balanced graph of the rows of `x`, each in batch `batches[i]` (`< n_batches`).
pub fn bbknn(
    x: &DenseMatrix<f32>,
    batches: &[u32],
    n_batches: usize,
    p: &BbknnParams,
) -> Result<Bbknn> {
    bbknn_with(x, batches, n_batches, p, |refs, k| knn_among(x, refs, k))
}

/// [`bbknn`] with each batch's search on `ctx`'s GPU (the f32 scan of every cell against the
/// batch's, the candidates' distances then recomputed in f64 and ordered as the host orders
/// them: the host's neighbours and distances wherever the candidates hold them). Beyond the GPU
/// scan's limits (dimensions, neighbours) the host searches.
pub fn bbknn_gpu(
    ctx: &GpuContext,
    x: &DenseMatrix<f32>,
    batches: &[u32],
    n_batches: usize,
    p: &BbknnParams,
) -> Result<Bbknn> {
    if x.n_cols == 0 || x.n_cols > MAX_DIMS || p.neighbors_within_batch + EXTRA > MAX_K {
        return bbknn(x, batches, n_batches, p);
    }
    x.check_finite()?;
    ctx.bind_to_thread()?;
    let xd = ctx.upload(&x.data)?;
    bbknn_with(x, batches, n_batches, p, |refs, k| {
        knn_among_gpu(ctx, x, &xd, refs, k)
    })
}

/// [`knn_among`] on the device: every row of `x` (`xd` on the device) against the rows `refs`.
fn knn_among_gpu(
    ctx: &GpuContext,
    x: &DenseMatrix<f32>,
    xd: &DeviceVec<f32>,
    refs: &[u32],
    k: usize,
) -> Result<(Vec<u32>, Vec<f32>)> {
    let rows = {
        let rows: Vec<f32> = refs
            .iter()
            .flat_map(|&r| x.row(r as usize).iter().copied())
            .collect();
        ctx.upload(&rows)?
    };
    knn_of_first_rows_gpu(ctx, xd, x.n_rows, x.n_cols, rows, refs, k)
}

/// The batch-balanced graph, each batch's `within` nearest rows of every row found by
/// `among(batch's rows, within)` (nearest first, `n x within`).
fn bbknn_with(
    x: &DenseMatrix<f32>,
    batches: &[u32],
    n_batches: usize,
    p: &BbknnParams,
    mut among: impl FnMut(&[u32], usize) -> Result<(Vec<u32>, Vec<f32>)>,
) -> Result<Bbknn> {
    let n = x.n_rows;
    if batches.len() != n {
        return Err(KernelError::Shape(format!(
            "{} batch labels for {n} cells",
            batches.len()
        )));
    }
    check_labels(batches, n_batches, "batches")?;
    if batches.iter().any(|&b| b as usize >= n_batches) {
        return Err(KernelError::param("batches", "every cell needs a batch"));
    }
    let within = p.neighbors_within_batch;
    if within == 0 {
        return Err(KernelError::param(
            "neighbors_within_batch",
            "must be at least 1",
        ));
    }
    let (members, starts) = group_members(batches, n_batches);
    let present: Vec<&[u32]> = (0..n_batches)
        .map(|b| &members[starts[b]..starts[b + 1]])
        .filter(|m| !m.is_empty())
        .collect();
    if let Some(small) = present
        .iter()
        .map(|m| m.len())
        .filter(|&s| s < within)
        .min()
    {
        return Err(KernelError::param(
            "neighbors_within_batch",
            format!("{within}, but a batch has only {small} cells: every batch needs at least that many"),
        ));
    }
    let k = within * present.len();
    let mut indices = vec![0u32; n * k];
    let mut distances = vec![0f32; n * k];
    for (b, refs) in present.iter().enumerate() {
        let (idx, dist) = among(refs, within)?;
        indices
            .par_chunks_mut(k)
            .zip(distances.par_chunks_mut(k))
            .enumerate()
            .for_each(|(i, (oi, od))| {
                let cols = b * within..(b + 1) * within;
                oi[cols.clone()].copy_from_slice(&idx[i * within..(i + 1) * within]);
                od[cols].copy_from_slice(&dist[i * within..(i + 1) * within]);
            });
    }
    // Nearest first across the batches (ties: the smaller index), the cell itself first.
    indices
        .par_chunks_mut(k)
        .zip(distances.par_chunks_mut(k))
        .enumerate()
        .for_each(|(i, (oi, od))| {
            let mut row: Vec<(f32, bool, u32)> = oi
                .iter()
                .zip(od.iter())
                .map(|(&j, &d)| (d, j as usize != i, j))
                .collect();
            row.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
            for (t, e) in row.into_iter().enumerate() {
                oi[t] = e.2;
                od[t] = e.0;
            }
        });
    let knn = Knn {
        n_obs: n,
        k,
        indices,
        distances,
    };
    let mut connectivities = umap_connectivities(&knn, p.set_op_mix_ratio, p.local_connectivity)?;
    let trim = p.trim.unwrap_or(10 * k);
    if trim > 0 {
        connectivities = trimmed(&connectivities, trim);
    }
    Ok(Bbknn {
        distances: distance_matrix(&knn),
        connectivities,
        n_neighbors: k,
        trim,
    })
}

/// bbknn's trim: each row's threshold is its `trim`-th largest weight (0 for rows of at most
/// `trim` edges); an edge stays when it reaches both its row's and its column's threshold.
pub fn trimmed(g: &CsrMatrix<f32>, trim: usize) -> CsrMatrix<f32> {
    let thresholds: Vec<f32> = (0..g.n_rows)
        .into_par_iter()
        .map(|i| {
            let (_, v) = g.row(i);
            if v.len() <= trim {
                return 0.0;
            }
            let mut v = v.to_vec();
            v.sort_by(|a, b| b.total_cmp(a));
            v[trim - 1]
        })
        .collect();
    let mut indptr = Vec::with_capacity(g.n_rows + 1);
    indptr.push(0u64);
    let (mut indices, mut data) = (Vec::new(), Vec::new());
    for i in 0..g.n_rows {
        let (cols, vals) = g.row(i);
        for (&j, &v) in cols.iter().zip(vals) {
            if v >= thresholds[i] && v >= thresholds[j as usize] {
                indices.push(j);
                data.push(v);
            }
        }
        indptr.push(indices.len() as u64);
    }
    CsrMatrix {
        n_rows: g.n_rows,
        n_cols: g.n_cols,
        indptr,
        indices,
        data,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::SplitMix64;

    /// Two batches apart: plain kNN would seldom cross them, bbknn gives each cell
    /// `within` neighbours in each (itself among its own batch's).
    #[test]
    fn every_cell_gets_its_neighbours_in_every_batch() {
        let mut g = SplitMix64::new(5);
        let n = 120;
        let batches: Vec<u32> = (0..n).map(|i| (i % 3 == 0) as u32).collect();
        let data: Vec<f32> = (0..n)
            .flat_map(|i| {
                let shift = if batches[i] == 1 { 4.0 } else { 0.0 };
                (0..4)
                    .map(|_| (shift + g.normal()) as f32)
                    .collect::<Vec<_>>()
            })
            .collect();
        let x = DenseMatrix::new(n, 4, data).unwrap();
        let p = BbknnParams::default();
        let out = bbknn(&x, &batches, 2, &p).unwrap();
        assert_eq!((out.n_neighbors, out.trim), (6, 60));
        for i in 0..n {
            let (cols, d) = out.distances.row(i);
            assert_eq!(cols.len(), 5, "cell {i}: itself left out of the distances");
            for b in 0..2u32 {
                let here = cols.iter().filter(|&&j| batches[j as usize] == b).count();
                let want = if batches[i] == b { 2 } else { 3 };
                assert_eq!(here, want, "cell {i}, batch {b}");
            }
            assert!(d.iter().all(|v| *v > 0.0));
            let (cc, _) = out.connectivities.row(i);
            assert!(cc.iter().any(|&j| batches[j as usize] != batches[i]));
        }
        // A batch smaller than `within`, or a cell without a batch: named errors.
        let p4 = BbknnParams {
            neighbors_within_batch: 41,
            ..p
        };
        assert!(bbknn(&x, &batches, 2, &p4)
            .unwrap_err()
            .to_string()
            .contains("only 40 cells"));
        let mut none = batches.clone();
        none[3] = crate::group_by::NO_GROUP;
        assert!(bbknn(&x, &none, 2, &p)
            .unwrap_err()
            .to_string()
            .contains("batch"));
    }

    /// The trim keeps an edge when it is among the `trim` largest of both its cells' rows.
    #[test]
    fn the_trim_keeps_the_edges_both_cells_rank_high() {
        // Cell 0 joined to 1..=4 with weights 0.1..0.4 (a symmetric star), 1-2 at 0.05.
        let mut e: Vec<(u32, u32, f32)> = (1..=4u32).map(|j| (0, j, j as f32 / 10.0)).collect();
        e.push((1, 2, 0.05));
        let mut rows = vec![Vec::new(); 5];
        for &(a, b, w) in &e {
            rows[a as usize].push((b, w));
            rows[b as usize].push((a, w));
        }
        let mut indptr = vec![0u64];
        let (mut indices, mut data) = (Vec::new(), Vec::new());
        for r in rows.iter_mut() {
            r.sort_by_key(|x| x.0);
            indices.extend(r.iter().map(|x| x.0));
            data.extend(r.iter().map(|x| x.1));
            indptr.push(indices.len() as u64);
        }
        let g = CsrMatrix {
            n_rows: 5,
            n_cols: 5,
            indptr,
            indices,
            data,
        };
        let t = trimmed(&g, 2);
        // Row 0 keeps its two largest (to 3 and 4); 1-2 stays (each has 2 edges at most).
        assert_eq!(t.row(0).0, &[3, 4]);
        assert_eq!(t.row(1).0, &[2]);
        assert_eq!(t.row(3).0, &[0]);
        assert_eq!(trimmed(&g, 10), g);
    }
}
