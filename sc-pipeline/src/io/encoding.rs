//! anndata's element encoding, what the h5ad and the zarr writers share: the attribute names
//! that mark an element's encoding, the integer types of a sparse matrix's indices and of a
//! categorical's codes on disk, a scalar of `uns` as the array that holds it, a dataframe's
//! index name, and the error of writing an element from the GPU.

use crate::anndata::{ArrayData, DataFrame, Scalar};
use crate::Error;

/// The attribute naming an element's encoding (`array`, `csr_matrix`, `dataframe`...).
pub(crate) const ENCODING_TYPE: &str = "encoding-type";

/// The attribute giving the version of an element's encoding.
pub(crate) const ENCODING_VERSION: &str = "encoding-version";

/// Integer type of a sparse matrix's `indices` and `indptr` on disk. scipy's sparse routines need
/// both of one type, and pick int32 while every offset and column fits, int64 beyond: so do we.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IndexWidth {
    I32,
    I64,
}

impl IndexWidth {
    pub fn for_matrix(max_stored_values: u64, n_cols: usize) -> Self {
        if max_stored_values <= i32::MAX as u64 && n_cols <= i32::MAX as usize {
            IndexWidth::I32
        } else {
            IndexWidth::I64
        }
    }
}

/// Integer type of a categorical's `codes` on disk: pandas picks the smallest code type that
/// fits; int8 / int16 / int32 all read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CodeWidth {
    I8,
    I16,
    I32,
}

impl CodeWidth {
    pub fn for_categories(n_categories: usize) -> Self {
        if n_categories < i8::MAX as usize {
            CodeWidth::I8
        } else if n_categories < i16::MAX as usize {
            CodeWidth::I16
        } else {
            CodeWidth::I32
        }
    }
}

/// A scalar of `uns` as the one-value array written for it (with an empty shape).
pub(crate) fn scalar_data(s: &Scalar) -> ArrayData {
    match s {
        Scalar::Bool(b) => ArrayData::Bool(vec![*b]),
        Scalar::Int(i) => ArrayData::I64(vec![*i]),
        Scalar::Float(f) => ArrayData::F64(vec![*f]),
        Scalar::Str(s) => ArrayData::Str(vec![s.clone()]),
    }
}

/// The name of a dataframe's index element (`_index` where the index has no name).
pub(crate) fn index_name(df: &DataFrame) -> &str {
    match df.index_name.as_str() {
        "" => "_index",
        name => name,
    }
}

/// The error of writing `element` from a GPU (the h5ad and zarr writers).
pub(crate) fn device_error(element: &str, e: sc_kernels::KernelError) -> Error {
    Error::Device(format!("writing {element} from the GPU: {e}"))
}
