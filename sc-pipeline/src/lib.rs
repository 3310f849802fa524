//! `sc-pipeline`: an AnnData-like data model, h5ad and 10x HDF5 readers and writers, a seeded
//! synthetic data generator, scanpy-style preprocessing steps and the `scpipe` command.
//!
//! The numerical work of each step lives in `sc-kernels`; the steps here take an [`AnnData`],
//! run the kernel and write its results where scanpy writes them (`obs`, `var`, `obsm`, `obsp`,
//! `uns`).

pub mod anndata;
pub mod cli;
pub mod error;
pub mod huge_pages;
pub mod io;

pub mod memory_timeline;
pub mod plot;
pub mod release;
pub mod report;
pub mod run;
pub mod steps;
pub mod synthetic;

pub use anndata::AnnData;
pub use error::{Error, Result};
