//! Reading a zarr store's matrices: X and the layers as CSR (from CSR or CSC groups) or dense,
//! their offsets and indices checked while they are read.

use super::read::Reader;
use super::read_arrays::{mapped, InPlace};
use super::store::{child, NodeKind};
use crate::anndata::{ArrayData, DenseMatrix, Matrix};
use crate::io::encoding::ENCODING_TYPE;
use crate::Result;
use sc_kernels::first_match::{any_index_past, Index32};
use sc_kernels::CsrMatrix;
use serde_json::Value as Json;
use zarrs::array::{Array, DataType};
use zarrs::filesystem::FilesystemStore;

impl Reader {
    /// Column indices read already, checked to be below `minor`.
    pub(super) fn indices_of(
        &self,
        element: &str,
        data: ArrayData,
        minor: usize,
    ) -> Result<Vec<u32>> {
        let below = |i: i64| u32::try_from(i).ok().filter(|&i| (i as usize) < minor);
        let out: Option<Vec<u32>> = match data {
            ArrayData::I32(v) => v.into_iter().map(|i| below(i64::from(i))).collect(),
            ArrayData::I64(v) => v.into_iter().map(below).collect(),
            other => {
                return Err(self.s.format(
                    element,
                    format!("indices must be integers, are {}", other.type_name()),
                ))
            }
        };
        out.ok_or_else(|| {
            self.s
                .format(element, format!("an index is out of range (0 to {minor})"))
        })
    }

    /// Offsets or indices as u64, refusing negative values.
    pub(super) fn offsets(&self, element: &str) -> Result<Vec<u64>> {
        let neg = || self.s.format(element, "a negative offset or index");
        match self.array(element)?.1 {
            ArrayData::I32(v) => v
                .into_iter()
                .map(|x| u64::try_from(x).map_err(|_| neg()))
                .collect(),
            ArrayData::I64(v) => v
                .into_iter()
                .map(|x| u64::try_from(x).map_err(|_| neg()))
                .collect(),
            other => Err(self.s.format(
                element,
                format!("must hold integers, holds {}", other.type_name()),
            )),
        }
    }

    /// Column (or row) indices below `minor`, checked and converted chunk by chunk on rayon's
    /// threads (a large matrix holds billions).
    pub(super) fn indices(&self, element: &str, minor: usize) -> Result<Vec<u32>> {
        fn below<T: TryInto<u32>>(minor: usize) -> impl Fn(T) -> Option<u32> + Send + Sync {
            move |i| i.try_into().ok().filter(|&i| (i as usize) < minor)
        }
        // Read in place, the indices of a chunk checked at once (a scan that vectorizes).
        fn valid<I: Index32>(minor: usize) -> InPlace<impl Fn(&[I]) -> bool + Sync> {
            InPlace::Yes(move |v: &[I]| !any_index_past(v, minor))
        }
        let a = self.s.array(element)?;
        let out = match a.data_type() {
            DataType::Int32 => {
                self.map_rows::<i32, u32>(element, &a, valid::<i32>(minor), below(minor))?
            }
            DataType::Int64 => self.map_rows::<i64, u32>(element, &a, mapped(), below(minor))?,
            DataType::UInt32 => {
                self.map_rows::<u32, u32>(element, &a, valid::<u32>(minor), below(minor))?
            }
            DataType::UInt64 => self.map_rows::<u64, u32>(element, &a, mapped(), below(minor))?,
            other => {
                return Err(self
                    .s
                    .format(element, format!("indices must be integers, are {other:?}")))
            }
        };
        out.ok_or_else(|| {
            self.s
                .format(element, format!("an index is out of range (0 to {minor})"))
        })
    }

    /// `X`, a layer or `raw/X`: a sparse group or a dense 2-D array.
    pub(super) fn matrix(&mut self, element: &str) -> Result<Matrix> {
        match self.s.kind(element) {
            Some(NodeKind::Group) => Ok(Matrix::Sparse(self.sparse(element)?)),
            Some(NodeKind::Array) => {
                let (n_rows, n_cols) = self.dense_shape(element, &self.s.array(element)?)?;
                let data = self.values(element)?;
                Ok(Matrix::Dense(DenseMatrix {
                    n_rows,
                    n_cols,
                    data,
                }))
            }
            None => Err(self.s.format(element, "missing")),
        }
    }

    /// Rows and columns of the dense matrix `a` (`element`), refused unless 2-dimensional.
    pub(super) fn dense_shape(
        &self,
        element: &str,
        a: &Array<FilesystemStore>,
    ) -> Result<(usize, usize)> {
        match a.shape()[..] {
            [n, m] => Ok((n as usize, m as usize)),
            ref shape => Err(self.s.format(
                element,
                format!("a dense matrix must be 2-dimensional, has shape {shape:?}"),
            )),
        }
    }

    /// A `csr_matrix` or `csc_matrix` group, as CSR.
    pub(super) fn sparse(&mut self, element: &str) -> Result<CsrMatrix<f32>> {
        let (csc, n_rows, n_cols) = self.sparse_header(element)?;
        let (major, minor) = if csc {
            (n_cols, n_rows)
        } else {
            (n_rows, n_cols)
        };
        let mut trace = sc_kernels::gpu::trace::PhaseTrace::on_host("zarr read sparse");
        let data = self.values(&child(element, "data"))?;
        trace.mark("data").ok();
        let indices = self.indices(&child(element, "indices"), minor)?;
        trace.mark("indices").ok();
        let indptr_el = child(element, "indptr");
        let indptr = self.offsets(&indptr_el)?;
        trace.mark("indptr").ok();
        if indices.len() != data.len() {
            return Err(self.s.format(
                element,
                format!(
                    "data has {} values but indices has {}",
                    data.len(),
                    indices.len()
                ),
            ));
        }
        self.check_indptr(&indptr_el, &indptr, major, data.len())?;
        // Checked above: offsets, lengths and every index (no pass over them again).
        let m = CsrMatrix {
            n_rows: major,
            n_cols: minor,
            indptr,
            indices,
            data,
        };
        // CSC arrays are the CSR arrays of the transpose.
        let m = if csc { m.transpose() } else { m };
        // A column stored twice in a row: added, as scipy reads the store (the steps' dense
        // rows would keep one value).
        let (m, added) = m.into_duplicates_summed();
        if added {
            self.notices
                .push(crate::io::notices::repeated_columns_added(element, true));
        }
        Ok(m)
    }

    /// Whether the sparse group `element` is CSC (else CSR), and its shape.
    pub(super) fn sparse_header(&self, element: &str) -> Result<(bool, usize, usize)> {
        let attrs = self.s.attrs(element)?;
        let csc = match attrs.get(ENCODING_TYPE).and_then(Json::as_str) {
            Some("csr_matrix") => false,
            Some("csc_matrix") => true,
            Some(other) => {
                return Err(self.s.format(
                    element,
                    format!("encoding-type '{other}' is not a sparse matrix"),
                ))
            }
            None => {
                return Err(self
                    .s
                    .format(element, "group has no encoding-type: not a sparse matrix"))
            }
        };
        let shape: Vec<u64> = attrs
            .get("shape")
            .and_then(Json::as_array)
            .map(|s| s.iter().filter_map(Json::as_u64).collect())
            .unwrap_or_default();
        let [n_rows, n_cols] = shape[..] else {
            return Err(self
                .s
                .format(element, "sparse matrix has no 'shape' of two sizes"));
        };
        Ok((csc, n_rows as usize, n_cols as usize))
    }

    /// Refuses offsets `indptr` (the array `element`) that are not `major + 1` values rising
    /// from 0 to `nnz`.
    pub(super) fn check_indptr(
        &self,
        element: &str,
        indptr: &[u64],
        major: usize,
        nnz: usize,
    ) -> Result<()> {
        if indptr.len() != major + 1 {
            return Err(self.s.format(
                element,
                format!("has {} offsets, expected {}", indptr.len(), major + 1),
            ));
        }
        if let Some(i) = indptr.windows(2).position(|w| w[1] < w[0]) {
            let (a, b) = (indptr[i], indptr[i + 1]);
            return Err(self
                .s
                .format(element, format!("decreases at row {i}: {a} -> {b}")));
        }
        if (indptr[0], indptr[major]) != (0, nnz as u64) {
            return Err(self.s.format(
                element,
                format!(
                    "runs from {} to {}, not from 0 to the {} stored values",
                    indptr[0], indptr[major], nnz
                ),
            ));
        }
        Ok(())
    }
}
