use super::*;

fn pattern() -> CsrMatrix<f32> {
    crate::csr::fixed_counts(40, 60)
}

#[test]
fn scores_are_scanpys() {
    // scanpy 1.11.5: sc.tl.score_genes(a, ["g3", "g10", "g20", "g33"], ctrl_size=5, n_bins=5)
    // and the same with ctrl_as_ref=False, random_state=3.
    let x = pattern();
    let pool: Vec<usize> = (0..60).collect();
    let genes = [3, 10, 20, 33];
    let p = ScoreGenesParams {
        ctrl_size: 5,
        n_bins: 5,
        ..Default::default()
    };
    let s = score_genes(&x, &genes, &pool, &p).unwrap();
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 * b.abs().max(1.0);
    for (a, b) in s.scores.iter().zip([-8.25, 2.0999999999999996, 11.4, 11.2]) {
        assert!(close(*a, b), "{a} vs {b}");
    }
    assert!(close(s.scores.iter().sum(), -23.249999999999986));
    let q = ScoreGenesParams {
        ctrl_as_ref: false,
        random_state: 3,
        ..p
    };
    let s = score_genes(&x, &genes, &pool, &q).unwrap();
    for (a, b) in s.scores.iter().zip([
        6.449999999999999,
        0.3000000000000007,
        6.199999999999999,
        12.600000000000001,
    ]) {
        assert!(close(*a, b), "{a} vs {b}");
    }
    assert!(close(s.scores.iter().sum(), -45.75));
}

#[test]
fn bad_input_is_named() {
    let x = pattern();
    let pool: Vec<usize> = (0..60).collect();
    let p = ScoreGenesParams::default();
    let e = score_genes(&x, &[], &pool, &p).unwrap_err().to_string();
    assert!(e.contains("gene_list"), "{e}");
    let e = score_genes(&x, &[1], &[], &p).unwrap_err().to_string();
    assert!(e.contains("gene_pool"), "{e}");
    let e = score_genes(&x, &[1], &pool, &ScoreGenesParams { n_bins: 1, ..p })
        .unwrap_err()
        .to_string();
    assert!(e.contains("n_bins"), "{e}");
    // Every gene listed: no control gene is left.
    let e = score_genes(&x, &pool, &pool, &p).unwrap_err().to_string();
    assert!(e.contains("no control genes"), "{e}");
}
