use super::*;
use crate::dense::DenseMatrix;
use crate::error::{KernelError, Result};
use crate::neighbors::descent::DEFAULT_ROUNDS;
use crate::neighbors::ivf::gpu::{join_parts, IvfRows};
use crate::neighbors::ivf::host::knn_ivf;
use crate::neighbors::ivf::recall::{exact_sample_host, join_samples, recall, SampleKnn};
use crate::neighbors::knn_exact;
use crate::neighbors::lists::{
    nearest_host, probe_prefix, probe_table, refs_per_cell, row_norms_host, train, Lists, SEED,
    TRAIN_ITERS,
};
use crate::random::SplitMix64;

fn clusters(n: usize, d: usize, centres: usize, seed: u64) -> DenseMatrix<f32> {
    let mut rng = SplitMix64::new(seed);
    let c: Vec<f64> = (0..centres * d).map(|_| rng.normal() * 8.0).collect();
    let data = (0..n * d)
        .map(|t| (c[(t / d % centres) * d + t % d] + rng.normal()) as f32)
        .collect();
    DenseMatrix::new(n, d, data).unwrap()
}

/// The training's update as one pass over the points (what [`train`] did before it summed
/// each list on its own core).
fn train_in_one_pass(pts: &[f32], d: usize, n_lists: usize) -> Vec<f32> {
    let m = pts.len() / d;
    let mut centroids = Vec::new();
    for l in 0..n_lists {
        let p = l * m / n_lists;
        centroids.extend_from_slice(&pts[p * d..(p + 1) * d]);
    }
    let mut rng = SplitMix64::new(SEED ^ 0xe3);
    for _ in 0..TRAIN_ITERS {
        let assign = nearest_host(pts, &centroids, d);
        let mut sums = vec![0f64; n_lists * d];
        let mut counts = vec![0usize; n_lists];
        for (p, &a) in assign.iter().enumerate() {
            counts[a as usize] += 1;
            let s = &mut sums[a as usize * d..(a as usize + 1) * d];
            for (t, v) in s.iter_mut().zip(&pts[p * d..(p + 1) * d]) {
                *t += *v as f64;
            }
        }
        for l in 0..n_lists {
            let c = &mut centroids[l * d..(l + 1) * d];
            if counts[l] == 0 {
                let p = rng.below(m);
                c.copy_from_slice(&pts[p * d..(p + 1) * d]);
            } else {
                for (t, s) in c.iter_mut().zip(&sums[l * d..(l + 1) * d]) {
                    *t = (*s / counts[l] as f64) as f32;
                }
            }
        }
    }
    centroids
}

#[test]
fn each_lists_mean_on_its_own_core_is_the_one_pass_mean_bit_for_bit() {
    // Many lists for few points: lists go empty and restart from the seed's draws.
    for (n, d, lists) in [(3000, 7, 40), (500, 3, 200), (64, 5, 64)] {
        let x = clusters(n, d, 6, n as u64);
        let got = train(&x.data, d, lists, |c| Ok(nearest_host(&x.data, c, d))).unwrap();
        let want = train_in_one_pass(&x.data, d, lists);
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&want), "{n} x {d}, {lists} lists");
    }
}

pub(crate) fn part(n: usize, k: usize, cells: &[u32], tag: u32) -> IvfRows {
    let mut indices = vec![u32::MAX; n * k];
    let mut distances = vec![f32::NAN; n * k];
    for &c in cells {
        for j in 0..k {
            indices[c as usize * k + j] = c * 100 + j as u32 + tag;
            distances[c as usize * k + j] = (c + tag) as f32;
        }
    }
    IvfRows {
        cells: cells.to_vec(),
        indices,
        distances,
        stats: IvfStats {
            n_lists: 2,
            n_probes: 1,
            target_recall: None,
            refs_per_cell: 1.0,
            recall: None,
            f32_queries: Some(tag as usize),
            bound_probes: None,
            descent_rounds: 0,
            scan_recall: None,
            descent_replaced: 0,
            descent_declined: None,
        },
        sample: None,
    }
}

#[test]
fn parts_join_row_by_row_and_a_cell_in_two_parts_or_none_is_named() {
    let (n, k) = (7, 3);
    let shares: [&[u32]; 3] = [&[4, 0], &[6, 1, 3], &[2, 5]];
    let tags = [0u32, 1000, 2000];
    let parts = || {
        shares
            .iter()
            .zip(tags)
            .map(|(c, t)| part(n, k, c, t))
            .collect()
    };
    let (knn, stats) = join_parts(n, k, parts()).unwrap();
    for (c, t) in [
        (0, 0),
        (4, 0),
        (1, 1000),
        (3, 1000),
        (6, 1000),
        (2, 2000),
        (5, 2000),
    ] {
        let want: Vec<u32> = (0..k as u32).map(|j| c * 100 + j + t).collect();
        assert_eq!(knn.row(c as usize).0, &want[..], "cell {c}");
        assert_eq!(knn.row(c as usize).1, &[(c + t) as f32; 3][..], "cell {c}");
    }
    assert_eq!(stats.f32_queries, Some(3000));
    let mut twice = parts();
    twice[2].cells.push(1);
    let e = join_parts(n, k, twice).unwrap_err().to_string();
    assert!(e.contains("cell 1 is in two parts"), "{e}");
    let mut short = parts();
    short[1].cells.pop();
    let e = join_parts(n, k, short).unwrap_err().to_string();
    assert!(e.contains("hold 6 cells, not 7"), "{e}");
    let mut outside = parts();
    outside[0].cells.push(9);
    let e = join_parts(n, k, outside).unwrap_err().to_string();
    assert!(e.contains("cell 9 of 7"), "{e}");
}

#[test]
fn a_sample_measured_in_shares_joins_into_the_whole() {
    let x = clusters(900, 6, 4, 5);
    let norms = row_norms_host(&x.data, 6);
    let whole = exact_sample_host(&x.data, &norms, 900, 6, 10);
    let shares = (0..3).map(|r| {
        let range = crate::comm::rank_rows(whole.cells.len(), 3, r);
        SampleKnn {
            cells: whole.cells[range.clone()].to_vec(),
            k: 10,
            indices: whole.indices[range.start * 10..range.end * 10].to_vec(),
            distances: whole.distances[range.start * 10..range.end * 10].to_vec(),
        }
    });
    assert_eq!(join_samples(10, shares), whole);
}

#[test]
fn lists_hold_every_cell_once_from_aligned_starts() {
    let assign = [2u32, 0, 2, 1, 2, 2, 2, 0];
    let lists = Lists::new(&assign, 4);
    assert_eq!(lists.sizes, vec![2, 1, 5, 0]);
    assert_eq!(lists.starts, vec![0, 4, 8, 16]);
    assert!(lists.starts.iter().all(|s| s % 4 == 0));
    let mut cells: Vec<u32> = lists
        .perm
        .iter()
        .copied()
        .filter(|&c| c != u32::MAX)
        .collect();
    cells.sort_unstable();
    assert_eq!(cells, (0..8).collect::<Vec<_>>());
    assert_eq!(&lists.perm[8..13], &[0, 2, 4, 5, 6]);
    assert_eq!(lists.tiles(), vec![0, 0, 1, 4, 2, 8]);
    // 130 cells of one list: three blocks of up to 64.
    assert_eq!(
        Lists::new(&[0u32; 130], 1).tiles(),
        vec![0, 0, 0, 64, 0, 128]
    );
}

#[test]
fn probes_start_with_the_own_list_and_hold_enough_cells() {
    // Centroids on a line at 0, 1, 2, 3; list sizes 1, 1, 1, 10.
    let c = [0f32, 1.0, 2.0, 3.0];
    let (ptr, probes) = probe_table(&c, 1, &[1, 1, 1, 10], 2, 3);
    let row = |l: usize| &probes[ptr[l] as usize..ptr[l + 1] as usize];
    assert_eq!(row(0), &[0, 1, 2], "two probes hold 2 cells: one more list");
    assert_eq!(row(1), &[1, 0, 2], "ties by index");
    assert_eq!(row(2), &[2, 1, 3]);
    assert_eq!(row(3), &[3, 2]);
    let per_cell = (3. + 3. + 12. + 10. * 11.) / 13.;
    assert_eq!(refs_per_cell(&[1, 1, 1, 10], &ptr, &probes, 13), per_cell);
}

#[test]
fn pass_one_bounds_from_the_nearer_half_and_at_least_32_lists() {
    assert_eq!(default_bound_probes(1), 1);
    assert_eq!(default_bound_probes(20), 20);
    assert_eq!(default_bound_probes(40), 32);
    assert_eq!(default_bound_probes(64), 32);
    assert_eq!(default_bound_probes(138), 69);
    let zero = IvfParams {
        bound_probes: Some(0),
        ..IvfParams::default()
    };
    assert!(zero
        .settle(1000)
        .unwrap_err()
        .to_string()
        .contains("bound_probes"));
}

#[test]
fn a_probe_prefix_is_the_table_of_fewer_probes() {
    let mut rng = SplitMix64::new(11);
    let (n_lists, d) = (40, 3);
    let c: Vec<f32> = (0..n_lists * d).map(|_| rng.next_f64() as f32).collect();
    let sizes: Vec<u32> = (0..n_lists)
        .map(|_| 1 + (rng.next_u64() % 9) as u32)
        .collect();
    let full = probe_table(&c, d, &sizes, 30, 20);
    for (b, min_refs) in [(1, 20), (5, 20), (12, 1), (30, 20), (35, 20)] {
        assert_eq!(
            probe_prefix((&full.0, &full.1), &sizes, b, min_refs),
            probe_table(&c, d, &sizes, b.min(30), min_refs),
            "{b} probes, {min_refs} cells"
        );
    }
}

#[test]
fn bad_shapes_are_named() {
    let p = |l, q| IvfParams {
        n_lists: l,
        n_probes: q,
        target_recall: None,
        descent_rounds: Some(0),
        bound_probes: None,
    };
    assert_eq!(
        p(None, None).settle(1_000_000).unwrap(),
        IvfShape {
            n_lists: 1000,
            probes: Probes::Target(DEFAULT_TARGET_RECALL),
            descent_rounds: 0,
            bound_probes: None,
        }
    );
    assert_eq!(
        p(None, Some(7)).settle(200).unwrap().probes,
        Probes::Fixed(7)
    );
    let msg = |r: Result<IvfShape>| r.unwrap_err().to_string();
    assert!(msg(p(Some(10), Some(11)).settle(100)).contains("n_probes"));
    assert!(msg(p(Some(0), None).settle(100)).contains("n_lists"));
    assert!(msg(p(Some(101), None).settle(100)).contains("n_lists"));
    assert!(msg(p(Some(4), Some(0)).settle(100)).contains("n_probes"));
    let t = |n_probes, t| IvfParams {
        n_lists: None,
        n_probes,
        target_recall: Some(t),
        descent_rounds: Some(0),
        bound_probes: None,
    };
    for bad in [0.0, -0.5, 1.01, f64::NAN] {
        assert!(
            msg(t(None, bad).settle(100)).contains("target_recall"),
            "{bad}"
        );
    }
    assert!(msg(t(Some(3), 0.9).settle(100)).contains("give one"));
    assert_eq!(
        t(None, 1.0).settle(100).unwrap().probes,
        Probes::Target(1.0)
    );
}

#[test]
fn the_probes_chosen_for_a_recall_reach_it_on_the_sample() {
    let x = clusters(6000, 12, 20, 7);
    let k = 15;
    let fixed = |p| {
        let params = IvfParams {
            n_lists: Some(80),
            n_probes: Some(p),
            target_recall: None,
            descent_rounds: Some(0),
            bound_probes: None,
        };
        knn_ivf(&x, k, &params).unwrap().1
    };
    for target in [0.6, 0.9, 0.99, 1.0] {
        let params = IvfParams {
            n_lists: Some(80),
            n_probes: None,
            target_recall: Some(target),
            descent_rounds: Some(0),
            bound_probes: None,
        };
        let (_, s) = knn_ivf(&x, k, &params).unwrap();
        let got = s.recall.unwrap().value;
        assert_eq!(s.target_recall, Some(target));
        assert!(got >= target, "target {target}: recall {got}");
        // The fewest: one probe less misses the target (where more than one is probed).
        if s.n_probes > 1 {
            let less = fixed(s.n_probes - 1).recall.unwrap().value;
            assert!(
                less < target,
                "target {target}: {} probes reach {less}",
                s.n_probes - 1
            );
        }
        // The same probes given as a count give the same search.
        assert_eq!(fixed(s.n_probes).recall, s.recall, "target {target}");
    }
}

#[test]
fn all_lists_probed_is_the_exact_knn() {
    let x = clusters(600, 7, 5, 3);
    let params = IvfParams {
        n_lists: Some(6),
        n_probes: Some(6),
        target_recall: None,
        descent_rounds: Some(0),
        bound_probes: None,
    };
    let (knn, stats) = knn_ivf(&x, 10, &params).unwrap();
    assert_eq!(knn, knn_exact(&x, 10).unwrap());
    assert_eq!(stats.refs_per_cell, 600.0);
    assert_eq!(stats.recall.unwrap().value, 1.0);
}

#[test]
fn few_probes_find_most_neighbours_and_say_how_many() {
    let x = clusters(4000, 12, 20, 5);
    let k = 15;
    let exact = knn_exact(&x, k).unwrap();
    let (knn, stats) = knn_ivf(
        &x,
        k,
        &IvfParams {
            n_lists: Some(64),
            n_probes: Some(6),
            target_recall: None,
            descent_rounds: Some(0),
            bound_probes: None,
        },
    )
    .unwrap();
    // Every row: the cell itself first, distinct cells, ascending exact distances.
    for i in 0..4000 {
        let (idx, dist) = knn.row(i);
        assert_eq!(idx[0], i as u32);
        let mut s = idx.to_vec();
        s.sort_unstable();
        s.dedup();
        assert_eq!(s.len(), k);
        assert!(dist.windows(2).all(|w| w[0] <= w[1]));
    }
    // The sampled recall agrees with the recall over every cell.
    let all = SampleKnn {
        cells: (0..4000).collect(),
        k,
        indices: exact.indices.clone(),
        distances: exact.distances.clone(),
    };
    let full = recall(&all, &knn).value;
    let sampled = stats.recall.unwrap();
    assert_eq!(sampled.cells, RECALL_CELLS);
    assert!(full > 0.8, "recall {full}");
    assert!(
        (sampled.value - full).abs() < 0.02,
        "{} vs {full}",
        sampled.value
    );
    assert!(
        stats.refs_per_cell < 4000.0 * 0.3,
        "{}",
        stats.refs_per_cell
    );
    // A found neighbour has its exact distance.
    for i in 0..4000 {
        let (ei, ed) = exact.row(i);
        let (ai, ad) = knn.row(i);
        for (t, j) in ai.iter().enumerate() {
            if let Some(p) = ei.iter().position(|e| e == j) {
                assert_eq!(ad[t], ed[p]);
            }
        }
    }
}

#[test]
fn the_local_join_raises_the_recall_and_says_so() {
    let x = clusters(4000, 12, 20, 5);
    let k = 15;
    let exact = knn_exact(&x, k).unwrap();
    let all = SampleKnn {
        cells: (0..4000).collect(),
        k,
        indices: exact.indices.clone(),
        distances: exact.distances.clone(),
    };
    let run = |rounds| {
        let p = IvfParams {
            n_lists: Some(64),
            n_probes: Some(2),
            target_recall: None,
            descent_rounds: rounds,
            bound_probes: None,
        };
        knn_ivf(&x, k, &p).unwrap()
    };
    let (scan, s0) = run(Some(0));
    let (joined, s1) = run(None);
    assert_eq!((s0.descent_rounds, s1.descent_rounds), (0, DEFAULT_ROUNDS));
    assert_eq!(s0.descent_replaced, 0);
    assert!(s1.descent_replaced > 0);
    assert_eq!(s1.scan_recall, s0.recall);
    let (before, after) = (recall(&all, &scan).value, recall(&all, &joined).value);
    assert!(before < 0.9 && after > before + 0.02, "{before} -> {after}");
    assert!(s1.recall.unwrap().value > s1.scan_recall.unwrap().value);
    assert_eq!(s1.descent_declined, None);
    // Every list probed: the scan is exact, the trial finds nothing and the round is not run.
    let all_lists = IvfParams {
        n_lists: Some(64),
        n_probes: Some(64),
        ..IvfParams::default()
    };
    let (exact_ivf, s) = knn_ivf(&x, k, &all_lists).unwrap();
    assert_eq!(exact_ivf, exact);
    assert_eq!((s.descent_rounds, s.descent_declined), (0, Some(0.0)));
    let bad = IvfParams {
        descent_rounds: Some(MAX_DESCENT_ROUNDS + 1),
        bound_probes: None,
        ..IvfParams::default()
    };
    assert!(bad
        .settle(4000)
        .unwrap_err()
        .to_string()
        .contains("descent_rounds"));
}

#[test]
fn the_method_chooses_the_inverted_file_by_size_and_bad_values_are_named() {
    use crate::neighbors::{KnnMethod, AUTO_IVF_CELLS};
    let p = IvfParams::default();
    assert_eq!(KnnMethod::Auto(p).ivf_for(AUTO_IVF_CELLS - 1), None);
    assert_eq!(KnnMethod::Auto(p).ivf_for(AUTO_IVF_CELLS), Some(p));
    assert_eq!(KnnMethod::Ivf(p).ivf_for(10), Some(p));
    assert_eq!(KnnMethod::Exact.ivf_for(usize::MAX), None);
    let mut x = clusters(300, 4, 3, 1);
    x.data[7 * 4 + 2] = f32::NAN;
    match knn_ivf(&x, 5, &p) {
        Err(KernelError::NonFinite { row: 7, col: 2, .. }) => {}
        other => panic!("{other:?}"),
    }
    assert!(
        knn_ivf(&clusters(300, 4, 3, 1), 301, &p).is_err(),
        "k above the cells"
    );
}

#[test]
fn the_device_estimate_is_close_under_the_atlas_runs_peak() {
    let bytes = device_bytes(11_351_190, 100, 15, 3369) as f64;
    // The run's peak (20.28 GiB) also held the pool's rounding and the graph's start.
    let peak = 20.28 * (1u64 << 30) as f64;
    assert!(bytes < peak && bytes > 0.9 * peak, "{bytes} for {peak}");
}

#[test]
fn training_is_seeded() {
    let x = clusters(2000, 5, 8, 9);
    let p = IvfParams {
        n_lists: Some(16),
        n_probes: Some(3),
        target_recall: None,
        descent_rounds: Some(0),
        bound_probes: None,
    };
    assert_eq!(knn_ivf(&x, 8, &p).unwrap(), knn_ivf(&x, 8, &p).unwrap());
}
