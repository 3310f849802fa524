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
