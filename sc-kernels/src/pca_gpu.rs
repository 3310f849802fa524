//! The PCA GPU twin now lives in [`crate::pca`] ([`crate::pca::pca_dense_gpu`], `pca/gpu.rs`);
//! this path is kept for existing callers.

pub use crate::pca::pca_dense_gpu;
