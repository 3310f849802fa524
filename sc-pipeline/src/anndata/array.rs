//! Typed arrays: the element types an h5ad file holds in dataframes, `obsm`/`varm` and `uns`.

/// A flat vector of one element type. Integer widths are folded into `I32` (8 to 32 bits, and
/// unsigned up to 16 bits) and `I64` (unsigned 32 bits and 64-bit values that fit), so the model
/// stays small without losing values.
#[derive(Debug, Clone, PartialEq)]
pub enum ArrayData {
    Bool(Vec<bool>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    Str(Vec<String>),
}

impl ArrayData {
    pub fn len(&self) -> usize {
        match self {
            ArrayData::Bool(v) => v.len(),
            ArrayData::I32(v) => v.len(),
            ArrayData::I64(v) => v.len(),
            ArrayData::F32(v) => v.len(),
            ArrayData::F64(v) => v.len(),
            ArrayData::Str(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The numpy-style name of the element type, for messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            ArrayData::Bool(_) => "bool",
            ArrayData::I32(_) => "int32",
            ArrayData::I64(_) => "int64",
            ArrayData::F32(_) => "float32",
            ArrayData::F64(_) => "float64",
            ArrayData::Str(_) => "string",
        }
    }

    /// The elements picked by `keep` (one flag per element), in order.
    pub fn select(&self, keep: &[bool]) -> ArrayData {
        fn pick<T: Clone>(v: &[T], keep: &[bool]) -> Vec<T> {
            v.iter()
                .zip(keep)
                .filter(|(_, &k)| k)
                .map(|(x, _)| x.clone())
                .collect()
        }
        match self {
            ArrayData::Bool(v) => ArrayData::Bool(pick(v, keep)),
            ArrayData::I32(v) => ArrayData::I32(pick(v, keep)),
            ArrayData::I64(v) => ArrayData::I64(pick(v, keep)),
            ArrayData::F32(v) => ArrayData::F32(pick(v, keep)),
            ArrayData::F64(v) => ArrayData::F64(pick(v, keep)),
            ArrayData::Str(v) => ArrayData::Str(pick(v, keep)),
        }
    }

    /// anndata's encoding of a nullable column of these values; a named problem for a type
    /// anndata has none for.
    pub fn nullable_encoding(&self) -> Result<&'static str, String> {
        match self {
            ArrayData::Bool(_) => Ok("nullable-boolean"),
            ArrayData::Str(_) => Ok("nullable-string-array"),
            ArrayData::I32(_) | ArrayData::I64(_) => Ok("nullable-integer"),
            other => Err(format!(
                "nullable columns of {} are not an anndata encoding",
                other.type_name()
            )),
        }
    }

    /// The values as f64 when the type is numeric or boolean (for numeric consumers).
    pub fn to_f64(&self) -> Option<Vec<f64>> {
        Some(match self {
            ArrayData::Bool(v) => v.iter().map(|&b| b as u8 as f64).collect(),
            ArrayData::I32(v) => v.iter().map(|&x| x as f64).collect(),
            ArrayData::I64(v) => v.iter().map(|&x| x as f64).collect(),
            ArrayData::F32(v) => v.iter().map(|&x| x as f64).collect(),
            ArrayData::F64(v) => v.clone(),
            ArrayData::Str(_) => return None,
        })
    }
}

/// An n-dimensional array in row-major order (`obsm`, `varm`, arrays in `uns`). A 0-dimensional
/// shape is a scalar.
#[derive(Debug, Clone, PartialEq)]
pub struct DenseArray {
    pub shape: Vec<usize>,
    pub data: ArrayData,
}

impl DenseArray {
    /// Checks that the shape covers exactly the stored elements.
    pub fn new(shape: Vec<usize>, data: ArrayData) -> crate::Result<Self> {
        let expected: usize = shape.iter().product();
        if expected != data.len() {
            return Err(crate::Error::invalid(
                "array",
                format!(
                    "shape {shape:?} needs {expected} elements, {} given",
                    data.len()
                ),
            ));
        }
        Ok(DenseArray { shape, data })
    }

    /// A 1-dimensional array.
    pub fn vector(data: ArrayData) -> Self {
        DenseArray {
            shape: vec![data.len()],
            data,
        }
    }

    /// A 2-dimensional float32 array.
    pub fn matrix_f32(n_rows: usize, n_cols: usize, data: Vec<f32>) -> crate::Result<Self> {
        Self::new(vec![n_rows, n_cols], ArrayData::F32(data))
    }

    /// Rows picked by `keep` (along the first axis).
    pub fn select_rows(&self, keep: &[bool]) -> DenseArray {
        let row_len: usize = self.shape.iter().skip(1).product();
        let flags: Vec<bool> = keep
            .iter()
            .flat_map(|&k| std::iter::repeat_n(k, row_len))
            .collect();
        let mut shape = self.shape.clone();
        shape[0] = keep.iter().filter(|&&k| k).count();
        DenseArray {
            shape,
            data: self.data.select(&flags),
        }
    }
}

impl From<sc_kernels::Column> for ArrayData {
    fn from(c: sc_kernels::Column) -> Self {
        match c {
            sc_kernels::Column::Bool(v) => ArrayData::Bool(v),
            sc_kernels::Column::I32(v) => ArrayData::I32(v),
            sc_kernels::Column::I64(v) => ArrayData::I64(v),
            sc_kernels::Column::F32(v) => ArrayData::F32(v),
            sc_kernels::Column::F64(v) => ArrayData::F64(v),
        }
    }
}
