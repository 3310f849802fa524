//! The inverted file's scan on tensor cores: the exact kNN's two FP16 passes with their proven
//! bound ([`crate::neighbors::scan::tensor`]), run over the probed lists instead of all the cells, so the search
//! stays exact within the probed lists (what the f32 `ivf_scan` gives, ties aside).
//!
//! The tensor passes read references and queries in packed chunks of 128 rows, so the cells
//! are laid out again for them: list `l` in the chunks `cstart[l] .. cstart[l] + ccount[l]`
//! ([`Slots`](crate::neighbors::lists::packed::Slots)), its last chunk padded (a padding slot has bounds no threshold passes). A block
//! takes one chunk of a list as its queries and streams the chunks of the lists that list
//! probes. Pass 1 runs over every block of the part at once, over the nearest of those lists
//! only ([`IvfParams::bound_probes`](crate::neighbors::ivf::IvfParams::bound_probes)); pass 2
//! over all of them, the f32 scan of the queries it could not certify (`ivf_scan_listed`), the
//! f64 refinement and the scatter into cell order run in batches of slots, which bound the
//! candidates' memory.

use crate::error::Result;
use crate::gpu::trace::PhaseTrace;
use crate::gpu::{DeviceVec, GpuContext};
use crate::neighbors::lists::packed::{
    balanced_share, DeviceProbes, F32Layout, Packed, Slots, Streams, CHUNK,
};
use crate::neighbors::scan::tensor;
use crate::neighbors::scan::tensor::Plan;

/// The kNN rows of the part `part` = (rank, ranks) of the tiles, into `out_idx`/`out_dist`
/// (`n x k`, cell order): pass 2 over the probes, pass 1 over `bound` (a prefix of each list's
/// probes, as CSR `ptr`, `probes`: the bound it gives is looser but still valid). Returns the
/// cells of the part and how many of them the f32 scan took (not certified by the bound).
#[allow(clippy::too_many_arguments)]
pub(crate) fn search(
    ctx: &GpuContext,
    xd: &DeviceVec<f32>,
    (n, d, k): (usize, usize, usize),
    slots: &Slots,
    f32_layout: &F32Layout<'_>,
    (probes, bound): (&DeviceProbes<'_>, (&DeviceVec<u32>, &DeviceVec<u32>)),
    part: (usize, usize),
    plan: Plan,
    out: (&DeviceVec<u32>, &DeviceVec<f32>),
    trace: &mut PhaseTrace<'_>,
) -> Result<(Vec<u32>, usize)> {
    let share = balanced_share(slots, (probes.host_ptr, probes.host_probes), part.1, part.0);
    let cells: Vec<u32> = slots.cells[share.start * CHUNK..share.end * CHUNK]
        .iter()
        .copied()
        .filter(|&c| c != u32::MAX)
        .collect();
    if share.is_empty() {
        return Ok((cells, 0));
    }
    let packed = Packed::new(ctx, xd, (n, d), slots, plan.ks)?;
    let (cstart, ccount) = (ctx.upload(&slots.cstart)?, ctx.upload(&slots.ccount)?);
    let streams = Streams {
        ptr: probes.ptr,
        ranges: probes.probes,
        cstart: &cstart,
        ccount: &ccount,
    };
    let first = Streams {
        ptr: bound.0,
        ranges: bound.1,
        ..streams
    };
    trace.mark("tensor layout")?;
    let tau = packed.bound_pass(ctx, share.clone(), &first, plan, k)?;
    trace.mark("tensor pass 1")?;
    let f32_queries = packed.collect_pass(
        ctx,
        xd,
        (d, k),
        slots,
        f32_layout,
        share,
        &streams,
        probes,
        plan,
        &tau,
        out,
    )?;
    Ok((cells, f32_queries))
}

/// Whether the tensor scan can serve an inverted file of `n` cells (see [`tensor::plan`]).
pub(crate) fn plan(ctx: &GpuContext, n: usize, d: usize, k: usize) -> Option<Plan> {
    tensor::plan(ctx.arch(), n, d, k)
}
