//! Named result columns with the dtypes scanpy gives them, so that the pipeline can put them into
//! `obs` / `var` under scanpy's names without a table of its own.

/// One column of values.
#[derive(Debug, Clone, PartialEq)]
pub enum Column {
    Bool(Vec<bool>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    F32(Vec<f32>),
    F64(Vec<f64>),
}

impl Column {
    pub fn len(&self) -> usize {
        match self {
            Column::Bool(v) => v.len(),
            Column::I32(v) => v.len(),
            Column::I64(v) => v.len(),
            Column::F32(v) => v.len(),
            Column::F64(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The values as `f64` (booleans as 0 / 1).
    pub fn to_f64(&self) -> Vec<f64> {
        match self {
            Column::Bool(v) => v.iter().map(|&b| b as u8 as f64).collect(),
            Column::I32(v) => v.iter().map(|&x| x as f64).collect(),
            Column::I64(v) => v.iter().map(|&x| x as f64).collect(),
            Column::F32(v) => v.iter().map(|&x| x as f64).collect(),
            Column::F64(v) => v.clone(),
        }
    }

    /// The entries whose mask value is true.
    pub fn select(&self, mask: &[bool]) -> Column {
        fn pick<T: Copy>(v: &[T], mask: &[bool]) -> Vec<T> {
            v.iter()
                .zip(mask)
                .filter(|(_, &m)| m)
                .map(|(&x, _)| x)
                .collect()
        }
        match self {
            Column::Bool(v) => Column::Bool(pick(v, mask)),
            Column::I32(v) => Column::I32(pick(v, mask)),
            Column::I64(v) => Column::I64(pick(v, mask)),
            Column::F32(v) => Column::F32(pick(v, mask)),
            Column::F64(v) => Column::F64(pick(v, mask)),
        }
    }
}

/// Columns in the order scanpy adds them.
pub type NamedColumns = Vec<(String, Column)>;
