//! Nested unstructured values (`uns`), as anndata stores them.

use super::array::{ArrayData, DenseArray};
use super::dataframe::DataFrame;
use sc_kernels::CsrMatrix;
use std::collections::BTreeMap;

/// A single value (anndata's `numeric-scalar` and `string` encodings).
#[derive(Debug, Clone, PartialEq)]
pub enum Scalar {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
}

/// One element of `uns`.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Scalar(Scalar),
    Array(DenseArray),
    Dict(BTreeMap<String, Value>),
    DataFrame(DataFrame),
    Sparse(CsrMatrix<f32>),
    /// A numpy record array (anndata's `rec-array`): named fields of equal length.
    Records(Vec<(String, ArrayData)>),
    /// Python's `None` (anndata's `null`), e.g. `rank_genes_groups`' `params['layer']`.
    Null,
}

impl Value {
    pub fn str(s: impl Into<String>) -> Value {
        Value::Scalar(Scalar::Str(s.into()))
    }
    pub fn int(v: i64) -> Value {
        Value::Scalar(Scalar::Int(v))
    }
    pub fn float(v: f64) -> Value {
        Value::Scalar(Scalar::Float(v))
    }
    pub fn bool(v: bool) -> Value {
        Value::Scalar(Scalar::Bool(v))
    }
    pub fn vector(data: ArrayData) -> Value {
        Value::Array(DenseArray::vector(data))
    }
    /// A dict from (key, value) pairs.
    pub fn dict<K: Into<String>>(entries: impl IntoIterator<Item = (K, Value)>) -> Value {
        Value::Dict(entries.into_iter().map(|(k, v)| (k.into(), v)).collect())
    }

    /// An array read from a file: a scalar when it has no dimensions (anndata's
    /// `numeric-scalar` and `string`), else the array.
    pub fn from_array(shape: Vec<usize>, data: ArrayData) -> Value {
        if !shape.is_empty() {
            return Value::Array(DenseArray { shape, data });
        }
        Value::Scalar(match data {
            ArrayData::Bool(v) => Scalar::Bool(v[0]),
            ArrayData::I32(v) => Scalar::Int(v[0] as i64),
            ArrayData::I64(v) => Scalar::Int(v[0]),
            ArrayData::F32(v) => Scalar::Float(v[0] as f64),
            ArrayData::F64(v) => Scalar::Float(v[0]),
            ArrayData::Str(mut v) => Scalar::Str(v.remove(0)),
        })
    }

    /// The entry `key` of a dict.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Dict(d) => d.get(key),
            _ => None,
        }
    }
}
