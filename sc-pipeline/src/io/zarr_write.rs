//! Writing AnnData as a zarr store (`-o OUT.zarr`), in the layout anndata writes with zarr
//! format 3 and reads with `anndata.read_zarr`: the same elements and encodings as the h5ad
//! writer, each array in chunks that are compressed and written in parallel. The store is
//! written under a temporary name and moved into place whole ([`StagedFile`]).
//!
//! X and `.raw` can be written on one thread while the rest is written on another
//! ([`ZarrWrite`]): they are different directories of the store.

use super::h5ad_write::IndexWidth;
use super::staged_file::StagedFile;
use super::zarr_store::{child, encoding, ZarrCompression, ZarrStore, CHUNK_ELEMENTS};
use crate::anndata::{
    AnnData, ArrayData, Column, DataFrame, DenseArray, Matrix, Raw, Scalar, Value,
};
use crate::Result;
use rayon::prelude::*;
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

    /// X and `.raw` (matrices on a GPU are downloaded first; `.raw`'s shape is checked first:
    /// [`ZarrWrite::write_rest`] checks the rest against X's shape, without them).
    pub fn write_x_and_raw(&self, x: &Matrix, raw: Option<&Raw>) -> Result<()> {
        if let Some(raw) = raw {
            raw.validate_shapes(x.shape().0)?;
        }
        write_matrix(&self.store, "/X", x)?;
        if let Some(raw) = raw {
            self.store.put_group("/raw", encoding("raw", "0.1.0"))?;
            write_matrix(&self.store, "/raw/X", &raw.x)?;
            write_dataframe(&self.store, "/raw/var", &raw.var)?;
            write_dense_dict(&self.store, "/raw/varm", &raw.varm)?;
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
                write_csr(s, &child(name, k), m)?;
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
        Matrix::Sparse(csr) => write_csr(s, element, csr),
        Matrix::Dense(d) => {
            let attrs = encoding("array", "0.2.0");
            s.put_array(
                element,
                &[d.n_rows, d.n_cols],
                DataType::Float32,
                0f32,
                &d.data,
                attrs,
            )
        }
        Matrix::Device(_) => write_matrix(s, element, &m.host_copy()?),
    }
}

/// A CSR matrix as anndata's `csr_matrix` group: `data`, and `indices` and `indptr` both int32
/// or both int64 (as scipy needs).
fn write_csr(s: &ZarrStore, element: &str, m: &CsrMatrix<f32>) -> Result<()> {
    let mut attrs = encoding("csr_matrix", "0.1.0");
    attrs.insert("shape".into(), json!([m.n_rows, m.n_cols]));
    s.put_group(element, attrs)?;
    let (data, indices, indptr) = (
        child(element, "data"),
        child(element, "indices"),
        child(element, "indptr"),
    );
    s.put_array(
        &data,
        &[m.nnz()],
        DataType::Float32,
        0f32,
        &m.data,
        Map::new(),
    )?;
    match IndexWidth::for_matrix(m.nnz() as u64, m.n_cols) {
        IndexWidth::I32 => {
            let idx: &[i32] = bytemuck::cast_slice(&m.indices);
            s.put_array(
                &indices,
                &[idx.len()],
                DataType::Int32,
                0i32,
                idx,
                Map::new(),
            )?;
            let ptr: Vec<i32> = m.indptr.par_iter().map(|&p| p as i32).collect();
            s.put_array(
                &indptr,
                &[ptr.len()],
                DataType::Int32,
                0i32,
                &ptr,
                Map::new(),
            )
        }
        IndexWidth::I64 => {
            put_widened(s, &indices, &m.indices)?;
            let ptr: Vec<i64> = m.indptr.par_iter().map(|&p| p as i64).collect();
            s.put_array(
                &indptr,
                &[ptr.len()],
                DataType::Int64,
                0i64,
                &ptr,
                Map::new(),
            )
        }
    }
}

/// Column indices as int64, converted a chunk at a time on rayon's threads (a whole int64 copy
/// of a large matrix's indices would double their memory).
fn put_widened(s: &ZarrStore, element: &str, values: &[u32]) -> Result<()> {
    s.put_array::<i64>(
        element,
        &[values.len()],
        DataType::Int64,
        0i64,
        &[],
        Map::new(),
    )?;
    let array = s.array(element)?;
    values
        .par_chunks(CHUNK_ELEMENTS)
        .enumerate()
        .try_for_each(|(c, chunk)| {
            let wide: Vec<i64> = chunk.iter().map(|&v| v as i64).collect();
            array
                .store_chunk_elements(&[c as u64], &wide)
                .map_err(|e| s.err(element)(&e))
        })
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
    let index_name = match df.index_name.as_str() {
        "" => "_index",
        name => name,
    };
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
            // pandas picks the smallest code type that fits; int8 / int16 / int32 all read back.
            let codes_el = child(element, "codes");
            let attrs = encoding("array", "0.2.0");
            let n = [codes.len()];
            if categories.len() < i8::MAX as usize {
                let c: Vec<i8> = codes.iter().map(|&c| c as i8).collect();
                s.put_array(&codes_el, &n, DataType::Int8, 0i8, &c, attrs)
            } else if categories.len() < i16::MAX as usize {
                let c: Vec<i16> = codes.iter().map(|&c| c as i16).collect();
                s.put_array(&codes_el, &n, DataType::Int16, 0i16, &c, attrs)
            } else {
                s.put_array(&codes_el, &n, DataType::Int32, 0i32, codes, attrs)
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
        Value::Scalar(x) => {
            let data = match x {
                Scalar::Bool(b) => ArrayData::Bool(vec![*b]),
                Scalar::Int(i) => ArrayData::I64(vec![*i]),
                Scalar::Float(f) => ArrayData::F64(vec![*f]),
                Scalar::Str(t) => ArrayData::Str(vec![t.clone()]),
            };
            write_array(s, element, &[], &data)
        }
        Value::Array(a) => write_array(s, element, &a.shape, &a.data),
        Value::Dict(d) => write_dict(s, element, d),
        Value::DataFrame(df) => write_dataframe(s, element, df),
        Value::Sparse(m) => write_csr(s, element, m),
        Value::Records(fields) => super::zarr_records::write_records(s, element, fields),
    }
}
