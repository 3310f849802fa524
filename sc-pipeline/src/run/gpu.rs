//! A run's GPU: its device resource stack, built here and nowhere else, and the context the
//! steps run with.
//!
//! The stack, from the driver up: the allocator of `--allocator` (made the device's current
//! resource), a limiting adaptor holding the run to its device memory budget, the allocation
//! log (`--memory-snapshot`, `--allocation-log`), the timeline recorder (`--memory-timeline`),
//! and the statistics adaptor every step's device figures come from.

use super::allocator::{self, AllocatorChoice};
use super::recorders::{AllocationLog, MemoryRecorders};
use super::PipelineConfig;
use crate::report::GpuTotals;
use crate::run::memory_plan::{self, Execution, MemoryPlan};
use crate::{AnnData, Error, Result};
use rmm_core::adaptors::{LimitingAdaptor, TimelineAdaptor};
use rmm_core::{Device, SharedResource, StatisticsAdaptor, Stream};
use sc_kernels::gpu::module_cache::KernelSource;
use sc_kernels::gpu::GpuContext;
use std::sync::Arc;

/// What a GPU run needs: the context every step runs on and the statistics adaptor that the
/// context's resource is (for each step's peak device memory and allocation count).
#[derive(Clone)]
pub struct GpuRun {
    pub ctx: Arc<GpuContext>,
    pub stats: Arc<StatisticsAdaptor<SharedResource>>,
    /// Device bytes the run may allocate (what the planner fits X into; the caller enforces
    /// it, e.g. with a `LimitingAdaptor` in the resource).
    pub memory_budget: u64,
    /// How X is held: in device memory or streamed (see [`crate::run::memory_plan`]).
    pub execution: Execution,
    /// The warm-up thread, joined when the last clone of the run is dropped.
    background: Arc<Background>,
    /// The libraries' rehearsal thread ([`sc_kernels::warm_up::rehearse_libraries`]), joined
    /// the same way.
    rehearsal: Arc<Background>,
}

/// A thread that uses the GPU: it must end before the process does (a thread inside a CUDA call
/// while the driver tears down at exit crashes the process), so dropping this joins it.
#[derive(Default)]
struct Background(parking_lot::Mutex<Option<std::thread::JoinHandle<sc_kernels::Result<()>>>>);

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(h) = self.0.lock().take() {
            // Its failure (if any) already surfaced, or will not matter, in the steps.
            let _ = h.join();
        }
    }
}

/// The device memory options of a run (`scpipe run`'s `--allocator`, `--pool-*`,
/// `--device-memory-limit`, `--execution` and the memory recorders).
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceOptions {
    pub allocator: AllocatorChoice,
    pub pool_initial: Option<usize>,
    pub pool_max: Option<usize>,
    pub device_memory_limit: Option<usize>,
    pub execution: Execution,
    /// Record the timeline of the GPU's memory.
    pub timeline: bool,
    /// Log every allocation and free.
    pub allocation_log: bool,
}

impl Default for DeviceOptions {
    fn default() -> Self {
        DeviceOptions {
            allocator: AllocatorChoice::Pool,
            pool_initial: None,
            pool_max: None,
            device_memory_limit: None,
            execution: Execution::Auto,
            timeline: false,
            allocation_log: false,
        }
    }
}

impl GpuRun {
    /// The whole-run GPU figures for the report: the run's statistics and compile counters.
    pub fn totals(&self) -> GpuTotals {
        let stats = self.stats.statistics();
        let t = self.ctx.transfers();
        let c = sc_kernels::gpu::module_cache::compile_stats();
        GpuTotals {
            peak_device_bytes: stats.bytes.peak.max(0) as u64,
            allocations: stats.allocations.total.max(0) as u64,
            host_to_device_bytes: t.host_to_device,
            device_to_host_bytes: t.device_to_host,
            kernels_built_in: c.built_in,
            kernels_compiled: c.compiled,
            kernel_compile_seconds: c.compile_seconds,
            kernels_from_disk_cache: c.disk_hits,
            kernels_from_ptx: c.from_ptx,
        }
    }

    /// A context on `stream` whose every allocation goes through a statistics adaptor over
    /// `resource`.
    pub fn new(device: &Device, stream: &Stream, resource: SharedResource) -> Result<Self> {
        let stats = Arc::new(StatisticsAdaptor::new(resource));
        let shared: SharedResource = stats.clone();
        let ctx =
            GpuContext::new(device, stream, shared).map_err(|e| Error::Device(e.to_string()))?;
        let free = device
            .memory_info()
            .map_err(|e| Error::Device(format!("reading the GPU's free memory: {e}")))?
            .free;
        Ok(GpuRun {
            ctx: Arc::new(ctx),
            stats,
            memory_budget: default_budget(free as u64),
            execution: Execution::Auto,
            background: Arc::default(),
            rehearsal: Arc::default(),
        })
    }

    /// GPU `ordinal` with the whole resource stack of `options` (see the module documentation),
    /// a stream for the steps and the pinned staging buffers of its transfers, and the memory
    /// recorders asked for. The libraries' rehearsal for `config`'s PCA starts first, on a
    /// thread of its own.
    pub fn set_up(
        ordinal: usize,
        options: &DeviceOptions,
        config: Option<&PipelineConfig>,
    ) -> Result<(GpuRun, MemoryRecorders)> {
        let device =
            Device::cuda(ordinal).map_err(|e| Error::Device(format!("GPU {ordinal}: {e}")))?;
        // The libraries load beside the rest of the set-up (the pool, the pinned buffers) and
        // the input's read: in a fresh process they are the longest part of the warm-up.
        let rehearsal = Arc::new(Background(parking_lot::Mutex::new(Some(
            sc_kernels::warm_up::rehearse_libraries(&device, config.and_then(pca_rehearsal)),
        ))));
        let memory = device
            .memory_info()
            .map_err(|e| Error::Device(format!("GPU {ordinal} memory: {e}")))?;
        let budget = memory_budget(
            options.device_memory_limit,
            options.pool_max,
            memory.free as u64,
            memory.total as u64,
        )?;
        let built = allocator::build(
            options.allocator,
            &device,
            options.pool_initial,
            options.pool_max,
        )?;
        let mut resource: SharedResource =
            Arc::new(LimitingAdaptor::new(built.resource, budget as usize));
        let mut recorders = MemoryRecorders::default();
        if options.allocation_log {
            let log = AllocationLog::over(resource)?;
            resource = log.adaptor.clone();
            recorders.log = Some(log);
        }
        if options.timeline {
            let mut t = TimelineAdaptor::new(resource);
            if let Some(p) = built.probe {
                t = t.with_probe(move || p());
            }
            let t = Arc::new(t);
            resource = t.clone();
            recorders.timeline = Some(t);
        }
        let stream = device
            .new_stream()
            .map_err(|e| Error::Device(format!("creating a stream on GPU {ordinal}: {e}")))?;
        let mut run =
            GpuRun::new(&device, &stream, resource)?.with_memory(budget, options.execution);
        run.rehearsal = rehearsal;
        // The pinned staging buffers of the upload and of the output's downloads (on the copy
        // lane), made now, beside the input's read: pinning takes 0.05-0.1 s a GPU, and made
        // later it would wait for the kernels queued meanwhile (see
        // `GpuContext::prepare_transfers`).
        run.ctx
            .prepare_transfers()
            .and_then(|()| run.ctx.copy_lane()?.prepare_transfers())
            .map_err(|e| Error::Device(format!("GPU {ordinal}: pinned staging buffers: {e}")))?;
        Ok((run, recorders))
    }

    /// The same run with another budget and placement rule.
    pub fn with_memory(mut self, budget: u64, execution: Execution) -> Self {
        self.memory_budget = budget;
        self.execution = execution;
        self
    }

    /// How this run holds `adata`'s X for `config`.
    pub fn plan(&self, adata: &AnnData, config: &PipelineConfig) -> MemoryPlan {
        memory_plan::plan(
            adata.n_obs(),
            adata.n_vars(),
            adata.x.stored_values(),
            config,
            self.memory_budget,
            self.execution,
        )
    }

    /// Starts loading the kernels and the run's library handles on a background thread (see
    /// [`sc_kernels::warm_up::warm_up_in_background`]), and the libraries' rehearsal if
    /// [`GpuRun::set_up`] did not start it; a failure there resurfaces in the step that needs
    /// what failed. With `config`, only the modules of its steps (the step table's `kernels`)
    /// are loaded, in the warm-up's order, and the PCA of the run is rehearsed at its size
    /// ([`pca_rehearsal`]); without, every module.
    pub fn warm_up(&self, config: Option<&PipelineConfig>) {
        self.warm_up_modules(config, &[]);
    }

    /// [`GpuRun::warm_up`] for the generated demo, whose blocks the synthetic model's kernels
    /// make.
    pub fn warm_up_generated(&self, config: &PipelineConfig) {
        self.warm_up_modules(Some(config), &[sc_kernels::synth::KERNELS]);
    }

    fn warm_up_modules(&self, config: Option<&PipelineConfig>, extra: &[KernelSource]) {
        {
            // A run made by `GpuRun::new` has not started the libraries' rehearsal yet.
            let mut rehearsal = self.rehearsal.0.lock();
            if rehearsal.is_none() {
                *rehearsal = Some(sc_kernels::warm_up::rehearse_libraries(
                    self.ctx.device(),
                    config.and_then(pca_rehearsal),
                ));
            }
        }
        let modules = match config {
            Some(c) => {
                let mut used: Vec<KernelSource> = super::table::all_enabled(c)
                    .flat_map(|s| s.kernels.iter().copied())
                    .collect();
                used.extend_from_slice(extra);
                sc_kernels::warm_up::modules_for(&used)
            }
            None => sc_kernels::warm_up::all_modules(),
        };
        let handle = sc_kernels::warm_up::warm_up_in_background(&self.ctx, modules);
        if let Some(previous) = self.background.0.lock().replace(handle) {
            let _ = previous.join();
        }
    }
}

/// The PCA the warm-up rehearses for `config`: `(genes, comps)` when the run keeps a known
/// number of highly variable genes; `None` with `SCPIPE_REHEARSE_PCA=0`.
pub fn pca_rehearsal(config: &PipelineConfig) -> Option<(usize, usize)> {
    if std::env::var_os("SCPIPE_REHEARSE_PCA").is_some_and(|v| v == "0") {
        return None;
    }
    let genes = config
        .hvg
        .as_ref()
        .filter(|_| config.subset_hvg)?
        .n_top_genes?;
    Some((genes, config.n_comps?.min(genes.saturating_sub(1))))
}

/// The default device memory budget: this fraction of the memory free when the run starts
/// (the rest is left to the CUDA context's own growth and to other users of the GPU).
pub const DEFAULT_BUDGET_FRACTION: f64 = 0.9;

/// [`DEFAULT_BUDGET_FRACTION`] of `free` bytes.
pub fn default_budget(free: u64) -> u64 {
    (free as f64 * DEFAULT_BUDGET_FRACTION) as u64
}

/// The run's device memory budget: `--device-memory-limit` (at most the GPU's memory), else
/// the default share of the free memory; never above `--pool-max`, which caps the pool anyway.
pub fn memory_budget(
    limit: Option<usize>,
    pool_max: Option<usize>,
    free: u64,
    total: u64,
) -> Result<u64> {
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    let budget = match limit {
        Some(0) => {
            return Err(Error::param(
                "--device-memory-limit",
                "must be more than 0 bytes",
            ))
        }
        Some(l) if l as u64 > total => {
            return Err(Error::param(
                "--device-memory-limit",
                format!(
                    "{:.2} GiB is more than the GPU has ({:.2} GiB)",
                    gib(l as u64),
                    gib(total)
                ),
            ))
        }
        Some(l) => {
            if l as u64 > free {
                eprintln!(
                    "notice: --device-memory-limit {:.2} GiB is more than the {:.2} GiB free now; the run may end out of memory",
                    gib(l as u64),
                    gib(free)
                );
            }
            l as u64
        }
        None => default_budget(free),
    };
    Ok(pool_max.map_or(budget, |m| budget.min(m as u64)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn the_budget_is_the_limit_or_most_of_the_free_memory_and_never_above_the_pool() {
        assert_eq!(
            memory_budget(Some(8 << 30), None, 70 * GIB, 80 * GIB).unwrap(),
            8 * GIB
        );
        assert_eq!(
            memory_budget(None, None, 70 * GIB, 80 * GIB).unwrap(),
            default_budget(70 * GIB)
        );
        assert_eq!(
            memory_budget(None, Some(4 << 30), 70 * GIB, 80 * GIB).unwrap(),
            4 * GIB
        );
        // Above the free memory is allowed (with a notice), above the GPU's memory is not.
        assert_eq!(
            memory_budget(Some(75 << 30), None, 70 * GIB, 80 * GIB).unwrap(),
            75 * GIB
        );
        let e = memory_budget(Some(96 << 30), None, 70 * GIB, 80 * GIB)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--device-memory-limit") && e.contains("more than the GPU has"),
            "{e}"
        );
        let e = memory_budget(Some(0), None, 70 * GIB, 80 * GIB)
            .unwrap_err()
            .to_string();
        assert!(e.contains("more than 0"), "{e}");
    }
}
