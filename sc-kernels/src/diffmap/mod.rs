//! `diffmap` (scanpy's `tl.diffmap`, Coifman and Lafon 2006): the leading eigenvectors of the
//! cell graph's symmetric transition matrix, as scanpy 1.12 computes them:
//! - density normalization: `K = D^-1 W D^-1`, `D` the degrees (column sums) of the
//!   connectivities `W`;
//! - `T = Z^-1 K Z^-1`, `Z` the square roots of `K`'s column sums (scanpy's
//!   `transitions_sym`);
//! - its `n_comps` eigenpairs of largest magnitude ([`crate::eigsh`], as scipy's `eigsh`),
//!   sorted by decreasing eigenvalue, rounded to f32. The first is the steady state (eigenvalue
//!   1 on a connected graph).
//!
//! Computed in f64 (scanpy builds `T` in the graph's f32, then solves in f64). An eigenvector's
//! sign is arbitrary (ARPACK's depends on its start): ours has its entry of largest magnitude
//! positive.
//!
//! `gpu`: the twin, the same bits with the eigensolver's basis on the device.

mod gpu;
#[cfg(test)]
mod tests;

pub use gpu::{diffmap_gpu, KERNELS};

use crate::csr::{build_csr, CsrMatrix};
use crate::eigsh::{eigsh_largest, Eigenpairs};
use crate::error::{KernelError, Result};
use rayon::prelude::*;

/// Residual of the eigenpairs, relative to the largest eigenvalue (1).
pub const TOLERANCE: f64 = 1e-10;

/// The diffusion map: `n_comps` eigenvalues (decreasing) and the `n x n_comps` components
/// (row-major), both f32 as scanpy stores them.
#[derive(Debug, Clone, PartialEq)]
pub struct Diffmap {
    pub evals: Vec<f32>,
    pub components: Vec<f32>,
    pub n_comps: usize,
}

/// scanpy's `transitions_sym` of the connectivities, in f64. `K`'s values are recomputed
/// where needed (the same operations, so the same bits) rather than stored, and each row is
/// written in place: no allocation a row (0.3 s of a million cells' diffusion map went there).
pub fn transitions_sym(graph: &CsrMatrix<f32>) -> Result<CsrMatrix<f64>> {
    crate::graph::check_graph(graph, "diffmap")?;
    let degree: Vec<f64> = (0..graph.n_rows)
        .into_par_iter()
        .map(|i| graph.row(i).1.iter().map(|&w| w as f64).sum())
        .collect();
    if let Some(i) = degree.iter().position(|&d| !(d > 0.0)) {
        return Err(KernelError::Unsupported(format!(
            "diffmap: cell {i} has no neighbours in the graph (its transitions are undefined)"
        )));
    }
    // K = D^-1 W D^-1, value by value.
    let k = |i: usize, j: u32, w: f32| w as f64 / (degree[i] * degree[j as usize]);
    let z: Vec<f64> = (0..graph.n_rows)
        .into_par_iter()
        .map(|i| {
            let (cols, w) = graph.row(i);
            let row = cols.iter().zip(w).map(|(&j, &w)| k(i, j, w));
            row.sum::<f64>().sqrt()
        })
        .collect();
    Ok(build_csr(
        graph.n_rows,
        graph.n_cols,
        |i| graph.row_range(i).len(),
        |i, idx, values| {
            let (cols, w) = graph.row(i);
            idx.copy_from_slice(cols);
            for ((v, &j), &w) in values.iter_mut().zip(cols).zip(w) {
                *v = k(i, j, w) / (z[i] * z[j as usize]);
            }
        },
    ))
}

/// The diffusion map of `graph` (`obsp['connectivities']`) with `n_comps` components (at most
/// `n - 1`), the eigensolver's start drawn from `seed`.
pub fn diffmap(graph: &CsrMatrix<f32>, n_comps: usize, seed: u64) -> Result<Diffmap> {
    let (t, k) = prepare(graph, n_comps)?;
    let apply = |x: &[f64], y: &mut [f64]| {
        y.par_iter_mut().enumerate().for_each(|(i, yi)| {
            let (cols, v) = t.row(i);
            *yi = cols.iter().zip(v).map(|(&j, &a)| a * x[j as usize]).sum();
        })
    };
    Ok(components(eigsh_largest(
        t.n_rows, k, apply, TOLERANCE, seed,
    )?))
}

/// The checks, the transition matrix and the number of eigenpairs wanted.
fn prepare(graph: &CsrMatrix<f32>, n_comps: usize) -> Result<(CsrMatrix<f64>, usize)> {
    if n_comps <= 2 {
        return Err(KernelError::param(
            "n_comps",
            format!("provide any value greater than 2 (got {n_comps})"),
        ));
    }
    let n = graph.n_rows;
    if n < 3 {
        return Err(KernelError::Unsupported(format!(
            "diffmap needs at least 3 cells, got {n}"
        )));
    }
    Ok((transitions_sym(graph)?, n_comps.min(n - 1)))
}

/// The eigenpairs as scanpy stores them: f32, the components row-major.
fn components(pairs: Eigenpairs) -> Diffmap {
    let (n, k) = (pairs.vectors.nrows(), pairs.vectors.ncols());
    let mut components = vec![0f32; n * k];
    let columns: Vec<&[f64]> = (0..k).map(|c| pairs.vectors.col_as_slice(c)).collect();
    components
        .par_chunks_mut(k.max(1))
        .enumerate()
        .for_each(|(r, row)| {
            for (x, column) in row.iter_mut().zip(&columns) {
                *x = column[r] as f32;
            }
        });
    Diffmap {
        evals: pairs.values.iter().map(|&v| v as f32).collect(),
        components,
        n_comps: k,
    }
}
