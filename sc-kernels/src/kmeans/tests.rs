use super::*;

/// `per` points around each of `k` centres spread on a line 10 apart, in `d` dimensions.
fn blobs(k: usize, per: usize, d: usize, seed: u64) -> Vec<f32> {
    let mut g = SplitMix64::new(seed);
    let mut x = Vec::with_capacity(k * per * d);
    for i in 0..k * per {
        for j in 0..d {
            let centre = if j == 0 { 10.0 * (i % k) as f64 } else { 0.0 };
            x.push((centre + g.normal() * 0.5) as f32);
        }
    }
    x
}

#[test]
fn separated_blobs_are_found_whole() {
    let (k, per, d) = (5, 200, 4);
    let x = blobs(k, per, d, 1);
    let r = kmeans(
        &x,
        k * per,
        d,
        &KMeansParams {
            n_clusters: k,
            ..Default::default()
        },
    )
    .unwrap();
    for b in 0..k {
        let l: Vec<u32> = (b..k * per).step_by(k).map(|i| r.labels[i]).collect();
        assert!(l.iter().all(|&v| v == l[0]), "blob {b} split");
    }
    let mut distinct: Vec<u32> = (0..k).map(|b| r.labels[b]).collect();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), k);
    // The inertia is the blobs' own scatter: about n * d * 0.25.
    let expected = (k * per * d) as f64 * 0.25;
    assert!(
        (r.inertia / expected - 1.0).abs() < 0.1,
        "{} vs {expected}",
        r.inertia
    );
    assert!((inertia(&x, d, &r.labels, &r.centers) - r.inertia).abs() < 1e-9 * r.inertia);
}

#[test]
fn the_same_seed_gives_the_same_clusters_on_any_thread_count() {
    let x = blobs(6, 300, 3, 2);
    let p = KMeansParams {
        n_clusters: 9,
        n_init: 3,
        ..Default::default()
    };
    let run = |threads| crate::on_threads(threads, || kmeans(&x, 1800, 3, &p).unwrap());
    let (a, b) = (run(1), run(3));
    assert_eq!(a, b);
    let other = kmeans(
        &x,
        1800,
        3,
        &KMeansParams {
            random_state: 7,
            ..p
        },
    )
    .unwrap();
    assert_ne!(a.centers, other.centers);
}

#[test]
fn more_inits_never_do_worse() {
    // Overlapping blobs with more clusters than blobs: local minima differ between seeds.
    let x = blobs(3, 400, 2, 3);
    let one = KMeansParams {
        n_clusters: 7,
        ..Default::default()
    };
    let single = kmeans(&x, 1200, 2, &one).unwrap();
    let many = kmeans(&x, 1200, 2, &KMeansParams { n_init: 5, ..one }).unwrap();
    assert!(many.inertia <= single.inertia);
}

#[test]
fn duplicate_rows_and_k_equal_to_n_work() {
    let x = [1.0f32, 2.0].repeat(6);
    let r = kmeans(
        &x,
        6,
        2,
        &KMeansParams {
            n_clusters: 3,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(r.inertia, 0.0);
    let x: Vec<f32> = (0..8).map(|v| v as f32).collect();
    let r = kmeans(
        &x,
        4,
        2,
        &KMeansParams {
            n_clusters: 4,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(r.inertia, 0.0);
}

#[test]
fn bad_input_is_named() {
    let x = blobs(2, 5, 2, 4);
    let p = KMeansParams::default();
    let e = kmeans(
        &x,
        10,
        2,
        &KMeansParams {
            n_clusters: 11,
            ..p
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("n_clusters"), "{e}");
    let e = kmeans(&x, 10, 2, &KMeansParams { n_clusters: 0, ..p }).unwrap_err();
    assert!(e.to_string().contains("n_clusters"), "{e}");
    assert!(kmeans(&x, 10, 2, &KMeansParams { n_init: 0, ..p }).is_err());
    assert!(kmeans(&x, 10, 2, &KMeansParams { tol: f64::NAN, ..p }).is_err());
    assert!(kmeans(&x[..5], 10, 2, &p).is_err());
    let mut bad = x.clone();
    bad[7] = f32::NAN;
    let e = kmeans(&bad, 10, 2, &KMeansParams { n_clusters: 2, ..p }).unwrap_err();
    assert!(e.to_string().contains("row 3, column 1"), "{e}");
}

/// The tiled assignment is the plain one: each dot product over the columns in order, f32,
/// `|c|^2 - 2 z.c`, the first centroid on ties (the GPU twin's arithmetic), for row and
/// centroid counts that fill no tile exactly.
#[test]
fn the_tiled_assignment_is_the_plain_sum_in_order() {
    let mut g = crate::random::SplitMix64::new(9);
    for (n, d, k) in [(1, 1, 1), (13, 3, 7), (2051, 50, 9), (300, 17, 100)] {
        let x: Vec<f32> = (0..n * d).map(|_| g.normal() as f32).collect();
        let mut c: Vec<f32> = (0..k * d).map(|_| g.normal() as f32).collect();
        if k > 1 {
            // A centroid repeated: ties go to the first.
            let first = c[..d].to_vec();
            c[d..2 * d].copy_from_slice(&first);
        }
        let plain: Vec<u32> = (0..n)
            .map(|i| {
                let z = &x[i * d..(i + 1) * d];
                let mut best = (f32::INFINITY, 0u32);
                for (j, cc) in c.chunks_exact(d).enumerate() {
                    let norm = cc.iter().fold(0f32, |s, v| s + v * v);
                    let dot = z.iter().zip(cc).fold(0f32, |s, (a, b)| s + a * b);
                    let v = norm - 2.0 * dot;
                    if v < best.0 {
                        best = (v, j as u32);
                    }
                }
                best.1
            })
            .collect();
        assert_eq!(assign(&x, n, d, k, &c), plain, "n {n} d {d} k {k}");
    }
}
