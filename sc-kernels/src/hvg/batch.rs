//! Batch-aware selection for the dispersion-based flavours (scanpy's
//! `_highly_variable_genes_batched`): each batch (in category order) is processed on its own, with
//! genes unexpressed in that batch left out (zeros); the per-gene results are then averaged over
//! batches (NaN skipped, as pandas' `groupby().mean()` does), `highly_variable_nbatches` counts
//! the batches selecting a gene and `highly_variable_intersection` marks genes selected in all.
//! With `n_top_genes`, genes are ranked by number of batches, then by mean normalized dispersion
//! (NaN last; remaining ties in gene-name order, the order scanpy's groupby leaves them in), and
//! exactly `n_top_genes` are taken. With cutoffs, the averaged means and normalized dispersions
//! (NaN -> 0) are tested.

use super::binning::kahan_mean;
use super::{
    dispersion_transform, dispersions, Batches, ColumnPasses, HvgParams, HvgResult, Selection,
};
use crate::columns::Column;
use crate::error::Result;
use std::cmp::Ordering;

pub(crate) fn dispersion_batched<P: ColumnPasses>(
    p: &P,
    params: &HvgParams,
    b: &Batches,
    gene_names: Option<&[String]>,
) -> Result<HvgResult> {
    let moments = p.moments(dispersion_transform(params), true)?;
    let sizes = p.group_sizes(Some(b))?;
    // Non-empty categories, in category order.
    let per = (0..b.categories.len())
        .filter(|&c| sizes[c] > 0)
        .map(|c| dispersions(&moments[c], sizes[c], params, true))
        .collect::<Result<Vec<_>>>()?;
    let nb = per.len();
    let ng = p.n_cols();
    let mut means = vec![0.0; ng];
    let mut disp = vec![0.0; ng];
    let mut disp_norm = vec![0.0; ng];
    let mut nbatches = vec![0i64; ng];
    let mut buf = Vec::with_capacity(nb);
    for j in 0..ng {
        buf.clear();
        buf.extend(per.iter().map(|p| p.means[j]));
        means[j] = kahan_mean(&buf);
        buf.clear();
        buf.extend(per.iter().map(|p| p.dispersions[j]));
        disp[j] = kahan_mean(&buf);
        buf.clear();
        buf.extend(per.iter().map(|p| p.dispersions_norm[j]));
        disp_norm[j] = kahan_mean(&buf);
        nbatches[j] = per.iter().filter(|p| p.highly_variable[j]).count() as i64;
    }
    let intersection: Vec<bool> = nbatches.iter().map(|&n| n as usize == nb).collect();
    let hv = match params.selection() {
        Selection::NTop(n) => {
            // Tie order: scanpy's groupby sorts by gene name.
            let mut order: Vec<usize> = (0..ng).collect();
            if let Some(names) = gene_names {
                order.sort_by(|&a, &b| names[a].cmp(&names[b]));
            }
            order.sort_by(|&a, &b| {
                nbatches[b].cmp(&nbatches[a]).then_with(|| {
                    let (da, db) = (disp_norm[a], disp_norm[b]);
                    match (da.is_nan(), db.is_nan()) {
                        (true, true) => Ordering::Equal,
                        (true, false) => Ordering::Greater,
                        (false, true) => Ordering::Less,
                        _ => db.partial_cmp(&da).unwrap(),
                    }
                })
            });
            let mut hv = vec![false; ng];
            for &j in order.iter().take(n) {
                hv[j] = true;
            }
            hv
        }
        Selection::Cutoffs {
            min_disp,
            max_disp,
            min_mean,
            max_mean,
        } => means
            .iter()
            .zip(&disp_norm)
            .map(|(&m, &d)| {
                let d = if d.is_nan() { 0.0 } else { d };
                m > min_mean && m < max_mean && d > min_disp && d < max_disp
            })
            .collect(),
    };
    Ok(HvgResult {
        highly_variable: hv.clone(),
        columns: vec![
            ("highly_variable".into(), Column::Bool(hv)),
            ("means".into(), Column::F64(means)),
            ("dispersions".into(), Column::F64(disp)),
            (
                "dispersions_norm".into(),
                Column::F32(disp_norm.iter().map(|&v| v as f32).collect()),
            ),
            ("highly_variable_nbatches".into(), Column::I64(nbatches)),
            (
                "highly_variable_intersection".into(),
                Column::Bool(intersection),
            ),
        ],
    })
}
