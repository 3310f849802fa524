//! `paga` (scanpy's `tl.paga`, Wolf et al. 2019, model v1.2): the connectivity of groups of
//! cells in the kNN graph. The kernel counts the graph's edges (each stored entry of
//! `obsp['distances']` one directed edge) between every pair of groups,
//! [`group_edge_counts`]; [`connectivities`] turns them into scanpy's confidence: the edges
//! between two groups (both ways) over those a random graph with the same out-degrees would
//! put there, at most 1. [`spanning_tree`] keeps the strongest of them that join every group
//! (scanpy's `connectivities_tree`). [`group_edge_counts_gpu`] counts on a GPU: the same counts.

mod gpu;
#[cfg(test)]
mod tests;

pub use gpu::{group_edge_counts_gpu, KERNELS};

use crate::csr::CsrMatrix;
use crate::error::{KernelError, Result};
use rayon::prelude::*;

/// Rows per block of the count.
const ROWS: usize = 8192;

/// `counts[a * n_groups + b]`: stored entries of `graph` from a cell of group `a` to one of
/// group `b`.
pub fn group_edge_counts<T>(
    graph: &CsrMatrix<T>,
    groups: &[u32],
    n_groups: usize,
) -> Result<Vec<u64>>
where
    T: Sync,
{
    check_counts(graph, groups, n_groups)?;
    let n = graph.n_rows;
    let blocks: Vec<Vec<u64>> = (0..n.div_ceil(ROWS))
        .into_par_iter()
        .map(|b| {
            let mut c = vec![0u64; n_groups * n_groups];
            for i in b * ROWS..((b + 1) * ROWS).min(n) {
                let a = groups[i] as usize * n_groups;
                for &j in &graph.indices[graph.row_range(i)] {
                    c[a + groups[j as usize] as usize] += 1;
                }
            }
            c
        })
        .collect();
    let mut total = vec![0u64; n_groups * n_groups];
    for b in blocks {
        total.iter_mut().zip(b).for_each(|(t, v)| *t += v);
    }
    Ok(total)
}

/// Refuses group labels that are not one a row of a square graph, or a group beyond
/// `n_groups`.
fn check_counts<T>(graph: &CsrMatrix<T>, groups: &[u32], n_groups: usize) -> Result<()> {
    let n = graph.n_rows;
    if groups.len() != n || graph.n_cols != n {
        return Err(KernelError::Shape(format!(
            "paga: {} group labels for a {} x {} graph",
            groups.len(),
            n,
            graph.n_cols
        )));
    }
    if let Some(&g) = groups.iter().find(|&&g| g as usize >= n_groups) {
        return Err(KernelError::param(
            "groups",
            format!("group {g} of {n_groups} groups"),
        ));
    }
    Ok(())
}

/// scanpy's v1.2 connectivities from the counts and the group sizes (`n_groups x n_groups`,
/// row-major; 0 where no edge joins two groups, the diagonal 0).
pub fn connectivities(counts: &[u64], sizes: &[u64]) -> Vec<f64> {
    let g = sizes.len();
    let n: u64 = sizes.iter().sum();
    // Each group's out-edges, inside or not.
    let es: Vec<f64> = (0..g)
        .map(|a| counts[a * g..(a + 1) * g].iter().sum::<u64>() as f64)
        .collect();
    let mut out = vec![0.0; g * g];
    for a in 0..g {
        for b in 0..g {
            if a == b {
                continue;
            }
            let both = (counts[a * g + b] + counts[b * g + a]) as f64;
            if both == 0.0 {
                continue;
            }
            let expected = (es[a] * sizes[b] as f64 + es[b] * sizes[a] as f64) / (n as f64 - 1.0);
            out[a * g + b] = if expected != 0.0 {
                (both / expected).min(1.0)
            } else {
                1.0
            };
        }
    }
    out
}

/// scanpy's `connectivities_tree`: the maximum spanning forest of `conn` (`g x g`, symmetric),
/// as scipy's `minimum_spanning_tree` of its inverse finds it (Kruskal's, the edges taken by
/// increasing `1 / w`, ties in row-major order), each kept edge at `(i, j)`, `i < j`, with its
/// weight; 0 elsewhere.
pub fn spanning_tree(conn: &[f64], g: usize) -> Vec<f64> {
    let mut edges: Vec<(f64, usize, usize)> = (0..g)
        .flat_map(|i| (i + 1..g).map(move |j| (i, j)))
        .filter(|&(i, j)| conn[i * g + j] != 0.0)
        .map(|(i, j)| (1.0 / conn[i * g + j], i, j))
        .collect();
    // Stable: equal weights keep their row-major order.
    edges.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut parent: Vec<usize> = (0..g).collect();
    fn root(parent: &mut [usize], mut x: usize) -> usize {
        while parent[x] != x {
            parent[x] = parent[parent[x]];
            x = parent[x];
        }
        x
    }
    let mut tree = vec![0.0; g * g];
    for (_, i, j) in edges {
        let (a, b) = (root(&mut parent, i), root(&mut parent, j));
        if a != b {
            parent[a] = b;
            tree[i * g + j] = conn[i * g + j];
        }
    }
    tree
}
