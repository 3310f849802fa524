//! Sorting `u64` keys on the device (`radix_sort.cu`): least-significant-digit radix sort, 8 bits
//! a pass over the bits asked for, each pass a histogram per tile of keys, an exclusive scan of
//! the histograms ([`super::scan`]) and a stable scatter. Equal keys are indistinguishable, so the
//! result is the same on every run. A step that needs its values in order (e.g. ranking each
//! gene's values) packs what it needs into the keys.

use super::module_cache::KernelSource;
use super::scan::exclusive_scan;
use super::{DeviceVec, GpuContext};
use crate::error::{KernelError, Result};
use rmm_cuda::cudarc::driver::{LaunchConfig, PushKernelArg};

pub const SRC: KernelSource = KernelSource {
    name: "radix_sort",
    source: include_str!("radix_sort.cu"),
};

/// Keys per tile (threads x keys per thread in `radix_sort.cu`).
pub const TILE: usize = 256 * 16;
/// Bits per pass.
pub const DIGIT_BITS: u32 = 8;

/// Device bytes the sort of `n` keys needs besides the keys: a second buffer of keys and two
/// histogram arrays (counts and their scan).
pub fn scratch_bytes(n: usize) -> u64 {
    let tiles = n.div_ceil(TILE).max(1) as u64;
    (n as u64) * 8 + 2 * (tiles * 256 + 1) * 8
}

/// Sorts `keys` by their bits `lo..hi` (the bits outside are carried along; with `hi` below 64,
/// keys that differ only above `hi` keep their order among equals). Returns the sorted keys
/// (the input buffer or the scratch one).
pub fn sort_keys(
    ctx: &GpuContext,
    keys: DeviceVec<u64>,
    lo: u32,
    hi: u32,
) -> Result<DeviceVec<u64>> {
    if lo >= hi || hi > 64 {
        return Err(KernelError::param(
            "bits",
            format!("{lo}..{hi}: want lo < hi <= 64"),
        ));
    }
    let n = keys.len();
    if n < 2 {
        return Ok(keys);
    }
    let tiles = n.div_ceil(TILE);
    let grid = LaunchConfig {
        grid_dim: (
            u32::try_from(tiles).map_err(|_| {
                KernelError::Unsupported(format!("{n} keys: too many to sort in one call"))
            })?,
            1,
            1,
        ),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let (mut from, mut to) = (keys, ctx.alloc::<u64>(n)?);
    let counts = ctx.alloc::<u64>(tiles * 256)?;
    let histogram = ctx.function(SRC, "radix_histogram")?;
    let scatter = ctx.function(SRC, "radix_scatter")?;
    let (n64, tiles64) = (n as u64, tiles as u64);
    let mut shift = lo;
    while shift < hi {
        let mut l = ctx.launcher(&histogram);
        l.arg(&from)
            .arg(&n64)
            .arg(&shift)
            .arg(&tiles64)
            .arg(&counts);
        ctx.launch(l, grid, "radix_histogram")?;
        let (offsets, _) = exclusive_scan(ctx, &counts)?;
        let mut l = ctx.launcher(&scatter);
        l.arg(&from)
            .arg(&mut to)
            .arg(&n64)
            .arg(&shift)
            .arg(&tiles64)
            .arg(&offsets);
        ctx.launch(l, grid, "radix_scatter")?;
        std::mem::swap(&mut from, &mut to);
        shift += DIGIT_BITS;
    }
    Ok(from)
}

/// The host twin of one pass (what the GPU's tiles, scan and scatter compute together): the
/// keys stably ordered by their digit at `shift`.
pub fn radix_pass_host(keys: &[u64], shift: u32) -> Vec<u64> {
    let digit = |k: u64| ((k >> shift) & 255) as usize;
    let tiles = keys.len().div_ceil(TILE).max(1);
    let mut counts = vec![0u64; 256 * tiles];
    for (i, &k) in keys.iter().enumerate() {
        counts[digit(k) * tiles + i / TILE] += 1;
    }
    let mut offsets = super::scan::exclusive_scan_host(&counts);
    let mut out = vec![0u64; keys.len()];
    for (i, &k) in keys.iter().enumerate() {
        let slot = &mut offsets[digit(k) * tiles + i / TILE];
        out[*slot as usize] = k;
        *slot += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::SplitMix64;

    #[test]
    fn passes_over_the_bits_sort_like_the_standard_sort() {
        let mut rng = SplitMix64::new(7);
        for n in [0, 1, 5, TILE - 1, TILE, 3 * TILE + 17] {
            // Few distinct low digits: many equal digits per tile, as in real keys.
            let keys: Vec<u64> = (0..n)
                .map(|_| rng.next_u64() & 0x00ff_0f0f_0000_ffff)
                .collect();
            let mut by_passes = keys.clone();
            for shift in (0..56).step_by(8) {
                by_passes = radix_pass_host(&by_passes, shift);
            }
            let mut expected = keys.clone();
            expected.sort_unstable();
            assert_eq!(by_passes, expected, "{n} keys");
        }
    }

    #[test]
    fn a_pass_is_stable() {
        // Same digit 0 at shift 8: the order of the low bytes must stay as given.
        let keys: Vec<u64> = (0..2 * TILE as u64).rev().map(|i| i & 0xff).collect();
        assert_eq!(radix_pass_host(&keys, 8), keys);
    }
}
