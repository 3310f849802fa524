//! The host's share of a split run on 4 GPUs, around the GPUs' steps: checking that X holds
//! counts (`check_counts`, before the split; on 200,000 cells of the demo), cutting the cells'
//! tables into blocks (`AnnData::split_obs` of a million cells' obs) and stacking the blocks'
//! tables and embeddings afterwards (`AnnData::stack_obs` of 4 x 250,000 cells; X and `.raw`
//! stay on the GPUs). Inputs are made outside the timed region.
//!
//! `cargo bench -p benches --bench split_host`

use criterion::{criterion_group, BatchSize, Criterion};
use sc_pipeline::anndata::Matrix;
use sc_pipeline::synthetic::{generate, SyntheticParams};
use sc_pipeline::AnnData;

const RANKS: usize = 4;
const CELLS_PER_RANK: usize = 250_000;
/// One rank's block of cells, as the pipeline leaves it before the stacking.
fn part(rank: usize) -> AnnData {
    benches::cells_after_pca(rank * CELLS_PER_RANK, CELLS_PER_RANK)
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
