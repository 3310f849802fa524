//! The pipeline split across the GPUs of this machine through NCCL: the collectives return what
//! the simulated communicator does, and the split run's output equals the one-GPU run's (one
//! rank on a machine with one GPU: NCCL itself still runs).

use integration_tests::{
    assert_same_markers, assert_same_pipeline_output, gpu_or_skip, harmony_on_batch_config,
};
use rmm_core::{CudaResource, Device, SharedResource};
use sc_kernels::comm::all_gather;
use sc_kernels::gpu::NcclCommunicator;
use sc_pipeline::run::split::{run_pipeline_split, Rank};
use sc_pipeline::run::{run_pipeline_on, GpuRun, PipelineConfig, Silent};
use std::sync::Arc;

// Datasets' folder, gzip TSV readers, per-column correlation and relative L2.
#[path = "../../sc-kernels/tests/common/mod.rs"]
mod common;

fn runs(n: usize) -> Vec<GpuRun> {
    (0..n)
        .map(|i| {
            let d = Device::cuda(i).unwrap();
            let r: SharedResource = Arc::new(CudaResource::new(&d));
            GpuRun::new(&d, &d.new_stream().unwrap(), r).unwrap()
        })
        .collect()
}

fn ranks(runs: &[GpuRun]) -> Vec<Rank> {
    let devices: Vec<Device> = runs.iter().map(|g| g.ctx.device().clone()).collect();
    rmm_cuda::NcclComm::for_devices(&devices)
        .unwrap()
        .into_iter()
        .zip(runs)
        .map(|(c, g)| Rank {
            comm: Arc::new(NcclCommunicator::new(c, g.ctx.clone()).unwrap()),
            gpu: Some(g.clone()),
        })
        .collect()
}

#[test]
fn nccl_collectives_match_their_definition() {
    let Some(_) = gpu_or_skip("nccl collectives") else {
        return;
    };
    let n = rmm_cuda::device_count().unwrap();
    let group = ranks(&runs(n));
    let out: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = group
            .iter()
            .map(|r| {
                s.spawn(move || {
                    let c = r.comm.as_ref();
                    let k = c.rank() as f64;
                    let mut v = vec![k, 1.0, 0.5 * k];
                    c.all_reduce_sum(&mut v).unwrap();
                    let mut b = vec![k + 7.0; 3];
                    c.broadcast(&mut b, c.size() - 1).unwrap();
                    let g = all_gather(c, &vec![c.rank() as u32 + 1; c.rank() + 2]).unwrap();
                    (v, b, g)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let total: f64 = (0..n).map(|r| r as f64).sum();
    for (v, b, g) in out {
        assert_eq!(v, vec![total, n as f64, 0.5 * total]);
        assert_eq!(b, vec![(n - 1) as f64 + 7.0; 3]);
        let want: Vec<u32> = (0..n)
            .flat_map(|r| std::iter::repeat_n(r as u32 + 1, r + 2))
            .collect();
        assert_eq!(g, want);
    }
}

#[test]
fn split_run_on_every_gpu_matches_one_gpu() {
    let Some(_) = gpu_or_skip("split run") else {
        return;
    };
    let n = rmm_cuda::device_count().unwrap();
    let params = sc_pipeline::synthetic::SyntheticParams::new(6000, 3000, 11);
    let config = PipelineConfig::default();
    let mut one = sc_pipeline::synthetic::generate(&params).unwrap();
    let single = runs(1);
    run_pipeline_on(&mut one, &config, Some(&single[0]), &mut Silent).unwrap();
    let all = runs(n);
    let input = sc_pipeline::synthetic::generate(&params).unwrap();
    let (split, records) = run_pipeline_split(input, &config, ranks(&all), &mut Silent).unwrap();
    assert!(records
        .iter()
        .any(|r| r.step == "pca" && r.device.as_deref() == Some("gpu")));
    assert_same_pipeline_output(&split, &one, 1e-3);
    assert_same_markers(&split, &one);
    // UMAP ran beside Leiden and the markers, on the last GPU when there are several, and laid
    // out the split run's graph as UMAP alone does (on the CPU: the same layout bit for bit).
    let umap = records.iter().find(|r| r.step == "umap").unwrap();
    let place = match n {
        1 => "(on a GPU stream of its own)".to_string(),
        _ => format!("(on cuda:{}, a stream of its own)", n - 1),
    };
    assert!(umap.note.contains(&place), "{}", umap.note);
    let mut split = split;
    let beside = split.obsm.remove("X_umap").unwrap();
    sc_pipeline::steps::umap(&mut split, &config.umap.unwrap()).unwrap();
    assert_eq!(split.obsm["X_umap"], beside);
    println!("split run over {n} GPU(s) matches the one-GPU run");
}

/// The kNN of ranges of rows (what each GPU of a split run searches) joined together is the
/// whole kNN, bit for bit, and gives the same graph.
#[test]
fn knn_of_row_ranges_joins_into_the_whole_knn() {
    use sc_kernels::neighbors::{knn_rows_gpu, neighbors_from_knn_gpu, neighbors_gpu, Knn};
    let Some(d) = gpu_or_skip("kNN of row ranges") else {
        return;
    };
    let ctx = integration_tests::pool_context(&d);
    let (n, dims, k) = (5000, 30, 15);
    let x = {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(4);
        sc_kernels::DenseMatrix::new(
            n,
            dims,
            (0..n * dims)
                .map(|_| rng.random_range(-3.0f32..3.0))
                .collect(),
        )
        .unwrap()
    };
    let params = sc_kernels::neighbors::NeighborsParams {
        n_neighbors: k,
        ..Default::default()
    };
    let whole = neighbors_gpu(&ctx, &x, &params).unwrap();
    let (mut indices, mut distances) = (Vec::new(), Vec::new());
    for rows in [0..1700, 1700..1700, 1700..3333, 3333..5000] {
        let (i, dd, _) = knn_rows_gpu(&ctx, &x, k, rows.clone()).unwrap();
        assert_eq!(i.len(), rows.len() * k);
        indices.extend(i);
        distances.extend(dd);
    }
    assert_eq!(indices, whole.knn.indices);
    assert_eq!(distances, whole.knn.distances);
    let joined = neighbors_from_knn_gpu(
        &ctx,
        Knn {
            n_obs: n,
            k,
            indices,
            distances,
        },
        whole.scan,
        &params,
    )
    .unwrap();
    assert_eq!(joined.connectivities, whole.connectivities);
    assert_eq!(joined.distances, whole.distances);
    assert!(knn_rows_gpu(&ctx, &x, k, 4000..5001).is_err());
}

/// Ranks of a split harmony: a context and its communicator each.
type HarmonyGroup = Vec<(
    Arc<sc_kernels::gpu::GpuContext>,
    Arc<dyn sc_kernels::Communicator>,
)>;

/// Harmony with its cells split across `group` (each rank corrects a block of rows; the cluster
/// statistics are summed through the communicator) against harmony on one GPU, on R harmony's
/// input. Gates as the GPU-vs-CPU test: per-PC correlation >= 0.999 and relative L2 <= 0.02
/// (the block order and formulas are the same; only the order of the sums differs).
fn check_split_harmony(d: &rmm_core::Device, name: &str, group: HarmonyGroup) {
    use sc_kernels::harmony::{harmony_integrate_gpu, harmony_integrate_gpu_rows, HarmonyParams};
    let dir = common::data_dir().join("harmony");
    let z = common::read_matrix(&dir.join("pbmc_3500_pcs.tsv.gz"), 0);
    let (donors, _) = common::read_codes(&dir.join("pbmc_3500_meta.tsv.gz"), "donor");
    let p = HarmonyParams::default();
    let one =
        harmony_integrate_gpu(&integration_tests::pool_context(d), &z, &donors, 3, &p).unwrap();
    let (size, n) = (group.len(), z.n_rows);
    let parts: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = group
            .iter()
            .enumerate()
            .map(|(r, (ctx, comm))| {
                let (z, donors, p) = (&z, &donors, &p);
                s.spawn(move || {
                    let rows = sc_kernels::comm::rank_rows(n, size, r);
                    harmony_integrate_gpu_rows(ctx, comm.as_ref(), z, donors, 3, p, rows).unwrap()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut got = parts[0].clone();
    for part in &parts[1..] {
        assert_eq!(part.iterations, got.iterations, "every rank decides alike");
        assert_eq!(part.objective, got.objective);
        got.corrected.data.extend_from_slice(&part.corrected.data);
        got.corrected.n_rows += part.corrected.n_rows;
    }
    let details = format!(
        "{size} ranks, rounds {} vs {}, clustering iterations {:?} vs {:?}",
        got.iterations, one.iterations, got.clustering_iterations, one.clustering_iterations
    );
    common::check_harmony_agreement(
        &format!("harmony split, {name}"),
        &got.corrected,
        &one.corrected,
        &details,
    );
}

/// Three ranks on GPU 0 joined by the in-process group (the host path of the sums).
#[test]
fn harmony_split_across_local_ranks_matches_one_gpu() {
    let Some(d) = gpu_or_skip("split harmony, local ranks") else {
        return;
    };
    let group = sc_kernels::comm::LocalGroup::new(3)
        .into_iter()
        .map(|c| {
            (
                Arc::new(integration_tests::pool_context(&d)),
                Arc::new(c) as Arc<dyn sc_kernels::Communicator>,
            )
        })
        .collect();
    check_split_harmony(&d, "3 ranks on GPU 0", group);
}

/// Every GPU joined by NCCL (the device path of the sums).
#[test]
fn harmony_split_across_nccl_ranks_matches_one_gpu() {
    let Some(d) = gpu_or_skip("split harmony, NCCL") else {
        return;
    };
    let group = ranks(&runs(rmm_cuda::device_count().unwrap()))
        .into_iter()
        .map(|r| (r.gpu.unwrap().ctx, r.comm))
        .collect();
    check_split_harmony(&d, "NCCL over every GPU", group);
}

/// The split pipeline with harmony (its cells split across every GPU) against one GPU.
#[test]
fn split_run_with_harmony_matches_one_gpu() {
    use sc_pipeline::steps::HARMONY_ADJUSTED_BASIS;
    let Some(_) = gpu_or_skip("split run with harmony") else {
        return;
    };
    let n = rmm_cuda::device_count().unwrap();
    let params = sc_pipeline::synthetic::SyntheticParams::new(6000, 3000, 13);
    let config = harmony_on_batch_config();
    let mut one = sc_pipeline::synthetic::generate(&params).unwrap();
    let single = runs(1);
    run_pipeline_on(&mut one, &config, Some(&single[0]), &mut Silent).unwrap();
    let input = sc_pipeline::synthetic::generate(&params).unwrap();
    let (split, records) =
        run_pipeline_split(input, &config, ranks(&runs(n)), &mut Silent).unwrap();
    let h = records
        .iter()
        .find(|r| r.step == "harmony_integrate")
        .expect("a harmony row");
    println!("{} on {n} GPU(s): {:.3} s, {}", h.step, h.seconds, h.note);
    assert_same_pipeline_output(&split, &one, 1e-3);
    assert_same_markers(&split, &one);
    let to_dense = |a: &sc_pipeline::anndata::DenseArray| {
        let v: Vec<f32> = a.data.to_f64().unwrap().iter().map(|&x| x as f32).collect();
        sc_kernels::DenseMatrix::new(a.shape[0], a.shape[1], v).unwrap()
    };
    let (g, w) = (
        to_dense(&split.obsm[HARMONY_ADJUSTED_BASIS]),
        to_dense(&one.obsm[HARMONY_ADJUSTED_BASIS]),
    );
    let r = common::column_correlations(&g, &w);
    let min_r = r.iter().take(10).copied().fold(f64::INFINITY, f64::min);
    println!("X_pca_harmony columns 1-10: min |r| {min_r:.6}");
    assert!(min_r >= 0.99, "X_pca_harmony: min correlation {min_r}");
}

/// X and `raw.X` left on the GPUs, as blocks of rows (a split run's stacked result; blocks take
/// turns over the GPUs there are) and as one GPU's matrix, are written straight from device
/// memory to h5ad and to zarr, and read back equal to their host copies. The matrices are large
/// enough (over 64 MiB a dataset) for the copy into the h5ad file's map, and for several zarr
/// chunks.
#[test]
fn device_matrices_are_written_straight_from_the_gpus() {
    use sc_kernels::gpu::{DeviceCsr, DeviceDense};
    use sc_pipeline::anndata::{AnnData, DataFrame, DeviceMatrix, Matrix, Raw};
    let Some(_) = gpu_or_skip("device write") else {
        return;
    };
    let gpus = runs(rmm_cuda::device_count().unwrap());
    let ctx = |i: usize| &gpus[i % gpus.len()].ctx;
    let (genes, hvgs) = (20_000, 2048);
    let counts: Vec<Matrix> = [2500, 4000, 2500]
        .iter()
        .enumerate()
        .map(|(i, &r)| {
            let c = integration_tests::random_counts(40 + i as u64, r, genes, |_, _| 0.1);
            Matrix::Sparse(c)
        })
        .collect();
    let dense: Vec<Matrix> = counts
        .iter()
        .map(|c| {
            let d = c.to_csr().unwrap().to_dense();
            let data = d.data.chunks(genes).flat_map(|row| &row[..hvgs]).copied();
            Matrix::Dense(sc_kernels::DenseMatrix::new(d.n_rows, hvgs, data.collect()).unwrap())
        })
        .collect();
    let stacked = |parts: &[Matrix]| Matrix::stack_rows(&parts.iter().collect::<Vec<_>>()).unwrap();
    let (want_x, want_raw) = (stacked(&dense), stacked(&counts));
    let upload = |i: usize, m: &Matrix| match m {
        Matrix::Sparse(c) => DeviceMatrix::csr(ctx(i), DeviceCsr::upload(ctx(i), c).unwrap()),
        Matrix::Dense(d) => DeviceMatrix::dense(ctx(i), DeviceDense::upload(ctx(i), d).unwrap()),
        Matrix::Device(_) => unreachable!("host parts"),
    };
    let on_gpus = |parts: &[Matrix]| {
        let blocks: Vec<_> = parts
            .iter()
            .enumerate()
            .map(|(i, m)| upload(i, m))
            .collect();
        Matrix::Device(DeviceMatrix::rows(blocks).unwrap())
    };
    let dir = std::env::temp_dir().join(format!("device-write-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases = [
        ("3 blocks", on_gpus(&dense), on_gpus(&counts)),
        (
            "one GPU's matrix",
            Matrix::Device(upload(0, &want_x)),
            Matrix::Device(upload(0, &want_raw)),
        ),
    ];
    for (i, (what, x, raw_x)) in cases.into_iter().enumerate() {
        let mut a = AnnData::new(x);
        a.raw = Some(Raw {
            x: raw_x,
            var: DataFrame::with_index((0..genes).map(|g| format!("g{g}")).collect()),
            varm: Default::default(),
        });
        for format in ["h5ad", "zarr"] {
            let path = dir.join(format!("case{i}.{format}"));
            let back = if format == "h5ad" {
                sc_pipeline::io::write_h5ad(&a, &path).unwrap();
                sc_pipeline::io::read_h5ad(&path).unwrap()
            } else {
                // Several chunks each, the last one short, some across two GPUs' blocks.
                sc_pipeline::io::write_zarr(&a, &path).unwrap();
                sc_pipeline::io::read_zarr(&path).unwrap()
            };
            assert_eq!(back.x, want_x, "X, {what}, {format}");
            assert_eq!(
                back.raw.as_ref().unwrap().x,
                want_raw,
                "raw.X, {what}, {format}"
            );
        }
        println!(
            "{what} on {} GPU(s): X {:?} and raw.X with {} stored values written from the GPUs \
             to h5ad and zarr",
            gpus.len(),
            want_x.shape(),
            want_raw.stored_values()
        );
    }
    std::fs::remove_dir_all(dir).unwrap();
}
