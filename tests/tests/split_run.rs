//! The pipeline split across ranks (threads joined by the simulated communicator, on the CPU):
//! with 1, 2, 3 and 4 ranks the result equals the one-rank run's, for the default flow and for
//! the flows whose per-gene statistics need every rank (median target, seurat_v3 with batches,
//! harmony).

use integration_tests::{assert_same_markers, assert_same_pipeline_output};
use sc_kernels::comm::LocalGroup;
use sc_kernels::hvg::Flavor;
use sc_pipeline::run::split::{run_pipeline_split, Rank};
use sc_pipeline::run::{run_pipeline, PipelineConfig, Silent};
use sc_pipeline::steps::{HarmonyOptions, HvgOptions};
use std::sync::Arc;

fn input(seed: u64) -> sc_pipeline::AnnData {
    let p = sc_pipeline::synthetic::SyntheticParams::new(2000, 2500, seed);
    sc_pipeline::synthetic::generate(&p).unwrap()
}

fn split(config: &PipelineConfig, ranks: usize, seed: u64) -> sc_pipeline::AnnData {
    let group = LocalGroup::new(ranks)
        .into_iter()
        .map(|c| Rank {
            comm: Arc::new(c),
            gpu: None,
        })
        .collect();
    let (out, records) = run_pipeline_split(input(seed), config, group, &mut Silent).unwrap();
    assert!(records.iter().any(|r| r.step == "pca"));
    out
}

fn check(config: PipelineConfig, seed: u64) {
    let mut one = input(seed);
    run_pipeline(&mut one, &config, &mut Silent).unwrap();
    for ranks in 1..=4 {
        let got = split(&config, ranks, seed);
        assert_same_pipeline_output(&got, &one, 1e-4);
        assert_same_markers(&got, &one);
        if config.harmony.is_some() {
            let (a, b) = (&got.obsm["X_pca_harmony"], &one.obsm["X_pca_harmony"]);
            assert_eq!(a.shape, b.shape);
        }
    }
}

#[test]
fn default_flow_on_one_to_four_ranks() {
    check(
        PipelineConfig {
            n_comps: Some(20),
            ..PipelineConfig::default()
        },
        3,
    );
}

#[test]
fn median_target_seurat_v3_with_batches_and_harmony() {
    check(
        PipelineConfig {
            target_sum: Some(None),
            hvg: Some(HvgOptions {
                flavor: Flavor::SeuratV3,
                n_top_genes: Some(500),
                batch_key: Some("batch".into()),
                layer: None,
                cutoffs: Default::default(),
            }),
            n_comps: Some(20),
            harmony: Some(HarmonyOptions {
                key: "batch".into(),
                params: Default::default(),
            }),
            ..PipelineConfig::default()
        },
        5,
    );
}

#[test]
fn a_rank_count_that_does_not_match_the_group_is_refused() {
    let mut group: Vec<Rank> = LocalGroup::new(2)
        .into_iter()
        .map(|c| Rank {
            comm: Arc::new(c),
            gpu: None,
        })
        .collect();
    group.pop();
    let e = run_pipeline_split(input(1), &PipelineConfig::default(), group, &mut Silent)
        .unwrap_err()
        .to_string();
    assert!(e.contains("rank 0 of 2"), "{e}");
}
