//! The AnnData-like data model: a cells x genes matrix with its annotations.

mod array;
mod dataframe;
mod device;
mod gather;
mod matrix;
mod stack;
mod subset;
mod value;

pub use array::{ArrayData, DenseArray};
pub use dataframe::{array_as_strings, Column, DataFrame};
pub use device::{DeviceData, DeviceMatrix, Streamed};
pub(crate) use gather::{
    block_parts, gather_bytes, gather_bytes_direct, stack_csr_on, stacked_indptr, BlockParts,
};
pub use matrix::Matrix;

pub use sc_kernels::dense::DenseMatrix;
pub use value::{Scalar, Value};

use crate::{Error, Result};
use sc_kernels::{Communicator, CsrMatrix, SingleRank};
use std::collections::BTreeMap;
use std::sync::Arc;

/// `adata.raw`: a frozen copy of the matrix over a (usually larger) set of genes.
#[derive(Debug, PartialEq)]
pub struct Raw {
    pub x: Matrix,
    pub var: DataFrame,
    pub varm: BTreeMap<String, DenseArray>,
}

/// The group of ranks whose cells together make up a dataset, when an [`AnnData`] holds one
/// rank's block of cells: the steps combine per-gene statistics with the other ranks through
/// its communicator (see [`sc_kernels::comm`]).
#[derive(Clone)]
pub struct Ranks(pub Arc<dyn Communicator>);

impl std::fmt::Debug for Ranks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Ranks(rank {} of {})", self.0.rank(), self.0.size())
    }
}

impl PartialEq for Ranks {
    /// The same group and rank.
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// Cells x genes data with per-cell (`obs`) and per-gene (`var`) tables, multi-dimensional
/// annotations (`obsm`, `varm`), pairwise graphs (`obsp`, `varp`), extra matrices (`layers`),
/// unstructured results (`uns`) and an optional `raw`.
#[derive(Debug, PartialEq)]
pub struct AnnData {
    pub x: Matrix,
    pub obs: DataFrame,
    pub var: DataFrame,
    pub obsm: BTreeMap<String, DenseArray>,
    pub varm: BTreeMap<String, DenseArray>,
    pub obsp: BTreeMap<String, CsrMatrix<f32>>,
    pub varp: BTreeMap<String, CsrMatrix<f32>>,
    pub layers: BTreeMap<String, Matrix>,
    pub uns: BTreeMap<String, Value>,
    pub raw: Option<Raw>,
    /// Set when this object holds one rank's cells of a dataset split across ranks.
    pub ranks: Option<Ranks>,
    /// Columns of `obs` as they were for every cell before `filter_cells` removed any (those
    /// [`crate::run::PipelineConfig::keep_before_filter`] names: the QC plots' "before"
    /// violins). Held in memory only, never written; `None`: nothing was kept.
    pub obs_before_filter: Option<DataFrame>,
}

impl AnnData {
    /// An object around `x` with default row and column names and nothing else.
    pub fn new(x: Matrix) -> Self {
        let (n_obs, n_vars) = x.shape();
        Self::with_tables(
            x,
            DataFrame::with_default_index(n_obs),
            DataFrame::with_default_index(n_vars),
        )
    }

    /// An object around `x` whose rows and columns have no names
    /// ([`DataFrame::with_unnamed_rows`]): for a caller that keeps them.
    pub fn unnamed(x: Matrix) -> Self {
        let (n_obs, n_vars) = x.shape();
        Self::with_tables(
            x,
            DataFrame::with_unnamed_rows(n_obs),
            DataFrame::with_unnamed_rows(n_vars),
        )
    }

    fn with_tables(x: Matrix, obs: DataFrame, var: DataFrame) -> Self {
        AnnData {
            x,
            obs,
            var,
            obsm: BTreeMap::new(),
            varm: BTreeMap::new(),
            obsp: BTreeMap::new(),
            varp: BTreeMap::new(),
            layers: BTreeMap::new(),
            uns: BTreeMap::new(),
            raw: None,
            ranks: None,
            obs_before_filter: None,
        }
    }

    /// The communicator the steps combine statistics through: the ranks' when the cells are
    /// split, otherwise a single rank.
    pub fn comm(&self) -> &dyn Communicator {
        match &self.ranks {
            Some(r) => r.0.as_ref(),
            None => &SingleRank,
        }
    }

    /// Moves X (and `.raw.X`) to the GPU of `ctx` as CSR; returns the bytes uploaded.
    pub fn to_device(
        &mut self,
        ctx: &std::sync::Arc<sc_kernels::gpu::GpuContext>,
    ) -> Result<usize> {
        self.place_matrices(|csr| {
            let dev = sc_kernels::gpu::DeviceCsr::upload(ctx, &csr).map_err(|e| {
                match e.out_of_memory() {
                    Some(oom) => Error::OutOfMemory {
                        step: "move X to the GPU".into(),
                        oom: Box::new(oom.clone()),
                    },
                    None => Error::Device(format!("moving X to the GPU: {e}")),
                }
            })?;
            let bytes = dev.bytes();
            crate::release::drop_in_background(csr);
            Ok((Matrix::Device(DeviceMatrix::csr(ctx, dev)), bytes))
        })
    }

    /// Hands X (and `.raw.X`) to the GPU of `ctx` as CSR matrices that stay in host memory and
    /// go through the device in row blocks of at most `block_bytes`; nothing is copied.
    pub fn to_streamed(
        &mut self,
        ctx: &std::sync::Arc<sc_kernels::gpu::GpuContext>,
        block_bytes: usize,
    ) -> Result<()> {
        if self.comm().size() > 1 {
            return Err(Error::invalid(
                "X",
                "streamed execution is not available when the cells are split across GPUs: \
                 each GPU must hold its block of cells (use more GPUs or --gpus 1)",
            ));
        }
        self.place_matrices(|csr| {
            Ok((
                Matrix::Device(DeviceMatrix::streamed_csr(ctx, csr, block_bytes)),
                0,
            ))
        })
        .map(|_| ())
    }

    /// Replaces X and `.raw.X` (host matrices, as CSR) by what `place` makes of them; returns
    /// the bytes it reports. Matrices already on a GPU are left as they are.
    fn place_matrices(
        &mut self,
        place: impl Fn(CsrMatrix<f32>) -> Result<(Matrix, usize)>,
    ) -> Result<usize> {
        let up = |m: Matrix| match m {
            Matrix::Device(d) => Ok((Matrix::Device(d), 0)),
            Matrix::Sparse(c) => place(c),
            Matrix::Dense(d) => place(CsrMatrix::from_dense(&d)),
        };
        let empty = || Matrix::Sparse(CsrMatrix::zeros(0, 0));
        let (x, mut bytes) = up(std::mem::replace(&mut self.x, empty()))?;
        self.x = x;
        if let Some(raw) = &mut self.raw {
            let (x, b) = up(std::mem::replace(&mut raw.x, empty()))?;
            raw.x = x;
            bytes += b;
        }
        Ok(bytes)
    }

    /// Moves X, `.raw.X` and the layers to the host (writing needs them there).
    pub fn to_host(&mut self) -> Result<()> {
        let empty = || Matrix::Sparse(CsrMatrix::zeros(0, 0));
        self.x = std::mem::replace(&mut self.x, empty()).into_host()?;
        if let Some(raw) = &mut self.raw {
            raw.x = std::mem::replace(&mut raw.x, empty()).into_host()?;
        }
        for l in self.layers.values_mut() {
            *l = std::mem::replace(l, empty()).into_host()?;
        }
        Ok(())
    }

    pub fn n_obs(&self) -> usize {
        self.x.shape().0
    }

    pub fn n_vars(&self) -> usize {
        self.x.shape().1
    }

    /// Checks that every part agrees with the shape of `X`, and that sparse matrices are
    /// well formed.
    pub fn validate(&self) -> Result<()> {
        if let Matrix::Sparse(m) = &self.x {
            m.validate()
                .map_err(|e| Error::invalid("X", e.to_string()))?;
        }
        self.validate_shapes()
    }

    /// As [`AnnData::validate`] without the pass over X's stored values (for readers that
    /// checked them while reading).
    pub fn validate_shapes(&self) -> Result<()> {
        let (n_obs, n_vars) = self.x.shape();
        check_len("obs", self.obs.n_rows(), n_obs)?;
        check_len("var", self.var.n_rows(), n_vars)?;
        self.obs.validate("obs")?;
        self.var.validate("var")?;
        for (k, a) in &self.obsm {
            check_len(
                &format!("obsm['{k}']"),
                a.shape.first().copied().unwrap_or(0),
                n_obs,
            )?;
        }
        for (k, a) in &self.varm {
            check_len(
                &format!("varm['{k}']"),
                a.shape.first().copied().unwrap_or(0),
                n_vars,
            )?;
        }
        for (what, map, n) in [("obsp", &self.obsp, n_obs), ("varp", &self.varp, n_vars)] {
            for (k, m) in map {
                if (m.n_rows, m.n_cols) != (n, n) {
                    return Err(Error::invalid(
                        format!("{what}['{k}']"),
                        format!("shape {} x {}, expected {n} x {n}", m.n_rows, m.n_cols),
                    ));
                }
                m.validate()
                    .map_err(|e| Error::invalid(format!("{what}['{k}']"), e.to_string()))?;
            }
        }
        for (k, l) in &self.layers {
            if l.shape() != (n_obs, n_vars) {
                return Err(Error::invalid(
                    format!("layers['{k}']"),
                    format!("shape {:?}, X is {n_obs} x {n_vars}", l.shape()),
                ));
            }
        }
        if let Some(raw) = &self.raw {
            raw.validate_shapes(n_obs)?;
        }
        Ok(())
    }
}

impl Raw {
    /// Checks that `.raw` has `n_obs` rows (the cells of its AnnData) and a var row per column.
    pub fn validate_shapes(&self, n_obs: usize) -> Result<()> {
        let (r_obs, r_vars) = self.x.shape();
        check_len("raw.X rows", r_obs, n_obs)?;
        check_len("raw.var", self.var.n_rows(), r_vars)?;
        self.var.validate("raw.var")
    }
}

fn check_len(what: &str, got: usize, expected: usize) -> Result<()> {
    if got != expected {
        return Err(Error::invalid(
            what,
            format!("has {got} rows, expected {expected}"),
        ));
    }
    Ok(())
}
