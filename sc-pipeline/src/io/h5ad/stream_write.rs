//! Writing an h5ad file whose `X` arrives as consecutive blocks of CSR rows, so a matrix larger
//! than memory (more than 2^31 stored values included) can be written: only the row offsets are
//! kept until the end. `data` and `indices` are chunked, growable datasets; the file is written
//! under a temporary name, moved into place by [`H5adStreamWriter::finish`] and removed when the
//! writer is dropped without finishing (an error on the way).

use super::elements::{create_file, new_group, write_dataframe, write_indices_at, write_indptr};
use super::hdf5_access::H5Ctx;
use crate::anndata::DataFrame;
use crate::io::encoding::IndexWidth;
use crate::io::file_space::staged_file::StagedFile;
use crate::{Error, Result};
use hdf5::{Dataset, File, Group, SimpleExtents};
use sc_kernels::CsrMatrix;
use std::path::Path;

/// Elements per HDF5 chunk of the growable datasets (4 MiB of float32): large enough for
/// fast sequential reads, small enough not to waste space at the end.
const CHUNK_ELEMENTS: usize = 1 << 20;

pub struct H5adStreamWriter {
    ctx: H5Ctx,
    file: File,
    x: Group,
    data: Dataset,
    indices: Dataset,
    indptr: Vec<u64>,
    n_cols: usize,
    width: IndexWidth,
    max_stored_values: u64,
    /// Last, so that the HDF5 objects above are released before an unfinished file is removed.
    staged: StagedFile,
}

impl H5adStreamWriter {
    /// Starts a file whose X has `n_cols` columns and at most `max_stored_values` stored
    /// values (the bound fixes the on-disk index type before the first row arrives).
    pub fn create(path: impl AsRef<Path>, n_cols: usize, max_stored_values: u64) -> Result<Self> {
        let staged = StagedFile::new(path);
        let width = IndexWidth::for_matrix(max_stored_values, n_cols);
        let ctx = H5Ctx::new(staged.path());
        let file = create_file(&ctx)?;
        let x = new_group(&ctx, &file, "X", "csr_matrix", "0.1.0")?;
        let growable = |name: &str, f32_values: bool| {
            let builder = x.new_dataset_builder();
            let builder = match (f32_values, width) {
                (true, _) => builder.empty::<f32>(),
                (false, IndexWidth::I32) => builder.empty::<i32>(),
                (false, IndexWidth::I64) => builder.empty::<i64>(),
            };
            builder
                .chunk(CHUNK_ELEMENTS)
                .shape(SimpleExtents::resizable([0usize]))
                .create(name)
                .map_err(ctx.h5(&format!("/X/{name}")))
        };
        let data = growable("data", true)?;
        let indices = growable("indices", false)?;
        Ok(H5adStreamWriter {
            ctx,
            file,
            x,
            data,
            indices,
            indptr: vec![0],
            n_cols,
            width,
            max_stored_values,
            staged,
        })
    }

    /// Rows written so far.
    pub fn n_rows(&self) -> usize {
        self.indptr.len() - 1
    }

    /// Stored values written so far.
    pub fn stored_values(&self) -> u64 {
        *self.indptr.last().expect("indptr starts with 0")
    }

    /// Appends the rows of `block` (which must have the writer's number of columns).
    pub fn append_rows(&mut self, block: &CsrMatrix<f32>) -> Result<()> {
        if block.n_cols != self.n_cols {
            return Err(Error::invalid(
                "row block",
                format!("{} columns, the file has {}", block.n_cols, self.n_cols),
            ));
        }
        block
            .validate()
            .map_err(|e| Error::invalid("row block", e.to_string()))?;
        let start = *self.indptr.last().expect("indptr starts with 0") as usize;
        let end = start + block.nnz();
        if end as u64 > self.max_stored_values {
            return Err(Error::invalid(
                "row block",
                format!(
                    "{end} stored values exceed the announced maximum {}",
                    self.max_stored_values
                ),
            ));
        }
        for (ds, name) in [(&self.data, "/X/data"), (&self.indices, "/X/indices")] {
            ds.resize([end]).map_err(self.ctx.h5(name))?;
        }
        if end > start {
            self.data
                .write_slice(&block.data[..], start..end)
                .map_err(self.ctx.h5("/X/data"))?;
            write_indices_at(
                &self.ctx,
                &self.indices,
                self.width,
                start,
                &block.indices,
                "/X/indices",
            )?;
        }
        self.indptr
            .extend(block.indptr[1..].iter().map(|&p| p + start as u64));
        Ok(())
    }

    /// Writes the row offsets, the shape, `obs` and `var` (one row per written row and column)
    /// and the empty mappings anndata expects, then moves the file into place.
    pub fn finish(self, obs: &DataFrame, var: &DataFrame) -> Result<()> {
        let result = self.finish_inner(obs, var);
        let H5adStreamWriter {
            ctx,
            file,
            x,
            data,
            indices,
            staged,
            ..
        } = self;
        // Every object must be released before the file can really close.
        drop((data, indices, x));
        let closed = file.close().map_err(ctx.h5("/"));
        // On an error `staged` is dropped here, which removes the file.
        result.and(closed)?;
        staged.commit()
    }

    fn finish_inner(&self, obs: &DataFrame, var: &DataFrame) -> Result<()> {
        let (ctx, n_rows) = (&self.ctx, self.n_rows());
        if obs.n_rows() != n_rows || var.n_rows() != self.n_cols {
            return Err(Error::invalid(
                "obs / var",
                format!(
                    "{} x {} rows for a {n_rows} x {} matrix",
                    obs.n_rows(),
                    var.n_rows(),
                    self.n_cols
                ),
            ));
        }
        write_indptr(ctx, &self.x, self.width, &self.indptr)?;
        let shape = [n_rows as i64, self.n_cols as i64];
        self.x
            .new_attr::<i64>()
            .shape(2)
            .create("shape")
            .and_then(|a| a.write_raw(&shape))
            .map_err(ctx.h5("/X"))?;
        write_dataframe(ctx, &self.file, "obs", obs)?;
        write_dataframe(ctx, &self.file, "var", var)?;
        for name in ["obsm", "varm", "obsp", "varp", "layers", "uns"] {
            new_group(ctx, &self.file, name, "dict", "0.1.0")?;
        }
        Ok(())
    }
}
