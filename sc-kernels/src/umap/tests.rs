use super::*;
use crate::neighbors::{neighbors, NeighborsParams};
use crate::random::SplitMix64;

#[test]
fn the_curve_parameters_are_umap_learns() {
    for (spread, min_dist, a, b) in [
        (1.0, 0.5, 0.5830300203968329, 1.3341669926352966),
        (1.0, 0.1, 1.57694346046584, 0.8950608779639974),
        (2.0, 0.0, 0.6460466724370099, 0.7904944904203146),
        (1.0, 1.0, 0.11497568236610484, 1.9292371499665542),
    ] {
        let (fa, fb) = find_ab_params(spread, min_dist);
        assert!((fa - a).abs() < 1e-5 * a, "a {fa} vs {a}");
        assert!((fb - b).abs() < 1e-5 * b, "b {fb} vs {b}");
    }
}

/// `groups` Gaussian blobs of `per` cells in `dim` dimensions, far apart, and their graph.
pub(crate) fn blobs(
    groups: usize,
    per: usize,
    dim: usize,
    seed: u64,
) -> (DenseMatrix<f32>, CsrMatrix<f32>) {
    let mut rng = SplitMix64::new(seed);
    let centres: Vec<f64> = (0..groups * dim).map(|_| rng.normal() * 6.0).collect();
    let n = groups * per;
    let data: Vec<f32> = (0..n * dim)
        .map(|i| (centres[(i / dim / per) * dim + i % dim] + rng.normal()) as f32)
        .collect();
    let x = DenseMatrix {
        n_rows: n,
        n_cols: dim,
        data,
    };
    let g = neighbors(&x, &NeighborsParams::default())
        .unwrap()
        .connectivities;
    (x, g)
}

#[test]
fn lays_out_blobs_faithfully_and_reproducibly() {
    let (x, g) = blobs(5, 80, 10, 1);
    let params = UmapParams::default();
    let layout = umap(&g, &params).unwrap();
    assert_eq!(layout.n_epochs, 500);
    assert!(layout.init.starts_with("spectral"), "{}", layout.init);
    assert!(layout.embedding.data.iter().all(|v| v.is_finite()));
    let t = trustworthiness(&x, &layout.embedding, 15);
    assert!(t > 0.9, "trustworthiness {t}");
    let again = umap(&g, &params).unwrap();
    assert_eq!(layout.embedding.data, again.embedding.data);
    let other_seed = umap(
        &g,
        &UmapParams {
            random_state: 1,
            ..params
        },
    )
    .unwrap();
    assert_ne!(layout.embedding.data, other_seed.embedding.data);
    // The same in a one-thread pool: the result does not depend on the threads.
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let one_thread = pool.install(|| umap(&g, &params).unwrap());
    assert_eq!(layout.embedding.data, one_thread.embedding.data);
}

#[test]
fn random_start_and_disconnected_graphs() {
    // Blobs far apart with 15 neighbours: five components.
    let (x, g) = blobs(5, 40, 6, 2);
    let (_, n_comp) = crate::graph::connected_components(&g);
    let layout = umap(&g, &UmapParams::default()).unwrap();
    if n_comp > 1 {
        assert!(layout.init.contains("components"), "{}", layout.init);
    }
    assert!(trustworthiness(&x, &layout.embedding, 10) > 0.9);
    let random = umap(
        &g,
        &UmapParams {
            init: Init::Random,
            n_epochs: Some(50),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(random.init, "random");
    assert_eq!(random.n_epochs, 50);
}

#[test]
fn spectral_start_separates_two_clusters() {
    let (_, g) = blobs(2, 60, 5, 3);
    let (start, _) = spectral::initial_layout(&g, &UmapParams::default()).unwrap();
    // Each coordinate in [0, 10].
    assert!(start.data.iter().all(|&v| (0.0..=10.0).contains(&v)));
    let first: f64 = (0..60).map(|i| start.data[i * 2] as f64).sum::<f64>() / 60.0;
    let second: f64 = (60..120).map(|i| start.data[i * 2] as f64).sum::<f64>() / 60.0;
    assert!((first - second).abs() > 2.0, "{first} {second}");
}

#[test]
fn bad_parameters_and_graphs_are_named() {
    let (_, g) = blobs(2, 20, 3, 4);
    for (p, word) in [
        (
            UmapParams {
                min_dist: 2.0,
                ..Default::default()
            },
            "min_dist",
        ),
        (
            UmapParams {
                spread: 0.0,
                ..Default::default()
            },
            "spread",
        ),
        (
            UmapParams {
                n_components: 0,
                ..Default::default()
            },
            "n_components",
        ),
        (
            UmapParams {
                n_epochs: Some(0),
                ..Default::default()
            },
            "n_epochs",
        ),
    ] {
        assert!(
            umap(&g, &p).unwrap_err().to_string().contains(word),
            "{word}"
        );
    }
    let mut asym = g.clone();
    asym.data[0] *= 2.0;
    assert!(umap(&asym, &UmapParams::default())
        .unwrap_err()
        .to_string()
        .contains("symmetric"));
}

#[test]
fn trustworthiness_is_one_for_the_identity_and_lower_for_noise() {
    let (x, _) = blobs(3, 30, 4, 5);
    assert!((trustworthiness(&x, &x, 5) - 1.0).abs() < 1e-12);
    let mut rng = SplitMix64::new(9);
    let noise = DenseMatrix {
        n_rows: x.n_rows,
        n_cols: 2,
        data: (0..x.n_rows * 2).map(|_| rng.normal() as f32).collect(),
    };
    assert!(trustworthiness(&x, &noise, 5) < 0.8);
}

/// `UMAP_TIMING=cells cargo test --release -p sc-kernels --lib umap::tests::timing -- --ignored
/// --nocapture`: the spectral start and the CPU epochs on a kNN-like graph of planted groups
/// (15 neighbours a cell), timed apart.
#[test]
#[ignore = "timing"]
fn timing() {
    let n: usize = std::env::var("UMAP_TIMING")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    let g = crate::graph::tests::planted(n, 20_000, 0.9, 5);
    let l = umap(&g, &UmapParams::default()).unwrap();
    eprintln!(
        "{n} cells, {} edges: checks and schedule {:.2} s, start {:.2} s ({}), {} epochs {:.2} s",
        g.nnz(),
        l.schedule_seconds,
        l.start_seconds,
        l.init,
        l.n_epochs,
        l.epochs_seconds
    );
}

/// `g` with one more cell joined to `spokes` (weight 1, the graph's heaviest) in both
/// directions: a hub, as real kNN graphs have (hundreds of edges where most cells have 20).
fn with_hub(g: &CsrMatrix<f32>, spokes: &[u32]) -> CsrMatrix<f32> {
    let n = g.n_rows;
    let mut rows: Vec<Vec<(u32, f32)>> = (0..n)
        .map(|r| {
            let (idx, w) = g.row(r);
            idx.iter().copied().zip(w.iter().copied()).collect()
        })
        .collect();
    for &s in spokes {
        rows[s as usize].push((n as u32, 1.0));
    }
    rows.push(spokes.iter().map(|&s| (s, 1.0)).collect());
    let mut indptr = vec![0u64];
    let (mut indices, mut data) = (Vec::new(), Vec::new());
    for mut r in rows {
        r.sort_by_key(|e| e.0);
        indices.extend(r.iter().map(|e| e.0));
        data.extend(r.iter().map(|e| e.1));
        indptr.push(indices.len() as u64);
    }
    CsrMatrix {
        n_rows: n + 1,
        n_cols: n + 1,
        indptr,
        indices,
        data,
    }
}

/// The farthest cell from the layout's median, in units of the 99th percentile of the cells'
/// distances to it (conformance/graph_metrics.py's `far_cell_ratio`).
fn far_cell_ratio(y: &DenseMatrix<f32>) -> f64 {
    let median = |d: usize| {
        let mut v: Vec<f32> = (0..y.n_rows).map(|i| y.data[i * y.n_cols + d]).collect();
        v.sort_by(f32::total_cmp);
        v[v.len() / 2] as f64
    };
    let m: Vec<f64> = (0..y.n_cols).map(median).collect();
    let mut dist: Vec<f64> = (0..y.n_rows)
        .map(|i| {
            (0..y.n_cols)
                .map(|d| (y.data[i * y.n_cols + d] as f64 - m[d]).powi(2))
                .sum::<f64>()
                .sqrt()
        })
        .collect();
    dist.sort_by(f64::total_cmp);
    dist[dist.len() - 1] / dist[(dist.len() - 1) * 99 / 100]
}

#[test]
fn hub_cells_walk_to_their_neighbours_instead_of_being_flung_out() {
    // Three blobs of 300 cells; hubs joined to every cell of a blob, to half of one, to 80 cells
    // of two. Summed from where a hub stood, their pulls flung such cells hundreds of units
    // out (the picture became a dot per hub and a blob in a corner).
    let (_, g) = blobs(3, 300, 8, 11);
    let g = with_hub(&g, &(0..300).collect::<Vec<u32>>());
    let g = with_hub(&g, &(300..450).collect::<Vec<u32>>());
    let g = with_hub(&g, &(260..340).collect::<Vec<u32>>());
    for init in [Init::Spectral, Init::Random] {
        let params = UmapParams {
            init,
            ..Default::default()
        };
        let layout = umap(&g, &params).unwrap();
        let ratio = far_cell_ratio(&layout.embedding);
        eprintln!("{init:?}: the farthest cell at {ratio:.2}");
        assert!(ratio < 1.5, "{init:?}: the farthest cell at {ratio:.2}");
    }
}
