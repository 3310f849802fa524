use super::*;
use rand::{Rng, SeedableRng};

fn small() -> (DenseMatrix<f32>, Vec<u32>) {
    let x = DenseMatrix::new(
        6,
        4,
        vec![
            1., 0., 2., 0., 0., 0., 3., 1., 4., 0., 0., 0., 1., 5., 0., 2., 0., 0., 0., 0., 2., 2.,
            2., 2.,
        ],
    )
    .unwrap();
    // Categories a, b, c: rows b a b a b c.
    (x, vec![1, 0, 1, 0, 1, 2])
}

const ALL: AggFuncs = AggFuncs {
    sum: true,
    mean: true,
    var: true,
    count_nonzero: true,
    median: true,
};

fn same(a: &[f64], b: &[f64]) {
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        assert!(
            (x.is_nan() && y.is_nan()) || (x - y).abs() <= 1e-12 * y.abs().max(1.0),
            "{a:?} vs {b:?}"
        );
    }
}

#[test]
fn sparse_and_dense_give_scanpys_numbers() {
    // scanpy 1.11.5: sc.get.aggregate(a, "g", ["sum", "mean", "var", "count_nonzero", "median"])
    // on this matrix as CSR.
    let (x, groups) = small();
    let csr = CsrMatrix::from_dense(&x);
    for r in [
        aggregate(&x, &groups, 3, ALL, 1).unwrap(),
        aggregate(&csr, &groups, 3, ALL, 1).unwrap(),
    ] {
        assert_eq!(r.counts, vec![2, 3, 1]);
        same(
            r.sum.as_ref().unwrap(),
            &[1., 5., 3., 3., 5., 0., 2., 0., 2., 2., 2., 2.],
        );
        assert_eq!(
            r.count_nonzero.unwrap(),
            vec![1, 1, 1, 2, 2, 0, 1, 0, 1, 1, 1, 1]
        );
        let nan = f64::NAN;
        same(
            &r.var.unwrap(),
            &[
                0.5,
                12.5,
                4.5,
                0.5,
                13. / 3.,
                0.,
                4. / 3.,
                0.,
                nan,
                nan,
                nan,
                nan,
            ],
        );
        same(
            &r.mean.unwrap(),
            &[0.5, 2.5, 1.5, 1.5, 5. / 3., 0., 2. / 3., 0., 2., 2., 2., 2.],
        );
        same(
            &r.median.unwrap(),
            &[0.5, 2.5, 1.5, 1.5, 1., 0., 0., 0., 2., 2., 2., 2.],
        );
    }
}

#[test]
fn left_out_rows_count_nowhere() {
    let (x, mut groups) = small();
    groups[0] = LEFT_OUT;
    groups[5] = LEFT_OUT;
    let f = AggFuncs::from_names(&["mean", "var", "median", "sum"]).unwrap();
    let r = aggregate(&x, &groups, 3, f, 0).unwrap();
    assert_eq!(r.counts, vec![2, 2, 0]);
    // b: rows 2 and 4 only.
    same(&r.sum.unwrap()[4..8], &[4., 0., 0., 0.]);
    let (mean, var) = (r.mean.unwrap(), r.var.unwrap());
    same(&mean[4..8], &[2., 0., 0., 0.]);
    same(&var[4..8], &[4., 0., 0., 0.]);
    // c has no rows left.
    assert!(mean[8..].iter().chain(&var[8..]).all(|v| v.is_nan()));
    assert!(r.median.unwrap()[8..].iter().all(|v| v.is_nan()));
    let only_mean = aggregate(&x, &groups, 3, AggFuncs::from_names(&["mean"]).unwrap(), 1)
        .unwrap()
        .mean
        .unwrap();
    same(&only_mean, &mean);
}

/// Two-pass definitions on a dense copy.
fn reference(x: &DenseMatrix<f64>, groups: &[u32], n_groups: usize, dof: u32) -> Aggregates {
    let n = x.n_cols;
    let mut r = Aggregates {
        n_groups,
        n_cols: n,
        counts: vec![0; n_groups],
        sum: Some(vec![0.0; n_groups * n]),
        mean: Some(vec![0.0; n_groups * n]),
        var: Some(vec![0.0; n_groups * n]),
        count_nonzero: Some(vec![0; n_groups * n]),
        median: Some(vec![0.0; n_groups * n]),
    };
    for g in 0..n_groups {
        let rows: Vec<usize> = (0..x.n_rows).filter(|&i| groups[i] == g as u32).collect();
        r.counts[g] = rows.len() as u64;
        for c in 0..n {
            let mut v: Vec<f64> = rows.iter().map(|&i| x.get(i, c)).collect();
            let k = v.len() as f64;
            let s: f64 = v.iter().sum();
            let m = s / k;
            let ss: f64 = v.iter().map(|a| (a - m) * (a - m)).sum();
            r.sum.as_mut().unwrap()[g * n + c] = s;
            r.mean.as_mut().unwrap()[g * n + c] = m;
            r.var.as_mut().unwrap()[g * n + c] = ss / (k - dof as f64);
            r.count_nonzero.as_mut().unwrap()[g * n + c] =
                v.iter().filter(|a| **a != 0.0).count() as u64;
            v.sort_by(f64::total_cmp);
            let l = v.len();
            r.median.as_mut().unwrap()[g * n + c] = (v[(l - 1) / 2] + v[l / 2]) / 2.0;
        }
    }
    r
}

fn random_case(seed: u64, rows: usize, cols: usize, groups: usize) -> (DenseMatrix<f64>, Vec<u32>) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let data = (0..rows * cols)
        .map(|_| {
            if rng.random::<f64>() < 0.6 {
                0.0
            } else {
                // Some negatives, as a scaled matrix has.
                (rng.random::<f64>() * 10.0 - 2.0).round() / 4.0 + 100.0 * (seed % 2) as f64
            }
        })
        .collect();
    let g = (0..rows)
        .map(|_| rng.random_range(0..groups as u32))
        .collect();
    (DenseMatrix::new(rows, cols, data).unwrap(), g)
}

#[test]
fn random_inputs_match_the_two_pass_definitions_across_blocks() {
    // Groups larger than a block, so blocks are combined; one case offset by 100 (variance a
    // small fraction of the squared mean).
    for (seed, rows, cols, groups) in [(1, 300, 7, 5), (2, 3 * BLOCK_ROWS + 17, 5, 2)] {
        let (x, g) = random_case(seed, rows, cols, groups);
        let want = reference(&x, &g, groups, 1);
        for got in [
            aggregate(&x, &g, groups, ALL, 1).unwrap(),
            aggregate(&CsrMatrix::from_dense(&x), &g, groups, ALL, 1).unwrap(),
        ] {
            assert_eq!(got.counts, want.counts);
            same(got.sum.as_ref().unwrap(), want.sum.as_ref().unwrap());
            same(got.var.as_ref().unwrap(), want.var.as_ref().unwrap());
            same(got.mean.as_ref().unwrap(), want.mean.as_ref().unwrap());
            same(got.median.as_ref().unwrap(), want.median.as_ref().unwrap());
            assert_eq!(got.count_nonzero, want.count_nonzero);
        }
    }
}

#[test]
fn the_result_does_not_depend_on_the_threads() {
    let (x, g) = random_case(3, 2 * BLOCK_ROWS + 5, 6, 3);
    let csr = CsrMatrix::from_dense(&x);
    let run = |threads| crate::on_threads(threads, || aggregate(&csr, &g, 3, ALL, 1).unwrap());
    let (a, b) = (run(1), run(4));
    let bits = |v: &Option<Vec<f64>>| {
        v.as_ref()
            .unwrap()
            .iter()
            .map(|x| x.to_bits())
            .collect::<Vec<_>>()
    };
    assert_eq!(bits(&a.var), bits(&b.var));
    assert_eq!(bits(&a.mean), bits(&b.mean));
    assert_eq!(bits(&a.sum), bits(&b.sum));
}

#[test]
fn constant_columns_have_zero_variance() {
    let x = DenseMatrix::new(5, 1, vec![0.1f32; 5]).unwrap();
    let r = aggregate(&x, &[0; 5], 1, ALL, 1).unwrap();
    assert_eq!(r.var.unwrap(), vec![0.0]);
    assert_eq!(r.median.unwrap(), vec![0.1f32 as f64]);
}

#[test]
fn medians_place_the_zeros_among_the_values() {
    assert_eq!(median_with_zeros(&mut [-3.0, 5.0], 5), 0.0);
    assert_eq!(median_with_zeros(&mut [-3.0, -1.0, -2.0], 4), -1.5);
    assert_eq!(median_with_zeros(&mut [4.0, 2.0], 2), 3.0);
    assert!(median_with_zeros(&mut [f64::NAN], 3).is_nan());
    assert!(median_with_zeros(&mut [], 0).is_nan());
}

#[test]
fn bad_input_is_named() {
    let (x, g) = small();
    let e = aggregate(&x, &g[..5], 3, ALL, 1).unwrap_err();
    assert!(e.to_string().contains("5 group labels for 6 rows"), "{e}");
    let e = aggregate(&x, &g, 2, ALL, 1).unwrap_err();
    assert!(e.to_string().contains("group 2 of 2 groups"), "{e}");
    let e = AggFuncs::from_names(&["mean", "max"]).unwrap_err();
    assert!(e.to_string().contains("'max' is not one of"), "{e}");
    assert!(AggFuncs::from_names::<&str>(&[]).is_err());
}
