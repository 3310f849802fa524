//! Exclusive prefix sums of `u64` counts on the device: row lengths become row offsets, the
//! first step of every compaction (filters, subsets).

use super::module_cache::KernelSource;
use super::{grid_for, GpuContext};
use crate::error::Result;
use rmm_core::DeviceVec;
use rmm_cuda::cudarc::driver::{LaunchConfig, PushKernelArg};

pub(crate) const SRC: KernelSource = KernelSource {
    name: "scan",
    source: include_str!("scan.cu"),
};

/// Values per tile of the first launch (threads x items per thread in `scan.cu`).
pub const TILE: usize = 1024 * 4;

/// Tiles of the first launch for `n` values.
pub fn tiles_for(n: usize) -> usize {
    n.div_ceil(TILE).max(1)
}

/// The host twin: `n + 1` offsets, starting at 0, ending at the total.
pub fn exclusive_scan_host(counts: &[u64]) -> Vec<u64> {
    let mut out = Vec::with_capacity(counts.len() + 1);
    let mut acc = 0u64;
    out.push(0);
    for &c in counts {
        acc += c;
        out.push(acc);
    }
    out
}

/// `counts.len() + 1` offsets on the device, and the total (read back: the caller sizes its
/// output with it).
pub fn exclusive_scan(ctx: &GpuContext, counts: &DeviceVec<u64>) -> Result<(DeviceVec<u64>, u64)> {
    let n = counts.len();
    let out = ctx.alloc::<u64>(n + 1)?;
    let tiles = tiles_for(n);
    let sums = ctx.alloc::<u64>(tiles)?;
    let total = ctx.alloc::<u64>(1)?;
    let n64 = n as u64;
    let nb = tiles as u64;
    let f = ctx.function(SRC, "scan_tiles")?;
    let mut l = ctx.launcher(&f);
    l.arg(counts).arg(&out).arg(&sums).arg(&n64);
    let cfg = LaunchConfig {
        grid_dim: (tiles as u32, 1, 1),
        block_dim: (1024, 1, 1),
        shared_mem_bytes: 0,
    };
    ctx.launch(l, cfg, "scan_tiles")?;
    let f = ctx.function(SRC, "scan_block_sums")?;
    let mut l = ctx.launcher(&f);
    l.arg(&sums).arg(&nb).arg(&total);
    let one = LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (1024, 1, 1),
        shared_mem_bytes: 0,
    };
    ctx.launch(l, one, "scan_block_sums")?;
    let f = ctx.function(SRC, "add_tile_offsets")?;
    let mut l = ctx.launcher(&f);
    l.arg(&out).arg(&sums).arg(&n64).arg(&total);
    ctx.launch(l, grid_for(n.max(1)), "add_tile_offsets")?;
    let t = ctx.download(&total)?[0];
    Ok((out, t))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_twin_and_tiles() {
        assert_eq!(exclusive_scan_host(&[]), vec![0]);
        assert_eq!(exclusive_scan_host(&[3, 0, 2]), vec![0, 3, 3, 5]);
        assert_eq!(tiles_for(0), 1);
        assert_eq!(tiles_for(TILE), 1);
        assert_eq!(tiles_for(TILE + 1), 2);
    }
}
