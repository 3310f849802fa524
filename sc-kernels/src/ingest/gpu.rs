//! The GPU twins of ingest's projection and UMAP transform: the new cells' projection on the
//! reference's principal axes (`ingest_project`, a warp a cell) and umap-learn's transform
//! (`umap_transform` in `umap.cu`, a thread a new cell, the reference's layout fixed), each
//! with the host's operations in the host's order: the host's values, bit for bit. The
//! neighbour search between them is [`crate::neighbors::exact::knn_query_gpu`].

use super::{centring_shift, Transform, TransformParams};
use crate::csr::CsrMatrix;
use crate::dense::DenseMatrix;
use crate::error::{KernelError, Result};
use crate::gpu::module_cache::KernelSource;
use crate::gpu::{grid_for, GpuContext};
use crate::neighbors::Knn;
use rmm_cuda::cudarc::driver::PushKernelArg;

pub(crate) const SRC: KernelSource = KernelSource {
    name: "ingest",
    source: include_str!("ingest.cu"),
};

/// The modules ingest launches (its projection; the transform's is UMAP's).
pub const KERNELS: [KernelSource; 2] = [SRC, crate::umap::gpu::SRC];

/// [`super::project_pca`] of CSR values on `ctx`'s GPU: the same bits.
pub fn project_pca_gpu(
    ctx: &GpuContext,
    x: &CsrMatrix<f32>,
    basis: &DenseMatrix<f32>,
    mean: Option<&[f64]>,
) -> Result<DenseMatrix<f32>> {
    let shift = centring_shift(x.n_cols, basis, mean)?;
    let (n, k) = (x.n_rows, basis.n_cols);
    let k32 = u32::try_from(k)
        .map_err(|_| KernelError::Unsupported(format!("{k} principal axes on the GPU")))?;
    if n == 0 || k == 0 {
        return Ok(DenseMatrix::zeros(n, k));
    }
    ctx.bind_to_thread()?;
    let indptr = ctx.upload(&x.indptr)?;
    let indices = ctx.upload(&x.indices)?;
    let values = ctx.upload(&x.data)?;
    let (axes, shift) = (ctx.upload(&basis.data)?, ctx.upload(&shift)?);
    let out = ctx.alloc::<f32>(n * k)?;
    let n64 = n as u64;
    let f = ctx.function(SRC, "ingest_project")?;
    let mut l = ctx.launcher(&f);
    l.arg(&indptr).arg(&indices).arg(&values).arg(&n64);
    l.arg(&axes).arg(&k32).arg(&shift).arg(&out);
    ctx.launch(l, grid_for(n * 32), "ingest_project")?;
    DenseMatrix::new(n, k, ctx.download(&out)?)
}

/// [`super::umap_transform`] with each new cell's epochs on `ctx`'s GPU: the same layout, bit
/// for bit. Layouts of more than [`crate::umap::gpu::MAX_DIMS`] coordinates run on the host.
pub fn umap_transform_gpu(
    ctx: &GpuContext,
    layout: &DenseMatrix<f32>,
    knn: &Knn,
    params: &TransformParams,
) -> Result<DenseMatrix<f32>> {
    let t = Transform::new(layout, knn, params)?;
    let (n, k, dim) = (knn.n_obs, knn.k, layout.n_cols);
    if dim == 0 || dim > crate::umap::gpu::MAX_DIMS || u32::try_from(k).is_err() {
        return super::umap_transform(layout, knn, params);
    }
    if n == 0 {
        return Ok(DenseMatrix::zeros(0, dim));
    }
    ctx.bind_to_thread()?;
    let reference = ctx.upload(&layout.data)?;
    let nbrs = ctx.upload(&knn.indices)?;
    let weights = ctx.upload(&t.weights)?;
    let per_sample = ctx.alloc::<f64>(n * k)?;
    let next_sample = ctx.alloc::<f64>(n * k)?;
    let next_negative = ctx.alloc::<f64>(n * k)?;
    let out = ctx.alloc::<f32>(n * dim)?;
    let (n_ref, n64, k32, dim32) = (layout.n_rows as u64, n as u64, k as u32, dim as i32);
    let epochs = t.n_epochs as u64;
    let g = t.gradient;
    let negative = i32::from(g.negative_samples);
    let f = ctx.function(crate::umap::gpu::SRC, "umap_transform")?;
    let mut l = ctx.launcher(&f);
    l.arg(&reference).arg(&n_ref).arg(&nbrs).arg(&weights);
    l.arg(&n64).arg(&k32).arg(&dim32).arg(&epochs);
    l.arg(&t.max).arg(&t.floor).arg(&t.alpha0).arg(&t.rate);
    l.arg(&g.a)
        .arg(&g.b)
        .arg(&g.gamma)
        .arg(&negative)
        .arg(&g.seed);
    l.arg(&per_sample)
        .arg(&next_sample)
        .arg(&next_negative)
        .arg(&out);
    ctx.launch(l, grid_for(n), "umap_transform")?;
    DenseMatrix::new(n, dim, ctx.download(&out)?)
}
