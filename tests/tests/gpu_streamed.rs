//! Streamed (out-of-core) GPU execution: every `*_streamed` kernel against its in-memory GPU
//! twin on a host matrix cut into many small blocks; the whole pipeline under a capped device
//! memory budget against the in-memory GPU run; and the kernels' index arithmetic on a device
//! matrix of more than 2^31 stored values.
//!
//! Tolerances: row-wise steps (normalize, log1p, the per-cell QC sums) are bit for bit; per-gene
//! sums are f64 sums in another order (relative 1e-12); the scaled matrix within 1e-5; PCA
//! scores by column correlation above 0.99999.

use integration_tests::gpu_or_skip;
use rmm_core::adaptors::LimitingAdaptor;
use rmm_core::{CudaResource, SharedResource, TrackingAdaptor};
use sc_kernels::filter::{CellFilter, GeneFilter};
use sc_kernels::gpu::{reduce, DeviceCsr, GpuContext};
use sc_kernels::hvg::{Batches, Flavor, HvgParams};
use sc_kernels::normalize::NormalizeParams;
use sc_kernels::pca::PcaParams;
use sc_kernels::qc::QcParams;
use sc_kernels::scale::ScaleParams;
use sc_kernels::CsrMatrix;
use sc_pipeline::anndata::Matrix;
use sc_pipeline::run::memory_plan::Execution;
use sc_pipeline::run::{run_pipeline_on, GpuRun, PipelineConfig, Silent};
use std::sync::Arc;

// Per-column correlation, shared with sc-kernels' tests.
#[path = "../../sc-kernels/tests/common/mod.rs"]
mod common;
use common::column_correlations;

/// Random counts with rows of very different lengths (so blocks hold different row counts).
fn counts(seed: u64, rows: usize, cols: usize) -> CsrMatrix<f32> {
    let row_density = |i: usize| {
        if i % 17 == 0 {
            0.02
        } else {
            0.05 + 0.4 * ((i * 7919) % 101) as f64 / 101.0
        }
    };
    integration_tests::random_counts(seed, rows, cols, |i, j| {
        row_density(i) * (0.2 + j as f64 / cols as f64)
    })
}

fn rel_close(a: &[f64], b: &[f64], tol: f64, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    for (i, (&x, &y)) in a.iter().zip(b).enumerate() {
        let d = (x - y).abs() / y.abs().max(1e-300);
        assert!(
            d <= tol || (x.is_nan() && y.is_nan()) || x == y,
            "{what}[{i}]: {x} vs {y}"
        );
    }
}

fn col_f64(c: &sc_kernels::columns::Column) -> Vec<f64> {
    use sc_kernels::columns::Column;
    match c {
        Column::F64(v) => v.clone(),
        Column::F32(v) => v.iter().map(|&x| x as f64).collect(),
        Column::I32(v) => v.iter().map(|&x| x as f64).collect(),
        Column::I64(v) => v.iter().map(|&x| x as f64).collect(),
        Column::Bool(v) => v.iter().map(|&x| x as u8 as f64).collect(),
    }
}

/// A block budget that cuts the test matrix into dozens of blocks.
const SMALL_BLOCK: usize = 48 << 10;

#[test]
fn streamed_kernels_match_their_in_memory_twins() {
    let Some(d) = gpu_or_skip("streamed kernels") else {
        return;
    };
    let ctx = integration_tests::pool_context(&d);
    let x = counts(11, 3000, 700);
    let n_blocks = sc_kernels::gpu::streamed::csr_blocks(&x, SMALL_BLOCK).len();
    assert!(n_blocks > 20, "{n_blocks} blocks");
    let dx = DeviceCsr::upload(&ctx, &x).unwrap();

    // QC: per-cell columns bit for bit, per-gene sums within f64 reordering.
    let params = QcParams {
        qc_vars: vec![("mt".into(), (0..700).map(|j| j % 50 == 0).collect())],
        percent_top: vec![50, 100, 200],
        log1p: true,
    };
    let a = sc_kernels::qc::calculate_qc_metrics_streamed(&ctx, &x, &params, SMALL_BLOCK).unwrap();
    let b = sc_kernels::qc::calculate_qc_metrics_gpu(&ctx, &dx, &params).unwrap();
    assert_eq!(a.obs, b.obs, "QC obs columns");
    for ((na, ca), (nb, cb)) in a.var.iter().zip(&b.var) {
        assert_eq!(na, nb);
        rel_close(&col_f64(ca), &col_f64(cb), 1e-12, na);
    }

    // Filters.
    for f in [CellFilter::MinGenes(40), CellFilter::MaxCounts(3000.0)] {
        let a = sc_kernels::filter::filter_cells_streamed(&ctx, &x, f, SMALL_BLOCK).unwrap();
        let b = sc_kernels::filter::filter_cells_gpu(&ctx, &dx, f).unwrap();
        assert_eq!(a.keep, b.keep, "{f:?}");
        assert_eq!(a.values, b.values, "{f:?}");
    }
    for f in [GeneFilter::MinCells(300), GeneFilter::MinCounts(900.0)] {
        let a = sc_kernels::filter::filter_genes_streamed(&ctx, &x, f, SMALL_BLOCK).unwrap();
        let b = sc_kernels::filter::filter_genes_gpu(&ctx, &dx, f).unwrap();
        assert_eq!(a.keep, b.keep, "{f:?}");
    }

    // normalize_total, every mode, then log1p: the values bit for bit.
    for params in [
        NormalizeParams {
            target_sum: Some(1e4),
            ..Default::default()
        },
        NormalizeParams::default(),
        NormalizeParams {
            target_sum: None,
            exclude_highly_expressed: true,
            max_fraction: 0.05,
            per_cell: true,
        },
    ] {
        let mut hs = x.clone();
        let ra =
            sc_kernels::normalize::normalize_total_streamed(&ctx, &mut hs, &params, SMALL_BLOCK)
                .unwrap();
        let mut dm = DeviceCsr::upload(&ctx, &x).unwrap();
        let rb = sc_kernels::normalize::normalize_total_gpu(&ctx, &mut dm, &params).unwrap();
        assert_eq!(ra, rb, "{params:?}");
        assert_eq!(hs.data, dm.download(&ctx).unwrap().data, "{params:?}");
        sc_kernels::log1p::log1p_streamed(&ctx, &mut hs, None, SMALL_BLOCK).unwrap();
        sc_kernels::log1p::log1p_gpu(&ctx, &mut dm, None).unwrap();
        assert_eq!(
            hs.data,
            dm.download(&ctx).unwrap().data,
            "log1p after {params:?}"
        );
    }

    // HVG on log-normalized data (seurat, cell_ranger; with batches) and on counts (seurat_v3).
    let mut logn = x.clone();
    sc_kernels::normalize::normalize_total(
        &mut logn,
        &NormalizeParams {
            target_sum: Some(1e4),
            ..Default::default()
        },
    )
    .unwrap();
    sc_kernels::log1p::log1p(&mut logn, None).unwrap();
    let d_logn = DeviceCsr::upload(&ctx, &logn).unwrap();
    let batches = Batches {
        codes: (0..3000).map(|i| (i % 3) as u32).collect(),
        categories: vec!["a".into(), "b".into(), "c".into()],
    };
    for (flavor, batched) in [
        (Flavor::Seurat, false),
        (Flavor::CellRanger, false),
        (Flavor::CellRanger, true),
        (Flavor::SeuratV3, false),
        (Flavor::SeuratV3, true),
    ] {
        let (hx, dxx) = if matches!(flavor, Flavor::SeuratV3) {
            (&x, &dx)
        } else {
            (&logn, &d_logn)
        };
        let params = HvgParams {
            flavor,
            n_top_genes: Some(200),
            ..Default::default()
        };
        let b = batched.then_some(&batches);
        let ra = sc_kernels::hvg::highly_variable_genes_streamed(
            &ctx,
            hx,
            &params,
            b,
            None,
            SMALL_BLOCK,
        )
        .unwrap();
        let rb = sc_kernels::hvg::highly_variable_genes_gpu(&ctx, dxx, &params, b, None).unwrap();
        assert_eq!(
            ra.highly_variable, rb.highly_variable,
            "{flavor:?} batched={batched}"
        );
    }

    // scale (dense output copied back block by block), then PCA of the dense result.
    let sp = ScaleParams {
        zero_center: true,
        max_value: Some(10.0),
    };
    let (sa, sta) =
        sc_kernels::scale::scale_csr_to_dense_streamed(&ctx, &logn, &sp, SMALL_BLOCK).unwrap();
    let (sb, stb) = sc_kernels::scale::scale_csr_to_dense_gpu(&ctx, &d_logn, &sp).unwrap();
    rel_close(&sta.mean, &stb.mean, 1e-12, "scale mean");
    rel_close(&sta.std, &stb.std, 1e-12, "scale std");
    let sb = sb.download(&ctx).unwrap();
    let diff = sa
        .data
        .iter()
        .zip(&sb.data)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(diff <= 1e-5, "scaled values differ by {diff}");

    // 3000 cells x 700 genes takes the covariance route on the device (more cells than genes);
    // blocks of 4096 rows: the small budget still gives one aligned block per 4096 rows.
    let big = sc_kernels::dense::DenseMatrix::new(
        9000,
        700,
        (0..9000 * 700)
            .map(|t| sa.data[t % sa.data.len()] + (t % 13) as f32 * 0.01)
            .collect(),
    )
    .unwrap();
    let pp = PcaParams {
        n_comps: 20,
        zero_center: true,
    };
    let pa = sc_kernels::pca::pca_dense_streamed(&ctx, &big, &pp, SMALL_BLOCK).unwrap();
    let db = sc_kernels::gpu::DeviceDense::upload(&ctx, &big).unwrap();
    let pb = sc_kernels::pca::pca_dense_gpu(&ctx, &db, &pp).unwrap();
    rel_close(&pa.variance, &pb.variance, 1e-9, "pca variance");
    for (c, r) in column_correlations(&pa.x_pca, &pb.x_pca).iter().enumerate() {
        assert!(*r > 0.99999, "X_pca column {c}: {r}");
    }
}

/// The pipeline with a device budget far below what the in-memory run needs: `auto` streams,
/// the device never holds more than the budget, nothing is left allocated, and the results are
/// the in-memory GPU run's.
#[test]
fn streamed_pipeline_under_a_capped_budget_matches_the_in_memory_run() {
    let Some(d) = gpu_or_skip("streamed pipeline") else {
        return;
    };
    let params = sc_pipeline::synthetic::SyntheticParams::new(40_000, 3000, 5);
    let mut memory = sc_pipeline::synthetic::generate(&params).unwrap();
    let mut streamed = sc_pipeline::synthetic::generate(&params).unwrap();
    // 500 HVGs: PCA's Gram matrix and eigensolver workspace (13 MB) fit the budget with room
    // for the blocks (2,000 would need 208 MB on their own).
    let config = PipelineConfig {
        hvg: Some(sc_pipeline::steps::HvgOptions {
            n_top_genes: Some(500),
            ..Default::default()
        }),
        harmony: Some(sc_pipeline::steps::HarmonyOptions {
            key: "batch".into(),
            params: Default::default(),
        }),
        neighbors_use_rep: Some(sc_pipeline::steps::HARMONY_ADJUSTED_BASIS.into()),
        ..PipelineConfig::default()
    };

    let full = GpuRun::new(
        &d,
        &d.new_stream().unwrap(),
        Arc::new(CudaResource::new(&d)) as SharedResource,
    )
    .unwrap()
    .with_memory(64 << 30, Execution::InMemory);
    let rec_memory = run_pipeline_on(&mut memory, &config, Some(&full), &mut Silent).unwrap();
    assert_eq!(rec_memory[0].step, "move X to the GPU");

    const BUDGET: u64 = 128 << 20;
    let tracking = Arc::new(TrackingAdaptor::new(
        Arc::new(CudaResource::new(&d)) as SharedResource,
        false,
    ));
    let limited: SharedResource = Arc::new(LimitingAdaptor::new(
        tracking.clone() as SharedResource,
        BUDGET as usize,
    ));
    let run = GpuRun::new(&d, &d.new_stream().unwrap(), limited)
        .unwrap()
        .with_memory(BUDGET, Execution::Auto);
    let plan = run.plan(&streamed, &config);
    assert!(plan.in_memory_peak > BUDGET, "{plan:?}");
    let records = run_pipeline_on(&mut streamed, &config, Some(&run), &mut Silent).unwrap();
    assert_eq!(records[0].step, "stream X from host memory");
    assert!(records[0].note.contains("streamed"), "{}", records[0].note);
    for r in &records[1..records.len() - 1] {
        assert!(
            r.device.as_deref() == Some("gpu-streamed"),
            "{}: {:?}",
            r.step,
            r.device
        );
    }
    let peak = run.stats.statistics().bytes.peak as u64;
    assert!(
        peak <= BUDGET,
        "device peak {peak} over the {BUDGET} budget"
    );
    assert!(
        tracking.outstanding_allocations().is_empty(),
        "{}",
        tracking.leak_report()
    );

    assert_eq!(streamed.obs.index, memory.obs.index, "same cells kept");
    assert_eq!(streamed.var.index, memory.var.index, "same HVGs");
    for col in [
        "n_genes_by_counts",
        "total_counts",
        "pct_counts_mt",
        "pct_counts_in_top_50_genes",
        "n_genes",
    ] {
        assert_eq!(
            streamed.obs.column(col),
            memory.obs.column(col),
            "obs['{col}']"
        );
    }
    let raw = |a: &sc_pipeline::AnnData| match &a.raw.as_ref().unwrap().x {
        Matrix::Sparse(m) => m.clone(),
        other => panic!("raw.X is {:?}", other.shape()),
    };
    assert_eq!(raw(&streamed), raw(&memory), ".raw.X bit for bit");
    let (Matrix::Dense(xs), Matrix::Dense(xm)) = (&streamed.x, &memory.x) else {
        panic!("dense scaled X")
    };
    let diff = xs
        .data
        .iter()
        .zip(&xm.data)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(diff <= 1e-5, "scaled X differs by {diff}");
    for key in ["X_pca", "X_pca_harmony"] {
        let as_matrix = |a: &sc_pipeline::AnnData| {
            let m = &a.obsm[key];
            let v = m.data.to_f64().unwrap().iter().map(|&x| x as f32).collect();
            sc_kernels::dense::DenseMatrix::new(m.shape[0], m.shape[1], v).unwrap()
        };
        let r = column_correlations(&as_matrix(&streamed), &as_matrix(&memory));
        for (c, r) in r.iter().enumerate().take(20) {
            assert!(*r > 0.9999, "{key} column {c}: {r}");
        }
    }
    // The neighbour graphs agree almost everywhere (ties at f32 rounding may swap a few).
    let (ga, gb) = (&streamed.obsp["distances"], &memory.obsp["distances"]);
    let same = (0..ga.n_rows)
        .filter(|&i| ga.row(i).0 == gb.row(i).0)
        .count();
    assert!(
        same as f64 >= 0.99 * ga.n_rows as f64,
        "{same} of {} neighbour lists identical",
        ga.n_rows
    );
}

/// Kernels on a device matrix of more than 2^31 stored values (17 GB of device memory, built on
/// the device from a generator, nothing that size on the host): row and column statistics, QC,
/// normalize_total, log1p and row selection index past 2^31 correctly.
#[test]
fn kernels_index_past_two_to_the_31_stored_values() {
    let Some(d) = gpu_or_skip("more than 2^31 values") else {
        return;
    };
    const ROWS: usize = 1 << 20;
    const PER_ROW: usize = 2049;
    const COLS: usize = 2 * PER_ROW;
    let nnz = ROWS * PER_ROW;
    assert!(nnz > 1 << 31);
    let free = d.memory_info().unwrap().free as u64;
    let need = (nnz as u64) * 8 * 3 / 2 + (2 << 30);
    if free < need {
        panic!("the 2^31 test needs {need} bytes of free device memory, {free} are free");
    }
    let r: SharedResource = Arc::new(CudaResource::new(&d));
    let ctx = GpuContext::new(&d, &d.new_stream().unwrap(), r).unwrap();
    // Row i holds columns 0, 2, 4, ... with value 1 + i % 7.
    let value = |i: usize| (1 + i % 7) as f32;
    let indptr: Vec<u64> = (0..=ROWS).map(|i| (i * PER_ROW) as u64).collect();
    let indices = ctx
        .upload_with::<u32>(nnz, |first, chunk| {
            for (t, c) in chunk.iter_mut().enumerate() {
                *c = (2 * ((first + t) % PER_ROW)) as u32;
            }
            Ok(())
        })
        .unwrap();
    let data = ctx
        .upload_with::<f32>(nnz, |first, chunk| {
            for (t, c) in chunk.iter_mut().enumerate() {
                *c = value((first + t) / PER_ROW);
            }
            Ok(())
        })
        .unwrap();
    let mut x = DeviceCsr {
        n_rows: ROWS,
        n_cols: COLS,
        indptr: ctx.upload(&indptr).unwrap(),
        indices,
        data,
    };

    let (sums, positive) = reduce::row_stats(&ctx, &x).unwrap();
    for i in 0..ROWS {
        assert_eq!(sums[i], PER_ROW as f64 * value(i) as f64, "row {i} sum");
        assert_eq!(positive[i], PER_ROW as i64, "row {i} count");
    }
    let (col_sums, col_pos) = reduce::col_stats(&ctx, &x).unwrap();
    let per_col: f64 = (0..ROWS).map(|i| value(i) as f64).sum();
    for j in 0..COLS {
        let want = if j % 2 == 0 { per_col } else { 0.0 };
        assert_eq!(col_sums[j], want, "column {j} sum");
        assert_eq!(col_pos[j], if j % 2 == 0 { ROWS as i64 } else { 0 });
    }
    let qc = sc_kernels::qc::qc_sums_gpu(
        &ctx,
        &x,
        &QcParams {
            qc_vars: vec![("even".into(), (0..COLS).map(|j| j % 4 == 0).collect())],
            percent_top: vec![50],
            log1p: false,
        },
        &[50],
    )
    .unwrap();
    for i in [0, ROWS / 2, ROWS - 2, ROWS - 1] {
        assert_eq!(qc.n_genes[i], PER_ROW as i32);
        assert_eq!(qc.total[i], sums[i]);
        assert_eq!(qc.top[0][i], 50.0 * value(i) as f64);
        assert_eq!(qc.qc[0][i], 1025.0 * value(i) as f64);
    }

    // Row selection past 2^31: every other row.
    let keep: Vec<bool> = (0..ROWS).map(|i| i % 2 == 1).collect();
    let half = sc_kernels::gpu::compact::select_rows(&ctx, &x, &keep).unwrap();
    assert_eq!(half.nnz(), nnz / 2);
    let (hs, _) = reduce::row_stats(&ctx, &half).unwrap();
    for (k, &s) in hs.iter().enumerate() {
        assert_eq!(s, PER_ROW as f64 * value(2 * k + 1) as f64, "kept row {k}");
    }
    drop(half);

    // normalize_total then log1p: every row, including the last ones past 2^31.
    let target = 1e4;
    sc_kernels::normalize::normalize_total_gpu(
        &ctx,
        &mut x,
        &NormalizeParams {
            target_sum: Some(target),
            ..Default::default()
        },
    )
    .unwrap();
    sc_kernels::log1p::log1p_gpu(&ctx, &mut x, None).unwrap();
    let (sums, _) = reduce::row_stats(&ctx, &x).unwrap();
    let want = PER_ROW as f64 * ((target / PER_ROW as f64) as f32).ln_1p() as f64;
    for (i, &s) in sums.iter().enumerate() {
        assert!((s - want).abs() <= 1e-4 * want, "row {i}: {s} vs {want}");
    }
}
