//! A zarr store on the file system through `zarrs`: groups and arrays by path, with anndata's
//! attributes, what the zarr reader and writer share. Arrays are written in chunks that
//! `zarrs` encodes in parallel; the codecs are the store's choice ([`ZarrCompression`]).

use crate::{Error, Result};
use serde_json::{Map, Value as Json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use zarrs::array::codec::{BytesToBytesCodecTraits, ZstdCodec};
use zarrs::array::{Array, ArrayBuilder, DataType, Element, FillValue};
use zarrs::array_subset::ArraySubset;
use zarrs::filesystem::FilesystemStore;
use zarrs::group::GroupBuilder;

/// Elements per chunk of an array (8 MiB of float32): enough chunks for every core on a large
/// matrix, few enough that each is worth a file.
pub(crate) const CHUNK_ELEMENTS: usize = 1 << 21;

/// How the chunks of a written store are compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ZarrCompression {
    /// Raw little-endian bytes.
    None,
    /// zstd at level 1 (zarr v3's own compressor, as anndata writes it).
    Zstd,
    /// LZ4 inside blosc with byte shuffling (numcodecs' and anndata's older default). The
    /// default: at 1 M cells on an H200 machine X and `.raw` took 6.0 s and 13 GB against
    /// zstd's 10.7 s and 6.1 GB and no compression's 3.0 s and 23 GB (`benches/RESULTS.md`).
    #[default]
    Lz4,
}

/// A store opened or created at a directory, its errors naming `path` and the element.
pub(crate) struct ZarrStore {
    pub(crate) path: PathBuf,
    pub(crate) inner: Arc<FilesystemStore>,
    compression: ZarrCompression,
}

impl ZarrStore {
    /// The store at `path` (a directory, which must exist).
    pub(crate) fn open(path: &Path, compression: ZarrCompression) -> Result<ZarrStore> {
        let inner = FilesystemStore::new(path).map_err(|e| Error::File {
            path: path.to_path_buf(),
            message: format!("cannot open as a zarr store: {e}"),
        })?;
        Ok(ZarrStore {
            path: path.to_path_buf(),
            inner: Arc::new(inner),
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
            .build(self.inner.clone(), element)
            .map_err(|x| e(&x))?
            .store_metadata()
            .map_err(|x| e(&x))
    }

    /// Writes `values` as the array `element` of `shape` (row-major) with attributes `attrs`:
    /// chunks of whole rows of about [`CHUNK_ELEMENTS`] values, encoded in parallel.
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
        let row: usize = shape.iter().skip(1).product::<usize>().max(1);
        let mut chunk: Vec<u64> = shape.iter().map(|&s| s.max(1) as u64).collect();
        if let Some(first) = chunk.first_mut() {
            *first = (CHUNK_ELEMENTS / row).clamp(1, shape[0].max(1)) as u64;
        }
        let shape64: Vec<u64> = shape.iter().map(|&s| s as u64).collect();
        let mut builder = ArrayBuilder::new(shape64.clone(), chunk, data_type, fill.into());
        builder
            .bytes_to_bytes_codecs(self.codecs(std::mem::size_of::<T>())?)
            .attributes(attrs);
        let array = builder
            .build(self.inner.clone(), element)
            .map_err(|x| e(&x))?;
        array.store_metadata().map_err(|x| e(&x))?;
        if values.is_empty() {
            return Ok(());
        }
        array
            .store_array_subset_elements(&ArraySubset::new_with_shape(shape64), values)
            .map_err(|x| e(&x))
    }

    /// The bytes-to-bytes codecs of an array of elements of `size` bytes.
    fn codecs(&self, size: usize) -> Result<Vec<Arc<dyn BytesToBytesCodecTraits>>> {
        Ok(match self.compression {
            ZarrCompression::None => vec![],
            ZarrCompression::Zstd => vec![Arc::new(ZstdCodec::new(1, false))],
            ZarrCompression::Lz4 => {
                use zarrs::array::codec::bytes_to_bytes::blosc::{
                    BloscCodec, BloscCompressionLevel, BloscCompressor, BloscShuffleMode,
                };
                let level = BloscCompressionLevel::try_from(5u8).expect("5 is a blosc level");
                let codec = BloscCodec::new(
                    BloscCompressor::LZ4,
                    level,
                    None,
                    BloscShuffleMode::Shuffle,
                    Some(size.max(1)),
                )
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
    m.insert("encoding-type".into(), kind.into());
    m.insert("encoding-version".into(), version.into());
    m
}

/// Whether `path` is a zarr store (a directory with a root group of either version).
pub fn is_zarr(path: &Path) -> bool {
    path.is_dir() && (path.join("zarr.json").is_file() || path.join(".zgroup").is_file())
}
