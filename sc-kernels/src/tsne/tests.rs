use super::*;
use crate::random::SplitMix64;

/// `per` points around each of `k` centres 8 apart in `d` dimensions.
fn blobs(k: usize, per: usize, d: usize, seed: u64) -> DenseMatrix<f32> {
    let mut g = SplitMix64::new(seed);
    let data = (0..k * per)
        .flat_map(|i| {
            let c = i % k;
            (0..d)
                .map(|j| {
                    (if j == c % d {
                        8.0 * (1 + c / d) as f64
                    } else {
                        0.0
                    } + g.normal()) as f32
                })
                .collect::<Vec<_>>()
        })
        .collect();
    DenseMatrix::new(k * per, d, data).unwrap()
}

#[test]
fn blobs_stay_apart_and_whole() {
    let (k, per) = (4, 100);
    let x = blobs(k, per, 10, 1);
    let y = tsne(&x, &TsneParams::default()).unwrap();
    assert_eq!((y.n_rows, y.n_cols), (400, 2));
    // Each point's nearest embedded neighbour is of its own blob.
    let mut same = 0;
    for i in 0..400 {
        let best = (0..400)
            .filter(|&j| j != i)
            .min_by(|&a, &b| {
                let d = |j: usize| {
                    (y.get(i, 0) - y.get(j, 0)).powi(2) + (y.get(i, 1) - y.get(j, 1)).powi(2)
                };
                d(a).total_cmp(&d(b))
            })
            .unwrap();
        same += (best % k == i % k) as usize;
    }
    assert!(same >= 396, "{same} of 400");
}

#[test]
fn the_same_input_gives_the_same_embedding_on_any_thread_count() {
    let x = blobs(3, 60, 5, 2);
    let p = TsneParams {
        max_iter: 300,
        ..Default::default()
    };
    let run = |threads| crate::on_threads(threads, || tsne(&x, &p).unwrap());
    assert_eq!(run(1), run(3));
}

#[test]
fn bad_parameters_are_named() {
    let x = blobs(2, 20, 3, 3);
    let p = TsneParams {
        perplexity: 5.0,
        ..Default::default()
    };
    for (p, name) in [
        (
            TsneParams {
                perplexity: 40.0,
                ..p
            },
            "perplexity",
        ),
        (
            TsneParams {
                perplexity: 0.0,
                ..p
            },
            "perplexity",
        ),
        (
            TsneParams {
                learning_rate: -1.0,
                ..p
            },
            "learning_rate",
        ),
        (TsneParams { max_iter: 100, ..p }, "max_iter"),
        (TsneParams { angle: 2.0, ..p }, "angle"),
    ] {
        let e = tsne(&x, &p).unwrap_err().to_string();
        assert!(e.contains(name), "{e}");
    }
}

/// The interpolated repulsion (the host's twin of the GPU's grid) against the exact sums: at
/// the GPU's density (boxes a unit wide, FIt-SNE's default) Z within 0.5% and each force within
/// 5% of the largest; the interpolation's error shrinks at least 4-fold with boxes half as wide
/// (third-order interpolation: the formulas are right, not merely close).
#[test]
fn the_grids_repulsion_converges_to_the_exact_sums() {
    use super::interp::{repulsion, Grid};
    let mut g = SplitMix64::new(9);
    for spread in [3.0, 0.02] {
        let y: Vec<f64> = (0..2 * 300).map(|_| spread * g.normal()).collect();
        let n = y.len() / 2;
        let mut b = [
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ];
        for i in 0..n {
            b = [
                b[0].min(y[2 * i]),
                b[1].max(y[2 * i]),
                b[2].min(y[2 * i + 1]),
                b[3].max(y[2 * i + 1]),
            ];
        }
        let (mut exact_z, mut exact) = (0.0, vec![[0.0; 2]; n]);
        for i in 0..n {
            for j in (0..n).filter(|&j| j != i) {
                let d = [y[2 * i] - y[2 * j], y[2 * i + 1] - y[2 * j + 1]];
                let q = 1.0 / (1.0 + d[0] * d[0] + d[1] * d[1]);
                exact_z += q;
                exact[i][0] += q * q * d[0];
                exact[i][1] += q * q * d[1];
            }
        }
        let largest = exact.iter().flatten().fold(0.0f64, |m, v| m.max(v.abs()));
        // Not 50 boxes or more as the GPU's grids: the direct convolution stays small.
        let extent = b[1].max(b[3]) - b[0].min(b[2]);
        let errors: Vec<(f64, f64)> = [1.0, 2.0]
            .iter()
            .map(|per_unit| {
                let nb = (per_unit * extent).ceil().max(4.0) as usize;
                let (rep, z) = repulsion(&y, &Grid::with_boxes(b, nb));
                let worst = rep
                    .iter()
                    .zip(&exact)
                    .map(|(r, e)| (r[0] - e[0]).abs().max((r[1] - e[1]).abs()))
                    .fold(0.0f64, f64::max);
                ((z - exact_z).abs() / exact_z, worst / largest)
            })
            .collect();
        let (z_err, f_err) = errors[0];
        assert!(z_err <= 5e-3, "{spread}: Z off by {z_err}");
        assert!(
            f_err <= 5e-2,
            "{spread}: a force off by {f_err} of the largest"
        );
        if spread > 1.0 {
            assert!(errors[1].1 * 4.0 <= f_err, "{spread}: {errors:?}");
        }
    }
}

#[test]
fn grids_cover_the_layout_with_smooth_sizes() {
    use super::interp::{fixed_point_scales, lagrange, locate, Grid};
    let g = Grid::for_bounds([-1e-4, 2e-4, -3e-4, 1e-4]);
    assert_eq!(g.nb, 50);
    assert!((g.lo - -3e-4).abs() < 1e-18 && (g.h * 50.0 - 5e-4).abs() < 1e-15);
    let g = Grid::for_bounds([-61.0, 60.5, -20.0, 40.0]);
    assert_eq!(g.nb, 125); // 122 rounded up to 5^3
    assert_eq!(locate(60.5, &g).0, g.nb - 1);
    assert_eq!(locate(-61.0, &g), (0, 0.0));
    for t in [0.0, 0.3, 1.0] {
        let w = lagrange(t);
        assert!((w.iter().sum::<f64>() - 1.0).abs() < 1e-12);
    }
    // No node's sum can pass 2^62: n cells of weight < 4 and the largest charge.
    let s = fixed_point_scales(1_000_000, [-61.0, 60.5, -20.0, 40.0]);
    assert_eq!(s[0], 2f64.powi(40));
    assert!(4.0 * 1e6 * 2.0 * 61.0 * 61.0 * s[3] <= 2f64.powi(62));
}
