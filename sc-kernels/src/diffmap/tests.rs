use super::*;
use crate::graph::tests::{graph, planted};

#[test]
fn the_steady_state_comes_first_with_eigenvalue_one() {
    let g = planted(2_000, 400, 0.8, 1);
    let d = diffmap(&g, 8, 0).unwrap();
    assert_eq!(d.n_comps, 8);
    assert!((d.evals[0] - 1.0).abs() < 1e-6, "{:?}", d.evals);
    assert!(d.evals.windows(2).all(|w| w[0] >= w[1]), "{:?}", d.evals);
    // The steady state of T is z (the square roots of K's row sums), normalized: one sign.
    let first: Vec<f32> = (0..2_000).map(|r| d.components[r * 8]).collect();
    assert!(first.iter().all(|&v| v > 0.0));
    // Five planted groups: four more eigenvalues near 1, then a gap.
    assert!(
        d.evals[4] > 0.5 && d.evals[5] < d.evals[4] - 0.2,
        "{:?}",
        d.evals
    );
    // The components are orthonormal.
    for a in 0..8 {
        for b in 0..=a {
            let dot: f64 = (0..2_000)
                .map(|r| d.components[r * 8 + a] as f64 * d.components[r * 8 + b] as f64)
                .sum();
            let want = if a == b { 1.0 } else { 0.0 };
            assert!((dot - want).abs() < 1e-5, "{a} {b}: {dot}");
        }
    }
    assert_eq!(d, diffmap(&g, 8, 0).unwrap());
}

#[test]
fn transitions_are_scanpys_formula() {
    // A triangle with a tail: 0-1 (1), 1-2 (2), 0-2 (1), 2-3 (0.5).
    let g = graph(4, &[(0, 1, 1.0), (0, 2, 1.0), (1, 2, 2.0), (2, 3, 0.5)]);
    let t = transitions_sym(&g).unwrap();
    let d = [2.0, 3.0, 3.5, 0.5];
    let k = |i: usize, j: usize, w: f64| w / (d[i] * d[j]);
    let ksum = [
        k(0, 1, 1.0) + k(0, 2, 1.0),
        k(1, 0, 1.0) + k(1, 2, 2.0),
        k(2, 0, 1.0) + k(2, 1, 2.0) + k(2, 3, 0.5),
        k(3, 2, 0.5),
    ];
    let (cols, v) = t.row(2);
    for (&j, &got) in cols.iter().zip(v) {
        let w = match j {
            0 => 1.0,
            1 => 2.0,
            _ => 0.5,
        };
        let want = k(2, j as usize, w) / (ksum[2] * ksum[j as usize]).sqrt();
        assert!((got - want).abs() < 1e-15, "{j}: {got} vs {want}");
    }
}

#[test]
fn bad_input_is_named() {
    let g = planted(100, 50, 0.8, 2);
    let e = diffmap(&g, 2, 0).unwrap_err();
    assert!(e.to_string().contains("greater than 2"), "{e}");
    let lonely = graph(4, &[(0, 1, 1.0), (1, 2, 1.0)]);
    let e = diffmap(&lonely, 3, 0).unwrap_err();
    assert!(e.to_string().contains("cell 3 has no neighbours"), "{e}");
}

/// `DIFFMAP_TIMING=cells cargo test --release -p sc-kernels --lib diffmap::tests::timing --
/// --ignored --nocapture`: a kNN-like graph of planted groups, timed.
#[test]
#[ignore = "timing"]
fn timing() {
    let n: usize = std::env::var("DIFFMAP_TIMING")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let g = planted(n, 5_000, 0.85, 5);
    let t = std::time::Instant::now();
    let d = diffmap(&g, 15, 0).unwrap();
    eprintln!(
        "{n} cells, {} edges: {:.2} s, eigenvalues {:?}",
        g.nnz(),
        t.elapsed().as_secs_f64(),
        d.evals
    );
}
