//! `pca` (scanpy's `pp.pca`) by the covariance route: the Gram matrix `G = X^T X` and the column
//! means `mu` are accumulated in `f64` over blocks of rows (a sparse matrix is densified one
//! block at a time, never whole), the covariance `C = (G - n mu mu^T) / (n - 1)` is formed in
//! `f64`, and its symmetric eigendecomposition (faer) gives the top `n_comps` components.
//!
//! Outputs as scanpy stores them: `X_pca = (X - mu) V` (`obsm['X_pca']`, float32),
//! the components (`varm['PCs']` is their transpose), `variance` (eigenvalues of `C`, i.e. with
//! ddof 1 as sklearn) and `variance_ratio` (against the total variance, the trace of `C`).
//! Signs follow sklearn's `svd_flip(u_based_decision=False)`: the largest-magnitude loading of
//! each component is positive.
//!
//! Without zero-centring (scanpy's `TruncatedSVD` path), `C = G`, and `variance` is the
//! variance (ddof 0) of each score column, `variance_ratio` its share of the summed variances
//! (ddof 0) of the features, as sklearn's `TruncatedSVD` defines them.
//!
//! [`pca_dense_gpu`] is the GPU twin for a dense device matrix (Gram matrix, eigendecomposition
//! and scores on the device; the covariance, sign rule and variances by the same host code).

pub(crate) mod gpu;

/// The step's kernel module, for the warm-up ([`crate::warm_up`]).
pub const KERNELS: crate::gpu::module_cache::KernelSource = gpu::SRC;
pub use gpu::{
    gram_bytes, pca_dense_blocks, pca_dense_gpu, pca_dense_gpu_across, pca_dense_streamed,
};

use crate::comm::{sum_count, Communicator, SingleRank};
use crate::csr::CsrMatrix;
use crate::dense::DenseMatrix;
use crate::error::{KernelError, Result};
use crate::real::Real;
use faer::linalg::matmul::triangular::{matmul as tri_matmul, BlockStructure};
use faer::{Accum, Mat, MatRef, Par};
use rayon::prelude::*;

/// Parameters of [`pca_dense`] / [`pca_sparse`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PcaParams {
    /// Number of components; clipped to `min(n_obs, n_vars) - 1` as scanpy does.
    pub n_comps: usize,
    pub zero_center: bool,
}

impl Default for PcaParams {
    fn default() -> Self {
        PcaParams {
            n_comps: 50,
            zero_center: true,
        }
    }
}

/// The result, in scanpy's layout.
#[derive(Debug, Clone)]
pub struct PcaResult {
    /// `n_obs x n_comps` scores (`obsm['X_pca']`).
    pub x_pca: DenseMatrix<f32>,
    /// `n_comps x n_vars` components (rows are principal axes; `varm['PCs']` is the transpose).
    pub components: DenseMatrix<f64>,
    /// Explained variance of each component (`uns['pca']['variance']`).
    pub variance: Vec<f64>,
    /// Its share of the total variance (`uns['pca']['variance_ratio']`).
    pub variance_ratio: Vec<f64>,
    /// Column means that were subtracted (zeros without centring).
    pub mean: Vec<f64>,
}

/// Work (multiply-adds of the Gram matrix) above which the blocks are multiplied in `f32`: each
/// block product is then accumulated in `f32` over at most [`BLOCK_F32`] rows and added to the
/// `f64` total (relative error ~1e-6, ample for 1e-3 variance ratios, and twice the speed).
const F32_WORK: f64 = 4e9;
const BLOCK_F64: usize = 1024;
const BLOCK_F32: usize = 4096;

/// The block element type of the Gram products.
trait GramElem: Real + faer::traits::ComplexField {}
impl GramElem for f32 {}
impl GramElem for f64 {}

/// Accumulates the lower triangle of `X^T X` and the column sums, with `fill(start, end, block)`
/// writing rows `start..end` of `X` (row-major) into `block`.
fn gram_with<E: GramElem, F>(n: usize, g: usize, block_rows: usize, fill: F) -> (Mat<f64>, Vec<f64>)
where
    F: Fn(usize, usize, &mut [E]) + Sync,
{
    let mut acc = Mat::<f64>::zeros(g, g);
    let mut part = Mat::<E>::zeros(g, g);
    let mut sums = vec![0.0f64; g];
    let mut block = vec![E::ZERO; block_rows.min(n.max(1)) * g];
    let mut start = 0;
    while start < n {
        let end = (start + block_rows).min(n);
        let b = end - start;
        let blk = &mut block[..b * g];
        fill(start, end, blk);
        let bm = MatRef::from_row_major_slice(&*blk, b, g);
        tri_matmul(
            part.as_mut(),
            BlockStructure::TriangularLower,
            Accum::Replace,
            bm.transpose(),
            BlockStructure::Rectangular,
            bm,
            BlockStructure::Rectangular,
            E::ONE,
            Par::rayon(0),
        );
        // Add the block's lower triangle into the f64 total, columns in parallel.
        {
            let part_ref = part.as_ref();
            let cols: Vec<(usize, Vec<f64>)> = (0..g)
                .into_par_iter()
                .map(|j| (j, (j..g).map(|i| part_ref[(i, j)].to_f64()).collect()))
                .collect();
            for (j, col) in cols {
                for (t, v) in col.into_iter().enumerate() {
                    acc[(j + t, j)] += v;
                }
            }
        }
        let colsum: Vec<f64> = blk
            .par_chunks(g * 64)
            .map(|rows| {
                let mut s = vec![0.0; g];
                for r in rows.chunks(g) {
                    for (a, b) in s.iter_mut().zip(r) {
                        *a += b.to_f64();
                    }
                }
                s
            })
            .reduce(
                || vec![0.0; g],
                |mut a, b| {
                    crate::stats::add_into(&mut a, &b);
                    a
                },
            );
        crate::stats::add_into(&mut sums, &colsum);
        start = end;
    }
    (acc, sums)
}

/// [`gram_with`] in `f64`, or in `f32` blocks for large problems; `fill` writes `f64` or `f32`.
fn gram<F32, F64>(n: usize, g: usize, fill32: F32, fill64: F64) -> (Mat<f64>, Vec<f64>)
where
    F32: Fn(usize, usize, &mut [f32]) + Sync,
    F64: Fn(usize, usize, &mut [f64]) + Sync,
{
    if (n as f64) * (g as f64) * (g as f64) > F32_WORK {
        gram_with::<f32, _>(n, g, BLOCK_F32, fill32)
    } else {
        gram_with::<f64, _>(n, g, BLOCK_F64, fill64)
    }
}

/// Rows per block of the score products.
const BLOCK: usize = 1024;

/// The `k` largest eigenvalues of a symmetric matrix (descending) and their unit eigenvectors
/// (the columns of a `g x k` matrix), by faer: the CPU's eigensolver of [`top_eigenpairs`]
/// (the GPU's is cuSOLVER's).
pub(crate) fn faer_top_eigen(c: Mat<f64>, k: usize) -> Result<(Vec<f64>, Mat<f64>)> {
    top_eigen_on(c, k, faer::get_global_parallelism())
}

/// [`faer_top_eigen`] on one core: the same bits whatever the thread count (faer's parallel
/// decomposition splits its work by it).
pub(crate) fn faer_top_eigen_seq(c: Mat<f64>, k: usize) -> Result<(Vec<f64>, Mat<f64>)> {
    top_eigen_on(c, k, Par::Seq)
}

/// faer's symmetric eigendecomposition (what `Mat::self_adjoint_eigen` runs) with `par`, its
/// `k` largest pairs kept.
fn top_eigen_on(c: Mat<f64>, k: usize, par: Par) -> Result<(Vec<f64>, Mat<f64>)> {
    use faer::linalg::evd::{self_adjoint_evd, self_adjoint_evd_scratch, ComputeEigenvectors};
    let g = c.nrows();
    let mut u = Mat::<f64>::zeros(g, g);
    let mut s = faer::diag::Diag::<f64>::zeros(g);
    let scratch =
        self_adjoint_evd_scratch::<f64>(g, ComputeEigenvectors::Yes, par, Default::default());
    self_adjoint_evd(
        c.as_ref(),
        s.as_mut(),
        Some(u.as_mut()),
        par,
        faer::dyn_stack::MemStack::new(&mut faer::dyn_stack::MemBuffer::new(scratch)),
        Default::default(),
    )
    .map_err(|e| KernelError::Unsupported(format!("eigendecomposition failed: {e:?}")))?;
    // Ascending: the last k, largest first.
    let s = s.column_vector();
    let mut vals = Vec::with_capacity(k);
    let mut comps = Mat::<f64>::zeros(g, k);
    for c_ in 0..k {
        let src = g - 1 - c_;
        vals.push(s[src]);
        for i in 0..g {
            comps[(i, c_)] = u[(i, src)];
        }
    }
    Ok((vals, comps))
}

/// Top `k` eigenpairs of the (lower-stored) covariance by the eigensolver `eig` (given the full
/// symmetric matrix, it returns what [`faer_top_eigen`] does), with the total variance (the
/// trace); [`finish_eigen`] flips their signs.
fn top_eigenpairs<E>(mut c: Mat<f64>, k: usize, eig: E) -> Result<(Vec<f64>, Mat<f64>, f64)>
where
    E: FnOnce(Mat<f64>, usize) -> Result<(Vec<f64>, Mat<f64>)>,
{
    let g = c.nrows();
    for j in 0..g {
        for i in 0..j {
            c[(i, j)] = c[(j, i)];
        }
    }
    let total: f64 = (0..g).map(|i| c[(i, i)]).sum();
    let (vals, comps) = eig(c, k)?;
    Ok((vals, comps, total))
}

/// sklearn's `svd_flip(u_based_decision=False)`: the largest |loading| of each component is
/// made positive (the first one on ties).
fn flip_signs(comps: &mut Mat<f64>) {
    let g = comps.nrows();
    for c in 0..comps.ncols() {
        let mut best = 0;
        for i in 1..g {
            if comps[(i, c)].abs() > comps[(best, c)].abs() {
                best = i;
            }
        }
        if comps[(best, c)] < 0.0 {
            for i in 0..g {
                comps[(i, c)] = -comps[(i, c)];
            }
        }
    }
}

/// Cells below this many (and fewer than genes) take the dual route: the eigendecomposition of
/// the `n x n` matrix `Xc Xc^T` instead of the `g x g` covariance (same nonzero eigenvalues;
/// components `Xc^T u / sqrt((n-1) lambda)`), with `Xc` densified (it is small then).
const DUAL_MAX_CELLS: usize = 8192;
/// ... and while the densified matrix stays small (`n * g` values, 8 bytes each).
const DUAL_MAX_VALUES: usize = 20_000_000;

/// Whether an `n x g` input takes the dual route.
fn use_dual(n: usize, g: usize) -> bool {
    n < g && n <= DUAL_MAX_CELLS && n * g <= DUAL_MAX_VALUES
}

/// The top `k` components by the dual route from a dense row-major `n x g` (centred) matrix.
fn dual_components(
    xc: &[f64],
    n: usize,
    g: usize,
    k: usize,
    denom: f64,
) -> Result<(Vec<f64>, Mat<f64>, f64)> {
    let xm = MatRef::from_row_major_slice(xc, n, g);
    let mut kmat = Mat::<f64>::zeros(n, n);
    faer::linalg::matmul::matmul(
        kmat.as_mut(),
        Accum::Replace,
        xm,
        xm.transpose(),
        1.0 / denom,
        Par::rayon(0),
    );
    let total: f64 = (0..n).map(|i| kmat[(i, i)]).sum();
    let (vals, ucols) = faer_top_eigen(kmat, k)?;
    let mut comps = Mat::<f64>::zeros(g, k);
    faer::linalg::matmul::matmul(
        comps.as_mut(),
        Accum::Replace,
        xm.transpose(),
        ucols.as_ref(),
        1.0,
        Par::rayon(0),
    );
    for c in 0..k {
        let norm = (0..g).map(|i| comps[(i, c)].powi(2)).sum::<f64>().sqrt();
        let f = if norm > 0.0 && vals[c] > 0.0 {
            1.0 / norm
        } else {
            0.0
        };
        for i in 0..g {
            comps[(i, c)] *= f;
        }
    }
    flip_signs(&mut comps);
    Ok((vals, comps, total))
}

fn n_comps(params: &PcaParams, n: usize, g: usize) -> Result<usize> {
    if params.n_comps == 0 {
        return Err(KernelError::param("n_comps", "must be at least 1"));
    }
    let min_dim = n.min(g);
    if min_dim < 2 {
        return Err(KernelError::Unsupported(format!(
            "pca needs at least 2 cells and 2 genes, got {n} x {g}"
        )));
    }
    Ok(params.n_comps.min(min_dim - 1))
}

/// The shared tail of the covariance route, from the lower triangle of the Gram matrix `gm` (its
/// diagonal is the column sums of squares) and the column sums: covariance, top components by `eig` (see [`top_eigenpairs`]), scores
/// by `project(V, mu)` (`n x k`, row-major, f32 or f64), variances.
#[allow(clippy::too_many_arguments)]
fn finish_covariance<E, P, S>(
    n: usize,
    g: usize,
    k: usize,
    zero_center: bool,
    gm: Mat<f64>,
    sums: Vec<f64>,
    eig: E,
    project: P,
) -> Result<PcaResult>
where
    E: FnOnce(Mat<f64>, usize) -> Result<(Vec<f64>, Mat<f64>)>,
    P: FnOnce(&Mat<f64>, &[f64]) -> Result<Vec<S>>,
    S: Real + 'static,
{
    let sq_sums: Vec<f64> = (0..g).map(|j| gm[(j, j)]).collect();
    let nf = n as f64;
    let mean = column_means(n, zero_center, &sums);
    let mut c = gm;
    if zero_center {
        for j in 0..g {
            for i in j..g {
                c[(i, j)] = (c[(i, j)] - nf * mean[i] * mean[j]) / (nf - 1.0);
            }
        }
    }
    let (vals, comps, total) = top_eigenpairs(c, k, eig)?;
    finish_eigen(
        n,
        k,
        zero_center,
        (vals, comps),
        total,
        mean,
        sums,
        &sq_sums,
        project,
    )
}

/// The means the covariance route subtracts: the column sums over `n` cells, or zeros without
/// centring.
pub(crate) fn column_means(n: usize, zero_center: bool, sums: &[f64]) -> Vec<f64> {
    match zero_center {
        true => sums.iter().map(|s| s / n as f64).collect(),
        false => vec![0.0; sums.len()],
    }
}

/// The covariance route's tail from the top eigenpairs of the covariance (formed on the host
/// or on a device): `total` its trace, `mean` the means it subtracted ([`column_means`]),
/// `sq_sums` the Gram matrix's diagonal; the signs flipped, then the scores and variances.
#[allow(clippy::too_many_arguments)]
pub(crate) fn finish_eigen<P, S>(
    n: usize,
    k: usize,
    zero_center: bool,
    (vals, mut comps): (Vec<f64>, Mat<f64>),
    total: f64,
    mean: Vec<f64>,
    sums: Vec<f64>,
    sq_sums: &[f64],
    project: P,
) -> Result<PcaResult>
where
    P: FnOnce(&Mat<f64>, &[f64]) -> Result<Vec<S>>,
    S: Real + 'static,
{
    flip_signs(&mut comps);
    let g = sums.len();
    assemble(
        n,
        g,
        k,
        zero_center,
        vals,
        comps,
        total,
        mean,
        &sums,
        sq_sums,
        project,
    )
}

/// Scores, variances and the result from the components.
#[allow(clippy::too_many_arguments)]
fn assemble<P, S>(
    n: usize,
    g: usize,
    k: usize,
    zero_center: bool,
    vals: Vec<f64>,
    comps: Mat<f64>,
    total: f64,
    mean: Vec<f64>,
    sums: &[f64],
    sq_sums: &[f64],
    project: P,
) -> Result<PcaResult>
where
    P: FnOnce(&Mat<f64>, &[f64]) -> Result<Vec<S>>,
    S: Real + 'static,
{
    let nf = n as f64;
    let scores = project(&comps, &mean)?;
    let (variance, variance_ratio) = if zero_center {
        let ratio = vals.iter().map(|v| v / total).collect();
        (vals, ratio)
    } else {
        // TruncatedSVD: variance (ddof 0) of each score column over the summed feature variances.
        let var: Vec<f64> = (0..k)
            .map(|c_| {
                let m = (0..n).map(|i| scores[i * k + c_].to_f64()).sum::<f64>() / nf;
                (0..n)
                    .map(|i| (scores[i * k + c_].to_f64() - m).powi(2))
                    .sum::<f64>()
                    / nf
            })
            .collect();
        let total_var: f64 = (0..g)
            .map(|j| sq_sums[j] / nf - (sums[j] / nf).powi(2))
            .sum();
        let ratio = var.iter().map(|v| v / total_var).collect();
        (var, ratio)
    };
    let mut components = DenseMatrix::zeros(k, g);
    for c_ in 0..k {
        for j in 0..g {
            components.data[c_ * g + j] = comps[(j, c_)];
        }
    }
    let n_rows = scores.len() / k.max(1);
    // f32 scores (the GPU's) are kept as they are: no copy of n x k values.
    let data = match (Box::new(scores) as Box<dyn std::any::Any>).downcast::<Vec<f32>>() {
        Ok(f32s) => *f32s,
        Err(other) => {
            let scores = other.downcast::<Vec<S>>().expect("the scores' own type");
            scores.iter().map(|&v| v.to_f64() as f32).collect()
        }
    };
    let x_pca = DenseMatrix {
        // This rank's cells (all cells unless the rows are split across ranks).
        n_rows,
        n_cols: k,
        data,
    };
    Ok(PcaResult {
        x_pca,
        components,
        variance,
        variance_ratio,
        mean,
    })
}

/// The dual route for few cells: `get(i, j)` reads `X`.
fn pca_dual<G, P>(
    n: usize,
    g: usize,
    k: usize,
    zero_center: bool,
    get_row: G,
    project: P,
) -> Result<PcaResult>
where
    G: Fn(usize, &mut [f64]) + Sync,
    P: FnOnce(&Mat<f64>, &[f64]) -> Result<Vec<f64>>,
{
    let mut xc = vec![0.0f64; n * g];
    xc.par_chunks_mut(g)
        .enumerate()
        .for_each(|(i, r)| get_row(i, r));
    let nf = n as f64;
    let mut sums = vec![0.0; g];
    let mut sq = vec![0.0; g];
    for r in xc.chunks(g) {
        for j in 0..g {
            sums[j] += r[j];
            sq[j] += r[j] * r[j];
        }
    }
    let mean: Vec<f64> = if zero_center {
        sums.iter().map(|s| s / nf).collect()
    } else {
        vec![0.0; g]
    };
    if zero_center {
        xc.par_chunks_mut(g)
            .for_each(|r| r.iter_mut().zip(&mean).for_each(|(v, m)| *v -= m));
    }
    let denom = if zero_center { nf - 1.0 } else { 1.0 };
    let (vals, comps, total) = dual_components(&xc, n, g, k, denom)?;
    assemble(
        n,
        g,
        k,
        zero_center,
        vals,
        comps,
        total,
        mean,
        &sums,
        &sq,
        project,
    )
}

/// The Gram matrix (lower triangle) and column sums of this rank's rows, added to the other
/// ranks'.
pub(crate) fn reduce_gram(
    comm: &dyn Communicator,
    gm: &mut Mat<f64>,
    sums: &mut [f64],
) -> Result<()> {
    if comm.size() == 1 {
        return Ok(());
    }
    let g = gm.nrows();
    let lower = || (0..g).flat_map(|j| (j..g).map(move |i| (i, j)));
    let mut packed: Vec<f64> = lower().map(|(i, j)| gm[(i, j)]).collect();
    comm.all_reduce_sum(&mut packed)?;
    for ((i, j), v) in lower().zip(packed) {
        gm[(i, j)] = v;
    }
    comm.all_reduce_sum(sums)
}

/// The eigensolver `eig` run on rank 0 only, its result broadcast to every rank (so every rank
/// projects on the same components, bit for bit).
pub(crate) fn eig_on_root<'a, E>(
    comm: &'a dyn Communicator,
    eig: E,
) -> impl FnOnce(Mat<f64>, usize) -> Result<(Vec<f64>, Mat<f64>)> + 'a
where
    E: FnOnce(Mat<f64>, usize) -> Result<(Vec<f64>, Mat<f64>)> + 'a,
{
    move |c, k| {
        if comm.size() == 1 {
            return eig(c, k);
        }
        let g = c.nrows();
        // [ok flag, k values, g x k vectors column by column]
        let mut buf = vec![0.0; 1 + k + g * k];
        let mine = (comm.rank() == 0).then(|| eig(c, k));
        if let Some(Ok((vals, vecs))) = &mine {
            if vals.len() == k && vecs.ncols() == k {
                buf[0] = 1.0;
                buf[1..1 + k].copy_from_slice(vals);
                for c_ in 0..k {
                    for i in 0..g {
                        buf[1 + k + c_ * g + i] = vecs[(i, c_)];
                    }
                }
            }
        }
        comm.broadcast(&mut buf, 0)?;
        if let Some(Err(e)) = mine {
            return Err(e);
        }
        if buf[0] != 1.0 {
            return Err(KernelError::Comm(
                "pca: the eigendecomposition failed on rank 0".into(),
            ));
        }
        let vecs = Mat::from_fn(g, k, |i, c_| buf[1 + k + c_ * g + i]);
        Ok((buf[1..1 + k].to_vec(), vecs))
    }
}

/// The cells of all ranks, the components to compute, and whether the dual route applies (only
/// to a run that is not split: the dual route needs every cell's row).
fn shape_across(
    params: &PcaParams,
    n: usize,
    g: usize,
    comm: &dyn Communicator,
) -> Result<(usize, usize, bool)> {
    let n_all = sum_count(comm, n)?;
    let k = n_comps(params, n_all, g)?;
    if comm.size() > 1 && !params.zero_center {
        return Err(KernelError::Unsupported(
            "pca without zero-centring is not available when the cells are split across ranks"
                .into(),
        ));
    }
    Ok((n_all, k, comm.size() == 1 && use_dual(n, g)))
}

/// What PCA reads of a cells x genes matrix, dense or sparse.
trait PcaInput: Sync {
    fn shape(&self) -> (usize, usize);
    fn check_finite(&self) -> Result<()>;
    /// Row `i` in `f64` into `r` (`g` values): the dual route's rows.
    fn row_into(&self, i: usize, r: &mut [f64]);
    /// Rows `s..e` into `blk` (row-major, `g` values a row): the Gram matrix's blocks.
    fn block_into<E: Real>(&self, s: usize, e: usize, blk: &mut [E]);
    /// The scores `(X - mu) V`.
    fn project(&self, v: &Mat<f64>, mean: &[f64]) -> Vec<f64>;
}

/// PCA of one rank's cells: the covariance over the cells of all ranks of `comm`, every
/// rank's scores (`x_pca`) for its own cells; the dual route for few cells on one rank.
fn pca_across<X: PcaInput>(
    x: &X,
    params: &PcaParams,
    comm: &dyn Communicator,
) -> Result<PcaResult> {
    let (n, g) = x.shape();
    let (n_all, k, dual) = shape_across(params, n, g, comm)?;
    x.check_finite()?;
    let project = |v: &Mat<f64>, mean: &[f64]| Ok(x.project(v, mean));
    if dual {
        let get = |i: usize, r: &mut [f64]| x.row_into(i, r);
        return pca_dual(n, g, k, params.zero_center, get, project);
    }
    let (mut gm, mut sums) = gram(
        n,
        g,
        |s, e, b: &mut [f32]| x.block_into(s, e, b),
        |s, e, b: &mut [f64]| x.block_into(s, e, b),
    );
    reduce_gram(comm, &mut gm, &mut sums)?;
    finish_covariance(
        n_all,
        g,
        k,
        params.zero_center,
        gm,
        sums,
        eig_on_root(comm, faer_top_eigen),
        project,
    )
}

/// PCA of a dense cells x genes matrix.
pub fn pca_dense<T: Real>(x: &DenseMatrix<T>, params: &PcaParams) -> Result<PcaResult> {
    pca_dense_across(x, params, &SingleRank)
}

/// [`pca_dense`] of one rank's cells: the covariance over the cells of all ranks of `comm`,
/// every rank's scores (`x_pca`) for its own cells.
pub fn pca_dense_across<T: Real>(
    x: &DenseMatrix<T>,
    params: &PcaParams,
    comm: &dyn Communicator,
) -> Result<PcaResult> {
    pca_across(x, params, comm)
}

impl<T: Real> PcaInput for DenseMatrix<T> {
    fn shape(&self) -> (usize, usize) {
        (self.n_rows, self.n_cols)
    }

    fn check_finite(&self) -> Result<()> {
        DenseMatrix::check_finite(self)
    }

    fn row_into(&self, i: usize, r: &mut [f64]) {
        r.iter_mut()
            .zip(self.row(i))
            .for_each(|(a, b)| *a = b.to_f64())
    }

    fn block_into<E: Real>(&self, s: usize, e: usize, blk: &mut [E]) {
        let g = self.n_cols;
        blk.par_chunks_mut(g)
            .zip(self.data[s * g..e * g].par_chunks(g))
            .for_each(|(d, r)| {
                for (a, b) in d.iter_mut().zip(r) {
                    *a = E::from_f64(b.to_f64());
                }
            });
    }

    fn project(&self, v: &Mat<f64>, mean: &[f64]) -> Vec<f64> {
        project_dense_rows(self, v, mean)
    }
}

/// `mu^T V`: what centring subtracts from each row of the scores `X V`.
fn mean_times_v(mean: &[f64], v: &Mat<f64>) -> Vec<f64> {
    (0..v.ncols())
        .map(|c| (0..v.nrows()).map(|j| mean[j] * v[(j, c)]).sum())
        .collect()
}

/// Scores `(X - mu) V` of a dense matrix, blocks of rows through faer products.
fn project_dense_rows<T: Real>(x: &DenseMatrix<T>, v: &Mat<f64>, mean: &[f64]) -> Vec<f64> {
    let (n, g, k) = (x.n_rows, x.n_cols, v.ncols());
    let mv = mean_times_v(mean, v);
    let mut out = vec![0.0f64; n * k];
    out.par_chunks_mut(BLOCK * k)
        .enumerate()
        .for_each(|(bi, o)| {
            let s = bi * BLOCK;
            let b = o.len() / k;
            let blk: Vec<f64> = x.data[s * g..(s + b) * g]
                .iter()
                .map(|v| v.to_f64())
                .collect();
            let bm = MatRef::from_row_major_slice(&blk, b, g);
            let mut res = Mat::<f64>::zeros(b, k);
            faer::linalg::matmul::matmul(
                res.as_mut(),
                Accum::Replace,
                bm,
                v.as_ref(),
                1.0,
                Par::Seq,
            );
            for i in 0..b {
                for c in 0..k {
                    o[i * k + c] = res[(i, c)] - mv[c];
                }
            }
        });
    out
}

/// PCA of a sparse cells x genes matrix, without densifying it (blocks of rows only).
pub fn pca_sparse<T: Real>(x: &CsrMatrix<T>, params: &PcaParams) -> Result<PcaResult> {
    pca_sparse_across(x, params, &SingleRank)
}

/// [`pca_sparse`] of one rank's cells (see [`pca_dense_across`]).
pub fn pca_sparse_across<T: Real>(
    x: &CsrMatrix<T>,
    params: &PcaParams,
    comm: &dyn Communicator,
) -> Result<PcaResult> {
    pca_across(x, params, comm)
}

impl<T: Real> PcaInput for CsrMatrix<T> {
    fn shape(&self) -> (usize, usize) {
        (self.n_rows, self.n_cols)
    }

    fn check_finite(&self) -> Result<()> {
        CsrMatrix::check_finite(self)
    }

    fn row_into(&self, i: usize, r: &mut [f64]) {
        r.iter_mut().for_each(|a| *a = 0.0);
        let (c, v) = self.row(i);
        for (&cc, &vv) in c.iter().zip(v) {
            r[cc as usize] += vv.to_f64();
        }
    }

    fn block_into<E: Real>(&self, s: usize, _e: usize, blk: &mut [E]) {
        let g = self.n_cols;
        blk.par_chunks_mut(g).enumerate().for_each(|(r, d)| {
            d.iter_mut().for_each(|v| *v = E::ZERO);
            let (c, v) = self.row(s + r);
            for (&cc, &vv) in c.iter().zip(v) {
                d[cc as usize] += E::from_f64(vv.to_f64());
            }
        });
    }

    fn project(&self, v: &Mat<f64>, mean: &[f64]) -> Vec<f64> {
        project_sparse_rows(self, v, mean)
    }
}

/// Scores of other rows on a fitted PCA, as sklearn's `PCA.transform`: `(x - mean) V` with the
/// fit's means and components, rounded to f32 (`x` has the fit's genes as columns).
pub fn transform_sparse<T: Real>(x: &CsrMatrix<T>, fit: &PcaResult) -> Result<DenseMatrix<f32>> {
    let (k, g) = (fit.components.n_rows, fit.components.n_cols);
    if x.n_cols != g {
        return Err(KernelError::Shape(format!(
            "the PCA was fitted on {g} genes; the rows to project have {}",
            x.n_cols
        )));
    }
    let v = Mat::<f64>::from_fn(g, k, |j, c| fit.components.data[c * g + j]);
    let scores = project_sparse_rows(x, &v, &fit.mean);
    DenseMatrix::new(x.n_rows, k, scores.iter().map(|&s| s as f32).collect())
}

/// Scores `(X - mu) V` of a sparse matrix, in `f64`.
fn project_sparse_rows<T: Real>(x: &CsrMatrix<T>, v: &Mat<f64>, mean: &[f64]) -> Vec<f64> {
    let (n, g, k) = (x.n_rows, x.n_cols, v.ncols());
    let mv = mean_times_v(mean, v);
    // Row-major copy of V for the sparse products.
    let vr: Vec<f64> = (0..g)
        .flat_map(|j| (0..k).map(move |c| (j, c)))
        .map(|(j, c)| v[(j, c)])
        .collect();
    let mut out = vec![0.0f64; n * k];
    out.par_chunks_mut(k).enumerate().for_each(|(i, o)| {
        o.copy_from_slice(&mv);
        o.iter_mut().for_each(|a| *a = -*a);
        let (c, vals) = x.row(i);
        for (&cc, &vv) in c.iter().zip(vals) {
            let row = &vr[cc as usize * k..(cc as usize + 1) * k];
            let f = vv.to_f64();
            for (a, b) in o.iter_mut().zip(row) {
                *a += f * b;
            }
        }
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn random(n: usize, g: usize, seed: u64, density: f64) -> DenseMatrix<f64> {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let data = (0..n * g)
            .map(|_| {
                if rng.random_bool(density) {
                    rng.random_range(-2.0..5.0)
                } else {
                    0.0
                }
            })
            .collect();
        DenseMatrix::new(n, g, data).unwrap()
    }

    /// Naive reference: covariance by definition, eigen via faer on it.
    fn naive_cov(x: &DenseMatrix<f64>) -> (Mat<f64>, Vec<f64>) {
        let (n, g) = (x.n_rows, x.n_cols);
        let mean: Vec<f64> = (0..g)
            .map(|j| (0..n).map(|i| x.get(i, j)).sum::<f64>() / n as f64)
            .collect();
        let c = Mat::from_fn(g, g, |a, b| {
            (0..n)
                .map(|i| (x.get(i, a) - mean[a]) * (x.get(i, b) - mean[b]))
                .sum::<f64>()
                / (n as f64 - 1.0)
        });
        (c, mean)
    }

    #[test]
    fn matches_the_definition() {
        let x = random(60, 7, 1, 0.6);
        let r = pca_dense(
            &x,
            &PcaParams {
                n_comps: 3,
                zero_center: true,
            },
        )
        .unwrap();
        let (c, mean) = naive_cov(&x);
        let total: f64 = (0..7).map(|i| c[(i, i)]).sum();
        for k in 0..3 {
            // C v = lambda v, unit norm, sign rule.
            let v: Vec<f64> = r.components.row(k).to_vec();
            let lam = r.variance[k];
            for i in 0..7 {
                let cv: f64 = (0..7).map(|j| c[(i, j)] * v[j]).sum();
                assert!((cv - lam * v[i]).abs() < 1e-10);
            }
            assert!((v.iter().map(|a| a * a).sum::<f64>() - 1.0).abs() < 1e-12);
            let big = v
                .iter()
                .copied()
                .fold(0.0f64, |a, b| if b.abs() > a.abs() { b } else { a });
            assert!(big > 0.0);
            assert!((r.variance_ratio[k] - lam / total).abs() < 1e-14);
            // Scores.
            for i in 0..60 {
                let s: f64 = (0..7).map(|j| (x.get(i, j) - mean[j]) * v[j]).sum();
                assert!((r.x_pca.get(i, k) as f64 - s).abs() < 1e-5 * (1.0 + s.abs()));
            }
        }
        assert!(r.variance[0] >= r.variance[1] && r.variance[1] >= r.variance[2]);
    }

    #[test]
    fn dual_route_for_few_cells_matches_the_definition() {
        let x = random(12, 30, 5, 0.5);
        let r = pca_dense(
            &x,
            &PcaParams {
                n_comps: 5,
                zero_center: true,
            },
        )
        .unwrap();
        let rs = pca_sparse(
            &CsrMatrix::from_dense(&x),
            &PcaParams {
                n_comps: 5,
                zero_center: true,
            },
        )
        .unwrap();
        let (c, _) = naive_cov(&x);
        let total: f64 = (0..30).map(|i| c[(i, i)]).sum();
        for k in 0..5 {
            let v = r.components.row(k);
            for i in 0..30 {
                let cv: f64 = (0..30).map(|j| c[(i, j)] * v[j]).sum();
                assert!((cv - r.variance[k] * v[i]).abs() < 1e-9, "component {k}");
            }
            assert!((r.variance_ratio[k] - r.variance[k] / total).abs() < 1e-12);
            assert!((r.variance[k] - rs.variance[k]).abs() < 1e-10);
        }
        let u = pca_dense(
            &x,
            &PcaParams {
                n_comps: 3,
                zero_center: false,
            },
        )
        .unwrap();
        assert!(u.variance_ratio.iter().all(|v| *v > 0.0 && *v < 1.0));
    }

    #[test]
    fn clips_components_and_rejects_bad_input() {
        let x = random(5, 3, 2, 1.0);
        assert_eq!(
            pca_dense(&x, &PcaParams::default()).unwrap().variance.len(),
            2
        );
        assert!(pca_dense(
            &x,
            &PcaParams {
                n_comps: 0,
                zero_center: true
            }
        )
        .is_err());
        let one = random(1, 3, 2, 1.0);
        assert!(pca_dense(&one, &PcaParams::default()).is_err());
        let mut bad = random(4, 3, 2, 1.0);
        bad.data[5] = f64::NAN;
        assert!(matches!(
            pca_dense(&bad, &PcaParams::default()),
            Err(KernelError::NonFinite { row: 1, col: 2, .. })
        ));
    }

    #[test]
    fn constant_and_all_zero_genes() {
        let mut x = random(30, 5, 3, 0.7);
        for i in 0..30 {
            x.data[i * 5] = 2.0; // constant
            x.data[i * 5 + 1] = 0.0; // all zero
        }
        let r = pca_dense(
            &x,
            &PcaParams {
                n_comps: 2,
                zero_center: true,
            },
        )
        .unwrap();
        for k in 0..2 {
            assert!(r.components.get(k, 0).abs() < 1e-10 && r.components.get(k, 1).abs() < 1e-10);
        }
        assert!((r.variance_ratio.iter().sum::<f64>()) <= 1.0 + 1e-12);
    }

    #[test]
    fn uncentred_truncated_svd() {
        let x = random(40, 6, 4, 0.5);
        let r = pca_dense(
            &x,
            &PcaParams {
                n_comps: 2,
                zero_center: false,
            },
        )
        .unwrap();
        // Components are right singular vectors of X: X^T X v = s^2 v.
        for k in 0..2 {
            let v = r.components.row(k);
            let xv: Vec<f64> = (0..40)
                .map(|i| (0..6).map(|j| x.get(i, j) * v[j]).sum())
                .collect();
            let s2: f64 = xv.iter().map(|a| a * a).sum();
            for j in 0..6 {
                let xtxv: f64 = (0..40).map(|i| x.get(i, j) * xv[i]).sum();
                assert!((xtxv - s2 * v[j]).abs() < 1e-8 * s2);
            }
        }
        assert!(r.variance_ratio[0] > 0.0 && r.variance_ratio[0] < 1.0);
    }

    #[test]
    fn float32_blocks_agree_with_float64() {
        let mut x = random(5000, 40, 7, 0.5);
        x.data.iter_mut().for_each(|v| *v = *v as f32 as f64);
        let fill = |s: usize, e: usize, b: &mut [f32]| {
            for (d, v) in b.iter_mut().zip(&x.data[s * 40..e * 40]) {
                *d = *v as f32;
            }
        };
        let fill64 = |s: usize, e: usize, b: &mut [f64]| b.copy_from_slice(&x.data[s * 40..e * 40]);
        let (g32, s32) = gram_with::<f32, _>(5000, 40, BLOCK_F32, fill);
        let (g64, s64) = gram_with::<f64, _>(5000, 40, BLOCK_F64, fill64);
        for j in 0..40 {
            assert!((s32[j] - s64[j]).abs() < 1e-9 * s64[j].abs().max(1.0));
            for i in j..40 {
                assert!(
                    (g32[(i, j)] - g64[(i, j)]).abs() < 1e-5 * g64[(j, j)].abs().max(1.0),
                    "{i} {j}"
                );
            }
        }
    }

    proptest! {
        #[test]
        fn sparse_equals_dense(n in 3usize..40, g in 2usize..9, seed in any::<u64>()) {
            let x = random(n, g, seed, 0.3);
            let p = PcaParams { n_comps: 2, zero_center: true };
            let d = pca_dense(&x, &p).unwrap();
            let s = pca_sparse(&CsrMatrix::from_dense(&x), &p).unwrap();
            for k in 0..d.variance.len() {
                prop_assert!((d.variance[k] - s.variance[k]).abs() <= 1e-9 * (1.0 + d.variance[k].abs()));
            }
            // Components agree where the eigenvalue is separated from the next.
            let sep = d.variance.len() == 1 || (d.variance[0] - d.variance[1]).abs() > 1e-6 * d.variance[0].abs().max(1e-12);
            if sep && d.variance[0] > 1e-9 {
                for j in 0..g {
                    prop_assert!((d.components.get(0, j) - s.components.get(0, j)).abs() < 1e-6);
                }
            }
        }
    }
}
