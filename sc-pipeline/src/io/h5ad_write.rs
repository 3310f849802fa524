//! Writing h5ad files that `anndata.read_h5ad` opens: every group and array carries anndata's
//! `encoding-type` / `encoding-version` attributes, strings are variable-length UTF-8, sparse
//! matrices are `csr_matrix` groups with a `shape` attribute, dataframes have `_index` and
//! `column-order`, categoricals are `categories` + `codes` groups.

use super::hdf5_access::{u32_as_i32, u64_as_i64, H5Ctx};
use super::parallel_fill;
use super::reserve_ahead::ReservedAhead;
use super::staged_file::StagedFile;
use crate::anndata::{
    AnnData, ArrayData, Column, DataFrame, DenseArray, Matrix, Raw, Scalar, Value,
};
use crate::{Error, Result};
use hdf5::plist::dataset_create::{AllocTime, FillTime};
use hdf5::types::VarLenUnicode;
use hdf5::{Extents, File, Group, H5Type, Location};
use sc_kernels::CsrMatrix;
use std::collections::BTreeMap;
use std::path::Path;

/// Writes `adata` to `path`, replacing any existing file. The file is written under a
/// temporary name and renamed at the end, so a failed write never leaves a truncated h5ad.
pub fn write_h5ad(adata: &AnnData, path: impl AsRef<Path>) -> Result<()> {
    write_h5ad_staged(adata, path)?.commit()
}

/// Writes `adata` under a temporary name next to `path` and leaves it there: the caller moves it
/// into place with [`StagedFile::commit`] once everything else has succeeded (dropping it removes
/// the file).
pub fn write_h5ad_staged(adata: &AnnData, path: impl AsRef<Path>) -> Result<StagedFile> {
    adata.validate()?;
    let staged = StagedFile::new(path);
    write_to(adata, staged.path(), true)?;
    Ok(staged)
}

/// [`write_h5ad_staged`] of everything but X (and `.raw`), for a result whose X never existed
/// whole (cells generated block by block for every pass): anndata reads the file with
/// `X = None`.
pub fn write_h5ad_staged_without_x(adata: &AnnData, path: impl AsRef<Path>) -> Result<StagedFile> {
    adata.validate()?;
    let staged = StagedFile::new(path);
    write_to(adata, staged.path(), false)?;
    Ok(staged)
}

/// Creates an h5ad file and writes its root attributes.
pub(crate) fn create_file(ctx: &H5Ctx) -> Result<File> {
    hdf5::silence_errors(true);
    let file = File::create(&ctx.path).map_err(|e| Error::File {
        path: ctx.path.clone(),
        message: format!("cannot create file ({e})"),
    })?;
    set_encoding(ctx, &file, "anndata", "0.1.0", "/")?;
    Ok(file)
}

/// An h5ad file written in two parts that may be written at once, from two threads, so that its
/// bulk is written while the steps after PCA run: [`H5adWrite::write_x_and_raw`] (X and `.raw`,
/// final once PCA has run: harmony and neighbors add to obsm, obsp and uns only) and
/// [`H5adWrite::write_rest`] (everything else, as soon as those steps end: on several GPUs
/// neighbors ends well before X and `.raw` are in the file). HDF5's calls are serialised by the
/// hdf5 crate; the large datasets' bytes are copied outside them (`parallel_fill`).
/// [`H5adWrite::close`] ends the file. Dropped unclosed, it removes its file.
pub struct H5adWrite {
    ctx: H5Ctx,
    file: File,
    staged: StagedFile,
    /// Each part waits for the reservation to end before it writes (see [`create_h5ad`]).
    ahead: std::sync::Mutex<Option<ReservedAhead>>,
}

/// Creates the h5ad for `path` (under a temporary name, see [`write_h5ad_staged`]) and starts
/// reserving `expected_bytes` for it (a bound on the whole file, see
/// [`crate::memory_plan::output_bytes`]; nothing when that is 0), from offset 0 and beyond the
/// file's end, on a thread of its own. The fills of X and `.raw` then copy into pages already
/// there (on tmpfs, allocating them is most of a large write's time). Best effort: nothing is
/// reserved when there is too little to matter, with `SCPIPE_RESERVE_WRITE=0`, without room on
/// the file system, or, on a file system in memory (tmpfs), when `host_memory` (the host's
/// available bytes) is not at least twice `expected_bytes`. What the finished file does not use
/// is given back.
pub fn create_h5ad(
    path: impl AsRef<Path>,
    expected_bytes: u64,
    host_memory: Option<u64>,
) -> Result<H5adWrite> {
    let staged = StagedFile::new(path);
    let ctx = H5Ctx::new(staged.path());
    let file = create_file(&ctx)?;
    let ahead = match expected_bytes {
        0 => None,
        bytes => ReservedAhead::start(&ctx.path, bytes, host_memory),
    };
    Ok(H5adWrite {
        ctx,
        file,
        staged,
        ahead: std::sync::Mutex::new(ahead),
    })
}

impl H5adWrite {
    /// The reservation ahead, if any (a poisoned lock still holds it).
    fn ahead(&self) -> std::sync::MutexGuard<'_, Option<ReservedAhead>> {
        self.ahead.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether pages are being reserved (or were) for this file.
    pub fn reserves(&self) -> bool {
        self.ahead().is_some()
    }

    /// Waits for the reservation to end: while fallocate runs, the file's writes and page faults
    /// wait on its lock.
    fn wait_for_reservation(&self) {
        if let Some(ahead) = self.ahead().as_mut() {
            ahead.wait();
        }
    }

    /// Writes X and `.raw` (whose shapes are checked first: [`H5adWrite::write_rest`] checks
    /// the rest against X's shape, without them).
    pub fn write_x_and_raw(&self, x: &Matrix, raw: Option<&Raw>) -> Result<()> {
        if let Some(raw) = raw {
            raw.validate_shapes(x.shape().0)?;
        }
        self.wait_for_reservation();
        write_matrix(&self.ctx, &self.file, "X", x)?;
        if let Some(raw) = raw {
            write_raw(&self.ctx, &self.file, raw)?;
        }
        Ok(())
    }

    /// Writes everything of `adata` but X and `.raw` (which are [`H5adWrite::write_x_and_raw`]'s:
    /// `adata`'s X need only have the real X's shape).
    pub fn write_rest(&self, adata: &AnnData) -> Result<()> {
        adata.validate()?;
        self.wait_for_reservation();
        write_rest(&self.ctx, &self.file, adata)
    }

    /// Closes the file, still under its temporary name, and gives back what was reserved ahead
    /// beyond its end.
    pub fn close(self) -> Result<StagedFile> {
        let H5adWrite {
            ctx,
            file,
            staged,
            ahead,
        } = self;
        parallel_fill::traced(|| "close".into(), || file.close()).map_err(ctx.h5("/"))?;
        if let Some(ahead) = ahead.into_inner().unwrap_or_else(|p| p.into_inner()) {
            ahead.give_back_beyond_end().map_err(|e| Error::File {
                path: ctx.path.clone(),
                message: format!("giving back the space reserved ahead: {e}"),
            })?;
        }
        Ok(staged)
    }
}

fn write_to(adata: &AnnData, path: &Path, with_x: bool) -> Result<()> {
    let ctx = H5Ctx::new(path);
    let file = create_file(&ctx)?;
    if with_x {
        write_matrix(&ctx, &file, "X", &adata.x)?;
        if let Some(raw) = &adata.raw {
            write_raw(&ctx, &file, raw)?;
        }
    }
    write_rest(&ctx, &file, adata)?;
    file.close().map_err(ctx.h5("/"))?;
    Ok(())
}

/// `.raw`: its X, var and varm.
fn write_raw(ctx: &H5Ctx, file: &File, raw: &Raw) -> Result<()> {
    let g = new_group(ctx, file, "raw", "raw", "0.1.0")?;
    write_matrix(ctx, &g, "X", &raw.x)?;
    write_dataframe(ctx, &g, "var", &raw.var)?;
    write_dense_dict(ctx, &g, "varm", &raw.varm)
}

/// Everything but X and `.raw`.
fn write_rest(ctx: &H5Ctx, file: &File, adata: &AnnData) -> Result<()> {
    let timed = |part: &str, write: &dyn Fn() -> Result<()>| {
        parallel_fill::traced(|| format!("write {part}"), write)
    };
    timed("obs", &|| write_dataframe(ctx, file, "obs", &adata.obs))?;
    timed("var", &|| write_dataframe(ctx, file, "var", &adata.var))?;
    timed("obsm", &|| write_dense_dict(ctx, file, "obsm", &adata.obsm))?;
    timed("varm", &|| write_dense_dict(ctx, file, "varm", &adata.varm))?;
    timed("obsp", &|| {
        write_sparse_dict(ctx, file, "obsp", &adata.obsp)
    })?;
    timed("varp", &|| {
        write_sparse_dict(ctx, file, "varp", &adata.varp)
    })?;
    timed("layers", &|| {
        let layers = new_group(ctx, file, "layers", "dict", "0.1.0")?;
        for (k, m) in &adata.layers {
            write_matrix(ctx, &layers, k, m)?;
        }
        Ok(())
    })?;
    timed("uns", &|| write_dict(ctx, file, "uns", &adata.uns))
}

pub(crate) fn element_path(parent: &Location, name: &str) -> String {
    format!("{}/{name}", parent.name().trim_end_matches('/'))
}

pub(crate) fn set_encoding(
    ctx: &H5Ctx,
    loc: &Location,
    kind: &str,
    version: &str,
    element: &str,
) -> Result<()> {
    write_string_attr(ctx, loc, "encoding-type", kind, element)?;
    write_string_attr(ctx, loc, "encoding-version", version, element)
}

pub(crate) fn new_group(
    ctx: &H5Ctx,
    parent: &Group,
    name: &str,
    kind: &str,
    version: &str,
) -> Result<Group> {
    let element = element_path(parent, name);
    let g = parent.create_group(name).map_err(ctx.h5(&element))?;
    set_encoding(ctx, &g, kind, version, &element)?;
    Ok(g)
}

/// Strings as HDF5 variable-length UTF-8 values (interior NUL bytes cannot be stored); each is
/// copied into memory of its own, on rayon's threads (a million cell names).
pub(crate) fn to_varlen(values: &[String]) -> std::result::Result<Vec<VarLenUnicode>, String> {
    use rayon::prelude::*;
    values
        .par_iter()
        .map(|s| {
            s.parse::<VarLenUnicode>()
                .map_err(|_| format!("string {s:?} contains a NUL byte"))
        })
        .collect()
}

fn write_string_attr(
    ctx: &H5Ctx,
    loc: &Location,
    name: &str,
    value: &str,
    element: &str,
) -> Result<()> {
    let v = to_varlen(&[value.to_string()])
        .map_err(|p| ctx.format(element, p))?
        .remove(0);
    loc.new_attr::<VarLenUnicode>()
        .create(name)
        .and_then(|a| a.write_scalar(&v))
        .map_err(ctx.h5(element))
}

fn write_string_list_attr(
    ctx: &H5Ctx,
    loc: &Location,
    name: &str,
    values: &[String],
    element: &str,
) -> Result<()> {
    let v = to_varlen(values).map_err(|p| ctx.format(element, p))?;
    loc.new_attr::<VarLenUnicode>()
        .shape(v.len())
        .create(name)
        .and_then(|a| a.write_raw(&v))
        .map_err(ctx.h5(element))
}

pub(crate) fn write_int_list_attr(
    ctx: &H5Ctx,
    loc: &Location,
    name: &str,
    values: &[i64],
    element: &str,
) -> Result<()> {
    loc.new_attr::<i64>()
        .shape(values.len())
        .create(name)
        .and_then(|a| a.write_raw(values))
        .map_err(ctx.h5(element))
}

/// A plain dataset of `values` with the given shape, uncompressed and contiguous (fast to read
/// back in large slabs).
pub(crate) fn write_plain<T: H5Type>(
    ctx: &H5Ctx,
    parent: &Group,
    name: &str,
    shape: &[usize],
    values: &[T],
) -> Result<hdf5::Dataset> {
    let element = element_path(parent, name);
    let extents = if shape.is_empty() {
        Extents::Scalar
    } else {
        Extents::from(shape.to_vec())
    };
    let ds = parent
        .new_dataset::<T>()
        .shape(extents)
        .create(name)
        .map_err(ctx.h5(&element))?;
    if !values.is_empty() {
        ds.write_raw(values).map_err(ctx.h5(&element))?;
    }
    Ok(ds)
}

/// An array with anndata's `array` / `string-array` encoding (`shape` empty for a scalar,
/// which gets `numeric-scalar` / `string`).
pub(crate) fn write_array(
    ctx: &H5Ctx,
    parent: &Group,
    name: &str,
    shape: &[usize],
    data: &ArrayData,
) -> Result<()> {
    let element = element_path(parent, name);
    let ds = match data {
        ArrayData::Bool(v) => write_plain(ctx, parent, name, shape, v)?,
        ArrayData::I32(v) => write_plain(ctx, parent, name, shape, v)?,
        ArrayData::I64(v) => write_plain(ctx, parent, name, shape, v)?,
        ArrayData::F32(v) => write_plain(ctx, parent, name, shape, v)?,
        ArrayData::F64(v) => write_plain(ctx, parent, name, shape, v)?,
        ArrayData::Str(v) => return write_strings(ctx, parent, name, shape, v),
    };
    let kind = match shape.is_empty() {
        true => "numeric-scalar",
        false => "array",
    };
    set_encoding(ctx, &ds, kind, "0.2.0", &element)
}

/// Strings with anndata's `string-array` encoding (`string` for a scalar: `shape` empty).
fn write_strings(
    ctx: &H5Ctx,
    parent: &Group,
    name: &str,
    shape: &[usize],
    values: &[String],
) -> Result<()> {
    let element = element_path(parent, name);
    let s = to_varlen(values).map_err(|p| ctx.format(&element, p))?;
    let ds = write_plain(ctx, parent, name, shape, &s)?;
    let kind = match shape.is_empty() {
        true => "string",
        false => "string-array",
    };
    set_encoding(ctx, &ds, kind, "0.2.0", &element)
}

/// [`write_plain`] of numbers: a large dataset gets its place in the file from HDF5 (allocated
/// at creation, never filled) and is copied there by several threads ([`parallel_fill`]).
pub(crate) fn write_numbers<T: H5Type + bytemuck::Pod>(
    ctx: &H5Ctx,
    parent: &Group,
    name: &str,
    shape: &[usize],
    values: &[T],
) -> Result<hdf5::Dataset> {
    let bytes: &[u8] = bytemuck::cast_slice(values);
    if shape.is_empty() || !parallel_fill::wanted(&ctx.path, bytes.len()) {
        return write_plain(ctx, parent, name, shape, values);
    }
    let (ds, offset) = create_in_place::<T>(ctx, parent, name, shape)?;
    parallel_fill::fill(&ctx.path, offset, bytes)?;
    Ok(ds)
}

/// A dataset whose place HDF5 allocates in the file when it is created and never fills, and
/// that place's offset: its bytes are then copied there ([`parallel_fill`]).
pub(crate) fn create_in_place<T: H5Type>(
    ctx: &H5Ctx,
    parent: &Group,
    name: &str,
    shape: &[usize],
) -> Result<(hdf5::Dataset, u64)> {
    let element = element_path(parent, name);
    let ds = parent
        .new_dataset::<T>()
        .shape(shape.to_vec())
        .alloc_time(Some(AllocTime::Early))
        .fill_time(FillTime::Never)
        .create(name)
        .map_err(ctx.h5(&element))?;
    let offset = ds
        .offset()
        .ok_or_else(|| ctx.format(&element, "HDF5 gave no file offset for the dataset"))?;
    Ok((ds, offset))
}

/// A numeric `array` written straight from a slice: a dense X is GBs, which an `ArrayData`
/// copy would double in memory and time (fresh pages are costly to fault in).
pub(crate) fn write_numeric_array<T: H5Type + bytemuck::Pod>(
    ctx: &H5Ctx,
    parent: &Group,
    name: &str,
    shape: &[usize],
    values: &[T],
) -> Result<()> {
    let ds = write_numbers(ctx, parent, name, shape, values)?;
    set_encoding(ctx, &ds, "array", "0.2.0", &element_path(parent, name))
}

/// Integer type of a sparse matrix's `indices` and `indptr` on disk. scipy's sparse routines need
/// both of one type, and pick int32 while every offset and column fits, int64 beyond: so do we.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IndexWidth {
    I32,
    I64,
}

impl IndexWidth {
    pub fn for_matrix(max_stored_values: u64, n_cols: usize) -> Self {
        if max_stored_values <= i32::MAX as u64 && n_cols <= i32::MAX as usize {
            IndexWidth::I32
        } else {
            IndexWidth::I64
        }
    }
}

/// Values converted per write when indices are widened to int64 (bounds the extra memory).
const WIDEN_BLOCK: usize = 1 << 24;

/// Writes `indices` at `offset` of `ds`, widening to int64 block by block when `ds` is int64.
pub(crate) fn write_indices_at(
    ctx: &H5Ctx,
    ds: &hdf5::Dataset,
    width: IndexWidth,
    offset: usize,
    indices: &[u32],
    element: &str,
) -> Result<()> {
    if indices.is_empty() {
        return Ok(());
    }
    match width {
        IndexWidth::I32 => ds
            .write_slice(u32_as_i32(indices), offset..offset + indices.len())
            .map_err(ctx.h5(element)),
        IndexWidth::I64 => {
            for (k, block) in indices.chunks(WIDEN_BLOCK).enumerate() {
                let wide: Vec<i64> = block.iter().map(|&c| c as i64).collect();
                let start = offset + k * WIDEN_BLOCK;
                ds.write_slice(&wide[..], start..start + block.len())
                    .map_err(ctx.h5(element))?;
            }
            Ok(())
        }
    }
}

/// Writes the row offsets with the given width.
pub(crate) fn write_indptr(
    ctx: &H5Ctx,
    g: &Group,
    width: IndexWidth,
    indptr: &[u64],
) -> Result<()> {
    match width {
        IndexWidth::I32 => {
            let narrow: Vec<i32> = indptr.iter().map(|&p| p as i32).collect();
            write_plain(ctx, g, "indptr", &[narrow.len()], &narrow)?;
        }
        IndexWidth::I64 => {
            write_plain(ctx, g, "indptr", &[indptr.len()], u64_as_i64(indptr))?;
        }
    }
    Ok(())
}

/// Creates an empty `indices` dataset of `len` values of the given width.
pub(crate) fn create_indices(
    ctx: &H5Ctx,
    g: &Group,
    width: IndexWidth,
    len: usize,
    element: &str,
) -> Result<hdf5::Dataset> {
    let builder = g.new_dataset_builder();
    let builder = match width {
        IndexWidth::I32 => builder.empty::<i32>(),
        IndexWidth::I64 => builder.empty::<i64>(),
    };
    builder
        .shape(len)
        .create("indices")
        .map_err(ctx.h5(element))
}

/// A CSR matrix as anndata's `csr_matrix` group.
pub(crate) fn write_csr(ctx: &H5Ctx, parent: &Group, name: &str, m: &CsrMatrix<f32>) -> Result<()> {
    let element = element_path(parent, name);
    let width = IndexWidth::for_matrix(m.nnz() as u64, m.n_cols);
    let g = new_group(ctx, parent, name, "csr_matrix", "0.1.0")?;
    write_int_list_attr(
        ctx,
        &g,
        "shape",
        &[m.n_rows as i64, m.n_cols as i64],
        &element,
    )?;
    write_numbers(ctx, &g, "data", &[m.data.len()], &m.data)?;
    match width {
        IndexWidth::I32 => {
            let indices = u32_as_i32(&m.indices);
            write_numbers(ctx, &g, "indices", &[indices.len()], indices)?;
        }
        IndexWidth::I64 => {
            let indices_el = format!("{element}/indices");
            let ds = create_indices(ctx, &g, width, m.indices.len(), &indices_el)?;
            write_indices_at(ctx, &ds, width, 0, &m.indices, &indices_el)?;
        }
    }
    write_indptr(ctx, &g, width, &m.indptr)
}

pub(crate) fn write_matrix(ctx: &H5Ctx, parent: &Group, name: &str, m: &Matrix) -> Result<()> {
    match m {
        Matrix::Sparse(csr) => write_csr(ctx, parent, name, csr),
        Matrix::Dense(d) => write_numeric_array(ctx, parent, name, &[d.n_rows, d.n_cols], &d.data),
        Matrix::Device(d) => super::device_write::write_device_matrix(ctx, parent, name, d),
    }
}

/// A dataframe group: index dataset named by `_index`, columns in `column-order`.
pub(crate) fn write_dataframe(
    ctx: &H5Ctx,
    parent: &Group,
    name: &str,
    df: &DataFrame,
) -> Result<()> {
    let element = element_path(parent, name);
    let g = new_group(ctx, parent, name, "dataframe", "0.2.0")?;
    let index_name = if df.index_name.is_empty() {
        "_index"
    } else {
        df.index_name.as_str()
    };
    write_string_attr(ctx, &g, "_index", index_name, &element)?;
    let order: Vec<String> = df.column_names().map(str::to_string).collect();
    write_string_list_attr(ctx, &g, "column-order", &order, &element)?;
    write_strings(ctx, &g, index_name, &[df.n_rows()], &df.index)?;
    for (col_name, col) in df.columns() {
        write_column(ctx, &g, col_name, col)?;
    }
    Ok(())
}

fn write_column(ctx: &H5Ctx, g: &Group, name: &str, col: &Column) -> Result<()> {
    let element = element_path(g, name);
    match col {
        Column::Values(v) => write_array(ctx, g, name, &[v.len()], v),
        Column::Categorical {
            codes,
            categories,
            ordered,
        } => {
            let cg = new_group(ctx, g, name, "categorical", "0.2.0")?;
            cg.new_attr::<bool>()
                .create("ordered")
                .and_then(|a| a.write_scalar(ordered))
                .map_err(ctx.h5(&element))?;
            write_array(ctx, &cg, "categories", &[categories.len()], categories)?;
            // pandas picks the smallest code type that fits; int8 / int16 / int32 all read back.
            let codes_data = if categories.len() < i8::MAX as usize {
                let c: Vec<i8> = codes.iter().map(|&c| c as i8).collect();
                write_plain(ctx, &cg, "codes", &[c.len()], &c)?
            } else if categories.len() < i16::MAX as usize {
                let c: Vec<i16> = codes.iter().map(|&c| c as i16).collect();
                write_plain(ctx, &cg, "codes", &[c.len()], &c)?
            } else {
                write_plain(ctx, &cg, "codes", &[codes.len()], codes)?
            };
            set_encoding(
                ctx,
                &codes_data,
                "array",
                "0.2.0",
                &format!("{element}/codes"),
            )
        }
        Column::Nullable { values, mask } => {
            let kind = values
                .nullable_encoding()
                .map_err(|problem| ctx.format(&element, problem))?;
            let cg = new_group(ctx, g, name, kind, "0.1.0")?;
            write_array(ctx, &cg, "values", &[values.len()], values)?;
            write_array(
                ctx,
                &cg,
                "mask",
                &[mask.len()],
                &ArrayData::Bool(mask.clone()),
            )
        }
    }
}

fn write_dense_dict(
    ctx: &H5Ctx,
    parent: &Group,
    name: &str,
    map: &BTreeMap<String, DenseArray>,
) -> Result<()> {
    let g = new_group(ctx, parent, name, "dict", "0.1.0")?;
    for (k, a) in map {
        write_array(ctx, &g, k, &a.shape, &a.data)?;
    }
    Ok(())
}

fn write_sparse_dict(
    ctx: &H5Ctx,
    parent: &Group,
    name: &str,
    map: &BTreeMap<String, CsrMatrix<f32>>,
) -> Result<()> {
    let g = new_group(ctx, parent, name, "dict", "0.1.0")?;
    for (k, m) in map {
        write_csr(ctx, &g, k, m)?;
    }
    Ok(())
}

fn write_dict(
    ctx: &H5Ctx,
    parent: &Group,
    name: &str,
    map: &BTreeMap<String, Value>,
) -> Result<()> {
    let g = new_group(ctx, parent, name, "dict", "0.1.0")?;
    for (k, v) in map {
        write_value(ctx, &g, k, v)?;
    }
    Ok(())
}

fn write_value(ctx: &H5Ctx, parent: &Group, name: &str, v: &Value) -> Result<()> {
    match v {
        Value::Scalar(s) => {
            let data = match s {
                Scalar::Bool(b) => ArrayData::Bool(vec![*b]),
                Scalar::Int(i) => ArrayData::I64(vec![*i]),
                Scalar::Float(f) => ArrayData::F64(vec![*f]),
                Scalar::Str(s) => ArrayData::Str(vec![s.clone()]),
            };
            write_array(ctx, parent, name, &[], &data)
        }
        Value::Array(a) => write_array(ctx, parent, name, &a.shape, &a.data),
        Value::Dict(d) => write_dict(ctx, parent, name, d),
        Value::DataFrame(df) => write_dataframe(ctx, parent, name, df),
        Value::Sparse(m) => write_csr(ctx, parent, name, m),
        Value::Records(fields) => {
            let element = element_path(parent, name);
            let ds = super::rec_array::write_rec_array(ctx, parent, name, fields, &element)?;
            set_encoding(ctx, &ds, "rec-array", "0.2.0", &element)
        }
        // anndata's `None`: an empty dataset (no dataspace) of float32.
        Value::Null => {
            let element = element_path(parent, name);
            let ds = parent
                .new_dataset::<f32>()
                .shape(hdf5::Extents::Null)
                .create(name)
                .map_err(ctx.h5(&element))?;
            set_encoding(ctx, &ds, "null", "0.1.0", &element)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::anndata::DenseArray;

    #[test]
    fn without_x_writes_everything_else_and_no_x() {
        let x = CsrMatrix::new(3, 2, vec![0, 1, 1, 2], vec![0, 1], vec![1.0, 2.0]).unwrap();
        let mut a = AnnData::new(Matrix::Sparse(x));
        a.obsm.insert(
            "X_pca".into(),
            DenseArray::matrix_f32(3, 1, vec![0.5, 1.5, 2.5]).unwrap(),
        );
        let dir = std::env::temp_dir().join(format!("scpipe-nox-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("r.h5ad");
        write_h5ad_staged_without_x(&a, &path)
            .unwrap()
            .commit()
            .unwrap();
        let f = File::open(&path).unwrap();
        assert!(!f.link_exists("X"));
        assert!(f.link_exists("obs") && f.link_exists("var") && f.link_exists("obsm/X_pca"));
        drop(f);
        let e = crate::io::read_h5ad(&path).unwrap_err().to_string();
        assert!(e.contains("no X matrix"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Datasets past the parallel-fill size (dense X, `.raw`'s data and indices, an obsm
    /// matrix), written in one go, in two parts at once from two threads, and in two parts one
    /// after the other into a file created ahead, read back equal.
    #[test]
    fn large_datasets_filled_in_parallel_read_back() {
        let (n, g) = (1000, 2200); // dense X: 8.8 MB, past the (test's) parallel-fill size
        let dense: Vec<f32> = (0..n * g).map(|i| (i % 977) as f32 * 0.25).collect();
        let per_row = 2200;
        let indptr: Vec<u64> = (0..=n as u64).map(|r| r * per_row as u64).collect();
        let indices: Vec<u32> = (0..n * per_row).map(|i| (i % per_row) as u32).collect();
        let data: Vec<f32> = (0..n * per_row).map(|i| (i % 13) as f32 + 1.0).collect();
        let raw_x = CsrMatrix::new(n, g, indptr, indices, data).unwrap();
        assert!(raw_x.nnz() * 4 >= parallel_fill::PARALLEL_FILL_BYTES);
        let mut a = AnnData::new(Matrix::Dense(
            sc_kernels::DenseMatrix::new(n, g, dense).unwrap(),
        ));
        a.raw = Some(Raw {
            x: Matrix::Sparse(raw_x),
            var: a.var.clone(),
            varm: BTreeMap::new(),
        });
        a.obsm.insert(
            "X_pca".into(),
            DenseArray::matrix_f32(n, 2, (0..2 * n).map(|v| v as f32).collect()).unwrap(),
        );
        // The rest's own dataset past the parallel-fill size.
        let wide: Vec<f32> = (0..n * 2200).map(|i| (i % 613) as f32).collect();
        assert!(wide.len() * 4 >= parallel_fill::PARALLEL_FILL_BYTES);
        a.obsm.insert(
            "X_wide".into(),
            DenseArray::matrix_f32(n, 2200, wide).unwrap(),
        );
        let dir = std::env::temp_dir().join(format!("scpipe-fill-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (one, two) = (dir.join("one.h5ad"), dir.join("two.h5ad"));
        write_h5ad(&a, &one).unwrap();
        // The two parts at once, from two threads, each with datasets filled in parallel.
        let both = create_h5ad(&two, 0, None).unwrap();
        std::thread::scope(|s| {
            let bulk = s.spawn(|| both.write_x_and_raw(&a.x, a.raw.as_ref()));
            both.write_rest(&a).unwrap();
            bulk.join().unwrap().unwrap();
        });
        both.close().unwrap().commit().unwrap();
        // Created first with more room reserved than it needs (on tmpfs where there is one),
        // filled later.
        let shm = std::path::Path::new("/dev/shm");
        let ahead_dir = match shm.is_dir() {
            true => shm.join(format!("scpipe-fill-ahead-{}", std::process::id())),
            false => dir.join("ahead"),
        };
        std::fs::create_dir_all(&ahead_dir).unwrap();
        let (ahead, short) = (ahead_dir.join("ahead.h5ad"), ahead_dir.join("short.h5ad"));
        // More than the file needs, and less (the fills reserve what lies beyond).
        for (path, expected) in [
            (&ahead, 4 * (n * g * 4) as u64),
            (&short, (n * g * 6) as u64),
        ] {
            let file = create_h5ad(path, expected, Some(u64::MAX)).unwrap();
            assert!(file.reserves(), "room for {expected} bytes");
            file.write_x_and_raw(&a.x, a.raw.as_ref()).unwrap();
            file.write_rest(&a).unwrap();
            file.close().unwrap().commit().unwrap();
        }
        for path in [&one, &two, &ahead, &short] {
            let b = crate::io::read_h5ad(path).unwrap();
            assert_eq!(b.x, a.x, "{}", path.display());
            assert_eq!(b.raw, a.raw, "{}", path.display());
            assert_eq!(b.obsm, a.obsm, "{}", path.display());
        }
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(&ahead).unwrap();
        assert!(
            meta.blocks() * 512 <= meta.len() + (1 << 20),
            "nothing reserved stays beyond the end: {} bytes held for {}",
            meta.blocks() * 512,
            meta.len()
        );
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::remove_dir_all(&ahead_dir).unwrap();
    }

    #[test]
    fn a_raw_of_other_cells_is_refused_before_it_is_written() {
        let x = |rows| CsrMatrix::new(rows, 2, vec![0; rows + 1], vec![], vec![]).unwrap();
        let a = AnnData::new(Matrix::Sparse(x(2)));
        let raw = Raw {
            x: Matrix::Sparse(x(3)),
            var: a.var.clone(),
            varm: BTreeMap::new(),
        };
        let dir = std::env::temp_dir().join(format!("scpipe-rawrows-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = create_h5ad(dir.join("out.h5ad"), 0, None).unwrap();
        let e = file
            .write_x_and_raw(&a.x, Some(&raw))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("raw.X rows") && e.contains("has 3 rows, expected 2"),
            "{e}"
        );
        drop(file);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_file_created_ahead_and_never_begun_leaves_nothing() {
        let dir = std::env::temp_dir().join(format!("scpipe-ahead-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("out.h5ad");
        let file = create_h5ad(&out, 256 << 20, Some(u64::MAX)).unwrap();
        let partial = file.staged.path().to_path_buf();
        assert!(partial.exists());
        drop(file);
        assert!(!partial.exists() && !out.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
