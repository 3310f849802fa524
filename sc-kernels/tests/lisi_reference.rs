//! LISI against the reference implementation's output (`../shared/data/harmony/lisi_*.tsv.gz`,
//! from harmonypy's test data: 400 points in 2-D, two label columns, LISI at perplexity 30).
//!
//! Tolerance: every value within 1e-5 relative (measured: 3.8e-7 and 1.3e-6) (the reference prints 16 digits; the neighbour
//! distances here are computed in f32 from f32 coordinates, so not every digit can agree).

mod common;
use common::*;
use sc_kernels::harmony::{compute_lisi, LisiParams};

#[test]
fn matches_the_reference_lisi() {
    let dir = data_dir().join("harmony");
    let x = read_matrix(&dir.join("lisi_x.tsv.gz"), 0);
    // lisi_lisi: an unnamed index column, then one column per label.
    let want = read_matrix(&dir.join("lisi_lisi.tsv.gz"), 1);
    assert_eq!((x.n_rows, x.n_cols, want.n_cols), (400, 2, 2));
    let mut worst = 0f64;
    for (c, label) in ["label1", "label2"].iter().enumerate() {
        let (codes, cats) = read_codes(&dir.join("lisi_metadata.tsv.gz"), label);
        let got = compute_lisi(&x, &codes, cats.len(), &LisiParams::default()).unwrap();
        let rel: Vec<f64> = (0..400)
            .map(|i| {
                let w = want.get(i, c) as f64;
                (got[i] - w).abs() / w
            })
            .collect();
        let max = rel.iter().copied().fold(0.0, f64::max);
        println!(
            "{label}: mean LISI ours {:.6} reference {:.6}; max relative difference {max:.2e}",
            mean(&got),
            (0..400).map(|i| want.get(i, c) as f64).sum::<f64>() / 400.0
        );
        worst = worst.max(max);
    }
    assert!(worst < 1e-5, "max relative difference {worst:.2e}");
}
