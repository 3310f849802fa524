//! The parts of a Python AnnData that a step reads, as the pipeline's model ([`AnnData`]).
//!
//! The Python side (`scpipe/_parts.py`) hands over only what the step reads, already in the
//! layouts taken here: X as `("csr", (rows, cols), data, indices, indptr)` or
//! `("dense", array)` (float32, C order), `obs`/`var` columns as numpy arrays, lists of strings
//! or `("cat", codes, categories, ordered)`, `obsm` as 2-D arrays, `obsp` as CSR tuples, `uns`
//! entries as dicts, scalars and arrays. The numbers are copied once into the model's vectors
//! (its matrices own their values). X held by CuPy on the GPU (`("cuda_csr", ...)`,
//! `("cuda_dense", array)`) is copied device to device instead ([`device_parts`]).

use super::device_parts;
use numpy::{PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use rayon::prelude::*;
use sc_kernels::gpu::GpuContext;
use sc_kernels::{CsrMatrix, DenseMatrix};
use sc_pipeline::anndata::{
    ArrayData, Column, DataFrame, DenseArray, DeviceMatrix, Matrix, Raw, Scalar, Value,
};
use sc_pipeline::AnnData;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The model of `parts` (a dict with `X` and any of `var_names`, `obs`, `var`, `obsm`, `obsp`,
/// `uns`, `raw`, `layers`); matrices on the GPU (`cuda_csr`, `cuda_dense`) go to `gpu`'s,
/// X lent without a copy when `lend_x` (a step that only reads it). With `upload_x` (a step
/// that reads X on `gpu`), a host CSR X goes straight from scipy's arrays to the device, with
/// no host copy on the way.
pub(crate) fn anndata(
    parts: &Bound<'_, PyDict>,
    gpu: Option<&Arc<GpuContext>>,
    lend_x: bool,
    upload_x: bool,
) -> PyResult<AnnData> {
    let x = match (parts.get_item("X")?, gpu) {
        (Some(x), Some(ctx)) if upload_x && host_csr_part(&x)? => {
            let m = device_parts::upload_csr(parts.py(), ctx, x.cast::<PyTuple>()?, "X")?;
            Matrix::Device(DeviceMatrix::csr(ctx, m))
        }
        (Some(x), _) => matrix(&x, "X", gpu, lend_x)?,
        (None, _) => return Err(PyValueError::new_err("the parts of the AnnData have no X")),
    };
    // The names stay with the user's AnnData (var_names come when a step needs them).
    let mut adata = AnnData::unnamed(x);
    let (n_obs, n_vars) = adata.x.shape();
    if let Some(names) = parts.get_item("var_names")? {
        adata.var = DataFrame::with_index(names.extract()?);
    }
    if let Some(obs) = parts.get_item("obs")? {
        fill_columns(&mut adata.obs, obs.cast::<PyDict>()?, "obs")?;
    }
    if let Some(var) = parts.get_item("var")? {
        fill_columns(&mut adata.var, var.cast::<PyDict>()?, "var")?;
    }
    if let Some(obsm) = parts.get_item("obsm")? {
        for (k, v) in obsm.cast::<PyDict>()? {
            let key: String = k.extract()?;
            let a = dense_array(&v, &format!("obsm['{key}']"))?;
            adata.obsm.insert(key, a);
        }
    }
    if let Some(obsp) = parts.get_item("obsp")? {
        for (k, v) in obsp.cast::<PyDict>()? {
            let key: String = k.extract()?;
            let m = csr(&v.cast_into::<PyTuple>()?, &format!("obsp['{key}']"))?;
            adata.obsp.insert(key, m);
        }
    }
    if let Some(layers) = parts.get_item("layers")? {
        for (k, v) in layers.cast::<PyDict>()? {
            let key: String = k.extract()?;
            let m = matrix(&v, &format!("layers['{key}']"), gpu, false)?;
            adata.layers.insert(key, m);
        }
    }
    if let Some(uns) = parts.get_item("uns")? {
        for (k, v) in uns.cast::<PyDict>()? {
            let key: String = k.extract()?;
            let value = value(&v, &format!("uns['{key}']"))?;
            adata.uns.insert(key, value);
        }
    }
    if let Some(raw) = parts.get_item("raw")? {
        let raw = raw.cast::<PyDict>()?;
        let x = matrix(
            &raw.get_item("X")?
                .ok_or_else(|| PyValueError::new_err("raw has no X"))?,
            "raw.X",
            gpu,
            false,
        )?;
        let var = match raw.get_item("var_names")? {
            Some(n) => DataFrame::with_index(n.extract()?),
            None => DataFrame::with_default_index(x.shape().1),
        };
        adata.raw = Some(Raw {
            x,
            var,
            varm: BTreeMap::new(),
        });
    }
    adata.validate().map_err(super::errors::to_py)?;
    debug_assert_eq!(adata.x.shape(), (n_obs, n_vars));
    Ok(adata)
}

/// A matrix part's layout (`csr`, `dense`, `cuda_csr`, `cuda_dense`).
fn part_kind(spec: &Bound<'_, PyAny>) -> PyResult<String> {
    spec.cast::<PyTuple>()?.get_item(0)?.extract()
}

/// Whether a matrix part is a host CSR matrix (scipy's). A dense host X keeps its way to the
/// device (as CSR, `AnnData::to_device`), which every device step takes.
fn host_csr_part(spec: &Bound<'_, PyAny>) -> PyResult<bool> {
    Ok(part_kind(spec)? == "csr")
}

/// Whether a matrix part is CuPy's (on the GPU).
pub(crate) fn device_part(spec: &Bound<'_, PyAny>) -> PyResult<bool> {
    Ok(part_kind(spec)?.starts_with("cuda"))
}

/// X, a layer or `raw.X`.
pub(crate) fn matrix(
    spec: &Bound<'_, PyAny>,
    what: &str,
    gpu: Option<&Arc<GpuContext>>,
    lend: bool,
) -> PyResult<Matrix> {
    let t = spec.cast::<PyTuple>()?;
    let kind: String = t.get_item(0)?.extract()?;
    let on_gpu = || {
        gpu.ok_or_else(|| {
            PyValueError::new_err(format!(
                "{what} is on the GPU but the step runs on the CPU (scpipe.settings.device)"
            ))
        })
    };
    match kind.as_str() {
        "cuda_csr" => {
            let ctx = on_gpu()?;
            let m = device_parts::csr_in(ctx, t, what, lend)?;
            Ok(Matrix::Device(DeviceMatrix::csr(ctx, m)))
        }
        "cuda_dense" => {
            let ctx = on_gpu()?;
            let m = device_parts::dense_in(ctx, t, what, lend)?;
            Ok(Matrix::Device(DeviceMatrix::dense(ctx, m)))
        }
        "csr" => Ok(Matrix::Sparse(csr(t, what)?)),
        "dense" => Ok(Matrix::Dense(dense_from(t.get_item(1)?.extract()?, what)?)),
        other => Err(PyTypeError::new_err(format!(
            "{what}: unknown matrix layout '{other}'"
        ))),
    }
}

/// `("csr", (rows, cols), data, indices, indptr)` as a checked CSR matrix.
fn csr(t: &Bound<'_, PyTuple>, what: &str) -> PyResult<CsrMatrix<f32>> {
    let (rows, cols): (usize, usize) = t.get_item(1)?.extract()?;
    let data: PyReadonlyArray1<'_, f32> = t.get_item(2)?.extract()?;
    let indices = index_array(&t.get_item(3)?, &format!("{what}.indices"))?;
    let indptr = index_array(&t.get_item(4)?, &format!("{what}.indptr"))?;
    // Copied on every core: an atlas' X is billions of values.
    let data = data.as_slice()?.par_iter().copied().collect();
    let m = CsrMatrix::new(rows, cols, indptr, indices, data)
        .map_err(|e| PyValueError::new_err(format!("{what} is not a valid CSR matrix: {e}")))?;
    // A column stored twice in a row is read as scipy reads it: added (this copy is ours).
    Ok(m.into_duplicates_summed().0)
}

/// A contiguous int32 or int64 index array (scipy's two index types) as `T`, each value
/// converted once.
pub(crate) fn index_array<T: TryFrom<i64> + Default + Send>(
    a: &Bound<'_, PyAny>,
    what: &str,
) -> PyResult<Vec<T>> {
    if let Ok(v) = a.extract::<PyReadonlyArray1<'_, i32>>() {
        return index_values(v.as_slice()?.par_iter().map(|&i| i64::from(i)), what);
    }
    if let Ok(v) = a.extract::<PyReadonlyArray1<'_, i64>>() {
        return index_values(v.as_slice()?.par_iter().copied(), what);
    }
    Err(PyTypeError::new_err(format!(
        "{what} must be a contiguous int32 or int64 array"
    )))
}

/// Index values as `T` (converted on every core), refusing one out of its range (a negative
/// one, say) by name. The range is checked first, then the values are converted straight into
/// their vector: rayon's collect into a `Result` cannot write in place and goes through lists of
/// pieces (a second copy of every index).
fn index_values<T: TryFrom<i64> + Default + Send>(
    values: impl IndexedParallelIterator<Item = i64> + Clone,
    what: &str,
) -> PyResult<Vec<T>> {
    if let Some(i) = values.clone().find_first(|&i| T::try_from(i).is_err()) {
        return Err(PyValueError::new_err(format!(
            "{what}: index {i} is out of range"
        )));
    }
    Ok(values.map(|i| T::try_from(i).unwrap_or_default()).collect())
}

/// The columns of `cols` into `df`.
fn fill_columns(df: &mut DataFrame, cols: &Bound<'_, PyDict>, what: &str) -> PyResult<()> {
    for (k, v) in cols {
        let name: String = k.extract()?;
        let col = column(&v, &format!("{what}['{name}']"))?;
        df.set(name, col).map_err(super::errors::to_py)?;
    }
    Ok(())
}

fn column(v: &Bound<'_, PyAny>, what: &str) -> PyResult<Column> {
    if let Ok(t) = v.cast::<PyTuple>() {
        let codes: PyReadonlyArray1<'_, i32> = t.get_item(1)?.extract()?;
        return Ok(Column::Categorical {
            codes: codes.as_slice()?.to_vec(),
            categories: array_data(&t.get_item(2)?, what)?,
            ordered: t.get_item(3)?.extract()?,
        });
    }
    Ok(Column::Values(array_data(v, what)?))
}

/// A 1-D array of one of the model's element types (strings as a list).
fn array_data(v: &Bound<'_, PyAny>, what: &str) -> PyResult<ArrayData> {
    if v.cast::<PyList>().is_ok() {
        return Ok(ArrayData::Str(v.extract()?));
    }
    macro_rules! try_type {
        ($t:ty, $variant:ident) => {
            if let Ok(a) = v.extract::<PyReadonlyArray1<'_, $t>>() {
                return Ok(ArrayData::$variant(a.as_array().to_vec()));
            }
        };
    }
    try_type!(bool, Bool);
    try_type!(i32, I32);
    try_type!(i64, I64);
    try_type!(f32, F32);
    try_type!(f64, F64);
    Err(PyTypeError::new_err(format!(
        "{what}: expected a 1-D array of bool, int32, int64, float32 or float64, or a list of \
         strings"
    )))
}

/// A 2-D (or 1-D) numeric array.
fn dense_array(v: &Bound<'_, PyAny>, what: &str) -> PyResult<DenseArray> {
    macro_rules! try_type {
        ($t:ty, $variant:ident) => {
            if let Ok(a) = v.extract::<PyReadonlyArray2<'_, $t>>() {
                let shape = a.shape().to_vec();
                // A C-ordered array copied on every core (X_pca at 1 M cells is 200 MB:
                // 0.15 s or more of a call on one thread, session 48's call E).
                let data = match a.as_slice() {
                    Ok(s) => s.par_iter().copied().collect(),
                    Err(_) => a.as_array().iter().copied().collect(),
                };
                return Ok(DenseArray {
                    shape,
                    data: ArrayData::$variant(data),
                });
            }
        };
    }
    try_type!(f32, F32);
    try_type!(f64, F64);
    try_type!(i32, I32);
    try_type!(i64, I64);
    Ok(DenseArray::vector(array_data(v, what)?))
}

/// A C-contiguous 2-D float32 array as a dense matrix (the Python side makes it so).
pub(crate) fn dense_f32(v: &Bound<'_, PyAny>, what: &str) -> PyResult<DenseMatrix<f32>> {
    let a = v
        .extract()
        .map_err(|_| PyTypeError::new_err(format!("{what} must be a 2-D float32 array")))?;
    dense_from(a, what)
}

/// A dense matrix copied from a float32 array, which must be C-contiguous.
fn dense_from(a: PyReadonlyArray2<'_, f32>, what: &str) -> PyResult<DenseMatrix<f32>> {
    let (rows, cols) = (a.shape()[0], a.shape()[1]);
    let data = a
        .as_slice()
        .map_err(|_| PyTypeError::new_err(format!("{what}: a dense matrix must be C-contiguous")))?
        .par_iter()
        .copied()
        .collect();
    DenseMatrix::new(rows, cols, data).map_err(|e| PyValueError::new_err(format!("{what}: {e}")))
}

/// An entry of `uns`.
fn value(v: &Bound<'_, PyAny>, what: &str) -> PyResult<Value> {
    if v.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(d) = v.cast::<PyDict>() {
        let mut out = BTreeMap::new();
        for (k, item) in d {
            let key: String = k.extract()?;
            let inner = value(&item, &format!("{what}['{key}']"))?;
            out.insert(key, inner);
        }
        return Ok(Value::Dict(out));
    }
    // bool before int: Python's bool is an int.
    if let Ok(b) = v.cast::<pyo3::types::PyBool>() {
        return Ok(Value::Scalar(Scalar::Bool(b.is_true())));
    }
    if let Ok(i) = v.extract::<i64>() {
        if v.cast::<pyo3::types::PyInt>().is_ok() {
            return Ok(Value::Scalar(Scalar::Int(i)));
        }
    }
    if let Ok(f) = v.cast::<pyo3::types::PyFloat>() {
        return Ok(Value::Scalar(Scalar::Float(f.value())));
    }
    if let Ok(s) = v.extract::<String>() {
        return Ok(Value::Scalar(Scalar::Str(s)));
    }
    Ok(Value::Array(dense_array(v, what)?))
}
