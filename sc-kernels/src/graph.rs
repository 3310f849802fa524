//! The cell graph the graph steps (`leiden`, `umap`) take: `obsp['connectivities']`, a square,
//! symmetric matrix of non-negative weights. Checks it once and finds its connected components.

use crate::csr::CsrMatrix;
use crate::error::{KernelError, Result};
use rayon::prelude::*;

/// Refuses what is not a weighted undirected graph: a non-square matrix, a negative or
/// non-finite weight, or an asymmetric pattern of weights (checked to 1e-5 relative), so that a
/// distance matrix or a half-filled graph is named rather than clustered.
pub fn check_graph(g: &CsrMatrix<f32>, step: &'static str) -> Result<()> {
    g.validate()?;
    if g.n_rows != g.n_cols {
        return Err(KernelError::Shape(format!(
            "{step}: the graph is {} x {}, not square",
            g.n_rows, g.n_cols
        )));
    }
    if let Some(i) = crate::first_match::par_position_first(&g.data, |w| !w.is_finite() || *w < 0.0)
    {
        let w = g.data[i];
        let row = g.indptr.partition_point(|&p| p as usize <= i) - 1;
        return Err(KernelError::Unsupported(format!(
            "{step}: the graph has weight {w} at ({row}, {}); weights must be finite and >= 0",
            g.indices[i]
        )));
    }
    if mirrored_exactly(g) {
        return Ok(());
    }
    // Each entry (r, c) must have its mirror (c, r) of the same weight: looked up in row c, in
    // parallel over the rows, without building the transpose.
    let asymmetric = (0..g.n_rows).into_par_iter().find_first(|&r| {
        let (cols, weights) = g.row(r);
        cols.iter().zip(weights).any(|(&c, &w)| {
            let (back, back_w) = g.row(c as usize);
            match back.iter().position(|&b| b as usize == r) {
                Some(i) => (w - back_w[i]).abs() > 1e-5 * w.abs().max(back_w[i].abs()),
                None => true,
            }
        })
    });
    if let Some(r) = asymmetric {
        return Err(KernelError::Unsupported(format!(
            "{step}: the graph is not symmetric (row {r} differs from column {r}): \
             expected the connectivities of `neighbors`"
        )));
    }
    Ok(())
}

/// Whether every entry `(r, c, w)` has the mirror `(c, r, w)`, bit for bit: the multisets of
/// entries and of mirrored entries compared by an order-free hash sum, in one pass over the
/// entries in storage order (a lookup of each mirror reads a random row: at 285 M entries that
/// took seconds). Equal sums are what a symmetric graph gives; a graph that is not gives other
/// sums but with a chance of 2^-64. Graphs whose sums differ are checked entry by entry.
fn mirrored_exactly(g: &CsrMatrix<f32>) -> bool {
    use crate::random::mix64;
    let entry =
        |r: u32, c: u32, w: f32| mix64(mix64(((r as u64) << 32) | c as u64) ^ w.to_bits() as u64);
    let (sum, mirrored) = (0..g.n_rows)
        .into_par_iter()
        .map(|r| {
            let (idx, w) = g.row(r);
            idx.iter().zip(w).fold((0u64, 0u64), |(a, b), (&c, &w)| {
                (
                    a.wrapping_add(entry(r as u32, c, w)),
                    b.wrapping_add(entry(c, r as u32, w)),
                )
            })
        })
        .reduce(
            || (0, 0),
            |(a, b), (c, d)| (a.wrapping_add(c), b.wrapping_add(d)),
        );
    sum == mirrored
}

/// The connected components of `g` over its edges of positive weight: each node's component
/// and how many there are, numbered by their smallest node (as a depth-first search from node
/// 0 upwards numbers them). Found by a concurrent union-find over the rows in parallel: each
/// union links the larger root under the smaller, so a root is its component's smallest node
/// whatever the order the threads run in.
pub fn connected_components(g: &CsrMatrix<f32>) -> (Vec<u32>, usize) {
    use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
    let parent: Vec<AtomicU32> = (0..g.n_rows as u32).map(AtomicU32::new).collect();
    // The root of x, halving the path on the way (a racing update only skips a step).
    let find = |mut x: u32| -> u32 {
        loop {
            let p = parent[x as usize].load(Relaxed);
            if p == x {
                return x;
            }
            let gp = parent[p as usize].load(Relaxed);
            if gp != p {
                let _ = parent[x as usize].compare_exchange(p, gp, Relaxed, Relaxed);
            }
            x = p;
        }
    };
    (0..g.n_rows).into_par_iter().for_each(|v| {
        let (idx, w) = g.row(v);
        for (&u, &w) in idx.iter().zip(w) {
            if w <= 0.0 || u as usize == v {
                continue;
            }
            let (mut a, mut b) = (v as u32, u);
            loop {
                a = find(a);
                b = find(b);
                if a == b {
                    break;
                }
                let (hi, lo) = if a > b { (a, b) } else { (b, a) };
                // Only a root is linked: fails (and retries) when `hi` gained a parent meanwhile.
                if parent[hi as usize]
                    .compare_exchange(hi, lo, Relaxed, Relaxed)
                    .is_ok()
                {
                    break;
                }
            }
        }
    });
    // Roots in increasing order are the components in the search's order.
    let root: Vec<u32> = (0..g.n_rows as u32).into_par_iter().map(find).collect();
    let mut number = vec![u32::MAX; g.n_rows];
    let mut n = 0u32;
    for (v, &r) in root.iter().enumerate() {
        if r as usize == v {
            number[v] = n;
            n += 1;
        }
    }
    let comp = root.par_iter().map(|&r| number[r as usize]).collect();
    (comp, n as usize)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An undirected graph from weighted edges `(a, b, w)`.
    pub(crate) fn graph(n: usize, edges: &[(usize, usize, f32)]) -> CsrMatrix<f32> {
        let mut rows = vec![Vec::new(); n];
        for &(a, b, w) in edges {
            rows[a].push((b as u32, w));
            rows[b].push((a as u32, w));
        }
        let mut indptr = vec![0u64];
        let (mut indices, mut data) = (Vec::new(), Vec::new());
        for mut r in rows {
            r.sort_by_key(|e| e.0);
            for (c, w) in r {
                indices.push(c);
                data.push(w);
            }
            indptr.push(indices.len() as u64);
        }
        CsrMatrix::new(n, n, indptr, indices, data).unwrap()
    }

    /// A kNN-like graph of `n` nodes in planted groups of `group`: 15 edges drawn per node, a
    /// share `inside` of them within its group, weights in [0.05, 1).
    pub(crate) fn planted(n: usize, group: usize, inside: f64, seed: u64) -> CsrMatrix<f32> {
        let mut rng = crate::random::SplitMix64::new(seed);
        let group = group.min(n);
        let mut edges = Vec::with_capacity(n * 15);
        for a in 0..n {
            let first = (a / group) * group;
            for _ in 0..15 {
                let b = if rng.next_f64() < inside {
                    first + rng.below(group.min(n - first))
                } else {
                    rng.below(n)
                };
                if a != b {
                    edges.push((a.min(b), a.max(b), 0.05 + 0.95 * rng.next_f64() as f32));
                }
            }
        }
        edges.sort_unstable_by_key(|e| (e.0, e.1));
        edges.dedup_by_key(|e| (e.0, e.1));
        graph(n, &edges)
    }

    /// Components by a depth-first search from node 0 upwards: the numbering the parallel
    /// union-find must give.
    fn components_by_search(g: &CsrMatrix<f32>) -> (Vec<u32>, usize) {
        let mut comp = vec![u32::MAX; g.n_rows];
        let mut n = 0u32;
        for start in 0..g.n_rows {
            if comp[start] != u32::MAX {
                continue;
            }
            comp[start] = n;
            let mut stack = vec![start];
            while let Some(v) = stack.pop() {
                let (idx, w) = g.row(v);
                for (&u, &w) in idx.iter().zip(w) {
                    if w > 0.0 && comp[u as usize] == u32::MAX {
                        comp[u as usize] = n;
                        stack.push(u as usize);
                    }
                }
            }
            n += 1;
        }
        (comp, n as usize)
    }

    #[test]
    fn parallel_components_are_numbered_as_a_search_numbers_them() {
        // Many small groups joined at random, some edges of zero weight, isolated nodes.
        let mut rng = crate::random::SplitMix64::new(5);
        for (n, edges) in [(2_000usize, 900usize), (20_000, 12_000), (50_000, 60_000)] {
            let list: Vec<(usize, usize, f32)> = (0..edges)
                .map(|e| {
                    let a = rng.below(n);
                    let b = (a + 1 + rng.below(40)).min(n - 1);
                    (a.min(b), a.max(b), if e % 7 == 0 { 0.0 } else { 0.5 })
                })
                .filter(|e| e.0 != e.1)
                .collect();
            let mut list = list;
            list.sort_unstable_by_key(|e| (e.0, e.1));
            list.dedup_by_key(|e| (e.0, e.1));
            let g = graph(n, &list);
            let want = components_by_search(&g);
            assert!(want.1 > 1 && want.1 < n, "{} components", want.1);
            assert_eq!(connected_components(&g), want);
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(1)
                .build()
                .unwrap();
            assert_eq!(pool.install(|| connected_components(&g)), want);
        }
    }

    #[test]
    fn symmetry_is_exact_or_within_the_tolerance_and_the_pattern_must_mirror() {
        let g = planted(2000, 100, 0.9, 3);
        assert!(mirrored_exactly(&g));
        check_graph(&g, "t").unwrap();
        // A mirror off by 1e-7 relative: not bit for bit, but within the tolerance.
        let mut near = g.clone();
        near.data[5] *= 1.0 + 1e-7;
        assert!(!mirrored_exactly(&near));
        check_graph(&near, "t").unwrap();
        // An entry whose mirror is missing.
        let mut missing = g.clone();
        let (cols, _) = g.row(0);
        let lone = (1..2000u32).rev().find(|c| !cols.contains(c)).unwrap();
        missing.indices[0] = lone;
        assert!(!mirrored_exactly(&missing));
        let e = check_graph(&missing, "t").unwrap_err().to_string();
        assert!(e.contains("not symmetric"), "{e}");
    }

    #[test]
    fn components_and_checks() {
        let g = graph(5, &[(0, 1, 1.0), (1, 2, 0.5), (3, 4, 0.2)]);
        check_graph(&g, "t").unwrap();
        assert_eq!(connected_components(&g), (vec![0, 0, 0, 1, 1], 2));
        let mut asym = g.clone();
        asym.data[0] = 0.7;
        assert!(check_graph(&asym, "t")
            .unwrap_err()
            .to_string()
            .contains("symmetric"));
        let mut neg = g.clone();
        neg.data[1] = -1.0;
        assert!(check_graph(&neg, "t")
            .unwrap_err()
            .to_string()
            .contains(">= 0"));
        let rect = CsrMatrix::<f32>::zeros(2, 3);
        assert!(check_graph(&rect, "t")
            .unwrap_err()
            .to_string()
            .contains("square"));
    }
}
