//! Writing AnnData as a zarr store (`-o OUT.zarr`), in the layout anndata writes with zarr
//! format 3 and reads with `anndata.read_zarr`: the same elements and encodings as the h5ad
//! writer, each array in chunks that are compressed and written in parallel. The store is
//! written under a temporary name and moved into place whole ([`StagedFile`]).
//!
//! X and `.raw` can be written on one thread while the rest is written on another
//! ([`ZarrWrite`]): they are different directories of the store.

use super::store::{
    child, copy_from, encoding, ChunkBuffers, ZarrCompression, ZarrStore, CHUNK_ELEMENTS,
};
use crate::anndata::{
    block_parts, gather_bytes, gather_bytes_direct, stacked_indptr, AnnData, ArrayData, BlockParts,
    Column, DataFrame, DenseArray, DenseMatrix, DeviceData, DeviceMatrix, Matrix, Raw, Value,
};
use crate::io::encoding::{device_error, index_name, scalar_data, CodeWidth, IndexWidth};
use crate::io::file_space::staged_file::StagedFile;
use crate::Result;
use rayon::prelude::*;
use rmm_core::DeviceVec;
use sc_kernels::gpu::GpuContext;
use sc_kernels::CsrMatrix;
use serde_json::{json, Map, Value as Json};
use std::collections::BTreeMap;
use std::path::Path;
use zarrs::array::DataType;

/// A zarr output being written (see the module documentation).
pub struct ZarrWrite {
    staged: StagedFile,
    store: ZarrStore,
}

impl ZarrWrite {
    /// Creates the store that becomes `path` (under a temporary name until [`ZarrWrite::close`]),
    /// with its root group.
    pub fn create(path: &Path, compression: ZarrCompression) -> Result<ZarrWrite> {
        let staged = StagedFile::new(path);
        std::fs::create_dir(staged.path()).map_err(|e| crate::Error::File {
            path: staged.path().to_path_buf(),
            message: format!("cannot create the zarr store: {e}"),
        })?;
        let store = ZarrStore::open(staged.path(), compression)?;
        store.put_group("/", encoding("anndata", "0.1.0"))?;
        Ok(ZarrWrite { staged, store })
    }

    /// X and `.raw` (matrices on a GPU are downloaded chunk by chunk; `.raw`'s shape is checked
    /// first: [`ZarrWrite::write_rest`] checks the rest against X's shape, without them).
    pub fn write_x_and_raw(&self, x: &Matrix, raw: Option<&Raw>) -> Result<()> {
        if let Some(raw) = raw {
            raw.validate_shapes(x.shape().0)?;
        }
        // Already made when the write runs beside neighbors (made before its kernels).
        prepare_zarr_write(x)?;
        if let Some(raw) = raw {
            prepare_zarr_write(&raw.x)?;
        }
        let mut trace = sc_kernels::gpu::trace::PhaseTrace::on_host("zarr write");
        write_matrix(&self.store, "/X", x)?;
        trace.mark("X").ok();
        if let Some(raw) = raw {
            self.store.put_group("/raw", encoding("raw", "0.1.0"))?;
            write_matrix(&self.store, "/raw/X", &raw.x)?;
            write_dataframe(&self.store, "/raw/var", &raw.var)?;
            write_dense_dict(&self.store, "/raw/varm", &raw.varm)?;
            trace.mark(".raw").ok();
        }
        Ok(())
    }

    /// Everything but X and `.raw` (`adata`'s X need only have the real X's shape), checked
    /// against X's shape first.
    pub fn write_rest(&self, adata: &AnnData) -> Result<()> {
        adata.validate()?;
        self.rest(adata)
    }

    /// [`ZarrWrite::write_rest`] without the check (a whole object written at once: the h5ad
    /// writer does not pass over a large X again either).
    fn rest(&self, adata: &AnnData) -> Result<()> {
        let s = &self.store;
        write_dataframe(s, "/obs", &adata.obs)?;
        write_dataframe(s, "/var", &adata.var)?;
        write_dense_dict(s, "/obsm", &adata.obsm)?;
        write_dense_dict(s, "/varm", &adata.varm)?;
        for (name, map) in [("/obsp", &adata.obsp), ("/varp", &adata.varp)] {
            s.put_group(name, encoding("dict", "0.1.0"))?;
            for (k, m) in map {
                write_csr(s, &child(name, k), &CsrSource::host(m))?;
            }
        }
        s.put_group("/layers", encoding("dict", "0.1.0"))?;
        for (k, m) in &adata.layers {
            write_matrix(s, &child("/layers", k), m)?;
        }
        write_dict(s, "/uns", &adata.uns)
    }

    /// The written store, to be moved into place (with the run's other files).
    pub fn close(self) -> Result<StagedFile> {
        Ok(self.staged)
    }
}

/// Writes `adata` as a zarr store that becomes `path` once committed (`with_x: false`: no X,
/// as a generated run's result).
pub fn write_zarr_staged(
    adata: &AnnData,
    path: &Path,
    compression: ZarrCompression,
    with_x: bool,
) -> Result<StagedFile> {
    let w = ZarrWrite::create(path, compression)?;
    if with_x {
        w.write_x_and_raw(&adata.x, adata.raw.as_ref())?;
    }
    w.rest(adata)?;
    w.close()
}

/// Writes `adata` to the zarr store `path` (replacing one there).
pub fn write_zarr(adata: &AnnData, path: impl AsRef<Path>) -> Result<()> {
    write_zarr_staged(adata, path.as_ref(), ZarrCompression::default(), true)?.commit()
}

fn write_matrix(s: &ZarrStore, element: &str, m: &Matrix) -> Result<()> {
    match m {
        Matrix::Sparse(csr) => write_csr(s, element, &CsrSource::host(csr)),
        Matrix::Dense(d) => write_host_dense(s, element, d),
        Matrix::Device(d) => write_device_matrix(s, element, d),
    }
}

/// A device matrix written chunk by chunk: each chunk downloaded by the thread that encodes and
/// writes it, so the downloads and the writes overlap and no host copy of the whole matrix is
/// made. Each writer downloads straight into a pinned buffer of its own where the first GPU's
/// copy lane has them ([`prepare_zarr_write`]), else through the lane's staging buffers, one
/// writer at a time. A streamed matrix is written from its host memory; CSR matrices whose
/// indices need int64 on disk are downloaded first.
fn write_device_matrix(s: &ZarrStore, element: &str, m: &DeviceMatrix) -> Result<()> {
    match &m.data {
        DeviceData::StreamedCsr(x) => return write_csr(s, element, &CsrSource::host(&x.host)),
        DeviceData::StreamedDense(x) => return write_host_dense(s, element, &x.host),
        _ => {}
    }
    let (n_rows, n_cols) = m.shape();
    let device_err = |e: sc_kernels::KernelError| device_error(element, e);
    let buffers = m
        .blocks()
        .first()
        .and_then(|b| b.ctx.copy_lane().ok())
        .and_then(GpuContext::write_buffers)
        .map_or(ChunkBuffers::Host, ChunkBuffers::Pinned);
    match block_parts(&m.blocks().iter().collect::<Vec<_>>()) {
        Some(BlockParts::Dense(parts)) => {
            write_dense(s, element, [n_rows, n_cols], buffers, |start, dst| {
                download(&parts, start, dst, buffers, element)
            })
        }
        Some(BlockParts::Csr(parts))
            if IndexWidth::for_matrix(m.stored_values() as u64, n_cols) == IndexWidth::I32 =>
        {
            let data: Vec<_> = parts.iter().map(|&(c, m)| (c, &m.data)).collect();
            let indices: Vec<_> = parts.iter().map(|&(c, m)| (c, &m.indices)).collect();
            let source = CsrSource {
                shape: [n_rows, n_cols],
                nnz: m.stored_values(),
                buffers,
                data: Box::new(|start, dst| download(&data, start, dst, buffers, element)),
                indices: Box::new(|start, dst| download(&indices, start, dst, buffers, element)),
                indptr: stacked_indptr(&parts, true).map_err(device_err)?.into(),
            };
            write_csr(s, element, &source)
        }
        _ => {
            let mut trace = sc_kernels::gpu::trace::PhaseTrace::on_host("zarr write");
            let host = m.download().map_err(device_err)?;
            trace.mark("download").ok();
            write_matrix(s, element, &host)
        }
    }
}

/// Makes the pinned buffers the chunk writers of `m` download into (one per writer, a chunk
/// each), on its first GPU's copy lane: before neighbors' kernels are queued, as pinning waits
/// for them (see [`GpuContext::prepare_transfers`]). The memory is portable, so the chunks of
/// every GPU's rows are downloaded into them. None for a streamed matrix (written from host
/// memory).
pub(crate) fn prepare_zarr_write(m: &crate::anndata::Matrix) -> Result<()> {
    if let Matrix::Device(d) = m {
        if let Some(b) = d.blocks().first().filter(|_| !d.is_streamed()) {
            prepare_zarr_buffers(&b.ctx)?;
        }
    }
    Ok(())
}

/// The chunk writers' pinned buffers on the copy lane of `ctx` (the GPU of a device X's first
/// rows), if not made yet. A run with a zarr output makes them while its input is read (see
/// `run::execute`), so that the write need not pin 256 MiB just before neighbors.
pub(crate) fn prepare_zarr_buffers(ctx: &GpuContext) -> Result<()> {
    let writers = std::thread::available_parallelism().map_or(1, |c| c.get());
    ctx.copy_lane()
        .and_then(|lane| lane.prepare_write_buffers(writers.min(MAX_WRITE_BUFFERS), CHUNK_BYTES))
        .map_err(|e| device_error("X", e))
}

/// Pinned chunk buffers at most (256 MiB): past 32 writers the file system, not the number of
/// threads, sets the pace.
const MAX_WRITE_BUFFERS: usize = 32;

/// Bytes of a chunk of 4-byte values, the elements a device matrix's chunks hold.
const CHUNK_BYTES: usize = CHUNK_ELEMENTS * 4;

fn write_host_dense(s: &ZarrStore, element: &str, d: &DenseMatrix<f32>) -> Result<()> {
    write_dense(
        s,
        element,
        [d.n_rows, d.n_cols],
        ChunkBuffers::Host,
        |start, dst| copy_from(&d.data, start, dst),
    )
}

/// Values `start .. start + dst.len()` of the device vectors `parts` laid one after the other:
/// straight into `dst` when it is a pinned buffer, else through the staging buffers.
fn download<T: bytemuck::Pod + Send + Sync>(
    parts: &[(&GpuContext, &DeviceVec<T>)],
    start: usize,
    dst: &mut [T],
    buffers: ChunkBuffers,
    element: &str,
) -> Result<()> {
    let (at, bytes) = (
        start * std::mem::size_of::<T>(),
        bytemuck::cast_slice_mut(dst),
    );
    match buffers {
        ChunkBuffers::Pinned(_) => gather_bytes_direct(parts, at, bytes),
        ChunkBuffers::Host => gather_bytes(parts, at, bytes, None),
    }
    .map_err(|e| device_error(element, e))
}

/// A dense `f32` matrix as anndata's `array`, its values `start ..` given by `fill`.
fn write_dense(
    s: &ZarrStore,
    element: &str,
    shape: [usize; 2],
    buffers: ChunkBuffers,
    fill: impl Fn(usize, &mut [f32]) -> Result<()> + Sync,
) -> Result<()> {
    let attrs = encoding("array", "0.2.0");
    s.put_array_with(element, &shape, DataType::Float32, attrs, buffers, fill)
}

/// Fills `dst` with an array's values `start .. start + dst.len()`.
type Filler<'a, T> = Box<dyn Fn(usize, &mut [T]) -> Result<()> + Sync + 'a>;

/// A CSR matrix to write, wherever its values are: `data` and `indices` give their values
/// `start ..` into `dst`.
struct CsrSource<'a> {
    shape: [usize; 2],
    nnz: usize,
    /// The chunk writers' buffers (`Pinned` when `data` and `indices` download into them).
    buffers: ChunkBuffers<'a>,
    data: Filler<'a, f32>,
    indices: Filler<'a, u32>,
    indptr: std::borrow::Cow<'a, [u64]>,
}

impl<'a> CsrSource<'a> {
    fn host(m: &'a CsrMatrix<f32>) -> CsrSource<'a> {
        CsrSource {
            shape: [m.n_rows, m.n_cols],
            nnz: m.nnz(),
            buffers: ChunkBuffers::Host,
            data: Box::new(|start, dst| copy_from(&m.data, start, dst)),
            indices: Box::new(|start, dst| copy_from(&m.indices, start, dst)),
            indptr: (&m.indptr[..]).into(),
        }
    }
}

/// A CSR matrix as anndata's `csr_matrix` group: `data`, and `indices` and `indptr` both int32
/// or both int64 (as scipy needs).
fn write_csr(s: &ZarrStore, element: &str, m: &CsrSource) -> Result<()> {
    let mut attrs = encoding("csr_matrix", "0.1.0");
    attrs.insert("shape".into(), json!(m.shape));
    s.put_group(element, attrs)?;
    let (data, indices, indptr) = (
        child(element, "data"),
        child(element, "indices"),
        child(element, "indptr"),
    );
    let mut trace = sc_kernels::gpu::trace::PhaseTrace::on_host("zarr write csr");
    let buffers = m.buffers;
    s.put_array_with(
        &data,
        &[m.nnz],
        DataType::Float32,
        Map::new(),
        buffers,
        &m.data,
    )?;
    trace.mark("data").ok();
    match IndexWidth::for_matrix(m.nnz as u64, m.shape[1]) {
        IndexWidth::I32 => {
            // The column indices' bytes as int32: each is below n_cols, which fits in an int32.
            s.put_array_with(
                &indices,
                &[m.nnz],
                DataType::Int32,
                Map::new(),
                buffers,
                |start, dst| (m.indices)(start, bytemuck::cast_slice_mut::<i32, u32>(dst)),
            )?;
            let ptr: Vec<i32> = m.indptr.par_iter().map(|&p| p as i32).collect();
            s.put_values(&indptr, &[ptr.len()], DataType::Int32, &ptr, Map::new())
        }
        IndexWidth::I64 => {
            // Widened a chunk at a time (a whole int64 copy would double their memory).
            s.put_array_with(
                &indices,
                &[m.nnz],
                DataType::Int64,
                Map::new(),
                ChunkBuffers::Host,
                |start, dst| {
                    let mut narrow = vec![0u32; dst.len()];
                    (m.indices)(start, &mut narrow)?;
                    for (d, &v) in dst.iter_mut().zip(&narrow) {
                        *d = v as i64;
                    }
                    Ok(())
                },
            )?;
            let ptr: Vec<i64> = m.indptr.par_iter().map(|&p| p as i64).collect();
            s.put_values(&indptr, &[ptr.len()], DataType::Int64, &ptr, Map::new())
        }
    }
}

/// An array with anndata's `array`, `string-array`, `numeric-scalar` or `string` encoding
/// (`shape` empty for a scalar).
fn write_array(s: &ZarrStore, element: &str, shape: &[usize], data: &ArrayData) -> Result<()> {
    let scalar = shape.is_empty();
    let kind = match (data, scalar) {
        (ArrayData::Str(_), true) => "string",
        (ArrayData::Str(_), false) => "string-array",
        (_, true) => "numeric-scalar",
        (_, false) => "array",
    };
    let attrs = encoding(kind, "0.2.0");
    match data {
        ArrayData::Bool(v) => s.put_array(element, shape, DataType::Bool, false, v, attrs),
        ArrayData::I32(v) => s.put_array(element, shape, DataType::Int32, 0i32, v, attrs),
        ArrayData::I64(v) => s.put_array(element, shape, DataType::Int64, 0i64, v, attrs),
        ArrayData::F32(v) => s.put_array(element, shape, DataType::Float32, 0f32, v, attrs),
        ArrayData::F64(v) => s.put_array(element, shape, DataType::Float64, 0f64, v, attrs),
        ArrayData::Str(v) => s.put_array(element, shape, DataType::String, "", v, attrs),
    }
}

/// A dataframe group: the index array named by `_index`, the columns in `column-order`.
fn write_dataframe(s: &ZarrStore, element: &str, df: &DataFrame) -> Result<()> {
    let index_name = index_name(df);
    let mut attrs = encoding("dataframe", "0.2.0");
    attrs.insert("_index".into(), index_name.into());
    let order: Vec<&str> = df.column_names().collect();
    attrs.insert("column-order".into(), json!(order));
    s.put_group(element, attrs)?;
    let index = ArrayData::Str(df.index.clone());
    write_array(s, &child(element, index_name), &[df.n_rows()], &index)?;
    for (name, col) in df.columns() {
        write_column(s, &child(element, name), col)?;
    }
    Ok(())
}

fn write_column(s: &ZarrStore, element: &str, col: &Column) -> Result<()> {
    match col {
        Column::Values(v) => write_array(s, element, &[v.len()], v),
        Column::Categorical {
            codes,
            categories,
            ordered,
        } => {
            let mut attrs = encoding("categorical", "0.2.0");
            attrs.insert("ordered".into(), Json::Bool(*ordered));
            s.put_group(element, attrs)?;
            write_array(
                s,
                &child(element, "categories"),
                &[categories.len()],
                categories,
            )?;
            let codes_el = child(element, "codes");
            let attrs = encoding("array", "0.2.0");
            let n = [codes.len()];
            match CodeWidth::for_categories(categories.len()) {
                CodeWidth::I8 => {
                    let c: Vec<i8> = codes.iter().map(|&c| c as i8).collect();
                    s.put_array(&codes_el, &n, DataType::Int8, 0i8, &c, attrs)
                }
                CodeWidth::I16 => {
                    let c: Vec<i16> = codes.iter().map(|&c| c as i16).collect();
                    s.put_array(&codes_el, &n, DataType::Int16, 0i16, &c, attrs)
                }
                CodeWidth::I32 => s.put_array(&codes_el, &n, DataType::Int32, 0i32, codes, attrs),
            }
        }
        Column::Nullable { values, mask } => {
            let kind = values
                .nullable_encoding()
                .map_err(|problem| s.format(element, problem))?;
            s.put_group(element, encoding(kind, "0.1.0"))?;
            write_array(s, &child(element, "values"), &[values.len()], values)?;
            let mask = ArrayData::Bool(mask.clone());
            write_array(s, &child(element, "mask"), &[mask.len()], &mask)
        }
    }
}

fn write_dense_dict(
    s: &ZarrStore,
    element: &str,
    map: &BTreeMap<String, DenseArray>,
) -> Result<()> {
    s.put_group(element, encoding("dict", "0.1.0"))?;
    for (k, a) in map {
        write_array(s, &child(element, k), &a.shape, &a.data)?;
    }
    Ok(())
}

fn write_dict(s: &ZarrStore, element: &str, map: &BTreeMap<String, Value>) -> Result<()> {
    s.put_group(element, encoding("dict", "0.1.0"))?;
    for (k, v) in map {
        write_value(s, &child(element, k), v)?;
    }
    Ok(())
}

fn write_value(s: &ZarrStore, element: &str, v: &Value) -> Result<()> {
    match v {
        Value::Scalar(x) => write_array(s, element, &[], &scalar_data(x)),
        Value::Array(a) => write_array(s, element, &a.shape, &a.data),
        Value::Dict(d) => write_dict(s, element, d),
        Value::DataFrame(df) => write_dataframe(s, element, df),
        Value::Sparse(m) => write_csr(s, element, &CsrSource::host(m)),
        Value::Records(fields) => super::records::write_records(s, element, fields),
        // anndata's `None` in zarr v3: a boolean array of no dimensions marked `null`.
        Value::Null => s.put_array(
            element,
            &[],
            DataType::Bool,
            false,
            &[false],
            encoding("null", "0.1.0"),
        ),
    }
}
