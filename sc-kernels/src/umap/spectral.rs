//! UMAP's start: the spectral layout of the graph, as umap-learn's `spectral_layout`: the
//! eigenvectors of the normalized Laplacian `I - D^-1/2 A D^-1/2` for its smallest non-zero
//! eigenvalues, here the largest eigenvalues of `D^-1/2 A D^-1/2` found by Lanczos (full
//! reorthogonalization, the trivial eigenvector `sqrt(d)` projected out) from a vector of ones,
//! as umap-learn starts ARPACK.
//!
//! A graph of several connected components is laid out a component at a time (umap-learn's
//! `multi_component_layout`): each component's spectral layout, scaled into half the distance to
//! its nearest neighbour, around its own centre. The centres are umap-learn's for up to
//! `2 * dim` components (`+-e_i`); beyond that a square grid (umap-learn places them by a
//! spectral layout of the component centroids in the data, which the graph alone does not have).
//! Components too small for `dim` eigenvectors start uniformly at random within their box.
//!
//! Then as umap-learn: scaled so the largest coordinate is 10, noise of standard deviation 1e-4
//! added (from the seed), and each coordinate rescaled to [0, 10].

use super::{Init, UmapParams};
use crate::csr::CsrMatrix;
use crate::dense::DenseMatrix;
use crate::eigsh::block_sum;
use crate::error::Result;
use crate::random::SplitMix64;
use faer::Mat;
use rayon::prelude::*;

/// The Lanczos vectors kept (the Krylov space's dimension) for a graph of `n` nodes and a
/// layout of `dim` coordinates.
fn krylov_dim(n: usize, dim: usize) -> usize {
    (n - 1).min(100.max(4 * (dim + 1)))
}

/// The initial layout and how it was made, the Lanczos vectors on the host.
pub fn initial_layout(
    graph: &CsrMatrix<f32>,
    params: &UmapParams,
) -> Result<(DenseMatrix<f32>, String)> {
    initial_layout_on(graph, params, &host_space)
}

/// Makes the [`Space`] of a (connected) graph's Lanczos vectors, given `sqrt(degree)` of its
/// nodes: [`host_space`], or a GPU's.
pub(crate) type SpaceMaker<'a> =
    dyn Fn(&CsrMatrix<f32>, Vec<f64>, usize) -> Result<Box<dyn Space + 'a>> + 'a;

/// [`initial_layout`] with the Lanczos vectors where `make` puts them (the same bits anywhere).
pub(crate) fn initial_layout_on(
    graph: &CsrMatrix<f32>,
    params: &UmapParams,
    make: &SpaceMaker<'_>,
) -> Result<(DenseMatrix<f32>, String)> {
    let n = graph.n_rows;
    let dim = params.n_components;
    let mut rng = SplitMix64::new(params.random_state);
    let mut trace = crate::gpu::trace::PhaseTrace::on_host("umap start");
    let (coords, how) = match params.init {
        Init::Random => (
            (0..n * dim)
                .map(|_| rng.next_f64() * 20.0 - 10.0)
                .collect::<Vec<f64>>(),
            "random".to_string(),
        ),
        Init::Spectral => {
            let (coords, how) = spectral_layout(graph, dim, &mut rng, make)?;
            trace.mark("spectral layout")?;
            let coords = noisy_scale(coords, params.random_state);
            trace.mark("noise")?;
            (coords, how)
        }
    };
    let layout = rescale_columns(&coords, n, dim);
    trace.mark("rescale")?;
    Ok((layout, how))
}

/// The stream of the start's noise (see [`crate::random::normal_at`]).
const NOISE_STREAM: u64 = 0x6e6f_6973_65;

/// umap-learn's `noisy_scale_coords`: the largest coordinate made 10, as f32, plus N(0, 1e-4),
/// coordinate `i`'s noise the `i`-th of a counter-based stream, so that the coordinates are
/// scaled in parallel (at 11.4 M cells a sequential pass took 11.5 s on the H200's host).
fn noisy_scale(coords: Vec<f64>, seed: u64) -> Vec<f64> {
    let max = coords
        .par_iter()
        .fold(|| 0.0f64, |m, v| m.max(v.abs()))
        .reduce(|| 0.0, f64::max);
    let expansion = if max > 0.0 { 10.0 / max } else { 1.0 };
    coords
        .into_par_iter()
        .enumerate()
        .map(|(i, v)| {
            let noise = crate::random::normal_at(seed, NOISE_STREAM, i as u64);
            (v * expansion) as f32 as f64 + (noise * 1e-4) as f32 as f64
        })
        .collect()
}

/// Each coordinate mapped to [0, 10], as f32.
fn rescale_columns(coords: &[f64], n: usize, dim: usize) -> DenseMatrix<f32> {
    let bounds = || (vec![f64::INFINITY; dim], vec![f64::NEG_INFINITY; dim]);
    let (min, max) = coords
        .par_chunks(dim)
        .fold(bounds, |(mut lo, mut hi), row| {
            for (d, &v) in row.iter().enumerate() {
                lo[d] = lo[d].min(v);
                hi[d] = hi[d].max(v);
            }
            (lo, hi)
        })
        .reduce(bounds, |(a, b), (c, e)| {
            let lo = a.iter().zip(&c).map(|(x, y)| x.min(*y)).collect();
            let hi = b.iter().zip(&e).map(|(x, y)| x.max(*y)).collect();
            (lo, hi)
        });
    let mut data = vec![0.0f32; n * dim];
    data.par_chunks_mut(dim)
        .zip(coords.par_chunks(dim))
        .for_each(|(out, row)| {
            for d in 0..dim {
                let range = if max[d] > min[d] {
                    max[d] - min[d]
                } else {
                    1.0
                };
                out[d] = (10.0 * (row[d] - min[d]) / range) as f32;
            }
        });
    DenseMatrix {
        n_rows: n,
        n_cols: dim,
        data,
    }
}

/// Row-major `n x dim` spectral coordinates of the whole graph, and how they were made.
fn spectral_layout(
    graph: &CsrMatrix<f32>,
    dim: usize,
    rng: &mut SplitMix64,
    make: &SpaceMaker<'_>,
) -> Result<(Vec<f64>, String)> {
    let t = std::time::Instant::now();
    let (component, n_components) = crate::graph::connected_components(graph);
    let components_seconds = t.elapsed().as_secs_f64();
    if n_components == 1 {
        let t = std::time::Instant::now();
        return Ok(match eigen_layout(graph, dim, make)? {
            Some(c) => (
                c,
                format!(
                    "spectral (components {components_seconds:.2} s, eigenvectors {:.2} s)",
                    t.elapsed().as_secs_f64()
                ),
            ),
            None => (
                uniform(graph.n_rows * dim, 10.0, rng),
                format!(
                    "random (the graph of {} cells is too small for a spectral start)",
                    graph.n_rows
                ),
            ),
        });
    }
    let centres = component_centres(n_components, dim);
    let mut coords = vec![0.0f64; graph.n_rows * dim];
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); n_components];
    for (v, &c) in component.iter().enumerate() {
        members[c as usize].push(v);
    }
    let mut n_random = 0;
    for (c, nodes) in members.iter().enumerate() {
        let centre = &centres[c * dim..(c + 1) * dim];
        let half_gap = nearest_gap(&centres, c, dim) / 2.0;
        let local = if nodes.len() >= 2 * dim && nodes.len() > dim + 1 {
            eigen_layout(&subgraph(graph, nodes), dim, make)?
        } else {
            None
        };
        let local = local.unwrap_or_else(|| {
            n_random += 1;
            uniform(nodes.len() * dim, 1.0, rng)
        });
        let max = local.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let scale = if max > 0.0 { half_gap / max } else { 0.0 };
        for (i, &v) in nodes.iter().enumerate() {
            for d in 0..dim {
                coords[v * dim + d] = local[i * dim + d] * scale + centre[d];
            }
        }
    }
    let how = format!(
        "spectral, {n_components} connected components laid out apart{}",
        if n_random > 0 {
            format!(" ({n_random} too small, started at random)")
        } else {
            String::new()
        }
    );
    Ok((coords, how))
}

fn uniform(len: usize, half_width: f64, rng: &mut SplitMix64) -> Vec<f64> {
    (0..len)
        .map(|_| (rng.next_f64() * 2.0 - 1.0) * half_width)
        .collect()
}

/// The centres of `k` components: `e_1, .., e_dim, -e_1, ..` when they fit, else a square grid.
fn component_centres(k: usize, dim: usize) -> Vec<f64> {
    let mut c = vec![0.0f64; k * dim];
    if k <= 2 * dim {
        let half = k.div_ceil(2);
        for i in 0..k {
            let axis = i % half;
            if axis < dim {
                c[i * dim + axis] = if i < half { 1.0 } else { -1.0 };
            }
        }
    } else {
        let side = (k as f64).sqrt().ceil() as usize;
        for i in 0..k {
            c[i * dim] = (i % side) as f64;
            if dim > 1 {
                c[i * dim + 1] = (i / side) as f64;
            }
        }
    }
    c
}

fn nearest_gap(centres: &[f64], c: usize, dim: usize) -> f64 {
    let k = centres.len() / dim;
    (0..k)
        .filter(|&o| o != c)
        .map(|o| {
            (0..dim)
                .map(|d| (centres[c * dim + d] - centres[o * dim + d]).powi(2))
                .sum::<f64>()
                .sqrt()
        })
        .fold(f64::INFINITY, f64::min)
        .min(1.0)
}

/// The graph induced on `nodes` (sorted), renumbered.
fn subgraph(graph: &CsrMatrix<f32>, nodes: &[usize]) -> CsrMatrix<f32> {
    // A dense map: a million-cell component's 30 M lookups in a hash map took seconds.
    let mut new_id = vec![u32::MAX; graph.n_rows];
    for (i, &v) in nodes.iter().enumerate() {
        new_id[v] = i as u32;
    }
    let mut indptr = vec![0u64];
    let (mut indices, mut data) = (Vec::new(), Vec::new());
    for &v in nodes {
        let (idx, w) = graph.row(v);
        for (c, &w) in idx.iter().zip(w) {
            let i = new_id[*c as usize];
            if i != u32::MAX {
                indices.push(i);
                data.push(w);
            }
        }
        indptr.push(indices.len() as u64);
    }
    CsrMatrix {
        n_rows: nodes.len(),
        n_cols: nodes.len(),
        indptr,
        indices,
        data,
    }
}

/// The `dim` leading non-trivial eigenvectors of `D^-1/2 A D^-1/2` of a connected graph, row-major
/// `n x dim`, the Lanczos vectors in the space `make` gives; `None` when the graph is too small
/// or has a node without edges.
fn eigen_layout(
    graph: &CsrMatrix<f32>,
    dim: usize,
    make: &SpaceMaker<'_>,
) -> Result<Option<Vec<f64>>> {
    let n = graph.n_rows;
    if n < dim + 2 {
        return Ok(None);
    }
    let mut trace = crate::gpu::trace::PhaseTrace::on_host("umap eigenvectors");
    let sqrt_d: Vec<f64> = (0..n)
        .into_par_iter()
        .map(|v| graph.row(v).1.iter().map(|&w| w as f64).sum::<f64>().sqrt())
        .collect();
    if sqrt_d.iter().any(|&s| s <= 0.0) {
        return Ok(None);
    }
    let norm = dot(&sqrt_d, &sqrt_d).sqrt();
    let mut trivial = Basis::new(n);
    trivial.push_scaled(&sqrt_d, 1.0 / norm);
    let m = krylov_dim(n, dim);
    let mut start = vec![1.0f64; n];
    project_out(&mut start, &trivial);
    if dot(&start, &start).sqrt() < 1e-8 {
        // A regular graph: ones is the trivial vector; start from a fixed alternating one.
        start = (0..n)
            .map(|i| if i % 2 == 0 { 1.0 } else { -1.0 })
            .collect();
        project_out(&mut start, &trivial);
    }
    trace.mark("degrees and start")?;
    let mut space = make(graph, sqrt_d, m)?;
    trace.mark("space")?;
    let (alpha, beta) = lanczos(space.as_mut(), &start, m)?;
    trace.mark("lanczos")?;
    let steps = alpha.len();
    if steps < dim {
        return Ok(None);
    }
    let t = Mat::from_fn(steps, steps, |i, j| {
        if i == j {
            alpha[i]
        } else if i + 1 == j {
            beta[i]
        } else if j + 1 == i {
            beta[j]
        } else {
            0.0
        }
    });
    let Ok(evd) = t.self_adjoint_eigen(faer::Side::Lower) else {
        return Ok(None);
    };
    // Ascending eigenvalues: the last `dim` are the largest.
    let u = evd.U();
    let coef: Vec<f64> = (0..steps)
        .flat_map(|j| (0..dim).map(move |d| u[(j, steps - 1 - d)]))
        .collect();
    let layout = space.ritz(&coef, steps, dim)?;
    trace.mark("ritz")?;
    drop(space);
    trace.mark("free")?;
    Ok(Some(layout))
}

/// Where the Lanczos vectors `q_j` and the work vector `w` live, and the operations on them:
/// the host ([`host_space`]) or a GPU (`super::gpu`), each sum in the same order, so both give
/// the same bits. `M = D^-1/2 A D^-1/2`; the trivial eigenvector `sqrt(d) / |sqrt(d)|` is kept
/// apart and projected out with the others.
pub(crate) trait Space {
    /// `q_len = v * scale`.
    fn push(&mut self, v: &[f64], scale: f64) -> Result<()>;
    /// `w = M q_j`: `z = q_j / sqrt(d)` first, then each row's `w_uv z_u` summed in entry
    /// order and divided by the row's `sqrt(d)` (one gathered value an edge, no division).
    fn apply(&mut self, j: usize) -> Result<()>;
    /// `w . q_j`.
    fn dot_w(&mut self, j: usize) -> Result<f64>;
    /// `|w|`.
    fn norm_w(&mut self) -> Result<f64>;
    /// `w` less its projections on the trivial vector, then on `q_0 ..` (classical
    /// Gram-Schmidt: [`project_out`]).
    fn orthogonalize_w(&mut self) -> Result<()>;
    /// `q_len = w * scale`.
    fn push_w(&mut self, scale: f64) -> Result<()>;
    /// Row-major `n x dim`: `out[r][d] = sum_j q_j[r] coef[j dim + d]`, summed from `j = 0` up.
    fn ritz(&self, coef: &[f64], steps: usize, dim: usize) -> Result<Vec<f64>>;
}

/// The host's space: the reference the GPU's equals.
pub(crate) fn host_space<'a>(
    graph: &CsrMatrix<f32>,
    sqrt_d: Vec<f64>,
    _m: usize,
) -> Result<Box<dyn Space + 'a>> {
    let n = graph.n_rows;
    let mut trivial = Basis::new(n);
    trivial.push_scaled(&sqrt_d, 1.0 / dot(&sqrt_d, &sqrt_d).sqrt());
    Ok(Box::new(HostSpace {
        graph: graph.clone(),
        sqrt_d,
        trivial,
        q: Basis::new(n),
        w: vec![0.0; n],
    }))
}

struct HostSpace {
    graph: CsrMatrix<f32>,
    sqrt_d: Vec<f64>,
    trivial: Basis,
    q: Basis,
    w: Vec<f64>,
}

impl Space for HostSpace {
    fn push(&mut self, v: &[f64], scale: f64) -> Result<()> {
        self.q.push_scaled(v, scale);
        Ok(())
    }

    fn apply(&mut self, j: usize) -> Result<()> {
        let (graph, sqrt_d) = (&self.graph, &self.sqrt_d);
        let z: Vec<f64> = (self.q.col(j).par_iter().zip(sqrt_d))
            .map(|(x, d)| x / d)
            .collect();
        self.w.par_iter_mut().enumerate().for_each(|(v, yv)| {
            let (idx, w) = graph.row(v);
            let s: f64 = idx
                .iter()
                .zip(w)
                .map(|(&u, &w)| w as f64 * z[u as usize])
                .sum();
            *yv = s / sqrt_d[v];
        });
        Ok(())
    }

    fn dot_w(&mut self, j: usize) -> Result<f64> {
        Ok(dot(&self.w, self.q.col(j)))
    }

    fn norm_w(&mut self) -> Result<f64> {
        Ok(dot(&self.w, &self.w).sqrt())
    }

    fn orthogonalize_w(&mut self) -> Result<()> {
        project_out(&mut self.w, &self.trivial);
        project_out(&mut self.w, &self.q);
        Ok(())
    }

    fn push_w(&mut self, scale: f64) -> Result<()> {
        self.q.push_scaled(&self.w, scale);
        Ok(())
    }

    fn ritz(&self, coef: &[f64], steps: usize, dim: usize) -> Result<Vec<f64>> {
        let n = self.w.len();
        // A block of rows at a time, so each Lanczos vector is read in order.
        let mut out = vec![0.0f64; n * dim];
        out.par_chunks_mut(ROWS * dim)
            .enumerate()
            .for_each(|(c, block)| {
                let r0 = c * ROWS;
                for j in 0..steps {
                    let qj = &self.q.col(j)[r0..r0 + block.len() / dim];
                    for d in 0..dim {
                        let cj = coef[j * dim + d];
                        for (row, &qi) in block.chunks_mut(dim).zip(qj) {
                            row[d] += qi * cj;
                        }
                    }
                }
            });
        Ok(out)
    }
}

/// Vectors of one length `n`, stored one after the other (column-major).
struct Basis {
    n: usize,
    data: Vec<f64>,
}

impl Basis {
    fn new(n: usize) -> Basis {
        Basis {
            n,
            data: Vec::new(),
        }
    }

    fn len(&self) -> usize {
        self.data.len() / self.n.max(1)
    }

    fn col(&self, j: usize) -> &[f64] {
        &self.data[j * self.n..(j + 1) * self.n]
    }

    fn push_scaled(&mut self, v: &[f64], scale: f64) {
        self.data.extend(v.iter().map(|x| x * scale));
    }
}

/// Rows per block of the projections and dot products: fixed, so the sums do not depend on the
/// thread count (nor on the device: the GPU sums the same blocks in the same order, each in
/// [`block_sum`]'s lanes, a warp a block).
pub(crate) use crate::eigsh::ROWS;

/// `x` less its projections on the orthonormal vectors of `q` (classical Gram-Schmidt), each
/// block of rows reading every vector once.
fn project_out(x: &mut [f64], q: &Basis) {
    let k = q.len();
    if k == 0 {
        return;
    }
    let partial: Vec<Vec<f64>> = x
        .par_chunks(ROWS)
        .enumerate()
        .map(|(c, xc)| {
            (0..k)
                .map(|b| block_sum(&q.col(b)[c * ROWS..c * ROWS + xc.len()], xc))
                .collect()
        })
        .collect();
    let coeffs: Vec<f64> = (0..k).map(|b| partial.iter().map(|p| p[b]).sum()).collect();
    x.par_chunks_mut(ROWS).enumerate().for_each(|(c, xc)| {
        let r = c * ROWS..c * ROWS + xc.len();
        for (b, &cb) in coeffs.iter().enumerate() {
            for (xi, qi) in xc.iter_mut().zip(&q.col(b)[r.clone()]) {
                *xi -= cb * qi;
            }
        }
    });
}

/// `m` steps of Lanczos on `M` in `s` from `start`, every new vector orthogonalized against the
/// trivial one and all the earlier ones, a second time when the first lost most of its norm
/// (Kahan and Parlett's "twice is enough"). Returns the tridiagonal (`alpha` its diagonal,
/// `beta` its off-diagonal); stops early on an invariant subspace.
fn lanczos(s: &mut dyn Space, start: &[f64], m: usize) -> Result<(Vec<f64>, Vec<f64>)> {
    s.push(start, 1.0 / dot(start, start).sqrt())?;
    let (mut alpha, mut beta) = (Vec::with_capacity(m), Vec::with_capacity(m));
    // Where the steps' time goes (`SCPIPE_TRACE_PHASES`): the products with M, and the
    // orthogonalization; each phase ends in a value read back, so the clock covers its work.
    let trace = crate::gpu::trace::PhaseTrace::on_host("umap start");
    let (mut in_apply, mut in_orth, mut twice) = (0.0, 0.0, 0);
    for j in 0..m {
        let t = std::time::Instant::now();
        s.apply(j)?;
        alpha.push(s.dot_w(j)?);
        let before = s.norm_w()?;
        in_apply += t.elapsed().as_secs_f64();
        let t = std::time::Instant::now();
        s.orthogonalize_w()?;
        let mut b = s.norm_w()?;
        if b < std::f64::consts::FRAC_1_SQRT_2 * before {
            s.orthogonalize_w()?;
            b = s.norm_w()?;
            twice += 1;
        }
        in_orth += t.elapsed().as_secs_f64();
        if j + 1 == m || b < 1e-10 {
            break;
        }
        beta.push(b);
        s.push_w(1.0 / b)?;
    }
    trace.part(&format!("{} products with M", alpha.len()), in_apply);
    trace.part(&format!("orthogonalization, {twice} steps twice"), in_orth);
    Ok((alpha, beta))
}

/// `a . b`, summed in blocks of [`ROWS`] ([`block_sum`]) and the blocks' sums in order.
pub(crate) fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.par_chunks(ROWS)
        .zip(b.par_chunks(ROWS))
        .map(|(a, b)| block_sum(a, b))
        .collect::<Vec<f64>>()
        .iter()
        .sum()
}
