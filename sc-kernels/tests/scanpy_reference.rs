//! Checks the kernels against scanpy 1.11.5 on a subsample of a real dataset (PBMC, two batches).
//! `data/make_reference.py` wrote the files; `data/README.md` says how.

use sc_kernels::hvg::{self, Batches, Flavor, HvgParams};
use sc_kernels::{filter, log1p, normalize, qc, scale, Column, CsrMatrix};
use std::collections::HashMap;

struct Records(HashMap<String, Vec<String>>);

impl Records {
    fn load(name: &str) -> Records {
        let path = format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let mut m = HashMap::new();
        for line in text.lines() {
            let mut it = line.split_whitespace();
            let key = it.next().unwrap().to_string();
            let _dtype = it.next().unwrap();
            let n: usize = it.next().unwrap().parse().unwrap();
            let vals: Vec<String> = it.map(|s| s.to_string()).collect();
            assert_eq!(vals.len(), n, "{key}");
            m.insert(key, vals);
        }
        Records(m)
    }
    fn get(&self, k: &str) -> &Vec<String> {
        self.0.get(k).unwrap_or_else(|| panic!("no record {k}"))
    }
    fn f64(&self, k: &str) -> Vec<f64> {
        self.get(k)
            .iter()
            .map(|s| s.parse::<f64>().unwrap())
            .collect()
    }
    fn usize(&self, k: &str) -> Vec<usize> {
        self.get(k).iter().map(|s| s.parse().unwrap()).collect()
    }
    fn bool(&self, k: &str) -> Vec<bool> {
        self.get(k).iter().map(|s| s == "1").collect()
    }
}

struct Input {
    x: CsrMatrix<f32>,
    batches: Batches,
    genes: Vec<String>,
}

fn input() -> Input {
    let r = Records::load("pbmc_sub_counts.txt");
    let shape = r.usize("shape");
    let x = CsrMatrix::new(
        shape[0],
        shape[1],
        r.usize("indptr").iter().map(|&v| v as u64).collect(),
        r.usize("indices").iter().map(|&v| v as u32).collect(),
        r.f64("data").iter().map(|&v| v as f32).collect(),
    )
    .unwrap();
    let batches = Batches {
        codes: r.usize("batch").iter().map(|&c| c as u32).collect(),
        categories: r.get("batch_categories").clone(),
    };
    Input {
        x,
        batches,
        genes: r.get("gene_names").clone(),
    }
}

fn reference() -> Records {
    Records::load("pbmc_sub_reference.txt")
}

/// Relative (to max(|a|, |b|, floor)) difference check with NaNs equal.
fn assert_close(name: &str, got: &[f64], want: &[f64], rtol: f64, floor: f64) {
    assert_eq!(got.len(), want.len(), "{name}: length");
    for (k, (&a, &b)) in got.iter().zip(want).enumerate() {
        if a.is_nan() && b.is_nan() {
            continue;
        }
        let tol = rtol * a.abs().max(b.abs()).max(floor);
        assert!(
            (a - b).abs() <= tol,
            "{name}[{k}]: got {a}, scanpy {b} (tolerance {tol})"
        );
    }
}

/// Equal masks, reporting the differing positions.
fn assert_same_set(name: &str, got: &[bool], want: &[bool]) {
    assert_eq!(got.len(), want.len(), "{name}: length");
    let diff: Vec<usize> = (0..got.len()).filter(|&k| got[k] != want[k]).collect();
    assert!(
        diff.is_empty(),
        "{name}: {} genes differ (ours {} selected, scanpy {}): {:?}",
        diff.len(),
        got.iter().filter(|&&b| b).count(),
        want.iter().filter(|&&b| b).count(),
        &diff[..diff.len().min(20)]
    );
}

/// Equal masks except for genes whose score ties with a gene on the other side of the cut-off
/// (numpy's argsort orders ties arbitrarily).
fn assert_same_set_up_to_ties(name: &str, got: &[bool], want: &[bool], score: &[f64]) {
    assert_eq!(got.len(), want.len());
    let diff: Vec<usize> = (0..got.len()).filter(|&k| got[k] != want[k]).collect();
    for &k in &diff {
        let tied = (0..got.len()).any(|j| {
            j != k && want[j] != want[k] && (score[j] - score[k]).abs() <= 1e-12 * score[k].abs()
        });
        assert!(
            tied,
            "{name}: gene {k} differs (ours {}, scanpy {}) without a tie at the cut-off",
            got[k], want[k]
        );
    }
    assert!(
        diff.len() <= got.len() / 20,
        "{name}: {} genes differ",
        diff.len()
    );
}

fn col(c: Option<&Column>) -> Vec<f64> {
    c.expect("column").to_f64()
}

/// The log-normalized matrix of the reference pipeline and its kept genes.
fn pipeline_lognorm(inp: &Input, r: &Records) -> (CsrMatrix<f32>, Vec<usize>, Vec<bool>) {
    let keep_cells = r.bool("pipeline_cells");
    let keep_genes = r.bool("pipeline_genes");
    let mut x = inp
        .x
        .select_rows(&keep_cells)
        .unwrap()
        .select_cols(&keep_genes)
        .unwrap();
    normalize::normalize_total(
        &mut x,
        &normalize::NormalizeParams {
            target_sum: Some(1e4),
            ..Default::default()
        },
    )
    .unwrap();
    log1p::log1p(&mut x, None).unwrap();
    let cells: Vec<usize> = (0..keep_cells.len()).filter(|&i| keep_cells[i]).collect();
    (x, cells, keep_genes)
}

#[test]
fn qc_metrics_match_scanpy() {
    let inp = input();
    let r = reference();
    let mt: Vec<bool> = inp.genes.iter().map(|g| g.starts_with("MT-")).collect();
    let q = qc::calculate_qc_metrics(
        &inp.x,
        &qc::QcParams {
            qc_vars: vec![("mt".into(), mt)],
            ..Default::default()
        },
    )
    .unwrap();
    for (name, c) in &q.obs {
        let want = r.f64(&format!("qc_obs:{name}"));
        match c {
            // float32 columns: counts and totals bit-identical; log1p and shares to one float32 ulp
            // (numpy's float32 log1p is not libm's).
            Column::F32(v) => {
                let want32: Vec<f64> = want.iter().map(|&w| w as f32 as f64).collect();
                if name.starts_with("total_counts") {
                    assert_eq!(c.to_f64(), want32, "{name} exactly");
                }
                assert_close(
                    name,
                    &v.iter().map(|&a| a as f64).collect::<Vec<_>>(),
                    &want32,
                    1.2e-7,
                    0.0,
                );
            }
            Column::I32(_) => assert_eq!(c.to_f64(), want, "{name} exactly"),
            // float64 columns, written with 13 significant digits.
            _ => assert_close(name, &c.to_f64(), &want, 1e-12, 0.0),
        }
    }
    for (name, c) in &q.var {
        if name.starts_with("log1p") {
            continue;
        }
        let want = r.f64(&format!("qc_var:{name}"));
        assert_close(name, &c.to_f64(), &want, 1e-12, 0.0);
    }
    assert_eq!(q.obs.len(), 11);
}

#[test]
fn filters_match_scanpy() {
    let inp = input();
    let r = reference();
    let c = filter::filter_cells(&inp.x, filter::CellFilter::MinGenes(150)).unwrap();
    assert_eq!(c.keep, r.bool("filter_cells_min_genes_150"));
    let g = filter::filter_genes(&inp.x, filter::GeneFilter::MinCells(5)).unwrap();
    assert_eq!(g.keep, r.bool("filter_genes_min_cells_5"));
    assert_eq!(g.values.to_f64(), r.f64("filter_genes_n_cells"));
}

#[test]
fn normalize_and_log1p_match_scanpy() {
    let inp = input();
    let r = reference();
    let keep_cells = r.bool("pipeline_cells");
    let keep_genes = r.bool("pipeline_genes");
    let mut x = inp
        .x
        .select_rows(&keep_cells)
        .unwrap()
        .select_cols(&keep_genes)
        .unwrap();
    normalize::normalize_total(
        &mut x,
        &normalize::NormalizeParams {
            target_sum: Some(1e4),
            ..Default::default()
        },
    )
    .unwrap();
    let first: Vec<f32> = x.to_dense().row(0).to_vec();
    // Same float32 formula as scanpy: bit-identical.
    let want: Vec<f32> = r
        .f64("normalized_first_row")
        .iter()
        .map(|&v| v as f32)
        .collect();
    assert_eq!(first, want);
    let sums: Vec<f64> = (0..x.n_rows)
        .map(|i| x.row(i).1.iter().map(|&v| v as f64).sum())
        .collect();
    assert_close(
        "normalized_row_sums",
        &sums,
        &r.f64("normalized_row_sums"),
        1e-6,
        0.0,
    );
    log1p::log1p(&mut x, None).unwrap();
    let sums: Vec<f64> = (0..x.n_rows)
        .map(|i| x.row(i).1.iter().map(|&v| v as f64).sum())
        .collect();
    assert_close("log1p_row_sums", &sums, &r.f64("log1p_row_sums"), 1e-5, 0.0);
}

fn check_dispersion_flavor(flavor: Flavor, name: &str) {
    let inp = input();
    let r = reference();
    let (x, cells, keep_genes) = pipeline_lognorm(&inp, &r);
    let genes: Vec<String> = inp
        .genes
        .iter()
        .zip(&keep_genes)
        .filter(|(_, &k)| k)
        .map(|(g, _)| g.clone())
        .collect();
    let b = Batches {
        codes: cells.iter().map(|&i| inp.batches.codes[i]).collect(),
        categories: inp.batches.categories.clone(),
    };
    for batched in [false, true] {
        let p = HvgParams {
            flavor,
            n_top_genes: Some(300),
            ..Default::default()
        };
        let res =
            hvg::highly_variable_genes(&x, &p, if batched { Some(&b) } else { None }, Some(&genes))
                .unwrap();
        let tag = format!("hvg_{name}_{}", if batched { "batch" } else { "nobatch" });
        assert_same_set(
            &tag,
            &res.highly_variable,
            &r.bool(&format!("{tag}:highly_variable")),
        );
        // log1p differs from numpy's float32 log1p by one ulp on some values, which moves
        // normalized dispersions by up to ~1e-6.
        assert_close(
            &format!("{tag} dispersions_norm"),
            &col(res.column("dispersions_norm")),
            &r.f64(&format!("{tag}:dispersions_norm")),
            1e-5,
            1.0,
        );
        if batched {
            assert_eq!(
                col(res.column("highly_variable_nbatches")),
                r.f64(&format!("{tag}:highly_variable_nbatches"))
            );
        } else {
            assert_close(
                &format!("{tag} means"),
                &col(res.column("means")),
                &r.f64(&format!("{tag}:means")),
                1e-6,
                1e-6,
            );
            assert_close(
                &format!("{tag} dispersions"),
                &col(res.column("dispersions")),
                &r.f64(&format!("{tag}:dispersions")),
                1e-6,
                1e-3,
            );
        }
    }
    let res = hvg::highly_variable_genes(
        &x,
        &HvgParams {
            flavor,
            ..Default::default()
        },
        None,
        None,
    )
    .unwrap();
    assert_same_set(
        &format!("{name} cutoffs"),
        &res.highly_variable,
        &r.bool(&format!("hvg_{name}_cutoffs:highly_variable")),
    );
}

#[test]
fn hvg_seurat_matches_scanpy() {
    check_dispersion_flavor(Flavor::Seurat, "seurat");
}

#[test]
fn hvg_cell_ranger_matches_scanpy() {
    check_dispersion_flavor(Flavor::CellRanger, "cell_ranger");
}

#[test]
fn loess_matches_skmisc() {
    let inp = input();
    let r = reference();
    let x = inp
        .x
        .select_rows(&r.bool("pipeline_cells"))
        .unwrap()
        .select_cols(&r.bool("pipeline_genes"))
        .unwrap();
    let (m, v) = sc_kernels::stats::col_mean_var(&x, None);
    let (xs, ys): (Vec<f64>, Vec<f64>) = m
        .iter()
        .zip(&v)
        .filter(|(_, &vv)| vv > 0.0)
        .map(|(&mm, &vv)| (mm.log10(), vv.log10()))
        .unzip();
    let fit = hvg::loess::loess_fitted(&xs, &ys, 0.3).unwrap();
    assert_close("loess", &fit, &r.f64("loess_fitted"), 1e-9, 1e-3);
}

#[test]
fn hvg_seurat_v3_matches_scanpy() {
    let inp = input();
    let r = reference();
    let keep_cells = r.bool("pipeline_cells");
    let x = inp
        .x
        .select_rows(&keep_cells)
        .unwrap()
        .select_cols(&r.bool("pipeline_genes"))
        .unwrap();
    let cells: Vec<usize> = (0..keep_cells.len()).filter(|&i| keep_cells[i]).collect();
    let b = Batches {
        codes: cells.iter().map(|&i| inp.batches.codes[i]).collect(),
        categories: inp.batches.categories.clone(),
    };
    for batched in [false, true] {
        let p = HvgParams {
            flavor: Flavor::SeuratV3,
            n_top_genes: Some(300),
            ..Default::default()
        };
        let res = hvg::highly_variable_genes(&x, &p, if batched { Some(&b) } else { None }, None)
            .unwrap();
        let tag = format!(
            "hvg_seurat_v3_{}",
            if batched { "batch" } else { "nobatch" }
        );
        assert_close(
            &format!("{tag} variances_norm"),
            &col(res.column("variances_norm")),
            &r.f64(&format!("{tag}:variances_norm")),
            1e-9,
            1e-9,
        );
        let vn = r.f64(&format!("{tag}:variances_norm"));
        if batched {
            // Within a batch, genes with equal normalized variance (common on small data: genes
            // seen once) get their ranks in numpy's arbitrary tie order, which moves median ranks.
            // Every gene selected differently must have such a tie in some batch.
            let per = hvg::seurat_v3::normalized_variances(&x, 0.3, Some(&b)).unwrap();
            let want = r.bool(&format!("{tag}:highly_variable"));
            let diff: Vec<usize> = (0..want.len())
                .filter(|&k| want[k] != res.highly_variable[k])
                .collect();
            for &k in &diff {
                let tied = per
                    .iter()
                    .any(|v| (0..v.len()).any(|j| j != k && v[j] == v[k]));
                assert!(tied, "{tag}: gene {k} differs without a tie in any batch");
            }
            assert!(diff.len() <= 300 / 10, "{tag}: {} genes differ", diff.len());
            eprintln!(
                "{tag}: {} of 300 genes differ, all through per-batch ties",
                diff.len()
            );
            assert_eq!(res.highly_variable.iter().filter(|&&h| h).count(), 300);
            continue;
        }
        assert_same_set_up_to_ties(
            &tag,
            &res.highly_variable,
            &r.bool(&format!("{tag}:highly_variable")),
            &vn,
        );
        if batched {
            assert_eq!(
                col(res.column("highly_variable_nbatches")),
                r.f64(&format!("{tag}:highly_variable_nbatches"))
            );
        } else {
            assert_close(
                "v3 means",
                &col(res.column("means")),
                &r.f64(&format!("{tag}:means")),
                1e-12,
                1e-12,
            );
            assert_close(
                "v3 variances",
                &col(res.column("variances")),
                &r.f64(&format!("{tag}:variances")),
                1e-12,
                1e-12,
            );
        }
    }
}

#[test]
fn scale_matches_scanpy() {
    let inp = input();
    let r = reference();
    let (x, _, _) = pipeline_lognorm(&inp, &r);
    let res = hvg::highly_variable_genes(
        &x,
        &HvgParams {
            n_top_genes: Some(300),
            ..Default::default()
        },
        None,
        None,
    )
    .unwrap();
    let hv = x.select_cols(&res.highly_variable).unwrap();
    let (s, st) = scale::scale_csr_to_dense::<f32, f64>(
        &hv,
        &scale::ScaleParams {
            zero_center: true,
            max_value: Some(10.0),
        },
    )
    .unwrap();
    // One-ulp log1p differences (see above) show at ~1e-8 here; the contract is 1e-5.
    assert_close("scale mean", &st.mean, &r.f64("scale_mean"), 1e-6, 1e-6);
    assert_close("scale std", &st.std, &r.f64("scale_std"), 1e-6, 1e-6);
    assert_close(
        "scale first row",
        s.row(0),
        &r.f64("scale_first_row"),
        1e-6,
        1.0,
    );
    let sums: Vec<f64> = (0..s.n_cols)
        .map(|j| (0..s.n_rows).map(|i| s.get(i, j)).sum())
        .collect();
    assert_close(
        "scale col sums",
        &sums,
        &r.f64("scale_col_sums"),
        1e-5,
        1e-3,
    );
}

/// Scaled seurat genes as in the reference script, as f64 (what scanpy's scale produces).
fn scaled_hvg(inp: &Input, r: &Records) -> sc_kernels::DenseMatrix<f64> {
    let (x, _, _) = pipeline_lognorm(inp, r);
    let res = hvg::highly_variable_genes(
        &x,
        &HvgParams {
            n_top_genes: Some(300),
            ..Default::default()
        },
        None,
        None,
    )
    .unwrap();
    let hv = x.select_cols(&res.highly_variable).unwrap();
    scale::scale_csr_to_dense::<f32, f64>(
        &hv,
        &scale::ScaleParams {
            zero_center: true,
            max_value: Some(10.0),
        },
    )
    .unwrap()
    .0
}

#[test]
fn pca_matches_scanpy() {
    let inp = input();
    let r = reference();
    let s = scaled_hvg(&inp, &r);
    let p = sc_kernels::pca::pca_dense(
        &s,
        &sc_kernels::pca::PcaParams {
            n_comps: 20,
            zero_center: true,
        },
    )
    .unwrap();
    assert_close(
        "pca variance",
        &p.variance,
        &r.f64("pca_variance"),
        1e-5,
        1e-9,
    );
    assert_close(
        "pca variance_ratio",
        &p.variance_ratio,
        &r.f64("pca_variance_ratio"),
        1e-5,
        1e-9,
    );
    // The same from the sparse route (log data subset, then scaled is dense: use the dense here,
    // sparse PCA is checked against the dense one in the unit tests).
    let want = r.f64("pca_components_top10");
    let g = s.n_cols;
    for k in 0..10 {
        let ours = p.components.row(k);
        let theirs = &want[k * g..(k + 1) * g];
        let dot: f64 = ours.iter().zip(theirs).map(|(a, b)| a * b).sum();
        let n2: f64 = theirs.iter().map(|b| b * b).sum::<f64>().sqrt();
        assert!(dot / n2 > 0.9999, "component {k}: cosine {}", dot / n2);
        // Same sign convention as sklearn's svd_flip.
        for (a, b) in ours.iter().zip(theirs) {
            assert!((a - b).abs() < 1e-4, "component {k}: {a} vs {b}");
        }
    }
    let xp = r.f64("pca_x_pca");
    for i in 0..s.n_rows {
        for k in 0..5 {
            let (a, b) = (p.x_pca.get(i, k) as f64, xp[i * 20 + k]);
            assert!(
                (a - b).abs() < 1e-3 * (1.0 + b.abs()),
                "X_pca[{i}, {k}]: {a} vs {b}"
            );
        }
    }
}

#[test]
fn neighbors_match_scanpy() {
    let r = reference();
    let xp: Vec<f32> = r.f64("pca_x_pca").iter().map(|&v| v as f32).collect();
    let n = xp.len() / 20;
    let x = sc_kernels::DenseMatrix::new(n, 20, xp).unwrap();
    let res =
        sc_kernels::neighbors::neighbors(&x, &sc_kernels::neighbors::NeighborsParams::default())
            .unwrap();
    let csr = |p: &str| {
        CsrMatrix::new(
            n,
            n,
            r.usize(&format!("{p}_indptr"))
                .iter()
                .map(|&v| v as u64)
                .collect(),
            r.usize(&format!("{p}_indices"))
                .iter()
                .map(|&v| v as u32)
                .collect(),
            r.f64(&format!("{p}_data"))
                .iter()
                .map(|&v| v as f32)
                .collect(),
        )
        .unwrap()
    };
    let (d_ref, c_ref) = (csr("nn_dist"), csr("nn_conn"));
    assert_eq!(res.distances.indptr, d_ref.indptr);
    assert_eq!(res.distances.indices, d_ref.indices, "same neighbour sets");
    for (a, b) in res.distances.data.iter().zip(&d_ref.data) {
        assert!(
            (a - b).abs() <= 1e-5 * b.abs().max(1.0),
            "distance {a} vs {b}"
        );
    }
    assert_eq!(res.connectivities.indptr, c_ref.indptr);
    assert_eq!(res.connectivities.indices, c_ref.indices);
    let worst = res
        .connectivities
        .data
        .iter()
        .zip(&c_ref.data)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(worst <= 1e-4, "connectivities differ by {worst}");
    eprintln!("connectivities: largest difference {worst:e}");
}
