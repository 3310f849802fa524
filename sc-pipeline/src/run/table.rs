//! The step table: every step of a run, in order. Each mode of a run (in memory, streamed,
//! generated, split across GPUs, launched ranks) walks this one list, and the memory plan sums
//! its rows' estimates. A row lives beside its step's code (`steps/<step>.rs`); adding a step
//! means its kernels, its step file with its row, one line here, and its CLI options.

use super::PipelineConfig;
use crate::steps::rows;
use crate::steps::step::{Phase, Step};
use crate::{AnnData, Result};

/// The steps in the order they run. The per-cell steps come first, then the cell-graph steps
/// (see [`Phase`]).
pub const STEPS: &[Step] = &[
    rows::QC,
    rows::FILTER_CELLS,
    rows::FILTER_GENES,
    rows::SCRUBLET,
    rows::HVG_ON_COUNTS,
    rows::NORMALIZE,
    rows::LOG1P,
    rows::HVG,
    rows::HVG_SUBSET,
    rows::REGRESS_OUT,
    rows::SCALE,
    rows::PCA,
    rows::HARMONY,
    rows::NEIGHBORS,
    rows::UMAP,
    rows::TSNE,
    rows::DRAW_GRAPH,
    rows::DIFFMAP,
    rows::DPT,
    rows::LEIDEN,
    rows::LOUVAIN,
    rows::KMEANS,
    rows::PAGA,
    rows::EMBEDDING_DENSITY,
    rows::MARKERS,
];

/// The steps that `config` runs, in order.
pub fn all_enabled(config: &PipelineConfig) -> impl Iterator<Item = &'static Step> + '_ {
    STEPS.iter().filter(move |s| (s.enabled)(config))
}

/// The steps of `phase` that `config` runs, in order.
pub fn enabled(config: &PipelineConfig, phase: Phase) -> impl Iterator<Item = &'static Step> + '_ {
    all_enabled(config).filter(move |s| s.phase == phase)
}

/// Refuses, before any step runs, what the steps of `config` could not use in `adata` (each
/// row's `check_input`: an obs column an option names, missing or unusable).
pub fn check_input(config: &PipelineConfig, adata: &AnnData) -> Result<()> {
    all_enabled(config).try_for_each(|s| (s.check_input)(adata, config))
}

/// Refuses, before any step runs on a GPU whose run's device budget is `budget` bytes, what
/// the steps of `config` could not hold there (each row's `check_budget`: neighbors' inverted
/// file).
pub fn check_budget(config: &PipelineConfig, adata: &AnnData, budget: u64) -> Result<()> {
    all_enabled(config).try_for_each(|s| (s.check_budget)(adata, config, budget))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_per_cell_steps_come_before_the_cell_graph_steps() {
        let first_graph = STEPS
            .iter()
            .position(|s| s.phase == Phase::CellGraph)
            .unwrap();
        assert!(STEPS[first_graph..]
            .iter()
            .all(|s| s.phase == Phase::CellGraph));
        // Every per-cell step runs on the generated demo too; the cell-graph steps as loaded,
        // but the marker genes, which need expression values (made again there).
        for s in STEPS {
            assert_eq!(
                s.generated.is_some(),
                s.phase == Phase::PerCell || s.name == "rank_genes_groups",
                "{}",
                s.name
            );
        }
    }

    #[test]
    fn the_default_recipe_runs_every_step_but_harmony_and_one_hvg_row() {
        let config = PipelineConfig::default();
        let names: Vec<_> = enabled(&config, Phase::PerCell)
            .chain(enabled(&config, Phase::CellGraph))
            .map(|s| s.name)
            .collect();
        assert_eq!(
            names,
            [
                "calculate_qc_metrics",
                "filter_cells",
                "filter_genes",
                "normalize_total",
                "log1p",
                "highly_variable_genes",
                "subset to HVG (raw frozen)",
                "scale",
                "pca",
                "neighbors",
                "umap",
                "leiden",
                "rank_genes_groups"
            ]
        );
        // seurat_v3 reads the counts: before normalize_total.
        let v3 = PipelineConfig {
            hvg: Some(crate::steps::HvgOptions {
                flavor: crate::steps::Flavor::SeuratV3,
                ..Default::default()
            }),
            ..PipelineConfig::default()
        };
        let names: Vec<_> = enabled(&v3, Phase::PerCell).map(|s| s.name).collect();
        assert_eq!(names[3..5], ["highly_variable_genes", "normalize_total"]);
    }

    /// Records the steps it is told of.
    #[derive(Default)]
    struct Seen(Vec<String>);
    impl crate::run::StepObserver for Seen {
        fn started(&mut self, step: &str) {
            self.0.push(step.to_string());
        }
        fn finished(&mut self, _: &crate::report::StepRecord) {}
    }

    #[test]
    fn options_that_name_obs_columns_are_checked_before_any_step() {
        let p = crate::synthetic::SyntheticParams::new(300, 400, 1);
        let input = || crate::synthetic::generate(&p).unwrap();
        let adata = input();
        let harmony = |key: &str| PipelineConfig {
            harmony: Some(crate::steps::HarmonyOptions {
                key: key.into(),
                params: Default::default(),
            }),
            ..PipelineConfig::default()
        };
        let batch_key = |key: &str| PipelineConfig {
            hvg: Some(crate::steps::HvgOptions {
                batch_key: Some(key.into()),
                ..Default::default()
            }),
            ..PipelineConfig::default()
        };
        let groupby = |key: &str| PipelineConfig {
            markers: Some(crate::run::MarkerOptions {
                groupby: Some(key.into()),
                ..Default::default()
            }),
            ..PipelineConfig::default()
        };
        let regress = |keys: &[&str]| PipelineConfig {
            regress_out: keys.iter().map(|k| k.to_string()).collect(),
            ..PipelineConfig::default()
        };
        let scrublet = |key: &str| PipelineConfig {
            scrublet: Some(crate::steps::ScrubletOptions {
                batch_key: Some(key.into()),
                ..Default::default()
            }),
            ..PipelineConfig::default()
        };
        for (config, expected) in [
            (harmony("donor"), "obs has no column 'donor'"),
            (
                scrublet("sample"),
                "obs has no column 'sample' (--scrublet-batch-key)",
            ),
            (
                regress(&["total_counts", "depth"]),
                "--regress-out: obs has no column 'depth'",
            ),
            (batch_key("donor"), "obs has no column 'donor' (batch_key)"),
            (groupby("tissue"), "obs has no column 'tissue' (--groupby)"),
        ] {
            let mut seen = Seen::default();
            let mut a = input();
            let e = crate::run::run_pipeline(&mut a, &config, &mut seen)
                .unwrap_err()
                .to_string();
            assert!(e.contains(expected), "{e}");
            assert!(seen.0.is_empty(), "steps ran first: {:?}", seen.0);
        }
        // One batch only: harmony is refused up front too.
        let mut one = input();
        let n = one.n_obs();
        one.obs
            .set_values("donor", crate::anndata::ArrayData::Str(vec!["a".into(); n]))
            .unwrap();
        let e = check_input(&harmony("donor"), &one)
            .unwrap_err()
            .to_string();
        assert!(e.contains("at least 2 batches"), "{e}");
        let e = check_input(&groupby("donor"), &one)
            .unwrap_err()
            .to_string();
        assert!(e.contains("1 group(s)"), "{e}");
        let mut lonely = input();
        let mut labels = vec!["a".to_string(); n];
        labels[n - 1] = "b".into();
        lonely
            .obs
            .set_values("donor", crate::anndata::ArrayData::Str(labels))
            .unwrap();
        let e = check_input(&scrublet("donor"), &lonely)
            .unwrap_err()
            .to_string();
        assert!(e.contains("batch 'b' of obs['donor'] has 1 cell(s)"), "{e}");
        assert!(check_input(&PipelineConfig::default(), &adata).is_ok());
        // QC's columns are made by the run, and so are leiden's.
        assert!(check_input(&regress(&["total_counts", "pct_counts_mt"]), &adata).is_ok());
        let no_qc = PipelineConfig {
            qc_mito_prefix: None,
            ..regress(&["total_counts"])
        };
        let e = check_input(&no_qc, &adata).unwrap_err().to_string();
        assert!(e.contains("QC does not run"), "{e}");
        assert!(check_input(&groupby("leiden"), &adata).is_ok());
    }
}
