//! The whole pipeline on generated and real data: what each step leaves in the AnnData object,
//! as scanpy lays it out.

mod common;

use sc_pipeline::anndata::{ArrayData, Column, Matrix, Value};
use sc_pipeline::io::{read_h5ad, write_h5ad};
use sc_pipeline::report::StepRecord;
use sc_pipeline::run::{run_pipeline, PipelineConfig, Silent};
use sc_pipeline::steps::{self, Flavor, HvgOptions};
use sc_pipeline::synthetic::{generate, SyntheticParams};
use sc_pipeline::AnnData;

fn small() -> AnnData {
    generate(&SyntheticParams::new(1200, 3000, 3)).unwrap()
}

fn f64_column(a: &AnnData, table: &str, name: &str) -> Vec<f64> {
    let df = if table == "obs" { &a.obs } else { &a.var };
    match df.column(name) {
        Some(Column::Values(v)) => v.to_f64().unwrap(),
        other => panic!("{table}['{name}']: {other:?}"),
    }
}

/// The default flow (500 highly variable genes) on [`small`]: the result, its configuration and
/// the steps' records.
fn default_run() -> (AnnData, PipelineConfig, Vec<StepRecord>) {
    let mut a = small();
    let config = PipelineConfig {
        hvg: n_top_genes_override(),
        ..PipelineConfig::default()
    };
    let records = run_pipeline(&mut a, &config, &mut Silent).unwrap();
    (a, config, records)
}

#[test]
fn the_default_run_lays_out_results_as_scanpy() {
    let (a, _, records) = default_run();
    let names: Vec<&str> = records.iter().map(|r| r.step.as_str()).collect();
    assert!(
        names.contains(&"calculate_qc_metrics") && names.contains(&"scale"),
        "{names:?}"
    );

    // QC columns in obs, mt genes found.
    for c in [
        "n_genes_by_counts",
        "total_counts",
        "total_counts_mt",
        "pct_counts_mt",
        "n_genes",
    ] {
        assert!(a.obs.column(c).is_some(), "obs['{c}']");
    }
    assert!(f64_column(&a, "obs", "total_counts_mt")
        .iter()
        .any(|&v| v > 0.0));
    // filter_cells(min_genes=200) removed the low-quality cells.
    assert!(f64_column(&a, "obs", "n_genes").iter().all(|&v| v >= 200.0));
    // raw: log-normalized over all genes kept by the filters, with the HVG columns in its var.
    let raw = a.raw.as_ref().expect(".raw is frozen before the subset");
    assert!(raw.x.shape().1 > a.n_vars());
    assert!(raw.var.column("highly_variable").is_some() && raw.var.column("n_cells").is_some());
    let raw_max = raw
        .x
        .values()
        .expect("host matrix")
        .iter()
        .fold(0f32, |m, &v| m.max(v));
    assert!(
        raw_max > 0.0 && raw_max < 12.0,
        "log1p of normalized counts: max {raw_max}"
    );
    // X: the scaled highly variable genes, dense, clipped at 10.
    let Matrix::Dense(x) = &a.x else {
        panic!("scaled X is dense")
    };
    assert!(x.data.iter().all(|&v| (-10.0..=10.0).contains(&v)));
    let hv = f64_column(&a, "var", "highly_variable");
    assert!(hv.iter().all(|&h| h == 1.0));
    assert!(a.var.column("mean").is_some() && a.var.column("std").is_some());
    assert_eq!(a.uns["hvg"].get("flavor"), Some(&Value::str("cell_ranger")));
    assert!(a.uns.contains_key("log1p"));
    assert!(a.layers.is_empty(), "no counts layer is left behind");
    // PCA: 50 components, scores per cell, loadings per gene, variances.
    assert_eq!(a.obsm["X_pca"].shape, vec![a.n_obs(), 50]);
    assert_eq!(a.varm["PCs"].shape, vec![a.n_vars(), 50]);
    let pca = &a.uns["pca"];
    match pca.get("variance_ratio") {
        Some(Value::Array(v)) => {
            let r = v.data.to_f64().unwrap();
            assert!(r.windows(2).all(|w| w[0] >= w[1]) && r.iter().sum::<f64>() <= 1.0 + 1e-9);
        }
        other => panic!("uns['pca']['variance_ratio']: {other:?}"),
    }
    assert!(pca
        .get("params")
        .and_then(|p| p.get("zero_center"))
        .is_some());
    // neighbors: 14 non-self neighbours per cell, symmetric connectivities, scanpy's keys.
    let d = &a.obsp["distances"];
    assert_eq!((d.n_rows, d.nnz()), (a.n_obs(), a.n_obs() * 14));
    let c = &a.obsp["connectivities"];
    assert_eq!(c.n_rows, a.n_obs());
    assert!(c.data.iter().all(|&w| w > 0.0 && w <= 1.0));
    let neighbors = &a.uns["neighbors"];
    assert_eq!(
        neighbors.get("connectivities_key"),
        Some(&Value::str("connectivities"))
    );
    assert_eq!(
        neighbors.get("distances_key"),
        Some(&Value::str("distances"))
    );
    let params = neighbors.get("params").unwrap();
    assert_eq!(params.get("n_neighbors"), Some(&Value::int(15)));
    assert_eq!(params.get("method"), Some(&Value::str("umap")));
    assert_eq!(params.get("metric"), Some(&Value::str("euclidean")));

    let path = common::scratch("pipeline.h5ad");
    write_h5ad(&a, &path).unwrap();
    assert_eq!(read_h5ad(&path).unwrap().n_vars(), a.n_vars());
}

#[test]
fn umap_runs_beside_leiden_and_lays_out_as_in_order() {
    let (mut a, config, records) = default_run();
    let names: Vec<&str> = records.iter().map(|r| r.step.as_str()).collect();
    let at = |n: &str| names.iter().position(|&s| s == n).unwrap();
    // The report keeps the table's order.
    assert!(
        at("neighbors") < at("umap")
            && at("umap") < at("leiden")
            && at("leiden") < at("rank_genes_groups"),
        "{names:?}"
    );
    let umap = &records[at("umap")];
    assert!(
        umap.note.contains("beside leiden, rank_genes_groups"),
        "{}",
        umap.note
    );
    assert!(a.obs.column("leiden").is_some() && a.uns.contains_key("rank_genes_groups"));
    // The same layout, bit for bit, as umap run alone on the finished graph.
    let beside = a.obsm.remove("X_umap").expect("obsm['X_umap']");
    let uns_beside = a.uns.remove("umap").expect("uns['umap']");
    steps::umap(&mut a, &config.umap.unwrap()).unwrap();
    assert_eq!(a.obsm["X_umap"], beside);
    assert_eq!(a.uns["umap"], uns_beside);
}

fn n_top_genes_override() -> Option<HvgOptions> {
    Some(HvgOptions {
        n_top_genes: Some(500),
        ..HvgOptions::default()
    })
}

#[test]
fn seurat_v3_runs_on_counts_and_batches() {
    let mut a = small();
    let hvg = HvgOptions {
        flavor: Flavor::SeuratV3,
        n_top_genes: Some(300),
        batch_key: Some("batch".into()),
        layer: None,
        cutoffs: Default::default(),
    };
    let config = PipelineConfig {
        hvg: Some(hvg),
        scale_max_value: None,
        n_comps: None,
        n_neighbors: None,
        ..PipelineConfig::default()
    };
    run_pipeline(&mut a, &config, &mut Silent).unwrap();
    assert_eq!(a.n_vars(), 300);
    for c in [
        "variances",
        "variances_norm",
        "highly_variable_rank",
        "highly_variable_nbatches",
    ] {
        assert!(a.var.column(c).is_some(), "var['{c}']");
    }
    assert!(a.layers.is_empty());
}

#[test]
fn neighbors_without_pca_on_many_genes_is_refused() {
    let mut a = small();
    let e = steps::neighbors(&mut a, 15, None).unwrap_err().to_string();
    assert!(e.contains("run pca first"), "{e}");
    let e = steps::neighbors(&mut a, 1, None).unwrap_err().to_string();
    assert!(e.contains("n_neighbors"), "{e}");
    let e = steps::pca(&mut a, 0).unwrap_err().to_string();
    assert!(e.contains("n_comps"), "{e}");
}

#[test]
fn an_unknown_batch_key_is_named() {
    let mut a = small();
    steps::normalize_total(&mut a, &Default::default()).unwrap();
    steps::log1p(&mut a, None).unwrap();
    let opts = HvgOptions {
        batch_key: Some("donor".into()),
        ..HvgOptions::default()
    };
    let e = steps::highly_variable_genes(&mut a, &opts)
        .unwrap_err()
        .to_string();
    assert!(e.contains("donor"), "{e}");
}

#[test]
fn qc_vars_must_name_boolean_gene_columns() {
    let mut a = small();
    let e = steps::calculate_qc_metrics(&mut a, &["ribo"], &[], true)
        .unwrap_err()
        .to_string();
    assert!(e.contains("ribo"), "{e}");
    a.var
        .set_values("label", ArrayData::Str(vec!["x".into(); a.n_vars()]))
        .unwrap();
    let e = steps::calculate_qc_metrics(&mut a, &["label"], &[], true)
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a boolean"), "{e}");
}

#[test]
fn the_real_two_batch_dataset_runs_batch_aware() {
    let mut a = read_h5ad(common::shared_data(
        "scvi_pbmc5k_pbmc10k_400cells_2batches_counts.h5ad",
    ))
    .unwrap();
    let hvg = HvgOptions {
        flavor: Flavor::Seurat,
        n_top_genes: Some(500),
        batch_key: Some("batch".into()),
        layer: None,
        cutoffs: Default::default(),
    };
    let config = PipelineConfig {
        hvg: Some(hvg),
        min_cells: Some(3),
        ..PipelineConfig::default()
    };
    run_pipeline(&mut a, &config, &mut Silent).unwrap();
    assert_eq!(a.n_vars(), 500);
    assert!(a.var.column("highly_variable_intersection").is_some());
}

#[test]
fn out_of_range_step_parameters_are_refused() {
    use sc_pipeline::steps::{CellFilter, NormalizeParams};
    let mut a = small();
    let e = steps::normalize_total(
        &mut a,
        &NormalizeParams {
            target_sum: Some(f64::NAN),
            ..Default::default()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("target_sum"), "{e}");
    let e = steps::log1p(&mut a, Some(1.0)).unwrap_err().to_string();
    assert!(e.contains("base"), "{e}");
    let e = steps::filter_cells(&mut a, CellFilter::MinCounts(f64::NAN))
        .unwrap_err()
        .to_string();
    assert!(e.contains("NaN"), "{e}");
    let opts = HvgOptions {
        n_top_genes: Some(0),
        ..HvgOptions::default()
    };
    let e = steps::highly_variable_genes(&mut a, &opts)
        .unwrap_err()
        .to_string();
    assert!(e.contains("n_top_genes"), "{e}");
    let mut tiny = generate(&SyntheticParams::new(10, 200, 1)).unwrap();
    tiny.obsm.insert(
        "X_pca".into(),
        sc_pipeline::anndata::DenseArray::matrix_f32(10, 2, vec![0.5; 20]).unwrap(),
    );
    let e = steps::neighbors(&mut tiny, 11, None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("exceeds the 10 cells"), "{e}");
    assert_eq!(a.n_obs(), 1200, "failed steps leave the cells in place");
}

#[test]
fn harmony_corrects_x_pca_and_neighbors_use_the_result() {
    let mut a = small();
    let config = PipelineConfig {
        hvg: n_top_genes_override(),
        harmony: Some(steps::HarmonyOptions {
            key: "batch".into(),
            params: steps::HarmonyParams::default(),
        }),
        neighbors_use_rep: Some(steps::HARMONY_ADJUSTED_BASIS.into()),
        ..PipelineConfig::default()
    };
    let records = run_pipeline(&mut a, &config, &mut Silent).unwrap();
    let names: Vec<&str> = records.iter().map(|r| r.step.as_str()).collect();
    let (p, h, n) = (
        names.iter().position(|&s| s == "pca").unwrap(),
        names
            .iter()
            .position(|&s| s == "harmony_integrate")
            .unwrap(),
        names.iter().position(|&s| s == "neighbors").unwrap(),
    );
    assert!(p < h && h < n, "{names:?}");
    let note = &records[h].note;
    assert!(note.contains("key=batch: 4 batches"), "{note}");
    let (pca, hm) = (&a.obsm["X_pca"], &a.obsm["X_pca_harmony"]);
    assert_eq!(pca.shape, hm.shape);
    assert!(matches!(hm.data, ArrayData::F32(_)));
    assert_ne!(pca.data, hm.data);
    let params = a.uns["neighbors"].get("params").unwrap();
    assert_eq!(params.get("use_rep"), Some(&Value::str("X_pca_harmony")));
}

#[test]
fn harmony_refuses_missing_inputs_and_a_single_batch() {
    let mut a = small();
    let p = steps::HarmonyParams::default();
    let e = steps::harmony_integrate(&mut a, "batch", &p)
        .unwrap_err()
        .to_string();
    assert!(e.contains("run pca first"), "{e}");
    let config = PipelineConfig {
        hvg: n_top_genes_override(),
        n_neighbors: None,
        ..PipelineConfig::default()
    };
    run_pipeline(&mut a, &config, &mut Silent).unwrap();
    let e = steps::harmony_integrate(&mut a, "donor", &p)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("obs has no column 'donor'") && e.contains("batch"),
        "{e}"
    );
    let n = a.n_obs();
    a.obs
        .set("one", Column::categorical_from_labels(&vec!["x"; n]))
        .unwrap();
    let e = steps::harmony_integrate(&mut a, "one", &p)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("single value (x)") && e.contains("at least 2 batches"),
        "{e}"
    );
    let e = steps::neighbors(&mut a, 15, Some("X_pca_harmony"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("obsm has no 'X_pca_harmony'"), "{e}");
    assert!(!a.obsm.contains_key("X_pca_harmony"));
}

/// A targeted panel of 300 genes: QC keeps the `percent_top` positions it holds (scanpy's
/// default would refuse the data), and the default `min_genes=200`, which no cell passes, is
/// named as the cause instead of a later step failing on too few cells.
#[test]
fn a_small_gene_panel_runs_and_a_filter_that_keeps_nothing_is_named() {
    let panel = || generate(&SyntheticParams::new(1500, 300, 5)).unwrap();
    let e = run_pipeline(&mut panel(), &PipelineConfig::default(), &mut Silent)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("filter_cells") && e.contains("min_genes=200 keeps 0 of 1500 cells"),
        "{e}"
    );
    let mut a = panel();
    let config = PipelineConfig {
        min_genes: Some(20),
        hvg: Some(HvgOptions {
            n_top_genes: Some(100),
            ..HvgOptions::default()
        }),
        n_comps: Some(20),
        ..PipelineConfig::default()
    };
    let records = run_pipeline(&mut a, &config, &mut Silent).unwrap();
    let qc = records
        .iter()
        .find(|r| r.step == "calculate_qc_metrics")
        .unwrap();
    assert!(
        qc.note.contains("up to N=200 only: 300 genes"),
        "{}",
        qc.note
    );
    assert!(a.obs.column("pct_counts_in_top_200_genes").is_some());
    assert!(a.obs.column("pct_counts_in_top_500_genes").is_none());
}

/// `--regress-out total_counts,pct_counts_mt` runs between the highly variable subset and
/// scale, as calling the two steps by hand after the same run does (the same bits).
#[test]
fn regress_out_runs_before_scale_as_the_steps_by_hand() {
    let keys = vec!["total_counts".to_string(), "pct_counts_mt".to_string()];
    let upto_scale = PipelineConfig {
        hvg: n_top_genes_override(),
        n_comps: None,
        n_neighbors: None,
        umap: None,
        leiden: None,
        markers: None,
        ..PipelineConfig::default()
    };
    let mut run = small();
    let config = PipelineConfig {
        regress_out: keys.clone(),
        ..upto_scale.clone()
    };
    let records = run_pipeline(&mut run, &config, &mut Silent).unwrap();
    let names: Vec<&str> = records.iter().map(|r| r.step.as_str()).collect();
    let at = |s: &str| names.iter().position(|n| *n == s).unwrap();
    assert_eq!(at("regress_out") + 1, at("scale"), "{names:?}");
    let mut by_hand = small();
    let before = PipelineConfig {
        scale_max_value: None,
        ..upto_scale
    };
    run_pipeline(&mut by_hand, &before, &mut Silent).unwrap();
    steps::regress_out(&mut by_hand, &keys).unwrap();
    steps::scale(
        &mut by_hand,
        &sc_kernels::scale::ScaleParams {
            zero_center: true,
            max_value: Some(10.0),
        },
    )
    .unwrap();
    match (&run.x, &by_hand.x) {
        (Matrix::Dense(a), Matrix::Dense(b)) => {
            assert_eq!(a.n_cols, 500);
            assert!(a
                .data
                .iter()
                .zip(&b.data)
                .all(|(x, y)| x.to_bits() == y.to_bits()));
        }
        other => panic!("X should be dense after regress_out: {other:?}"),
    }
}

/// `--scrublet` runs after the filters and before normalize_total, on the filtered counts, as
/// calling the step by hand after the filters does (the same scores); X is left as it was.
#[test]
fn scrublet_runs_on_the_filtered_counts_as_the_step_by_hand() {
    let upto_normalize = PipelineConfig {
        hvg: None,
        log1p: false,
        scale_max_value: None,
        n_comps: None,
        n_neighbors: None,
        umap: None,
        leiden: None,
        markers: None,
        ..PipelineConfig::default()
    };
    let mut run = small();
    let config = PipelineConfig {
        scrublet: Some(steps::ScrubletOptions::default()),
        ..upto_normalize.clone()
    };
    let records = run_pipeline(&mut run, &config, &mut Silent).unwrap();
    let names: Vec<&str> = records.iter().map(|r| r.step.as_str()).collect();
    let at = |s: &str| names.iter().position(|n| *n == s).unwrap();
    assert_eq!(at("filter_genes") + 1, at("scrublet"), "{names:?}");
    assert_eq!(at("scrublet") + 1, at("normalize_total"), "{names:?}");
    let mut by_hand = small();
    let filters_only = PipelineConfig {
        target_sum: None,
        ..upto_normalize
    };
    run_pipeline(&mut by_hand, &filters_only, &mut Silent).unwrap();
    let counts = by_hand.x.host_copy().unwrap();
    steps::scrublet(&mut by_hand, &steps::ScrubletOptions::default(), None).unwrap();
    assert_eq!(by_hand.x.host_copy().unwrap(), counts, "X is only read");
    let scores = |a: &AnnData| f64_column(a, "obs", "doublet_score");
    assert_eq!(scores(&run), scores(&by_hand));
    assert!(scores(&run).iter().all(|s| s.is_finite() && *s > 0.0));
    assert!(run
        .uns
        .get("scrublet")
        .unwrap()
        .get("doublet_scores_sim")
        .is_some());
}

/// `--tsne` runs after umap on the PCA, as the step by hand does (the same embedding), and
/// writes scanpy's `uns['tsne']`; it is off by default.
#[test]
fn tsne_runs_after_umap_on_the_pca_as_the_step_by_hand() {
    assert!(!PipelineConfig::default().runs_tsne());
    let config = PipelineConfig {
        tsne: Some(sc_kernels::tsne::TsneParams::default()),
        leiden: None,
        markers: None,
        ..PipelineConfig::default()
    };
    let mut run = small();
    let records = run_pipeline(&mut run, &config, &mut Silent).unwrap();
    let names: Vec<&str> = records.iter().map(|r| r.step.as_str()).collect();
    let at = |s: &str| names.iter().position(|n| *n == s).unwrap();
    assert_eq!(at("umap") + 1, at("tsne"), "{names:?}");
    let mut by_hand = small();
    run_pipeline(
        &mut by_hand,
        &PipelineConfig {
            tsne: None,
            ..config
        },
        &mut Silent,
    )
    .unwrap();
    steps::tsne(&mut by_hand, None, &Default::default(), "X_tsne").unwrap();
    assert_eq!(run.obsm.get("X_tsne"), by_hand.obsm.get("X_tsne"));
    assert_eq!(run.obsm.get("X_tsne").unwrap().shape, vec![run.n_obs(), 2]);
    assert!(run.uns.get("tsne").unwrap().get("params").is_some());
}

/// `--draw-graph` runs after tsne (here after umap), as the step by hand does from scanpy's
/// start of seed 0, and writes scanpy's `uns['draw_graph']`; it is off by default.
#[test]
fn draw_graph_runs_after_umap_as_the_step_by_hand() {
    assert!(!PipelineConfig::default().runs_draw_graph());
    let params = sc_kernels::draw_graph::Fa2Params {
        iterations: 50,
        ..Default::default()
    };
    let config = PipelineConfig {
        draw_graph: Some(params),
        leiden: None,
        markers: None,
        ..PipelineConfig::default()
    };
    let mut run = small();
    let records = run_pipeline(&mut run, &config, &mut Silent).unwrap();
    let names: Vec<&str> = records.iter().map(|r| r.step.as_str()).collect();
    let at = |s: &str| names.iter().position(|n| *n == s).unwrap();
    assert_eq!(at("umap") + 1, at("draw_graph"), "{names:?}");
    let mut by_hand = small();
    run_pipeline(
        &mut by_hand,
        &PipelineConfig {
            draw_graph: None,
            ..config
        },
        &mut Silent,
    )
    .unwrap();
    steps::draw_graph(
        &mut by_hand,
        &params,
        steps::DrawGraphStart::Numpy(0),
        None,
        None,
    )
    .unwrap();
    let layout = run.obsm.get("X_draw_graph_fa").unwrap();
    assert_eq!(Some(layout), by_hand.obsm.get("X_draw_graph_fa"));
    assert_eq!(layout.shape, vec![run.n_obs(), 2]);
    let recorded = run.uns.get("draw_graph").unwrap().get("params").unwrap();
    assert_eq!(recorded.get("layout"), Some(&Value::str("fa")));
    assert_eq!(recorded.get("random_state"), Some(&Value::int(0)));
}

/// `--paga` runs after the clusterings on leiden's groups (in their categories' order), as
/// the step by hand does, and its result goes through the h5ad file as scanpy keeps it:
/// sparse connectivities and spanning tree, the groups' key, their sizes.
#[test]
fn paga_runs_after_the_clusterings_and_survives_the_file() {
    assert!(!PipelineConfig::default().runs_paga());
    let config = PipelineConfig {
        paga: Some(sc_pipeline::run::PagaOptions::default()),
        markers: None,
        ..PipelineConfig::default()
    };
    assert_eq!(config.paga_groups().as_deref(), Some("leiden"));
    let mut run = small();
    let records = run_pipeline(&mut run, &config, &mut Silent).unwrap();
    let names: Vec<&str> = records.iter().map(|r| r.step.as_str()).collect();
    let at = |s: &str| names.iter().position(|n| *n == s).unwrap();
    assert_eq!(at("leiden") + 1, at("paga"), "{names:?}");
    let mut by_hand = small();
    run_pipeline(
        &mut by_hand,
        &PipelineConfig {
            paga: None,
            ..config.clone()
        },
        &mut Silent,
    )
    .unwrap();
    let n_groups = steps::paga_of(&mut by_hand, "leiden", None).unwrap();
    assert!(n_groups >= 2, "{n_groups} groups");
    for key in ["paga", "leiden_sizes"] {
        assert_eq!(run.uns.get(key), by_hand.uns.get(key), "{key}");
    }
    let paga = run.uns.get("paga").unwrap();
    let Some(Value::Sparse(conn)) = paga.get("connectivities") else {
        panic!("sparse connectivities")
    };
    let Some(Value::Sparse(tree)) = paga.get("connectivities_tree") else {
        panic!("sparse tree")
    };
    assert_eq!((conn.n_rows, tree.n_rows), (n_groups, n_groups));
    // A spanning forest: at most groups - 1 edges, each above the diagonal.
    assert!(tree.nnz() < n_groups && tree.nnz() > 0);
    assert!((0..n_groups).all(|i| tree.row(i).0.iter().all(|&j| j as usize > i)));
    assert_eq!(paga.get("groups"), Some(&Value::str("leiden")));
    let dir = std::env::temp_dir().join(format!("scpipe-paga-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("paga.h5ad");
    write_h5ad(&run, &path).unwrap();
    let back = read_h5ad(&path).unwrap();
    assert_eq!(back.uns.get("paga"), run.uns.get("paga"));
    assert_eq!(back.uns.get("leiden_sizes"), run.uns.get("leiden_sizes"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--diffmap`, `--louvain` and `--kmeans N` run in the table's order (diffmap after umap,
/// louvain after leiden, kmeans after it), each as the step by hand does on the run without
/// them; all three are off by default.
#[test]
fn diffmap_louvain_and_kmeans_rows_equal_the_steps_by_hand() {
    let d = PipelineConfig::default();
    assert!(!d.runs_diffmap() && !d.runs_louvain() && !d.runs_kmeans());
    let kmeans = sc_kernels::kmeans::KMeansParams {
        n_clusters: 4,
        ..Default::default()
    };
    let config = PipelineConfig {
        diffmap: Some(15),
        louvain: Some(sc_pipeline::run::LouvainOptions::default()),
        kmeans: Some(kmeans),
        markers: None,
        ..PipelineConfig::default()
    };
    let mut run = small();
    let records = run_pipeline(&mut run, &config, &mut Silent).unwrap();
    let names: Vec<&str> = records.iter().map(|r| r.step.as_str()).collect();
    let at = |s: &str| names.iter().position(|n| *n == s).unwrap();
    assert!(
        at("umap") < at("diffmap") && at("diffmap") < at("leiden"),
        "{names:?}"
    );
    assert_eq!(at("leiden") + 1, at("louvain"), "{names:?}");
    assert_eq!(at("louvain") + 1, at("kmeans"), "{names:?}");
    let mut by_hand = small();
    run_pipeline(
        &mut by_hand,
        &PipelineConfig {
            diffmap: None,
            louvain: None,
            kmeans: None,
            ..config.clone()
        },
        &mut Silent,
    )
    .unwrap();
    steps::diffmap(&mut by_hand, 15, 0, None).unwrap();
    steps::louvain_on(
        &mut by_hand,
        config.louvain.as_ref().unwrap(),
        "louvain",
        None,
    )
    .unwrap();
    steps::kmeans(&mut by_hand, None, None, &kmeans, "kmeans", None).unwrap();
    assert_eq!(run.obsm.get("X_diffmap"), by_hand.obsm.get("X_diffmap"));
    assert_eq!(
        run.uns.get("diffmap_evals"),
        by_hand.uns.get("diffmap_evals")
    );
    for key in ["louvain", "kmeans"] {
        assert_eq!(run.obs.column(key), by_hand.obs.column(key), "{key}");
        assert!(run.obs.column(key).is_some(), "{key}");
        assert_eq!(run.uns.get(key), by_hand.uns.get(key), "{key}");
    }
    assert_eq!(
        run.obsm.get("X_diffmap").unwrap().shape,
        vec![run.n_obs(), 15]
    );
}

/// `--embedding-density` runs on the UMAP after the clustering steps, so it may group by
/// leiden's column, as the step by hand does on the run without it; off by default. Each
/// group's densities span [0, 1]; the parameters are scanpy's record.
#[test]
fn embedding_density_row_groups_by_leiden_as_the_step_by_hand() {
    assert!(!PipelineConfig::default().runs_embedding_density());
    let config = PipelineConfig {
        embedding_density: Some(sc_pipeline::run::EmbeddingDensityOptions {
            groupby: Some("leiden".into()),
        }),
        markers: None,
        ..PipelineConfig::default()
    };
    let mut run = small();
    let records = run_pipeline(&mut run, &config, &mut Silent).unwrap();
    let names: Vec<&str> = records.iter().map(|r| r.step.as_str()).collect();
    let at = |s: &str| names.iter().position(|n| *n == s).unwrap();
    assert!(at("leiden") < at("embedding_density"), "{names:?}");
    let mut by_hand = small();
    run_pipeline(
        &mut by_hand,
        &PipelineConfig {
            embedding_density: None,
            ..config.clone()
        },
        &mut Silent,
    )
    .unwrap();
    let (key, _) = steps::embedding_density_of_umap(&mut by_hand, Some("leiden"), None).unwrap();
    assert_eq!(key, "umap_density_leiden");
    assert!(run.obs.column(&key).is_some());
    assert_eq!(run.obs.column(&key), by_hand.obs.column(&key));
    let params = format!("{key}_params");
    assert_eq!(run.uns.get(&params), by_hand.uns.get(&params));
    let Some(Value::Dict(p)) = run.uns.get(&params) else {
        panic!("uns['{params}']: {:?}", run.uns.get(&params));
    };
    assert_eq!(p.get("covariate"), Some(&Value::str("leiden")));
    let density = f64_column(&run, "obs", &key);
    let (labels, groups) = run
        .obs
        .column("leiden")
        .unwrap()
        .group_labels("leiden")
        .unwrap();
    for g in 0..groups.len() as u32 {
        let v: Vec<f64> = density
            .iter()
            .zip(&labels)
            .filter(|(_, &l)| l == g)
            .map(|(&d, _)| d)
            .collect();
        if v.len() >= 3 {
            let (lo, hi) = v
                .iter()
                .fold((1.0f64, 0.0f64), |(l, h), &x| (l.min(x), h.max(x)));
            assert!(lo == 0.0 && hi == 1.0, "group {g}: {lo} .. {hi}");
        } else {
            assert!(
                v.iter().all(|&d| d == 0.0),
                "group {g} of {} cells",
                v.len()
            );
        }
    }
}

/// `--dpt-root CELL` runs right after diffmap from the cell of that name, as scanpy's
/// `uns['iroot'] = i; tl.dpt(adata)` by hand on the run without it: the pseudotime 0 at the
/// root, `uns['iroot']` its index.
#[test]
fn dpt_row_runs_from_the_named_cell_as_the_step_by_hand() {
    let root = small().obs.index[7].clone();
    let config = PipelineConfig {
        diffmap: Some(15),
        dpt_root: Some(root.clone()),
        markers: None,
        ..PipelineConfig::default()
    };
    assert!(config.runs_dpt() && !PipelineConfig::default().runs_dpt());
    let mut run = small();
    let records = run_pipeline(&mut run, &config, &mut Silent).unwrap();
    let names: Vec<&str> = records.iter().map(|r| r.step.as_str()).collect();
    let at = |s: &str| names.iter().position(|n| *n == s).unwrap();
    assert_eq!(at("diffmap") + 1, at("dpt"), "{names:?}");
    let mut by_hand = small();
    run_pipeline(
        &mut by_hand,
        &PipelineConfig {
            dpt_root: None,
            ..config.clone()
        },
        &mut Silent,
    )
    .unwrap();
    let (i, segments) = steps::dpt_from(&mut by_hand, &root, 0, None).unwrap();
    assert_eq!(segments, None);
    assert_eq!(
        run.obs.column("dpt_pseudotime"),
        by_hand.obs.column("dpt_pseudotime")
    );
    assert_eq!(run.uns.get("iroot"), Some(&Value::int(i as i64)));
    let t = f64_column(&run, "obs", "dpt_pseudotime");
    assert_eq!(t[i], 0.0);
    assert!(t.iter().all(|v| v.is_finite() || v.is_infinite()), "no NaN");
    assert!(run.obs.column("dpt_groups").is_none());
    // `--dpt-branchings 1`: scanpy's segments too, as the step by hand.
    let mut branched = small();
    let config = PipelineConfig {
        dpt_branchings: 1,
        ..config
    };
    let records = run_pipeline(&mut branched, &config, &mut Silent).unwrap();
    let note = &records.iter().find(|r| r.step == "dpt").unwrap().note;
    assert!(note.contains("1 branchings"), "{note}");
    let (_, segments) = steps::dpt_from(&mut by_hand, &root, 1, None).unwrap();
    assert!(
        note.contains(&format!("{} segments", segments.unwrap())),
        "{note}"
    );
    for key in ["dpt_groups", "dpt_order", "dpt_order_indices"] {
        assert!(branched.obs.column(key).is_some(), "{key}");
        assert_eq!(branched.obs.column(key), by_hand.obs.column(key), "{key}");
    }
    for key in ["dpt_changepoints", "dpt_grouptips"] {
        assert_eq!(branched.uns.get(key), by_hand.uns.get(key), "{key}");
    }
}

/// `--markers-method logreg`: the markers row fits the logistic regression on `.raw`, as the
/// Python function does on a matrix holding `.raw`'s values; names and scores only, with
/// scanpy's `params`; a fit that max_iter ends is said so.
#[test]
fn logreg_markers_run_on_raw_as_the_function_by_hand() {
    let mut a = small();
    let mut config = PipelineConfig {
        hvg: n_top_genes_override(),
        umap: None,
        ..PipelineConfig::default()
    };
    let markers = config.markers.as_mut().expect("markers by default");
    markers.logreg = Some(Default::default());
    markers.params.n_genes = Some(20);
    let records = run_pipeline(&mut a, &config, &mut Silent).unwrap();
    let note = &records
        .iter()
        .find(|r| r.step == "rank_genes_groups")
        .unwrap()
        .note;
    assert!(note.contains("logreg") && note.contains(".raw"), "{note}");
    let got = a.uns.get("rank_genes_groups").unwrap();
    let params = got.get("params").unwrap();
    assert_eq!(params.get("method"), Some(&Value::str("logreg")));
    assert_eq!(params.get("use_raw"), Some(&Value::bool(true)));
    assert!(got.get("pvals").is_none() && got.get("scores").is_some());
    let raw = a.raw.as_ref().unwrap();
    let mut by_hand = AnnData::new(raw.x.try_clone().unwrap());
    by_hand.var = raw.var.clone();
    by_hand.obs = a.obs.clone();
    steps::rank_genes_groups_logreg(&mut by_hand, "leiden", &Default::default(), Some(20), None)
        .unwrap();
    let want = by_hand.uns.get("rank_genes_groups").unwrap();
    for field in ["names", "scores"] {
        assert_eq!(got.get(field), want.get(field), "{field}");
    }
    // max_iter ending the fit first is said in the run's log, as scikit-learn warns.
    let markers = config.markers.as_mut().unwrap();
    markers.logreg = Some(sc_kernels::rank_genes::logreg::LogregParams {
        max_iter: 2,
        ..Default::default()
    });
    let mut b = small();
    let records = run_pipeline(&mut b, &config, &mut Silent).unwrap();
    let note = &records
        .iter()
        .find(|r| r.step == "rank_genes_groups")
        .unwrap()
        .note;
    assert!(note.contains("stopped at max_iter=2 "), "{note}");
}
