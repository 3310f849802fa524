//! Helpers shared by the benchmarks: device choice, GPU description, result tables and JSON.

use rmm_core::testing::SplitMix64;
use rmm_cuda::Device;
use serde_json::{json, Value};

/// The device to benchmark on: `--device sim` (or no GPU present, with a notice) gives a
/// simulated device of `sim_capacity` bytes; otherwise CUDA device 0.
pub fn bench_device(args: &[String], sim_capacity: usize) -> Result<Device, String> {
    let wants_sim = args.windows(2).any(|w| w[0] == "--device" && w[1] == "sim")
        || args.iter().any(|a| a == "--device=sim");
    if wants_sim {
        return Ok(Device::simulated(sim_capacity));
    }
    match Device::cuda(0) {
        Ok(d) => Ok(d),
        Err(e) if std::env::var("REQUIRE_GPU").as_deref() == Ok("1") => {
            Err(format!("REQUIRE_GPU=1 but {e}"))
        }
        Err(e) => {
            eprintln!("no GPU ({e}): benchmarking on a simulated device instead (host memory; CPU cost only)");
            Ok(Device::simulated(sim_capacity))
        }
    }
}

/// Name, compute capability, memory and driver of the device, for result files.
pub fn describe_device(device: &Device) -> Value {
    let driver = if device.is_simulated() {
        "simulated".to_string()
    } else {
        let mut v = 0i32;
        // SAFETY: the driver is loaded (a CUDA device exists); writes one int.
        unsafe { rmm_cuda::cudarc::driver::sys::cuDriverGetVersion(&mut v) };
        format!("{}.{}", v / 1000, (v % 1000) / 10)
    };
    json!({
        "name": device.name().unwrap_or_default(),
        "compute_capability": device.compute_capability().map(|(a, b)| format!("{a}.{b}")).unwrap_or_default(),
        "total_memory_bytes": device.memory_info().map(|m| m.total).unwrap_or(0),
        "driver_version": driver,
    })
}

/// Prints rows as an aligned text table.
pub fn print_table(header: &[&str], rows: &[Vec<String>]) {
    let widths: Vec<usize> = (0..header.len())
        .map(|c| {
            rows.iter()
                .map(|r| r[c].len())
                .chain([header[c].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: Vec<&str>| {
        cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:>w$}"))
            .collect::<Vec<_>>()
            .join("  ")
    };
    println!("{}", line(header.to_vec()));
    for r in rows {
        println!("{}", line(r.iter().map(String::as_str).collect()));
    }
}

/// The value following `flag` in the arguments, e.g. `--json PATH`.
pub fn flag_value(args: &[String], flag: &str) -> Option<String> {
    args.windows(2).find(|w| w[0] == flag).map(|w| w[1].clone())
}

/// Applies a pipeline option the GPU pipeline benchmarks share (`--neighbors`, `--harmony KEY`,
/// which also points neighbors at harmony's output) to `config`; returns false for any other
/// flag.
pub fn pipeline_flag(
    config: &mut sc_pipeline::run::PipelineConfig,
    flag: &str,
    args: &mut impl Iterator<Item = String>,
) -> Result<bool, String> {
    match flag {
        "--neighbors" => config.n_neighbors = Some(15),
        "--harmony" => {
            let key = args.next().ok_or("--harmony KEY")?;
            config.harmony = Some(sc_pipeline::steps::HarmonyOptions {
                key,
                params: Default::default(),
            });
            config.neighbors_use_rep = Some(sc_pipeline::steps::HARMONY_ADJUSTED_BASIS.into());
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// The resources of the allocator benchmarks, configured as `benches/rmm/rmm_ra.cu` configures
/// RMM's: `cuda`, `async` (a CUDA pool of its own), `pool` (8 GiB initial, 16 GiB maximum),
/// `arena` (16 GiB), `binning` (bins of 256 KiB to 4 MiB over such a pool), `fixed` (1 MiB
/// blocks, 1024 per chunk), `expandable` (our pool on CUDA virtual memory, growing from nothing
/// up to 16 GiB: RMM has no such resource); `None` for another name.
pub fn bench_resource(
    name: &str,
    device: &Device,
) -> Option<rmm_core::Result<rmm_core::SharedResource>> {
    use rmm_core::*;
    use std::sync::Arc;
    const GIB: usize = 1 << 30;
    let cuda = || CudaResource::new(device);
    let pool = || PoolResource::new(cuda(), PoolOptions::sized(8 * GIB, Some(16 * GIB)));
    fn shared<R: MemoryResource + 'static>(
        r: rmm_core::Result<R>,
    ) -> rmm_core::Result<SharedResource> {
        r.map(|r| Arc::new(r) as SharedResource)
    }
    Some(match name {
        "cuda" => Ok(Arc::new(cuda()) as SharedResource),
        "async" => shared(AsyncResource::new(device, AsyncResourceOptions::default())),
        "pool" => shared(pool()),
        "arena" => shared(ArenaResource::new(
            cuda(),
            ArenaOptions {
                arena_size: Some(16 * GIB),
                ..Default::default()
            },
        )),
        "binning" => shared(
            pool()
                .map(Arc::new)
                .and_then(|p| BinningResource::with_range(p, 18, 22)),
        ),
        "fixed" => shared(FixedSizeResource::new(cuda(), 1 << 20, 1024)),
        "expandable" => shared(PoolResource::expandable(
            device,
            PoolOptions::sized(0, Some(16 * GIB)),
        )),
        _ => return None,
    })
}

/// One event of a trace: `size == 0` frees the slot, otherwise allocates `size` bytes into it.
#[derive(Clone, Copy)]
pub struct Op {
    pub slot: u32,
    pub size: u64,
}

pub struct Trace {
    pub ops: Vec<Op>,
    pub slots: usize,
}

/// The trace of thread `thread`, exactly as benches/WORKLOADS.md section A writes it.
pub fn trace(thread: usize, steps: usize, max_size: usize, max_usage: usize) -> Trace {
    let mut rng = SplitMix64::new(42 + thread as u64);
    let mut live: Vec<(u32, usize)> = Vec::new();
    let mut used = 0usize;
    let mut ops = Vec::with_capacity(steps + steps / 2);
    let mut slots = 0u32;
    for _ in 0..steps {
        let size = 1 + (rng.next() % max_size as u64) as usize;
        let free_it = !live.is_empty() && ((rng.next() & 1) == 1 || used + size > max_usage);
        if free_it {
            let k = (rng.next() % live.len() as u64) as usize;
            let (slot, bytes) = live.swap_remove(k);
            ops.push(Op { slot, size: 0 });
            used -= bytes;
        } else {
            ops.push(Op {
                slot: slots,
                size: size as u64,
            });
            live.push((slots, size));
            slots += 1;
            used += size;
        }
    }
    ops.extend(live.iter().map(|&(slot, _)| Op { slot, size: 0 }));
    Trace {
        ops,
        slots: slots as usize,
    }
}

/// RMM's own grid (its `random_allocations` benchmark): `2 n` steps of a size of 1 to
/// `max_size` bytes; with blocks live, an allocation with probability 73% while fewer than `n`
/// were made and the usage stays under `max_usage`, otherwise the free of a random live block;
/// what is live at the end is freed. SplitMix64 (seed 42) in place of RMM's
/// `std::default_random_engine`, the same in `benches/rmm/rmm_ra.cu`.
pub fn grid_trace(n: usize, max_size: usize, max_usage: usize) -> Trace {
    let mut rng = SplitMix64::new(42);
    let mut live: Vec<(u32, usize)> = Vec::new();
    let (mut used, mut made) = (0usize, 0usize);
    let mut ops = Vec::with_capacity(2 * n);
    for _ in 0..2 * n {
        let size = 1 + (rng.next() % max_size as u64) as usize;
        let allocate =
            live.is_empty() || (rng.next() % 100 < 73 && made < n && used + size < max_usage);
        if allocate {
            ops.push(Op {
                slot: made as u32,
                size: size as u64,
            });
            live.push((made as u32, size));
            made += 1;
            used += size;
        } else {
            let k = (rng.next() % live.len() as u64) as usize;
            let (slot, bytes) = live.swap_remove(k);
            ops.push(Op { slot, size: 0 });
            used -= bytes;
        }
    }
    ops.extend(live.iter().map(|&(slot, _)| Op { slot, size: 0 }));
    Trace { ops, slots: made }
}

/// Cells `first..first + n` as the pipeline's per-cell steps leave them, for benchmarks of what
/// the host does with them: the cell names, `batch` (4) and `cell_type` (8) categoricals, the QC
/// columns, a 50-component `X_pca`, and an empty stand-in X of 2,000 genes.
pub fn cells_after_pca(first: usize, n: usize) -> sc_pipeline::AnnData {
    use sc_pipeline::anndata::{ArrayData, Column, DataFrame, DenseArray, Matrix};
    const QC_COLUMNS: [&str; 7] = [
        "n_genes_by_counts",
        "log1p_n_genes_by_counts",
        "total_counts",
        "log1p_total_counts",
        "total_counts_mt",
        "pct_counts_mt",
        "n_genes",
    ];
    let x = sc_kernels::CsrMatrix::zeros(n, 2000);
    let mut a = sc_pipeline::AnnData::new(Matrix::Sparse(x));
    a.obs = DataFrame::with_index((first..first + n).map(|i| format!("cell_{i:07}")).collect());
    for (name, k) in [("batch", 4), ("cell_type", 8)] {
        let labels: Vec<String> = (0..n).map(|i| format!("{name}{}", i % k)).collect();
        let column = Column::categorical_from_labels(&labels);
        a.obs.set(name, column).expect("one label a cell");
    }
    for c in QC_COLUMNS {
        let values = (0..n).map(|v| v as f64).collect();
        a.obs
            .set_values(c, ArrayData::F64(values))
            .expect("one value a cell");
    }
    let pca = DenseArray::matrix_f32(n, 50, vec![0.5; n * 50]).expect("n x 50 values");
    a.obsm.insert("X_pca".into(), pca);
    a
}

/// Workload C's points (`benches/WORKLOADS.md`): N x D, 8 cell types, 4 batches (a shift of
/// every component per batch), noise in every component; seeded, the same on every call.
pub fn workload_c_points(n: usize, d: usize) -> (sc_kernels::DenseMatrix<f32>, Vec<u32>) {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let centre: Vec<Vec<f32>> = (0..8)
        .map(|_| (0..d).map(|_| rng.random_range(-8.0f32..8.0)).collect())
        .collect();
    let shift: Vec<Vec<f32>> = (0..4)
        .map(|_| (0..d).map(|_| rng.random_range(-2.0f32..2.0)).collect())
        .collect();
    let mut data = Vec::with_capacity(n * d);
    let mut batches = Vec::with_capacity(n);
    for _ in 0..n {
        let (t, b) = (rng.random_range(0..8), rng.random_range(0..4u32));
        batches.push(b);
        for j in 0..d {
            let noise: f32 = (0..3).map(|_| rng.random_range(-1.0f32..1.0)).sum();
            data.push(centre[t][j] + shift[b as usize][j] + noise);
        }
    }
    (
        sc_kernels::DenseMatrix::new(n, d, data).expect("n x d values"),
        batches,
    )
}
