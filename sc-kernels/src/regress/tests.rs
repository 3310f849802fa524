use super::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Cells x genes of positive values with a gene-specific dependence on `cov` (plus noise), and a
/// last gene whose values are all equal.
fn data(n: usize, g: usize, cov: &[f64], seed: u64) -> DenseMatrix<f32> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut x = DenseMatrix::zeros(n, g);
    for i in 0..n {
        for j in 0..g {
            let v = if j == g - 1 {
                2.5
            } else {
                1.0 + 0.3 * j as f64 * cov[i] + rng.random::<f64>()
            };
            x.data[i * g + j] = v as f32;
        }
    }
    x
}

fn covariate(n: usize, seed: u64) -> Vec<f64> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n).map(|_| rng.random::<f64>() * 10.0).collect()
}

/// Simple linear regression of each gene on one covariate, in f64 (the textbook formula).
fn simple_residuals(x: &DenseMatrix<f32>, c: &[f64]) -> Vec<f64> {
    let (n, g) = (x.n_rows, x.n_cols);
    let mut out = vec![0f64; n * g];
    let cm = c.iter().sum::<f64>() / n as f64;
    for j in 0..g {
        let ym = (0..n).map(|i| x.get(i, j) as f64).sum::<f64>() / n as f64;
        let sxy: f64 = (0..n)
            .map(|i| (c[i] - cm) * (x.get(i, j) as f64 - ym))
            .sum();
        let sxx: f64 = (0..n).map(|i| (c[i] - cm) * (c[i] - cm)).sum();
        let slope = sxy / sxx;
        for i in 0..n {
            out[i * g + j] = x.get(i, j) as f64 - (ym - slope * cm) - slope * c[i];
        }
    }
    out
}

fn max_diff(a: &DenseMatrix<f32>, b: &[f64]) -> f64 {
    a.data
        .iter()
        .zip(b)
        .map(|(&u, &v)| (u as f64 - v).abs())
        .fold(0.0, f64::max)
}

#[test]
fn one_continuous_covariate_gives_the_simple_regressions_residuals() {
    let c = covariate(500, 1);
    let mut x = data(500, 6, &c, 2);
    let want = simple_residuals(&x, &c);
    regress_out(&mut x, &Covariates::Continuous(vec![c])).unwrap();
    // f32 residuals of values around 1-10: a few ulps.
    assert!(max_diff(&x, &want) < 1e-5, "{}", max_diff(&x, &want));
}

#[test]
fn several_covariates_leave_residuals_orthogonal_to_every_one() {
    let (a, b) = (covariate(400, 3), covariate(400, 4));
    let mut x = data(400, 5, &a, 5);
    regress_out(&mut x, &Covariates::Continuous(vec![a.clone(), b.clone()])).unwrap();
    for j in 0..5 {
        for cov in [vec![1.0; 400], a.clone(), b.clone()] {
            let dot: f64 = (0..400).map(|i| cov[i] * x.get(i, j) as f64).sum();
            assert!(dot.abs() < 1e-2, "gene {j}: {dot}");
        }
    }
}

#[test]
fn a_singular_design_takes_the_minimum_norm_fit_and_keeps_constant_genes() {
    let c = covariate(300, 6);
    let x0 = data(300, 4, &c, 7);
    let mut once = x0.clone();
    regress_out(&mut once, &Covariates::Continuous(vec![c.clone()])).unwrap();
    let mut twice = x0.clone();
    regress_out(
        &mut twice,
        &Covariates::Continuous(vec![c.clone(), c.clone()]),
    )
    .unwrap();
    for j in 0..3 {
        for i in 0..300 {
            assert!((once.get(i, j) - twice.get(i, j)).abs() < 1e-4);
        }
    }
    // The constant gene: residual ~0 by the inverse, left as it is by the GLM path.
    assert!((0..300).all(|i| twice.get(i, 3) == 2.5));
    assert!((0..300).all(|i| once.get(i, 3).abs() < 1e-5));
}

#[test]
fn a_category_regresses_each_gene_on_its_category_means() {
    let n = 600;
    let codes: Vec<i32> = (0..n).map(|i| [0, 1, 2, -1][i % 4]).collect();
    let c: Vec<f64> = codes.iter().map(|&k| k as f64).collect();
    let mut x = data(n, 5, &c, 8);
    let x0 = x.clone();
    regress_out(
        &mut x,
        &Covariates::Categorical {
            codes: codes.clone(),
            n_categories: 3,
        },
    )
    .unwrap();
    // The regressor: each gene's mean in the cell's category (f32), 0 for no category; then
    // a simple regression on it.
    for j in 0..4 {
        let mut reg = vec![0f64; n];
        for k in 0..3 {
            let cells: Vec<usize> = (0..n).filter(|&i| codes[i] == k).collect();
            let m = cells.iter().map(|&i| x0.get(i, j) as f64).sum::<f64>() / cells.len() as f64;
            for &i in &cells {
                reg[i] = m as f32 as f64;
            }
        }
        let one = DenseMatrix::new(n, 1, (0..n).map(|i| x0.get(i, j)).collect()).unwrap();
        let want = simple_residuals(&one, &reg);
        for i in 0..n {
            assert!(
                (x.get(i, j) as f64 - want[i]).abs() < 1e-5,
                "gene {j} cell {i}"
            );
        }
    }
    assert!((0..n).all(|i| x.get(i, 4) == 2.5));
}

#[test]
fn the_result_does_not_depend_on_the_number_of_threads() {
    let n = 3 * DENSE_CHUNK_ROWS + 17;
    let (a, b) = (covariate(n, 9), covariate(n, 10));
    let x0 = data(n, 9, &a, 11);
    let run = |threads: usize, cov: Covariates| {
        let mut x = x0.clone();
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(|| regress_out(&mut x, &cov).unwrap());
        x
    };
    let cont = Covariates::Continuous(vec![a, b]);
    assert_eq!(run(1, cont.clone()), run(4, cont));
    let cat = Covariates::Categorical {
        codes: (0..n).map(|i| (i % 5) as i32).collect(),
        n_categories: 5,
    };
    assert_eq!(run(1, cat.clone()), run(3, cat));
}

#[test]
fn bad_inputs_are_refused_by_name() {
    let c = covariate(50, 12);
    let x = data(50, 3, &c, 13);
    let err = |mut x: DenseMatrix<f32>, cov: Covariates| {
        regress_out(&mut x, &cov).unwrap_err().to_string()
    };
    assert!(
        err(x.clone(), Covariates::Continuous(vec![c[..49].to_vec()]))
            .contains("49 values for 50 cells")
    );
    let mut nan = c.clone();
    nan[7] = f64::NAN;
    assert!(err(x.clone(), Covariates::Continuous(vec![nan])).contains("NaN at cell 7"));
    let mut bad_x = x.clone();
    bad_x.data[4] = f32::INFINITY;
    assert!(err(bad_x, Covariates::Continuous(vec![c.clone()])).contains("non-finite"));
    let codes = vec![0, 3].repeat(25);
    assert!(err(
        x,
        Covariates::Categorical {
            codes,
            n_categories: 3
        }
    )
    .contains("code 3 outside 0..3"));
}
