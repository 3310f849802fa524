//! The host's share of a split run on 4 GPUs, around the GPUs' steps: checking that X holds
//! counts (`check_counts`, before the split; on 200,000 cells of the demo), cutting the cells'
//! tables into blocks (`AnnData::split_obs` of a million cells' obs) and stacking the blocks'
//! tables and embeddings afterwards (`AnnData::stack_obs` of 4 x 250,000 cells; X and `.raw`
//! stay on the GPUs). Inputs are made outside the timed region.
//!
//! `cargo bench -p benches --bench split_host`

use criterion::{criterion_group, BatchSize, Criterion};
use sc_kernels::CsrMatrix;
use sc_pipeline::anndata::{ArrayData, Column, DataFrame, DenseArray, Matrix};
use sc_pipeline::synthetic::{generate, SyntheticParams};
use sc_pipeline::AnnData;

const RANKS: usize = 4;
const CELLS_PER_RANK: usize = 250_000;
const QC_COLUMNS: [&str; 7] = [
    "n_genes_by_counts",
    "log1p_n_genes_by_counts",
    "total_counts",
    "log1p_total_counts",
    "total_counts_mt",
    "pct_counts_mt",
    "n_genes",
];

/// One rank's block of cells, as the pipeline leaves it before the stacking.
fn part(rank: usize) -> AnnData {
    let n = CELLS_PER_RANK;
    let mut a = AnnData::new(Matrix::Sparse(CsrMatrix::zeros(n, 2000)));
    let names = (0..n)
        .map(|i| format!("cell_{:07}", rank * n + i))
        .collect();
    a.obs = DataFrame::with_index(names);
    let labels = |k: usize, prefix: &str| -> Vec<String> {
        (0..n).map(|i| format!("{prefix}{}", i % k)).collect()
    };
    for (name, k) in [("batch", 4), ("cell_type", 8)] {
        let col = Column::categorical_from_labels(&labels(k, name));
        a.obs.set(name, col).unwrap();
    }
    for c in QC_COLUMNS {
        let values = (0..n).map(|v| v as f64).collect();
        a.obs.set_values(c, ArrayData::F64(values)).unwrap();
    }
    let pca = DenseArray::matrix_f32(n, 50, vec![0.5; n * 50]).unwrap();
    a.obsm.insert("X_pca".into(), pca);
    a
}

fn split_host(c: &mut Criterion) {
    let mut group = c.benchmark_group("split_host");
    group.sample_size(10);
    let demo = generate(&SyntheticParams::new(200_000, 20_000, 42)).unwrap();
    let Matrix::Sparse(x) = &demo.x else {
        panic!("the demo's counts are sparse")
    };
    group.bench_function("check_counts, 200,000 cells", |b| {
        b.iter(|| x.check_counts().unwrap())
    });
    drop(demo);
    let mut whole = AnnData::stack_obs((0..RANKS).map(part).collect()).unwrap();
    whole.obsm.clear();
    group.bench_function("split_obs, 1,000,000 cells", |b| {
        b.iter(|| whole.split_obs(RANKS).unwrap())
    });
    group.bench_function("stack_obs, 4 x 250,000 cells", |b| {
        b.iter_batched(
            || (0..RANKS).map(part).collect::<Vec<_>>(),
            |parts| AnnData::stack_obs(parts).unwrap(),
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

criterion_group!(benches, split_host);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
