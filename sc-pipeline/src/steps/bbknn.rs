//! `bbknn` (rapids-singlecell's `pp.bbknn`, the bbknn package's `bbknn`): the batch-balanced
//! neighbors graph of the cells' representation (`sc_kernels::neighbors::bbknn`) in place of
//! `neighbors`' (`obsp['distances']`, `obsp['connectivities']`, `uns['neighbors']` with
//! bbknn's parameters), for umap and leiden to read. Not a row of the command's step table.
//! Each batch's search runs on the GPU when one is given, the rest on the host.

use super::{first_columns, kernel_error, representation};
use crate::anndata::Value;
use crate::{AnnData, Result};
use sc_kernels::gpu::GpuContext;
use sc_kernels::neighbors::bbknn::{bbknn as batch_balanced, bbknn_gpu, BbknnParams};

/// The graph of `obsm[use_rep]` (see [`representation`]; its first `n_pcs` columns when
/// given) with each cell's batch `batches[i]` (`< n_batches`), the batches searched on `gpu`
/// when given.
pub fn bbknn(
    adata: &mut AnnData,
    use_rep: Option<&str>,
    n_pcs: Option<usize>,
    batches: &[u32],
    n_batches: usize,
    params: &BbknnParams,
    gpu: Option<&GpuContext>,
) -> Result<()> {
    const STEP: &str = "bbknn";
    let (rep, rep_name) = representation(adata, use_rep, STEP)?;
    let d = n_pcs.unwrap_or(rep.n_cols).min(rep.n_cols);
    if d == 0 {
        return Err(crate::Error::InvalidParameter {
            step: STEP,
            problem: "n_pcs: 0 columns of the representation".into(),
        });
    }
    let x = first_columns(rep, d).map_err(kernel_error(STEP))?;
    let g = match gpu {
        Some(ctx) => bbknn_gpu(ctx, &x, batches, n_batches, params),
        None => batch_balanced(&x, batches, n_batches, params),
    }
    .map_err(kernel_error(STEP))?;
    adata.obsp.insert("distances".into(), g.distances);
    adata.obsp.insert("connectivities".into(), g.connectivities);
    adata.uns.insert(
        "neighbors".into(),
        Value::dict([
            ("connectivities_key", Value::str("connectivities")),
            ("distances_key", Value::str("distances")),
            (
                "params",
                Value::dict([
                    ("n_neighbors", Value::int(g.n_neighbors as i64)),
                    ("method", Value::str("umap")),
                    ("metric", Value::str("euclidean")),
                    ("n_pcs", Value::int(d as i64)),
                    ("use_rep", Value::str(&rep_name)),
                    (
                        "bbknn",
                        Value::dict([
                            ("trim", Value::int(g.trim as i64)),
                            ("computation", Value::str("brute")),
                        ]),
                    ),
                ]),
            ),
        ]),
    );
    Ok(())
}
