//! A zarr store on the file system through `zarrs`: groups and arrays by path, with anndata's
//! attributes, what the zarr reader and writer share. Arrays are written in chunks that
//! `zarrs` encodes in parallel; the codecs are the store's choice ([`ZarrCompression`]).

use super::files::UnsyncedFiles;
use crate::io::encoding::{ENCODING_TYPE, ENCODING_VERSION};
use crate::{Error, Result};
use sc_kernels::gpu::pinned_buffers::PinnedBuffers;
use serde_json::{Map, Value as Json};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use zarrs::array::codec::CodecOptions;
use zarrs::array::codec::{BytesToBytesCodecTraits, ZstdCodec};
use zarrs::array::{Array, ArrayBuilder, DataType, Element, FillValue};
use zarrs::array_subset::ArraySubset;
use zarrs::filesystem::FilesystemStore;
use zarrs::group::GroupBuilder;

/// Elements per chunk of an array (8 MiB of float32): enough chunks for every core on a large
/// matrix, few enough that each is worth a file.
pub(crate) const CHUNK_ELEMENTS: usize = 1 << 21;
/// Strings a chunk of a string array holds (cell and gene names): a million cell names in one
/// chunk were decoded on one thread (0.25 s on the GPU machine); in chunks of this size they
/// are encoded and decoded on every core.
pub(crate) const STRING_CHUNK_ELEMENTS: usize = 1 << 16;

/// How the chunks of a written store are compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ZarrCompression {
    /// Raw little-endian bytes.
    None,
    /// zstd at level 1 (zarr v3's own compressor, as anndata writes it).
    Zstd,
    /// LZ4 inside blosc (numcodecs' and anndata's older default), integers' bytes shuffled
    /// first, floats' not ([`shuffles`]). The default: at 1 M cells on an H200 machine X and
    /// `.raw` took 6.0 s and 13 GB against zstd's 10.7 s and 6.1 GB and no compression's 3.0 s
    /// and 23 GB, all floats shuffled (`benches/RESULTS.md`).
    #[default]
    Lz4,
}

/// Whether blosc shuffles the bytes of elements of `data_type` before LZ4: for integers (a
/// sparse matrix's indices and offsets, whose high bytes repeat) but not for floats. One
/// thread's LZ4 on 8 MiB chunks (this 2-core machine, blosc level 5): log-normalized values
/// (`.raw`'s data) compressed 3.5x unshuffled against 2.0x shuffled, encoded at 0.76 against 0.44
/// GB/s; scaled values (dense X) 1.00x against 1.07x at 1.83 against 0.84 GB/s; column indices
/// 3.25x shuffled against 1.0x.
fn shuffles(data_type: &DataType) -> bool {
    !matches!(
        data_type,
        DataType::Float16 | DataType::Float32 | DataType::Float64 | DataType::BFloat16
    )
}

/// Where each chunk writer's buffer comes from ([`ZarrStore::put_array_with`]).
#[derive(Debug, Clone, Copy)]
pub(crate) enum ChunkBuffers<'a> {
    /// Host memory of its own.
    Host,
    /// A page-locked buffer lent by a GPU, which a fill can download straight into
    /// ([`crate::anndata::gather_bytes_direct`]); as many writers as buffers. Host memory where a
    /// chunk is larger than a buffer.
    Pinned(&'a PinnedBuffers),
}

/// A store opened or created at a directory, its errors naming `path` and the element.
pub(crate) struct ZarrStore {
    pub(crate) path: PathBuf,
    pub(crate) inner: Arc<FilesystemStore>,
    /// What the writer writes through (the same files, no `fsync` after each).
    written: Arc<UnsyncedFiles>,
    compression: ZarrCompression,
}

impl ZarrStore {
    /// The store at `path` (a directory, which must exist).
    pub(crate) fn open(path: &Path, compression: ZarrCompression) -> Result<ZarrStore> {
        let inner = FilesystemStore::new(path).map_err(|e| Error::File {
            path: path.to_path_buf(),
            message: format!("cannot open as a zarr store: {e}"),
        })?;
        let inner = Arc::new(inner);
        Ok(ZarrStore {
            path: path.to_path_buf(),
            written: Arc::new(UnsyncedFiles::new(inner.clone())),
            inner,
            compression,
        })
    }

    /// A zarr error at `element` (a path in the store).
    pub(crate) fn err(&self, element: &str) -> impl Fn(&dyn std::fmt::Display) -> Error + '_ {
        let element = element.to_string();
        move |e| Error::Zarr {
            path: self.path.clone(),
            element: element.clone(),
            message: e.to_string(),
        }
    }

    /// A malformed element.
    pub(crate) fn format(&self, element: &str, problem: impl Into<String>) -> Error {
        Error::format(&self.path, element, problem)
    }

    /// Writes the group `element` with attributes `attrs`.
    pub(crate) fn put_group(&self, element: &str, attrs: Map<String, Json>) -> Result<()> {
        let e = self.err(element);
        GroupBuilder::new()
            .attributes(attrs)
            .build(self.written.clone(), element)
            .map_err(|x| e(&x))?
            .store_metadata()
            .map_err(|x| e(&x))
    }

    /// Writes `values` as the array `element` of `shape` (row-major) with attributes `attrs`:
    /// chunks of whole rows of about [`CHUNK_ELEMENTS`] values, encoded in parallel (by
    /// `zarrs`); numeric arrays of any size take [`ZarrStore::put_array_with`].
    pub(crate) fn put_array<T: Element>(
        &self,
        element: &str,
        shape: &[usize],
        data_type: DataType,
        fill: impl Into<FillValue>,
        values: &[T],
        attrs: Map<String, Json>,
    ) -> Result<()> {
        let e = self.err(element);
        let size = std::mem::size_of::<T>();
        let array = self.create_array(element, shape, size, data_type, fill.into(), attrs)?;
        if values.is_empty() {
            return Ok(());
        }
        array
            .store_array_subset_elements(
                &ArraySubset::new_with_shape(array.shape().to_vec()),
                values,
            )
            .map_err(|x| e(&x))
    }

    /// [`ZarrStore::put_array_with`] of the numeric `values` (host buffers).
    pub(crate) fn put_values<T: Element + bytemuck::Pod + Send + Sync>(
        &self,
        element: &str,
        shape: &[usize],
        data_type: DataType,
        values: &[T],
        attrs: Map<String, Json>,
    ) -> Result<()> {
        let fill = |start, dst: &mut [T]| copy_from(values, start, dst);
        self.put_array_with(element, shape, data_type, attrs, ChunkBuffers::Host, fill)
    }

    /// Writes the array `element` of `shape` (row-major, fill value zero) with attributes
    /// `attrs`, in chunks of whole rows of about [`CHUNK_ELEMENTS`] values, so each chunk holds
    /// consecutive values: chunks are encoded and written in parallel, a thread per core (per
    /// pinned buffer, with [`ChunkBuffers::Pinned`]), each filled first by `fill(start, dst)`
    /// with the values `start .. start + dst.len()` (from host memory, or downloaded from a GPU
    /// chunk by chunk while other chunks are written). A thread reuses its chunk buffer; the
    /// last chunk's part past the array's end is zero. The first error stops the writers.
    pub(crate) fn put_array_with<T, F>(
        &self,
        element: &str,
        shape: &[usize],
        data_type: DataType,
        attrs: Map<String, Json>,
        buffers: ChunkBuffers,
        fill: F,
    ) -> Result<()>
    where
        T: Element + bytemuck::Pod + Send + Sync,
        F: Fn(usize, &mut [T]) -> Result<()> + Sync,
    {
        let e = self.err(element);
        let zero = FillValue::new(bytemuck::bytes_of(&T::zeroed()).to_vec());
        let size = std::mem::size_of::<T>();
        let array = self.create_array(element, shape, size, data_type, zero, attrs)?;
        let len: usize = shape.iter().product();
        let per = row_chunks(shape, CHUNK_ELEMENTS).iter().product::<u64>() as usize;
        let n_chunks = len.div_ceil(per);
        // Pinned buffers too small for a chunk are not used.
        let pinned = match buffers {
            ChunkBuffers::Pinned(b) if b.bytes() >= per * size => Some(b),
            _ => None,
        };
        // One chunk per task: the codec itself runs on one thread.
        let options = CodecOptions::builder().concurrent_target(1).build();
        let next = AtomicUsize::new(0);
        let failed = AtomicBool::new(false);
        let work = || -> Result<()> {
            let mut lent = pinned.and_then(|b| b.lend());
            let mut host = match lent {
                Some(_) => Vec::new(),
                None => bytemuck::zeroed_vec::<T>(per),
            };
            let buf: &mut [T] = match &mut lent {
                Some(b) => bytemuck::cast_slice_mut(&mut b.as_mut_bytes()[..per * size]),
                None => &mut host,
            };
            loop {
                let c = next.fetch_add(1, Ordering::Relaxed);
                if c >= n_chunks || failed.load(Ordering::Relaxed) {
                    return Ok(());
                }
                let start = c * per;
                let n = per.min(len - start);
                let mut at = vec![0u64; shape.len()];
                at[0] = c as u64;
                let done = fill(start, &mut buf[..n]).and_then(|()| {
                    buf[n..].fill(T::zeroed());
                    array
                        .store_chunk_elements_opt(&at, buf, &options)
                        .map_err(|x| e(&x))
                });
                if done.is_err() {
                    failed.store(true, Ordering::Relaxed);
                    return done;
                }
            }
        };
        // Threads of their own, not rayon's: a fill may hold a lock while it runs a parallel
        // copy on rayon's pool (a GPU's staging buffers), and a rayon worker waiting in that
        // copy could take another chunk's task and wait for the lock it holds.
        let threads = std::thread::available_parallelism()
            .map_or(1, |c| c.get())
            .min(pinned.map_or(usize::MAX, |b| b.count()))
            .min(n_chunks);
        if threads <= 1 {
            return work();
        }
        // The writers take the cores the steps running beside the write leave idle.
        let writer = || {
            super::writer_priority::yield_to_the_steps();
            work()
        };
        std::thread::scope(|s| {
            let workers: Vec<_> = (0..threads).map(|_| s.spawn(writer)).collect();
            workers
                .into_iter()
                .map(|w| w.join().expect("a zarr chunk writer panicked"))
                .collect::<Result<Vec<()>>>()
                .map(|_| ())
        })
    }

    /// Creates the array `element` of `shape` (row-major) and elements of `size` bytes, chunked
    /// by whole rows ([`row_chunks`]) with the store's codecs, and writes its metadata.
    fn create_array(
        &self,
        element: &str,
        shape: &[usize],
        size: usize,
        data_type: DataType,
        fill: FillValue,
        attrs: Map<String, Json>,
    ) -> Result<Array<UnsyncedFiles>> {
        let e = self.err(element);
        let shape64: Vec<u64> = shape.iter().map(|&s| s as u64).collect();
        let shuffle = shuffles(&data_type);
        let per_chunk = match data_type {
            DataType::String => STRING_CHUNK_ELEMENTS,
            _ => CHUNK_ELEMENTS,
        };
        let mut builder = ArrayBuilder::new(shape64, row_chunks(shape, per_chunk), data_type, fill);
        builder
            .bytes_to_bytes_codecs(self.codecs(size, shuffle)?)
            .attributes(attrs);
        let array = builder
            .build(self.written.clone(), element)
            .map_err(|x| e(&x))?;
        array.store_metadata().map_err(|x| e(&x))?;
        Ok(array)
    }

    /// The bytes-to-bytes codecs of an array of elements of `size` bytes; `shuffle`: whether
    /// blosc shuffles their bytes first ([`shuffles`]).
    fn codecs(&self, size: usize, shuffle: bool) -> Result<Vec<Arc<dyn BytesToBytesCodecTraits>>> {
        Ok(match self.compression {
            ZarrCompression::None => vec![],
            ZarrCompression::Zstd => vec![Arc::new(ZstdCodec::new(1, false))],
            ZarrCompression::Lz4 => {
                use zarrs::array::codec::bytes_to_bytes::blosc::{
                    BloscCodec, BloscCompressionLevel, BloscCompressor, BloscShuffleMode,
                };
                let level = BloscCompressionLevel::try_from(5u8).expect("5 is a blosc level");
                let mode = match shuffle {
                    true => BloscShuffleMode::Shuffle,
                    false => BloscShuffleMode::NoShuffle,
                };
                let codec =
                    BloscCodec::new(BloscCompressor::LZ4, level, None, mode, Some(size.max(1)))
                        .map_err(|x| self.err("/")(&x))?;
                vec![Arc::new(codec)]
            }
        })
    }

    /// The array `element`.
    pub(crate) fn array(&self, element: &str) -> Result<Array<FilesystemStore>> {
        Array::open(self.inner.clone(), element).or_else(|x| {
            self.array_with_bool_fill(element)
                .unwrap_or_else(|| Err(self.err(element)(&x)))
        })
    }

    /// A format-2 boolean array whose `.zarray` gives its fill value as `false` or `true`, as
    /// zarr-python writes it (`zarrs` 0.22 takes only numbers there): opened with no fill
    /// value (zeros: false), which a fully written array never shows. `None` for any other
    /// array.
    fn array_with_bool_fill(&self, element: &str) -> Option<Result<Array<FilesystemStore>>> {
        let text = std::fs::read_to_string(self.fs_path(element).join(".zarray")).ok()?;
        let mut meta: Json = serde_json::from_str(&text).ok()?;
        if !meta.get("fill_value")?.is_boolean() {
            return None;
        }
        meta["fill_value"] = Json::Null;
        let parsed: zarrs::array::ArrayMetadataV2 = match serde_json::from_value(meta) {
            Ok(m) => m,
            Err(e) => return Some(Err(self.format(element, format!(".zarray: {e}")))),
        };
        let metadata = zarrs::array::ArrayMetadata::V2(parsed);
        Some(
            Array::new_with_metadata(self.inner.clone(), element, metadata)
                .map_err(|x| self.err(element)(&x)),
        )
    }

    /// Whether `element` is a group, an array, or neither (`None`).
    pub(crate) fn kind(&self, element: &str) -> Option<NodeKind> {
        let dir = self.fs_path(element);
        let has = |f: &str| dir.join(f).is_file();
        if has(".zarray") {
            return Some(NodeKind::Array);
        }
        if has(".zgroup") {
            return Some(NodeKind::Group);
        }
        let text = std::fs::read_to_string(dir.join("zarr.json")).ok()?;
        let meta: Json = serde_json::from_str(&text).ok()?;
        match meta.get("node_type").and_then(Json::as_str) {
            Some("array") => Some(NodeKind::Array),
            Some("group") => Some(NodeKind::Group),
            _ => None,
        }
    }

    /// The directory of `element` in the store.
    pub(crate) fn fs_path(&self, element: &str) -> PathBuf {
        self.path.join(element.trim_start_matches('/'))
    }

    /// The names of the groups and arrays in the group `element`, sorted.
    pub(crate) fn members(&self, element: &str) -> Result<Vec<String>> {
        let dir = self.fs_path(element);
        let mut names = Vec::new();
        for entry in std::fs::read_dir(&dir).map_err(|x| self.err(element)(&x))? {
            let entry = entry.map_err(|x| self.err(element)(&x))?;
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if entry.path().is_dir() && self.kind(&child(element, &name)).is_some() {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
    }

    /// The attributes of the group or array `element` (zarr v2's `.zattrs`, v3's `zarr.json`).
    pub(crate) fn attrs(&self, element: &str) -> Result<Map<String, Json>> {
        let dir = self.fs_path(element);
        let read = |f: &str| -> Result<Option<Json>> {
            match std::fs::read_to_string(dir.join(f)) {
                Ok(text) => serde_json::from_str(&text)
                    .map(Some)
                    .map_err(|x| self.format(element, format!("{f} is not JSON: {x}"))),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(self.err(element)(&e)),
            }
        };
        if let Some(meta) = read("zarr.json")? {
            return Ok(match meta.get("attributes") {
                Some(Json::Object(m)) => m.clone(),
                _ => Map::new(),
            });
        }
        Ok(match read(".zattrs")? {
            Some(Json::Object(m)) => m,
            _ => Map::new(),
        })
    }
}

/// A node of the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NodeKind {
    Group,
    Array,
}

/// The path of `name` in the group `parent`.
pub(crate) fn child(parent: &str, name: &str) -> String {
    format!("{}/{name}", parent.trim_end_matches('/'))
}

/// anndata's `encoding-type` and `encoding-version` attributes.
pub(crate) fn encoding(kind: &str, version: &str) -> Map<String, Json> {
    let mut m = Map::new();
    m.insert(ENCODING_TYPE.into(), kind.into());
    m.insert(ENCODING_VERSION.into(), version.into());
    m
}

/// Whether `path` is a zarr store (a directory with a root group of either version).
pub fn is_zarr(path: &Path) -> bool {
    path.is_dir() && (path.join("zarr.json").is_file() || path.join(".zgroup").is_file())
}

/// Fills `dst` with `values[start ..]` (a [`ZarrStore::put_array_with`] fill from host memory).
pub(crate) fn copy_from<T: Copy>(values: &[T], start: usize, dst: &mut [T]) -> Result<()> {
    dst.copy_from_slice(&values[start..start + dst.len()]);
    Ok(())
}

/// The chunk shape of an array of `shape` (row-major): whole rows, about `per_chunk` values a
/// chunk, so each chunk holds consecutive values.
fn row_chunks(shape: &[usize], per_chunk: usize) -> Vec<u64> {
    let row: usize = shape.iter().skip(1).product::<usize>().max(1);
    let mut chunk: Vec<u64> = shape.iter().map(|&s| s.max(1) as u64).collect();
    if let Some(first) = chunk.first_mut() {
        *first = (per_chunk / row).clamp(1, shape[0].max(1)) as u64;
    }
    chunk
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_back<T: zarrs::array::ElementOwned>(s: &ZarrStore, element: &str) -> Vec<T> {
        let a = s.array(element).unwrap();
        let shape = a.shape().to_vec();
        a.retrieve_array_subset_elements::<T>(&ArraySubset::new_with_shape(shape))
            .unwrap()
    }

    /// Arrays of several chunks, the last one short, written from a filler, read back equal
    /// with each compression, into host buffers and into pinned ones (a simulated device's:
    /// two writers; too small for a chunk: host buffers instead); a filler's error stops the
    /// write with it.
    /// lz4's integers are shuffled and its floats are not; both read back equal.
    #[test]
    fn lz4_shuffles_integers_only() {
        let dir = std::env::temp_dir().join(format!("zarr-shuffle-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let s = ZarrStore::open(&dir, ZarrCompression::Lz4).unwrap();
        let ints: Vec<i32> = (0..5000).map(|v| v / 3).collect();
        let floats: Vec<f32> = (0..5000).map(|v| ((v % 7) as f32).ln_1p()).collect();
        s.put_values("/ints", &[5000], DataType::Int32, &ints, Map::new())
            .unwrap();
        s.put_values("/floats", &[5000], DataType::Float32, &floats, Map::new())
            .unwrap();
        assert_eq!(read_back::<i32>(&s, "/ints"), ints);
        assert_eq!(read_back::<f32>(&s, "/floats"), floats);
        let mode = |element: &str| {
            let meta = std::fs::read_to_string(dir.join(element).join("zarr.json")).unwrap();
            let meta: Json = serde_json::from_str(&meta).unwrap();
            meta["codecs"][1]["configuration"]["shuffle"].clone()
        };
        assert_eq!(mode("ints"), "shuffle");
        assert_eq!(mode("floats"), "noshuffle");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn chunks_of_whole_rows_are_filled_and_written_in_parallel() {
        let device = rmm_cuda::Device::simulated(64 << 20);
        let stream = device.new_stream().unwrap();
        let pinned = PinnedBuffers::new(&device, &stream, 2, CHUNK_ELEMENTS * 8).unwrap();
        let small = PinnedBuffers::new(&device, &stream, 2, 1 << 20).unwrap();
        let dir = std::env::temp_dir().join(format!("zarr-chunks-{}", std::process::id()));
        for (i, compression) in [
            ZarrCompression::None,
            ZarrCompression::Lz4,
            ZarrCompression::Zstd,
        ]
        .into_iter()
        .enumerate()
        {
            let path = dir.join(format!("s{i}.zarr"));
            std::fs::create_dir_all(&path).unwrap();
            let s = ZarrStore::open(&path, compression).unwrap();
            let n = 2 * CHUNK_ELEMENTS + 5;
            let wide = |start: usize, dst: &mut [i64]| {
                for (j, d) in dst.iter_mut().enumerate() {
                    *d = (start + j) as i64 * 3 - 7;
                }
                Ok(())
            };
            let buffers = ChunkBuffers::Pinned(&pinned);
            s.put_array_with("/wide", &[n], DataType::Int64, Map::new(), buffers, wide)
                .unwrap();
            let back = read_back::<i64>(&s, "/wide");
            assert_eq!(back.len(), n);
            assert!(back.iter().enumerate().all(|(j, &v)| v == j as i64 * 3 - 7));
            // 3,000 columns: 699 rows a chunk, 1,500 rows in 3 chunks.
            let (rows, cols) = (1500, 3000);
            let dense: Vec<f32> = (0..rows * cols).map(|v| (v % 977) as f32 * 0.5).collect();
            s.put_values(
                "/dense",
                &[rows, cols],
                DataType::Float32,
                &dense,
                Map::new(),
            )
            .unwrap();
            assert_eq!(s.array("/dense").unwrap().chunk_grid_shape(), &vec![3, 1]);
            assert_eq!(read_back::<f32>(&s, "/dense"), dense);
            let fill = |start: usize, dst: &mut [f32]| copy_from(&dense, start, dst);
            let buffers = ChunkBuffers::Pinned(&small);
            let shape = [rows, cols];
            s.put_array_with(
                "/dense2",
                &shape,
                DataType::Float32,
                Map::new(),
                buffers,
                fill,
            )
            .unwrap();
            assert_eq!(read_back::<f32>(&s, "/dense2"), dense);
            let failing = |start: usize, _: &mut [f32]| {
                if start > 0 {
                    Err(crate::Error::Device(format!("no values at {start}")))
                } else {
                    Ok(())
                }
            };
            let e = s
                .put_array_with(
                    "/failing",
                    &[n],
                    DataType::Float32,
                    Map::new(),
                    ChunkBuffers::Host,
                    failing,
                )
                .unwrap_err();
            assert!(e.to_string().contains("no values at"), "{e}");
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
