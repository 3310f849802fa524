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
use crate::gpu::bounds::Box2d;
use crate::gpu::fft::Fft2d;
use crate::gpu::grid_for;
use crate::gpu::module_cache::KernelSource;
use crate::gpu::radix_sort::sort_keys;
use crate::gpu::scan::exclusive_scan;
use crate::gpu::{DeviceVec, GpuContext};
use crate::neighbors::exact::{knn_exact, knn_on_device};
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
    let (n, d) = (x.n_rows, x.n_cols);
    check(n, params)?;
    x.check_finite()?;
    ctx.bind_to_thread()?;
    let mut trace = crate::gpu::trace::PhaseTrace::new(ctx, "tsne");
    let k = neighbours_for(n, params.perplexity);
    let start = pca_start(x)?;
    trace.mark("PCA start (host)")?;
    // The GPU's scan takes up to GPU_MAX_K neighbours and GPU_MAX_DIMS dimensions (perplexity
    // 32 and 50 PCs fit), and the mirrors' keys hold an entry's index in 32 bits; beyond, the
    // host's kNN and affinities.
    let joint = if k < GPU_MAX_K && d <= GPU_MAX_DIMS && ((n * k) as u64) < 1 << 32 {
        let (idx, dist, _) = {
            let xd = ctx.upload(&x.data)?;
            knn_on_device(ctx, &xd, n, d, k + 1)?
        };
        trace.mark("kNN")?;
        let joint = Joint::on_device(ctx, &idx, &dist, n, k, params.perplexity)?;
        trace.mark("affinities")?;
        joint
    } else {
        let knn = knn_exact(x, k + 1)?;
        let joint = Joint::from_host(ctx, &affinities(&knn, k, params.perplexity)?)?;
        trace.mark("kNN and affinities (host)")?;
        joint
    };
    let y = descend(ctx, &joint, &start, params)?;
    trace.mark("descent")?;
    Ok(y)
}

/// The joint affinities on the device: each row's own entries (`out_*`, CSR) and the mirrors
/// of the other rows' entries (`in_*`, CSR by the mirrored column: the source row and the
/// value), all times `scale[0]`.
pub struct Joint {
    n: usize,
    out_ptr: DeviceVec<u64>,
    out_cols: DeviceVec<u32>,
    out_vals: DeviceVec<f64>,
    in_ptr: DeviceVec<u64>,
    in_src: DeviceVec<u32>,
    in_vals: DeviceVec<f64>,
    scale: DeviceVec<f64>,
}

impl Joint {
    /// From the device's kNN (`k + 1` a cell, itself among them): each cell's conditionals
    /// (`tsne_conditional`), their mirrors sorted by column (the radix sort keeps the entries'
    /// order within a column) and the normalization, without a host round trip.
    fn on_device(
        ctx: &GpuContext,
        idx: &DeviceVec<u32>,
        dist: &DeviceVec<f32>,
        n: usize,
        k: usize,
        perplexity: f64,
    ) -> Result<Joint> {
        let entries = n * k;
        let out_cols = ctx.alloc::<u32>(entries)?;
        let out_vals = ctx.alloc::<f64>(entries)?;
        let keys = ctx.alloc::<u64>(entries)?;
        let indeg = ctx.zeros::<u64>(n)?;
        let (n64, kk, k32, target) = (n as u64, (k + 1) as i32, k as i32, perplexity.ln());
        let f = ctx.function(SRC, "tsne_conditional")?;
        let mut l = ctx.launcher(&f);
        l.arg(idx)
            .arg(dist)
            .arg(&n64)
            .arg(&kk)
            .arg(&k32)
            .arg(&target);
        l.arg(&out_cols).arg(&out_vals).arg(&keys).arg(&indeg);
        ctx.launch(l, ctx.filling_grid(n), "tsne_conditional")?;
        let column_bits = 64 - (n as u64).leading_zeros();
        let in_keys = sort_keys(ctx, keys, 32, 32 + column_bits.max(1))?;
        let (in_ptr, _) = exclusive_scan(ctx, &indeg)?;
        let mut in_src = ctx.alloc::<u32>(entries)?;
        let mut in_vals = ctx.alloc::<f64>(entries)?;
        let (len, k64) = (entries as u64, k as u64);
        let f = ctx.function(SRC, "tsne_mirrors")?;
        let mut l = ctx.launcher(&f);
        l.arg(&in_keys).arg(&len).arg(&k64).arg(&out_vals);
        l.arg(&mut in_src).arg(&mut in_vals);
        ctx.launch(l, ctx.filling_grid(entries), "tsne_mirrors")?;
        drop(in_keys);
        let total = sum(ctx, &out_vals)?;
        let scale = ctx.alloc::<f64>(1)?;
        let f = ctx.function(SRC, "tsne_normalization")?;
        let mut l = ctx.launcher(&f);
        l.arg(&total).arg(&scale);
        ctx.launch(l, grid_for(1), "tsne_normalization")?;
        let rows: Vec<u64> = (0..=n as u64).map(|i| i * k as u64).collect();
        Ok(Joint {
            n,
            out_ptr: ctx.upload(&rows)?,
            out_cols,
            out_vals,
            in_ptr,
            in_src,
            in_vals,
            scale,
        })
    }

    /// The host's symmetric CSR (normalized already; no mirrors).
    fn from_host(ctx: &GpuContext, p: &CsrMatrix<f64>) -> Result<Joint> {
        Ok(Joint {
            n: p.n_rows,
            out_ptr: ctx.upload(&p.indptr)?,
            out_cols: ctx.upload(&p.indices)?,
            out_vals: ctx.upload(&p.data)?,
            in_ptr: ctx.zeros(p.n_rows + 1)?,
            in_src: ctx.alloc(1)?,
            in_vals: ctx.alloc(1)?,
            scale: ctx.upload(&[1.0f64])?,
        })
    }
}

/// The sum of `v` on the device in a fixed order, left there.
fn sum(ctx: &GpuContext, v: &DeviceVec<f64>) -> Result<DeviceVec<f64>> {
    let mut parts = ctx.alloc::<f64>(ctx.filling_grid(v.len()).grid_dim.0 as usize)?;
    let mut out = ctx.alloc::<f64>(1)?;
    sum_into(ctx, v, &mut parts, &mut out)?;
    Ok(out)
}

/// [`sum`] into `out[0]` through `parts` (a value per block of `filling_grid(v.len())`):
/// each block its grid-stride share, then one block over the blocks' sums (`tsne_sum` twice).
fn sum_into(
    ctx: &GpuContext,
    v: &DeviceVec<f64>,
    parts: &mut DeviceVec<f64>,
    out: &mut DeviceVec<f64>,
) -> Result<()> {
    let cfg = ctx.filling_grid(v.len());
    let blocks = cfg.grid_dim.0 as u64;
    let f = ctx.function(SRC, "tsne_sum")?;
    let len = v.len() as u64;
    let mut l = ctx.launcher(&f);
    l.arg(v).arg(&len).arg(&mut *parts);
    ctx.launch(l, cfg, "tsne_sum")?;
    let mut l = ctx.launcher(&f);
    l.arg(&*parts).arg(&blocks).arg(out);
    let one_block = LaunchConfig {
        grid_dim: (1, 1, 1),
        ..cfg
    };
    ctx.launch(l, one_block, "tsne_sum")
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
fn descend(
    ctx: &GpuContext,
    p: &Joint,
    y: &[f64],
    params: &TsneParams,
) -> Result<DenseMatrix<f32>> {
    let n = p.n;
    let n64 = n as u64;
    let mut y_cur = ctx.upload(y)?;
    let mut y_next = ctx.alloc::<f64>(2 * n)?;
    let mut rep = ctx.alloc::<f64>(2 * n)?;
    let mut zcell = ctx.alloc::<f64>(n)?;
    // A fixed grid, so every sum has the same order every run.
    let cfg = ctx.filling_grid(n);
    let blocks = cfg.grid_dim.0 as usize;
    let mut bounds = Box2d::new(ctx, n)?;
    let mut zparts = ctx.alloc::<f64>(blocks)?;
    let mut zsum = ctx.alloc::<f64>(1)?;
    let f_spread = ctx.function(SRC, "tsne_spread")?;
    let f_fill = ctx.function(SRC, "tsne_fill")?;
    let f_multiply = ctx.function(SRC, "tsne_multiply")?;
    let f_interpolate = ctx.function(SRC, "tsne_interpolate")?;
    let f_move = ctx.function(SRC, "tsne_move")?;
    let mut grid: Option<GridBuffers> = None;
    for (iterations, momentum, exaggeration) in stages(params) {
        // scikit-learn starts each stage with fresh steps and gains.
        let mut update = ctx.zeros::<f64>(2 * n)?;
        let mut gains = ctx.upload(&vec![1.0f64; 2 * n])?;
        for _ in 0..iterations {
            // Where the cells are: the grid of this iteration.
            let [lo_x, lo_y, hi_x, hi_y] = bounds.of(ctx, &y_cur)?;
            let b = [lo_x, hi_x, lo_y, hi_y];
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
            sum_into(ctx, &zcell, &mut zparts, &mut zsum)?;
            let mut l = ctx.launcher(&f_move);
            l.arg(&p.out_ptr).arg(&p.out_cols).arg(&p.out_vals);
            l.arg(&p.in_ptr)
                .arg(&p.in_src)
                .arg(&p.in_vals)
                .arg(&p.scale);
            l.arg(&y_cur).arg(&rep).arg(&zsum).arg(&n64);
            l.arg(&exaggeration).arg(&momentum);
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
