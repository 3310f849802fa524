use super::*;
use crate::random::SplitMix64;

/// scipy's `gaussian_kde(xy)(xy)` scaled to [0, 1], written out: Scott's factor, the unbiased
/// covariance, every pair.
fn reference(xy: &[f64]) -> Vec<f64> {
    let n = xy.len() / 2;
    let m = [
        (0..n).map(|i| xy[2 * i]).sum::<f64>() / n as f64,
        (0..n).map(|i| xy[2 * i + 1]).sum::<f64>() / n as f64,
    ];
    let mut c = [[0.0; 2]; 2];
    for i in 0..n {
        for a in 0..2 {
            for b in 0..2 {
                c[a][b] += (xy[2 * i + a] - m[a]) * (xy[2 * i + b] - m[b]) / (n as f64 - 1.0);
            }
        }
    }
    let f2 = (n as f64).powf(-2.0 / 6.0);
    let (a, b, d) = (c[0][0] * f2, c[0][1] * f2, c[1][1] * f2);
    let det = a * d - b * b;
    let z: Vec<f64> = (0..n)
        .map(|i| {
            (0..n)
                .map(|j| {
                    let (x, y) = (xy[2 * i] - xy[2 * j], xy[2 * i + 1] - xy[2 * j + 1]);
                    (-0.5 * (d * x * x - 2.0 * b * x * y + a * y * y) / det).exp()
                })
                .sum()
        })
        .collect();
    let (lo, hi) = (
        z.iter().cloned().fold(f64::INFINITY, f64::min),
        z.iter().cloned().fold(0.0, f64::max),
    );
    z.iter().map(|v| (v - lo) / (hi - lo)).collect()
}

#[test]
fn densities_are_scipys_per_group() {
    let mut g = SplitMix64::new(1);
    let xy: Vec<f64> = (0..600)
        .map(|i| g.normal() * (1.0 + (i % 2) as f64))
        .collect();
    let groups: Vec<u32> = (0..300)
        .map(|i| if i % 7 == 0 { NO_GROUP } else { (i % 3) as u32 })
        .collect();
    let got = embedding_density(&xy, &groups, 4).unwrap();
    for k in 0..3u32 {
        let members: Vec<usize> = (0..300).filter(|&i| groups[i] == k).collect();
        let pts: Vec<f64> = members
            .iter()
            .flat_map(|&i| [xy[2 * i], xy[2 * i + 1]])
            .collect();
        for (&i, want) in members.iter().zip(reference(&pts)) {
            assert!((got[i] - want).abs() < 1e-12, "{} vs {want}", got[i]);
        }
    }
    assert!((0..300)
        .filter(|&i| groups[i] == NO_GROUP)
        .all(|i| got[i] == 0.0));
    assert!(got.iter().all(|&v| (0.0..=1.0).contains(&v)));
}

#[test]
fn too_few_or_collinear_points_are_named() {
    let e = embedding_density(&[0.0, 0.0, 1.0, 1.0], &[0, 0], 1).unwrap_err();
    assert!(e.to_string().contains("group 0"), "{e}");
    let line = [0.0, 0.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0];
    assert!(embedding_density(&line, &[0; 4], 1).is_err());
    assert!(embedding_density(&[0.0, f64::NAN, 1.0, 1.0], &[0, 0], 1).is_err());
}
