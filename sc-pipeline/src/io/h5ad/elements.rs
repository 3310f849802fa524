//! anndata's elements in HDF5: every group and array carries anndata's `encoding-type` /
//! `encoding-version` attributes, strings are variable-length UTF-8, sparse matrices are
//! `csr_matrix` groups with a `shape` attribute, dataframes have `_index` and `column-order`,
//! categoricals are `categories` + `codes` groups. The writers of whole files
//! ([`super::write`], [`super::stream_write`]) and of device matrices ([`super::device_write`])
//! put these together.

use super::hdf5_access::{to_varlen, u32_as_i32, u64_as_i64, H5Ctx};
use super::rec_array::write_rec_array;
use crate::anndata::{ArrayData, Column, DataFrame, DenseArray, Value};
use crate::io::encoding::{self, CodeWidth, IndexWidth, ENCODING_TYPE, ENCODING_VERSION};
use crate::io::file_space::parallel_fill;
use crate::{Error, Result};
use hdf5::plist::dataset_create::{AllocTime, FillTime};
use hdf5::types::VarLenUnicode;
use hdf5::{Extents, File, Group, H5Type, Location};
use sc_kernels::CsrMatrix;
use std::collections::BTreeMap;

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
    write_string_attr(ctx, loc, ENCODING_TYPE, kind, element)?;
    write_string_attr(ctx, loc, ENCODING_VERSION, version, element)
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
    // Numbers through `write_numbers`: an atlas's X_pca is 4.5 GB, its obs columns 90 MB each.
    let ds = match data {
        ArrayData::Bool(v) => write_plain(ctx, parent, name, shape, v)?,
        ArrayData::I32(v) => write_numbers(ctx, parent, name, shape, v)?,
        ArrayData::I64(v) => write_numbers(ctx, parent, name, shape, v)?,
        ArrayData::F32(v) => write_numbers(ctx, parent, name, shape, v)?,
        ArrayData::F64(v) => write_numbers(ctx, parent, name, shape, v)?,
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
    let ds = match shape {
        // In slices of [`STRING_SLICE`], so that other threads get HDF5 (whose calls are
        // serialised) between them: variable-length strings cost HDF5 about 0.3 us each (its
        // global heap), seconds for ten million cell names.
        [n] if *n == s.len() && !s.is_empty() => {
            let ds = parent
                .new_dataset::<VarLenUnicode>()
                .shape([*n])
                .create(name)
                .map_err(ctx.h5(&element))?;
            for start in (0..*n).step_by(STRING_SLICE) {
                let end = (start + STRING_SLICE).min(*n);
                ds.write_slice(&s[start..end], start..end)
                    .map_err(ctx.h5(&element))?;
            }
            ds
        }
        _ => write_plain(ctx, parent, name, shape, &s)?,
    };
    let kind = match shape.is_empty() {
        true => "string",
        false => "string-array",
    };
    set_encoding(ctx, &ds, kind, "0.2.0", &element)
}

/// Strings per write of a 1-D [`write_strings`].
const STRING_SLICE: usize = 1 << 18;

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

/// A dataframe group: index dataset named by `_index`, columns in `column-order`.
pub(crate) fn write_dataframe(
    ctx: &H5Ctx,
    parent: &Group,
    name: &str,
    df: &DataFrame,
) -> Result<()> {
    let g = new_group(ctx, parent, name, "dataframe", "0.2.0")?;
    write_strings(ctx, &g, encoding::index_name(df), &[df.n_rows()], &df.index)?;
    write_dataframe_columns(ctx, &g, df)
}

/// A dataframe group holding only its index, the row names `names` as the dataset
/// `index_name`: [`write_dataframe_columns`] completes it.
pub(crate) fn write_index_only(
    ctx: &H5Ctx,
    parent: &Group,
    name: &str,
    index_name: &str,
    names: &[String],
) -> Result<Group> {
    let g = new_group(ctx, parent, name, "dataframe", "0.2.0")?;
    write_strings(ctx, &g, index_name, &[names.len()], names)?;
    Ok(g)
}

/// The rest of a dataframe group whose index is written: the `_index` and `column-order`
/// attributes and the columns.
pub(crate) fn write_dataframe_columns(ctx: &H5Ctx, g: &Group, df: &DataFrame) -> Result<()> {
    let element = g.name();
    write_string_attr(ctx, g, "_index", encoding::index_name(df), &element)?;
    let order: Vec<String> = df.column_names().map(str::to_string).collect();
    write_string_list_attr(ctx, g, "column-order", &order, &element)?;
    for (col_name, col) in df.columns() {
        write_column(ctx, g, col_name, col)?;
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
            let codes_data = match CodeWidth::for_categories(categories.len()) {
                CodeWidth::I8 => {
                    let c: Vec<i8> = codes.iter().map(|&c| c as i8).collect();
                    write_plain(ctx, &cg, "codes", &[c.len()], &c)?
                }
                CodeWidth::I16 => {
                    let c: Vec<i16> = codes.iter().map(|&c| c as i16).collect();
                    write_plain(ctx, &cg, "codes", &[c.len()], &c)?
                }
                CodeWidth::I32 => write_plain(ctx, &cg, "codes", &[codes.len()], codes)?,
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

pub(super) fn write_dense_dict(
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

pub(super) fn write_sparse_dict(
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

pub(super) fn write_dict(
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
        Value::Scalar(s) => write_array(ctx, parent, name, &[], &encoding::scalar_data(s)),
        Value::Array(a) => write_array(ctx, parent, name, &a.shape, &a.data),
        Value::Dict(d) => write_dict(ctx, parent, name, d),
        Value::DataFrame(df) => write_dataframe(ctx, parent, name, df),
        Value::Sparse(m) => write_csr(ctx, parent, name, m),
        Value::Records(fields) => {
            let element = element_path(parent, name);
            let ds = write_rec_array(ctx, parent, name, fields, &element)?;
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
