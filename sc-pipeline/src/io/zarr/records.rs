//! numpy record arrays (anndata's `rec-array`, e.g. `uns['rank_genes_groups']['names']`) in a
//! zarr store. `zarrs` has no structured data type, so these are read and written here:
//! written as zarr-python writes them in format 3 (data type `structured`, strings as
//! `fixed_length_utf32`, one uncompressed chunk of packed little-endian records); read from
//! format 3 or 2 (`.zarray` with a numpy structured `dtype`), their chunks decompressed with
//! `zarrs`' zstd, blosc or gzip codec.

use super::store::{encoding, ZarrStore};
use crate::anndata::ArrayData;
use crate::Result;
use serde_json::{json, Value as Json};
use std::borrow::Cow;
use std::sync::Arc;
use zarrs::array::codec::{BytesToBytesCodecTraits, CodecOptions};
use zarrs::array::BytesRepresentation;

/// One field's type in the packed record.
#[derive(Debug, Clone, Copy, PartialEq)]
enum FieldType {
    Bool,
    Int {
        bytes: usize,
        signed: bool,
    },
    Float {
        bytes: usize,
    },
    /// `chars` UTF-32 code units, NUL-padded.
    Utf32 {
        chars: usize,
    },
}

impl FieldType {
    fn size(self) -> usize {
        match self {
            FieldType::Bool => 1,
            FieldType::Int { bytes, .. } | FieldType::Float { bytes } => bytes,
            FieldType::Utf32 { chars } => 4 * chars,
        }
    }
}

/// Writes `fields` (equal lengths) as the record array `element`.
pub(crate) fn write_records(
    s: &ZarrStore,
    element: &str,
    fields: &[(String, ArrayData)],
) -> Result<()> {
    let len = fields.first().map_or(0, |(_, d)| d.len());
    if let Some((bad, d)) = fields.iter().find(|(_, d)| d.len() != len) {
        return Err(s.format(
            element,
            format!(
                "field '{bad}' has {} values, the first field {len}",
                d.len()
            ),
        ));
    }
    let types: Vec<FieldType> = fields
        .iter()
        .map(|(_, d)| match d {
            ArrayData::Bool(_) => FieldType::Bool,
            ArrayData::I32(_) => FieldType::Int {
                bytes: 4,
                signed: true,
            },
            ArrayData::I64(_) => FieldType::Int {
                bytes: 8,
                signed: true,
            },
            ArrayData::F32(_) => FieldType::Float { bytes: 4 },
            ArrayData::F64(_) => FieldType::Float { bytes: 8 },
            ArrayData::Str(v) => FieldType::Utf32 {
                chars: v
                    .iter()
                    .map(|t| t.chars().count())
                    .max()
                    .unwrap_or(0)
                    .max(1),
            },
        })
        .collect();
    let record: usize = types.iter().map(|t| t.size()).sum();
    let mut bytes = Vec::with_capacity(len * record);
    for i in 0..len {
        for ((_, d), t) in fields.iter().zip(&types) {
            match d {
                ArrayData::Bool(v) => bytes.push(v[i] as u8),
                ArrayData::I32(v) => bytes.extend(v[i].to_le_bytes()),
                ArrayData::I64(v) => bytes.extend(v[i].to_le_bytes()),
                ArrayData::F32(v) => bytes.extend(v[i].to_le_bytes()),
                ArrayData::F64(v) => bytes.extend(v[i].to_le_bytes()),
                ArrayData::Str(v) => {
                    let FieldType::Utf32 { chars } = *t else {
                        unreachable!("strings are UTF-32 fields")
                    };
                    let mut n = 0;
                    for c in v[i].chars() {
                        bytes.extend((c as u32).to_le_bytes());
                        n += 1;
                    }
                    bytes.resize(bytes.len() + 4 * (chars - n), 0);
                }
            }
        }
    }
    let json_fields: Vec<Json> = fields
        .iter()
        .zip(&types)
        .map(|((name, _), t)| {
            let ty = match *t {
                FieldType::Bool => json!("bool"),
                FieldType::Int { bytes, .. } => json!(format!("int{}", 8 * bytes)),
                FieldType::Float { bytes } => json!(format!("float{}", 8 * bytes)),
                FieldType::Utf32 { chars } => json!({
                    "name": "fixed_length_utf32",
                    "configuration": {"length_bytes": 4 * chars}
                }),
            };
            json!([name, ty])
        })
        .collect();
    let meta = json!({
        "zarr_format": 3,
        "node_type": "array",
        "shape": [len],
        "data_type": {"name": "structured", "configuration": {"fields": json_fields}},
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [len.max(1)]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": base64_zeros(record),
        "codecs": [{"name": "bytes"}],
        "attributes": encoding("rec-array", "0.2.0"),
        "storage_transformers": [],
    });
    let dir = s.fs_path(element);
    let io = |e: std::io::Error| s.err(element)(&e);
    std::fs::create_dir_all(dir.join("c")).map_err(io)?;
    let text = serde_json::to_string_pretty(&meta).expect("JSON of plain values");
    std::fs::write(dir.join("zarr.json"), text).map_err(io)?;
    if len > 0 {
        std::fs::write(dir.join("c").join("0"), bytes).map_err(io)?;
    }
    Ok(())
}

/// `n` zero bytes in base64 (the structured fill value).
fn base64_zeros(n: usize) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(vec![0u8; n])
}

/// Reads the record array `element` (format 3 or 2), field by field.
pub(crate) fn read_records(s: &ZarrStore, element: &str) -> Result<Vec<(String, ArrayData)>> {
    let dir = s.fs_path(element);
    let bad = |problem: String| s.format(element, problem);
    let layout = match std::fs::read_to_string(dir.join("zarr.json")) {
        Ok(text) => v3_layout(&text).map_err(bad)?,
        Err(_) => {
            let text =
                std::fs::read_to_string(dir.join(".zarray")).map_err(|e| s.err(element)(&e))?;
            v2_layout(&text).map_err(bad)?
        }
    };
    let record: usize = layout.fields.iter().map(|(_, t)| t.size()).sum();
    let mut bytes = Vec::with_capacity(layout.len * record);
    let n_chunks = layout.len.div_ceil(layout.chunk.max(1));
    for c in 0..n_chunks {
        let key = match layout.separator.as_str() {
            "/" if layout.v3 => format!("c/{c}"),
            sep if layout.v3 => format!("c{sep}{c}"),
            _ => c.to_string(),
        };
        let want = layout.chunk.min(layout.len - c * layout.chunk) * record;
        let raw = match std::fs::read(dir.join(&key)) {
            Ok(raw) => decode(&layout.codecs, raw, layout.chunk * record)
                .map_err(|e| bad(format!("chunk {key}: {e}")))?,
            // A chunk never written holds the fill value (zeros here).
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => vec![0; layout.chunk * record],
            Err(e) => return Err(s.err(element)(&e)),
        };
        if raw.len() < want {
            return Err(bad(format!(
                "chunk {key} holds {} bytes, {want} expected",
                raw.len()
            )));
        }
        bytes.extend_from_slice(&raw[..want]);
    }
    let mut out = Vec::with_capacity(layout.fields.len());
    let mut offset = 0;
    for (name, t) in &layout.fields {
        let at = |i: usize| &bytes[i * record + offset..i * record + offset + t.size()];
        let n = layout.len;
        let data = match *t {
            FieldType::Bool => ArrayData::Bool((0..n).map(|i| at(i)[0] != 0).collect()),
            FieldType::Float { bytes: 4 } => ArrayData::F32(
                (0..n)
                    .map(|i| f32::from_le_bytes(at(i).try_into().unwrap()))
                    .collect(),
            ),
            FieldType::Float { .. } => ArrayData::F64(
                (0..n)
                    .map(|i| f64::from_le_bytes(at(i).try_into().unwrap()))
                    .collect(),
            ),
            FieldType::Int { bytes: b, signed } if b <= 2 || (b == 4 && signed) => {
                ArrayData::I32((0..n).map(|i| int_at(at(i), signed) as i32).collect())
            }
            FieldType::Int { signed, .. } => {
                ArrayData::I64((0..n).map(|i| int_at(at(i), signed)).collect())
            }
            FieldType::Utf32 { .. } => ArrayData::Str(
                (0..n)
                    .map(|i| {
                        at(i)
                            .chunks_exact(4)
                            .map(|u| u32::from_le_bytes(u.try_into().unwrap()))
                            .take_while(|&u| u != 0)
                            .map(|u| char::from_u32(u).unwrap_or(char::REPLACEMENT_CHARACTER))
                            .collect()
                    })
                    .collect(),
            ),
        };
        offset += t.size();
        out.push((name.clone(), data));
    }
    Ok(out)
}

fn int_at(b: &[u8], signed: bool) -> i64 {
    let mut v = 0u64;
    for (k, &x) in b.iter().enumerate() {
        v |= (x as u64) << (8 * k);
    }
    let bits = 8 * b.len() as u32;
    if signed && bits < 64 && v >> (bits - 1) & 1 == 1 {
        (v | (!0u64 << bits)) as i64
    } else {
        v as i64
    }
}

/// A record array's layout on disk.
struct Layout {
    v3: bool,
    len: usize,
    chunk: usize,
    separator: String,
    fields: Vec<(String, FieldType)>,
    codecs: Vec<Arc<dyn BytesToBytesCodecTraits>>,
}

fn v3_layout(text: &str) -> std::result::Result<Layout, String> {
    let meta: Json = serde_json::from_str(text).map_err(|e| format!("zarr.json: {e}"))?;
    let fields = meta
        .pointer("/data_type/configuration/fields")
        .and_then(Json::as_array)
        .ok_or("not a structured array (no data_type fields)")?
        .iter()
        .map(|f| {
            let name = f
                .get(0)
                .and_then(Json::as_str)
                .ok_or("a field without a name")?;
            let t = f.get(1).ok_or("a field without a type")?;
            let ty = match (t.as_str(), t.get("name").and_then(Json::as_str)) {
                (Some(simple), _) => simple_type(simple)?,
                (None, Some("fixed_length_utf32")) => FieldType::Utf32 {
                    chars: t
                        .pointer("/configuration/length_bytes")
                        .and_then(Json::as_u64)
                        .ok_or("fixed_length_utf32 without length_bytes")?
                        as usize
                        / 4,
                },
                _ => return Err(format!("field '{name}': unsupported type {t}")),
            };
            Ok((name.to_string(), ty))
        })
        .collect::<std::result::Result<Vec<_>, String>>()?;
    let mut codecs: Vec<Arc<dyn BytesToBytesCodecTraits>> = Vec::new();
    for c in meta
        .get("codecs")
        .and_then(Json::as_array)
        .ok_or("no codecs")?
    {
        match c.get("name").and_then(Json::as_str) {
            Some("bytes") => {
                if c.pointer("/configuration/endian").and_then(Json::as_str) == Some("big") {
                    return Err("big-endian records are not supported".into());
                }
            }
            Some(name) => codecs.push(codec(name, c)?),
            None => return Err(format!("a codec without a name: {c}")),
        }
    }
    Ok(Layout {
        v3: true,
        len: dim(&meta, "/shape/0")?,
        chunk: dim(&meta, "/chunk_grid/configuration/chunk_shape/0")?,
        separator: meta
            .pointer("/chunk_key_encoding/configuration/separator")
            .and_then(Json::as_str)
            .unwrap_or("/")
            .to_string(),
        fields,
        codecs,
    })
}

fn v2_layout(text: &str) -> std::result::Result<Layout, String> {
    let meta: Json = serde_json::from_str(text).map_err(|e| format!(".zarray: {e}"))?;
    let fields = meta
        .get("dtype")
        .and_then(Json::as_array)
        .ok_or("not a structured array (dtype is not a list of fields)")?
        .iter()
        .map(|f| {
            let name = f
                .get(0)
                .and_then(Json::as_str)
                .ok_or("a field without a name")?;
            let t = f
                .get(1)
                .and_then(Json::as_str)
                .ok_or("a field without a type")?;
            Ok((name.to_string(), numpy_type(t)?))
        })
        .collect::<std::result::Result<Vec<_>, String>>()?;
    if meta.get("filters").is_some_and(|f| !f.is_null()) {
        return Err("filters on a record array are not supported".into());
    }
    let codecs = match meta.get("compressor") {
        Some(c) if !c.is_null() => {
            let id = c
                .get("id")
                .and_then(Json::as_str)
                .ok_or("compressor without an id")?;
            vec![codec(id, c)?]
        }
        _ => vec![],
    };
    Ok(Layout {
        v3: false,
        len: dim(&meta, "/shape/0")?,
        chunk: dim(&meta, "/chunks/0")?,
        separator: ".".into(),
        fields,
        codecs,
    })
}

fn dim(meta: &Json, pointer: &str) -> std::result::Result<usize, String> {
    meta.pointer(pointer)
        .and_then(Json::as_u64)
        .map(|v| v as usize)
        .ok_or(format!("no size at {pointer}"))
}

/// A zarr v3 data type name of a field.
fn simple_type(name: &str) -> std::result::Result<FieldType, String> {
    Ok(match name {
        "bool" => FieldType::Bool,
        "int8" | "int16" | "int32" | "int64" | "uint8" | "uint16" | "uint32" | "uint64" => {
            let signed = name.starts_with("int");
            let bits: usize = name
                .trim_start_matches(|c: char| c.is_alphabetic())
                .parse()
                .unwrap();
            FieldType::Int {
                bytes: bits / 8,
                signed,
            }
        }
        "float32" => FieldType::Float { bytes: 4 },
        "float64" => FieldType::Float { bytes: 8 },
        other => return Err(format!("unsupported field type '{other}'")),
    })
}

/// A numpy type string of a field (`<f4`, `|b1`, `<U12`, ...), little-endian or single-byte.
fn numpy_type(t: &str) -> std::result::Result<FieldType, String> {
    let (order, rest) = t.split_at(1.min(t.len()));
    if order == ">" {
        return Err(format!("big-endian field type '{t}' is not supported"));
    }
    let (kind, size) = rest.split_at(1.min(rest.len()));
    let size: usize = size
        .parse()
        .map_err(|_| format!("unsupported field type '{t}'"))?;
    Ok(match kind {
        "b" => FieldType::Bool,
        "i" => FieldType::Int {
            bytes: size,
            signed: true,
        },
        "u" => FieldType::Int {
            bytes: size,
            signed: false,
        },
        "f" if size == 4 || size == 8 => FieldType::Float { bytes: size },
        "U" => FieldType::Utf32 { chars: size },
        _ => return Err(format!("unsupported field type '{t}'")),
    })
}

/// The bytes-to-bytes codec `name` with its JSON (v3's `configuration`, or v2's compressor).
fn codec(name: &str, c: &Json) -> std::result::Result<Arc<dyn BytesToBytesCodecTraits>, String> {
    use zarrs::array::codec::bytes_to_bytes::blosc::{
        BloscCodec, BloscCompressionLevel, BloscCompressor, BloscShuffleMode,
    };
    Ok(match name {
        "zstd" => Arc::new(zarrs::array::codec::ZstdCodec::new(0, false)),
        "gzip" => {
            Arc::new(zarrs::array::codec::GzipCodec::new(6).map_err(|e| format!("gzip: {e}"))?)
        }
        // Blosc's frames carry their own parameters: any instance decodes them.
        "blosc" => Arc::new(
            BloscCodec::new(
                BloscCompressor::LZ4,
                BloscCompressionLevel::try_from(5u8).expect("a blosc level"),
                None,
                BloscShuffleMode::NoShuffle,
                None,
            )
            .map_err(|e| format!("blosc: {e}"))?,
        ),
        other => return Err(format!("unsupported codec '{other}' ({c})")),
    })
}

/// `raw` through `codecs` in reverse (the last applied on writing is undone first).
fn decode(
    codecs: &[Arc<dyn BytesToBytesCodecTraits>],
    raw: Vec<u8>,
    size: usize,
) -> std::result::Result<Vec<u8>, String> {
    let mut bytes: Cow<'_, [u8]> = Cow::Owned(raw);
    let options = CodecOptions::default();
    for c in codecs.iter().rev() {
        bytes = c
            .decode(
                bytes,
                &BytesRepresentation::FixedSize(size as u64),
                &options,
            )
            .map_err(|e| e.to_string())?
            .into_owned()
            .into();
    }
    Ok(bytes.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numpy_and_zarr_field_types_are_read() {
        assert_eq!(numpy_type("<U12").unwrap(), FieldType::Utf32 { chars: 12 });
        assert_eq!(numpy_type("<f4").unwrap(), FieldType::Float { bytes: 4 });
        assert_eq!(numpy_type("|b1").unwrap(), FieldType::Bool);
        assert_eq!(
            numpy_type("<u2").unwrap(),
            FieldType::Int {
                bytes: 2,
                signed: false
            }
        );
        assert!(numpy_type(">f8").unwrap_err().contains("big-endian"));
        assert!(numpy_type("|O").is_err());
        assert_eq!(
            simple_type("int16").unwrap(),
            FieldType::Int {
                bytes: 2,
                signed: true
            }
        );
        assert_eq!(
            simple_type("float64").unwrap(),
            FieldType::Float { bytes: 8 }
        );
        assert_eq!(int_at(&[0xff, 0xff], true), -1);
        assert_eq!(int_at(&[0xff, 0xff], false), 65535);
    }
}
