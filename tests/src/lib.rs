//! Helpers shared by the workspace integration tests.

use rmm_cuda::{Device, GpuPresence};

/// The GPU for a test: `Some(device 0)` when there is one; `None` (after printing a visible
/// SKIPPED line) when there is none; a panic (the test fails) when `REQUIRE_GPU=1` and there is
/// none.
pub fn gpu_or_skip(test: &str) -> Option<Device> {
    match rmm_cuda::require_gpu_from_env(test) {
        Ok(GpuPresence::Present) => Some(
            Device::cuda(0)
                .unwrap_or_else(|e| panic!("{test}: a GPU is present but device 0 failed: {e}")),
        ),
        Ok(GpuPresence::Skip) => None,
        Err(message) => panic!("{message}"),
    }
}

/// A kernel context on a fresh stream of `d` over a pool of 256 MiB (grown as needed).
pub fn pool_context(d: &Device) -> sc_kernels::gpu::GpuContext {
    use rmm_core::{CudaResource, PoolOptions, PoolResource, SharedResource};
    let r: SharedResource = std::sync::Arc::new(
        PoolResource::new(CudaResource::new(d), PoolOptions::sized(1 << 28, None)).unwrap(),
    );
    sc_kernels::gpu::GpuContext::new(d, &d.new_stream().unwrap(), r).unwrap()
}

/// Random counts, `rows x cols`: value `(i, j)` is stored with probability `density(i, j)`,
/// small integers with a few large ones.
pub fn random_counts(
    seed: u64,
    rows: usize,
    cols: usize,
    density: impl Fn(usize, usize) -> f64,
) -> sc_kernels::CsrMatrix<f32> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut indptr = vec![0u64];
    let (mut indices, mut data) = (vec![], vec![]);
    for i in 0..rows {
        for j in 0..cols {
            if rng.random::<f64>() < density(i, j) {
                indices.push(j as u32);
                let v = if rng.random::<f64>() < 0.05 {
                    rng.random_range(20..3000)
                } else {
                    rng.random_range(1..6)
                };
                data.push(v as f32);
            }
        }
        indptr.push(data.len() as u64);
    }
    sc_kernels::CsrMatrix::new(rows, cols, indptr, indices, data).unwrap()
}

/// The checks that two runs of the pipeline on the same input agree: the same cells, genes and
/// per-cell counts columns exactly; the scaled X within `x_tol`; each of the first ten PCA
/// components correlated above 0.999 (up to sign); and, when both have a kNN graph, the same
/// neighbours for more than 99% of the entries (near-ties may swap).
pub fn assert_same_pipeline_output(
    got: &sc_pipeline::AnnData,
    want: &sc_pipeline::AnnData,
    x_tol: f32,
) {
    use sc_pipeline::anndata::Matrix;
    assert_eq!(got.obs.index, want.obs.index, "same cells");
    assert_eq!(got.var.index, want.var.index, "same genes");
    for col in ["n_genes_by_counts", "total_counts", "n_genes"] {
        assert_eq!(got.obs.column(col), want.obs.column(col), "obs['{col}']");
    }
    // A split run's X stays on its GPUs (blocks of rows): compared on the host.
    let on_host = |m: &Matrix| m.host_copy().expect("X copied to the host");
    match (&on_host(&got.x), &on_host(&want.x)) {
        (Matrix::Dense(a), Matrix::Dense(b)) => {
            let diff = a
                .data
                .iter()
                .zip(&b.data)
                .map(|(x, y)| (x - y).abs())
                .fold(0f32, f32::max);
            assert!(diff <= x_tol, "X differs by {diff}");
        }
        (a, b) => assert_eq!(a.shape(), b.shape(), "X"),
    }
    if let (Some(a), Some(b)) = (got.obsm.get("X_pca"), want.obsm.get("X_pca")) {
        let (a, b) = (a.data.to_f64().unwrap(), b.data.to_f64().unwrap());
        let k = got.obsm["X_pca"].shape[1];
        for c in 0..k.min(10) {
            let col = |m: &[f64]| m.chunks(k).map(|r| r[c]).collect::<Vec<f64>>();
            let (x, y) = (col(&a), col(&b));
            let dot: f64 = x.iter().zip(&y).map(|(p, q)| p * q).sum();
            let nx: f64 = x.iter().map(|p| p * p).sum::<f64>().sqrt();
            let ny: f64 = y.iter().map(|p| p * p).sum::<f64>().sqrt();
            let r = dot / (nx * ny);
            assert!(r.abs() > 0.999, "X_pca column {c}: correlation {r}");
        }
    }
    if let (Some(a), Some(b)) = (got.obsp.get("distances"), want.obsp.get("distances")) {
        assert_eq!(a.indptr, b.indptr);
        let same = a
            .indices
            .iter()
            .zip(&b.indices)
            .filter(|(p, q)| p == q)
            .count();
        let share = same as f64 / b.indices.len().max(1) as f64;
        assert!(
            share > 0.99,
            "neighbour sets agree for {share} of the entries"
        );
    }
}

/// A split run's marker genes equal the one-GPU run's when their clusters agree (its `.raw`
/// lies in blocks on its GPUs, stacked on one for the test).
pub fn assert_same_markers(got: &sc_pipeline::AnnData, want: &sc_pipeline::AnnData) {
    use sc_pipeline::anndata::Value;
    let leiden = |a: &sc_pipeline::AnnData| a.obs.column("leiden").cloned();
    let names = |a: &sc_pipeline::AnnData| match a.uns.get("rank_genes_groups") {
        Some(Value::Dict(d)) => d.get("names").cloned(),
        _ => None,
    };
    if leiden(got).is_some() && leiden(got) == leiden(want) && names(want).is_some() {
        assert_eq!(names(got), names(want), "rank_genes_groups' names");
    }
}

/// The default pipeline with harmony on `obs['batch']` (harmony2 defaults) and neighbors on its
/// corrected basis: `scpipe run --harmony batch`.
pub fn harmony_on_batch_config() -> sc_pipeline::run::PipelineConfig {
    use sc_pipeline::steps::{HarmonyOptions, HarmonyParams, HARMONY_ADJUSTED_BASIS};
    sc_pipeline::run::PipelineConfig {
        harmony: Some(HarmonyOptions {
            key: "batch".into(),
            params: HarmonyParams::default(),
        }),
        neighbors_use_rep: Some(HARMONY_ADJUSTED_BASIS.into()),
        ..Default::default()
    }
}
