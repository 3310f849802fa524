//! The seeded synthetic counts generator of benches/WORKLOADS.md section B.
//!
//! Model: gene popularity is lognormal (sigma 1.8); each cell draws a batch (4) and a cell type
//! (8); each batch multiplies the popularity of its own 300 genes by 2 (a batch shift), each
//! cell type multiplies the popularity of its 200 marker genes by 4. A cell expresses 1,500 to
//! 2,500 distinct genes (1% low-quality cells only 50 to 400), drawn by popularity without
//! replacement (with fewer than 20,000 genes these ranges shrink in proportion, keeping the
//! matrix about as sparse); each expressed gene gets 1 + a negative-binomial count (shape 2) whose mean
//! scales with the gene's popularity and the cell's lognormal library-size factor.
//!
//! Cells are generated in fixed blocks of [`CELLS_PER_BLOCK`], each with its own generator
//! seeded from (seed, block index), in parallel; the output is identical whatever the number of
//! threads.

use crate::anndata::{AnnData, ArrayData, Column, DataFrame, Matrix};
use crate::{Error, Result};
use rand::{Rng, RngCore};
use rand_distr::{Distribution, Gamma, LogNormal, Poisson};
use rayon::prelude::*;
use sc_kernels::synth::{splitmix64, AliasTable, CountModel};
use sc_kernels::CsrMatrix;

/// The number of genes the expressed-gene ranges are specified for.
const REFERENCE_GENES: f64 = 20_000.0;

/// Cells per independently seeded block.
pub const CELLS_PER_BLOCK: usize = 1024;

/// The 13 protein-coding mitochondrial genes, named as in human annotations.
pub const MITO_GENES: [&str; 13] = [
    "MT-ND1", "MT-ND2", "MT-CO1", "MT-CO2", "MT-ATP8", "MT-ATP6", "MT-CO3", "MT-ND3", "MT-ND4L",
    "MT-ND4", "MT-ND5", "MT-ND6", "MT-CYB",
];

/// Parameters of the generator; `SyntheticParams::new` gives section B's values.
#[derive(Debug, Clone, PartialEq)]
pub struct SyntheticParams {
    pub n_cells: usize,
    pub n_genes: usize,
    pub seed: u64,
    /// Inclusive range of distinct genes a normal cell expresses.
    pub genes_per_cell: (usize, usize),
    /// Fraction of low-quality cells and their inclusive range of expressed genes.
    pub low_quality_fraction: f64,
    pub low_quality_genes: (usize, usize),
    pub n_batches: usize,
    pub n_cell_types: usize,
    pub popularity_sigma: f64,
    pub genes_per_batch: usize,
    pub batch_factor: f64,
    pub genes_per_cell_type: usize,
    pub cell_type_factor: f64,
    /// Sigma of the lognormal library-size factor.
    pub library_sigma: f64,
    /// Shape of the negative binomial added to 1 for each expressed gene.
    pub nb_shape: f64,
    /// Mean of that negative binomial for a gene of average popularity in an average cell.
    pub mean_extra_count: f64,
}

impl SyntheticParams {
    pub fn new(n_cells: usize, n_genes: usize, seed: u64) -> Self {
        SyntheticParams {
            n_cells,
            n_genes,
            seed,
            genes_per_cell: (1500, 2500),
            low_quality_fraction: 0.01,
            low_quality_genes: (50, 400),
            n_batches: 4,
            n_cell_types: 8,
            popularity_sigma: 1.8,
            genes_per_batch: 300,
            batch_factor: 2.0,
            genes_per_cell_type: 200,
            cell_type_factor: 4.0,
            library_sigma: 0.4,
            nb_shape: 2.0,
            mean_extra_count: 0.5,
        }
    }

    fn check(&self) -> Result<()> {
        let bad = |p: String| Err(Error::param("generate", p));
        if self.n_genes < MITO_GENES.len() {
            return bad(format!(
                "n_genes = {} is below the {} mitochondrial genes",
                self.n_genes,
                MITO_GENES.len()
            ));
        }
        if self.n_genes > u32::MAX as usize {
            return bad(format!(
                "n_genes = {} does not fit 32-bit gene indices",
                self.n_genes
            ));
        }
        if self.genes_per_cell.0 > self.genes_per_cell.1
            || self.low_quality_genes.0 > self.low_quality_genes.1
        {
            return bad("gene-count ranges must have min <= max".into());
        }
        if self.genes_per_cell.0 == 0 {
            return bad("cells must express at least one gene".into());
        }
        if !(0.0..=1.0).contains(&self.low_quality_fraction) {
            return bad(format!(
                "low_quality_fraction = {} is not in [0, 1]",
                self.low_quality_fraction
            ));
        }
        if !(1..=255).contains(&self.n_batches) || !(1..=255).contains(&self.n_cell_types) {
            return bad("batches and cell types must each number 1 to 255".into());
        }
        for (name, v) in [
            ("popularity_sigma", self.popularity_sigma),
            ("library_sigma", self.library_sigma),
            ("nb_shape", self.nb_shape),
            ("mean_extra_count", self.mean_extra_count),
            ("batch_factor", self.batch_factor),
            ("cell_type_factor", self.cell_type_factor),
        ] {
            if !v.is_finite() || v < 0.0 || (name == "nb_shape" && v == 0.0) {
                return bad(format!("{name} = {v} must be a finite positive number"));
            }
        }
        Ok(())
    }
}

/// xoshiro256++ seeded through SplitMix64: a small, fast generator whose output is fixed by
/// this code (not by a dependency's version).
#[derive(Clone)]
pub struct Xoshiro256pp([u64; 4]);

impl Xoshiro256pp {
    pub fn seed(seed: u64, stream: u64) -> Self {
        let mut sm = seed ^ stream.wrapping_mul(0xd1b5_4a32_d192_ed03);
        let mut next = || {
            sm = sm.wrapping_add(0x9e37_79b9_7f4a_7c15);
            splitmix64(sm)
        };
        Xoshiro256pp([next(), next(), next(), next()])
    }
}

impl RngCore for Xoshiro256pp {
    fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    fn next_u64(&mut self) -> u64 {
        let s = &mut self.0;
        let result = s[0].wrapping_add(s[3]).rotate_left(23).wrapping_add(s[0]);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    fn fill_bytes(&mut self, dst: &mut [u8]) {
        for chunk in dst.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

/// What every block needs: per-(batch, cell type) popularity and its alias table.
struct Model {
    /// Relative popularity (mean 1 over genes) per group, group = batch * n_types + type.
    relative: Vec<Vec<f64>>,
    tables: Vec<AliasTable>,
}

/// The factor on the expressed-gene ranges: fewer genes than the reference keep X as sparse.
fn density(p: &SyntheticParams) -> f64 {
    (p.n_genes as f64 / REFERENCE_GENES).min(1.0)
}

/// `k` distinct values from `0..n` (partial Fisher-Yates).
fn distinct_sample(rng: &mut impl Rng, n: usize, k: usize) -> Vec<usize> {
    let mut pool: Vec<usize> = (0..n).collect();
    let k = k.min(n);
    for i in 0..k {
        let j = rng.random_range(i..n);
        pool.swap(i, j);
    }
    pool.truncate(k);
    pool
}

fn build_model(p: &SyntheticParams, rng: &mut Xoshiro256pp) -> Model {
    let lognormal = LogNormal::new(0.0, p.popularity_sigma).expect("sigma checked");
    let base: Vec<f64> = (0..p.n_genes).map(|_| lognormal.sample(rng)).collect();
    let batch_genes: Vec<Vec<usize>> = (0..p.n_batches)
        .map(|_| distinct_sample(rng, p.n_genes, p.genes_per_batch))
        .collect();
    let type_genes: Vec<Vec<usize>> = (0..p.n_cell_types)
        .map(|_| distinct_sample(rng, p.n_genes, p.genes_per_cell_type))
        .collect();
    let mut relative = Vec::new();
    let mut tables = Vec::new();
    for batch in &batch_genes {
        for markers in &type_genes {
            let mut w = base.clone();
            for &g in batch {
                w[g] *= p.batch_factor;
            }
            for &g in markers {
                w[g] *= p.cell_type_factor;
            }
            let mean = w.iter().sum::<f64>() / w.len() as f64;
            tables.push(AliasTable::new(&w));
            relative.push(w.into_iter().map(|x| x / mean).collect());
        }
    }
    Model { relative, tables }
}

/// 1 + NB(shape r, mean mu): inversion for small means (the common case), gamma-Poisson
/// mixture otherwise.
fn count(rng: &mut impl Rng, r: f64, mu: f64) -> f32 {
    if mu <= 0.0 {
        return 1.0;
    }
    if mu < 30.0 {
        let p = mu / (r + mu);
        let q = r / (r + mu);
        // P(0) = q^r; an integral shape (the default 2) avoids the much slower powf.
        let mut pk = if r.fract() == 0.0 && r <= 16.0 {
            q.powi(r as i32)
        } else {
            q.powf(r)
        };
        let mut cdf = pk;
        let u: f64 = rng.random();
        let mut k = 0.0f64;
        while u > cdf && k < 10_000.0 {
            pk *= (k + r) / (k + 1.0) * p;
            k += 1.0;
            cdf += pk;
        }
        return 1.0 + k as f32;
    }
    let lambda = Gamma::new(r, mu / r).expect("positive").sample(rng);
    let k: f64 = Poisson::new(lambda.max(1e-12))
        .expect("positive")
        .sample(rng);
    1.0 + k as f32
}

/// One block of cells: group index per cell and the CSR rows.
struct Block {
    groups: Vec<(u8, u8)>,
    row_lengths: Vec<u64>,
    indices: Vec<u32>,
    data: Vec<f32>,
}

fn generate_block(p: &SyntheticParams, model: &Model, block: usize) -> Block {
    let mut rng = Xoshiro256pp::seed(p.seed, block as u64 + 1);
    let first = block * CELLS_PER_BLOCK;
    let n = CELLS_PER_BLOCK.min(p.n_cells - first);
    let library = LogNormal::new(0.0, p.library_sigma).expect("sigma checked");
    let words = p.n_genes.div_ceil(64);
    let density = density(p);
    let mut seen = vec![0u64; words];
    let mut out = Block {
        groups: Vec::with_capacity(n),
        row_lengths: Vec::with_capacity(n),
        indices: Vec::new(),
        data: Vec::new(),
    };
    // A cell draws at most this many times; very skewed popularity with few genes could
    // otherwise take very long to find enough distinct genes.
    const MAX_DRAWS_PER_GENE: usize = 64;
    for _ in 0..n {
        let batch = rng.random_range(0..p.n_batches);
        let cell_type = rng.random_range(0..p.n_cell_types);
        let group = batch * p.n_cell_types + cell_type;
        let low_quality = rng.random::<f64>() < p.low_quality_fraction;
        let (lo, hi) = if low_quality {
            p.low_quality_genes
        } else {
            p.genes_per_cell
        };
        let wanted =
            ((rng.random_range(lo..=hi) as f64 * density).round() as usize).clamp(1, p.n_genes);
        let lib = library.sample(&mut rng);
        let table = &model.tables[group];
        let mut found = 0;
        let mut draws = 0;
        while found < wanted && draws < wanted * MAX_DRAWS_PER_GENE {
            let g = table.pick(rng.next_u64());
            draws += 1;
            let (w, bit) = (g / 64, 1u64 << (g % 64));
            if seen[w] & bit == 0 {
                seen[w] |= bit;
                found += 1;
            }
        }
        let relative = &model.relative[group];
        for (w, word) in seen.iter_mut().enumerate() {
            let mut bits = *word;
            while bits != 0 {
                let g = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                out.indices.push(g as u32);
                out.data.push(count(
                    &mut rng,
                    p.nb_shape,
                    p.mean_extra_count * lib * relative[g],
                ));
            }
            *word = 0;
        }
        out.groups.push((batch as u8, cell_type as u8));
        out.row_lengths.push(found as u64);
    }
    out
}

/// Gene names: the 13 mitochondrial genes at seeded positions, `GENE00001`... elsewhere.
fn gene_names(p: &SyntheticParams, rng: &mut Xoshiro256pp) -> Vec<String> {
    let width = p.n_genes.to_string().len().max(5);
    let mut names: Vec<String> = (0..p.n_genes)
        .map(|g| format!("GENE{:0width$}", g + 1))
        .collect();
    for (slot, g) in distinct_sample(rng, p.n_genes, MITO_GENES.len())
        .into_iter()
        .enumerate()
    {
        names[g] = MITO_GENES[slot].to_string();
    }
    names
}

impl Block {
    /// The block's rows as a CSR matrix.
    fn into_csr(self, n_cols: usize) -> CsrMatrix<f32> {
        let mut indptr = Vec::with_capacity(self.row_lengths.len() + 1);
        indptr.push(0u64);
        for len in &self.row_lengths {
            indptr.push(indptr.last().unwrap() + len);
        }
        CsrMatrix {
            n_rows: self.row_lengths.len(),
            n_cols,
            indptr,
            indices: self.indices,
            data: self.data,
        }
    }
}

/// The model and gene names, drawn from the seed before any cell.
fn prepare(p: &SyntheticParams) -> Result<(Model, Vec<String>)> {
    p.check()?;
    let mut rng = Xoshiro256pp::seed(p.seed, 0);
    let model = build_model(p, &mut rng);
    let genes = gene_names(p, &mut rng);
    Ok((model, genes))
}

/// The model of `p` for generating cells one block at a time ([`CountModel`]: the same
/// popularity, groups and distributions, another random stream than [`generate`]) and the gene
/// names.
pub fn count_model(p: &SyntheticParams) -> Result<(CountModel, Vec<String>)> {
    if p.nb_shape.fract() != 0.0 || !(1.0..=64.0).contains(&p.nb_shape) {
        return Err(Error::param(
            "generate",
            format!(
                "nb_shape = {} (cells generated block by block need an integral shape, 1 to 64)",
                p.nb_shape
            ),
        ));
    }
    let (model, genes) = prepare(p)?;
    let model = CountModel {
        n_genes: p.n_genes,
        seed: p.seed,
        n_batches: p.n_batches,
        n_cell_types: p.n_cell_types,
        genes_per_cell: p.genes_per_cell,
        low_quality_fraction: p.low_quality_fraction,
        low_quality_genes: p.low_quality_genes,
        density: density(p),
        library_sigma: p.library_sigma,
        nb_shape: p.nb_shape as u32,
        mean_extra_count: p.mean_extra_count,
        relative: model.relative.concat(),
        tables: model.tables,
    };
    model
        .check()
        .map_err(|e| Error::param("generate", e.to_string()))?;
    Ok((model, genes))
}

/// The dataset the GPU-generated demo (`--demo-on-gpu`) processes, made in host memory by the
/// CPU twin of the device generator: for checking that run against a run on X.
pub fn generate_cell_by_cell(p: &SyntheticParams) -> Result<AnnData> {
    let (model, genes) = count_model(p)?;
    let (x, groups) = model
        .generate(0..p.n_cells as u64)
        .map_err(|e| Error::param("generate", e.to_string()))?;
    let mut adata = AnnData::new(Matrix::Sparse(x));
    (adata.obs, adata.var) = annotations(p, &groups, genes)?;
    Ok(adata)
}

/// `obs` (cell names, `batch` and `cell_type` categoricals) and `var` (gene names).
pub(crate) fn annotations(
    p: &SyntheticParams,
    groups: &[(u8, u8)],
    genes: Vec<String>,
) -> Result<(DataFrame, DataFrame)> {
    let categorical = |codes: Vec<i32>, prefix: &str, n: usize| Column::Categorical {
        codes,
        categories: ArrayData::Str((0..n).map(|k| format!("{prefix}{k}")).collect()),
        ordered: false,
    };
    let width = p.n_cells.to_string().len();
    let mut obs = DataFrame::with_index(
        (0..p.n_cells)
            .map(|i| format!("cell{:0width$}", i))
            .collect(),
    );
    obs.set(
        "batch",
        categorical(
            groups.iter().map(|g| g.0 as i32).collect(),
            "batch",
            p.n_batches,
        ),
    )?;
    obs.set(
        "cell_type",
        categorical(
            groups.iter().map(|g| g.1 as i32).collect(),
            "type",
            p.n_cell_types,
        ),
    )?;
    Ok((obs, DataFrame::with_index(genes)))
}

/// Generates the dataset in memory: raw counts in CSR `X`, `obs['batch']` and
/// `obs['cell_type']` as categoricals, gene names in `var`.
pub fn generate(p: &SyntheticParams) -> Result<AnnData> {
    let (model, genes) = prepare(p)?;
    let n_blocks = p.n_cells.div_ceil(CELLS_PER_BLOCK);
    let blocks: Vec<Block> = (0..n_blocks)
        .into_par_iter()
        .map(|b| generate_block(p, &model, b))
        .collect();
    let groups: Vec<(u8, u8)> = blocks
        .iter()
        .flat_map(|b| b.groups.iter().copied())
        .collect();

    let nnz: usize = blocks.iter().map(|b| b.indices.len()).sum();
    let mut indptr = Vec::with_capacity(p.n_cells + 1);
    indptr.push(0u64);
    for b in &blocks {
        for &len in &b.row_lengths {
            indptr.push(indptr.last().unwrap() + len);
        }
    }
    // Concatenate the blocks' values in parallel into their final positions.
    let mut indices = vec![0u32; nnz];
    let mut data = vec![0f32; nnz];
    {
        let mut idx_rest: &mut [u32] = &mut indices;
        let mut dat_rest: &mut [f32] = &mut data;
        let mut jobs = Vec::with_capacity(blocks.len());
        for b in &blocks {
            let (i, ir) = idx_rest.split_at_mut(b.indices.len());
            let (d, dr) = dat_rest.split_at_mut(b.data.len());
            idx_rest = ir;
            dat_rest = dr;
            jobs.push((b, i, d));
        }
        jobs.into_par_iter().for_each(|(b, i, d)| {
            i.copy_from_slice(&b.indices);
            d.copy_from_slice(&b.data);
        });
    }
    drop(blocks);
    let x = CsrMatrix {
        n_rows: p.n_cells,
        n_cols: p.n_genes,
        indptr,
        indices,
        data,
    };
    let mut adata = AnnData::new(Matrix::Sparse(x));
    (adata.obs, adata.var) = annotations(p, &groups, genes)?;
    Ok(adata)
}

/// An upper bound on the stored values: every cell at the top of its range.
pub fn max_stored_values(p: &SyntheticParams) -> u64 {
    let most = (p.genes_per_cell.1.max(p.low_quality_genes.1) as f64 * density(p)).round() as u64;
    p.n_cells as u64 * most.clamp(1, p.n_genes as u64)
}

/// About the stored values the model gives: each range's mean, weighted by the low-quality
/// fraction (the count of a large dataset lies within a fraction of a percent of it; fewer
/// where a cell's genes cannot all be drawn).
pub fn expected_stored_values(p: &SyntheticParams) -> u64 {
    let mean = |(lo, hi): (usize, usize)| {
        ((lo + hi) as f64 / 2.0 * density(p)).clamp(1.0, p.n_genes.max(1) as f64)
    };
    let f = p.low_quality_fraction;
    let per_cell = (1.0 - f) * mean(p.genes_per_cell) + f * mean(p.low_quality_genes);
    (p.n_cells as f64 * per_cell).round() as u64
}

/// Blocks generated at once by [`generate_to_h5ad`] (then written in order): bounds the memory
/// to about this many blocks of cells whatever the size of the dataset.
const BLOCKS_PER_BATCH: usize = 32;

/// Generates the same dataset as [`generate`] straight into an h5ad file, holding only a batch
/// of blocks at a time (any number of cells, more than 2^31 stored values included). Returns
/// the number of stored values. `progress` is told the cells written so far.
pub fn generate_to_h5ad(
    p: &SyntheticParams,
    path: &std::path::Path,
    progress: &dyn Fn(usize),
) -> Result<u64> {
    let (model, genes) = prepare(p)?;
    let mut writer = crate::io::H5adStreamWriter::create(path, p.n_genes, max_stored_values(p))?;
    let n_blocks = p.n_cells.div_ceil(CELLS_PER_BLOCK);
    let mut groups = Vec::with_capacity(p.n_cells);
    for first in (0..n_blocks).step_by(BLOCKS_PER_BATCH) {
        let batch: Vec<Block> = (first..(first + BLOCKS_PER_BATCH).min(n_blocks))
            .into_par_iter()
            .map(|b| generate_block(p, &model, b))
            .collect();
        for block in batch {
            groups.extend_from_slice(&block.groups);
            writer.append_rows(&block.into_csr(p.n_genes))?;
        }
        progress(writer.n_rows());
    }
    let nnz = writer.stored_values();
    let (obs, var) = annotations(p, &groups, genes)?;
    writer.finish(&obs, &var)?;
    Ok(nnz)
}
