//! Warming a GPU up for the steps, on background threads: the cuBLAS and cuSOLVER libraries
//! loaded and the PCA of the run rehearsed as soon as the device exists
//! ([`rehearse_libraries`]), then every step's kernel module loaded and the run's own library
//! handles made ([`warm_up_in_background`]). It
//! sits above the steps' modules (it lists them), so the shared GPU layer (`gpu`) knows none of
//! its users.

use crate::gpu::{module_cache, GpuContext};

/// Every kernel module, in the order the warm-up compiles them: the first steps' modules, then
/// the ones that take NVRTC longest (neighbors, harmony) while the cheap ones follow.
pub fn all_modules() -> Vec<module_cache::KernelSource> {
    vec![
        crate::gpu::reduce::SRC,
        crate::qc::KERNELS,
        crate::pca::KERNELS,
        crate::harmony::KERNELS,
        crate::neighbors::KERNELS[0],
        crate::neighbors::KERNELS[1],
        crate::neighbors::KERNELS[2],
        crate::neighbors::KERNELS[3],
        crate::neighbors::KERNELS[4],
        crate::gpu::scan::SRC,
        crate::gpu::compact::SRC,
        crate::normalize::KERNELS,
        crate::log1p::KERNELS,
        crate::hvg::KERNELS,
        crate::scale::KERNELS,
        crate::synth::KERNELS,
        crate::umap::KERNELS[0],
        crate::umap::KERNELS[1],
        crate::leiden::KERNELS,
        crate::rank_genes::KERNELS[0],
        crate::rank_genes::KERNELS[1],
        crate::rank_genes::KERNELS[2],
        crate::regress::KERNELS,
        crate::tsne::KERNELS[0],
        crate::embedding_density::KERNELS[0],
        crate::pearson::KERNELS[0],
        crate::diffmap::KERNELS[0],
        crate::draw_graph::KERNELS[0],
        crate::kmeans::KERNELS[0],
        crate::ingest::KERNELS[0],
        crate::combat::KERNELS[0],
        crate::paga::KERNELS[0],
        crate::dpt::KERNELS[0],
        crate::score_genes::KERNELS[0],
        crate::aggregate::KERNELS[0],
        crate::scrublet::KERNELS[0],
        crate::scrublet::KERNELS[1],
        crate::gpu::matrix::SRC,
        crate::gpu::dense_reduce::SRC,
        crate::gpu::bounds::SRC,
    ]
}

/// The modules of the shared GPU layer, which every step may use (reductions, scans,
/// compaction).
fn shared_modules() -> [module_cache::KernelSource; 3] {
    [
        crate::gpu::reduce::SRC,
        crate::gpu::scan::SRC,
        crate::gpu::compact::SRC,
    ]
}

/// What a run whose steps use the modules `steps` compiles at warm-up: those and the shared
/// layer's, in [`all_modules`]' order. The others are left to their first use, if any (a run
/// without harmony never waits for NVRTC on harmony's module).
pub fn modules_for(steps: &[module_cache::KernelSource]) -> Vec<module_cache::KernelSource> {
    let shared = shared_modules();
    all_modules()
        .into_iter()
        .filter(|m| shared.iter().chain(steps).any(|n| n.name == m.name))
        .collect()
}

/// Threads that compile modules at warm-up: NVRTC slows down when many compile at once (11
/// modules on 11 threads took twice their serial time each), a few side by side do not.
const COMPILE_THREADS: usize = 3;

/// Loads (or compiles) `modules` in order (e.g. [`all_modules`] or [`modules_for`] a run), with
/// each of their kernels (see [`GpuContext::load_kernels`]), and creates `ctx`'s cuBLAS and
/// cuSOLVER handles, on a background thread, so a pipeline that starts by reading a file finds
/// them ready. The libraries themselves are best loaded earlier still, by
/// [`rehearse_libraries`].
pub fn warm_up_in_background(
    ctx: &std::sync::Arc<GpuContext>,
    modules: Vec<module_cache::KernelSource>,
) -> std::thread::JoinHandle<crate::Result<()>> {
    let ctx = ctx.clone();
    std::thread::spawn(move || {
        let gpu = |e: rmm_cuda::CudaError| crate::KernelError::Gpu(format!("warm-up: {e}"));
        ctx.device().bind().map_err(gpu)?;
        // A few threads take the modules in order; the library handles meanwhile.
        let next = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            let workers: Vec<_> = (0..COMPILE_THREADS)
                .map(|_| {
                    let (ctx, modules, next) = (&ctx, &modules, &next);
                    s.spawn(move || -> crate::Result<()> {
                        ctx.device().bind().map_err(gpu)?;
                        loop {
                            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            let Some(&m) = modules.get(i) else {
                                return Ok(());
                            };
                            ctx.load_kernels(m)?;
                        }
                    })
                })
                .collect();
            ctx.blas()?;
            ctx.solver()?;
            workers
                .into_iter()
                .try_for_each(|h| h.join().expect("a module load panicked"))
        })
    })
}

/// Loads cuBLAS and cuSOLVER (hundreds of milliseconds for cuSOLVER) on scratch contexts of
/// `device` (a stream and resource of their own), on threads of their own: started as soon as
/// the device exists, they overlap the rest of the GPU's set-up and the input's read instead of
/// the first step that needs them. With `pca_shape = (genes, comps)` each then rehearses its
/// part of a PCA of that many genes (CUDA loads a library's kernels on their first launch,
/// which would otherwise land in the pipeline's PCA step): cuSOLVER's eigensolver, the longest
/// (about 0.2 s on an H200), beside cuBLAS's Gram matrix rather than after it.
pub fn rehearse_libraries(
    device: &rmm_core::Device,
    pca_shape: Option<(usize, usize)>,
) -> std::thread::JoinHandle<crate::Result<()>> {
    let device = device.clone();
    let shape = pca_shape.filter(|&(g, k)| g >= 2 && k >= 1);
    std::thread::spawn(move || {
        std::thread::scope(|s| {
            let solver = s.spawn(|| {
                on_scratch_context(&device, |ctx| {
                    ctx.solver()?;
                    match shape {
                        Some((g, k)) => crate::pca::gpu::rehearse_eigen(ctx, g, k),
                        None => Ok(()),
                    }
                })
            });
            let blas = on_scratch_context(&device, |ctx| {
                ctx.blas()?;
                match shape {
                    Some((g, _)) => crate::pca::gpu::rehearse_gram(ctx, g),
                    None => Ok(()),
                }
            });
            let solver = solver.join().expect("the cuSOLVER rehearsal panicked");
            blas.and(solver)
        })
    })
}

/// `f` on a context of `device` with a stream and a resource of its own (the device bound to
/// this thread).
fn on_scratch_context(
    device: &rmm_core::Device,
    f: impl FnOnce(&GpuContext) -> crate::Result<()>,
) -> crate::Result<()> {
    let gpu = |e: rmm_cuda::CudaError| crate::KernelError::Gpu(format!("warm-up: {e}"));
    device.bind().map_err(gpu)?;
    let stream = device.new_stream().map_err(gpu)?;
    let scratch: rmm_core::SharedResource =
        std::sync::Arc::new(rmm_core::CudaResource::new(device));
    let ctx = GpuContext::new(device, &stream, scratch)?;
    f(&ctx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_warms_up_the_shared_modules_and_its_steps_in_the_usual_order() {
        let names =
            |v: Vec<module_cache::KernelSource>| v.iter().map(|m| m.name).collect::<Vec<_>>();
        let run = modules_for(&[crate::neighbors::KERNELS[1], crate::qc::KERNELS]);
        assert_eq!(
            names(run),
            names(vec![
                crate::gpu::reduce::SRC,
                crate::qc::KERNELS,
                crate::neighbors::KERNELS[1],
                crate::gpu::scan::SRC,
                crate::gpu::compact::SRC,
            ])
        );
        assert_eq!(modules_for(&all_modules()).len(), all_modules().len());
    }

    #[test]
    fn every_module_has_kernels_and_the_warm_up_finds_them_all() {
        // Every module of the pipeline has kernels, and the warm-up finds them all.
        let modules = all_modules();
        assert!(modules.iter().all(|m| !m.kernel_names().is_empty()));
        let total: usize = modules.iter().map(|m| m.kernel_names().len()).sum();
        let declared: usize = modules
            .iter()
            .map(|m| m.source.matches("__global__").count())
            .sum();
        assert_eq!(total, declared);
        let knn = crate::neighbors::scan::device::SRC.kernel_names();
        for name in ["transpose_pad", "row_norms", "knn_scan", "knn_refine"] {
            assert!(knn.contains(&name), "{name} in {knn:?}");
        }
    }
}
