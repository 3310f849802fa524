//! The step table: every step of a run, in order. Each mode of a run (in memory, streamed,
//! generated, split across GPUs, launched ranks) walks this one list, and the memory plan sums
//! its rows' estimates. A row lives beside its step's code (`steps/<step>.rs`); adding a step
//! means its kernels, its step file with its row, one line here, and its CLI options.

use super::step::{Phase, Step};
use super::PipelineConfig;
use crate::steps::rows;

/// The steps in the order they run. The per-cell steps come first, then the cell-graph steps
/// (see [`Phase`]).
pub const STEPS: &[Step] = &[
    rows::QC,
    rows::FILTER_CELLS,
    rows::FILTER_GENES,
    rows::HVG_ON_COUNTS,
    rows::NORMALIZE,
    rows::LOG1P,
    rows::HVG,
    rows::HVG_SUBSET,
    rows::SCALE,
    rows::PCA,
    rows::HARMONY,
    rows::NEIGHBORS,
];

/// The steps of `phase` that `config` runs, in order.
pub fn enabled<'a>(
    config: &'a PipelineConfig,
    phase: Phase,
) -> impl Iterator<Item = &'static Step> + 'a {
    STEPS
        .iter()
        .filter(move |s| s.phase == phase && (s.enabled)(config))
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
        // Every per-cell step runs on the generated demo too; the cell-graph steps as loaded.
        for s in STEPS {
            assert_eq!(
                s.generated.is_some(),
                s.phase == Phase::PerCell,
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
                "neighbors"
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
}
