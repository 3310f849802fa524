//! Writing the rest of a million-cell h5ad (everything but X and `.raw`: what a GPU run writes
//! after neighbors, on its critical path): obs with the cell names and the pipeline's QC
//! columns, a 50-component `X_pca`, and the kNN graph's distances and connectivities. Written
//! to `/dev/shm` where there is one (else the temporary directory); the file is removed after
//! each write.
//!
//! `cargo bench -p benches --bench h5ad_rest`

use criterion::{criterion_group, Criterion};
use sc_kernels::CsrMatrix;
use sc_pipeline::io::write_h5ad_staged_without_x;
use sc_pipeline::AnnData;

const CELLS: usize = 1_000_000;

/// A kNN-like graph: `k` entries a row.
fn graph(n: usize, k: usize) -> CsrMatrix<f32> {
    let indptr = (0..=n as u64).map(|r| r * k as u64).collect();
    let indices = (0..n * k).map(|i| ((i * 7919) % n) as u32).collect();
    let data = (0..n * k).map(|i| (i % 97) as f32 * 0.01).collect();
    CsrMatrix::new(n, n, indptr, indices, data).unwrap()
}

fn result() -> AnnData {
    let mut a = benches::cells_after_pca(0, CELLS);
    a.obsp.insert("distances".into(), graph(CELLS, 14));
    a.obsp.insert("connectivities".into(), graph(CELLS, 26));
    a
}

fn h5ad_rest(c: &mut Criterion) {
    let dir = match std::path::Path::new("/dev/shm").is_dir() {
        true => std::path::PathBuf::from("/dev/shm"),
        false => std::env::temp_dir(),
    };
    let path = dir.join(format!("h5ad-rest-bench-{}.h5ad", std::process::id()));
    let a = result();
    let mut group = c.benchmark_group("h5ad_rest");
    group.sample_size(10);
    group.bench_function("1,000,000 cells", |b| {
        // The staged file is removed when dropped (never committed).
        b.iter(|| write_h5ad_staged_without_x(&a, &path).unwrap())
    });
    group.finish();
}

criterion_group!(benches, h5ad_rest);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
