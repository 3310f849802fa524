use super::*;

fn csr(rows: &[&[f32]]) -> CsrMatrix<f32> {
    let mut d = DenseMatrix::zeros(rows.len(), rows[0].len());
    for (i, r) in rows.iter().enumerate() {
        d.data[i * r.len()..(i + 1) * r.len()].copy_from_slice(r);
    }
    CsrMatrix::from_dense(&d)
}

/// 3 cells x 4 genes.
fn counts() -> CsrMatrix<f32> {
    csr(&[
        &[1.0, 0.0, 3.0, 2.0],
        &[0.0, 5.0, 1.0, 1.0],
        &[4.0, 2.0, 0.0, 1.0],
    ])
}

/// The textbook formula, value by value, in f64.
fn naive(x: &[[f64; 4]; 3], theta: f64, clip: f64) -> Vec<f64> {
    let cells: Vec<f64> = x.iter().map(|r| r.iter().sum()).collect();
    let genes: Vec<f64> = (0..4).map(|j| x.iter().map(|r| r[j]).sum()).collect();
    let total: f64 = cells.iter().sum();
    let mut out = Vec::new();
    for i in 0..3 {
        for j in 0..4 {
            let mu = cells[i] * genes[j] / total;
            let r = (x[i][j] - mu) / (mu + mu * mu / theta).sqrt();
            out.push(r.clamp(-clip, clip));
        }
    }
    out
}

#[test]
fn residuals_follow_the_formula_with_scanpys_defaults_and_clipping() {
    let x = [
        [1.0, 0.0, 3.0, 2.0],
        [0.0, 5.0, 1.0, 1.0],
        [4.0, 2.0, 0.0, 1.0],
    ];
    for p in [
        PearsonParams::default(),
        PearsonParams {
            theta: 0.5,
            clip: Some(0.8),
        },
    ] {
        let got = pearson_residuals(&counts(), &p).unwrap();
        let want = naive(&x, p.theta, p.clip.unwrap_or(3f64.sqrt()));
        for (g, w) in got.data.iter().zip(&want) {
            assert!(
                (*g as f64 - w).abs() <= 1e-6 * w.abs().max(1.0),
                "{g} vs {w}"
            );
        }
    }
}

#[test]
fn bad_parameters_and_counts_are_named() {
    let x = counts();
    for (p, word) in [
        (
            PearsonParams {
                theta: 0.0,
                clip: None,
            },
            "theta",
        ),
        (
            PearsonParams {
                theta: f64::NAN,
                clip: None,
            },
            "theta",
        ),
        (
            PearsonParams {
                theta: 100.0,
                clip: Some(-1.0),
            },
            "clip",
        ),
    ] {
        let e = pearson_residuals(&x, &p).unwrap_err().to_string();
        assert!(e.contains(word), "{e}");
    }
    let mut neg = counts();
    neg.data[0] = -1.0;
    assert!(matches!(
        pearson_residuals(&neg, &PearsonParams::default()),
        Err(KernelError::Negative { .. })
    ));
    let empty_gene = csr(&[&[1.0, 0.0], &[2.0, 0.0]]);
    let e = pearson_residuals(&empty_gene, &PearsonParams::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("gene 1 has no counts"), "{e}");
}

fn hvg_pattern() -> CsrMatrix<f32> {
    crate::csr::fixed_counts(40, 60)
}

#[test]
fn the_pearson_hvg_flavour_is_scanpys() {
    // scanpy 1.11.5: sc.experimental.pp.highly_variable_genes(a, n_top_genes=10[, batch_key="b"])
    // with obs["b"] = "x" for every third cell from the first, else "y".
    let x = hvg_pattern();
    let r = highly_variable_pearson_residuals(&x, 100.0, None, 10, None).unwrap();
    let hv: Vec<usize> = (0..60).filter(|&j| r.highly_variable[j]).collect();
    assert_eq!(hv, [6, 12, 13, 20, 27, 33, 34, 41, 54, 55]);
    let total: f64 = r.residual_variances.iter().sum();
    assert!((total - 655.97728312166).abs() < 1e-9 * total, "{total}");
    assert!(r.highly_variable_rank[..6].iter().all(|v| v.is_nan()));
    assert_eq!(r.highly_variable_rank[6], 4.0);
    let names = ["x".to_string(), "y".to_string()];
    let codes: Vec<u32> = (0..40).map(|i| u32::from(i % 3 != 0)).collect();
    let r = highly_variable_pearson_residuals(&x, 100.0, None, 10, Some((&codes, &names))).unwrap();
    let hv: Vec<usize> = (0..60).filter(|&j| r.highly_variable[j]).collect();
    assert_eq!(hv, [5, 11, 13, 20, 25, 34, 40, 41, 47, 55]);
    let total: f64 = r.residual_variances.iter().sum();
    assert!((total - 282.3380924539223).abs() < 1e-9 * total, "{total}");
    assert_eq!(
        (r.highly_variable_rank[4], r.highly_variable_rank[5]),
        (8.0, 6.0)
    );
    let e = highly_variable_pearson_residuals(&x, 0.0, None, 10, None).unwrap_err();
    assert!(e.to_string().contains("theta"), "{e}");
    let e = highly_variable_pearson_residuals(&x, 100.0, None, 0, None).unwrap_err();
    assert!(e.to_string().contains("n_top_genes"), "{e}");
}
