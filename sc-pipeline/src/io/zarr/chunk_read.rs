//! A chunk of a zarr array read straight into its place in the output.
//!
//! zarrs decodes a chunk into a buffer of its own (`Array::retrieve_chunk`; its `decode_into`
//! also decodes blosc into a buffer first), which the reader then copies into place: three
//! passes over memory for every value (the file's bytes, the decoded chunk, the copy) for
//! matrices of billions of values. Where an array is stored as this crate writes it (lz4 in
//! blosc, or uncompressed) and as zarr-python's format 2 does by default (blosc): the `bytes`
//! codec in this machine's byte order, then blosc or nothing, the chunk's file is read into a
//! buffer the thread reuses and blosc decodes it straight into the output; an uncompressed
//! chunk is read there directly. Every other layout (zstd, sharding, checksums, another byte
//! order) is left to zarrs ([`direct_layout`] says `None`).

use std::mem::MaybeUninit;
use std::os::unix::fs::FileExt;
use zarrs::array::Array;
use zarrs::filesystem::FilesystemStore;
use zarrs::metadata::ArrayMetadata;

/// How an array's chunks are stored, when this module can read them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum DirectLayout {
    /// The values' bytes as they are.
    Raw,
    /// One blosc frame (any of its compressors and shuffles: the frame's header names them).
    Blosc,
}

/// Whether `a`'s chunks can be read here: no storage transformer, no array-to-array codec, the
/// `bytes` codec in this machine's byte order (or without one, for 1-byte values), then
/// nothing or blosc alone.
pub(super) fn direct_layout(a: &Array<FilesystemStore>) -> Option<DirectLayout> {
    if let ArrayMetadata::V3(m) = a.metadata() {
        if !m.storage_transformers.is_empty() {
            return None;
        }
    }
    let codecs = a.codecs().create_metadatas();
    let (first, rest) = codecs.split_first()?;
    if first.name() != "bytes" {
        return None;
    }
    let endian = first
        .configuration()
        .and_then(|c| c.get("endian"))
        .and_then(|e| e.as_str().map(str::to_string));
    let native = if cfg!(target_endian = "little") {
        "little"
    } else {
        "big"
    };
    match endian.as_deref() {
        Some(e) if e == native => {}
        None if a.data_type().fixed_size() == Some(1) => {}
        _ => return None,
    }
    match rest {
        [] => Some(DirectLayout::Raw),
        [b] if b.name() == "blosc" => Some(DirectLayout::Blosc),
        _ => None,
    }
}

/// Buffers a thread reuses from chunk to chunk: the stored frame, and the decoded last chunk of
/// an array (stored whole, only its first part in the array).
#[derive(Default)]
pub(super) struct ChunkBuffers {
    stored: Vec<u8>,
    decoded: Vec<u8>,
}

/// Reads chunk `at` of `a` (stored as `layout`; `chunk_bytes` bytes once decoded) into `out`:
/// the whole chunk, or its first `out.len()` bytes (an array's last chunk is stored whole).
/// `Ok(false)`: the chunk has no file (zarr may leave a chunk of only the fill value unwritten),
/// and nothing was written; zarrs fills it. Errors name the chunk's file and what is wrong.
pub(super) fn read_chunk_into(
    a: &Array<FilesystemStore>,
    layout: DirectLayout,
    at: &[u64],
    chunk_bytes: usize,
    out: &mut [MaybeUninit<u8>],
    bufs: &mut ChunkBuffers,
) -> Result<bool, String> {
    let path = a.storage().key_to_fspath(&a.chunk_key(at));
    let file = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let bad = |what: String| format!("{}: {what}", path.display());
    let stored = file.metadata().map_err(|e| bad(e.to_string()))?.len();
    let Ok(stored) = usize::try_from(stored) else {
        return Err(bad(format!("{stored} bytes stored")));
    };
    if out.len() > chunk_bytes {
        return Err(bad(format!(
            "{} bytes asked of a chunk of {chunk_bytes}",
            out.len()
        )));
    }
    // SAFETY: the bytes are only written (by the read or blosc) before anyone reads them; a
    // failed read is an error and the caller discards the output.
    let out = unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<u8>(), out.len()) };
    match layout {
        DirectLayout::Raw => {
            if stored != chunk_bytes {
                return Err(bad(format!(
                    "{stored} bytes stored, the chunk holds {chunk_bytes} (truncated?)"
                )));
            }
            file.read_exact_at(out, 0).map_err(|e| bad(e.to_string()))?;
        }
        DirectLayout::Blosc => {
            let frame = &mut bufs.stored;
            // Initialised bytes for the read to overwrite: the buffer is reused chunk after
            // chunk, so only its growth is zero-filled (an uninitialised slice handed to
            // read_exact_at would be undefined behaviour).
            frame.resize(stored, 0);
            if let Err(e) = file.read_exact_at(frame, 0) {
                frame.clear();
                return Err(bad(e.to_string()));
            }
            let mut n = 0usize;
            // SAFETY: `frame` is `frame.len()` readable bytes; the call writes only `n`.
            let valid = unsafe {
                blosc_src::blosc_cbuffer_validate(frame.as_ptr().cast(), frame.len(), &mut n)
            };
            if valid < 0 {
                return Err(bad("not a whole blosc frame (truncated or damaged)".into()));
            }
            if n != chunk_bytes {
                return Err(bad(format!(
                    "the blosc frame decodes to {n} bytes, the chunk holds {chunk_bytes}"
                )));
            }
            let whole = out.len() == n;
            let dest = if whole {
                out.as_mut_ptr()
            } else {
                bufs.decoded.clear();
                bufs.decoded.reserve(n);
                bufs.decoded.as_mut_ptr()
            };
            // SAFETY: `frame` is a frame blosc validated above and `dest` has room for its `n`
            // bytes; one thread (blosc starts none of its own).
            let got = unsafe {
                blosc_src::blosc_decompress_ctx(frame.as_ptr().cast(), dest.cast(), n, 1)
            };
            if usize::try_from(got).ok() != Some(n) {
                return Err(bad("blosc could not decode the chunk (damaged)".into()));
            }
            if !whole {
                // SAFETY: blosc wrote the n bytes.
                unsafe { bufs.decoded.set_len(n) };
                out.copy_from_slice(&bufs.decoded[..out.len()]);
            }
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::zarr::store::{ZarrCompression, ZarrStore, CHUNK_ELEMENTS};
    use serde_json::Map;
    use zarrs::array::DataType;

    /// Every chunk read here equals zarrs' decoding of it, for arrays of several chunks (the
    /// last one short) with each compression; zstd is left to zarrs.
    #[test]
    fn chunks_read_in_place_equal_zarrs_own() {
        let dir = std::env::temp_dir().join(format!("zarr-direct-{}", std::process::id()));
        let n = 2 * CHUNK_ELEMENTS + 5;
        let ints: Vec<i32> = (0..n as i32).map(|v| v / 3 - 17).collect();
        let floats: Vec<f32> = (0..n).map(|v| ((v % 89) as f32).ln_1p()).collect();
        for (compression, layout) in [
            (ZarrCompression::None, Some(DirectLayout::Raw)),
            (ZarrCompression::Lz4, Some(DirectLayout::Blosc)),
            (ZarrCompression::Zstd, None),
        ] {
            let path = dir.join(format!("{compression:?}.zarr"));
            std::fs::create_dir_all(&path).unwrap();
            let s = ZarrStore::open(&path, compression).unwrap();
            s.put_values("/ints", &[n], DataType::Int32, &ints, Map::new())
                .unwrap();
            s.put_values("/floats", &[n], DataType::Float32, &floats, Map::new())
                .unwrap();
            for element in ["/ints", "/floats"] {
                let a = s.array(element).unwrap();
                assert_eq!(direct_layout(&a), layout, "{compression:?}");
                let Some(layout) = layout else { continue };
                let mut bufs = ChunkBuffers::default();
                let chunk_bytes = CHUNK_ELEMENTS * 4;
                for c in 0..3u64 {
                    let zarrs_bytes = a.retrieve_chunk(&[c]).unwrap().into_fixed().unwrap();
                    let len = if c == 2 { 5 * 4 } else { chunk_bytes };
                    let mut out = vec![MaybeUninit::<u8>::uninit(); len];
                    assert!(
                        read_chunk_into(&a, layout, &[c], chunk_bytes, &mut out, &mut bufs)
                            .unwrap()
                    );
                    // SAFETY: read_chunk_into wrote every byte.
                    let out: Vec<u8> = out
                        .into_iter()
                        .map(|b| unsafe { b.assume_init() })
                        .collect();
                    assert_eq!(out[..], zarrs_bytes[..len], "{compression:?} {element} {c}");
                }
            }
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A chunk without a file is left to zarrs; a truncated or damaged frame, or an
    /// uncompressed chunk of the wrong size, is an error naming the chunk's file.
    #[test]
    fn missing_short_or_damaged_chunks() {
        let dir = std::env::temp_dir().join(format!("zarr-direct-bad-{}", std::process::id()));
        let n = CHUNK_ELEMENTS + 5;
        let floats: Vec<f32> = (0..n).map(|v| (v % 1000) as f32 * 0.5).collect();
        for compression in [ZarrCompression::None, ZarrCompression::Lz4] {
            let path = dir.join(format!("{compression:?}.zarr"));
            std::fs::create_dir_all(&path).unwrap();
            let s = ZarrStore::open(&path, compression).unwrap();
            s.put_values("/v", &[n], DataType::Float32, &floats, Map::new())
                .unwrap();
            let a = s.array("/v").unwrap();
            let layout = direct_layout(&a).unwrap();
            let chunk_bytes = CHUNK_ELEMENTS * 4;
            let mut bufs = ChunkBuffers::default();
            let mut out = vec![MaybeUninit::<u8>::uninit(); chunk_bytes];
            let mut read = |a: &Array<FilesystemStore>| {
                read_chunk_into(a, layout, &[0], chunk_bytes, &mut out, &mut bufs)
            };
            let file = path.join("v/c/0");
            let stored = std::fs::read(&file).unwrap();
            std::fs::write(&file, &stored[..stored.len() - 3]).unwrap();
            let e = read(&a).unwrap_err();
            assert!(e.contains("v/c/0"), "{compression:?}: {e}");
            if compression == ZarrCompression::Lz4 {
                // The frame's header intact, its compressed body overwritten.
                let mut damaged = stored.clone();
                let len = damaged.len();
                damaged[32..len].fill(0xa5);
                std::fs::write(&file, &damaged).unwrap();
                let e = read(&a).unwrap_err();
                assert!(e.contains("v/c/0"), "{e}");
            }
            std::fs::remove_file(&file).unwrap();
            assert!(!read(&a).unwrap());
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
