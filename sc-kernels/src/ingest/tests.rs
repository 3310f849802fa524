use super::*;
use crate::neighbors::knn_query;
use crate::random::SplitMix64;

/// Cells of `groups` Gaussian blobs in `dim` dimensions (blob `i % groups` for cell `i`), and a
/// layout of the reference: each blob's cells around its own point of the plane.
fn blobs(n: usize, groups: usize, dim: usize, seed: u64) -> DenseMatrix<f32> {
    let mut rng = SplitMix64::new(7);
    let centres: Vec<f64> = (0..groups * dim).map(|_| rng.normal() * 6.0).collect();
    let mut rng = SplitMix64::new(seed);
    let data = (0..n * dim)
        .map(|e| (centres[(e / dim % groups) * dim + e % dim] + rng.normal()) as f32)
        .collect();
    DenseMatrix::new(n, dim, data).unwrap()
}

fn plane(n: usize, groups: usize, seed: u64) -> DenseMatrix<f32> {
    let mut rng = SplitMix64::new(seed);
    let data = (0..n * 2)
        .map(|e| {
            let g = (e / 2 % groups) as f64;
            let centre = if e % 2 == 0 { 20.0 * g } else { -15.0 * g };
            (centre + rng.normal()) as f32
        })
        .collect();
    DenseMatrix::new(n, 2, data).unwrap()
}

#[test]
fn the_projection_is_the_product_centred_by_the_given_means() {
    let x = blobs(50, 3, 8, 1);
    let mut rng = SplitMix64::new(3);
    let basis = DenseMatrix::new(8, 3, (0..24).map(|_| rng.normal() as f32).collect()).unwrap();
    let sparse = CsrMatrix::from_dense(&x);
    // The reference's means: not the new cells' own.
    let mean: Vec<f64> = (0..8).map(|j| 0.5 + j as f64).collect();
    for centred in [true, false] {
        let given = centred.then_some(mean.as_slice());
        let dense = project_pca(Values::Dense(&x), &basis, given).unwrap();
        let from_csr = project_pca(Values::Sparse(&sparse), &basis, given).unwrap();
        for i in 0..50 {
            for c in 0..3 {
                let want: f64 = (0..8)
                    .map(|j| {
                        let v = x.data[i * 8 + j] as f64 - if centred { mean[j] } else { 0.0 };
                        v * basis.data[j * 3 + c] as f64
                    })
                    .sum();
                for got in [dense.data[i * 3 + c], from_csr.data[i * 3 + c]] {
                    assert!(
                        (got as f64 - want).abs() <= 1e-4 * want.abs().max(1.0),
                        "{got} vs {want}"
                    );
                }
            }
        }
    }
    let wrong = DenseMatrix::<f32>::zeros(7, 3);
    assert!(project_pca(Values::Dense(&x), &wrong, None).is_err());
    assert!(project_pca(Values::Dense(&x), &basis, Some(&mean[..7])).is_err());
}

/// A kNN of `indices` (`k` a cell) at distance 0.
fn neighbours(indices: &[u32], k: usize) -> Knn {
    Knn {
        n_obs: indices.len() / k,
        k,
        indices: indices.to_vec(),
        distances: vec![0.0; indices.len()],
    }
}

#[test]
fn the_vote_takes_the_most_common_label_ties_to_the_first() {
    let labels = [0, 1, 1, 2, -1, 2];
    let vote_of = |idx: &[u32], k: usize| vote(&labels, 3, &neighbours(idx, k));
    // Codes 1, 1, 0 -> 1, and none -> -1, in one call of two cells.
    assert_eq!(vote_of(&[1, 2, 0, 4, 4, 4], 3).unwrap(), vec![1, -1]);
    // 0 once, 2 once, 1 twice -> 1; a tie of 2 and 0 -> 0.
    assert_eq!(vote_of(&[0, 3, 1, 2], 4).unwrap(), vec![1]);
    assert_eq!(vote_of(&[3, 0], 2).unwrap(), vec![0]);
    assert!(vote(&labels, 2, &neighbours(&[0], 1)).is_err());
    assert!(vote_of(&[9], 1).is_err());
}

/// New cells from the reference's blobs land in their blob's part of the layout: the nearest
/// reference layout point of 98% of them is of their own blob; the same bits twice; another
/// seed moves them a little.
#[test]
fn new_cells_land_among_their_blob() {
    let (groups, k) = (5, 15);
    let reference = blobs(1000, groups, 10, 1);
    let layout = plane(1000, groups, 2);
    let new = blobs(300, groups, 10, 9);
    let knn = knn_query(&new, &reference, k).unwrap();
    let p = TransformParams::new(1.577, 0.895, 0);
    let mapped = umap_transform(&layout, &knn, &p).unwrap();
    assert!(mapped.data.iter().all(|v| v.is_finite()));
    let home = (0..300)
        .filter(|&i| {
            let y = mapped.row(i);
            let nearest = (0..1000)
                .min_by(|&a, &b| {
                    squared_distance(y, layout.row(a))
                        .total_cmp(&squared_distance(y, layout.row(b)))
                })
                .unwrap();
            nearest % groups == i % groups
        })
        .count();
    assert!(home >= 294, "{home} of 300 in their blob");
    assert_eq!(umap_transform(&layout, &knn, &p).unwrap(), mapped);
    let other = umap_transform(&layout, &knn, &TransformParams::new(1.577, 0.895, 1)).unwrap();
    assert_ne!(other, mapped);
    let short = Knn {
        indices: knn.indices[1..].to_vec(),
        distances: knn.distances[1..].to_vec(),
        ..knn.clone()
    };
    assert!(umap_transform(&layout, &short, &p).is_err());
}
