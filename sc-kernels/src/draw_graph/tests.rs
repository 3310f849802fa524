use super::*;
use crate::dense::DenseMatrix;
use crate::graph::tests::graph;
use crate::umap::tests::blobs;
use crate::umap::trustworthiness;

/// A ring of 12 nodes (weight 1) with chords from each even node to the node 5 on (weight 0.5).
fn ring() -> CsrMatrix<f32> {
    let n = 12;
    let ring = (0..n).map(|i| (i, (i + 1) % n, 1.0));
    let chords = (0..n).step_by(2).map(|i| (i, (i + 5) % n, 0.5));
    graph(n, &ring.chain(chords).collect::<Vec<_>>())
}

#[test]
fn the_start_is_numpys() {
    let s = numpy_start(2, 0);
    assert_eq!(
        s,
        [
            0.5488135039273248,
            0.7151893663724195,
            0.6027633760716439,
            0.5448831829968969
        ]
    );
}

/// fa2-modified 0.4 with scanpy's settings and `barnesHutOptimize=False` (every pair exactly):
/// `ForceAtlas2(...).forceatlas2(ring, pos=np.random.random((12, 2)) after
/// np.random.seed(0), iterations=30)` (`scripts/checks/fa2_reference.py`).
const FA2_RING_30: [f64; 24] = [
    -1.3706175040719104,
    0.2697772383848702,
    -8.976107697678984,
    -7.192692000589127,
    -4.730288020827825,
    -11.767770284262038,
    6.373298577075625,
    -10.980534362090422,
    10.987517654252464,
    -6.263851610762745,
    3.992742528082599,
    -1.2391365833310954,
    -4.7268795051269,
    8.671163416348863,
    -12.786003372871223,
    4.4105691546585994,
    -8.037346568727198,
    1.6943816017368132,
    5.665831660099245,
    4.173600152533968,
    11.155734659195296,
    7.2434544217336585,
    3.9083803212038024,
    11.09142616024497,
];

#[test]
fn every_pair_exactly_is_fa2s_layout() {
    let g = ring();
    let params = Fa2Params {
        iterations: 30,
        theta: 0.0,
        ..Fa2Params::default()
    };
    let layout = force_atlas2(&g, &numpy_start(12, 0), &params).unwrap();
    for (i, (&ours, &fa2)) in layout.iter().zip(&FA2_RING_30).enumerate() {
        assert!(
            (ours - fa2).abs() <= 1e-9 * fa2.abs().max(1.0),
            "node {} coordinate {}: {ours} vs fa2's {fa2}",
            i / 2,
            i % 2
        );
    }
}

fn as_f32(layout: &[f64]) -> DenseMatrix<f32> {
    DenseMatrix::new(
        layout.len() / 2,
        2,
        layout.iter().map(|&v| v as f32).collect(),
    )
    .unwrap()
}

#[test]
fn barnes_hut_lays_out_blobs_as_faithfully_as_every_pair() {
    let (x, g) = blobs(4, 100, 10, 3);
    let start = numpy_start(x.n_rows, 0);
    let params = Fa2Params {
        iterations: 200,
        ..Fa2Params::default()
    };
    let fast = force_atlas2(&g, &start, &params).unwrap();
    let exact = force_atlas2(
        &g,
        &start,
        &Fa2Params {
            theta: 0.0,
            ..params
        },
    )
    .unwrap();
    let t_fast = trustworthiness(&x, &as_f32(&fast), 15);
    let t_exact = trustworthiness(&x, &as_f32(&exact), 15);
    assert!(t_exact > 0.85, "every pair: trustworthiness {t_exact}");
    assert!(
        t_fast >= t_exact - 0.01,
        "Barnes-Hut {t_fast} against every pair {t_exact}"
    );
}

#[test]
fn the_same_start_gives_the_same_bits_on_any_thread_count() {
    let (_, g) = blobs(3, 150, 8, 5);
    let start = numpy_start(g.n_rows, 4);
    let params = Fa2Params {
        iterations: 40,
        ..Fa2Params::default()
    };
    let on = |threads: usize| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(|| force_atlas2(&g, &start, &params).unwrap())
    };
    let one = on(1);
    assert_eq!(one, on(3));
    assert_ne!(one, start);
    assert!(one.iter().all(|v| v.is_finite()));
}

#[test]
fn no_iterations_keep_the_start_and_an_isolated_node_falls_towards_the_origin() {
    let g = graph(3, &[(0, 1, 1.0)]);
    let start = [1.0, 1.0, 2.0, 1.0, 50.0, -50.0];
    let none = Fa2Params {
        iterations: 0,
        ..Fa2Params::default()
    };
    assert_eq!(force_atlas2(&g, &start, &none).unwrap(), start);
    let moved = force_atlas2(
        &g,
        &start,
        &Fa2Params {
            iterations: 5,
            ..Fa2Params::default()
        },
    )
    .unwrap();
    let r = |p: &[f64]| (p[4] * p[4] + p[5] * p[5]).sqrt();
    assert!(r(&moved) < r(&start), "{moved:?}");
}

#[test]
fn bad_input_is_named() {
    let g = ring();
    let start = numpy_start(12, 0);
    let err = |g: &CsrMatrix<f32>, s: &[f64], p: Fa2Params| {
        force_atlas2(g, s, &p).unwrap_err().to_string()
    };
    let e = err(&g, &start[..10], Fa2Params::default());
    assert!(e.contains("the start has 10 values"), "{e}");
    let mut nan = start.clone();
    nan[7] = f64::NAN;
    let e = err(&g, &nan, Fa2Params::default());
    assert!(e.contains("node 3") && e.contains("NaN"), "{e}");
    for (p, name) in [
        (
            Fa2Params {
                scaling_ratio: 0.0,
                ..Fa2Params::default()
            },
            "scaling_ratio",
        ),
        (
            Fa2Params {
                gravity: -1.0,
                ..Fa2Params::default()
            },
            "gravity",
        ),
        (
            Fa2Params {
                theta: f64::NAN,
                ..Fa2Params::default()
            },
            "theta",
        ),
    ] {
        let e = err(&g, &start, p);
        assert!(e.contains(name), "{e}");
    }
    let one_way = CsrMatrix::new(2, 2, vec![0, 1, 1], vec![1], vec![1.0]).unwrap();
    let e = err(&one_way, &[0.0; 4], Fa2Params::default());
    assert!(e.contains("not symmetric"), "{e}");
}
