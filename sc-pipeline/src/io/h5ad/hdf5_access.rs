//! Typed access to HDF5 elements shared by the h5ad and 10x readers and the h5ad writer: element
//! lookup with clear errors, element-type dispatch, strings of every HDF5 flavour, and the
//! checked conversions of sparse-matrix arrays.

use super::direct_read::read_direct_converted;
use crate::anndata::ArrayData;
use crate::io::notices::Notices;
use crate::{Error, Result};
use hdf5::types::{
    FixedAscii, FixedUnicode, FloatSize, IntSize, TypeDescriptor, VarLenAscii, VarLenUnicode,
};
use hdf5::{Attribute, Container, Dataset, File, Group, H5Type, Location};
use rayon::prelude::*;
use sc_kernels::first_match::{par_first_index_past, par_position_first};
use std::ops::Range;
use std::path::{Path, PathBuf};

/// Largest integer a float32 holds exactly: counts above it would be silently rounded.
const F32_EXACT_INT: f64 = 16_777_216.0;

/// A file being read or written, so every error can name the file and the element, and what
/// reading it noticed.
pub(crate) struct H5Ctx {
    pub path: PathBuf,
    pub notices: Notices,
}

impl H5Ctx {
    pub fn new(path: &Path) -> Self {
        H5Ctx {
            path: path.to_path_buf(),
            notices: Notices::default(),
        }
    }

    pub fn format(&self, element: &str, problem: impl Into<String>) -> Error {
        Error::format(&self.path, element, problem)
    }

    pub fn h5(&self, element: &str) -> impl Fn(hdf5::Error) -> Error + '_ {
        let element = element.to_string();
        move |e| Error::hdf5(&self.path, element.clone(), e)
    }

    /// Opens an existing file for reading.
    pub fn open(&self) -> Result<File> {
        if !self.path.exists() {
            return Err(Error::File {
                path: self.path.clone(),
                message: "no such file".into(),
            });
        }
        if self.path.is_dir() {
            return Err(Error::File {
                path: self.path.clone(),
                message: "is a directory: give an .h5ad file or a 10x Genomics .h5 matrix".into(),
            });
        }
        hdf5::silence_errors(true);
        File::open(&self.path).map_err(|e| Error::File {
            path: self.path.clone(),
            message: format!("not a readable HDF5 file ({e})"),
        })
    }

    pub fn group(&self, parent: &Group, name: &str, element: &str) -> Result<Group> {
        if !parent.link_exists(name) {
            return Err(self.format(element, "missing (no such group)"));
        }
        parent
            .group(name)
            .map_err(|_| self.format(element, "is not a group"))
    }

    pub fn dataset(&self, parent: &Group, name: &str, element: &str) -> Result<Dataset> {
        if !parent.link_exists(name) {
            return Err(self.format(element, "missing (no such dataset)"));
        }
        parent
            .dataset(name)
            .map_err(|_| self.format(element, "is not a dataset"))
    }

    pub fn descriptor(&self, c: &Container, element: &str) -> Result<TypeDescriptor> {
        c.dtype()
            .and_then(|t| t.to_descriptor())
            .map_err(|e| self.format(element, format!("unsupported element type ({e})")))
    }

    /// The attribute `name` of `loc`, `None` when absent.
    fn attr(&self, loc: &Location, name: &str, element: &str) -> Result<Option<Attribute>> {
        if !loc
            .attr_names()
            .map_err(self.h5(element))?
            .iter()
            .any(|n| n == name)
        {
            return Ok(None);
        }
        loc.attr(name).map(Some).map_err(self.h5(element))
    }

    /// A string attribute, `None` when absent.
    pub fn string_attr(&self, loc: &Location, name: &str, element: &str) -> Result<Option<String>> {
        let Some(attr) = self.attr(loc, name, element)? else {
            return Ok(None);
        };
        let values = self.strings(&attr, &format!("{element} attribute '{name}'"))?;
        match values.len() {
            1 => Ok(values.into_iter().next()),
            n => Err(self.format(
                element,
                format!("attribute '{name}' should be one string, has {n}"),
            )),
        }
    }

    /// A string-array attribute (such as `column-order`); an empty numeric array counts as empty,
    /// as anndata writes it for tables without columns.
    pub fn string_list_attr(
        &self,
        loc: &Location,
        name: &str,
        element: &str,
    ) -> Result<Option<Vec<String>>> {
        let Some(attr) = self.attr(loc, name, element)? else {
            return Ok(None);
        };
        let el = format!("{element} attribute '{name}'");
        match self.descriptor(&attr, &el)? {
            d if is_string(&d) => Ok(Some(self.strings(&attr, &el)?)),
            _ if attr.size() == 0 => Ok(Some(Vec::new())),
            d => Err(self.format(
                element,
                format!("attribute '{name}' should hold strings, holds {d}"),
            )),
        }
    }

    /// An integer-array attribute (such as a sparse matrix's `shape`).
    pub fn int_list_attr(
        &self,
        loc: &Location,
        name: &str,
        element: &str,
    ) -> Result<Option<Vec<i64>>> {
        let Some(attr) = self.attr(loc, name, element)? else {
            return Ok(None);
        };
        match self.descriptor(&attr, element)? {
            TypeDescriptor::Integer(_) | TypeDescriptor::Unsigned(_) => {
                Ok(Some(attr.read_raw::<i64>().map_err(self.h5(element))?))
            }
            d => Err(self.format(
                element,
                format!("attribute '{name}' should hold integers, holds {d}"),
            )),
        }
    }

    /// A boolean attribute (numpy bools are stored as HDF5 enums).
    pub fn bool_attr(&self, loc: &Location, name: &str, element: &str) -> Result<Option<bool>> {
        let Some(attr) = self.attr(loc, name, element)? else {
            return Ok(None);
        };
        let v = match self.descriptor(&attr, element)? {
            TypeDescriptor::Boolean => attr.read_raw::<bool>().map_err(self.h5(element))?,
            TypeDescriptor::Integer(_) | TypeDescriptor::Unsigned(_) => attr
                .read_raw::<i64>()
                .map_err(self.h5(element))?
                .into_iter()
                .map(|x| x != 0)
                .collect(),
            d => {
                return Err(self.format(
                    element,
                    format!("attribute '{name}' should be a boolean, is {d}"),
                ))
            }
        };
        Ok(v.first().copied())
    }

    /// Every string of a dataset or attribute, whatever its HDF5 string flavour.
    pub fn strings(&self, c: &Container, element: &str) -> Result<Vec<String>> {
        macro_rules! fixed {
            ($ty:ident, $n:expr) => {{
                match $n {
                    0..=16 => read_fixed::<$ty<16>>(c),
                    17..=64 => read_fixed::<$ty<64>>(c),
                    65..=256 => read_fixed::<$ty<256>>(c),
                    257..=4096 => read_fixed::<$ty<4096>>(c),
                    n => {
                        return Err(self.format(
                            element,
                            format!("fixed-length strings of {n} bytes are too long"),
                        ))
                    }
                }
            }};
        }
        let d = self.descriptor(c, element)?;
        let out = match d {
            TypeDescriptor::VarLenUnicode => c.read_raw::<VarLenUnicode>().map(|v| {
                v.iter()
                    .map(|s| String::from_utf8_lossy(s.as_bytes()).into_owned())
                    .collect()
            }),
            TypeDescriptor::VarLenAscii => c.read_raw::<VarLenAscii>().map(|v| {
                v.iter()
                    .map(|s| String::from_utf8_lossy(s.as_bytes()).into_owned())
                    .collect()
            }),
            TypeDescriptor::FixedAscii(n) => fixed!(FixedAscii, n),
            TypeDescriptor::FixedUnicode(n) => fixed!(FixedUnicode, n),
            other => return Err(self.format(element, format!("expected strings, found {other}"))),
        };
        out.map_err(self.h5(element))
    }

    /// A whole 1-D or n-D dataset as typed values, with its shape.
    pub fn array(&self, ds: &Container, element: &str) -> Result<(Vec<usize>, ArrayData)> {
        let shape = ds.shape();
        let d = self.descriptor(ds, element)?;
        let h5 = self.h5(element);
        let data = match d {
            TypeDescriptor::Boolean => ArrayData::Bool(ds.read_raw::<bool>().map_err(h5)?),
            TypeDescriptor::Integer(IntSize::U1 | IntSize::U2 | IntSize::U4)
            | TypeDescriptor::Unsigned(IntSize::U1 | IntSize::U2) => {
                ArrayData::I32(ds.read_raw::<i32>().map_err(h5)?)
            }
            TypeDescriptor::Integer(IntSize::U8) | TypeDescriptor::Unsigned(IntSize::U4) => {
                ArrayData::I64(ds.read_raw::<i64>().map_err(h5)?)
            }
            TypeDescriptor::Unsigned(IntSize::U8) => {
                let v = ds.read_raw::<u64>().map_err(h5)?;
                if let Some(big) = v.iter().find(|&&x| x > i64::MAX as u64) {
                    return Err(
                        self.format(element, format!("uint64 value {big} does not fit int64"))
                    );
                }
                ArrayData::I64(v.into_iter().map(|x| x as i64).collect())
            }
            TypeDescriptor::Float(FloatSize::U4) => {
                ArrayData::F32(ds.read_raw::<f32>().map_err(h5)?)
            }
            TypeDescriptor::Float(FloatSize::U8) => {
                ArrayData::F64(ds.read_raw::<f64>().map_err(h5)?)
            }
            d if is_string(&d) => ArrayData::Str(self.strings(ds, element)?),
            other => return Err(self.format(element, format!("unsupported element type {other}"))),
        };
        Ok((shape, data))
    }

    /// Stored matrix values (all of them, or `range`) as float32. Integers are converted
    /// exactly (values float32 cannot hold exactly are refused rather than rounded); float64
    /// values are rounded, which is recorded in `notices`.
    pub fn matrix_values(
        &self,
        ds: &Dataset,
        range: Option<Range<usize>>,
        element: &str,
    ) -> Result<Vec<f32>> {
        let d = self.descriptor(ds, element)?;
        let values: Vec<f32> = match d {
            TypeDescriptor::Float(FloatSize::U4) => {
                read_range::<f32>(&self.path, ds, range).map_err(self.h5(element))?
            }
            TypeDescriptor::Float(FloatSize::U8) => {
                let v = read_range::<f64>(&self.path, ds, range).map_err(self.h5(element))?;
                self.notices
                    .float64_read_as_float32(matrix_name(element, ds));
                v.par_iter().map(|&x| x as f32).collect()
            }
            TypeDescriptor::Integer(_) | TypeDescriptor::Unsigned(_) | TypeDescriptor::Boolean => {
                let v = read_range::<i64>(&self.path, ds, range).map_err(self.h5(element))?;
                if let Some(big) =
                    par_position_first(&v, |&x| (x as f64).abs() > F32_EXACT_INT).map(|p| v[p])
                {
                    return Err(self.format(
                        element,
                        format!(
                            "integer value {big} cannot be held exactly as float32 (limit 2^24)"
                        ),
                    ));
                }
                v.par_iter().map(|&x| x as f32).collect()
            }
            other => {
                return Err(self.format(
                    element,
                    format!("matrix values must be numbers, found {other}"),
                ))
            }
        };
        Ok(values)
    }

    /// Column (or row) indices of stored values, checked to be in `0..bound`.
    pub fn matrix_indices(
        &self,
        ds: &Dataset,
        range: Option<Range<usize>>,
        bound: usize,
        element: &str,
    ) -> Result<Vec<u32>> {
        let d = self.descriptor(ds, element)?;
        let out_of_range = |pos: usize, v: i64| {
            self.format(
                element,
                format!("index {v} at position {pos} is outside 0..{bound}"),
            )
        };
        let offset = range.as_ref().map_or(0, |r| r.start);
        match d {
            TypeDescriptor::Integer(IntSize::U4) => {
                let v = read_range::<i32>(&self.path, ds, range).map_err(self.h5(element))?;
                if let Some(pos) = par_first_index_past(&v, bound) {
                    return Err(out_of_range(offset + pos, v[pos] as i64));
                }
                Ok(reinterpret_i32_as_u32(v))
            }
            TypeDescriptor::Integer(_) | TypeDescriptor::Unsigned(_) => {
                // Narrowed piece by piece while read (int64 indices are twice the memory);
                // a refused piece, or a layout read by the library, takes the whole read below,
                // which names the first bad index.
                // Negative or past the bound: one check for the pieces and the whole read.
                let past = |x: i64| x < 0 || x as u64 >= bound as u64;
                let valid = |v: &[i64]| !v.iter().fold(false, |f, &x| f | past(x));
                if let Some(Ok(v)) =
                    read_direct_converted(&self.path, ds, range.clone(), valid, |x| x as u32)
                {
                    return Ok(v);
                }
                let v = read_range::<i64>(&self.path, ds, range).map_err(self.h5(element))?;
                if let Some(pos) = par_position_first(&v, |&x| past(x)) {
                    return Err(out_of_range(offset + pos, v[pos]));
                }
                Ok(v.par_iter().map(|&x| x as u32).collect())
            }
            other => Err(self.format(element, format!("indices must be integers, found {other}"))),
        }
    }

    /// Row offsets: `n_major + 1` non-negative, non-decreasing values starting at 0 and ending
    /// at `nnz`.
    pub fn matrix_indptr(
        &self,
        ds: &Dataset,
        n_major: usize,
        nnz: usize,
        element: &str,
    ) -> Result<Vec<u64>> {
        match self.descriptor(ds, element)? {
            TypeDescriptor::Integer(_) | TypeDescriptor::Unsigned(_) => {}
            other => {
                return Err(self.format(element, format!("offsets must be integers, found {other}")))
            }
        }
        if ds.ndim() != 1 || ds.size() != n_major + 1 {
            return Err(self.format(
                element,
                format!(
                    "has {} entries, expected {} (one more than the number of rows)",
                    ds.size(),
                    n_major + 1
                ),
            ));
        }
        let v = ds.read_raw::<i64>().map_err(self.h5(element))?;
        if v[0] != 0 {
            return Err(self.format(element, format!("must start at 0, starts at {}", v[0])));
        }
        if let Some(i) = v.windows(2).position(|w| w[1] < w[0]) {
            return Err(self.format(
                element,
                format!("decreases at row {i}: {} -> {}", v[i], v[i + 1]),
            ));
        }
        let last = v[n_major];
        if last as u64 != nnz as u64 {
            return Err(self.format(
                element,
                format!("ends at {last} but there are {nnz} stored values"),
            ));
        }
        Ok(v.into_iter().map(|x| x as u64).collect())
    }
}

/// The matrix whose values `ds` holds: the element of a dense matrix (2-D), the group of a sparse
/// matrix's `data` (1-D), without the leading `/` (`X`, `raw/X`, `layers/counts`).
fn matrix_name<'a>(element: &'a str, ds: &Dataset) -> &'a str {
    let name = element.trim_start_matches('/');
    match ds.ndim() {
        1 => name.strip_suffix("/data").unwrap_or(name),
        _ => name,
    }
}

pub(crate) fn is_string(d: &TypeDescriptor) -> bool {
    matches!(
        d,
        TypeDescriptor::VarLenUnicode
            | TypeDescriptor::VarLenAscii
            | TypeDescriptor::FixedAscii(_)
            | TypeDescriptor::FixedUnicode(_)
    )
}

/// Types whose bytes are text (fixed-length strings).
trait AsBytes {
    fn bytes(&self) -> &[u8];
}
impl<const N: usize> AsBytes for FixedAscii<N> {
    fn bytes(&self) -> &[u8] {
        self.as_bytes()
    }
}
impl<const N: usize> AsBytes for FixedUnicode<N> {
    fn bytes(&self) -> &[u8] {
        self.as_bytes()
    }
}

fn read_fixed<T: H5Type + AsBytes>(c: &Container) -> hdf5::Result<Vec<String>> {
    Ok(c.read_raw::<T>()?
        .iter()
        .map(|s| String::from_utf8_lossy(s.bytes()).into_owned())
        .collect())
}

/// The whole dataset, or one contiguous hyperslab of a 1-D dataset: straight from the file with
/// parallel reads where the layout allows (see `direct_read`), else through the library.
fn read_range<T: H5Type + Copy + PartialEq + Send + Sync>(
    path: &Path,
    ds: &Dataset,
    range: Option<Range<usize>>,
) -> hdf5::Result<Vec<T>> {
    if let Some(v) = super::direct_read::read_direct::<T>(path, ds, range.clone()) {
        return Ok(v);
    }
    match range {
        None => ds.read_raw::<T>(),
        Some(r) if r.is_empty() => Ok(Vec::new()),
        Some(r) => Ok(ds.read_slice_1d::<T, _>(r)?.into_raw_vec_and_offset().0),
    }
}

/// Reuses the allocation of checked non-negative i32 values as u32 values.
fn reinterpret_i32_as_u32(v: Vec<i32>) -> Vec<u32> {
    let mut v = std::mem::ManuallyDrop::new(v);
    // SAFETY: i32 and u32 have the same size and alignment, every value was checked to be
    // non-negative, and the original vector is not dropped.
    unsafe { Vec::from_raw_parts(v.as_mut_ptr() as *mut u32, v.len(), v.capacity()) }
}

/// Views u32 indices below 2^31 as the i32 values anndata (scipy) expects on disk.
pub(crate) fn u32_as_i32(v: &[u32]) -> &[i32] {
    // SAFETY: same size and alignment; callers only pass indices < n_cols <= i32::MAX.
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const i32, v.len()) }
}

/// Views u64 offsets below 2^63 as i64 values.
pub(crate) fn u64_as_i64(v: &[u64]) -> &[i64] {
    // SAFETY: same size and alignment; offsets never exceed the number of stored values.
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const i64, v.len()) }
}

/// Strings as HDF5 variable-length UTF-8 values (interior NUL bytes cannot be stored); each is
/// copied into memory of its own, on rayon's threads (a million cell names).
pub(crate) fn to_varlen(values: &[String]) -> std::result::Result<Vec<VarLenUnicode>, String> {
    values
        .par_iter()
        .map(|s| {
            s.parse::<VarLenUnicode>()
                .map_err(|_| format!("string {s:?} contains a NUL byte"))
        })
        .collect()
}
