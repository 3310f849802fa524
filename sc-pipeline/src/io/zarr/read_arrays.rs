//! Reading a zarr store's arrays: whole or in part, as typed values, as strings, as the
//! float32 values of a matrix, chunk by chunk in parallel (straight into the output where the
//! chunks are whole rows).

use super::chunk_read::{direct_layout, read_chunk_into, ChunkBuffers};
use super::read::Reader;
use super::store::ZarrStore;
use crate::anndata::ArrayData;
use crate::Result;
use rayon::prelude::*;
use std::mem::MaybeUninit;
use zarrs::array::{Array, DataType, ElementOwned};
use zarrs::array_subset::ArraySubset;
use zarrs::filesystem::FilesystemStore;

/// Whether [`Reader::map_rows`] may decode chunks straight into the output: `Yes(check)`
/// when the output's values are the stored bytes (`T` is `S`, or a non-negative `i32` read as
/// `u32`), `check` saying whether a chunk's values are all valid.
pub(super) enum InPlace<C> {
    Yes(C),
    No,
}

/// [`InPlace::No`] with its type spelled out.
pub(super) fn mapped<S>() -> InPlace<fn(&[S]) -> bool> {
    InPlace::No
}

impl Reader {
    /// Every element of the array `element` with its shape.
    pub(super) fn elements<T: ElementOwned>(&self, element: &str) -> Result<(Vec<usize>, Vec<T>)> {
        let a = self.s.array(element)?;
        let shape = a.shape().to_vec();
        let v = a
            .retrieve_array_subset_elements::<T>(&ArraySubset::new_with_shape(shape.clone()))
            .map_err(|e| self.s.err(element)(&e))?;
        Ok((shape.into_iter().map(|d| d as usize).collect(), v))
    }

    /// An error unless chunk `at` of `a` starts at row `row`: reading chunk by chunk into place
    /// assumes a regular grid (chunk c at c times the first chunk's rows).
    pub(super) fn on_regular_grid(
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
    pub(super) fn strings(&self, element: &str, a: &Array<FilesystemStore>) -> Result<Vec<String>> {
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
    pub(super) fn pod_elements<T: ElementOwned + bytemuck::Pod + Send + Sync>(
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
    pub(super) fn map_rows<S: bytemuck::Pod, T: bytemuck::Pod + Send + Sync>(
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

    pub(super) fn unsupported(&self, element: &str, dt: &DataType) -> crate::Error {
        self.s
            .format(element, format!("unsupported data type {dt:?}"))
    }

    /// The array `element` as typed values (integer widths folded as [`ArrayData`] does).
    pub(super) fn array(&self, element: &str) -> Result<(Vec<usize>, ArrayData)> {
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
    pub(super) fn values(&mut self, element: &str) -> Result<Vec<f32>> {
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
