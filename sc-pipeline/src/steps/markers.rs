//! `rank_genes_groups` (scanpy's `tl.rank_genes_groups`, reference `'rest'`): the marker genes
//! of each group of cells, by a t-test or the Wilcoxon rank-sum test.
//!
//! Reads `.raw` (log-normalized, every filtered gene) when the data has one, else X, and the
//! groups from `obs[groupby]` (leiden's column by default). Writes
//! `uns['rank_genes_groups']` in scanpy's layout: `params` (`groupby`, `reference`, `method`,
//! `use_raw`, `corr_method`) and the record arrays `names`, `scores`, `logfoldchanges`, `pvals`,
//! `pvals_adj` (one field per group, in the groups' order, the top `n_genes` rows), which
//! `sc.get.rank_genes_groups_df` and `sc.pl.rank_genes_groups` read as scanpy's own.

use super::{kernel_error, obs_labels};
use crate::anndata::{array_as_strings, ArrayData, Column, Value};
use crate::run::step::{no_device_bytes, Phase, Step, StepEnv};
use crate::run::PipelineConfig;
use crate::{AnnData, Error, Result};
use sc_kernels::rank_genes::{GroupMarkers, RankGenesParams};

const STEP: &str = "rank_genes_groups";

/// The pipeline's row: by `--groupby` (default: leiden's column), on `.raw`.
pub(crate) const ROW: Step = Step {
    name: STEP,
    phase: Phase::CellGraph,
    enabled: |c| c.markers_groupby().is_some(),
    run: |a, env: &StepEnv<'_>| {
        let m = env
            .config
            .markers
            .as_ref()
            .expect("the row runs only with markers");
        let groupby = env
            .config
            .markers_groupby()
            .expect("the row runs only with a grouping");
        let (n_groups, on) = rank_genes_groups_in(a, &groupby, &m.params, env.raw)?;
        Ok(format!(
            "{} by '{groupby}' ({n_groups} groups vs rest), on {on}, on the CPU",
            m.params.method
        ))
    },
    generated: None,
    device_bytes: no_device_bytes,
    kernels: &[],
    check_input,
};

/// A `--groupby` column that leiden does not make must be in obs before any step runs.
fn check_input(adata: &AnnData, config: &PipelineConfig) -> Result<()> {
    let Some(groupby) = config.markers.as_ref().and_then(|m| m.groupby.as_ref()) else {
        return Ok(());
    };
    let made_by_leiden = config.runs_leiden()
        && config
            .leiden
            .as_ref()
            .is_some_and(|l| (0..l.resolutions.len()).any(|i| &l.key(i) == groupby));
    if made_by_leiden {
        return Ok(());
    }
    let (_, groups) = obs_labels(adata, STEP, "--groupby", groupby)?;
    if groups.len() < 2 {
        return Err(Error::invalid(
            format!("obs['{groupby}']"),
            format!(
                "has {} group(s); marker genes need at least 2",
                groups.len()
            ),
        ));
    }
    Ok(())
}

/// Ranks the genes of each group of `obs[groupby]` against the rest (scanpy's
/// `tl.rank_genes_groups`), on `.raw` when `adata` has one, else on X.
pub fn rank_genes_groups(
    adata: &mut AnnData,
    groupby: &str,
    params: &RankGenesParams,
) -> Result<()> {
    rank_genes_groups_in(adata, groupby, params, None).map(|_| ())
}

/// [`rank_genes_groups`] with `.raw` held apart from `adata` (while the run writes it). Returns
/// the number of groups and what it ran on.
pub(crate) fn rank_genes_groups_in(
    adata: &mut AnnData,
    groupby: &str,
    params: &RankGenesParams,
    raw_apart: Option<&crate::anndata::Raw>,
) -> Result<(usize, &'static str)> {
    let (codes, groups) = obs_labels(adata, STEP, "groupby", groupby)?;
    let (codes, groups) = in_category_order(adata, groupby, codes, groups);
    let (value, on) = markers_record(adata, groupby, &codes, &groups, params, raw_apart)?;
    adata.uns.insert("rank_genes_groups".into(), value);
    Ok((groups.len(), on))
}

/// The test's results as scanpy's `uns['rank_genes_groups']`, and what they were computed on.
fn markers_record(
    adata: &AnnData,
    groupby: &str,
    codes: &[u32],
    groups: &[String],
    params: &RankGenesParams,
    raw_apart: Option<&crate::anndata::Raw>,
) -> Result<(Value, &'static str)> {
    let raw = raw_apart.or(adata.raw.as_ref());
    let (x, genes, on) = match raw {
        Some(r) => (r.x.to_csr()?, &r.var.index, ".raw"),
        None => (adata.x.to_csr()?, &adata.var.index, "X (no .raw)"),
    };
    let markers = sc_kernels::rank_genes::rank_genes_groups(&x, codes, groups.len(), params)
        .map_err(|e| match e {
            sc_kernels::KernelError::Unsupported(m) => {
                Error::invalid(format!("obs['{groupby}']"), m)
            }
            e => kernel_error(STEP)(e),
        })?;
    let record = |f: &dyn Fn(&GroupMarkers) -> ArrayData| {
        Value::Records(groups.iter().cloned().zip(markers.iter().map(f)).collect())
    };
    let value = Value::dict([
        (
            "params",
            Value::dict([
                ("groupby", Value::str(groupby)),
                ("reference", Value::str("rest")),
                ("method", Value::str(params.method.to_string())),
                ("use_raw", Value::bool(raw.is_some())),
                ("corr_method", Value::str("benjamini-hochberg")),
            ]),
        ),
        (
            "names",
            record(&|m| {
                ArrayData::Str(m.genes.iter().map(|&g| genes[g as usize].clone()).collect())
            }),
        ),
        ("scores", record(&|m| ArrayData::F32(m.scores.clone()))),
        (
            "logfoldchanges",
            record(&|m| ArrayData::F32(m.logfoldchanges.clone())),
        ),
        ("pvals", record(&|m| ArrayData::F64(m.pvals.clone()))),
        (
            "pvals_adj",
            record(&|m| ArrayData::F64(m.pvals_adj.clone())),
        ),
    ]);
    Ok((value, on))
}

/// The groups in the order scanpy reports them: a categorical's categories as ordered (those
/// without cells left out), else the labels sorted.
fn in_category_order(
    adata: &AnnData,
    groupby: &str,
    codes: Vec<u32>,
    groups: Vec<String>,
) -> (Vec<u32>, Vec<String>) {
    let order: Vec<String> = match adata.obs.column(groupby) {
        Some(Column::Categorical { categories, .. }) => array_as_strings(categories)
            .into_iter()
            .filter(|c| groups.contains(c))
            .collect(),
        _ => {
            let mut g = groups.clone();
            g.sort();
            g
        }
    };
    let new_code: Vec<u32> = groups
        .iter()
        .map(|g| {
            order
                .iter()
                .position(|o| o == g)
                .expect("every group is listed") as u32
        })
        .collect();
    (codes.iter().map(|&c| new_code[c as usize]).collect(), order)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::{run_pipeline, PipelineConfig, Silent};

    #[test]
    fn the_graph_steps_name_what_they_miss() {
        let p = crate::synthetic::SyntheticParams::new(300, 400, 1);
        let mut a = crate::synthetic::generate(&p).unwrap();
        let e = crate::steps::leiden(&mut a, &Default::default(), "leiden")
            .unwrap_err()
            .to_string();
        assert!(e.contains("run neighbors first"), "{e}");
        let e = crate::steps::umap(&mut a, &Default::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("run neighbors first"), "{e}");
        // A group of one cell: scanpy's rule, named.
        let n = a.n_obs();
        let labels: Vec<String> = (0..n)
            .map(|i| {
                if i == 0 {
                    "alone"
                } else if i % 2 == 0 {
                    "a"
                } else {
                    "b"
                }
                .to_string()
            })
            .collect();
        a.obs.set_values("kind", ArrayData::Str(labels)).unwrap();
        let e = rank_genes_groups(&mut a, "kind", &Default::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("kind") && e.contains("1"), "{e}");
    }

    #[test]
    fn the_whole_workflow_writes_scanpys_keys() {
        let p = crate::synthetic::SyntheticParams::new(400, 600, 2);
        let mut a = crate::synthetic::generate(&p).unwrap();
        let config = PipelineConfig {
            min_genes: Some(20),
            ..PipelineConfig::default()
        };
        run_pipeline(&mut a, &config, &mut Silent).unwrap();
        assert_eq!(a.obsm["X_umap"].shape, vec![a.n_obs(), 2]);
        assert!(matches!(
            a.obs.column("leiden"),
            Some(Column::Categorical { .. })
        ));
        let r = a.uns["rank_genes_groups"].clone();
        for key in ["names", "scores", "logfoldchanges", "pvals", "pvals_adj"] {
            assert!(
                matches!(r.get(key), Some(Value::Records(f)) if !f.is_empty()),
                "{key}"
            );
        }
        assert!(
            matches!(r.get("params").and_then(|p| p.get("method")), Some(Value::Scalar(crate::anndata::Scalar::Str(m))) if m == "wilcoxon")
        );
    }
}
