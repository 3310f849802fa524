//! The one error type of the crate: every failure names what was wrong and where.

use std::path::PathBuf;

/// What went wrong, with enough context to act on it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be opened, read or written at all.
    #[error("{path}: {message}")]
    File { path: PathBuf, message: String },
    /// The HDF5 library failed on an element of a file.
    #[error("{path}: HDF5 error at '{element}': {message}")]
    Hdf5 {
        path: PathBuf,
        element: String,
        message: String,
    },
    /// The zarr library failed on an element of a store.
    #[error("{path}: zarr error at '{element}': {message}")]
    Zarr {
        path: PathBuf,
        element: String,
        message: String,
    },
    /// The file opened but does not have the layout it must have (missing group, wrong shape,
    /// offsets out of range, unsupported encoding, ...).
    #[error("{path}: malformed element '{element}': {problem}")]
    Format {
        path: PathBuf,
        element: String,
        problem: String,
    },
    /// A matrix or table in memory breaks an invariant (after a step, or built by a caller).
    #[error("invalid data in {what}: {problem}")]
    InvalidData { what: String, problem: String },
    /// A step was called with parameters it cannot honour.
    #[error("{step}: invalid parameter: {problem}")]
    InvalidParameter { step: &'static str, problem: String },
    /// The step needs something that is not in the AnnData object (a column, a layer, ...).
    #[error("{step}: {problem}")]
    Missing { step: &'static str, problem: String },
    /// The requested device cannot run the pipeline.
    #[error("{0}")]
    Device(String),
    /// The GPU's memory resource could not give a step what it asked for.
    #[error("{step}: out of GPU memory: {oom}. Try --allocator managed (pages to host memory), a higher --pool-max, or a smaller input")]
    OutOfMemory {
        /// The pipeline step (or the operation, outside a step).
        step: String,
        oom: Box<rmm_core::OutOfMemory>,
    },
    /// A CUDA call, kernel compilation or launch failed inside a step.
    #[error("{step}: {problem}")]
    Gpu { step: &'static str, problem: String },
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// The error as raised inside pipeline step `step`: an out-of-memory error names the step
    /// (the operation that ran out, e.g. a matrix selection, may not know it).
    pub fn in_step(self, step: &str) -> Self {
        match self {
            Error::OutOfMemory { oom, .. } => Error::OutOfMemory {
                step: step.to_string(),
                oom,
            },
            other => other,
        }
    }
}

impl Error {
    pub(crate) fn format(
        path: &std::path::Path,
        element: impl Into<String>,
        problem: impl Into<String>,
    ) -> Self {
        Error::Format {
            path: path.to_path_buf(),
            element: element.into(),
            problem: problem.into(),
        }
    }

    pub(crate) fn hdf5(
        path: &std::path::Path,
        element: impl Into<String>,
        err: hdf5::Error,
    ) -> Self {
        Error::Hdf5 {
            path: path.to_path_buf(),
            element: element.into(),
            message: err.to_string(),
        }
    }

    pub(crate) fn param(step: &'static str, problem: impl Into<String>) -> Self {
        Error::InvalidParameter {
            step,
            problem: problem.into(),
        }
    }

    pub(crate) fn invalid(what: impl Into<String>, problem: impl Into<String>) -> Self {
        Error::InvalidData {
            what: what.into(),
            problem: problem.into(),
        }
    }
}
