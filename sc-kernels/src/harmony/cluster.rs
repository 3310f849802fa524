//! The clustering side of harmony on the CPU: initial soft assignments from the k-means
//! centroids and the clustering rounds (centroids from `R`, similarities, the block updates with
//! the diversity penalty, the objective). Formulas: the module documentation of [`super`].

use super::rng::{derive_key, Permutation, TAG_BLOCKS};
use super::{clustering_converged, diversity, expected, penalty, HarmonyParams, Setup};
use crate::fastmath::exp_f32;
use crate::stats::chunked_sum;
use faer::{Accum, MatMut, MatRef, Par};
use rayon::prelude::*;

/// Cells per chunk of the deterministic sums.
const CHUNK: usize = 64;

/// Soft assignments `R` (`n x K`, internal order) and their per-batch sums `O` (`B x K`).
#[derive(Debug, Clone)]
pub(crate) struct State {
    pub r: Vec<f32>,
    pub o: Vec<f64>,
}

/// Rows of `y` (`k x d`) scaled to unit length (a zero row stays zero).
pub(crate) fn unit_rows(y: &mut [f32], d: usize) {
    for row in y.chunks_exact_mut(d) {
        let s: f64 = row.iter().map(|&v| v as f64 * v as f64).sum();
        if s > 0.0 {
            let inv = (1.0 / s.sqrt()) as f32;
            row.iter_mut().for_each(|v| *v *= inv);
        }
    }
}

/// `sim = Zn Yn^T`, row-major `n x k`.
fn similarities(zn: &[f32], n: usize, d: usize, yn: &[f32], k: usize) -> Vec<f32> {
    let mut sim = vec![0f32; n * k];
    faer::linalg::matmul::matmul(
        MatMut::from_row_major_slice_mut(&mut sim, n, k),
        Accum::Replace,
        MatRef::from_row_major_slice(zn, n, d),
        MatRef::from_row_major_slice(yn, k, d).transpose(),
        1.0,
        Par::rayon(0),
    );
    sim
}

/// Unit-length centroids `Y = R^T Zn` (`k x d`).
fn centroids(zn: &[f32], r: &[f32], n: usize, d: usize, k: usize) -> Vec<f32> {
    let mut y = vec![0f32; k * d];
    faer::linalg::matmul::matmul(
        MatMut::from_row_major_slice_mut(&mut y, k, d),
        Accum::Replace,
        MatRef::from_row_major_slice(r, n, k).transpose(),
        MatRef::from_row_major_slice(zn, n, d),
        1.0,
        Par::rayon(0),
    );
    unit_rows(&mut y, d);
    y
}

/// One cell's soft assignment: `out_j ∝ exp(scale (sim_j - max sim)) pen_j`, summing to 1.
/// Returns the cell's k-means error `sum out 2 (1 - sim)` and `sum out ln out`.
#[inline]
pub(crate) fn soft_row(
    sim: &[f32],
    pen: Option<&[f32]>,
    scale: f32,
    out: &mut [f32],
) -> (f64, f64) {
    let smax = sim.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
    let mut sum = 0f32;
    match pen {
        Some(p) => {
            for ((o, &s), &p) in out.iter_mut().zip(sim).zip(p) {
                *o = exp_f32(scale * (s - smax)) * p;
                sum += *o;
            }
        }
        None => {
            for (o, &s) in out.iter_mut().zip(sim) {
                *o = exp_f32(scale * (s - smax));
                sum += *o;
            }
        }
    }
    let inv = 1.0 / sum;
    let (mut err, mut ent) = (0f64, 0f64);
    for (o, &s) in out.iter_mut().zip(sim) {
        *o *= inv;
        err += *o as f64 * 2.0 * (1.0 - s as f64);
        if *o > 0.0 {
            ent += *o as f64 * (*o as f64).ln();
        }
    }
    (err, ent)
}

/// Initial `R` and `O` from the k-means centroids (no penalty), and the objective.
pub(crate) fn initial_state(
    setup: &Setup,
    zn: &[f32],
    centroids_km: &[f32],
    params: &HarmonyParams,
) -> (State, f64) {
    let (n, d, k, b) = (setup.n, setup.d, setup.k, setup.b);
    let mut yn = centroids_km.to_vec();
    unit_rows(&mut yn, d);
    let sim = similarities(zn, n, d, &yn, k);
    let scale = (2.0 / params.sigma) as f32;
    let mut r = vec![0f32; n * k];
    // Per chunk: O's contribution (b * k), then k-means error and entropy.
    let parts: Vec<Vec<f64>> = r
        .par_chunks_mut(CHUNK * k)
        .enumerate()
        .map(|(c, rows)| {
            let mut acc = vec![0f64; b * k + 2];
            for (j, out) in rows.chunks_exact_mut(k).enumerate() {
                let i = c * CHUNK + j;
                let (err, ent) = soft_row(&sim[i * k..(i + 1) * k], None, scale, out);
                let bi = setup.batch_of[i] as usize;
                acc[bi * k..(bi + 1) * k]
                    .iter_mut()
                    .zip(out.iter())
                    .for_each(|(a, &v)| *a += v as f64);
                acc[b * k] += err;
                acc[b * k + 1] += ent;
            }
            acc
        })
        .collect();
    let mut acc = vec![0f64; b * k + 2];
    for p in parts {
        acc.iter_mut().zip(&p).for_each(|(a, &v)| *a += v);
    }
    let o = acc[..b * k].to_vec();
    let objective = acc[b * k]
        + params.sigma * acc[b * k + 1]
        + diversity(
            &o,
            &setup.pr_b,
            &setup.theta,
            params.sigma,
            k,
            params.flavor,
        );
    (State { r, o }, objective)
}

/// The keyed order of clustering iteration `t` of harmony round `h`.
pub(crate) fn block_order(
    setup: &Setup,
    params: &HarmonyParams,
    h: usize,
    t: usize,
) -> Permutation {
    Permutation::new(
        setup.n,
        derive_key(params.seed, TAG_BLOCKS, h as u64, t as u64),
    )
}

/// One clustering round (harmony round `h`); returns its last objective and its iterations.
pub(crate) fn round(
    setup: &Setup,
    zn: &[f32],
    state: &mut State,
    params: &HarmonyParams,
    h: usize,
) -> (f64, usize) {
    let (n, d, k, b) = (setup.n, setup.d, setup.k, setup.b);
    let scale = (2.0 / params.sigma) as f32;
    let mut objectives = vec![];
    for t in 0..params.max_iter_clustering {
        let yn = centroids(zn, &state.r, n, d, k);
        let sim = similarities(zn, n, d, &yn, k);
        let perm = block_order(setup, params, h, t);
        let (mut err, mut ent) = (0f64, 0f64);
        for p0 in (0..n).step_by(setup.block_size) {
            let p1 = (p0 + setup.block_size).min(n);
            let cells: Vec<usize> = (p0..p1).map(|p| perm.at(p) as usize).collect();
            let r = &state.r;
            let old = chunked_sum(cells.len(), CHUNK, b * k, |range, acc| {
                for &i in &cells[range] {
                    let bi = setup.batch_of[i] as usize;
                    acc[bi * k..(bi + 1) * k]
                        .iter_mut()
                        .zip(&r[i * k..(i + 1) * k])
                        .for_each(|(a, &v)| *a += v as f64);
                }
            });
            state.o.iter_mut().zip(&old).for_each(|(o, &v)| *o -= v);
            let e = expected(&state.o, &setup.pr_b, k);
            let pen: Vec<f32> = penalty(&state.o, &e, &setup.theta, k, params.flavor)
                .into_iter()
                .map(|v| v as f32)
                .collect();
            let mut rows = vec![0f32; cells.len() * k];
            let parts: Vec<Vec<f64>> = rows
                .par_chunks_mut(CHUNK * k)
                .enumerate()
                .map(|(c, rows)| {
                    let mut acc = vec![0f64; b * k + 2];
                    for (j, out) in rows.chunks_exact_mut(k).enumerate() {
                        let i = cells[c * CHUNK + j];
                        let bi = setup.batch_of[i] as usize;
                        let (e1, e2) = soft_row(
                            &sim[i * k..(i + 1) * k],
                            Some(&pen[bi * k..(bi + 1) * k]),
                            scale,
                            out,
                        );
                        acc[bi * k..(bi + 1) * k]
                            .iter_mut()
                            .zip(out.iter())
                            .for_each(|(a, &v)| *a += v as f64);
                        acc[b * k] += e1;
                        acc[b * k + 1] += e2;
                    }
                    acc
                })
                .collect();
            for p in parts {
                state.o.iter_mut().zip(&p).for_each(|(o, &v)| *o += v);
                err += p[b * k];
                ent += p[b * k + 1];
            }
            for (j, &i) in cells.iter().enumerate() {
                state.r[i * k..(i + 1) * k].copy_from_slice(&rows[j * k..(j + 1) * k]);
            }
        }
        objectives.push(
            err + params.sigma * ent
                + diversity(
                    &state.o,
                    &setup.pr_b,
                    &setup.theta,
                    params.sigma,
                    k,
                    params.flavor,
                ),
        );
        if clustering_converged(&objectives, params.tol_clustering) {
            break;
        }
    }
    (
        *objectives.last().expect("at least one iteration"),
        objectives.len(),
    )
}
