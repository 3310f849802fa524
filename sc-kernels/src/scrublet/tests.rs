use super::*;
use crate::random::SplitMix64;

/// Cells of `types` expression profiles (Poisson-like counts over `genes`), and `doublets` more
/// cells each the sum of two cells of different types (appended last).
fn planted(cells: usize, genes: usize, types: usize, doublets: usize, seed: u64) -> CsrMatrix<f32> {
    let mut rng = SplitMix64::new(seed);
    let profiles: Vec<Vec<f64>> = (0..types)
        .map(|_| {
            (0..genes)
                .map(|_| {
                    let u = rng.next_f64();
                    if u < 0.15 {
                        4.0 + 6.0 * rng.next_f64()
                    } else {
                        0.3 * rng.next_f64()
                    }
                })
                .collect()
        })
        .collect();
    let draw = |t: usize, rng: &mut SplitMix64| -> Vec<f32> {
        let depth = 0.5 + rng.next_f64();
        profiles[t]
            .iter()
            .map(|&m| {
                // Poisson by inversion (small means).
                let lambda = m * depth;
                let (mut k, mut p, u) = (0u32, (-lambda).exp(), rng.next_f64());
                let mut cdf = p;
                while u > cdf && k < 200 {
                    k += 1;
                    p *= lambda / k as f64;
                    cdf += p;
                }
                k as f32
            })
            .collect()
    };
    let mut dense = Vec::with_capacity((cells + doublets) * genes);
    for c in 0..cells {
        dense.extend(draw(c % types, &mut rng));
    }
    for d in 0..doublets {
        let (a, b) = (d % types, (d + 1) % types);
        let x = draw(a, &mut rng);
        let y = draw(b, &mut rng);
        dense.extend(x.iter().zip(&y).map(|(p, q)| p + q));
    }
    let m = crate::dense::DenseMatrix::new(cells + doublets, genes, dense).unwrap();
    CsrMatrix::from_dense(&m)
}

#[test]
fn the_threshold_is_scikit_images() {
    // Values and thresholds from scikit-image 0.26's threshold_minimum.
    let a: Vec<f64> = (0..3000)
        .map(|i| (i as f64 * 0.37).sin() * 0.05 + 0.1)
        .collect();
    let b: Vec<f64> = (0..600)
        .map(|i| (i as f64 * 1.91).sin() * 0.08 + 0.6)
        .collect();
    let two: Vec<f64> = a.iter().chain(&b).copied().collect();
    assert_eq!(threshold_minimum(&two), Some(0.3366990165343115));
    let three: Vec<f64> = two
        .iter()
        .copied()
        .chain(std::iter::repeat_n(0.95, 50))
        .collect();
    assert_eq!(threshold_minimum(&three), Some(0.3435546881653139));
    assert_eq!(threshold_minimum(&a), Some(0.0958984339555159));
    assert_eq!(threshold_minimum(&[]), None);
    // One value: a single mode, no threshold.
    assert_eq!(threshold_minimum(&[0.2; 10]), None);
}

#[test]
fn doublets_add_distinct_pairs_and_repeat_with_the_seed() {
    let x = planted(60, 40, 3, 0, 1);
    let s = simulate_doublets(&x, 2.0, 1.0, 7).unwrap();
    assert_eq!(s.counts.n_rows, 120);
    let mut pairs = s.parents.clone();
    pairs.sort_unstable();
    pairs.dedup();
    assert_eq!(pairs.len(), 120, "no pair twice");
    let dense = x.to_dense();
    let sim = s.counts.to_dense();
    for (d, &[a, b]) in s.parents.iter().enumerate() {
        for g in 0..40 {
            assert_eq!(
                sim.get(d, g),
                dense.get(a as usize, g) + dense.get(b as usize, g)
            );
        }
        let total: f64 = (0..40).map(|g| sim.get(d, g) as f64).sum();
        assert_eq!(s.totals[d], total);
    }
    assert_eq!(simulate_doublets(&x, 2.0, 1.0, 7).unwrap(), s);
    assert_ne!(
        simulate_doublets(&x, 2.0, 1.0, 8).unwrap().parents,
        s.parents
    );
}

#[test]
fn thinning_keeps_about_the_rate_of_the_umis() {
    let x = planted(200, 50, 2, 0, 3);
    let full = simulate_doublets(&x, 1.0, 1.0, 5).unwrap();
    let half = simulate_doublets(&x, 1.0, 0.5, 5).unwrap();
    assert_eq!(half.parents, full.parents);
    let (a, b): (f64, f64) = (
        full.counts.data.iter().map(|&v| v as f64).sum(),
        half.counts.data.iter().map(|&v| v as f64).sum(),
    );
    assert!((b / a - 0.5).abs() < 0.02, "kept {}", b / a);
    assert!(half
        .counts
        .data
        .iter()
        .all(|&v| v > 0.0 && v.fract() == 0.0));
    assert_eq!(simulate_doublets(&x, 1.0, 0.5, 5).unwrap(), half);
}

#[test]
fn bad_parameters_are_named() {
    let x = planted(20, 30, 2, 0, 1);
    let e = simulate_doublets(&x, 0.0, 1.0, 0).unwrap_err().to_string();
    assert!(e.contains("sim_doublet_ratio"), "{e}");
    let e = simulate_doublets(&x, 1.0, 1.5, 0).unwrap_err().to_string();
    assert!(e.contains("synthetic_doublet_umi_subsampling"), "{e}");
    let e = simulate_doublets(&x, 30.0, 1.0, 0).unwrap_err().to_string();
    assert!(e.contains("distinct pairs"), "{e}");
    let p = ScrubletParams {
        expected_doublet_rate: 1.5,
        ..Default::default()
    };
    let e = scrublet(&x, &p, None).unwrap_err().to_string();
    assert!(e.contains("expected_doublet_rate"), "{e}");
    let p = ScrubletParams {
        n_prin_comps: 500,
        ..Default::default()
    };
    let e = scrublet(&planted(300, 60, 3, 0, 2), &p, None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("n_prin_comps"), "{e}");
    let mut neg = x.clone();
    neg.data[3] = -1.0;
    assert!(scrublet(&neg, &ScrubletParams::default(), None).is_err());
}

#[test]
fn scores_follow_scrublets_formula() {
    // 2 observed cells, 4 doublets, k_adj 3.
    let s = scores_from_counts(&[0, 3, 1, 2, 3, 0], 2, 3, 0.05, 0.02);
    let (rho, r, n) = (0.05f64, 2.0f64, 3.0f64);
    let want = |nd: f64| {
        let q = (nd + 1.0) / (n + 2.0);
        q * rho / r / (1.0 - rho - q * (1.0 - rho - rho / r))
    };
    assert_eq!(s.obs, vec![want(0.0), want(3.0)]);
    assert_eq!(s.sim, vec![want(1.0), want(2.0), want(3.0), want(0.0)]);
    assert!(s.errors_obs.iter().all(|e| *e > 0.0 && e.is_finite()));
    let c = call_at(&s, want(1.5));
    assert_eq!(c.predicted, vec![false, true]);
    assert_eq!(c.detected_doublet_rate, 0.5);
    assert_eq!(c.detectable_doublet_fraction, 0.5);
    assert_eq!(c.overall_doublet_rate, 1.0);
}

#[test]
fn planted_doublets_score_high_and_the_result_repeats() {
    let (cells, planted_doublets) = (900, 45);
    let x = planted(cells, 300, 4, planted_doublets, 11);
    let found = scrublet(&x, &ScrubletParams::default(), None).unwrap();
    assert!(found.scored.iter().all(|&s| s));
    assert_eq!(found.n_neighbors, 15); // round(0.5 sqrt(945))
    let call = found
        .call
        .as_ref()
        .expect("a threshold between the two modes");
    let caught = call.predicted[cells..].iter().filter(|&&p| p).count();
    let false_calls = call.predicted[..cells].iter().filter(|&&p| p).count();
    assert!(caught >= planted_doublets * 8 / 10, "caught {caught}");
    assert!(
        false_calls <= cells / 50,
        "{false_calls} singlets called doublets"
    );
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    assert!(mean(&found.scores.obs[cells..]) > 3.0 * mean(&found.scores.obs[..cells]));
    assert_eq!(
        scrublet(&x, &ScrubletParams::default(), None).unwrap(),
        found
    );
}

#[test]
fn a_given_threshold_is_used() {
    let x = planted(400, 200, 3, 20, 4);
    let p = ScrubletParams {
        threshold: Some(0.25),
        ..Default::default()
    };
    let found = scrublet(&x, &p, None).unwrap();
    let call = found.call.unwrap();
    assert_eq!(call.threshold, 0.25);
    let above: Vec<bool> = found.scores.obs.iter().map(|&s| s > 0.25).collect();
    assert_eq!(call.predicted, above);
}

#[test]
fn cells_with_fewer_than_three_genes_are_not_scored() {
    let mut dense = planted(300, 100, 3, 0, 9).to_dense();
    for g in 0..100 {
        let v = if g < 2 { 1.0 } else { 0.0 };
        dense.data[5 * 100 + g] = v;
    }
    let x = CsrMatrix::from_dense(&dense);
    let found = scrublet(&x, &ScrubletParams::default(), None).unwrap();
    assert!(!found.scored[5]);
    assert_eq!(found.scored.iter().filter(|&&s| s).count(), 299);
    assert_eq!(found.scores.obs.len(), 299);
}

/// The squared distance in f64, summed in order: the order `count_host` and the GPU keep.
fn distance(a: &[f32], b: &[f32]) -> f64 {
    let mut s = 0f64;
    for (&p, &q) in a.iter().zip(b) {
        let u = p as f64 - q as f64;
        s += u * u;
    }
    s
}

/// Each point's doublets among its `keep` nearest others, by sorting every other point.
fn counts_by_sorting(x: &[f32], d: usize, n_obs: usize, keep: usize) -> (Vec<u32>, bool) {
    let n = x.len() / d;
    let mut coincident = false;
    let counts = (0..n)
        .map(|i| {
            let mut all: Vec<(u64, u32)> = (0..n)
                .filter(|&j| j != i)
                .map(|j| {
                    let dist = distance(&x[i * d..(i + 1) * d], &x[j * d..(j + 1) * d]);
                    coincident |= dist == 0.0;
                    (dist.to_bits(), j as u32)
                })
                .collect();
            all.sort_unstable();
            all[..keep.min(all.len())]
                .iter()
                .filter(|&&(_, j)| j as usize >= n_obs)
                .count() as u32
        })
        .collect();
    (counts, coincident)
}

/// Points in `blobs` clusters (`d` values each), rounded to a grid so that distances tie.
fn grid_blobs(n: usize, d: usize, blobs: usize, seed: u64) -> Vec<f32> {
    let mut rng = SplitMix64::new(seed);
    let centres: Vec<f64> = (0..blobs * d).map(|_| 20.0 * rng.next_f64()).collect();
    (0..n)
        .flat_map(|i| {
            let b = i % blobs;
            (0..d)
                .map(|t| (centres[b * d + t] + 4.0 * rng.next_f64()).round() as f32 * 0.5)
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn exact_counts_are_those_of_sorting_every_point_ties_by_index() {
    let d = 3;
    for (n, n_obs, keep, seed) in [(300, 100, 20, 1), (120, 40, 0, 2), (50, 20, 49, 3)] {
        let x = grid_blobs(n, d, 4, seed);
        let got = count_host(&x, d, n_obs, keep + 1, &Search::exact(n), false);
        let (want, coincident) = counts_by_sorting(&x, d, n_obs, keep);
        assert_eq!(got.counts, want, "n {n} keep {keep}");
        assert_eq!(got.coincident, coincident);
        assert!(got.lists.is_none());
    }
}

#[test]
fn the_lists_hold_the_doublet_neighbours_counted() {
    let (n, n_obs, d) = (200, 70, 4);
    let x = grid_blobs(n, d, 3, 5);
    let got = count_host(&x, d, n_obs, 16, &Search::exact(n), true);
    let lists = got.lists.unwrap();
    assert_eq!(lists.len(), n_obs);
    for i in 0..n_obs {
        assert_eq!(lists[i].len() as u32, got.counts[i]);
        assert!(lists[i].iter().all(|&j| (j as usize) < n - n_obs));
    }
}

#[test]
fn the_inverted_file_counts_nearly_what_the_exact_scan_counts() {
    let (n, n_obs, d, k_adj) = (6000, 2000, 5, 40);
    let x = grid_blobs(n, d, 12, 7);
    let exact = count_host(&x, d, n_obs, k_adj, &Search::exact(n), false);
    let search = Search::host_with(&x, n, d, k_adj, 12);
    assert_eq!(search.lists.sizes.len(), 12);
    assert!(search.candidates_per_point() < 0.8 * n as f64);
    let approx = count_host(&x, d, n_obs, k_adj, &search, false);
    let off: u64 = exact
        .counts
        .iter()
        .zip(&approx.counts)
        .map(|(&a, &b)| (a as i64 - b as i64).unsigned_abs())
        .sum();
    let total: u64 = exact.counts.iter().map(|&c| c as u64).sum();
    assert!(
        (off as f64) < 0.02 * total as f64,
        "off by {off} of {total}"
    );
    assert_eq!(
        count_host(
            &x,
            d,
            n_obs,
            k_adj,
            &Search::host_with(&x, n, d, k_adj, 12),
            false
        ),
        approx
    );
}

/// The doublets' embedding from their parents' is the projection of the doublets made: the
/// same coordinates within f32 rounding (relative to the embedding's spread), for each of the
/// preparations, with an empty cell among the parents.
#[test]
fn doublets_from_parents_are_the_doublets_projected() {
    let mut dense = planted(600, 150, 3, 0, 21).to_dense();
    // Cell 5 has no counts: its doublets are the other parent alone, or zero counts.
    dense.data[5 * 150..6 * 150].fill(0.0);
    let x = CsrMatrix::from_dense(&dense);
    let mut parents = doublet_pairs(x.n_rows, 2.0, 3).unwrap();
    parents[0] = [5, 5];
    parents[1] = [5, 7];
    let sim_counts = summed(&x, &parents);
    assert_eq!(
        summed(&x, &parents[2..]),
        simulate_doublets(&x, 2.0, 1.0, 3)
            .unwrap()
            .counts
            .select_rows(&(0..1200).map(|i| i >= 2).collect::<Vec<_>>())
            .unwrap()
    );
    let totals = crate::stats::row_sums(&x);
    let per_million = |m: &CsrMatrix<f32>| {
        let mut m = m.clone();
        normalize_total(&mut m, &PER_MILLION).unwrap();
        m
    };
    let (obs, sim) = (per_million(&x), per_million(&sim_counts));
    for (mean_center, normalize_variance) in [(true, true), (false, true), (true, false)] {
        let prep = Preparation {
            mean_center,
            normalize_variance,
        };
        let made = embed(&obs, &sim, 10, prep).unwrap();
        let linear = embed_linear(&obs, &totals, &parents, 10, prep).unwrap();
        assert_eq!(linear.obs, made.obs);
        let spread = made.obs.data.iter().fold(0f32, |m, v| m.max(v.abs())) as f64;
        let worst = made
            .sim
            .data
            .iter()
            .zip(&linear.sim.data)
            .map(|(a, b)| (*a as f64 - *b as f64).abs())
            .fold(0.0, f64::max);
        assert!(
            worst <= 1e-4 * spread,
            "{prep:?}: off by {worst} (spread {spread})"
        );
    }
}

/// The sums of the parents' rows, as a dense-built CSR (the test's own doublets).
fn summed(x: &CsrMatrix<f32>, parents: &[[u32; 2]]) -> CsrMatrix<f32> {
    let dense = x.to_dense();
    let g = x.n_cols;
    let mut out = vec![0f32; parents.len() * g];
    for (row, &[a, b]) in out.chunks_mut(g).zip(parents) {
        for (j, v) in row.iter_mut().enumerate() {
            *v = dense.data[a as usize * g + j] + dense.data[b as usize * g + j];
        }
    }
    CsrMatrix::from_dense(&crate::dense::DenseMatrix::new(parents.len(), g, out).unwrap())
}

#[test]
fn the_linear_route_scores_as_the_doublets_made() {
    let x = planted(900, 300, 4, 45, 11);
    let p = ScrubletParams::default();
    let linear = scrublet(&x, &p, None).unwrap();
    let explicit = explicit_route(&x, &p);
    let agree = linear
        .call
        .as_ref()
        .unwrap()
        .predicted
        .iter()
        .zip(&explicit.call.as_ref().unwrap().predicted)
        .filter(|(a, b)| a == b)
        .count();
    assert!(agree * 1000 >= 999 * x.n_rows, "{agree} of {}", x.n_rows);
    let r = crate::stats::correlation(&linear.scores.obs, &explicit.scores.obs);
    assert!(r > 0.999, "r = {r}");
}

/// Scrublet through the doublets made (`simulate_doublets`, `embed`): `prepare_host`'s route
/// for settings that are not linear.
fn explicit_route(x: &CsrMatrix<f32>, p: &ScrubletParams) -> Doublets {
    let made = prepare_host(x, p, true).unwrap();
    classify(made.manifold, made.parents, p, None).unwrap()
}
