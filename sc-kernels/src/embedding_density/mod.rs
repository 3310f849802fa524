//! `embedding_density` (scanpy's `tl.embedding_density`): each cell's Gaussian kernel density
//! in a 2-D embedding among the cells of its group, as scipy's `gaussian_kde` estimates it
//! (Scott's bandwidth `n^(-1/6)` times the points' covariance with `n - 1`), then scaled to
//! `[0, 1]` within the group (`(z - min) / (max - min)`, so the kernel's normalization cancels).
//! Every cell's sum over all the others: `n^2` kernel evaluations a group, in f64; on a GPU
//! ([`embedding_density_gpu`]) the same sums with the exponential in f32 (seconds at a
//! million cells, where the host takes hours).

mod gpu;
#[cfg(test)]
mod tests;

pub use gpu::{embedding_density_gpu, KERNELS};

use crate::error::{KernelError, Result};
pub use crate::group_by::NO_GROUP;
use crate::group_by::{check_labels, group_members};
use rayon::prelude::*;

/// The scaled density of each cell (`xy`: `n x 2`, row-major) among the cells of its group
/// (`groups`: one per cell, `< n_groups` or [`NO_GROUP`], whose density is 0 as scanpy leaves
/// it); groups without cells are skipped.
pub fn embedding_density(xy: &[f64], groups: &[u32], n_groups: usize) -> Result<Vec<f64>> {
    by_group(xy, groups, n_groups, &mut |points, kernel| {
        Ok(kernel_sums(points, kernel))
    })
}

/// [`embedding_density`]'s checks and groups, each group's kernel sums from `sums(points,
/// kernel)` (one per point, [`kernel_sums`]' definition), then scaled to `[0, 1]`.
fn by_group(
    xy: &[f64],
    groups: &[u32],
    n_groups: usize,
    sums: &mut dyn FnMut(&[f64], Kernel) -> Result<Vec<f64>>,
) -> Result<Vec<f64>> {
    let n = groups.len();
    if xy.len() != 2 * n {
        return Err(KernelError::Shape(format!(
            "{} coordinates for {n} cells in 2-D",
            xy.len()
        )));
    }
    check_labels(groups, n_groups, "groupby")?;
    crate::dense::check_finite_rows(xy, 2)?;
    let (order, starts) = group_members(groups, n_groups);
    let mut out = vec![0.0; n];
    for g in 0..n_groups {
        let members = &order[starts[g]..starts[g + 1]];
        if members.is_empty() {
            continue;
        }
        let points: Vec<f64> = members
            .iter()
            .flat_map(|&i| [xy[2 * i as usize], xy[2 * i as usize + 1]])
            .collect();
        let kernel = bandwidth(&points).map_err(|e| match e {
            KernelError::Unsupported(m) => KernelError::Unsupported(format!("group {g}: {m}")),
            e => e,
        })?;
        let z = to_unit(sums(&points, kernel)?);
        for (&i, v) in members.iter().zip(z) {
            out[i as usize] = v;
        }
    }
    Ok(out)
}

/// The Gaussian kernel's inverse covariance `(xx, xy, yy)`: the points' covariance times Scott's
/// factor squared, inverted.
#[derive(Debug, Clone, Copy)]
struct Kernel {
    ia: f64,
    ib: f64,
    ic: f64,
}

/// The kernel of the points `xy` (scipy's `gaussian_kde` with Scott's bandwidth), or an error
/// when fewer than 3 points or all on one line leave it undefined.
fn bandwidth(xy: &[f64]) -> Result<Kernel> {
    let n = xy.len() / 2;
    let mean = [
        xy.iter().step_by(2).sum::<f64>() / n as f64,
        xy.iter().skip(1).step_by(2).sum::<f64>() / n as f64,
    ];
    let mut cov = [0.0; 3]; // xx, xy, yy
    for p in xy.chunks_exact(2) {
        let d = [p[0] - mean[0], p[1] - mean[1]];
        cov[0] += d[0] * d[0];
        cov[1] += d[0] * d[1];
        cov[2] += d[1] * d[1];
    }
    let factor2 = (n as f64).powf(-1.0 / 3.0); // Scott's factor squared: n^(-2/(d+4)), d = 2
    let scale = factor2 / (n as f64 - 1.0);
    let (a, b, c) = (cov[0] * scale, cov[1] * scale, cov[2] * scale);
    let det = a * c - b * b;
    if n < 3 || !(det > 1e-300 * (a * c).max(f64::MIN_POSITIVE)) || !det.is_finite() {
        return Err(KernelError::Unsupported(format!(
            "the density of {n} points needs at least 3 not on one line (their covariance is singular)"
        )));
    }
    Ok(Kernel {
        ia: c / det,
        ib: -b / det,
        ic: a / det,
    })
}

/// Points whose sums run side by side: the lanes the compiler vectorizes the exponential over.
const LANES: usize = 8;

/// Each point's sum of the kernel over every point (itself included), in f64 (the exponential
/// to about 1e-15, [`crate::fastmath`]'s); each sum runs over the points in order.
fn kernel_sums(xy: &[f64], kernel: Kernel) -> Vec<f64> {
    let mut out = vec![0.0; xy.len() / 2];
    out.par_chunks_mut(LANES)
        .enumerate()
        .for_each(|(b, sums)| lane_sums(xy, kernel, b * LANES, sums));
    out
}

/// [`kernel_sums`] of the points from `first` (`sums.len()` of them), with AVX2 where the CPU
/// has it (the same operations, unfused: the same bits).
fn lane_sums(xy: &[f64], kernel: Kernel, first: usize, sums: &mut [f64]) {
    #[cfg(target_arch = "x86_64")]
    if crate::fastmath::has_avx2() {
        // SAFETY: the CPU supports AVX2 and FMA (checked above).
        unsafe { lane_sums_avx2(xy, kernel, first, sums) };
        return;
    }
    lane_sums_plain(xy, kernel, first, sums)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn lane_sums_avx2(xy: &[f64], kernel: Kernel, first: usize, sums: &mut [f64]) {
    lane_sums_plain(xy, kernel, first, sums)
}

#[inline(always)]
fn lane_sums_plain(xy: &[f64], Kernel { ia, ib, ic }: Kernel, first: usize, sums: &mut [f64]) {
    let (mut px, mut py) = ([0.0; LANES], [0.0; LANES]);
    for (l, _) in sums.iter().enumerate() {
        px[l] = xy[2 * (first + l)];
        py[l] = xy[2 * (first + l) + 1];
    }
    let mut acc = [0.0; LANES];
    for q in xy.chunks_exact(2) {
        for l in 0..LANES {
            let (dx, dy) = (px[l] - q[0], py[l] - q[1]);
            let r2 = ia * dx * dx + 2.0 * ib * dx * dy + ic * dy * dy;
            acc[l] += crate::fastmath::exp_f64(-0.5 * r2);
        }
    }
    sums.copy_from_slice(&acc[..sums.len()]);
}

/// `(z - min) / (max - min)`: the kernel's normalization cancels.
fn to_unit(z: Vec<f64>) -> Vec<f64> {
    let (lo, hi) = z
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &v| {
            (l.min(v), h.max(v))
        });
    z.into_iter().map(|v| (v - lo) / (hi - lo)).collect()
}
