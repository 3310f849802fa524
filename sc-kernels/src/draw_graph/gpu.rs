//! The GPU twin of [`super::force_atlas2`]: the same checks, masses and speed rule (on the host,
//! from two totals an iteration), and the tree, forces, totals and moves on the device
//! (`draw_graph.cu`) with the host's arithmetic: the host's layout, bit for bit. An iteration
//! builds the tree from scratch (the box, waited for, then the keys, their radix sort over the
//! code's bits, the radix tree and its summaries bottom-up), walks it from every node, and
//! waits again for the speed's totals.

use super::tree::{axis_bits, grid_scale, index_bits};
use super::{force_atlas2, prepare, Fa2Params, Speed};
use crate::csr::CsrMatrix;
use crate::eigsh::ROWS;
use crate::error::Result;
use crate::gpu::bounds::Box2d;
use crate::gpu::dense_reduce::{chunked_sums_into, PARTIAL_BYTES};
use crate::gpu::module_cache::KernelSource;
use crate::gpu::radix_sort::sort_keys;
use crate::gpu::trace::PhaseTrace;
use crate::gpu::{grid_for, GpuContext};
use rmm_cuda::cudarc::driver::PushKernelArg;

pub(crate) const SRC: KernelSource = KernelSource {
    name: "draw_graph",
    source: include_str!("draw_graph.cu"),
};

/// The module [`force_atlas2_gpu`] launches.
pub const KERNELS: [KernelSource; 1] = [SRC];

/// Doubles an internal node takes on the device (`Fa2Node`: centre, mass, diagonal and four
/// `u32`).
const NODE_DOUBLES: usize = 6;

/// Device bytes [`force_atlas2_gpu`] takes at most for `n` nodes and `nnz` stored edges: the
/// graph (12 bytes an edge, 8 a row), and per node 3 pairs of f64 (positions, force, last
/// force), the sorted positions and masses (24), the mass (8), two key buffers and the sort's
/// counts (about 17), the order (4), and the tree: its node (48), box (32), parents and flag (12).
pub fn device_bytes(n: u64, nnz: u64) -> u64 {
    nnz * 12 + n * (8 + 48 + 24 + 8 + 17 + 4 + 48 + 32 + 12) + (1 << 20)
}

/// [`super::force_atlas2`] on `ctx`'s GPU: the same layout, bit for bit.
pub fn force_atlas2_gpu(
    ctx: &GpuContext,
    graph: &CsrMatrix<f32>,
    start: &[f64],
    params: &Fa2Params,
) -> Result<Vec<f64>> {
    let mass = prepare(graph, start, params)?;
    let n = mass.len();
    if n < 2 {
        // No tree to build: nothing the GPU would speed up.
        return force_atlas2(graph, start, params);
    }
    ctx.bind_to_thread()?;
    let mut trace = PhaseTrace::new(ctx, "draw_graph");
    let indptr = ctx.upload(&graph.indptr)?;
    let indices = ctx.upload(&graph.indices)?;
    let weights = ctx.upload(&graph.data)?;
    let mass_d = ctx.upload(&mass)?;
    let mut pos = ctx.upload(start)?;
    let (mut force, mut old) = (ctx.zeros::<f64>(2 * n)?, ctx.zeros::<f64>(2 * n)?);
    let mut keys = ctx.alloc::<u64>(n)?;
    let mut bounds = Box2d::new(ctx, n)?;
    let mut order = ctx.alloc::<u32>(n)?;
    let mut spos = ctx.alloc::<f64>(2 * n)?;
    let mut smass = ctx.alloc::<f64>(n)?;
    let mut nodes = ctx.alloc::<f64>(NODE_DOUBLES * (n - 1))?;
    let mut boxes = ctx.alloc::<f64>(4 * (n - 1))?;
    let mut parent = ctx.alloc::<u32>(n - 1)?;
    let mut leaf_parent = ctx.alloc::<u32>(n)?;
    let mut flags = ctx.alloc::<u32>(n - 1)?;
    trace.mark("upload")?;

    let f = |name| ctx.function(SRC, name);
    let (k_keys, k_gather, k_build, k_summarize, k_forces, k_parts, k_move) = (
        f("fa2_keys")?,
        f("fa2_gather")?,
        f("fa2_build")?,
        f("fa2_summarize")?,
        f("fa2_forces")?,
        f("fa2_speed_parts")?,
        f("fa2_move")?,
    );
    let (ab, ib) = (axis_bits(n), index_bits(n));
    let (n64, mask) = (n as u64, (1u64 << ib) - 1);
    let theta2 = params.theta * params.theta;
    let mut speed = Speed::default();
    for _ in 0..params.iterations {
        std::mem::swap(&mut force, &mut old);
        let b = bounds.of(ctx, &pos)?;
        let scale = grid_scale(&b, ab);
        let mut l = ctx.launcher(&k_keys);
        l.arg(&pos).arg(&n64).arg(&b[0]).arg(&b[1]).arg(&scale);
        l.arg(&ab).arg(&ib);
        l.arg(&mut keys);
        ctx.launch(l, grid_for(n), "fa2_keys")?;
        keys = sort_keys(ctx, keys, ib, ib + 2 * ab)?;
        let mut l = ctx.launcher(&k_gather);
        l.arg(&keys).arg(&n64).arg(&mask).arg(&pos).arg(&mass_d);
        l.arg(&mut order).arg(&mut spos).arg(&mut smass);
        ctx.launch(l, grid_for(n), "fa2_gather")?;
        let mut l = ctx.launcher(&k_build);
        l.arg(&keys).arg(&n64).arg(&mut nodes).arg(&mut parent);
        l.arg(&mut leaf_parent).arg(&mut flags);
        ctx.launch(l, grid_for(n - 1), "fa2_build")?;
        let mut l = ctx.launcher(&k_summarize);
        l.arg(&n64)
            .arg(&spos)
            .arg(&smass)
            .arg(&mut nodes)
            .arg(&mut boxes);
        l.arg(&parent).arg(&leaf_parent).arg(&mut flags);
        ctx.launch(l, grid_for(n), "fa2_summarize")?;
        let mut l = ctx.launcher(&k_forces);
        l.arg(&n64)
            .arg(&nodes)
            .arg(&order)
            .arg(&spos)
            .arg(&smass)
            .arg(&pos);
        l.arg(&indptr).arg(&indices).arg(&weights);
        l.arg(&params.scaling_ratio)
            .arg(&params.gravity)
            .arg(&theta2);
        l.arg(&mut force);
        ctx.launch(l, grid_for(n), "fa2_forces")?;

        let totals = ctx.zeros::<f64>(2)?;
        chunked_sums_into(
            ctx,
            (n, ROWS, 2),
            PARTIAL_BYTES,
            totals.ptr(),
            |first, count, part| {
                let mut l = ctx.launcher(&k_parts);
                l.arg(&old).arg(&force).arg(&mass_d).arg(&n64);
                l.arg(&first).arg(&count).arg(part);
                ctx.launch(l, grid_for(count as usize * 32), "fa2_speed_parts")
            },
        )?;
        let totals = ctx.download(&totals)?;
        let step = speed.adjust(totals[0], totals[1], n, params.jitter_tolerance);

        let mut l = ctx.launcher(&k_move);
        l.arg(&mut pos)
            .arg(&force)
            .arg(&old)
            .arg(&mass_d)
            .arg(&n64)
            .arg(&step);
        ctx.launch(l, grid_for(n), "fa2_move")?;
    }
    trace.mark("iterations")?;
    ctx.download(&pos)
}
