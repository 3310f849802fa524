//! `dpt` (scanpy's `tl.dpt`, Haghverdi et al. 2016) without branchings: each cell's diffusion
//! pseudotime, its DPT distance from the root cell scaled to at most 1, as scanpy 1.12 computes
//! it in f32:
//! - `d(i)^2 = sum_j (l_j / (1 - l_j) (x_root,j - x_i,j))^2` over the diffusion components `j`
//!   whose eigenvalue `l_j` is below 0.9994, plus `sum_j (x_root,j - x_i,j)^2` over the others
//!   (the stationary ones, unscaled: scanpy's historical definition);
//! - cells in another connected component than the root: infinite;
//! - divided by the largest finite distance.
//!
//! [`pseudotime_gpu`] computes the distances on a GPU, with the same bits.

use crate::dense::DenseMatrix;
use crate::error::{KernelError, Result};
use rayon::prelude::*;

mod branchings;
mod gpu;
pub use branchings::{branchings, BranchingParams, Branchings};
pub use gpu::{pseudotime_gpu, KERNELS};

/// Eigenvalues from which a component counts as stationary (scanpy's f32 precision guard).
pub const STATIONARY: f32 = 0.9994;

/// The pseudotime of every cell from `root`; `basis` the first `n_dcs` diffusion components
/// (`n x n_dcs`), `evals` their eigenvalues, `component` each cell's connected component.
pub fn pseudotime(
    basis: &DenseMatrix<f32>,
    evals: &[f32],
    root: usize,
    component: &[u32],
) -> Result<Vec<f32>> {
    check_pseudotime(basis, evals, root, component)?;
    Ok(scaled(distance_row(basis, evals, root, component)))
}

/// Refuses eigenvalues or component labels that do not fit the basis, or a root beyond it.
fn check_pseudotime(
    basis: &DenseMatrix<f32>,
    evals: &[f32],
    root: usize,
    component: &[u32],
) -> Result<()> {
    let (n, k) = (basis.n_rows, basis.n_cols);
    if evals.len() != k || component.len() != n {
        return Err(KernelError::Shape(format!(
            "dpt: {} eigenvalues and {} component labels for {n} cells x {k} components",
            evals.len(),
            component.len()
        )));
    }
    if root >= n {
        return Err(KernelError::param(
            "iroot",
            format!("root cell {root} does not exist ({n} cells)"),
        ));
    }
    Ok(())
}

/// The distances divided by the largest finite one (as they are when it is 0).
fn scaled(distance: Vec<f32>) -> Vec<f32> {
    let largest = distance
        .iter()
        .copied()
        .filter(|d| d.is_finite())
        .fold(0f32, f32::max);
    distance
        .into_iter()
        .map(|d| if largest > 0.0 { d / largest } else { d })
        .collect()
}

/// Every cell's DPT distance from cell `from` (unscaled), in scanpy's f32 order: its two sums
/// over the components in order, infinite in another connected component.
pub(crate) fn distance_row(
    basis: &DenseMatrix<f32>,
    evals: &[f32],
    from: usize,
    component: &[u32],
) -> Vec<f32> {
    let x_from = basis.row(from);
    (0..basis.n_rows)
        .into_par_iter()
        .map(|i| {
            if component[i] != component[from] {
                return f32::INFINITY;
            }
            let x = basis.row(i);
            let mut scaled = 0f32;
            let mut stationary = 0f32;
            for (j, (&a, &b)) in x_from.iter().zip(x).enumerate() {
                let diff = a - b;
                if evals[j] < STATIONARY {
                    let v = evals[j] / (1.0 - evals[j]) * diff;
                    scaled += v * v;
                } else {
                    stationary += diff * diff;
                }
            }
            (scaled + stationary).sqrt()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scanpys_distance_with_its_stationary_terms_and_components() {
        // Three components: stationary (1.0), 0.5, 0.9.
        let basis = DenseMatrix::new(
            4,
            3,
            vec![0.5, 0.1, 0.2, 0.5, 0.3, 0.2, 0.4, 0.1, 0.6, 0.1, 0.1, 0.1],
        )
        .unwrap();
        let evals = [1.0f32, 0.5, 0.9];
        let t = pseudotime(&basis, &evals, 0, &[0, 0, 0, 1]).unwrap();
        let d1 = (0.2f32 * 1.0).powi(2); // 0.5 / 0.5 * (0.1 - 0.3)
        let d2 = (0.4f32 * 9.0).powi(2) + 0.1f32.powi(2); // 0.9 / 0.1 * -0.4; stationary 0.1
        let (d1, d2) = (d1.sqrt(), d2.sqrt());
        assert_eq!(t[0], 0.0);
        assert!(
            (t[1] - d1 / d2).abs() < 1e-6 && (t[2] - 1.0).abs() < 1e-6,
            "{t:?}"
        );
        assert!(t[3].is_infinite());
    }

    #[test]
    fn a_missing_root_is_named() {
        let basis = DenseMatrix::new(2, 1, vec![0.0, 1.0]).unwrap();
        let e = pseudotime(&basis, &[0.5], 2, &[0, 0]).unwrap_err();
        assert!(e.to_string().contains("root cell 2"), "{e}");
    }
}
