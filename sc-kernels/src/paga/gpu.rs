//! [`super::group_edge_counts`] on a GPU (`paga.cu`): a thread a cell adds its edges to its
//! block's counts in shared memory (when the groups' square fits), then the blocks' counts are
//! added up; integer counts, so the host's exactly.

use super::check_counts;
use crate::csr::CsrMatrix;
use crate::error::{KernelError, Result};
use crate::gpu::module_cache::KernelSource;
use crate::gpu::{grid_stride, GpuContext};
use rmm_cuda::cudarc::driver::PushKernelArg;

pub(crate) const SRC: KernelSource = KernelSource {
    name: "paga",
    source: include_str!("paga.cu"),
};

/// The module [`group_edge_counts_gpu`] launches.
pub const KERNELS: [KernelSource; 1] = [SRC];

/// [`super::group_edge_counts`] on `ctx`'s GPU: the same counts.
pub fn group_edge_counts_gpu<T>(
    ctx: &GpuContext,
    graph: &CsrMatrix<T>,
    groups: &[u32],
    n_groups: usize,
) -> Result<Vec<u64>> {
    check_counts(graph, groups, n_groups)?;
    let cells = n_groups * n_groups;
    let g32 = u32::try_from(n_groups)
        .ok()
        .filter(|_| u32::try_from(cells).is_ok())
        .ok_or_else(|| KernelError::Unsupported(format!("{n_groups} groups on the GPU")))?;
    if graph.n_rows == 0 || cells == 0 {
        return Ok(vec![0; cells]);
    }
    ctx.bind_to_thread()?;
    let indptr = ctx.upload(&graph.indptr)?;
    let indices = ctx.upload(&graph.indices)?;
    let labels = ctx.upload(groups)?;
    let counts = ctx.zeros::<u64>(cells)?;
    let bytes = cells * 4;
    let shared = bytes <= 48 << 10;
    let f = if shared {
        ctx.function_with_shared(SRC, "paga_edge_counts", bytes)?
    } else {
        ctx.function(SRC, "paga_edge_counts")?
    };
    let (n64, use_shared) = (graph.n_rows as u64, i32::from(shared));
    let mut l = ctx.launcher(&f);
    l.arg(&indptr).arg(&indices).arg(&labels);
    l.arg(&n64).arg(&g32).arg(&use_shared).arg(&counts);
    let mut cfg = grid_stride(graph.n_rows);
    // Few blocks when they count in shared memory: each adds its square once at the end.
    if shared {
        cfg.grid_dim.0 = cfg.grid_dim.0.min(1024);
        cfg.shared_mem_bytes = bytes as u32;
    }
    ctx.launch(l, cfg, "paga_edge_counts")?;
    ctx.download(&counts)
}
