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
    if let Some((i, &w)) = g
        .data
        .iter()
        .enumerate()
        .find(|(_, w)| !w.is_finite() || **w < 0.0)
    {
        let row = g.indptr.partition_point(|&p| p as usize <= i) - 1;
        return Err(KernelError::Unsupported(format!(
            "{step}: the graph has weight {w} at ({row}, {}); weights must be finite and >= 0",
            g.indices[i]
        )));
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

/// The connected component of each node (numbered in order of their first node) and the count;
/// edges of zero weight do not connect.
pub fn connected_components(g: &CsrMatrix<f32>) -> (Vec<u32>, usize) {
    const NONE: u32 = u32::MAX;
    let mut comp = vec![NONE; g.n_rows];
    let mut stack = Vec::new();
    let mut n = 0u32;
    for start in 0..g.n_rows {
        if comp[start] != NONE {
            continue;
        }
        comp[start] = n;
        stack.push(start);
        while let Some(v) = stack.pop() {
            let (idx, w) = g.row(v);
            for (&u, &w) in idx.iter().zip(w) {
                if w > 0.0 && comp[u as usize] == NONE {
                    comp[u as usize] = n;
                    stack.push(u as usize);
                }
            }
        }
        n += 1;
    }
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
