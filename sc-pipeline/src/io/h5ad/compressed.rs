//! The three arrays of a compressed sparse group, as h5ad's `csr_matrix` / `csc_matrix` groups
//! and 10x's CSC `matrix` group hold them (`data`, `indices`, `indptr`): opened, checked and
//! read one way for both readers.

use super::hdf5_access::H5Ctx;
use crate::Result;
use hdf5::{Dataset, Group};
use sc_kernels::gpu::trace::PhaseTrace;

/// The `data`, `indices` and `indptr` datasets of a compressed sparse group.
pub(crate) struct CompressedArrays {
    pub data: Dataset,
    pub indices: Dataset,
    pub indptr: Dataset,
}

/// The arrays [`CompressedArrays::read`] returns: the offsets, the minor indices and the values.
pub(crate) type CompressedParts = (Vec<u64>, Vec<u32>, Vec<f32>);

impl CompressedArrays {
    /// Opens the arrays of the group `g` (at `element`) and checks that `data` and `indices`
    /// hold as many values; with `one_dimensional` (h5ad's groups), first that each of the
    /// three is 1-dimensional.
    pub fn open(
        ctx: &H5Ctx,
        g: &Group,
        element: &str,
        one_dimensional: bool,
    ) -> Result<CompressedArrays> {
        let data = ctx.dataset(g, "data", &format!("{element}/data"))?;
        let indices = ctx.dataset(g, "indices", &format!("{element}/indices"))?;
        let indptr = ctx.dataset(g, "indptr", &format!("{element}/indptr"))?;
        if one_dimensional {
            for (ds, part) in [(&data, "data"), (&indices, "indices"), (&indptr, "indptr")] {
                if ds.ndim() != 1 {
                    return Err(ctx.format(
                        &format!("{element}/{part}"),
                        format!("must be 1-dimensional, has shape {:?}", ds.shape()),
                    ));
                }
            }
        }
        if data.size() != indices.size() {
            return Err(ctx.format(
                element,
                format!(
                    "data has {} values but indices has {}",
                    data.size(),
                    indices.size()
                ),
            ));
        }
        Ok(CompressedArrays {
            data,
            indices,
            indptr,
        })
    }

    /// Reads the three arrays: `n_major + 1` offsets up to the number of stored values, indices
    /// below `n_minor`, the values as float32 (see [`H5Ctx::matrix_indptr`],
    /// [`H5Ctx::matrix_indices`], [`H5Ctx::matrix_values`]); each read is marked on `trace`
    /// when there is one.
    pub fn read(
        &self,
        ctx: &H5Ctx,
        n_major: usize,
        n_minor: usize,
        element: &str,
        mut trace: Option<&mut PhaseTrace>,
    ) -> Result<CompressedParts> {
        let mut mark = |phase: &str| {
            if let Some(t) = trace.as_mut() {
                t.mark(phase).ok();
            }
        };
        let nnz = self.data.size();
        let indptr = ctx.matrix_indptr(&self.indptr, n_major, nnz, &format!("{element}/indptr"))?;
        mark("indptr");
        let indices =
            ctx.matrix_indices(&self.indices, None, n_minor, &format!("{element}/indices"))?;
        mark("indices");
        let data = ctx.matrix_values(&self.data, None, &format!("{element}/data"))?;
        mark("data");
        Ok((indptr, indices, data))
    }
}
