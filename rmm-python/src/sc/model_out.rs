//! The model ([`AnnData`]) after a step, as the Python side writes it back into the user's
//! AnnData (`scpipe/_parts.py`): the same layouts as [`super::model_in`] takes, the numbers
//! handed to numpy without a copy (the arrays take over the model's vectors).

use numpy::{IntoPyArray, PyArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use sc_kernels::CsrMatrix;
use sc_pipeline::anndata::{
    ArrayData, Column, DataFrame, DenseArray, DeviceData, DeviceMatrix, Matrix, Scalar, Value,
};
use sc_pipeline::AnnData;
use std::collections::BTreeMap;

/// Which parts of the model go back.
#[derive(Debug, Clone, Default)]
pub(crate) struct Sections {
    /// X: on the GPU (as `cuda_csr` / `cuda_dense`) when `x_on_device` and it is there, else
    /// moved to the host.
    pub x: bool,
    pub x_on_device: bool,
    /// `.raw`, when the model has one.
    pub raw: bool,
    /// The `obsp` graphs the call was handed: not copied back (`_parts.write_results` keeps
    /// the user's own; a million cells' graph is 0.06 s of copying).
    pub passed_obsp: Vec<String>,
}

/// The model as a dict: `obs`, `var`, `obsm`, `varm`, `obsp` (but the graphs handed in), `uns`
/// always, `X` and `raw` as `sections` asks (the names stay with the user's AnnData).
pub(crate) fn parts<'py>(
    py: Python<'py>,
    adata: AnnData,
    sections: Sections,
) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    let AnnData {
        x,
        obs,
        var,
        obsm,
        varm,
        obsp,
        uns,
        raw,
        ..
    } = adata;
    out.set_item("obs", columns(py, obs)?)?;
    out.set_item("var", columns(py, var)?)?;
    out.set_item("obsm", arrays(py, obsm)?)?;
    out.set_item("varm", arrays(py, varm)?)?;
    let graphs = PyDict::new(py);
    for (k, m) in obsp {
        if !sections.passed_obsp.contains(&k) {
            graphs.set_item(k, csr(py, m)?)?;
        }
    }
    out.set_item("obsp", graphs)?;
    let u = PyDict::new(py);
    for (k, v) in uns {
        u.set_item(k, value(py, v)?)?;
    }
    out.set_item("uns", u)?;
    if sections.x {
        let x = match x {
            Matrix::Device(d) if sections.x_on_device => device_matrix(py, d)?,
            host => matrix(py, host)?,
        };
        out.set_item("X", x)?;
    } else if !matches!(x, Matrix::Device(_)) {
        // The step's own copy of a host X (GBs at a million cells): freed off the call's path
        // (device memory goes back here, on a thread bound to its context).
        sc_pipeline::release::drop_in_background(x);
    }
    if let Some(r) = raw.filter(|_| sections.raw) {
        let d = PyDict::new(py);
        d.set_item("X", matrix(py, r.x)?)?;
        d.set_item("var_names", PyList::new(py, &r.var.index)?)?;
        d.set_item("var", columns(py, r.var)?)?;
        out.set_item("raw", d)?;
    }
    Ok(out)
}

/// A matrix left on the GPU, handed to CuPy ([`super::device_parts`]); one the steps keep in
/// host memory comes back as a host matrix.
fn device_matrix<'py>(py: Python<'py>, d: DeviceMatrix) -> PyResult<Bound<'py, PyAny>> {
    let ctx = d.ctx.clone();
    match d.data {
        DeviceData::Csr(m) => Ok(super::device_parts::csr_out(py, &ctx, m)?.into_any()),
        DeviceData::Dense(m) => Ok(super::device_parts::dense_out(py, &ctx, m)?.into_any()),
        other => matrix(py, Matrix::Device(DeviceMatrix { ctx, data: other })),
    }
}

/// X, a layer or `raw.X` on the host, as `("csr", ...)` or `("dense", array)`.
fn matrix<'py>(py: Python<'py>, m: Matrix) -> PyResult<Bound<'py, PyAny>> {
    match m.into_host().map_err(super::errors::to_py)? {
        Matrix::Sparse(c) => Ok(csr(py, c)?.into_any()),
        Matrix::Dense(d) => {
            let a = d.data.into_pyarray(py).reshape([d.n_rows, d.n_cols])?;
            Ok(PyTuple::new(py, ["dense".into_pyobject(py)?.into_any(), a.into_any()])?.into_any())
        }
        Matrix::Device(_) => unreachable!("into_host leaves no device matrix"),
    }
}

/// `("csr", (rows, cols), data, indices, indptr)`: scipy's index types (int32 while the
/// values fit, as scipy chooses, else int64).
fn csr<'py>(py: Python<'py>, m: CsrMatrix<f32>) -> PyResult<Bound<'py, PyTuple>> {
    let small = m.nnz() <= i32::MAX as usize && m.n_cols <= i32::MAX as usize;
    let (indices, indptr) = if small {
        (
            m.indices
                .iter()
                .map(|&i| i as i32)
                .collect::<Vec<_>>()
                .into_pyarray(py)
                .into_any(),
            m.indptr
                .iter()
                .map(|&i| i as i32)
                .collect::<Vec<_>>()
                .into_pyarray(py)
                .into_any(),
        )
    } else {
        (
            m.indices
                .iter()
                .map(|&i| i as i64)
                .collect::<Vec<_>>()
                .into_pyarray(py)
                .into_any(),
            m.indptr
                .iter()
                .map(|&i| i as i64)
                .collect::<Vec<_>>()
                .into_pyarray(py)
                .into_any(),
        )
    };
    PyTuple::new(
        py,
        [
            "csr".into_pyobject(py)?.into_any(),
            (m.n_rows, m.n_cols).into_pyobject(py)?.into_any(),
            m.data.into_pyarray(py).into_any(),
            indices,
            indptr,
        ],
    )
}

/// A table's columns as a dict (the index is the caller's).
fn columns<'py>(py: Python<'py>, df: DataFrame) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (name, col) in df.into_columns() {
        d.set_item(name, column(py, col)?)?;
    }
    Ok(d)
}

fn column<'py>(py: Python<'py>, c: Column) -> PyResult<Bound<'py, PyAny>> {
    match c {
        Column::Values(v) => array_data(py, v),
        Column::Categorical {
            codes,
            categories,
            ordered,
        } => Ok(PyTuple::new(
            py,
            [
                "cat".into_pyobject(py)?.into_any(),
                codes.into_pyarray(py).into_any(),
                array_data(py, categories)?,
                pyo3::types::PyBool::new(py, ordered).to_owned().into_any(),
            ],
        )?
        .into_any()),
        Column::Nullable { values, mask } => Ok(PyTuple::new(
            py,
            [
                "nullable".into_pyobject(py)?.into_any(),
                array_data(py, values)?,
                mask.into_pyarray(py).into_any(),
            ],
        )?
        .into_any()),
    }
}

/// A 1-D array (strings as a list).
fn array_data<'py>(py: Python<'py>, a: ArrayData) -> PyResult<Bound<'py, PyAny>> {
    Ok(match a {
        ArrayData::Bool(v) => v.into_pyarray(py).into_any(),
        ArrayData::I32(v) => v.into_pyarray(py).into_any(),
        ArrayData::I64(v) => v.into_pyarray(py).into_any(),
        ArrayData::F32(v) => v.into_pyarray(py).into_any(),
        ArrayData::F64(v) => v.into_pyarray(py).into_any(),
        ArrayData::Str(v) => PyList::new(py, v)?.into_any(),
    })
}

fn arrays<'py>(py: Python<'py>, m: BTreeMap<String, DenseArray>) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (k, a) in m {
        d.set_item(k, dense_array(py, a)?)?;
    }
    Ok(d)
}

/// An n-dimensional array (strings as a flat list).
fn dense_array<'py>(py: Python<'py>, a: DenseArray) -> PyResult<Bound<'py, PyAny>> {
    let shape = a.shape;
    macro_rules! shaped {
        ($v:expr) => {
            $v.into_pyarray(py).reshape(shape)?.into_any()
        };
    }
    Ok(match a.data {
        ArrayData::Bool(v) => shaped!(v),
        ArrayData::I32(v) => shaped!(v),
        ArrayData::I64(v) => shaped!(v),
        ArrayData::F32(v) => shaped!(v),
        ArrayData::F64(v) => shaped!(v),
        ArrayData::Str(v) => PyList::new(py, v)?.into_any(),
    })
}

/// An entry of `uns`: dicts, scalars, arrays, `("df", index, columns)`, `("rec", [(name,
/// array)])`, CSR tuples and `None`.
fn value<'py>(py: Python<'py>, v: Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        Value::Null => py.None().into_bound(py),
        Value::Scalar(Scalar::Bool(b)) => pyo3::types::PyBool::new(py, b).to_owned().into_any(),
        Value::Scalar(Scalar::Int(i)) => i.into_pyobject(py)?.into_any(),
        Value::Scalar(Scalar::Float(f)) => f.into_pyobject(py)?.into_any(),
        Value::Scalar(Scalar::Str(s)) => s.into_pyobject(py)?.into_any(),
        Value::Array(a) => dense_array(py, a)?,
        Value::Dict(d) => {
            let out = PyDict::new(py);
            for (k, inner) in d {
                out.set_item(k, value(py, inner)?)?;
            }
            out.into_any()
        }
        Value::DataFrame(df) => {
            let index = PyList::new(py, &df.index)?;
            PyTuple::new(
                py,
                [
                    "df".into_pyobject(py)?.into_any(),
                    index.into_any(),
                    columns(py, df)?.into_any(),
                ],
            )?
            .into_any()
        }
        Value::Sparse(m) => csr(py, m)?.into_any(),
        Value::Records(fields) => {
            let list = PyList::empty(py);
            for (name, a) in fields {
                list.append((name, array_data(py, a)?))?;
            }
            PyTuple::new(py, ["rec".into_pyobject(py)?.into_any(), list.into_any()])?.into_any()
        }
    })
}
