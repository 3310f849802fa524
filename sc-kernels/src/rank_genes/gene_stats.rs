//! The per-gene passes over the data, one gene per task: per-group moments (both tests and the
//! fold changes) and per-group rank sums (Wilcoxon). Everything after them is cheap arithmetic on
//! `n_groups x n_genes` numbers, so these two are what a GPU twin replaces.
//!
//! Results are group-major: entry `[group * n_genes + gene]`.

use super::gene_columns::GeneColumns;
use rayon::prelude::*;

/// Per group and gene: the sum of the values, the sum of their squares and the number of
/// non-zero values.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupMoments {
    pub n_groups: usize,
    pub n_genes: usize,
    pub sum: Vec<f64>,
    pub sum_sq: Vec<f64>,
    pub nnz: Vec<u64>,
}

impl GroupMoments {
    /// Sums of group `g`, one per gene.
    pub fn sum(&self, g: usize) -> &[f64] {
        &self.sum[g * self.n_genes..(g + 1) * self.n_genes]
    }

    /// Sums of squares of group `g`, one per gene.
    pub fn sum_sq(&self, g: usize) -> &[f64] {
        &self.sum_sq[g * self.n_genes..(g + 1) * self.n_genes]
    }
}

/// Per group and gene, the sum of the ranks of the group's cells among all cells (tied values
/// sharing their average rank); per gene, the tie term `sum (t^3 - t)` over the runs of `t` tied
/// values (zeros included).
#[derive(Debug, Clone, PartialEq)]
pub struct RankSums {
    pub n_groups: usize,
    pub n_genes: usize,
    pub rank_sum: Vec<f64>,
    pub tie_sum: Vec<f64>,
}

impl RankSums {
    /// Rank sums of group `g`, one per gene.
    pub fn group(&self, g: usize) -> &[f64] {
        &self.rank_sum[g * self.n_genes..(g + 1) * self.n_genes]
    }
}

/// The moments of every group and gene. Sums are `f64`, over each gene's values in cell order,
/// with each square formed in `f32` first, as scanpy's kernel does (so a constant gene gets the
/// same tiny non-zero variance as there).
pub fn group_moments(cols: &GeneColumns) -> GroupMoments {
    let (n_genes, n_groups) = (cols.n_genes(), cols.n_groups());
    let mut sum = vec![0.0f64; n_genes * n_groups];
    let mut sum_sq = vec![0.0f64; n_genes * n_groups];
    let mut nnz = vec![0u64; n_genes * n_groups];
    sum.par_chunks_mut(n_groups.max(1))
        .zip(sum_sq.par_chunks_mut(n_groups.max(1)))
        .zip(nnz.par_chunks_mut(n_groups.max(1)))
        .enumerate()
        .for_each(|(gene, ((s, q), c))| {
            for (values, groups) in cols.pieces(gene) {
                for (&v, &g) in values.iter().zip(groups) {
                    let g = g as usize;
                    s[g] += v as f64;
                    q[g] += (v * v) as f64;
                    c[g] += 1;
                }
            }
        });
    GroupMoments {
        n_groups,
        n_genes,
        sum: group_major(&sum, n_groups),
        sum_sq: group_major(&sum_sq, n_groups),
        nnz: group_major(&nnz, n_groups),
    }
}

/// The rank sums of every group and gene, ranking each gene over all cells.
///
/// Only the non-zero values are sorted: the zeros form one run of tied values whose average rank
/// follows from the number of negative values, and each group's zeros are its size minus its
/// non-zero count. Twice an average rank is an integer, so the sums are kept exactly, as integers,
/// whatever the order of addition.
pub fn rank_sums(cols: &GeneColumns) -> RankSums {
    let (n_genes, n_groups) = (cols.n_genes(), cols.n_groups());
    let mut twice = vec![0u64; n_genes * n_groups];
    let mut tie_sum = vec![0.0f64; n_genes];
    twice
        .par_chunks_mut(n_groups.max(1))
        .zip(tie_sum.par_iter_mut())
        .enumerate()
        .for_each_init(
            || (Vec::new(), vec![0u64; n_groups]),
            |(keys, nonzero), (gene, (twice, tie))| {
                *tie = gene_ranks(cols, gene, keys, nonzero, twice);
            },
        );
    let halved: Vec<f64> = twice.iter().map(|&t| t as f64 / 2.0).collect();
    RankSums {
        n_groups,
        n_genes,
        rank_sum: group_major(&halved, n_groups),
        tie_sum,
    }
}

/// Ranks one gene: adds twice the rank sum of each group into `twice` and returns the tie term.
/// `keys` and `nonzero` are scratch space.
fn gene_ranks(
    cols: &GeneColumns,
    gene: usize,
    keys: &mut Vec<u64>,
    nonzero: &mut [u64],
    twice: &mut [u64],
) -> f64 {
    // Value order in the high half, group in the low half: one integer sort.
    keys.clear();
    for (values, groups) in cols.pieces(gene) {
        keys.extend(
            values
                .iter()
                .zip(groups)
                .map(|(&v, &g)| (u64::from(order_key(v)) << 32) | u64::from(g)),
        );
    }
    keys.sort_unstable();
    let value_of = |k: u64| (k >> 32) as u32;
    let zeros = (cols.n_cells() - keys.len()) as u64;
    let negatives = keys.partition_point(|&k| value_of(k) < order_key(0.0)) as u64;
    nonzero.fill(0);
    let mut ties = tie_term(zeros);
    let mut start = 0;
    while start < keys.len() {
        let value = value_of(keys[start]);
        let run = keys[start..]
            .iter()
            .position(|&k| value_of(k) != value)
            .unwrap_or(keys.len() - start);
        // The run holds ranks first + 1 ..= first + run (1-based), the zeros sitting between the
        // negative and the positive values.
        let shift = if (start as u64) < negatives { 0 } else { zeros };
        let first = start as u64 + shift;
        let twice_rank = 2 * first + run as u64 + 1;
        for &k in &keys[start..start + run] {
            let g = (k & u64::from(u32::MAX)) as usize;
            twice[g] += twice_rank;
            nonzero[g] += 1;
        }
        ties += tie_term(run as u64);
        start += run;
    }
    let zero_twice_rank = 2 * negatives + zeros + 1;
    for ((t, &size), &nz) in twice.iter_mut().zip(cols.group_sizes()).zip(nonzero.iter()) {
        *t += (size - nz) * zero_twice_rank;
    }
    ties as f64
}

/// A key whose unsigned order is the numeric order of finite `f32` values (negative values have
/// their bits inverted, positive ones their sign bit set).
fn order_key(v: f32) -> u32 {
    let bits = v.to_bits();
    if bits >> 31 == 1 {
        !bits
    } else {
        bits | (1 << 31)
    }
}

/// `t^3 - t` for a run of `t` tied values, exactly.
pub(super) fn tie_term(t: u64) -> u128 {
    let t = u128::from(t);
    t * t * t - t
}

/// A gene-major `n_genes x n_groups` array as group-major.
fn group_major<T: Copy + Default>(gene_major: &[T], n_groups: usize) -> Vec<T> {
    let n_genes = gene_major.len() / n_groups.max(1);
    let mut out = vec![T::default(); gene_major.len()];
    for (gene, row) in gene_major.chunks(n_groups.max(1)).enumerate() {
        for (g, &v) in row.iter().enumerate() {
            out[g * n_genes + gene] = v;
        }
    }
    out
}
