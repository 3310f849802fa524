//! Matrices written to an h5ad ([`write_matrix`]): host ones as their elements, and X and
//! `raw.X` from GPU memory: each GPU copies its rows straight into their place
//! in the file (a shared map of the place HDF5 reserved, see [`parallel_fill`]), all GPUs at
//! once, through its pinned staging buffers. No host copy of the matrix is made, so a split
//! run's output starts to be written as soon as its ranks are done, and the host's memory
//! holds the matrix once (in the file) instead of twice.

use super::elements::{
    create_in_place, element_path, new_group, set_encoding, write_csr, write_indptr,
    write_int_list_attr, write_numeric_array,
};
use super::hdf5_access::H5Ctx;
use crate::anndata::{
    block_parts, gather_bytes, stacked_indptr, BlockParts, DeviceData, DeviceMatrix, Matrix,
};
use crate::io::encoding::{device_error, IndexWidth};
use crate::io::file_space::parallel_fill;
use crate::Result;
use hdf5::{Group, H5Type};
use rmm_core::DeviceVec;
use sc_kernels::gpu::GpuContext;
use std::path::Path;

/// A matrix as anndata's `csr_matrix` group or dense `array`, from host or GPU memory.
pub(crate) fn write_matrix(ctx: &H5Ctx, parent: &Group, name: &str, m: &Matrix) -> Result<()> {
    match m {
        Matrix::Sparse(csr) => write_csr(ctx, parent, name, csr),
        Matrix::Dense(d) => write_numeric_array(ctx, parent, name, &[d.n_rows, d.n_cols], &d.data),
        Matrix::Device(d) => write_device_matrix(ctx, parent, name, d),
    }
}

/// Writes a device matrix (one GPU's, or blocks of rows on several) as [`write_matrix`] writes
/// its host copy. Small matrices and CSR matrices whose indices need int64 on disk are
/// downloaded and written from the host.
pub(crate) fn write_device_matrix(
    ctx: &H5Ctx,
    parent: &Group,
    name: &str,
    m: &DeviceMatrix,
) -> Result<()> {
    // A streamed matrix lives in host memory: written from there, not copied.
    match &m.data {
        DeviceData::StreamedCsr(s) => return write_csr(ctx, parent, name, &s.host),
        DeviceData::StreamedDense(s) => {
            let shape = [s.host.n_rows, s.host.n_cols];
            return write_numeric_array(ctx, parent, name, &shape, &s.host.data);
        }
        _ => {}
    }
    let (n_rows, n_cols) = m.shape();
    let parts = block_parts(&m.blocks().iter().collect::<Vec<_>>());
    let nnz = m.stored_values();
    let in_place = parallel_fill::wanted(&ctx.path, nnz * std::mem::size_of::<f32>());
    match parts {
        Some(BlockParts::Dense(parts)) if in_place => {
            let ds = fill_dataset::<f32, f32>(ctx, parent, name, &[n_rows, n_cols], &parts)?;
            set_encoding(ctx, &ds, "array", "0.2.0", &element_path(parent, name))
        }
        Some(BlockParts::Csr(parts))
            if in_place && IndexWidth::for_matrix(nnz as u64, n_cols) == IndexWidth::I32 =>
        {
            let element = element_path(parent, name);
            let g = new_group(ctx, parent, name, "csr_matrix", "0.1.0")?;
            let shape = [n_rows as i64, n_cols as i64];
            write_int_list_attr(ctx, &g, "shape", &shape, &element)?;
            let data: Vec<_> = parts.iter().map(|&(c, m)| (c, &m.data)).collect();
            fill_dataset::<f32, f32>(ctx, &g, "data", &[nnz], &data)?;
            // int32 on disk: the same bytes as the u32 column indices, each below n_cols,
            // which fits in an int32 here.
            let indices: Vec<_> = parts.iter().map(|&(c, m)| (c, &m.indices)).collect();
            fill_dataset::<u32, i32>(ctx, &g, "indices", &[nnz], &indices)?;
            // On the copy lanes too: the GPUs' own streams are busy with neighbors meanwhile.
            let indptr = stacked_indptr(&parts, true).map_err(|e| device_error(&element, e))?;
            write_indptr(ctx, &g, IndexWidth::I32, &indptr)
        }
        _ => {
            let host = m.download().map_err(|e| device_error(name, e))?;
            write_matrix(ctx, parent, name, &host)
        }
    }
}

/// Makes the copy lanes that writing `m` downloads on, and their pinned buffers, before other
/// work is queued on its GPUs: made while long kernels run, they would wait for them (see
/// [`GpuContext::prepare_transfers`]).
pub(crate) fn prepare_device_write(m: &crate::anndata::Matrix) -> Result<()> {
    if let crate::anndata::Matrix::Device(d) = m {
        for b in d.blocks() {
            b.ctx
                .copy_lane()
                .and_then(GpuContext::prepare_transfers)
                .map_err(|e| device_error("X", e))?;
        }
    }
    Ok(())
}

/// A dataset of `shape` (stored as `D`, whose bytes are those of `T`) filled from the device
/// vectors laid one after the other.
fn fill_dataset<T: bytemuck::Pod + Send + Sync, D: H5Type>(
    ctx: &H5Ctx,
    parent: &Group,
    name: &str,
    shape: &[usize],
    parts: &[(&GpuContext, &DeviceVec<T>)],
) -> Result<hdf5::Dataset> {
    debug_assert_eq!(std::mem::size_of::<T>(), std::mem::size_of::<D>());
    let (ds, offset) = create_in_place::<D>(ctx, parent, name, shape)?;
    let len = parts.iter().map(|(_, v)| v.len()).sum::<usize>() * std::mem::size_of::<T>();
    fill_from_devices(&ctx.path, offset, len, parts, &element_path(parent, name))?;
    Ok(ds)
}

fn fill_from_devices<T: bytemuck::Pod + Send + Sync>(
    path: &Path,
    offset: u64,
    len: usize,
    parts: &[(&GpuContext, &DeviceVec<T>)],
    element: &str,
) -> Result<()> {
    parallel_fill::fill_with(path, offset, len, |start, dst| {
        // The fills' own threads: neighbors keeps rayon's global pool busy meanwhile.
        gather_bytes(parts, start, dst, parallel_fill::writers())
            .map_err(|e| device_error(element, e))
    })
}
