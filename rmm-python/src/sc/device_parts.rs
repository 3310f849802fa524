//! X on the GPU between calls (rapids-singlecell's way): a CuPy array or cupyx CSR matrix comes
//! in through its `__cuda_array_interface__` and is copied device to device into the step's
//! matrix (no trip through the host), and a result left on the GPU goes back as
//! `rmm_core.DeviceBuffer`s, which CuPy wraps without a copy. A step that only reads X reads
//! the array's own memory (lent, [`rmm_core::DeviceBuffer::borrowed`]); one that changes X gets
//! a copy, so that the user's array is untouched until the call succeeds, except the value-only
//! steps asked to work in place (`normalize_total`, `log1p`: they check their input before
//! their one write). Nothing crosses the host: the Python side hands over int64 row offsets and
//! int32 column indices (widened or narrowed by CuPy on the device), and takes int64 offsets
//! back.

use super::model_in::index_array;
use crate::buffer::PyDeviceBuffer;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use rmm_core::DeviceVec;
use sc_kernels::csr::first_row_with_a_column_twice;
use sc_kernels::gpu::{DeviceCsr, DeviceDense, GpuContext, StructureProblem};
use sc_kernels::CsrMatrix;

/// A device array as its interface describes it.
struct Interface {
    ptr: u64,
    len: usize,
    /// numpy's typestr, e.g. `<f4`.
    typestr: String,
}

fn interface(a: &Bound<'_, PyAny>, what: &str) -> PyResult<Interface> {
    let i = a
        .getattr("__cuda_array_interface__")
        .map_err(|_| PyTypeError::new_err(format!("{what} has no __cuda_array_interface__")))?;
    let shape: Vec<usize> = i.get_item("shape")?.extract()?;
    let typestr: String = i.get_item("typestr")?.extract()?;
    let contiguous = match i.get_item("strides") {
        Ok(s) if !s.is_none() => {
            let strides: Vec<usize> = s.extract()?;
            let item = typestr[2..].parse::<usize>().unwrap_or(0);
            let mut expect = item;
            let mut ok = true;
            for (d, s) in shape.iter().zip(&strides).rev() {
                ok &= *d <= 1 || *s == expect;
                expect *= d;
            }
            ok
        }
        _ => true,
    };
    if !contiguous {
        return Err(PyValueError::new_err(format!(
            "{what} must be C-contiguous"
        )));
    }
    let ptr: u64 = i.get_item("data")?.get_item(0)?.extract()?;
    Ok(Interface {
        ptr,
        len: shape.iter().product(),
        typestr,
    })
}

/// A copy of `src` (elements of `T`) in a new vector on the context's stream, after everything
/// queued on the device (the array's producer may be on any stream).
fn copy_in<T: bytemuck::Pod>(ctx: &GpuContext, src: &Interface) -> PyResult<DeviceVec<T>> {
    let v = ctx.alloc::<T>(src.len).map_err(kernel_err)?;
    let bytes = src.len * std::mem::size_of::<T>();
    // SAFETY: the interface names `len` readable elements at `ptr`; `v` holds as many.
    unsafe {
        ctx.device().synchronize().map_err(cuda_err)?;
        ctx.stream()
            .copy_device(v.ptr(), src.ptr, bytes)
            .map_err(cuda_err)?;
    }
    Ok(v)
}

/// The array's memory lent to the step without a copy (after everything queued on the device,
/// as [`copy_in`]); the step must only read it.
fn lent<T: bytemuck::Pod>(ctx: &GpuContext, src: &Interface) -> PyResult<DeviceVec<T>> {
    ctx.device().synchronize().map_err(cuda_err)?;
    let bytes = src.len * std::mem::size_of::<T>();
    // SAFETY: the interface names `len` elements at `ptr`; the caller keeps the array alive
    // until the step has finished with it (`call` holds the parts), and the step only reads.
    let buf = unsafe { rmm_core::DeviceBuffer::borrowed(src.ptr, bytes, ctx.stream()) };
    DeviceVec::from_buffer(buf).map_err(crate::errors::to_py)
}

/// `v` in memory of the step's own: a copy when it is lent (a result must not alias the
/// user's array, which may go while the result lives).
fn owned<T: bytemuck::Pod>(ctx: &GpuContext, v: DeviceVec<T>) -> PyResult<DeviceVec<T>> {
    if !v.buffer().is_borrowed() {
        return Ok(v);
    }
    copy_in(
        ctx,
        &Interface {
            ptr: v.ptr(),
            len: v.len(),
            typestr: String::new(),
        },
    )
}

/// `("cuda_csr", shape, data, indices, indptr)` as the step's device matrix; with `lend`, its
/// values and column indices are the array's own memory (for a step that only reads X).
pub(crate) fn csr_in(
    ctx: &GpuContext,
    t: &Bound<'_, PyTuple>,
    what: &str,
    lend: bool,
) -> PyResult<DeviceCsr> {
    let (n_rows, n_cols): (usize, usize) = t.get_item(1)?.extract()?;
    let data = interface(&t.get_item(2)?, &format!("{what}.data"))?;
    let indices = interface(&t.get_item(3)?, &format!("{what}.indices"))?;
    let indptr = interface(&t.get_item(4)?, &format!("{what}.indptr"))?;
    if data.typestr != "<f4" {
        return Err(PyTypeError::new_err(format!("{what}.data must be float32")));
    }
    if indptr.len != n_rows + 1 || indices.len != data.len {
        return Err(PyValueError::new_err(format!(
            "{what} is not a valid CSR matrix: {} offsets for {n_rows} rows, {} indices for {} values",
            indptr.len, indices.len, data.len
        )));
    }
    if !matches!(indptr.typestr.as_str(), "<i8" | "<i4") || indices.typestr != "<i4" {
        return Err(PyTypeError::new_err(format!(
            "{what} must have int32 or int64 row offsets and int32 column indices (scpipe._parts makes them)"
        )));
    }
    // Offsets and indices are only read (a step that changes the structure makes new ones);
    // valid ones are non-negative, so int64's and int32's bits are the u64 and u32 values.
    // int32 offsets are widened by a kernel of ours: CuPy's astype would compile one on a
    // machine's first call (seconds).
    let indptr = match indptr.typestr.as_str() {
        "<i8" => lent::<u64>(ctx, &indptr)?,
        _ => DeviceCsr::widen_offsets(ctx, &lent::<i32>(ctx, &indptr)?).map_err(kernel_err)?,
    };
    let indices = lent::<u32>(ctx, &indices)?;
    let data = if lend {
        lent::<f32>(ctx, &data)?
    } else {
        copy_in::<f32>(ctx, &data)?
    };
    let m = DeviceCsr {
        n_rows,
        n_cols,
        indptr,
        indices,
        data,
    };
    let problem = match m.structure_problem(ctx).map_err(kernel_err)? {
        None => return Ok(m),
        Some(StructureProblem::Offsets) => {
            format!("its row offsets are not 0 .. {} in order", m.data.len())
        }
        Some(StructureProblem::ColumnPast { row }) => {
            format!("row {row} has a column index at or past its {n_cols} columns")
        }
        Some(StructureProblem::ColumnTwice { row }) => format!(
            "row {row} stores a column twice (call {what}.sum_duplicates() first, which adds \
             them as scipy and scanpy do)"
        ),
    };
    Err(PyValueError::new_err(format!(
        "{what} is not a valid CSR matrix: {problem}"
    )))
}

/// `("cuda_dense", array)` (float32, C order) as the step's device matrix (lent as
/// [`csr_in`]'s).
pub(crate) fn dense_in(
    ctx: &GpuContext,
    t: &Bound<'_, PyTuple>,
    what: &str,
    lend: bool,
) -> PyResult<DeviceDense> {
    let a = t.get_item(1)?;
    let shape: (usize, usize) = a.getattr("shape")?.extract()?;
    let i = interface(&a, what)?;
    if i.typestr != "<f4" {
        return Err(PyTypeError::new_err(format!("{what} must be float32")));
    }
    let data = if lend {
        lent::<f32>(ctx, &i)?
    } else {
        copy_in::<f32>(ctx, &i)?
    };
    Ok(DeviceDense {
        n_rows: shape.0,
        n_cols: shape.1,
        data,
    })
}

/// A device CSR matrix as `("cuda_csr", shape, data, indices, indptr)`: `DeviceBuffer`s of
/// float32, int32 and int32 offsets while the values' count fits (as scipy and cupyx choose;
/// narrowed by a kernel of ours, not CuPy's, which a machine's first call would compile), else
/// int64 (the Python side tells them apart by their size).
pub(crate) fn csr_out<'py>(
    py: Python<'py>,
    ctx: &GpuContext,
    m: DeviceCsr,
) -> PyResult<Bound<'py, PyTuple>> {
    let narrow = m.narrow_offsets(ctx).map_err(kernel_err)?;
    ctx.synchronize().map_err(kernel_err)?;
    let buffer = |b| Py::new(py, PyDeviceBuffer { inner: b }).map(|b| b.into_any());
    let indptr = match narrow {
        Some(v) => buffer(v.into_buffer())?,
        None => buffer(owned(ctx, m.indptr)?.into_buffer())?,
    };
    PyTuple::new(
        py,
        [
            "cuda_csr".into_pyobject(py)?.into_any().unbind(),
            (m.n_rows, m.n_cols).into_pyobject(py)?.into_any().unbind(),
            buffer(owned(ctx, m.data)?.into_buffer())?,
            buffer(owned(ctx, m.indices)?.into_buffer())?,
            indptr,
        ],
    )
}

/// A device dense matrix as `("cuda_dense", shape, data)`.
pub(crate) fn dense_out<'py>(
    py: Python<'py>,
    ctx: &GpuContext,
    m: DeviceDense,
) -> PyResult<Bound<'py, PyTuple>> {
    ctx.synchronize().map_err(kernel_err)?;
    PyTuple::new(
        py,
        [
            "cuda_dense".into_pyobject(py)?.into_any().unbind(),
            (m.n_rows, m.n_cols).into_pyobject(py)?.into_any().unbind(),
            Py::new(
                py,
                PyDeviceBuffer {
                    inner: m.data.into_buffer(),
                },
            )?
            .into_any(),
        ],
    )
}

fn kernel_err(e: sc_kernels::KernelError) -> PyErr {
    match e.out_of_memory() {
        Some(oom) => pyo3::exceptions::PyMemoryError::new_err(format!(
            "out of GPU memory moving a matrix to or from the step's GPU: {oom}"
        )),
        None => pyo3::exceptions::PyRuntimeError::new_err(e.to_string()),
    }
}

fn cuda_err(e: rmm_cuda::CudaError) -> PyErr {
    crate::errors::to_py(rmm_core::MemoryError::from(e))
}

/// Host X (`("csr", ...)` or `("dense", array)` from numpy) uploaded to the GPU and handed to
/// CuPy as [`csr_out`] / [`dense_out`] do: `scpipe.get.anndata_to_GPU`'s copy.
#[pyfunction]
pub(crate) fn _sc_to_device<'py>(
    py: Python<'py>,
    part: &Bound<'py, PyTuple>,
) -> PyResult<Bound<'py, PyTuple>> {
    use numpy::{PyReadonlyArray2, PyUntypedArrayMethods};
    let run = super::gpu::current()?;
    let ctx = &run.ctx;
    let kind: String = part.get_item(0)?.extract()?;
    if kind != "dense" {
        let m = upload_csr(py, ctx, part, "X")?;
        return csr_out(py, ctx, m);
    }
    let a: PyReadonlyArray2<'_, f32> = part.get_item(1)?.extract()?;
    let (n_rows, n_cols) = (a.shape()[0], a.shape()[1]);
    let values = a
        .as_slice()
        .map_err(|_| PyValueError::new_err("X must be C-contiguous"))?;
    let data = py.detach(|| ctx.upload(values)).map_err(kernel_err)?;
    dense_out(
        py,
        ctx,
        DeviceDense {
            n_rows,
            n_cols,
            data,
        },
    )
}

/// A host CSR part (`("csr", shape, data, indices, indptr)` from scipy) uploaded to `ctx`'s
/// GPU through the pinned staging buffers, read in place (int32 column indices are taken as
/// they are) after its structure is checked: no host copy of its own.
pub(crate) fn upload_csr(
    py: Python<'_>,
    ctx: &GpuContext,
    part: &Bound<'_, PyTuple>,
    what: &str,
) -> PyResult<DeviceCsr> {
    use numpy::PyReadonlyArray1;
    let (n_rows, n_cols): (usize, usize) = part.get_item(1)?.extract()?;
    let data: PyReadonlyArray1<'_, f32> = part.get_item(2)?.extract()?;
    let data = data.as_slice()?;
    let indptr: Vec<u64> = index_array(&part.get_item(4)?, &format!("{what}.indptr"))?;
    let indices_obj = part.get_item(3)?;
    let narrow;
    let wide: Vec<u32>;
    let indices: &[u32] = if let Ok(v) = indices_obj.extract::<PyReadonlyArray1<'_, i32>>() {
        narrow = v;
        // Read in place: a negative index becomes one past any column and is refused below.
        bytemuck::cast_slice(narrow.as_slice()?)
    } else {
        wide = index_array(&indices_obj, &format!("{what}.indices"))?;
        &wide
    };
    sc_kernels::csr::validate_parts(n_rows, n_cols, &indptr, indices, data.len())
        .map_err(|e| PyValueError::new_err(format!("{what} is not a valid CSR matrix: {e}")))?;
    if first_row_with_a_column_twice(&indptr, indices).is_some() {
        // A column stored twice in a row is read as scipy reads it: added, in a copy.
        let m = CsrMatrix::new(n_rows, n_cols, indptr, indices.to_vec(), data.to_vec())
            .map_err(|e| PyValueError::new_err(format!("{what}: {e}")))?
            .with_duplicates_summed();
        return py.detach(|| DeviceCsr::upload(ctx, &m)).map_err(kernel_err);
    }
    py.detach(|| -> sc_kernels::Result<DeviceCsr> {
        Ok(DeviceCsr {
            n_rows,
            n_cols,
            indptr: ctx.upload(&indptr)?,
            indices: ctx.upload(indices)?,
            data: ctx.upload(data)?,
        })
    })
    .map_err(kernel_err)
}
