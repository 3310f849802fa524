//! The GPU twin of [`super::logreg`] for the fit in the genes' coordinates (more cells than the
//! cells' form takes): the same checks, landmarks (on the way to the minimum) and L-BFGS on
//! the host, where the vectors are `genes x groups` long, and the objective's passes over the
//! cells on the device
//! (`logreg.cu`): the scores and residuals a warp a cell, the genes' gradient a warp a gene over
//! X's transpose, the intercepts', the loss's and the curvature's sums over fixed chunks of
//! cells. Each sum runs in the host's order, but the exponentials and logarithms are CUDA's: the
//! fit agrees with the host's to the tolerance it stops at, not bit for bit. Fewer cells, or
//! more than 64 groups, are fitted on the host.

use super::lbfgs::{minimise, Smooth};
use super::{cells, check, fit_from, landmarks_for, score_rows};
use super::{landmarks::Landmarks, LogregFit, LogregParams};
use crate::csr::CsrMatrix;
use crate::error::{KernelError, Result};
use crate::gpu::dense_reduce::{chunked_sums, PARTIAL_BYTES};
use crate::gpu::module_cache::KernelSource;
use crate::gpu::{DeviceCsr, DeviceVec, GpuContext};
use rmm_cuda::cudarc::driver::PushKernelArg;
use std::sync::Mutex;

pub(crate) const SRC: KernelSource = KernelSource {
    name: "logreg",
    source: include_str!("logreg.cu"),
};

/// The module [`logreg_gpu`] launches.
pub const KERNELS: [KernelSource; 1] = [SRC];

/// Score rows a lane pair of `logreg.cu` holds at most.
const MAX_K: usize = 64;

/// Whether [`logreg_gpu`] runs on the GPU for `n` cells, `p` genes and `n_groups` groups (else
/// it fits on the host: fewer cells than the cells' form takes, or more than 64 score rows).
pub fn runs_on_gpu(n: usize, p: usize, n_groups: usize) -> bool {
    !cells::applies(n, p) && score_rows(n_groups) <= MAX_K
}

/// [`super::logreg`] with the objective's passes over the cells on `ctx`'s GPU.
pub fn logreg_gpu(
    ctx: &GpuContext,
    x: &CsrMatrix<f32>,
    groups: &[u32],
    n_groups: usize,
    params: &LogregParams,
) -> Result<LogregFit> {
    let k = check(x, groups, n_groups, params)?;
    let (n, p) = (x.n_rows, x.n_cols);
    if !runs_on_gpu(n, p, n_groups) {
        return super::logreg(x, groups, n_groups, params);
    }
    ctx.bind_to_thread()?;
    let xt = x.transpose();
    let landmarks = landmarks_for(params, x, &xt, k)?;
    let objective = DeviceObjective::new(ctx, x, &xt, groups, k, 1.0 / params.c, landmarks)?;
    drop(xt);
    let mut theta = vec![0.0; p * k + k];
    let ended = minimise(&objective, &mut theta, params.gtol(n), params.max_iter);
    if let Some(e) = objective.failure.lock().unwrap().take() {
        return Err(e);
    }
    Ok(fit_from(&theta, p, k, ended))
}

/// X and its transpose, the labels and the per-cell work on the device; the landmarks (on the
/// way to the minimum) with their cells on the device; the first failure (an evaluation cannot
/// return one: it gives NaN, which stops L-BFGS).
struct DeviceObjective<'a> {
    ctx: &'a GpuContext,
    x: DeviceCsr,
    xt: DeviceCsr,
    groups: DeviceVec<u32>,
    resid: DeviceVec<f64>,
    loss: DeviceVec<f64>,
    k: usize,
    inverse_c: f64,
    landmarks: Option<(Landmarks, DeviceVec<u64>)>,
    failure: Mutex<Option<KernelError>>,
}

impl<'a> DeviceObjective<'a> {
    fn new(
        ctx: &'a GpuContext,
        x: &CsrMatrix<f32>,
        xt: &CsrMatrix<f32>,
        groups: &[u32],
        k: usize,
        inverse_c: f64,
        landmarks: Option<Landmarks>,
    ) -> Result<Self> {
        let landmarks = match landmarks {
            Some(l) => {
                let cells: Vec<u64> = l.cells.iter().map(|&c| c as u64).collect();
                let cells = ctx.upload(&cells)?;
                Some((l, cells))
            }
            None => None,
        };
        Ok(DeviceObjective {
            ctx,
            x: DeviceCsr::upload(ctx, x)?,
            xt: DeviceCsr::upload(ctx, xt)?,
            groups: ctx.upload(groups)?,
            resid: ctx.alloc(x.n_rows * k)?,
            loss: ctx.alloc(x.n_rows)?,
            k,
            inverse_c,
            landmarks,
            failure: Mutex::new(None),
        })
    }

    /// The value at `theta` and its gradient; records the landmarks' curvature where there are
    /// landmarks.
    fn try_eval(&self, theta: &[f64], grad: &mut [f64]) -> Result<f64> {
        let (ctx, k) = (self.ctx, self.k);
        let (n, p) = (self.x.n_rows, self.x.n_cols);
        let (n64, p64, k32) = (n as u64, p as u64, k as u32);
        let theta_d = ctx.upload(theta)?;
        let f = ctx.function(SRC, "logreg_scores")?;
        let mut l = ctx.launcher(&f);
        l.arg(&self.x.indptr).arg(&self.x.indices).arg(&self.x.data);
        l.arg(&n64).arg(&theta_d).arg(&p64).arg(&k32);
        l.arg(&self.groups).arg(&self.resid).arg(&self.loss);
        ctx.launch(l, ctx.filling_grid(n * 32), "logreg_scores")?;
        let grad_d = ctx.alloc::<f64>(p * k)?;
        let f = ctx.function(SRC, "logreg_gene_grad")?;
        let mut l = ctx.launcher(&f);
        l.arg(&self.xt.indptr)
            .arg(&self.xt.indices)
            .arg(&self.xt.data);
        l.arg(&p64).arg(&self.resid).arg(&theta_d).arg(&k32);
        l.arg(&self.inverse_c).arg(&grad_d);
        ctx.launch(l, ctx.filling_grid(p * 32), "logreg_gene_grad")?;
        // The intercepts' gradient, the loss and each score's curvature over all cells.
        let len = 2 * k + 1;
        let f = ctx.function(SRC, "logreg_partials")?;
        let chunk = crate::stats::DENSE_CHUNK_ROWS as u64;
        let sums = chunked_sums(ctx, n, len, PARTIAL_BYTES, |first, count, out| {
            let mut l = ctx.launcher(&f);
            l.arg(&self.resid).arg(&self.loss).arg(&self.groups);
            l.arg(&n64)
                .arg(&k32)
                .arg(&chunk)
                .arg(&first)
                .arg(&count)
                .arg(out);
            ctx.launch(l, ctx.filling_grid(count as usize * len), "logreg_partials")
        })?;
        if let Some((landmarks, cells)) = &self.landmarks {
            let m = landmarks.cells.len();
            let at_d = ctx.alloc::<f64>(m * k)?;
            let f = ctx.function(SRC, "logreg_landmark_curvature")?;
            let mut l = ctx.launcher(&f);
            let m64 = m as u64;
            l.arg(&self.resid).arg(&self.groups).arg(cells);
            l.arg(&m64).arg(&k32).arg(&at_d);
            ctx.launch(l, ctx.filling_grid(m * k), "logreg_landmark_curvature")?;
            landmarks.record(&ctx.download(&at_d)?, &sums[k + 1..]);
        }
        ctx.download_into(&grad_d, &mut grad[..p * k])?;
        grad[p * k..].copy_from_slice(&sums[..k]);
        let w = &theta[..p * k];
        Ok(sums[k] + 0.5 * self.inverse_c * super::lbfgs::dot(w, w))
    }
}

impl Smooth for DeviceObjective<'_> {
    fn precondition(&self, v: &mut [f64]) -> bool {
        self.landmarks.as_ref().is_some_and(|(l, _)| l.apply(v))
    }

    /// After a failure: NaN and a zero gradient, which ends the minimisation at once.
    fn eval(&self, theta: &[f64], grad: &mut [f64]) -> f64 {
        let failed = self.failure.lock().unwrap().is_some();
        match (!failed).then(|| self.try_eval(theta, grad)) {
            Some(Ok(v)) => v,
            outcome => {
                if let Some(Err(e)) = outcome {
                    self.failure.lock().unwrap().get_or_insert(e);
                }
                grad.fill(0.0);
                f64::NAN
            }
        }
    }
}
