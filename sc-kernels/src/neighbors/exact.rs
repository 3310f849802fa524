//! The exact kNN: every cell against every cell, on the CPU ([`knn_exact`]: blocks of faer
//! matrix products, `k + 8` candidates kept per query, their distances then recomputed in f64)
//! and on the GPU ([`knn_exact_gpu`]: the f32 or tensor-core scan, through the pruned lists
//! from [`PRUNED_FROM_CELLS`](super::pruned::PRUNED_FROM_CELLS) cells).

use crate::dense::DenseMatrix;
use crate::error::{KernelError, Result};
use crate::gpu::{DeviceVec, GpuContext};
use crate::neighbors::knn::{check_k, Knn, EXTRA};
use crate::neighbors::pruned;
use crate::neighbors::result::Scan;
use crate::neighbors::scan::device::{
    f32_scan, refine, refine_among, scan_table, RefTable, MAX_DIMS, MAX_K,
};
use crate::neighbors::scan::host::{distance, exact_best, products_into, row_distance, Candidates};
use crate::neighbors::scan::tensor;
use crate::real::Real;
use faer::reborrow::{Reborrow, ReborrowMut};
use faer::{Mat, MatRef};
use rayon::prelude::*;

const QUERY_BLOCK: usize = 256;
pub(crate) const REF_BLOCK: usize = 2048;

/// Exact k nearest neighbours (self included) of the rows of `x`.
pub fn knn_exact<T: Real>(x: &DenseMatrix<T>, k: usize) -> Result<Knn> {
    let n = x.n_rows;
    check_k(n, k)?;
    x.check_finite()?;
    let xf: Vec<f32> = x.data.iter().map(|v| v.to_f64() as f32).collect();
    let (indices, distances) = scan(&xf, n, x.n_cols, &xf, None, k, |q, cand, oi, od| {
        exact_best(&xf, x.n_cols, q, cand, oi, od)
    });
    Ok(Knn {
        n_obs: n,
        k,
        indices,
        distances,
    })
}

/// The exact `k` nearest rows of `refs` (indices into `x`'s rows, at least `k` of them) of
/// each row of `x`, nearest first (ties: the smaller index), `n * k` indices and distances: a
/// row among `refs` finds itself at distance 0, the others do not (bbknn's per-batch search).
pub fn knn_among<T: Real>(
    x: &DenseMatrix<T>,
    refs: &[u32],
    k: usize,
) -> Result<(Vec<u32>, Vec<f32>)> {
    let (n, d) = (x.n_rows, x.n_cols);
    if k == 0 || k > refs.len() || refs.iter().any(|&r| r as usize >= n) {
        return Err(KernelError::param(
            "k",
            format!("{k} neighbours among {} reference rows of {n}", refs.len()),
        ));
    }
    x.check_finite()?;
    let xf: Vec<f32> = x.data.iter().map(|v| v.to_f64() as f32).collect();
    let xr: Vec<f32> = refs
        .iter()
        .flat_map(|&r| xf[r as usize * d..(r as usize + 1) * d].iter().copied())
        .collect();
    Ok(scan(&xf, n, d, &xr, Some(refs), k, |q, cand, oi, od| {
        nearest_first(cand.map(|j| (distance(&xf, d, q, j as usize), j)), oi, od)
    }))
}

/// The first `oi.len()` of `(exact distance, index)` candidates by distance, ties to the
/// smaller index, into `oi` and `od`.
fn nearest_first(cand: impl Iterator<Item = (f64, u32)>, oi: &mut [u32], od: &mut [f32]) {
    let mut exact: Vec<(f64, u32)> = cand.collect();
    exact.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    for ((i, o), e) in oi.iter_mut().zip(od.iter_mut()).zip(&exact) {
        *i = e.1;
        *o = e.0 as f32;
    }
}

/// The exact `k` nearest rows of `reference` of each row of `queries` (two sets: no row is
/// its own neighbour), nearest first (ties: the smaller index): indices into `reference` and
/// distances (ingest's search of new cells among a reference's).
pub fn knn_query<T: Real>(
    queries: &DenseMatrix<T>,
    reference: &DenseMatrix<T>,
    k: usize,
) -> Result<Knn> {
    check_query(queries, reference, k)?;
    let d = queries.n_cols;
    let xq: Vec<f32> = queries.data.iter().map(|v| v.to_f64() as f32).collect();
    let xr: Vec<f32> = reference.data.iter().map(|v| v.to_f64() as f32).collect();
    let n = queries.n_rows;
    let (indices, distances) = scan(&xq, n, d, &xr, None, k, |q, cand, oi, od| {
        let qv = &xq[q * d..(q + 1) * d];
        let row = |j: u32| &xr[j as usize * d..(j as usize + 1) * d];
        nearest_first(cand.map(|j| (row_distance(qv, row(j)), j)), oi, od)
    });
    Ok(Knn {
        n_obs: n,
        k,
        indices,
        distances,
    })
}

/// [`knn_query`]'s checks: the same dimensions, `1 ..= reference rows` neighbours, finite
/// values.
fn check_query<T: Real>(
    queries: &DenseMatrix<T>,
    reference: &DenseMatrix<T>,
    k: usize,
) -> Result<()> {
    let d = queries.n_cols;
    if reference.n_cols != d {
        return Err(KernelError::Shape(format!(
            "queries of {d} dimensions against a reference of {}",
            reference.n_cols
        )));
    }
    if k == 0 || k > reference.n_rows {
        return Err(KernelError::param(
            "k",
            format!("{k} neighbours among {} reference rows", reference.n_rows),
        ));
    }
    queries.check_finite()?;
    reference.check_finite()
}

/// [`knn_query`] on `ctx`'s GPU: the f32 scan of the queries against the reference's table
/// (`k + 8` candidates each), their distances then recomputed in f64 and ordered as the host
/// orders them: the host's neighbours and distances wherever the candidates hold them (as
/// bbknn's search). Beyond the GPU scan's limits (dimensions, neighbours) the host searches.
pub fn knn_query_gpu(
    ctx: &GpuContext,
    queries: &DenseMatrix<f32>,
    reference: &DenseMatrix<f32>,
    k: usize,
) -> Result<Knn> {
    check_query(queries, reference, k)?;
    let (nq, nr, d) = (queries.n_rows, reference.n_rows, queries.n_cols);
    if d == 0 || d > MAX_DIMS || k + EXTRA > MAX_K || u32::try_from(nq + nr).is_err() {
        return knn_query(queries, reference, k);
    }
    ctx.bind_to_thread()?;
    // The queries then the reference in one matrix: the refine reads query `r` at row `r`
    // and candidate `j` at row `j`, so the table names the reference's rows from `nq`.
    let split = nq * d;
    let (mut from_queries, mut from_reference) = (
        crate::gpu::staging::fill_from(&queries.data),
        crate::gpu::staging::fill_from(&reference.data),
    );
    let both = ctx.upload_with((nq + nr) * d, |first, dst| {
        let head = split.saturating_sub(first).min(dst.len());
        let (q, r) = dst.split_at_mut(head);
        if !q.is_empty() {
            from_queries(first, q)?;
        }
        if !r.is_empty() {
            from_reference(first + head - split, r)?;
        }
        Ok(())
    })?;
    let ids: Vec<u32> = (nq as u32..(nq + nr) as u32).collect();
    let refs = ctx.upload(&reference.data)?;
    let (mut indices, distances) = knn_of_first_rows_gpu(ctx, &both, nq, d, refs, &ids, k)?;
    indices.iter_mut().for_each(|j| *j -= nq as u32);
    Ok(Knn {
        n_obs: nq,
        k,
        indices,
        distances,
    })
}

/// The `k` nearest of the rows `ids` of `x` (`d` columns; `refs` holds those rows' values, in
/// `ids`' order) of each of `x`'s first `q` rows: the f32 scan's `k + 8` candidates against
/// `refs`' table, their distances recomputed in f64 and ordered as the host orders them (ties:
/// the smaller index). Rows of `x` and distances, `q * k` each ([`knn_query_gpu`]'s search
/// and bbknn's within a batch).
pub(crate) fn knn_of_first_rows_gpu(
    ctx: &GpuContext,
    x: &DeviceVec<f32>,
    q: usize,
    d: usize,
    refs: DeviceVec<f32>,
    ids: &[u32],
    k: usize,
) -> Result<(Vec<u32>, Vec<f32>)> {
    let table = RefTable::new(ctx, &refs, ids.len(), d, 0)?;
    drop(refs);
    let ids = ctx.upload(ids)?;
    let kc = (k + EXTRA).min(ids.len());
    let cand = ctx.alloc::<u32>(q.max(1) * kc)?;
    if q > 0 {
        scan_table(ctx, &table, Some(&ids), x, kc, 0..q, None, 1, &cand)?;
    }
    drop((table, ids));
    let (idx, dist) = refine_among(ctx, x, &cand, q, d, kc, k)?;
    let (mut indices, mut distances) = (ctx.download(&idx)?, ctx.download(&dist)?);
    indices.truncate(q * k);
    distances.truncate(q * k);
    Ok((indices, distances))
}

/// The scan both share: each query row of `xf` (`n x d`) against the reference rows `xr`
/// (`refs`: their indices in `xf`; `None`: `xr` is `xf`) by blocks of faer products, `k + 8`
/// candidates kept per query (by f32 score), then `finish(query, candidates, indices,
/// distances)` fills the query's `k` slots.
fn scan(
    xf: &[f32],
    n: usize,
    d: usize,
    xr: &[f32],
    refs: Option<&[u32]>,
    k: usize,
    finish: impl Fn(usize, &mut dyn Iterator<Item = u32>, &mut [u32], &mut [f32]) + Sync,
) -> (Vec<u32>, Vec<f32>) {
    let nr_all = xr.len() / d.max(1);
    let norms: Vec<f32> = (0..nr_all)
        .map(|i| xr[i * d..(i + 1) * d].iter().map(|v| v * v).sum())
        .collect();
    let kc = (k + EXTRA).min(nr_all);
    let mut indices = vec![0u32; n * k];
    let mut distances = vec![0f32; n * k];
    indices
        .par_chunks_mut(QUERY_BLOCK * k)
        .zip(distances.par_chunks_mut(QUERY_BLOCK * k))
        .enumerate()
        .for_each(|(qb, (oi, od))| {
            let q0 = qb * QUERY_BLOCK;
            let nq = oi.len() / k;
            let a = MatRef::from_row_major_slice(&xf[q0 * d..(q0 + nq) * d], nq, d);
            let mut cand = Candidates::new(nq, kc);
            let mut prod = Mat::<f32>::zeros(REF_BLOCK, nq);
            let mut r0 = 0;
            while r0 < nr_all {
                let nr = REF_BLOCK.min(nr_all - r0);
                let b = MatRef::from_row_major_slice(&xr[r0 * d..(r0 + nr) * d], nr, d);
                let mut pm = prod.as_mut().submatrix_mut(0, 0, nr, nq);
                products_into(pm.rb_mut(), b, a);
                cand.offer(pm.rb(), &norms[r0..r0 + nr], |j| match refs {
                    Some(r) => r[r0 + j],
                    None => (r0 + j) as u32,
                });
                r0 += nr;
            }
            for (q, c) in cand.lists.iter().enumerate() {
                let (oi, od) = (&mut oi[q * k..(q + 1) * k], &mut od[q * k..(q + 1) * k]);
                finish(q0 + q, &mut c.iter().map(|e| e.1), oi, od);
            }
        });
    (indices, distances)
}

/// The kNN of the rows of a device matrix `x` (`n x d`, row-major), self included.
pub fn knn_exact_gpu(
    ctx: &GpuContext,
    x: &DeviceVec<f32>,
    n: usize,
    d: usize,
    k: usize,
) -> Result<Knn> {
    Ok(knn_exact_gpu_with(ctx, x, n, d, k, Products::Auto)?.0)
}

/// [`knn_exact_gpu`] with the candidates ranked by `products`, and how they were.
pub fn knn_exact_gpu_with(
    ctx: &GpuContext,
    x: &DeviceVec<f32>,
    n: usize,
    d: usize,
    k: usize,
    products: Products,
) -> Result<(Knn, Scan)> {
    let (idx, dist, scan) = knn_rows_on_device(ctx, x, n, d, k, 0..n, products)?;
    let knn = Knn {
        n_obs: n,
        k,
        indices: ctx.download(&idx)?,
        distances: ctx.download(&dist)?,
    };
    Ok((knn, scan))
}

/// kNN left on the device: `(indices, distances)`, `n * k` each, and how it was scanned.
pub(crate) fn knn_on_device(
    ctx: &GpuContext,
    x: &DeviceVec<f32>,
    n: usize,
    d: usize,
    k: usize,
) -> Result<(DeviceVec<u32>, DeviceVec<f32>, Scan)> {
    knn_rows_on_device(ctx, x, n, d, k, 0..n, Products::Auto)
}

/// Which products rank the candidates: tensor cores where the GPU has them and the shape fits
/// (`Auto`, see [`super::tensor`]; for every row of at least
/// [`PRUNED_FROM_CELLS`](super::pruned::PRUNED_FROM_CELLS) cells within the lists the bounds of
/// [`super::pruned`] keep), or, for comparisons: tensor cores over all pairs (`Tensor`), through
/// pruned lists whatever the size (`Pruned`), the CUDA cores' f32 scan everywhere (`F32`, what
/// every GPU ran before the tensor path).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Products {
    Auto,
    Tensor,
    Pruned(pruned::PrunedParams),
    F32,
}

/// The kNN of the rows `rows` of `x` among all its `n` rows, left on the device:
/// `(indices, distances)`, `rows.len() * k` each.
fn knn_rows_on_device(
    ctx: &GpuContext,
    x: &DeviceVec<f32>,
    n: usize,
    d: usize,
    k: usize,
    rows: std::ops::Range<usize>,
    products: Products,
) -> Result<(DeviceVec<u32>, DeviceVec<f32>, Scan)> {
    check_k(n, k)?;
    if rows.end > n || rows.start > rows.end {
        return Err(KernelError::param(
            "rows",
            format!("{rows:?} is not within the {n} rows"),
        ));
    }
    let q = rows.len();
    if d == 0 || d > MAX_DIMS || k > MAX_K {
        return Err(KernelError::Unsupported(format!(
            "the GPU kNN takes 1 to {MAX_DIMS} dimensions and k up to {MAX_K} (got {d} and {k})"
        )));
    }
    if x.len() != n * d {
        return Err(KernelError::param(
            "x",
            format!("holds {} values, not {n} x {d}", x.len()),
        ));
    }
    let plan = match products {
        Products::F32 => None,
        _ if q == 0 => None,
        _ => tensor::plan(ctx.arch(), n, d, k),
    };
    let pruned = match products {
        Products::Auto if n >= pruned::PRUNED_FROM_CELLS => Some(Default::default()),
        Products::Pruned(p) => Some(p),
        _ => None,
    };
    // Pass 1's bound from the pruned lists, when they kept too much to scan only them.
    let (mut tau, mut pruned_stats) = (None, None);
    if let (Some(plan), Some(params), true) = (plan, pruned, rows == (0..n)) {
        match pruned::knn_pruned(ctx, x, (n, d, k), plan, params)? {
            pruned::Pruned::Done(idx, dist, stats) => return Ok((idx, dist, Scan::Pruned(stats))),
            pruned::Pruned::AllPairs(t, stats) => (tau, pruned_stats) = (Some(t), Some(stats)),
        }
    }
    // Candidates: `kc` slots per query (`counts` of them filled, when given).
    let (cand, counts, kc, scan) = match plan {
        Some(plan) => {
            let c = tensor::candidates(ctx, x, n, d, k, rows.clone(), plan, tau)?;
            if !c.uncertain.is_empty() {
                // Their counts already say `width`: the f32 scan fills every slot.
                let list = ctx.upload(&c.uncertain)?;
                f32_scan(ctx, x, n, d, c.width, rows.clone(), Some(&list), &c.cand)?;
            }
            let f32_queries = c.uncertain.len();
            let scan = match pruned_stats {
                Some(s) => Scan::Pruned(pruned::PrunedStats { f32_queries, ..s }),
                None => Scan::Tensor { f32_queries },
            };
            (c.cand, Some(c.counts), c.width, scan)
        }
        None => {
            let kc = (k + EXTRA).min(n);
            let cand = ctx.alloc::<u32>(q.max(1) * kc)?;
            f32_scan(ctx, x, n, d, kc, rows.clone(), None, &cand)?;
            (cand, None, kc, Scan::F32)
        }
    };

    let (idx, dist) = refine(ctx, x, &cand, counts.as_ref(), None, rows, d, kc, k)?;
    Ok((idx, dist, scan))
}

/// The kNN (self included) of the rows `rows` of `x` (`n x d` row-major, finite values) among
/// all its rows: `rows.len() * k` indices and distances, the rows of [`knn_exact_gpu`]'s result,
/// and how they were scanned. Several GPUs each take a range of rows and
/// [`neighbors_from_knn_gpu`](super::neighbors_from_knn_gpu) joins them.
pub fn knn_rows_gpu(
    ctx: &GpuContext,
    x: &DenseMatrix<f32>,
    k: usize,
    rows: std::ops::Range<usize>,
) -> Result<(Vec<u32>, Vec<f32>, Scan)> {
    x.check_finite()?;
    ctx.bind_to_thread()?;
    let xd = ctx.upload(&x.data)?;
    let q = rows.len();
    let (idx, dist, scan) =
        knn_rows_on_device(ctx, &xd, x.n_rows, x.n_cols, k, rows, Products::Auto)?;
    let (mut i, mut d) = (ctx.download(&idx)?, ctx.download(&dist)?);
    i.truncate(q * k);
    d.truncate(q * k);
    Ok((i, d, scan))
}
