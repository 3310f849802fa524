//! The GPU twin of [`super::tsne`]: the same neighbours (the exact kNN on the device), the same
//! affinities, start and schedule (momentum, gains, exaggeration), and the repulsion
//! interpolated on a grid and convolved by FFT (`tsne.cu`, [`super::interp`]) instead of the
//! quadtree: `O(n)` an iteration, about 1,000 iterations of a million cells in seconds. The
//! two embeddings agree by quality (trustworthiness), not bit for bit; the GPU's own is the same
//! every run (fixed-point spreading, fixed-order sums).

use super::interp::{fixed_point_scales, Grid};
use super::{affinities, check, neighbours_for, pca_start, stages, TsneParams};
use crate::csr::CsrMatrix;
use crate::dense::DenseMatrix;
use crate::error::Result;
use crate::gpu::fft::Fft2d;
use crate::gpu::module_cache::KernelSource;
use crate::gpu::{DeviceVec, GpuContext};
use crate::neighbors::exact::knn_exact_gpu;
use crate::neighbors::{GPU_MAX_DIMS, GPU_MAX_K};
use rmm_cuda::cudarc::driver::{LaunchConfig, PushKernelArg};

pub(crate) const SRC: KernelSource = KernelSource {
    name: "tsne",
    source: include_str!("tsne.cu"),
};

/// [`super::tsne`] on `ctx`'s GPU.
pub fn tsne_gpu(
    ctx: &GpuContext,
    x: &DenseMatrix<f32>,
    params: &TsneParams,
) -> Result<DenseMatrix<f32>> {
    let n = x.n_rows;
    check(n, params)?;
    x.check_finite()?;
    let mut trace = crate::gpu::trace::PhaseTrace::new(ctx, "tsne");
    let k = neighbours_for(n, params.perplexity);
    // The GPU's scan takes up to GPU_MAX_K neighbours and GPU_MAX_DIMS dimensions (perplexity
    // 32 and 50 PCs fit); beyond, the host's exact kNN.
    let knn = if k < GPU_MAX_K && x.n_cols <= GPU_MAX_DIMS {
        let xd = ctx.upload(&x.data)?;
        knn_exact_gpu(ctx, &xd, n, x.n_cols, k + 1)?
    } else {
        crate::neighbors::exact::knn_exact(x, k + 1)?
    };
    trace.mark("kNN")?;
    let p = affinities(&knn, k, params.perplexity)?;
    drop(knn);
    trace.mark("affinities (host)")?;
    let start = pca_start(x)?;
    trace.mark("PCA start (host)")?;
    let y = optimize_gpu(ctx, &p, &start, params)?;
    trace.mark("descent")?;
    Ok(y)
}

/// The transforms and buffers of one grid size.
struct GridBuffers {
    nb: usize,
    fft: Fft2d,
    /// 4 channels of `M x M` fixed-point node sums.
    sums: DeviceVec<u64>,
    /// 5 arrays of `2M x 2M`: the padded channels and the kernel, then the potentials.
    real: DeviceVec<f64>,
    spectra: DeviceVec<f64>,
}

impl GridBuffers {
    fn new(ctx: &GpuContext, nb: usize) -> Result<GridBuffers> {
        let m = super::interp::NODES * nb;
        let l = 2 * m;
        let fft = Fft2d::new(ctx, l, l, 5)?;
        Ok(GridBuffers {
            nb,
            sums: ctx.alloc(4 * m * m)?,
            real: ctx.alloc(5 * l * l)?,
            spectra: ctx.alloc(5 * 2 * fft.spectrum_len())?,
            fft,
        })
    }
}

/// [`super::optimize`] on the GPU, from `y` (`n x 2`) on the affinities `p`.
pub fn optimize_gpu(
    ctx: &GpuContext,
    p: &CsrMatrix<f64>,
    y: &[f64],
    params: &TsneParams,
) -> Result<DenseMatrix<f32>> {
    let n = p.n_rows;
    let n64 = n as u64;
    let indptr = ctx.upload(&p.indptr)?;
    let indices = ctx.upload(&p.indices)?;
    let values = ctx.upload(&p.data)?;
    let mut y_cur = ctx.upload(y)?;
    let mut y_next = ctx.alloc::<f64>(2 * n)?;
    let mut rep = ctx.alloc::<f64>(2 * n)?;
    let mut zcell = ctx.alloc::<f64>(n)?;
    // A fixed grid, so every sum has the same order every run.
    let cfg = ctx.filling_grid(n);
    let blocks = cfg.grid_dim.0 as usize;
    let mut bound_parts = ctx.alloc::<f64>(4 * blocks)?;
    let mut zparts = ctx.alloc::<f64>(blocks)?;
    let mut zsum = ctx.alloc::<f64>(1)?;
    let one_block = LaunchConfig {
        grid_dim: (1, 1, 1),
        ..cfg
    };
    let f_bounds = ctx.function(SRC, "tsne_bounds")?;
    let f_spread = ctx.function(SRC, "tsne_spread")?;
    let f_fill = ctx.function(SRC, "tsne_fill")?;
    let f_multiply = ctx.function(SRC, "tsne_multiply")?;
    let f_interpolate = ctx.function(SRC, "tsne_interpolate")?;
    let f_sum = ctx.function(SRC, "tsne_sum")?;
    let f_move = ctx.function(SRC, "tsne_move")?;
    let mut grid: Option<GridBuffers> = None;
    for (iterations, momentum, exaggeration) in stages(params) {
        // scikit-learn starts each stage with fresh steps and gains.
        let mut update = ctx.zeros::<f64>(2 * n)?;
        let mut gains = ctx.upload(&vec![1.0f64; 2 * n])?;
        for _ in 0..iterations {
            // Where the cells are: the grid of this iteration.
            let mut l = ctx.launcher(&f_bounds);
            l.arg(&y_cur).arg(&n64).arg(&mut bound_parts);
            ctx.launch(l, cfg, "tsne_bounds")?;
            let parts = ctx.download(&bound_parts)?;
            let mut b = [
                f64::INFINITY,
                f64::NEG_INFINITY,
                f64::INFINITY,
                f64::NEG_INFINITY,
            ];
            for q in parts.chunks(4) {
                b = [
                    b[0].min(q[0]),
                    b[1].max(q[1]),
                    b[2].min(q[2]),
                    b[3].max(q[3]),
                ];
            }
            let g = Grid::for_bounds(b);
            if grid.as_ref().is_none_or(|gb| gb.nb != g.nb) {
                drop(grid.take()); // the old grid's memory back before the new one's
                grid = Some(GridBuffers::new(ctx, g.nb)?);
            }
            let gb = grid.as_mut().expect("made above");
            let (m, nb) = (g.m() as i32, g.nb as i32);
            let s = fixed_point_scales(n, b);
            gb.sums.fill_zero()?;
            let mut l = ctx.launcher(&f_spread);
            l.arg(&y_cur).arg(&n64).arg(&g.lo).arg(&g.h).arg(&nb);
            l.arg(&s[0])
                .arg(&s[1])
                .arg(&s[2])
                .arg(&s[3])
                .arg(&mut gb.sums);
            ctx.launch(l, cfg, "tsne_spread")?;
            let spacing = g.spacing();
            let mut l = ctx.launcher(&f_fill);
            l.arg(&gb.sums).arg(&s[0]).arg(&s[1]).arg(&s[2]).arg(&s[3]);
            l.arg(&m).arg(&spacing).arg(&mut gb.real);
            ctx.launch(l, ctx.filling_grid(4 * (m * m) as usize), "tsne_fill")?;
            gb.fft.forward(ctx, &gb.real, &mut gb.spectra)?;
            let len = gb.fft.spectrum_len() as u64;
            let mut l = ctx.launcher(&f_multiply);
            l.arg(&mut gb.spectra).arg(&len);
            ctx.launch(l, ctx.filling_grid(4 * len as usize), "tsne_multiply")?;
            gb.fft.inverse(ctx, &mut gb.spectra, &mut gb.real)?;
            let mut l = ctx.launcher(&f_interpolate);
            l.arg(&y_cur).arg(&n64).arg(&g.lo).arg(&g.h).arg(&nb);
            l.arg(&gb.real).arg(&mut rep).arg(&mut zcell);
            ctx.launch(l, cfg, "tsne_interpolate")?;
            let mut l = ctx.launcher(&f_sum);
            l.arg(&zcell).arg(&n64).arg(&mut zparts);
            ctx.launch(l, cfg, "tsne_sum")?;
            let blocks64 = blocks as u64;
            let mut l = ctx.launcher(&f_sum);
            l.arg(&zparts).arg(&blocks64).arg(&mut zsum);
            ctx.launch(l, one_block, "tsne_sum")?;
            let mut l = ctx.launcher(&f_move);
            l.arg(&indptr).arg(&indices).arg(&values).arg(&y_cur);
            l.arg(&rep)
                .arg(&zsum)
                .arg(&n64)
                .arg(&exaggeration)
                .arg(&momentum);
            l.arg(&params.learning_rate)
                .arg(&mut update)
                .arg(&mut gains)
                .arg(&mut y_next);
            ctx.launch(l, cfg, "tsne_move")?;
            std::mem::swap(&mut y_cur, &mut y_next);
        }
    }
    let y = ctx.download(&y_cur)?;
    Ok(DenseMatrix::new(n, 2, y.iter().map(|&v| v as f32).collect()).expect("n x 2"))
}
