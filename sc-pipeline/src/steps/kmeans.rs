//! `kmeans` (rapids-singlecell's `tl.kmeans`): k-means of the cells' representation
//! (`sc_kernels::kmeans`), its clusters into `obs[key]` as categories `"0"`, `"1"`, ... (the
//! clusters that have cells, in numeric order), and `uns[key]` with the parameters and the
//! inertia. Not a row of the command's step table yet. Computed on the host.

use super::{kernel_error, representation};
use crate::anndata::{ArrayData, Column, Value};
use crate::{AnnData, Result};
use sc_kernels::kmeans::{kmeans as cluster, KMeansParams, KMeansResult};

/// Clusters `obsm[use_rep]` (see [`representation`]; its first `n_pcs` columns when given)
/// and writes `obs[key]` and `uns[key]`.
pub fn kmeans(
    adata: &mut AnnData,
    use_rep: Option<&str>,
    n_pcs: Option<usize>,
    params: &KMeansParams,
    key: &str,
) -> Result<KMeansResult> {
    const STEP: &str = "kmeans";
    let (rep, _) = representation(adata, use_rep, STEP)?;
    let d = n_pcs.unwrap_or(rep.n_cols);
    if d == 0 || d > rep.n_cols {
        return Err(crate::Error::InvalidParameter {
            step: STEP,
            problem: format!(
                "n_pcs: {d}, but the representation has {} columns",
                rep.n_cols
            ),
        });
    }
    let x: Vec<f32> = if d == rep.n_cols {
        rep.data
    } else {
        rep.data
            .chunks_exact(rep.n_cols)
            .flat_map(|r| r[..d].iter().copied())
            .collect()
    };
    let r = cluster(&x, rep.n_rows, d, params).map_err(kernel_error(STEP))?;
    let mut present = vec![false; params.n_clusters];
    r.labels.iter().for_each(|&l| present[l as usize] = true);
    let mut code_of = vec![-1i32; params.n_clusters];
    let mut categories = Vec::new();
    for (c, _) in present.iter().enumerate().filter(|(_, &p)| p) {
        code_of[c] = categories.len() as i32;
        categories.push(c.to_string());
    }
    adata.obs.set(
        key,
        Column::Categorical {
            codes: r.labels.iter().map(|&l| code_of[l as usize]).collect(),
            categories: ArrayData::Str(categories),
            ordered: false,
        },
    )?;
    adata.uns.insert(
        key.into(),
        Value::dict([
            (
                "params",
                Value::dict([
                    ("n_clusters", Value::int(params.n_clusters as i64)),
                    ("n_init", Value::int(params.n_init as i64)),
                    ("max_iter", Value::int(params.max_iter as i64)),
                    ("tol", Value::float(params.tol)),
                    ("random_state", Value::int(params.random_state as i64)),
                ]),
            ),
            ("inertia", Value::float(r.inertia)),
            ("n_iter", Value::int(r.n_iter as i64)),
        ]),
    );
    Ok(r)
}
