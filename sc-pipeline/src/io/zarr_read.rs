//! Reading AnnData zarr stores (format 2 or 3, as anndata writes them): `X` as CSR, CSC or
//! dense, `obs`/`var` dataframes with categoricals and nullable columns, `obsm`, `varm`,
//! `obsp`, `varp`, `layers`, nested `uns` and `raw`; chunks decoded in parallel by `zarrs`.
//! Every structural problem is reported with the element's path.

use super::zarr_chunk_read::{direct_layout, read_chunk_into, ChunkBuffers};
use super::zarr_store::{child, NodeKind, ZarrCompression, ZarrStore};
use crate::anndata::{
    AnnData, ArrayData, Column, DataFrame, DenseArray, DenseMatrix, Matrix, Raw, Value,
};
use crate::Result;
use rayon::prelude::*;
use sc_kernels::first_match::{any_index_past, Index32};
use sc_kernels::CsrMatrix;
use serde_json::{Map, Value as Json};
use std::collections::BTreeMap;
use std::mem::MaybeUninit;
use std::path::Path;
use zarrs::array::{Array, DataType, ElementOwned};
use zarrs::array_subset::ArraySubset;
use zarrs::filesystem::FilesystemStore;

/// Reads a whole zarr store into memory.
pub fn read_zarr(path: impl AsRef<Path>) -> Result<AnnData> {
    read_zarr_with_notices(path).map(|(a, _)| a)
}

/// [`read_zarr`], also returning what the user should be told (e.g. a float64 X read as
/// float32).
pub fn read_zarr_with_notices(path: impl AsRef<Path>) -> Result<(AnnData, Vec<String>)> {
    let mut trace = sc_kernels::gpu::trace::PhaseTrace::on_host("zarr read");
    let mut r = Reader::open(path.as_ref())?;
    let x = r.matrix("/X")?;
    trace.mark("X").ok();
    let (n_obs, n_vars) = x.shape();
    let mut adata = AnnData::new(x);
    adata.obs = r.dataframe_or_default("/obs", n_obs)?;
    trace.mark("obs").ok();
    adata.var = r.dataframe_or_default("/var", n_vars)?;
    trace.mark("var").ok();
    adata.obsm = r.dense_dict("/obsm")?;
    adata.varm = r.dense_dict("/varm")?;
    adata.obsp = r.sparse_dict("/obsp")?;
    adata.varp = r.sparse_dict("/varp")?;
    if r.s.kind("/layers").is_some() {
        for name in r.s.members("/layers")? {
            let layer = r.matrix(&child("/layers", &name))?;
            adata.layers.insert(name, layer);
        }
    }
    if r.s.kind("/uns").is_some() {
        if let Value::Dict(d) = r.group_value("/uns")? {
            adata.uns = d;
        }
    }
    // anndata writes a missing `.raw` as a group encoded "null".
    if r.s.kind("/raw").is_some() && r.encoding("/raw")?.as_deref() != Some("null") {
        let x = r.matrix("/raw/X")?;
        let var = r.dataframe_or_default("/raw/var", x.shape().1)?;
        let varm = r.dense_dict("/raw/varm")?;
        adata.raw = Some(Raw { x, var, varm });
    }
    // The sparse matrices' offsets and indices were checked while reading.
    adata
        .validate_shapes()
        .map_err(|e| r.s.format("/", e.to_string()))?;
    trace.mark("the rest").ok();
    Ok((adata, r.notices))
}

/// Whether [`Reader::map_rows`] may decode chunks straight into the output: `Yes(check)`
/// when the output's values are the stored bytes (`T` is `S`, or a non-negative `i32` read as
/// `u32`), `check` saying whether a chunk's values are all valid.
enum InPlace<C> {
    Yes(C),
    No,
}

/// [`InPlace::No`] with its type spelled out.
fn mapped<S>() -> InPlace<fn(&[S]) -> bool> {
    InPlace::No
}

pub(super) struct Reader {
    pub(super) s: ZarrStore,
    notices: Vec<String>,
}

impl Reader {
    /// The AnnData store at `path` (a zarr store whose root is not another encoding, with an
    /// X), to be read.
    pub(super) fn open(path: &Path) -> Result<Reader> {
        if !super::zarr_store::is_zarr(path) {
            return Err(crate::Error::File {
                path: path.to_path_buf(),
                message: "not a zarr store (a directory with zarr.json or .zgroup)".into(),
            });
        }
        let s = ZarrStore::open(path, ZarrCompression::None)?;
        let root = s.attrs("/")?;
        if let Some(kind) = root.get("encoding-type").and_then(Json::as_str) {
            if kind != "anndata" {
                return Err(s.format("/", format!("encoding-type '{kind}' is not anndata")));
            }
        }
        if s.kind("/X").is_none() {
            return Err(s.format("/X", "missing: the store has no X matrix"));
        }
        Ok(Reader {
            s,
            notices: Vec::new(),
        })
    }

    fn encoding(&self, element: &str) -> Result<Option<String>> {
        Ok(self
            .s
            .attrs(element)?
            .get("encoding-type")
            .and_then(Json::as_str)
            .map(str::to_string))
    }

    /// Every element of the array `element` with its shape.
    fn elements<T: ElementOwned>(&self, element: &str) -> Result<(Vec<usize>, Vec<T>)> {
        let a = self.s.array(element)?;
        let shape = a.shape().to_vec();
        let v = a
            .retrieve_array_subset_elements::<T>(&ArraySubset::new_with_shape(shape.clone()))
            .map_err(|e| self.s.err(element)(&e))?;
        Ok((shape.into_iter().map(|d| d as usize).collect(), v))
    }

    /// An error unless chunk `at` of `a` starts at row `row`: reading chunk by chunk into place
    /// assumes a regular grid (chunk c at c times the first chunk's rows).
    fn on_regular_grid(
        &self,
        element: &str,
        a: &Array<FilesystemStore>,
        at: &[u64],
        row: usize,
    ) -> Result<()> {
        let start = a
            .chunk_subset(at)
            .map_err(|e| self.s.err(element)(&e))?
            .start()[0];
        if start != row as u64 {
            return Err(self.s.format(
                element,
                format!(
                    "chunk {} starts at row {start}: chunks of unequal sizes",
                    at[0]
                ),
            ));
        }
        Ok(())
    }

    /// The strings of the 1-dimensional array `a` (`element`), its chunks decoded on rayon's
    /// threads (zarrs decodes a variable-length chunk on one thread; a million cell names make
    /// one chunk's work for each core only when split).
    fn strings(&self, element: &str, a: &Array<FilesystemStore>) -> Result<Vec<String>> {
        let (Some(per), [len]) = (rows_per_chunk(a), a.shape()) else {
            return Ok(self.elements::<String>(element)?.1);
        };
        let len = *len as usize;
        let parts: Vec<Vec<String>> = (0..len.div_ceil(per.max(1)))
            .into_par_iter()
            .map(|c| {
                self.on_regular_grid(element, a, &[c as u64], c * per)?;
                let mut v = a
                    .retrieve_chunk_elements::<String>(&[c as u64])
                    .map_err(|e| self.s.err(element)(&e))?;
                // The last chunk is stored whole; only the array's part is read.
                v.truncate(len - c * per);
                if v.len() < per.min(len - c * per) {
                    return Err(self.s.format(element, format!("chunk {c} is short")));
                }
                Ok(v)
            })
            .collect::<Result<_>>()?;
        // Moved, not cloned (`concat` would copy every string).
        let mut out = Vec::with_capacity(len);
        for part in parts {
            out.extend(part);
        }
        Ok(out)
    }

    /// Every element of the array `element`, read by [`Reader::map_rows`] when its chunks are
    /// whole rows (this crate's writer makes them so), else by zarrs' whole-array read.
    fn pod_elements<T: ElementOwned + bytemuck::Pod + Send + Sync>(
        &self,
        element: &str,
    ) -> Result<(Vec<usize>, Vec<T>)> {
        let a = self.s.array(element)?;
        if rows_per_chunk(&a).is_none() {
            return self.elements::<T>(element);
        }
        let shape = a.shape().iter().map(|&d| d as usize).collect();
        let v = self.map_rows::<T, T>(element, &a, InPlace::Yes(|_: &[T]| true), Some)?;
        Ok((shape, v.expect("Some refuses no value")))
    }

    /// The array `element` of `S` values, whose chunks are whole rows, each value mapped by `f`
    /// (`None` from `f` refuses the array: `Ok(None)`): its chunks read, decoded and mapped on
    /// rayon's threads straight into their place. zarrs' whole-array read ends in a copy of the
    /// whole array on one thread; a matrix's `data` and `indices` hold billions of values.
    /// With [`InPlace::Yes`], a chunk stored as [`direct_layout`] allows is decoded by
    /// [`read_chunk_into`] straight into the output, without zarrs' buffer, then checked.
    fn map_rows<S: bytemuck::Pod, T: bytemuck::Pod + Send + Sync>(
        &self,
        element: &str,
        a: &Array<FilesystemStore>,
        in_place: InPlace<impl Fn(&[S]) -> bool + Sync>,
        f: impl Fn(S) -> Option<T> + Send + Sync,
    ) -> Result<Option<Vec<T>>> {
        let size = std::mem::size_of::<S>();
        if a.data_type().fixed_size() != Some(size) {
            return Err(self.s.format(
                element,
                format!("holds {:?}, not {size}-byte values", a.data_type()),
            ));
        }
        let Some(rows) = rows_per_chunk(a) else {
            return Err(self.s.format(element, "chunks are not whole rows"));
        };
        let too_large = || self.s.format(element, "too large for this machine");
        let dims: Vec<usize> = a
            .shape()
            .iter()
            .map(|&d| usize::try_from(d).map_err(|_| too_large()))
            .collect::<Result<_>>()?;
        let row_len = dims[1..]
            .iter()
            .try_fold(1usize, |p, &d| p.checked_mul(d))
            .ok_or_else(too_large)?;
        let len = dims[0].checked_mul(row_len).ok_or_else(too_large)?;
        let mut out: Vec<T> = Vec::with_capacity(len);
        if len == 0 {
            return Ok(Some(out));
        }
        let chunk = rows.checked_mul(row_len).ok_or_else(too_large)?;
        let direct = match in_place {
            InPlace::Yes(check)
                if std::mem::size_of::<T>() == size
                    && std::mem::align_of::<T>() >= std::mem::align_of::<S>() =>
            {
                direct_layout(a).map(|layout| (layout, check))
            }
            _ => None,
        };
        let refused = std::sync::atomic::AtomicBool::new(false);
        out.spare_capacity_mut()[..len]
            .par_chunks_mut(chunk)
            .enumerate()
            .try_for_each_init(ChunkBuffers::default, |bufs, (c, slots)| -> Result<()> {
                let mut at = vec![0u64; dims.len()];
                at[0] = c as u64;
                self.on_regular_grid(element, a, &at, c * rows)?;
                if let Some((layout, check)) = &direct {
                    // SAFETY: the slots' memory seen as bytes, to be written by the read.
                    let bytes = unsafe {
                        std::slice::from_raw_parts_mut(
                            slots.as_mut_ptr().cast::<MaybeUninit<u8>>(),
                            std::mem::size_of_val(slots),
                        )
                    };
                    let read = read_chunk_into(a, *layout, &at, chunk * size, bytes, bufs)
                        .map_err(|e| self.s.format(element, format!("chunk {c}: {e}")))?;
                    if read {
                        // SAFETY: read_chunk_into wrote every byte of the slots, which hold as
                        // many S as T (same size, alignment at least S's).
                        let values: &[S] = unsafe {
                            std::slice::from_raw_parts(slots.as_ptr().cast::<S>(), slots.len())
                        };
                        if !check(values) {
                            refused.store(true, std::sync::atomic::Ordering::Relaxed);
                        }
                        return Ok(());
                    }
                }
                let bytes = a.retrieve_chunk(&at).map_err(|e| self.s.err(element)(&e))?;
                let bytes = bytes.into_fixed().map_err(|e| self.s.err(element)(&e))?;
                // The last chunk is stored whole; only the array's part is read.
                let values = bytes
                    .chunks_exact(size)
                    .map(bytemuck::pod_read_unaligned::<S>);
                for (slot, v) in slots.iter_mut().zip(values) {
                    match f(v) {
                        Some(t) => {
                            slot.write(t);
                        }
                        None => {
                            refused.store(true, std::sync::atomic::Ordering::Relaxed);
                            return Ok(());
                        }
                    }
                }
                if bytes.len() < slots.len() * size {
                    return Err(self.s.format(element, format!("chunk {c} is short")));
                }
                Ok(())
            })?;
        if refused.into_inner() {
            return Ok(None);
        }
        // SAFETY: every chunk wrote every slot of its part (a short chunk is an error above, a
        // refused value returns before this).
        unsafe { out.set_len(len) };
        Ok(Some(out))
    }

    /// The part `part` of the numeric array `a` (`element`) as typed values, integer widths
    /// folded as [`ArrayData`] does (what a block of rows of X reads).
    pub(super) fn subset(
        &self,
        element: &str,
        a: &Array<FilesystemStore>,
        part: &ArraySubset,
    ) -> Result<ArrayData> {
        let read = Part {
            a,
            part,
            err: self.s.err(element),
        };
        self.numeric(element, a.data_type(), &read)?
            .ok_or_else(|| self.unsupported(element, a.data_type()))
    }

    /// Values of the numeric type `dt` that `read` reads, as [`ArrayData`] (integer widths
    /// folded); `None` for a type that is not numeric.
    fn numeric(
        &self,
        element: &str,
        dt: &DataType,
        read: &impl ReadValues,
    ) -> Result<Option<ArrayData>> {
        let i32s = |v: Vec<i32>| ArrayData::I32(v);
        Ok(Some(match dt {
            DataType::Float32 => ArrayData::F32(read.values::<f32>()?),
            DataType::Float64 => ArrayData::F64(read.values::<f64>()?),
            DataType::Int8 => i32s(read.values::<i8>()?.into_iter().map(i32::from).collect()),
            DataType::Int16 => i32s(read.values::<i16>()?.into_iter().map(i32::from).collect()),
            DataType::Int32 => ArrayData::I32(read.values::<i32>()?),
            DataType::Int64 => ArrayData::I64(read.values::<i64>()?),
            DataType::UInt8 => i32s(read.values::<u8>()?.into_iter().map(i32::from).collect()),
            DataType::UInt16 => i32s(read.values::<u16>()?.into_iter().map(i32::from).collect()),
            DataType::UInt32 => {
                ArrayData::I64(read.values::<u32>()?.into_iter().map(i64::from).collect())
            }
            DataType::UInt64 => ArrayData::I64(
                read.values::<u64>()?
                    .into_iter()
                    .map(i64::try_from)
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map_err(|_| self.s.format(element, "a uint64 value above int64's range"))?,
            ),
            _ => return Ok(None),
        }))
    }

    fn unsupported(&self, element: &str, dt: &DataType) -> crate::Error {
        self.s
            .format(element, format!("unsupported data type {dt:?}"))
    }

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

    /// The array `element` as typed values (integer widths folded as [`ArrayData`] does).
    fn array(&self, element: &str) -> Result<(Vec<usize>, ArrayData)> {
        let a = self.s.array(element)?;
        let shape = a.shape().iter().map(|&d| d as usize).collect();
        let data = match a.data_type() {
            DataType::Bool => ArrayData::Bool(self.elements::<bool>(element)?.1),
            DataType::String => ArrayData::Str(self.strings(element, &a)?),
            dt => {
                let read = Whole {
                    reader: self,
                    element,
                };
                self.numeric(element, dt, &read)?
                    .ok_or_else(|| self.unsupported(element, dt))?
            }
        };
        Ok((shape, data))
    }

    /// A matrix's values as float32 (float64 narrowed with a notice; integers that float32
    /// holds exactly).
    fn values(&mut self, element: &str) -> Result<Vec<f32>> {
        let (_, data) = self.array(element)?;
        self.values_of(element, data)
    }

    /// [`Reader::values`] of values read already.
    pub(super) fn values_of(&mut self, element: &str, data: ArrayData) -> Result<Vec<f32>> {
        let exact = |v: f64| v.abs() <= (1u64 << 24) as f64;
        let ints = |v: Vec<i64>, s: &ZarrStore| -> Result<Vec<f32>> {
            match v.iter().find(|&&x| !exact(x as f64)) {
                Some(bad) => Err(s.format(
                    element,
                    format!("integer {bad} cannot be held exactly as float32"),
                )),
                None => Ok(v.into_par_iter().map(|x| x as f32).collect()),
            }
        };
        match data {
            ArrayData::F32(v) => Ok(v),
            ArrayData::F64(v) => {
                self.notices.push(format!(
                    "notice: {element} is stored as float64 and was read as float32"
                ));
                Ok(v.into_iter().map(|x| x as f32).collect())
            }
            ArrayData::I32(v) => ints(v.into_iter().map(i64::from).collect(), &self.s),
            ArrayData::I64(v) => ints(v, &self.s),
            ArrayData::Bool(v) => Ok(v.into_iter().map(|b| b as u8 as f32).collect()),
            ArrayData::Str(_) => Err(self.s.format(element, "a matrix of strings")),
        }
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
    fn indices(&self, element: &str, minor: usize) -> Result<Vec<u32>> {
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
    fn matrix(&mut self, element: &str) -> Result<Matrix> {
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
    fn sparse(&mut self, element: &str) -> Result<CsrMatrix<f32>> {
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
        Ok(if csc { m.transpose() } else { m })
    }

    /// Whether the sparse group `element` is CSC (else CSR), and its shape.
    pub(super) fn sparse_header(&self, element: &str) -> Result<(bool, usize, usize)> {
        let attrs = self.s.attrs(element)?;
        let csc = match attrs.get("encoding-type").and_then(Json::as_str) {
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

    pub(super) fn dataframe_or_default(
        &mut self,
        element: &str,
        n_rows: usize,
    ) -> Result<DataFrame> {
        if self.s.kind(element).is_none() {
            return Ok(DataFrame::with_default_index(n_rows));
        }
        let df = self.dataframe(element)?;
        if df.n_rows() != n_rows {
            return Err(self.s.format(
                element,
                format!("has {} rows but the matrix has {n_rows}", df.n_rows()),
            ));
        }
        Ok(df)
    }

    /// A pandas dataframe: `_index` names the index array, `column-order` the columns.
    fn dataframe(&mut self, element: &str) -> Result<DataFrame> {
        let attrs = self.s.attrs(element)?;
        match attrs.get("encoding-type").and_then(Json::as_str) {
            Some("dataframe") | None => {}
            Some(other) => {
                return Err(self.s.format(
                    element,
                    format!("expected a dataframe, encoding-type is '{other}'"),
                ))
            }
        }
        let index_name = str_attr(&attrs, "_index").ok_or_else(|| {
            self.s
                .format(element, "dataframe has no '_index' attribute")
        })?;
        let index_el = child(element, &index_name);
        let index = self
            .column(&index_el)?
            .into_index_names()
            .ok_or_else(|| self.s.format(&index_el, "the index must hold strings"))?;
        let mut df = DataFrame::with_index(index);
        df.index_name = index_name;
        let order: Vec<String> = attrs
            .get("column-order")
            .and_then(Json::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Json::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        for name in order {
            let col_el = child(element, &name);
            if self.s.kind(&col_el).is_none() {
                return Err(self
                    .s
                    .format(&col_el, "column listed in column-order is missing"));
            }
            let column = self.column(&col_el)?;
            if column.len() != df.n_rows() {
                return Err(self.s.format(
                    &col_el,
                    format!("has {} values for {} rows", column.len(), df.n_rows()),
                ));
            }
            df.set(name, column)
                .map_err(|e| self.s.format(&col_el, e.to_string()))?;
        }
        Ok(df)
    }

    /// One dataframe column: a 1-D array, a categorical group or a nullable group.
    fn column(&mut self, element: &str) -> Result<Column> {
        if self.s.kind(element) == Some(NodeKind::Array) {
            let (shape, data) = self.array(element)?;
            if shape.len() != 1 {
                return Err(self.s.format(
                    element,
                    format!("a column must be 1-dimensional, has shape {shape:?}"),
                ));
            }
            return Ok(Column::Values(data));
        }
        let attrs = self.s.attrs(element)?;
        match attrs.get("encoding-type").and_then(Json::as_str) {
            Some("categorical") => {
                let codes_el = child(element, "codes");
                let codes = match self.array(&codes_el)?.1 {
                    ArrayData::I32(v) => v,
                    other => {
                        return Err(self.s.format(
                            &codes_el,
                            format!("codes must be small integers, are {}", other.type_name()),
                        ))
                    }
                };
                let categories = self.array(&child(element, "categories"))?.1;
                if let Some(problem) = Column::bad_category_code(&codes, categories.len()) {
                    return Err(self.s.format(&codes_el, problem));
                }
                let ordered = attrs
                    .get("ordered")
                    .and_then(Json::as_bool)
                    .unwrap_or(false);
                Ok(Column::Categorical {
                    codes,
                    categories,
                    ordered,
                })
            }
            Some("nullable-integer" | "nullable-boolean" | "nullable-string-array") => {
                let values = self.array(&child(element, "values"))?.1;
                let mask_el = child(element, "mask");
                let mask = match self.array(&mask_el)?.1 {
                    ArrayData::Bool(m) => m,
                    other => {
                        return Err(self.s.format(
                            &mask_el,
                            format!("mask must be boolean, is {}", other.type_name()),
                        ))
                    }
                };
                if mask.len() != values.len() {
                    return Err(self.s.format(
                        element,
                        format!("{} values but {} mask entries", values.len(), mask.len()),
                    ));
                }
                Ok(Column::Nullable { values, mask })
            }
            Some(other) => Err(self
                .s
                .format(element, format!("unsupported column encoding '{other}'"))),
            None => Err(self.s.format(element, "column group has no encoding-type")),
        }
    }

    /// `obsm` / `varm`: dense arrays by name.
    fn dense_dict(&mut self, element: &str) -> Result<BTreeMap<String, DenseArray>> {
        let mut out = BTreeMap::new();
        if self.s.kind(element).is_none() {
            return Ok(out);
        }
        for key in self.s.members(element)? {
            let el = child(element, &key);
            if self.s.kind(&el) == Some(NodeKind::Group) {
                return Err(self.s.format(
                    &el,
                    "only dense arrays are supported here (found a group: sparse matrix or dataframe)",
                ));
            }
            let (shape, data) = self.array(&el)?;
            out.insert(key, DenseArray { shape, data });
        }
        Ok(out)
    }

    /// `obsp` / `varp`: sparse matrices by name.
    fn sparse_dict(&mut self, element: &str) -> Result<BTreeMap<String, CsrMatrix<f32>>> {
        let mut out = BTreeMap::new();
        if self.s.kind(element).is_none() {
            return Ok(out);
        }
        for key in self.s.members(element)? {
            let m = match self.matrix(&child(element, &key))? {
                Matrix::Sparse(m) => m,
                Matrix::Dense(d) => CsrMatrix::from_dense(&d),
                Matrix::Device(_) => unreachable!("the reader makes host matrices"),
            };
            out.insert(key, m);
        }
        Ok(out)
    }

    /// Any element of `uns`, by its encoding.
    fn value(&mut self, element: &str) -> Result<Value> {
        if self.s.kind(element) == Some(NodeKind::Group) {
            return self.group_value(element);
        }
        match self.encoding(element)?.as_deref() {
            Some("rec-array") => {
                return super::zarr_records::read_records(&self.s, element).map(Value::Records)
            }
            Some("null") => return Ok(Value::Null),
            Some("array" | "string-array" | "numeric-scalar" | "string") | None => {}
            Some(other) => {
                return Err(self
                    .s
                    .format(element, format!("unsupported encoding-type '{other}'")))
            }
        }
        let (shape, data) = self.array(element)?;
        Ok(Value::from_array(shape, data))
    }

    fn group_value(&mut self, element: &str) -> Result<Value> {
        match self.encoding(element)?.as_deref() {
            Some("dict") | None => {
                let mut d = BTreeMap::new();
                for key in self.s.members(element)? {
                    let el = child(element, &key);
                    // A None that anndata wrote ("null"): no value to hold.
                    if self.encoding(&el)?.as_deref() == Some("null") {
                        continue;
                    }
                    let v = self.value(&el)?;
                    d.insert(key, v);
                }
                Ok(Value::Dict(d))
            }
            Some("dataframe") => Ok(Value::DataFrame(self.dataframe(element)?)),
            Some("csr_matrix" | "csc_matrix") => Ok(Value::Sparse(self.sparse(element)?)),
            Some(other) => Err(self.s.format(
                element,
                format!("unsupported encoding-type '{other}' in uns"),
            )),
        }
    }
}

/// Reads the values of one numeric element type of an array (see [`Reader::numeric`]).
trait ReadValues {
    fn values<T: ElementOwned + bytemuck::Pod + Send + Sync>(&self) -> Result<Vec<T>>;
}

/// A whole array, chunk by chunk into place where its chunks are whole rows.
struct Whole<'a> {
    reader: &'a Reader,
    element: &'a str,
}

impl ReadValues for Whole<'_> {
    fn values<T: ElementOwned + bytemuck::Pod + Send + Sync>(&self) -> Result<Vec<T>> {
        self.reader.pod_elements::<T>(self.element).map(|(_, v)| v)
    }
}

/// A part of an array.
struct Part<'a, E> {
    a: &'a Array<FilesystemStore>,
    part: &'a ArraySubset,
    err: E,
}

impl<E: Fn(&dyn std::fmt::Display) -> crate::Error> ReadValues for Part<'_, E> {
    fn values<T: ElementOwned + bytemuck::Pod + Send + Sync>(&self) -> Result<Vec<T>> {
        self.a
            .retrieve_array_subset_elements::<T>(self.part)
            .map_err(|e| (self.err)(&e))
    }
}

/// Rows per chunk when every chunk of `a` is whole rows (all dimensions but the first whole; a
/// 1-dimensional array always), else `None` (also for a 0-dimensional array).
fn rows_per_chunk(a: &Array<FilesystemStore>) -> Option<usize> {
    let shape = a.shape();
    if shape.is_empty() {
        return None;
    }
    let c = a.chunk_shape(&vec![0; shape.len()]).ok()?;
    let whole = c[1..].iter().zip(&shape[1..]).all(|(c, &d)| c.get() == d);
    whole.then(|| c[0].get() as usize)
}

fn str_attr(attrs: &Map<String, Json>, key: &str) -> Option<String> {
    attrs.get(key).and_then(Json::as_str).map(str::to_string)
}
