//! Harmony on synthetic data: the batch shift goes, the cell types stay, bad input is refused.

use super::*;
use crate::random::SplitMix64;

/// `types` cell types (well separated in `d` dims), `batches` batches each shifted by its own
/// offset (`shift` times a standard normal per dimension; the cells' own noise is standard
/// normal); returns the embedding, the batch codes and the types.
///
/// With `shift` 3 (batch means farther apart than 4 cell spreads) harmony2 leaves most of the
/// gap (iLISI 1.3: clusters stay batch-specific and its dynamic ridge does not correct them),
/// harmony1 removes it; at 1.5 both do.
fn synthetic(
    n: usize,
    d: usize,
    types: usize,
    batches: usize,
    seed: u64,
    shift: f64,
) -> (DenseMatrix<f32>, Vec<u32>, Vec<u32>) {
    let mut g = SplitMix64::from_state(seed);
    let mut normal = move || {
        // Box-Muller.
        let (u, v) = (g.next_f64().max(1e-300), g.next_f64());
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    };
    let centers: Vec<Vec<f64>> = (0..types)
        .map(|_| (0..d).map(|_| 6.0 * normal()).collect())
        .collect();
    let shifts: Vec<Vec<f64>> = (0..batches)
        .map(|_| (0..d).map(|_| shift * normal()).collect())
        .collect();
    let mut data = Vec::with_capacity(n * d);
    let (mut bs, mut ts) = (vec![], vec![]);
    for i in 0..n {
        let (t, b) = (i % types, (i / types) % batches);
        for j in 0..d {
            data.push((centers[t][j] + shifts[b][j] + normal()) as f32);
        }
        bs.push(b as u32);
        ts.push(t as u32);
    }
    (DenseMatrix::new(n, d, data).unwrap(), bs, ts)
}

/// Distance between the batch means relative to the spread of the type means.
fn batch_gap(z: &DenseMatrix<f32>, batches: &[u32], nb: usize) -> f64 {
    let d = z.n_cols;
    let mut means = vec![vec![0f64; d]; nb];
    let mut counts = vec![0f64; nb];
    for (row, &b) in z.data.chunks_exact(d).zip(batches) {
        counts[b as usize] += 1.0;
        for (m, &v) in means[b as usize].iter_mut().zip(row) {
            *m += v as f64;
        }
    }
    for b in 0..nb {
        means[b].iter_mut().for_each(|v| *v /= counts[b]);
    }
    (0..d)
        .map(|j| (means[0][j] - means[1][j]).powi(2))
        .sum::<f64>()
        .sqrt()
}

#[test]
fn removes_a_batch_shift_and_keeps_types_apart() {
    let (z, b, t) = synthetic(1200, 10, 3, 2, 1, 1.5);
    let before = batch_gap(&z, &b, 2);
    let res = harmony_integrate(&z, &b, 2, &HarmonyParams::default()).unwrap();
    let after = batch_gap(&res.corrected, &b, 2);
    assert!(after < 0.25 * before, "batch gap {before} -> {after}");
    assert_eq!(res.corrected.n_rows, 1200);
    assert_eq!(res.n_clusters, 40);
    assert!(res.iterations >= 1 && res.objective.len() == res.iterations + 1);
    // Batches mixed (iLISI near 2), types kept apart (cLISI near 1).
    let lisi_t = compute_lisi(&res.corrected, &t, 3, &LisiParams::default()).unwrap();
    let lisi_b = compute_lisi(&res.corrected, &b, 2, &LisiParams::default()).unwrap();
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let lisi_b0 = compute_lisi(&z, &b, 2, &LisiParams::default()).unwrap();
    println!(
        "gap {before:.3} -> {after:.3}; iLISI {:.3} -> {:.3}; cLISI {:.3}; objective {:?}",
        mean(&lisi_b0),
        mean(&lisi_b),
        mean(&lisi_t),
        res.objective
    );
    assert!(mean(&lisi_b) > 1.7, "iLISI {}", mean(&lisi_b));
    assert!(mean(&lisi_t) < 1.05, "cLISI {}", mean(&lisi_t));
}

#[test]
fn is_deterministic_and_follows_the_seed() {
    let (z, b, _) = synthetic(600, 6, 2, 3, 2, 1.5);
    let p = HarmonyParams::default();
    let a = harmony_integrate(&z, &b, 3, &p).unwrap();
    let a2 = harmony_integrate(&z, &b, 3, &p).unwrap();
    assert_eq!(a.corrected, a2.corrected);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let a1 = pool.install(|| harmony_integrate(&z, &b, 3, &p).unwrap());
    assert_eq!(
        a.corrected, a1.corrected,
        "the thread count changed the result"
    );
    let c = harmony_integrate(&z, &b, 3, &HarmonyParams { seed: 5, ..p }).unwrap();
    assert_ne!(a.corrected, c.corrected);
}

#[test]
fn harmony1_and_options_run() {
    let (z, b, _) = synthetic(500, 5, 2, 2, 3, 1.5);
    for p in [
        HarmonyParams::harmony1(),
        HarmonyParams {
            tau: 5.0,
            n_clusters: Some(7),
            block_proportion: 1.0,
            ..Default::default()
        },
        HarmonyParams {
            batch_prune_threshold: None,
            theta: 0.0,
            ..Default::default()
        },
    ] {
        let r = harmony_integrate(&z, &b, 2, &p).unwrap();
        assert!(r.corrected.data.iter().all(|v| v.is_finite()), "{p:?}");
    }
}

#[test]
fn batches_without_cells_and_input_order_are_handled() {
    let (z, b, _) = synthetic(400, 4, 2, 2, 4, 1.5);
    // Codes 0 and 2 used, 1 empty: the same as codes 0 and 1.
    let spread: Vec<u32> = b.iter().map(|&c| c * 2).collect();
    let r1 = harmony_integrate(&z, &b, 2, &HarmonyParams::default()).unwrap();
    let r2 = harmony_integrate(&z, &spread, 3, &HarmonyParams::default()).unwrap();
    assert_eq!(r1.corrected, r2.corrected);
}

#[test]
fn bad_input_is_refused_with_a_message() {
    let (z, b, _) = synthetic(100, 3, 2, 2, 5, 1.5);
    let p = HarmonyParams::default();
    let err = |r: Result<HarmonyResult>| r.unwrap_err().to_string();
    let mut nan = z.clone();
    nan.data[7] = f32::NAN;
    assert!(err(harmony_integrate(&nan, &b, 2, &p)).contains("non-finite"));
    assert!(err(harmony_integrate(&z, &b[..99], 2, &p)).contains("99 batch labels"));
    assert!(err(harmony_integrate(&z, &b, 1, &p)).contains("batch code 1"));
    assert!(err(harmony_integrate(&z, &vec![0; 100], 2, &p)).contains("at least 2 batches"));
    let p200 = HarmonyParams {
        n_clusters: Some(200),
        ..p
    };
    assert!(err(harmony_integrate(&z, &b, 2, &p200)).contains("200 clusters"));
    let empty = DenseMatrix::new(100, 0, vec![]).unwrap();
    assert!(err(harmony_integrate(&empty, &b, 2, &p)).contains("no components"));
    for bad in [
        HarmonyParams { sigma: 0.0, ..p },
        HarmonyParams { theta: -1.0, ..p },
        HarmonyParams {
            block_proportion: 0.0,
            ..p
        },
        HarmonyParams {
            max_iter_harmony: 0,
            ..p
        },
        HarmonyParams {
            alpha: f64::NAN,
            ..p
        },
        HarmonyParams {
            batch_prune_threshold: Some(2.0),
            ..p
        },
    ] {
        assert!(
            matches!(
                harmony_integrate(&z, &b, 2, &bad),
                Err(KernelError::InvalidParameter { .. })
            ),
            "{bad:?}"
        );
    }
}

#[test]
fn local_rows_of_the_ranks_partition_the_batch_order() {
    let (z, batches, _) = synthetic(103, 4, 3, 4, 5, 1.0);
    let setup = Setup::without_rows(&z, &batches, 5, &HarmonyParams::default()).unwrap();
    for size in 1..=4 {
        let mut held = vec![0u32; setup.n];
        for r in 0..size {
            let rows = crate::comm::rank_rows(setup.n, size, r);
            let local = LocalRows::new(&setup, rows.clone());
            assert_eq!(local.len(), rows.len());
            assert_eq!(local.offsets[setup.b], rows.len());
            // Local rows follow the global batch order, each batch contiguous.
            let mut last = None;
            for (g, &l) in local.local_of.iter().enumerate() {
                if l == NOT_HERE {
                    continue;
                }
                held[g] += 1;
                let l = l as usize;
                assert!(last.is_none_or(|p| l == p + 1), "local rows in batch order");
                last = Some(l);
                assert_eq!(
                    rows.start + local.order[l] as usize,
                    setup.order[g] as usize
                );
                assert_eq!(local.batch_of[l], setup.batch_of[g]);
                let b = local.batch_of[l] as usize;
                assert!((local.offsets[b]..local.offsets[b + 1]).contains(&l));
            }
        }
        assert!(
            held.iter().all(|&h| h == 1),
            "every cell on exactly one rank"
        );
    }
}
