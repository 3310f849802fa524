use super::*;
use crate::random::SplitMix64;

/// Three batches shifting and scaling 30 genes differently.
fn batched(n_per: usize, seed: u64) -> (DenseMatrix<f32>, Vec<u32>) {
    let mut g = SplitMix64::new(seed);
    let (genes, batches) = (30, 3);
    let mut data = Vec::new();
    let mut labels = Vec::new();
    for j in 0..n_per * batches {
        let b = j % batches;
        labels.push(b as u32);
        for c in 0..genes {
            let base = (c % 5) as f64;
            let shift = b as f64 * (0.5 + 0.1 * c as f64);
            let scale = 1.0 + 0.5 * b as f64;
            data.push((base + shift + scale * g.normal()) as f32);
        }
    }
    (
        DenseMatrix::new(n_per * batches, genes, data).unwrap(),
        labels,
    )
}

#[test]
fn batch_means_and_spreads_are_brought_together() {
    let (x, b) = batched(200, 1);
    let y = combat(&x, &b, 3, &[]).unwrap();
    for c in 0..30 {
        let stats = |k: u32| {
            let v: Vec<f64> = (0..600)
                .filter(|&j| b[j] == k)
                .map(|j| y.get(j, c))
                .collect();
            (mean(&v), variance(&v, 1.0))
        };
        let (m0, v0) = stats(0);
        for k in 1..3 {
            let (m, v) = stats(k);
            // Before: apart by 0.5 to 3.4 per batch step; the shrunk shifts leave a little.
            assert!((m - m0).abs() < 0.2, "gene {c} batch {k}: mean {m} vs {m0}");
            // Before: 2.25 and 4 times batch 0's; the shrunk scales bring them near.
            assert!(
                (v / v0 - 1.0).abs() < 0.25,
                "gene {c} batch {k}: var {v} vs {v0}"
            );
        }
    }
    // Deterministic on any thread count.
    let again = crate::on_threads(1, || combat(&x, &b, 3, &[]).unwrap());
    assert_eq!(again, y);
}

#[test]
fn a_numeric_covariate_is_kept() {
    let (mut x, b) = batched(100, 2);
    // Gene 0 follows the covariate; the batches do not move it.
    let cov: Vec<f64> = (0..300).map(|j| (j % 10) as f64).collect();
    for j in 0..300 {
        x.data[j * 30] = (cov[j] * 2.0) as f32 + 0.01 * (j % 3) as f32;
    }
    let y = combat(&x, &b, 3, &[cov.clone()]).unwrap();
    let ys: Vec<f64> = (0..300).map(|j| y.get(j, 0)).collect();
    let slope = {
        let (mx, my) = (mean(&cov), mean(&ys));
        let sxy: f64 = cov.iter().zip(&ys).map(|(a, b)| (a - mx) * (b - my)).sum();
        sxy / cov.iter().map(|a| (a - mx).powi(2)).sum::<f64>()
    };
    assert!((slope - 2.0).abs() < 0.05, "{slope}");
}

#[test]
fn bad_input_is_named() {
    let (x, mut b) = batched(10, 3);
    b[0] = 7;
    assert!(combat(&x, &b, 3, &[])
        .unwrap_err()
        .to_string()
        .contains("batch 7"));
    let labels: Vec<u32> = (0..30)
        .map(|j| if j == 0 { 2 } else { (j % 2) as u32 })
        .collect();
    let e = combat(&x, &labels, 3, &[]).unwrap_err();
    assert!(e.to_string().contains("fewer than 2 cells"), "{e}");
    let (x, b) = batched(10, 4);
    let e = combat(&x, &b, 3, &[vec![1.0; 29]]).unwrap_err();
    assert!(e.to_string().contains("29"), "{e}");
    // A covariate equal to a batch's indicator makes the design singular.
    let same: Vec<f64> = b.iter().map(|&k| (k == 0) as u8 as f64).collect();
    let e = combat(&x, &b, 3, &[same]).unwrap_err();
    assert!(e.to_string().contains("singular"), "{e}");
}

#[test]
fn a_gene_of_zero_variance_ends_the_fixed_point_as_scanpys() {
    assert!(relative_change(&[0.0, 1.0], &[0.0, 2.0]).is_nan());
    assert_eq!(relative_change(&[1.0, 3.0], &[2.0, -1.0]), 0.5);
    assert!(python_max(f64::NAN, 1.0).is_nan());
    assert_eq!(python_max(1.0, f64::NAN), 1.0);
    // A constant gene: corrected to itself, the others still corrected.
    let (mut x, b) = batched(50, 5);
    for j in 0..150 {
        x.data[j * 30 + 3] = 2.5;
    }
    let y = combat(&x, &b, 3, &[]).unwrap();
    assert!((0..150).all(|j| (y.get(j, 3) - 2.5).abs() < 1e-12));
    assert!(y.data.iter().all(|v| v.is_finite()));
}

/// The passes' sums over batches of several chunks: each batch's row the plain sum of its cells'
/// values (to rounding), one batch's pass alone the same row bit for bit and zeros elsewhere
/// (what the GPU twin's chunk tables and folds mirror).
#[test]
fn chunked_sums_are_each_batchs_sums() {
    let (x, b) = batched(1500, 6);
    let design = Design::new(x.n_rows, x.n_cols, &b, 3, &[]).unwrap();
    assert_eq!(design.chunks().len(), 6, "two chunks a batch");
    let cells = HostCells {
        x: &x,
        design: &design,
    };
    let all = cells.sums(Term::Weighted(None), None).unwrap();
    for k in 0..3 {
        for c in 0..30 {
            let plain: f64 = (0..x.n_rows)
                .filter(|&j| b[j] == k as u32)
                .map(|j| x.data[j * 30 + c] as f64)
                .sum();
            let got = all[k * 30 + c];
            assert!(
                (got - plain).abs() <= 1e-12 * plain.abs().max(1.0),
                "{got} vs {plain}"
            );
        }
    }
    let one = cells.sums(Term::Weighted(None), Some(1)).unwrap();
    assert_eq!(&one[30..60], &all[30..60]);
    assert!(one[..30].iter().chain(&one[60..]).all(|&v| v == 0.0));
}

/// `combat_as::<_, f32>` (the step's, without an f64 copy) gives `combat`'s values rounded to
/// f32, bit for bit, with and without a covariate.
#[test]
fn f32_output_is_the_f64_output_rounded() {
    let (x, b) = batched(120, 5);
    let cov: Vec<f64> = (0..360).map(|j| (j % 7) as f64 * 0.3).collect();
    for covariates in [vec![], vec![cov]] {
        let wide = combat(&x, &b, 3, &covariates).unwrap();
        let narrow = combat_as::<_, f32>(&x, &b, 3, &covariates).unwrap();
        assert_eq!((narrow.n_rows, narrow.n_cols), (wide.n_rows, wide.n_cols));
        assert!(wide
            .data
            .iter()
            .zip(&narrow.data)
            .all(|(&w, &n)| (w as f32).to_bits() == n.to_bits()));
    }
}
