//! Single-cell kernels. Each step has a CPU reference implementation that follows scanpy's
//! definitions (see `../shared/DESIGN.md`, section 3); GPU kernels are checked against them.

pub mod csr;

pub use csr::{CsrError, CsrMatrix};
