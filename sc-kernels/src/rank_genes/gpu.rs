//! The GPU twin of [`super::rank_genes_groups`] on a device CSR matrix (`rank_genes.cu`): the
//! two per-gene passes on the device, the rest ([`super::markers_from_stats`]) on the host.
//!
//! - Moments: exact fixed-point sums ([`super::fixed_moments`]): the same bits on every run, and
//!   equal to the host twin [`super::fixed_moments::fixed_point_moments`]; within ~1e-12 of
//!   the CPU's f64 sums.
//! - Rank sums (Wilcoxon): each gene's non-zero values packed with their group into `u64` keys,
//!   sorted on the device ([`crate::gpu::radix_sort`]), and each run of tied values ranked by
//!   the thread at its head. Twice an average rank is an integer, so the sums are exact integers:
//!   the same as the CPU's [`super::rank_sums`], bit for bit. The genes go through in chunks of
//!   at most [`CHUNK_KEYS`] values, so the sort's memory stays bounded whatever the matrix.

use super::fixed_moments::MomentScales;
use super::{check_group_sizes, check_params, markers_from_stats, GroupMarkers, GroupMoments};
use super::{Method, RankGenesParams, RankSums};
use crate::error::{CsrError, KernelError, Result};
use crate::gpu::module_cache::KernelSource;
use crate::gpu::reduce::warps_for_rows;
use crate::gpu::scan::exclusive_scan_host;
use crate::gpu::{grid_for, grid_stride, radix_sort, DeviceCsr, DeviceVec, GpuContext};
use rmm_cuda::cudarc::driver::PushKernelArg;

pub(crate) const SRC: KernelSource = KernelSource {
    name: "rank_genes",
    source: include_str!("rank_genes.cu"),
};

/// Values sorted at once: 2 GiB of keys, 4 GiB with the sort's second buffer.
pub const CHUNK_KEYS: usize = 1 << 28;

/// [`super::rank_genes_groups`] on `x` on the device (a valid CSR matrix, each gene stored at
/// most once per cell, as the pipeline's matrices are); `groups` on the host.
pub fn rank_genes_groups_gpu(
    ctx: &GpuContext,
    x: &DeviceCsr,
    groups: &[u32],
    n_groups: usize,
    params: &RankGenesParams,
) -> Result<Vec<GroupMarkers>> {
    check_params(params, n_groups)?;
    let sizes = super::gene_columns::count_groups(groups, x.n_rows, n_groups)?;
    check_group_sizes(&sizes)?;
    let (moments, ranks) =
        group_statistics_gpu(ctx, x, groups, n_groups, params.method, CHUNK_KEYS)?;
    markers_from_stats(&moments, ranks.as_ref(), &sizes, params)
}

/// The two passes on the device: the moments (equal to
/// [`super::fixed_moments::fixed_point_moments`] bit for bit) and, for `wilcoxon`, the rank sums
/// (equal to [`super::rank_sums`] bit for bit), sorting at most `chunk_keys` values at once (a
/// gene with more is sorted alone).
pub fn group_statistics_gpu(
    ctx: &GpuContext,
    x: &DeviceCsr,
    groups: &[u32],
    n_groups: usize,
    method: Method,
    chunk_keys: usize,
) -> Result<(GroupMoments, Option<RankSums>)> {
    let sizes = super::gene_columns::count_groups(groups, x.n_rows, n_groups)?;
    let codes = ctx.upload(groups)?;
    let scan = scan_values(ctx, x)?;
    let moments = moments(ctx, x, &codes, n_groups, &scan)?;
    let ranks = match method {
        Method::Wilcoxon => Some(rank_sums(
            ctx, x, &codes, &sizes, &moments, &scan, chunk_keys,
        )?),
        _ => None,
    };
    Ok((moments, ranks))
}

/// What one pass over the values tells: each gene's non-zero count and the largest magnitude.
struct ValueScan {
    nnz_gene: Vec<u64>,
    max_abs: f32,
}

fn scan_values(ctx: &GpuContext, x: &DeviceCsr) -> Result<ValueScan> {
    let nnz_gene = ctx.zeros::<u64>(x.n_cols.max(1))?;
    let max_bits = ctx.zeros::<u32>(1)?;
    let first_bad = ctx.upload(&[u64::MAX; 2])?;
    let f = ctx.function(SRC, "rg_scan_values")?;
    let (n, g) = (x.n_rows as u64, x.n_cols as u64);
    let mut l = ctx.launcher(&f);
    l.arg(&x.indptr)
        .arg(&x.indices)
        .arg(&x.data)
        .arg(&n)
        .arg(&g)
        .arg(&nnz_gene)
        .arg(&max_bits)
        .arg(&first_bad);
    ctx.launch(l, warps_for_rows(x.n_rows), "rg_scan_values")?;
    let bad = ctx.download(&first_bad)?;
    if bad[1] != u64::MAX {
        let [_, index, _] = describe(ctx, x, bad[1])?;
        return Err(CsrError::IndexOutOfRange {
            position: bad[1] as usize,
            index: index as u32,
            n_cols: x.n_cols,
        }
        .into());
    }
    if bad[0] != u64::MAX {
        let [row, col, bits] = describe(ctx, x, bad[0])?;
        return Err(KernelError::NonFinite {
            row: row as usize,
            col: col as usize,
            value: f32::from_bits(bits as u32) as f64,
        });
    }
    let mut nnz_gene = ctx.download(&nnz_gene)?;
    nnz_gene.truncate(x.n_cols);
    Ok(ValueScan {
        nnz_gene,
        max_abs: f32::from_bits(ctx.download(&max_bits)?[0]),
    })
}

/// Row, gene index and value bits of stored value `p`.
fn describe(ctx: &GpuContext, x: &DeviceCsr, p: u64) -> Result<[u64; 3]> {
    let out = ctx.zeros::<u64>(3)?;
    let f = ctx.function(SRC, "rg_describe")?;
    let n = x.n_rows as u64;
    let mut l = ctx.launcher(&f);
    l.arg(&x.indptr)
        .arg(&x.indices)
        .arg(&x.data)
        .arg(&n)
        .arg(&p)
        .arg(&out);
    ctx.launch(l, grid_for(1), "rg_describe")?;
    let v = ctx.download(&out)?;
    Ok([v[0], v[1], v[2]])
}

fn moments(
    ctx: &GpuContext,
    x: &DeviceCsr,
    codes: &DeviceVec<u32>,
    n_groups: usize,
    scan: &ValueScan,
) -> Result<GroupMoments> {
    let scales = MomentScales::new(scan.max_abs, x.n_rows)?;
    let len = (n_groups * x.n_cols).max(1);
    let (sum, sq, nnz) = (
        ctx.zeros::<u64>(len)?,
        ctx.zeros::<u64>(len)?,
        ctx.zeros::<u64>(len)?,
    );
    let f = ctx.function(SRC, "rg_moments")?;
    let (n, g) = (x.n_rows as u64, x.n_cols as u64);
    let mut l = ctx.launcher(&f);
    l.arg(&x.indptr)
        .arg(&x.indices)
        .arg(&x.data)
        .arg(codes)
        .arg(&n)
        .arg(&g)
        .arg(&scales.s1)
        .arg(&scales.s2)
        .arg(&sum)
        .arg(&sq)
        .arg(&nnz);
    ctx.launch(l, warps_for_rows(x.n_rows), "rg_moments")?;
    let cut = |mut v: Vec<u64>| {
        v.truncate(n_groups * x.n_cols);
        v
    };
    Ok(scales.to_moments(
        n_groups,
        x.n_cols,
        &cut(ctx.download(&sum)?),
        &cut(ctx.download(&sq)?),
        cut(ctx.download(&nnz)?),
    ))
}

/// Consecutive genes whose values together are at most `cap` (at least one gene each).
pub(crate) fn gene_chunks(nnz_gene: &[u64], cap: usize) -> Vec<std::ops::Range<usize>> {
    let mut chunks = Vec::new();
    let (mut start, mut filled) = (0, 0u64);
    for (j, &c) in nnz_gene.iter().enumerate() {
        if j > start && filled + c > cap as u64 {
            chunks.push(start..j);
            (start, filled) = (j, 0);
        }
        filled += c;
    }
    if start < nnz_gene.len() {
        chunks.push(start..nnz_gene.len());
    }
    chunks
}

/// Bits that hold the numbers `0..n`.
fn bits_for(n: usize) -> u32 {
    usize::BITS - n.saturating_sub(1).leading_zeros()
}

fn rank_sums(
    ctx: &GpuContext,
    x: &DeviceCsr,
    codes: &DeviceVec<u32>,
    sizes: &[u64],
    moments: &GroupMoments,
    scan: &ValueScan,
    chunk_keys: usize,
) -> Result<RankSums> {
    let (n_groups, n_genes, n_cells) = (sizes.len(), x.n_cols, x.n_rows as u64);
    let gb = bits_for(n_groups);
    let len = (n_groups * n_genes).max(1);
    let twice = ctx.zeros::<u64>(len)?;
    let ties_lo = ctx.zeros::<u64>(n_genes.max(1))?;
    let ties_hi = ctx.zeros::<u64>(n_genes.max(1))?;
    let negatives = ctx.zeros::<u64>(n_genes.max(1))?;
    let keys_of = ctx.function(SRC, "rg_keys")?;
    let runs = ctx.function(SRC, "rg_rank_runs")?;
    for chunk in gene_chunks(&scan.nnz_gene, chunk_keys) {
        let starts = exclusive_scan_host(&scan.nnz_gene[chunk.clone()]);
        let total = *starts.last().expect("n + 1 offsets") as usize;
        if total == 0 {
            continue;
        }
        let key_bits = gb + 32 + bits_for(chunk.len());
        if key_bits > 64 {
            return Err(KernelError::Unsupported(format!(
                "{n_groups} groups and {} genes do not fit one 64-bit sort key",
                chunk.len()
            )));
        }
        let gene_start = ctx.upload(&starts)?;
        let cursor = ctx.upload(&starts[..chunk.len()])?;
        let keys = ctx.alloc::<u64>(total)?;
        let (n, gene0, n_chunk) = (x.n_rows as u64, chunk.start as u32, chunk.len() as u32);
        let mut l = ctx.launcher(&keys_of);
        l.arg(&x.indptr)
            .arg(&x.indices)
            .arg(&x.data)
            .arg(codes)
            .arg(&n)
            .arg(&gene0)
            .arg(&n_chunk)
            .arg(&gb)
            .arg(&cursor)
            .arg(&keys);
        ctx.launch(l, warps_for_rows(x.n_rows), "rg_keys")?;
        drop(cursor);
        // The group bits need no order: ties share their rank whatever their groups.
        let sorted = radix_sort::sort_keys(ctx, keys, gb, key_bits)?;
        let (total64, genes64) = (total as u64, n_genes as u64);
        let mut l = ctx.launcher(&runs);
        l.arg(&sorted)
            .arg(&total64)
            .arg(&gb)
            .arg(&gene_start)
            .arg(&n_cells)
            .arg(&gene0)
            .arg(&genes64)
            .arg(&twice)
            .arg(&ties_lo)
            .arg(&ties_hi)
            .arg(&negatives);
        ctx.launch(l, grid_stride(total), "rg_rank_runs")?;
    }
    let mut twice = ctx.download(&twice)?;
    let (lo, hi) = (ctx.download(&ties_lo)?, ctx.download(&ties_hi)?);
    let negatives = ctx.download(&negatives)?;
    // The zeros, which were not stored: one run between the negative and the positive values.
    let mut tie_sum = Vec::with_capacity(n_genes);
    for j in 0..n_genes {
        let zeros = n_cells - scan.nnz_gene[j];
        let zero_twice_rank = 2 * negatives[j] + zeros + 1;
        for (g, &size) in sizes.iter().enumerate() {
            let at = g * n_genes + j;
            twice[at] += (size - moments.nnz[at]) * zero_twice_rank;
        }
        let ties =
            (u128::from(hi[j]) << 64 | u128::from(lo[j])) + super::gene_stats::tie_term(zeros);
        tie_sum.push(ties as f64);
    }
    twice.truncate(n_groups * n_genes);
    Ok(RankSums {
        n_groups,
        n_genes,
        rank_sum: twice.iter().map(|&t| t as f64 / 2.0).collect(),
        tie_sum,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_hold_at_most_the_cap_unless_a_gene_is_larger() {
        assert_eq!(
            gene_chunks(&[3, 3, 3, 10, 1], 6),
            vec![0..2, 2..3, 3..4, 4..5]
        );
        assert_eq!(gene_chunks(&[0, 0, 5], 6), vec![0..3]);
        assert_eq!(gene_chunks(&[], 6), Vec::<std::ops::Range<usize>>::new());
        assert_eq!(bits_for(1), 0);
        assert_eq!(bits_for(2), 1);
        assert_eq!(bits_for(22), 5);
        assert_eq!(bits_for(20_000), 15);
    }
}
