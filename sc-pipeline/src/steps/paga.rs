//! `paga` (scanpy's `tl.paga`, model v1.2): the connectivities of groups of cells in the kNN
//! graph (`obsp['distances']`, each stored entry one directed edge) into
//! `uns['paga']['connectivities']` (a dense groups x groups f64 array; the Python front end
//! stores it sparse and adds scipy's spanning tree, as scanpy) and `uns['paga']['sizes']`. Not
//! a row of the command's step table. Computed on the host.

use super::kernel_error;
use crate::anndata::{ArrayData, DenseArray, Value};
use crate::{AnnData, Error, Result};
use sc_kernels::paga::{connectivities, group_edge_counts};

/// The PAGA connectivities of `groups` (one per cell, `< n_groups`) over `obsp[graph]`.
pub fn paga(adata: &mut AnnData, graph: &str, groups: &[u32], n_groups: usize) -> Result<()> {
    const STEP: &str = "paga";
    let g = adata.obsp.get(graph).ok_or_else(|| Error::Missing {
        step: STEP,
        problem: format!("obsp has no '{graph}': run neighbors first"),
    })?;
    let counts = group_edge_counts(g, groups, n_groups).map_err(kernel_error(STEP))?;
    let mut sizes = vec![0u64; n_groups];
    groups.iter().for_each(|&c| sizes[c as usize] += 1);
    let conn = connectivities(&counts, &sizes);
    adata.uns.insert(
        "paga".into(),
        Value::dict([
            (
                "connectivities",
                Value::Array(DenseArray::new(
                    vec![n_groups, n_groups],
                    ArrayData::F64(conn),
                )?),
            ),
            (
                "sizes",
                Value::Array(DenseArray::new(
                    vec![n_groups],
                    ArrayData::I64(sizes.iter().map(|&s| s as i64).collect()),
                )?),
            ),
        ]),
    );
    Ok(())
}
