//! Counts drawn from the synthetic model of benches/WORKLOADS.md section B cell by cell, so that any
//! block of cells can be made on its own, on the CPU or on the device, in any order, with the
//! same result: every random number is a hash of (seed, cell, counter). The streamed `--demo`
//! regenerates X on the device for every pass instead of holding it ([`gpu`]); this module's
//! [`CountModel::generate`] is its CPU twin.
//!
//! A cell takes its batch, cell type, low-quality flag, number of wanted genes and library
//! factor from its first counters. It then draws genes by popularity (its group's
//! [`AliasTable`]) until `wanted` distinct genes are found, at most [`MAX_DRAWS_PER_GENE`]
//! draws per wanted gene, in rounds of `wanted - found` draws: a round can add at most that
//! many genes, so the set is the one drawing one at a time gives, whatever order a round's
//! draws are taken in (the device takes them in parallel). Each expressed gene's count is 1 +
//! NB(shape, mean_extra x library x relative popularity), the negative binomial as a sum of
//! `shape` geometric variables drawn by inversion.
//!
//! It is the model of the file generator (`scpipe generate`), not its random stream: the same
//! seed gives other cells than the file.

pub mod gpu;

/// The step's kernel module, for the warm-up ([`crate::warm_up`]).
pub const KERNELS: crate::gpu::module_cache::KernelSource = gpu::SRC;

use crate::csr::CsrMatrix;
use crate::error::{KernelError, Result};
use rayon::prelude::*;
use std::ops::Range;

/// A cell draws at most this many times per wanted gene: very skewed popularity with few
/// genes could otherwise take very long to find enough distinct genes.
pub const MAX_DRAWS_PER_GENE: u64 = 64;

/// The most genes the device generator takes: a cell's gene set is a bitmap in the 48 KiB of
/// shared memory a block gets without opting in (1 KiB left for the rest).
pub const MAX_GENES: usize = (48 - 1) * 1024 * 8;

/// Counters of a cell's random numbers (the draws follow from [`DRAW0`]).
const BATCH: u64 = 0;
const CELL_TYPE: u64 = 1;
const LOW_QUALITY: u64 = 2;
const WANTED: u64 = 3;
const LIBRARY_1: u64 = 4;
const LIBRARY_2: u64 = 5;
const DRAW0: u64 = 16;
/// Mixed into a cell's key for the key of its counts.
const VALUE_SALT: u64 = 0x5851_f42d_4c95_7f2d;
const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

/// SplitMix64's output function (also what seeds the file generator's xoshiro).
#[inline]
pub fn splitmix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The key of cell `cell`'s random numbers.
#[inline]
fn cell_key(seed: u64, cell: u64) -> u64 {
    splitmix64(seed ^ splitmix64(cell.wrapping_add(1).wrapping_mul(GOLDEN)))
}

/// Random number `counter` of the stream `key` (SplitMix64 started at `key`).
#[inline]
fn random(key: u64, counter: u64) -> u64 {
    splitmix64(key.wrapping_add(counter.wrapping_add(1).wrapping_mul(GOLDEN)))
}

/// A uniform number in [0, 1) from the high 53 bits.
#[inline]
fn unit(r: u64) -> f64 {
    (r >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// A uniform integer in `0..n` (multiply-shift of the high 32 bits; n < 2^32).
#[inline]
fn below(r: u64, n: u64) -> u64 {
    ((r >> 32) * n) >> 32
}

/// Walker's alias table: O(1) draws from a fixed discrete distribution.
#[derive(Debug, Clone, PartialEq)]
pub struct AliasTable {
    pub prob: Vec<f32>,
    pub alias: Vec<u32>,
}

impl AliasTable {
    pub fn new(weights: &[f64]) -> Self {
        let n = weights.len();
        let total: f64 = weights.iter().sum();
        let mut scaled: Vec<f64> = weights.iter().map(|w| w * n as f64 / total).collect();
        let mut prob = vec![1.0f32; n];
        let mut alias: Vec<u32> = (0..n as u32).collect();
        let (mut small, mut large): (Vec<usize>, Vec<usize>) =
            (0..n).partition(|&i| scaled[i] < 1.0);
        while let (Some(s), Some(&l)) = (small.pop(), large.last()) {
            prob[s] = scaled[s] as f32;
            alias[s] = l as u32;
            scaled[l] -= 1.0 - scaled[s];
            if scaled[l] < 1.0 {
                large.pop();
                small.push(l);
            }
        }
        AliasTable { prob, alias }
    }

    /// One draw from one 64-bit random number: the high 32 bits pick the slot (multiply-shift,
    /// bias below 2^-32 per slot), the low 24 bits decide between the slot and its alias.
    #[inline]
    pub fn pick(&self, r: u64) -> usize {
        let i = below(r, self.prob.len() as u64) as usize;
        let u = (r & 0xff_ffff) as f32 * (1.0 / 16_777_216.0);
        if u < self.prob[i] {
            i
        } else {
            self.alias[i] as usize
        }
    }
}

/// The model's parameters and per-group tables (group = batch x n_cell_types + cell type).
#[derive(Debug, Clone, PartialEq)]
pub struct CountModel {
    pub n_genes: usize,
    pub seed: u64,
    pub n_batches: usize,
    pub n_cell_types: usize,
    /// Inclusive range of wanted genes of a normal cell, before `density`.
    pub genes_per_cell: (usize, usize),
    pub low_quality_fraction: f64,
    pub low_quality_genes: (usize, usize),
    /// Scales the wanted genes (fewer genes than the model's reference keep X as sparse).
    pub density: f64,
    pub library_sigma: f64,
    /// Shape of the negative binomial (an integer: a sum of that many geometric variables).
    pub nb_shape: u32,
    pub mean_extra_count: f64,
    /// Relative popularity (mean 1) per group, `n_groups x n_genes` row-major.
    pub relative: Vec<f64>,
    /// Popularity alias table per group.
    pub tables: Vec<AliasTable>,
}

/// What a cell draws before its genes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CellDraw {
    pub batch: u8,
    pub cell_type: u8,
    pub wanted: usize,
    pub library: f64,
}

impl CountModel {
    pub fn n_groups(&self) -> usize {
        self.n_batches * self.n_cell_types
    }

    /// The model is whole: tables for every group, ranges in order, numbers finite.
    pub fn check(&self) -> Result<()> {
        let bad = |reason: String| {
            Err(KernelError::InvalidParameter {
                name: "synthetic count model",
                reason,
            })
        };
        let (g, groups) = (self.n_genes, self.n_groups());
        if g == 0 || g > MAX_GENES {
            return bad(format!("{g} genes (1 to {MAX_GENES} are supported)"));
        }
        if !(1..=255).contains(&self.n_batches) || !(1..=255).contains(&self.n_cell_types) {
            return bad("batches and cell types must each number 1 to 255".into());
        }
        if self.tables.len() != groups
            || self.relative.len() != groups * g
            || self
                .tables
                .iter()
                .any(|t| t.prob.len() != g || t.alias.len() != g)
        {
            return bad(format!("tables are not {groups} groups x {g} genes"));
        }
        if self.genes_per_cell.0 > self.genes_per_cell.1
            || self.low_quality_genes.0 > self.low_quality_genes.1
        {
            return bad("gene-count ranges must have min <= max".into());
        }
        if self.nb_shape == 0 || self.nb_shape > 64 {
            return bad(format!(
                "nb_shape = {} (an integer from 1 to 64 is supported)",
                self.nb_shape
            ));
        }
        for (name, v) in [
            ("low_quality_fraction", self.low_quality_fraction),
            ("density", self.density),
            ("library_sigma", self.library_sigma),
            ("mean_extra_count", self.mean_extra_count),
        ] {
            if !v.is_finite() || v < 0.0 {
                return bad(format!("{name} = {v} must be a finite number >= 0"));
            }
        }
        Ok(())
    }

    /// Cell `cell`'s (batch, cell type): integer hashes only, so the host gives the device's.
    pub fn group(&self, cell: u64) -> (u8, u8) {
        let key = cell_key(self.seed, cell);
        (
            below(random(key, BATCH), self.n_batches as u64) as u8,
            below(random(key, CELL_TYPE), self.n_cell_types as u64) as u8,
        )
    }

    /// Cell `cell`'s group, wanted genes and library factor.
    pub fn cell(&self, cell: u64) -> CellDraw {
        let key = cell_key(self.seed, cell);
        let (batch, cell_type) = self.group(cell);
        let low = unit(random(key, LOW_QUALITY)) < self.low_quality_fraction;
        let (lo, hi) = if low {
            self.low_quality_genes
        } else {
            self.genes_per_cell
        };
        let drawn = lo as u64 + below(random(key, WANTED), (hi - lo) as u64 + 1);
        let wanted = ((drawn as f64 * self.density).round() as usize).clamp(1, self.n_genes);
        // Box-Muller: u1 in (0, 1].
        let u1 = 1.0 - unit(random(key, LIBRARY_1));
        let u2 = unit(random(key, LIBRARY_2));
        let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
        CellDraw {
            batch,
            cell_type,
            wanted,
            library: (self.library_sigma * z).exp(),
        }
    }

    /// The count of gene `gene` in cell `cell` (expressed, with library factor `library`).
    fn count(&self, cell: u64, group: usize, gene: usize, library: f64) -> f32 {
        let mu = self.mean_extra_count * library * self.relative[group * self.n_genes + gene];
        if mu <= 0.0 {
            return 1.0;
        }
        let shape = self.nb_shape as f64;
        let log_q = (mu / (shape + mu)).ln();
        let key = cell_key(self.seed, cell) ^ VALUE_SALT;
        let mut k = 0.0f64;
        for j in 0..self.nb_shape as u64 {
            let u = 1.0 - unit(random(key, gene as u64 * self.nb_shape as u64 + j));
            k += (u.ln() / log_q).floor().min(1e7);
        }
        (1.0 + k) as f32
    }

    /// Cells `cells` as CSR rows (gene indices ascending) and each cell's (batch, cell type).
    pub fn generate(&self, cells: Range<u64>) -> Result<(CsrMatrix<f32>, Vec<(u8, u8)>)> {
        self.check()?;
        let rows: Vec<(Vec<u32>, Vec<f32>, (u8, u8))> = cells
            .clone()
            .into_par_iter()
            .map_init(
                || vec![0u64; self.n_genes.div_ceil(64)],
                |seen, c| self.row(c, seen),
            )
            .collect();
        let mut indptr = Vec::with_capacity(rows.len() + 1);
        indptr.push(0u64);
        let nnz: usize = rows.iter().map(|r| r.0.len()).sum();
        let (mut indices, mut data) = (Vec::with_capacity(nnz), Vec::with_capacity(nnz));
        let mut groups = Vec::with_capacity(rows.len());
        for (i, d, grp) in rows {
            indptr.push(indptr.last().unwrap() + i.len() as u64);
            indices.extend(i);
            data.extend(d);
            groups.push(grp);
        }
        let x = CsrMatrix {
            n_rows: groups.len(),
            n_cols: self.n_genes,
            indptr,
            indices,
            data,
        };
        Ok((x, groups))
    }

    /// One cell's genes and counts; `seen` is a cleared bitmap of the genes, left cleared.
    fn row(&self, cell: u64, seen: &mut [u64]) -> (Vec<u32>, Vec<f32>, (u8, u8)) {
        let d = self.cell(cell);
        let group = d.batch as usize * self.n_cell_types + d.cell_type as usize;
        let table = &self.tables[group];
        let key = cell_key(self.seed, cell);
        let cap = d.wanted as u64 * MAX_DRAWS_PER_GENE;
        let (mut found, mut draws) = (0u64, 0u64);
        loop {
            let more = (d.wanted as u64 - found).min(cap - draws);
            if more == 0 {
                break;
            }
            for t in 0..more {
                let g = table.pick(random(key, DRAW0 + draws + t));
                let (w, bit) = (g / 64, 1u64 << (g % 64));
                if seen[w] & bit == 0 {
                    seen[w] |= bit;
                    found += 1;
                }
            }
            draws += more;
        }
        let mut indices = Vec::with_capacity(found as usize);
        let mut data = Vec::with_capacity(found as usize);
        for (w, word) in seen.iter_mut().enumerate() {
            let mut bits = *word;
            while bits != 0 {
                let g = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                indices.push(g as u32);
                data.push(self.count(cell, group, g, d.library));
            }
            *word = 0;
        }
        (indices, data, (d.batch, d.cell_type))
    }
}

#[cfg(test)]
mod tests;
