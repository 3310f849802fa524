//! The runs that hold no X: the demo generated on the GPU for every pass (`scpipe run
//! --demo-on-gpu`; the device generator against its CPU twin) and an h5ad or zarr input read
//! from its file for every pass (`--host-memory-limit`), each against the in-memory GPU run on the same
//! cells made in host memory.
//!
//! Tolerances: gene sets exact; counts exact (they differ only where the device's log/exp/cos
//! round unlike the host's, which these inputs never hit: the test says so if it happens);
//! per-cell QC columns exact, per-gene sums relative 1e-9 (other block order); the same highly
//! variable genes; PCA scores correlated above 0.9999 per component.

use integration_tests::gpu_or_skip;
use sc_kernels::synth::gpu::DeviceCountModel;
use sc_pipeline::anndata::{ArrayData, Column, Matrix};
use sc_pipeline::run::generated::{run_from_file, run_generated};
use sc_pipeline::run::{run_pipeline_on, GpuRun, PipelineConfig, Silent};
use sc_pipeline::steps::HvgOptions;
use sc_pipeline::synthetic::{count_model, generate_cell_by_cell, SyntheticParams};
use std::sync::Arc;

#[path = "../../sc-kernels/tests/common/mod.rs"]
mod common;
use common::column_correlations;

#[test]
fn device_generator_matches_its_cpu_twin() {
    let Some(d) = gpu_or_skip("generated cells") else {
        return;
    };
    let ctx = integration_tests::pool_context(&d);
    for (cells, genes, range) in [(3000, 2000, 0..3000u64), (5000, 45_854, 1234..2234)] {
        let (model, _) = count_model(&SyntheticParams::new(cells, genes, 9)).unwrap();
        let (want, _) = model.generate(range.clone()).unwrap();
        let dm = DeviceCountModel::upload(&ctx, &model).unwrap();
        let got = dm
            .generate(&ctx, range.clone())
            .unwrap()
            .download(&ctx)
            .unwrap();
        assert_eq!(got.indptr, want.indptr, "{genes} genes: row offsets");
        assert_eq!(got.indices, want.indices, "{genes} genes: gene sets");
        let differ = got
            .data
            .iter()
            .zip(&want.data)
            .filter(|(a, b)| a != b)
            .count();
        assert_eq!(
            differ,
            0,
            "{genes} genes: {differ} of {} counts differ",
            want.nnz()
        );
        // Cells named one by one: the same rows, without the cells between them.
        let picked: Vec<u64> = range.clone().step_by(97).collect();
        let alone = dm
            .generate_cells(&ctx, &picked)
            .unwrap()
            .download(&ctx)
            .unwrap();
        let rows: Vec<usize> = picked.iter().map(|&c| (c - range.start) as usize).collect();
        assert_eq!(alone.n_rows, rows.len());
        for (i, &r) in rows.iter().enumerate() {
            let (a, b) = (alone.indptr[i] as usize, alone.indptr[i + 1] as usize);
            let (c, d) = (got.indptr[r] as usize, got.indptr[r + 1] as usize);
            assert_eq!(
                alone.indices[a..b],
                got.indices[c..d],
                "{genes} genes: cell {r}"
            );
            assert_eq!(alone.data[a..b], got.data[c..d], "{genes} genes: cell {r}");
        }
    }
}

fn col_f64(c: Option<&Column>, what: &str) -> Vec<f64> {
    match c {
        Some(Column::Values(ArrayData::F64(v))) => v.clone(),
        Some(Column::Values(ArrayData::F32(v))) => v.iter().map(|&x| x as f64).collect(),
        Some(Column::Values(ArrayData::I32(v))) => v.iter().map(|&x| x as f64).collect(),
        Some(Column::Values(ArrayData::I64(v))) => v.iter().map(|&x| x as f64).collect(),
        Some(Column::Values(ArrayData::Bool(v))) => v.iter().map(|&x| x as u8 as f64).collect(),
        other => panic!("{what}: {other:?}"),
    }
}

fn rel_close(a: &[f64], b: &[f64], tol: f64, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    for (i, (&x, &y)) in a.iter().zip(b).enumerate() {
        let d = (x - y).abs() / y.abs().max(1e-300);
        assert!(d <= tol || x == y, "{what}[{i}]: {x} vs {y}");
    }
}

/// Three gene filters: none removed (QC's pass took what filter_genes, HVG and scale read),
/// scanpy's default, and one removing a twentieth of the genes (HVG and scale make passes of
/// their own: the totals normalize_total divides by differ from those QC's pass saw).
#[test]
fn generated_run_matches_the_in_memory_run_on_the_same_cells() {
    let Some(d) = gpu_or_skip("generated run") else {
        return;
    };
    let p = SyntheticParams::new(20_000, 3000, 1);
    let config = PipelineConfig {
        hvg: Some(HvgOptions {
            n_top_genes: Some(500),
            ..HvgOptions::default()
        }),
        n_comps: Some(20),
        ..PipelineConfig::default()
    };
    let cells = generate_cell_by_cell(&p).unwrap();
    let mut per_gene = vec![0u64; cells.n_vars()];
    for &j in &cells.x.to_csr().unwrap().indices {
        per_gene[j as usize] += 1;
    }
    per_gene.sort_unstable();
    let twentieth = per_gene[per_gene.len() / 20] + 1;
    let resource: rmm_core::SharedResource = Arc::new(rmm_core::CudaResource::new(&d));
    let stream = d.new_stream().unwrap();
    for (min_cells, taken) in [(0, Some(true)), (10, None), (twentieth, Some(false))] {
        let config = PipelineConfig {
            min_cells: Some(min_cells),
            ..config.clone()
        };
        // A small budget: blocks of about a thousand cells, twenty blocks.
        let small = GpuRun::new(&d, &stream, resource.clone())
            .unwrap()
            .with_memory(48 << 20, Default::default());
        let (got, records) = run_generated(&p, &config, &small, None, &mut Silent).unwrap();
        let mut want = generate_cell_by_cell(&p).unwrap();
        let full = GpuRun::new(&d, &stream, resource.clone()).unwrap();
        run_pipeline_on(&mut want, &config, Some(&full), &mut Silent).unwrap();
        same_as_the_in_memory_run(&got, &records, &want, &config, &full);
        let note = |step: &str| &records.iter().find(|r| r.step == step).unwrap().note;
        assert!(note("rank_genes_groups").contains("generated again"));
        let none_removed = note("filter_genes").contains(" 0 genes removed");
        let taken = taken.unwrap_or(none_removed);
        assert_eq!(
            none_removed,
            taken,
            "min_cells={min_cells}: {}",
            note("filter_genes")
        );
        for step in ["filter_genes", "highly_variable_genes", "scale"] {
            let read = note(step).contains("calculate_qc_metrics' pass");
            assert_eq!(
                read,
                taken || step == "filter_genes",
                "{step}: {}",
                note(step)
            );
        }
    }
}

/// An h5ad file and a zarr store read block by block for every pass: the same as the in-memory
/// run on the same cells, and each pass's note says what it read.
#[test]
fn run_from_the_file_matches_the_in_memory_run() {
    let Some(d) = gpu_or_skip("run from the file") else {
        return;
    };
    let p = SyntheticParams::new(20_000, 3000, 2);
    let config = PipelineConfig {
        hvg: Some(HvgOptions {
            n_top_genes: Some(500),
            ..HvgOptions::default()
        }),
        n_comps: Some(20),
        ..PipelineConfig::default()
    };
    let cells = generate_cell_by_cell(&p).unwrap();
    let resource: rmm_core::SharedResource = Arc::new(rmm_core::CudaResource::new(&d));
    let stream = d.new_stream().unwrap();
    let files = ["h5ad", "zarr"].map(|format| {
        let name = format!("scpipe-from-file-{}.{format}", std::process::id());
        let path = std::env::temp_dir().join(name);
        match format {
            "h5ad" => sc_pipeline::io::write_h5ad(&cells, &path).unwrap(),
            _ => sc_pipeline::io::write_zarr(&cells, &path).unwrap(),
        }
        (format, path)
    });
    let mut want = cells;
    let full = GpuRun::new(&d, &stream, resource.clone()).unwrap();
    run_pipeline_on(&mut want, &config, Some(&full), &mut Silent).unwrap();
    for (format, path) in files {
        let small = GpuRun::new(&d, &stream, resource.clone())
            .unwrap()
            .with_memory(48 << 20, Default::default());
        let (got, records) = run_from_file(&path, &config, &small, None, &mut Silent).unwrap();
        match format {
            "h5ad" => std::fs::remove_file(&path).unwrap(),
            _ => std::fs::remove_dir_all(&path).unwrap(),
        }
        assert_eq!(records[0].step, "open the input");
        same_as_the_in_memory_run(&got, &records, &want, &config, &full);
        // filter_cells reads the row statistics QC's pass took (the file's counts are not
        // known to be never negative, so QC's counts of genes cannot serve).
        let filter_note = &records
            .iter()
            .find(|r| r.step == "filter_cells")
            .unwrap()
            .note;
        assert!(
            filter_note.contains("counted in calculate_qc_metrics' pass"),
            "{format}: {filter_note}"
        );
        for step in ["calculate_qc_metrics", "pca", "rank_genes_groups"] {
            let note = &records
                .iter()
                .find(|r| r.step.starts_with(step))
                .unwrap()
                .note;
            assert!(
                note.contains("GB of X from the file at"),
                "{format}, {step}: {note}"
            );
        }
    }
}

/// A run that held no X (`got`, its `records`) against the in-memory run `want` of the same
/// cells: blocks made, cells, genes, QC and HVG columns, PCA, and the markers of `.raw`.
fn same_as_the_in_memory_run(
    got: &sc_pipeline::AnnData,
    records: &[sc_pipeline::report::StepRecord],
    want: &sc_pipeline::AnnData,
    config: &PipelineConfig,
    full: &GpuRun,
) {
    let prepared = &records[0];
    assert!(prepared.note.contains("blocks"), "{}", prepared.note);
    let n_blocks: usize = prepared
        .note
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(n_blocks >= 10, "{}", prepared.note);

    assert_eq!(got.obs.index, want.obs.index, "same cells kept");
    assert_eq!(got.var.index, want.var.index, "same highly variable genes");
    for col in [
        "n_genes_by_counts",
        "total_counts",
        "total_counts_mt",
        "n_genes",
    ] {
        let (a, b) = (
            col_f64(got.obs.column(col), col),
            col_f64(want.obs.column(col), col),
        );
        assert_eq!(a, b, "obs['{col}']");
    }
    for col in [
        "n_cells_by_counts",
        "n_cells",
        "means",
        "dispersions",
        "mean",
        "std",
    ] {
        let (a, b) = (
            col_f64(got.var.column(col), col),
            col_f64(want.var.column(col), col),
        );
        rel_close(&a, &b, 1e-9, col);
    }
    let as_matrix = |a: &sc_pipeline::AnnData| {
        let m = &a.obsm["X_pca"];
        let v = m.data.to_f64().unwrap().iter().map(|&x| x as f32).collect();
        sc_kernels::dense::DenseMatrix::new(m.shape[0], m.shape[1], v).unwrap()
    };
    let cors = column_correlations(&as_matrix(got), &as_matrix(want));
    assert!(cors.iter().all(|c| c.abs() > 0.9999), "{cors:?}");
    assert!(
        matches!(got.x, Matrix::Sparse(ref x) if x.nnz() == 0),
        "X is a placeholder"
    );
    // The marker genes: on every cell here (fewer than the subset's cap), made again as .raw
    // holds them, so the same as ranking the in-memory run's .raw by the same labels.
    let raw = want.raw.as_ref().expect("the in-memory run keeps .raw");
    let mut check = sc_pipeline::AnnData::new(raw.x.host_copy().unwrap());
    check.var = raw.var.clone();
    check.obs = got.obs.clone();
    let groupby = config.markers_groupby().unwrap();
    let params = &config.markers.as_ref().unwrap().params;
    sc_pipeline::steps::rank_genes_groups_on(&mut check, &groupby, params, Some(&full.ctx))
        .unwrap();
    let names = |a: &sc_pipeline::AnnData| a.uns["rank_genes_groups"].get("names").cloned();
    assert!(names(got).is_some(), "markers ranked");
    assert_eq!(names(got), names(&check), "the markers of .raw");
    let note = &records
        .iter()
        .find(|r| r.step == "rank_genes_groups")
        .expect("the markers' row")
        .note;
    assert!(note.contains("every cell"), "{note}");
}
