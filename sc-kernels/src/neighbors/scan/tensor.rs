//! kNN candidates from FP16 tensor-core products, with a proven bound (`knn_tensor.cu`).
//!
//! The f32 scan (`knn_scan`) ranks references by `|r|^2 - 2 q.r` on the CUDA cores and keeps
//! `k + 8`. Tensor cores form the products many times faster, but from inputs rounded to FP16
//! (10 mantissa bits, as TF32, at twice TF32's rate and half its bytes), so the ranking is
//! coarser. The rounding is bounded instead of hoped away:
//!
//! - the data are centred first (any centre: distances do not change; PCA output is centred
//!   already), which keeps `|q|` and `|r|` small, then scaled by a power of two (exact) so the
//!   largest value is at most 2^14, well inside FP16's range;
//! - for a query `q` and reference `r` (centred and scaled, f32), the FP16 score `S~` and the
//!   exact score
//!   `S = |r|^2 - 2 q.r` satisfy `|S~ - S| <= eps(q, r) = ka |q||r| + kb |r|^2 + kc |q|^2 +
//!   kf (|q| + |r|) + ke` ([`TensorBound`]: rounding both inputs to FP16, subnormals
//!   included, the f32 accumulation whatever its order and rounding, the f32 norm and the final
//!   subtraction, the centring, with a safety factor);
//! - pass 1 (`knn_tensor_bound`) finds, per query, `U` = the `k`-th smallest UPPER bound
//!   `S~ + eps` over all references: the `k`-th nearest has an exact score at most `U`;
//! - pass 2 (`knn_tensor_collect`) forms the same products again and collects every reference
//!   whose LOWER bound `S~ - eps` is at most `U`: the `k` nearest are all among them, so the f64
//!   refinement over them gives exactly the `k` nearest. Nothing is sorted in pass 2, and pass 1
//!   keeps only `k` values per query, so the selection stays cheap beside the products;
//! - a query with more than [`width`] candidates (dense regions where many references sit within
//!   the bound of the `k`-th) goes through the f32 scan with that width. The step reports how
//!   many.
//!
//! [`candidates_host`] runs the same two passes on the CPU (FP16 rounding emulated), so CI checks
//! the bound and the logic without a GPU.

use crate::error::Result;
use crate::gpu::module_cache::KernelSource;
use crate::gpu::{grid_stride, DeviceVec, GpuContext};
use rmm_cuda::cudarc::driver::{LaunchConfig, PushKernelArg};

pub(crate) const SRC: KernelSource = KernelSource {
    name: "neighbors_tensor",
    source: include_str!("knn_tensor.cu"),
};

// Must match the defines of knn_tensor.cu.
const Q: usize = 128;
const R: usize = 128;
const THREADS: u32 = 256;
const CAP: usize = 16;

/// Largest `k` the tensor path takes (pass 1 keeps `k` values per query in shared memory).
pub const MAX_K: usize = 64;
/// Largest dimension count (padded to 16) the tensor path takes.
pub const MAX_DIMS: usize = 128;

/// Candidates a query may have (more: it goes to the f32 scan), at most `n`. Measured by
/// emulating the scan (numpy, 100-400 queries): 8 clusters with isotropic noise in all 50
/// dimensions (workload C, the hard case: no dominant directions), k = 15: 96 hold 99-100% of
/// the queries at 200k and 1 M cells (46: 72% and 34%; 64: 96% and 80%); pbmc68k's PCs: 100%
/// from 31 up.
pub fn width(k: usize, n: usize) -> usize {
    (6 * k + 6).clamp(k + 8, MAX_WIDTH).min(n)
}

/// Widest candidate list (the refinement's scratch is 12 bytes a candidate and query).
const MAX_WIDTH: usize = 128;

/// The constants of the score's error bound for `d` dimensions (see the module's text):
/// `|S~ - S| <= ka |q||r| + kb |r|^2 + kc |q|^2 + kf (|q| + |r|) + ke`, with `|q|`, `|r|` the
/// centred, scaled norms.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TensorBound {
    pub ka: f32,
    pub kb: f32,
    pub kc: f32,
    pub kf: f32,
    pub ke: f32,
}

impl TensorBound {
    pub fn for_dims(d: usize) -> Self {
        let d = d as f64;
        let u = 2f64.powi(-11); // FP16 (round to nearest): relative error of a normal input
                                // A subnormal input's absolute error; with |v - v~| <= u |v| + sub for every input,
                                // sum |q_i r_i - q~_i r~_i| <= (2u + u^2) |q||r| + sub (1 + u) sqrt(d) (|q| + |r|) + d sub^2.
        let sub = 2f64.powi(-25);
        // Products of the two rounded inputs, and their f32 sum in any order, even truncating,
        // with 8 times the usual allowance; times 2 (the score has 2 q.r); the score's own
        // rounding.
        let dot = 2.0 * u + u * u + (d + 8.0) * 2f64.powi(-20);
        let a = 2.0 * dot + 2f64.powi(-23);
        let b = (d + 3.0) * 2f64.powi(-24); // the f32 norm of r
        let c = 2f64.powi(-20); // the centring, the f64 refinement, the bound's own f32 steps
        let safety = 1.05;
        TensorBound {
            ka: ((a + 2.0 * c) * safety) as f32,
            kb: ((b + c) * safety) as f32,
            kc: (c * safety) as f32,
            kf: (2.0 * sub * (1.0 + u) * d.sqrt() * safety) as f32,
            ke: (2.0 * d * sub * sub * safety) as f32,
        }
    }
}

/// How the tensor scan would run: `None` when it cannot (no tensor cores, `k` or `d` too large,
/// or too little shared memory).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    pub(crate) ks: usize,
    pub(crate) width: usize,
    pub(crate) nbuf: usize,
    /// Shared memory of pass 1 and pass 2, bytes.
    pub(crate) smem: [usize; 2],
}

/// Shared memory of pass 1 (`bound`) or pass 2: the queries, `nbuf` reference chunks with their
/// two values per reference, and the pass's own arrays.
fn shared_bytes(ks: usize, k: usize, nbuf: usize, bound: bool) -> usize {
    let common = ks * 1024 * (1 + nbuf) + 2 * nbuf * R;
    let own = if bound { 3 * Q + Q * CAP + Q * k } else { Q };
    4 * (common + own)
}

/// Shared memory a block of the GPU may use (opt-in), bytes.
const SHARED_LIMIT: usize = 227 * 1024;

/// Whether a GPU of architecture `arch` (`sm_XY`) has the tensor cores the scan uses (FP16 with
/// f32 accumulation and `cp.async`, compute capability 8.0 and later).
pub fn plan_exists(arch: &str) -> bool {
    plan(arch, 1 << 20, 50, 15).is_some()
}

pub(crate) fn plan(arch: &str, n: usize, d: usize, k: usize) -> Option<Plan> {
    // `sm_XY`: major version X (one or two digits), minor Y.
    let digits = arch.strip_prefix("sm_")?;
    let major: u32 = digits.get(..digits.len().checked_sub(1)?)?.parse().ok()?;
    if major < 8 || k > MAX_K || d == 0 || d > MAX_DIMS || n <= k {
        return None;
    }
    let ks = d.div_ceil(16);
    let fits = |nbuf| shared_bytes(ks, k, nbuf, true) <= SHARED_LIMIT;
    let nbuf = if fits(2) { 2 } else { 1 };
    fits(nbuf).then_some(Plan {
        ks,
        width: width(k, n),
        nbuf,
        smem: [
            shared_bytes(ks, k, nbuf, true),
            shared_bytes(ks, k, nbuf, false),
        ],
    })
}

/// What the tensor scan leaves: `cand` (`width` slots per query, `counts` of them filled) and
/// the queries it could not hold (offsets from the first query; their rows are the f32 scan's).
pub(crate) struct Candidates {
    pub cand: DeviceVec<u32>,
    pub counts: DeviceVec<u32>,
    pub width: usize,
    pub uncertain: Vec<u32>,
}

/// The tensor scan of the queries `rows` of `x` (`n x d`, row-major, on the device) against all
/// its rows, as [`plan`] says. With `tau` (per query row, an upper bound of its `k`-th score in
/// this frame, e.g. over fewer references) pass 1 is skipped.
#[allow(clippy::too_many_arguments)]
pub(crate) fn candidates(
    ctx: &GpuContext,
    x: &DeviceVec<f32>,
    n: usize,
    d: usize,
    k: usize,
    rows: std::ops::Range<usize>,
    plan: Plan,
    tau: Option<DeviceVec<f32>>,
) -> Result<Candidates> {
    let Plan {
        ks,
        width,
        nbuf,
        smem,
    } = plan;
    let bound = TensorBound::for_dims(d);
    let (n64, ks32) = (n as u64, ks as u32);
    let frame = Frame::new(ctx, x, n, d)?;
    let (rb_lo, rb_up, nrm) = frame.row_terms(ctx, x, None, n, &bound)?;
    let pack = |row0: usize, count: usize| frame.pack(ctx, x, None, row0, count, ks);
    let refs = pack(0, n)?;
    let own_queries = if rows == (0..n) {
        None
    } else {
        Some(pack(rows.start, rows.len())?)
    };
    let queries = own_queries.as_ref().unwrap_or(&refs);

    let q = rows.len();
    let (q_row0, q64, k32, nbuf32, width32) = (
        rows.start as u64,
        q as u64,
        k as u32,
        nbuf as u32,
        width as u32,
    );
    let grid = (q.div_ceil(Q).max(1) as u32, 1, 1);

    // Both passes start with the references, a bound term, the norms and the queries.
    let scan_args = |f, rb| {
        let mut l = ctx.launcher(f);
        l.arg(&refs)
            .arg(rb)
            .arg(&nrm)
            .arg(&n64)
            .arg(&ks32)
            .arg(queries)
            .arg(&q_row0)
            .arg(&q64);
        l
    };
    let bound_fn = ctx.function_with_shared(SRC, "knn_tensor_bound", smem[0])?;
    let tau = match tau {
        Some(tau) => tau,
        None => {
            let tau = ctx.alloc::<f32>(q.max(1))?;
            let mut l = scan_args(&bound_fn, &rb_up);
            l.arg(&k32)
                .arg(&bound.ka)
                .arg(&bound.kc)
                .arg(&bound.kf)
                .arg(&bound.ke)
                .arg(&nbuf32)
                .arg(&tau);
            let cfg = LaunchConfig {
                grid_dim: grid,
                block_dim: (THREADS, 1, 1),
                shared_mem_bytes: smem[0] as u32,
            };
            ctx.launch(l, cfg, "knn_tensor_bound")?;
            tau
        }
    };

    let cand = ctx.alloc::<u32>(q.max(1) * width)?;
    let counts = ctx.alloc::<u32>(q.max(1))?;
    let uncertain = ctx.zeros::<u8>(q.max(1))?;
    let n_uncertain = ctx.zeros::<u32>(1)?;
    let f = ctx.function_with_shared(SRC, "knn_tensor_collect", smem[1])?;
    let mut l = scan_args(&f, &rb_lo);
    l.arg(&bound.ka)
        .arg(&nbuf32)
        .arg(&tau)
        .arg(&width32)
        .arg(&cand)
        .arg(&counts)
        .arg(&uncertain)
        .arg(&n_uncertain);
    let cfg = LaunchConfig {
        grid_dim: grid,
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: smem[1] as u32,
    };
    ctx.launch(l, cfg, "knn_tensor_collect")?;
    let count = ctx.download(&n_uncertain)?[0] as usize;
    let uncertain = if count == 0 {
        Vec::new()
    } else {
        let flags = ctx.download(&uncertain)?;
        (0..q as u32).filter(|&i| flags[i as usize] != 0).collect()
    };
    Ok(Candidates {
        cand,
        counts,
        width,
        uncertain,
    })
}

/// How rows are brought to FP16: minus a centre (column means, from block partial sums),
/// times a power of two (from the largest magnitudes), as the module's text says.
pub(crate) struct Frame {
    mean: DeviceVec<f32>,
    scale: f32,
    d: usize,
}

impl Frame {
    /// The frame of the `n x d` rows of `x`.
    pub(crate) fn new(ctx: &GpuContext, x: &DeviceVec<f32>, n: usize, d: usize) -> Result<Frame> {
        let (n64, d32) = (n as u64, d as u32);
        let blocks = n.clamp(1, 1024);
        let per = n.div_ceil(blocks) as u64;
        let partial = ctx.alloc::<f64>(blocks * d)?;
        let largest = ctx.alloc::<f32>(blocks * d)?;
        let f = ctx.function(SRC, "tc_column_sums")?;
        let mut l = ctx.launcher(&f);
        l.arg(x)
            .arg(&n64)
            .arg(&d32)
            .arg(&per)
            .arg(&partial)
            .arg(&largest);
        let cfg = LaunchConfig {
            grid_dim: (blocks as u32, 1, 1),
            block_dim: (64, 1, 1),
            shared_mem_bytes: 0,
        };
        ctx.launch(l, cfg, "tc_column_sums")?;
        let sums = ctx.download(&partial)?;
        let mean: Vec<f32> = (0..d)
            .map(|t| (sums.iter().skip(t).step_by(d).sum::<f64>() / n as f64) as f32)
            .collect();
        let big = ctx.download(&largest)?.iter().fold(0f32, |m, &v| m.max(v));
        let scale = fp16_scale(big + mean.iter().fold(0f32, |m, &v| m.max(v.abs())));
        Ok(Frame {
            mean: ctx.upload(&mean)?,
            scale,
            d,
        })
    }

    /// The power of two the centred rows are multiplied by.
    pub(crate) fn scale(&self) -> f32 {
        self.scale
    }

    /// `tc_row_terms` of `count` rows of `x` (through `ids` when given: ~0 is a padding row):
    /// `(rb_lo, rb_up, nrm)`.
    pub(crate) fn row_terms(
        &self,
        ctx: &GpuContext,
        x: &DeviceVec<f32>,
        ids: Option<&DeviceVec<u32>>,
        count: usize,
        bound: &TensorBound,
    ) -> Result<(DeviceVec<f32>, DeviceVec<f32>, DeviceVec<f32>)> {
        let rb_lo = ctx.alloc::<f32>(count.max(1))?;
        let rb_up = ctx.alloc::<f32>(count.max(1))?;
        let nrm = ctx.alloc::<f32>(count.max(1))?;
        let (c64, d32, null) = (count as u64, self.d as u32, 0u64);
        let f = ctx.function(SRC, "tc_row_terms")?;
        let mut l = ctx.launcher(&f);
        l.arg(x).arg(&self.mean);
        match ids {
            Some(ids) => l.arg(ids),
            None => l.arg(&null),
        };
        l.arg(&c64)
            .arg(&d32)
            .arg(&self.scale)
            .arg(&bound.kb)
            .arg(&bound.kf)
            .arg(&rb_lo)
            .arg(&rb_up)
            .arg(&nrm);
        ctx.launch(l, grid_stride(count), "tc_row_terms")?;
        Ok((rb_lo, rb_up, nrm))
    }

    /// `tc_pack`: rows `row0 .. row0 + count` of `x` (through `ids` when given) as FP16 pairs,
    /// one u32 word each, in chunks of [`R`] rows.
    pub(crate) fn pack(
        &self,
        ctx: &GpuContext,
        x: &DeviceVec<f32>,
        ids: Option<&DeviceVec<u32>>,
        row0: usize,
        count: usize,
        ks: usize,
    ) -> Result<DeviceVec<u32>> {
        let packed = ctx.alloc::<u32>((count.div_ceil(R) * ks * 1024).max(1))?;
        let (r0, c64, d32, ks32, null) =
            (row0 as u64, count as u64, self.d as u32, ks as u32, 0u64);
        let f = ctx.function(SRC, "tc_pack")?;
        let mut l = ctx.launcher(&f);
        l.arg(x).arg(&self.mean);
        match ids {
            Some(ids) => l.arg(ids),
            None => l.arg(&null),
        };
        l.arg(&r0)
            .arg(&c64)
            .arg(&d32)
            .arg(&ks32)
            .arg(&self.scale)
            .arg(&packed);
        ctx.launch(l, grid_stride(packed.len()), "tc_pack")?;
        Ok(packed)
    }
}

/// The power of two that brings values of magnitude at most `largest` to at most 2^14 (FP16's
/// largest finite value is 65504), or 1 when there is nothing to scale.
pub fn fp16_scale(largest: f32) -> f32 {
    if !largest.is_finite() || largest <= 0.0 {
        return 1.0;
    }
    let e = (largest as f64).log2().ceil() as i32 + 1; // one binade of margin for the rounding
    2f32.powi((14 - e).clamp(-120, 120))
}

/// FP16 rounding as `cvt.rn.f16x2.f32` does it: to nearest, ties to even, subnormals kept
/// (steps of 2^-24 below 2^-14); returned as the f32 of the same value.
pub fn to_f16(v: f32) -> f32 {
    let a = v.abs();
    if a == 0.0 || !a.is_finite() {
        return v;
    }
    let exponent = ((a.to_bits() >> 23) & 0xff) as i32 - 127;
    let step = 2f64.powi(exponent.max(-14) - 10);
    ((v as f64 / step).round_ties_even() * step) as f32
}

/// The tensor scan on the CPU, for tests: FP16 inputs, products summed in f32 (in reverse
/// order, truncating when `truncate`, to stand for any accumulation the tensor cores use), the
/// same bounds and the same two passes, pass 1 over the first `bound_refs` references only (at
/// least `k`; the inverted file's pass 1 reads the nearest lists only). Returns, per query (all
/// rows), its candidates (in reference order) and whether it has at most [`width`] of them.
pub fn candidates_host(
    x: &[f32],
    (n, d, k): (usize, usize, usize),
    truncate: bool,
    bound_refs: usize,
) -> Vec<(Vec<u32>, bool)> {
    let bound = TensorBound::for_dims(d);
    let width = width(k, n);
    let mean: Vec<f32> = (0..d)
        .map(|t| ((0..n).map(|i| x[i * d + t] as f64).sum::<f64>() / n as f64) as f32)
        .collect();
    let big = x.iter().fold(0f32, |m, &v| m.max(v.abs()));
    let scale = fp16_scale(big + mean.iter().fold(0f32, |m, &v| m.max(v.abs())));
    let centred: Vec<f32> = (0..n * d).map(|p| (x[p] - mean[p % d]) * scale).collect();
    let tf: Vec<f32> = centred.iter().map(|&v| to_f16(v)).collect();
    let norm2: Vec<f32> = (0..n)
        .map(|i| {
            centred[i * d..(i + 1) * d]
                .iter()
                .fold(0f32, |s, &v| s + v * v)
        })
        .collect();
    let nrm: Vec<f32> = norm2.iter().map(|&s| s.sqrt() * 1.000_015_3).collect();
    let b: Vec<f32> = (0..n)
        .map(|i| bound.kb * (nrm[i] * nrm[i]) + bound.kf * nrm[i])
        .collect();
    let add = |a: f32, b: f32| -> f32 {
        let s = a + b;
        if !truncate || s == 0.0 || !s.is_finite() {
            return s;
        }
        // Round toward zero: step back one ulp when rounding went away from zero.
        let exact = a as f64 + b as f64;
        if (s as f64).abs() > exact.abs() {
            f32::from_bits(s.to_bits() - 1)
        } else {
            s
        }
    };
    (0..n)
        .map(|qi| {
            let qk = bound.ka * nrm[qi];
            let qc = bound.kc * (nrm[qi] * nrm[qi]) + bound.kf * nrm[qi] + bound.ke;
            let dots: Vec<f32> = (0..n)
                .map(|r| {
                    (0..d)
                        .rev()
                        .fold(0f32, |s, t| add(s, tf[qi * d + t] * tf[r * d + t]))
                })
                .collect();
            // Pass 1: the k-th smallest upper bound (without qc), plus 2 qc.
            let mut upper: Vec<f32> = (0..bound_refs.clamp(k, n))
                .map(|r| nrm[r].mul_add(qk, (-2.0f32).mul_add(dots[r], norm2[r] + b[r])))
                .collect();
            upper.sort_by(f32::total_cmp);
            let tau = upper[k - 1] + 2.0 * qc;
            // Pass 2: every reference whose lower bound (without qc) is at most tau.
            let kept: Vec<u32> = (0..n)
                .filter(|&r| {
                    let lower = (-nrm[r]).mul_add(qk, (-2.0f32).mul_add(dots[r], norm2[r] - b[r]));
                    lower <= tau
                })
                .map(|r| r as u32)
                .collect();
            let held = kept.len() <= width;
            (kept, held)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// The k nearest of query q by exact f64 squared distance (ties by index), with it.
    fn exact_nearest(x: &[f32], n: usize, d: usize, q: usize, k: usize) -> Vec<(f64, u32)> {
        let mut all: Vec<(f64, u32)> = (0..n)
            .map(|r| {
                let s: f64 = (0..d)
                    .map(|t| (x[q * d + t] as f64 - x[r * d + t] as f64).powi(2))
                    .sum();
                (s, r as u32)
            })
            .collect();
        all.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        all.truncate(k);
        all
    }

    /// Points in clusters far from the origin (the centring matters), with exact duplicates
    /// and coordinates of mixed scale.
    fn points(seed: u64, n: usize, d: usize) -> Vec<f32> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let offset: Vec<f32> = (0..d).map(|_| rng.random_range(-500.0..500.0)).collect();
        let centres: Vec<Vec<f32>> = (0..4)
            .map(|_| (0..d).map(|_| rng.random_range(-5.0f32..5.0)).collect())
            .collect();
        let mut x = Vec::with_capacity(n * d);
        for i in 0..n {
            if i % 31 == 7 {
                let j = rng.random_range(0..i);
                let row = x[j * d..(j + 1) * d].to_vec();
                x.extend(row);
                continue;
            }
            let c = &centres[rng.random_range(0..4)];
            let scale = if i % 5 == 0 { 0.01 } else { 1.0 };
            for t in 0..d {
                x.push(offset[t] + c[t] + scale * rng.random_range(-1.0f32..1.0));
            }
        }
        x
    }

    #[test]
    fn certified_queries_hold_their_exact_nearest() {
        // The last two bound from a part of the references (a looser bound, still valid).
        for (seed, n, d, k, truncate, bound_refs) in [
            (1u64, 300usize, 50usize, 15usize, false, 300usize),
            (2, 300, 50, 15, true, 300),
            (3, 200, 7, 5, true, 200),
            (4, 250, 100, 30, true, 250),
            (5, 40, 3, 20, false, 40),
            (6, 300, 50, 15, true, 100),
            (7, 200, 7, 5, false, 60),
        ] {
            let x = points(seed, n, d);
            let got = candidates_host(&x, (n, d, k), truncate, bound_refs);
            let mut certified = 0;
            for (q, (kept, sure)) in got.iter().enumerate() {
                if !sure {
                    continue;
                }
                certified += 1;
                let nearest = exact_nearest(&x, n, d, q, k);
                let kth = nearest[k - 1].0;
                for &(dist, r) in &nearest {
                    // Ties at the k-th distance may pick either; the rest must be kept.
                    assert!(
                        kept.contains(&r) || dist == kth,
                        "seed {seed}: query {q} certified without its neighbour {r}"
                    );
                }
            }
            assert!(
                certified > n / 2,
                "seed {seed}: only {certified} of {n} certified"
            );
        }
    }

    #[test]
    fn the_bound_covers_the_fp16_error() {
        // Inputs of every magnitude, subnormal ones included, signs aligned or not.
        let mut rng = rand::rngs::StdRng::seed_from_u64(9);
        for d in [1usize, 8, 50, 128] {
            let b = TensorBound::for_dims(d);
            for case in 0..3000 {
                let mag = [20.0f32, 1e-3, 3e-6][case % 3];
                let q: Vec<f32> = (0..d).map(|_| rng.random_range(-mag..mag)).collect();
                let r: Vec<f32> = (0..d)
                    .map(|_| rng.random_range(-mag..mag).abs() * q[0].signum())
                    .collect();
                let exact: f64 = r.iter().map(|&v| (v as f64).powi(2)).sum::<f64>()
                    - 2.0
                        * q.iter()
                            .zip(&r)
                            .map(|(&a, &c)| a as f64 * c as f64)
                            .sum::<f64>();
                let mut dot = 0f32;
                for t in 0..d {
                    dot += to_f16(q[t]) * to_f16(r[t]);
                }
                let n2: f32 = r.iter().fold(0f32, |s, &v| s + v * v);
                let approx = (-2.0f32).mul_add(dot, n2) as f64;
                let (nq, nr) = (
                    q.iter().map(|&v| (v as f64).powi(2)).sum::<f64>().sqrt(),
                    r.iter().map(|&v| (v as f64).powi(2)).sum::<f64>().sqrt(),
                );
                let eps = b.ka as f64 * nq * nr
                    + b.kb as f64 * nr * nr
                    + b.kc as f64 * nq * nq
                    + b.kf as f64 * (nq + nr)
                    + b.ke as f64;
                assert!(
                    (approx - exact).abs() <= eps,
                    "d {d}: {approx} vs {exact}, bound {eps}"
                );
            }
        }
    }

    #[test]
    fn fp16_rounds_to_ten_bits_ties_to_even_and_keeps_subnormals() {
        assert_eq!(to_f16(1.0), 1.0);
        assert_eq!(to_f16(1.0 + 2f32.powi(-11)), 1.0); // a tie: to even
        assert_eq!(to_f16(1.0 + 3.0 * 2f32.powi(-11)), 1.0 + 2f32.powi(-9));
        assert_eq!(
            to_f16(-(1.0 + 3.0 * 2f32.powi(-11))),
            -(1.0 + 2f32.powi(-9))
        );
        assert_eq!(to_f16(3.0 * 2f32.powi(-25)), 2f32.powi(-23)); // subnormal tie: to even
        assert_eq!(to_f16(2f32.powi(-26)), 0.0);
        assert_eq!(fp16_scale(1.0), 2f32.powi(13));
        assert_eq!(fp16_scale(3000.0), 2.0);
        assert_eq!(fp16_scale(0.0), 1.0);
    }

    #[test]
    fn plans_need_tensor_cores_and_room() {
        assert!(plan("sm_90", 1_000_000, 50, 15).is_some());
        assert!(plan("sm_80", 1_000_000, 50, 15).is_some());
        assert!(plan("sm_75", 1_000_000, 50, 15).is_none());
        assert!(plan("sm_120", 1_000_000, 50, 15).is_some());
        assert!(plan("sm_90", 1_000_000, 200, 15).is_none());
        assert!(plan("sm_90", 1_000_000, 50, 100).is_none());
        assert!(plan("sm_90", 10, 50, 10).is_none());
        let p = plan("sm_90", 1_000_000, 128, 30).unwrap();
        assert!(p.smem[0] <= SHARED_LIMIT && p.smem[1] <= p.smem[0]);
    }
}
