use super::*;
use crate::dense::DenseMatrix;
use crate::error::KernelError;
use crate::neighbors::connectivities::{
    distance_matrix, membership, smooth_knn_dist, umap_connectivities,
};
use crate::neighbors::exact::{knn_exact, REF_BLOCK};
use proptest::prelude::*;

pub(crate) fn random(n: usize, d: usize, seed: u64) -> DenseMatrix<f32> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    DenseMatrix::new(
        n,
        d,
        (0..n * d).map(|_| rng.random_range(-3.0f32..3.0)).collect(),
    )
    .unwrap()
}

fn brute(x: &DenseMatrix<f32>, k: usize) -> Vec<Vec<(f64, u32)>> {
    (0..x.n_rows)
        .map(|i| {
            let mut v: Vec<(f64, u32)> = (0..x.n_rows)
                .map(|j| {
                    (
                        (0..x.n_cols)
                            .map(|c| (x.get(i, c) as f64 - x.get(j, c) as f64).powi(2))
                            .sum::<f64>()
                            .sqrt(),
                        j as u32,
                    )
                })
                .collect();
            v.sort_by(|a, b| {
                a.0.partial_cmp(&b.0)
                    .unwrap()
                    .then(((a.1 as usize) != i).cmp(&((b.1 as usize) != i)))
                    .then(a.1.cmp(&b.1))
            });
            v.truncate(k);
            v
        })
        .collect()
}

#[test]
fn hand_checked_line() {
    // Points on a line at 0, 1, 3, 7.
    let x = DenseMatrix::new(4, 1, vec![0.0f32, 1.0, 3.0, 7.0]).unwrap();
    let knn = knn_exact(&x, 3).unwrap();
    assert_eq!(knn.row(0).0, [0, 1, 2]);
    assert_eq!(knn.row(0).1, [0.0, 1.0, 3.0]);
    assert_eq!(knn.row(3).0, [3, 2, 1]);
    let dm = distance_matrix(&knn);
    assert_eq!(dm.row(3), (&[1u32, 2][..], &[6.0f32, 4.0][..]));
    let (sigmas, rhos) = smooth_knn_dist(&knn, 1.0, 1.0);
    assert_eq!(rhos, [1.0, 1.0, 2.0, 4.0]);
    // k = 3: target log2(3); the nearest other point has membership 1, the next exp(-(d-rho)/sigma).
    let s0 = sigmas[0];
    let want = 1.0 + (-(3.0f32 - 1.0) / s0).exp();
    assert!((want as f64 - 3f64.log2()).abs() < 1e-4, "{want}");
    let c = umap_connectivities(&knn, 1.0, 1.0).unwrap();
    // Symmetric, no diagonal, values in (0, 1].
    let d = c.to_dense();
    for i in 0..4 {
        assert_eq!(d.get(i, i), 0.0);
        for j in 0..4 {
            assert_eq!(d.get(i, j), d.get(j, i));
            assert!(d.get(i, j) >= 0.0 && d.get(i, j) <= 1.0);
        }
    }
    assert_eq!(d.get(0, 1), 1.0);
}

#[test]
fn duplicates_and_tiny_data() {
    let x = DenseMatrix::new(3, 2, vec![1.0f32, 1.0, 1.0, 1.0, 5.0, 5.0]).unwrap();
    let r = neighbors(&x, &NeighborsParams::default()).unwrap();
    assert_eq!(r.n_neighbors, 2); // 15 > 3 cells: 1 + 3 / 2
    assert_eq!(r.knn.row(0).0, [0, 1]);
    assert_eq!(r.knn.row(1).0, [1, 0]);
    assert!(r.connectivities.data.iter().all(|v| v.is_finite()));
    assert!(neighbors(
        &DenseMatrix::new(1, 2, vec![0.0f32, 0.0]).unwrap(),
        &NeighborsParams::default()
    )
    .is_err());
    let bad = DenseMatrix::new(2, 1, vec![0.0f32, f32::NAN]).unwrap();
    assert!(matches!(
        knn_exact(&bad, 2),
        Err(KernelError::NonFinite { .. })
    ));
    assert!(knn_exact(&x, 4).is_err());
    assert!(umap_connectivities(&r.knn, 2.0, 1.0).is_err());
}

#[test]
fn blocks_larger_than_one() {
    // More cells than one reference block and one query block.
    let x = random(REF_BLOCK + 300, 5, 9);
    let knn = knn_exact(&x, 6).unwrap();
    let want = brute(&x, 6);
    for i in (0..x.n_rows).step_by(97) {
        let got: Vec<u32> = knn.row(i).0.to_vec();
        let w: Vec<u32> = want[i].iter().map(|e| e.1).collect();
        assert_eq!(got, w, "row {i}");
    }
}

proptest! {
    #[test]
    fn knn_matches_brute_force(n in 2usize..60, d in 1usize..6, k in 1usize..8, seed in any::<u64>()) {
        let k = k.min(n);
        let x = random(n, d, seed);
        let knn = knn_exact(&x, k).unwrap();
        let want = brute(&x, k);
        for i in 0..n {
            prop_assert_eq!(knn.row(i).0[0] as usize, i);
            for t in 0..k {
                prop_assert!((knn.row(i).1[t] as f64 - want[i][t].0).abs() <= 1e-6 * (1.0 + want[i][t].0));
            }
        }
    }

    #[test]
    fn connectivities_are_a_symmetric_fuzzy_union(n in 3usize..40, seed in any::<u64>()) {
        let x = random(n, 3, seed);
        let k = 4.min(n);
        let knn = knn_exact(&x, k).unwrap();
        let c = umap_connectivities(&knn, 1.0, 1.0).unwrap().to_dense();
        let (sig, rho) = smooth_knn_dist(&knn, 1.0, 1.0);
        let mut a = vec![0f32; n * n];
        for i in 0..n {
            let (idx, dist) = knn.row(i);
            for t in 0..k {
                a[i * n + idx[t] as usize] = membership(i, idx[t], dist[t], rho[i], sig[i]);
            }
        }
        for i in 0..n {
            for j in 0..n {
                let (x1, y1) = (a[i * n + j], a[j * n + i]);
                prop_assert_eq!(c.get(i, j), (x1 + y1) - x1 * y1);
            }
        }
    }
}
