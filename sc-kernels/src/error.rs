//! The error types shared by every step: [`KernelError`], and [`CsrError`] for a malformed
//! sparse matrix.

/// Why a step refused its input or parameters.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum KernelError {
    /// The input matrix is malformed.
    #[error("malformed matrix: {0}")]
    Csr(#[from] CsrError),
    /// A stored value is NaN or infinite where counts or finite values are expected.
    #[error("non-finite value {value} at row {row}, column {col}")]
    NonFinite { row: usize, col: usize, value: f64 },
    /// A stored value is negative where counts are expected.
    #[error("negative value {value} at row {row}, column {col} where counts are expected")]
    Negative { row: usize, col: usize, value: f64 },
    /// A parameter is out of its domain.
    #[error("invalid parameter `{name}`: {reason}")]
    InvalidParameter { name: &'static str, reason: String },
    /// Two inputs disagree in shape.
    #[error("shape mismatch: {0}")]
    Shape(String),
    /// The step cannot run on this input (for example too few cells or genes).
    #[error("{0}")]
    Unsupported(String),
    /// The memory resource refused an allocation (out of memory carries what was asked and held).
    #[error(transparent)]
    Memory(#[from] rmm_core::MemoryError),
    /// A CUDA call, kernel compilation or launch failed.
    #[error("GPU: {0}")]
    Gpu(String),
    /// A collective between the ranks of a split run failed (see [`crate::comm`]).
    #[error("communicator: {0}")]
    Comm(String),
}

impl KernelError {
    pub(crate) fn param(name: &'static str, reason: impl Into<String>) -> Self {
        KernelError::InvalidParameter {
            name,
            reason: reason.into(),
        }
    }
}

impl KernelError {
    /// The out-of-memory report, when this is one.
    pub fn out_of_memory(&self) -> Option<&rmm_core::OutOfMemory> {
        match self {
            KernelError::Memory(rmm_core::MemoryError::OutOfMemory(o)) => Some(o),
            _ => None,
        }
    }
}

pub type Result<T> = std::result::Result<T, KernelError>;

/// Why a CSR matrix is malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CsrError {
    #[error("indptr has {got} entries, expected n_rows + 1 = {expected}")]
    IndptrLength { got: usize, expected: usize },
    #[error("indptr must start at 0, starts at {0}")]
    IndptrStart(u64),
    #[error("indptr decreases at row {row}: {from} -> {to}")]
    IndptrDecreasing { row: usize, from: u64, to: u64 },
    #[error("indptr ends at {end} but there are {nnz} stored values (indices: {indices})")]
    IndptrEnd {
        end: u64,
        nnz: usize,
        indices: usize,
    },
    #[error("column index {index} out of range at stored value {position} (n_cols = {n_cols})")]
    IndexOutOfRange {
        position: usize,
        index: u32,
        n_cols: usize,
    },
    #[error("n_cols = {0} does not fit 32-bit column indices")]
    TooManyColumns(usize),
}
