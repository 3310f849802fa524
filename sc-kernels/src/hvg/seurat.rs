//! The `seurat` flavour: on `expm1(X)`, dispersion = var / mean (mean 0 -> 1e-12, dispersion
//! 0 -> NaN), then `ln(dispersion)` and `ln(1 + mean)`; `n_bins` equal-width bins of the log mean;
//! normalized dispersion = (d - bin mean) / bin std (ddof 1); a bin whose std is undefined (one
//! gene) gets mean 0 and std = its mean, so its gene scores 1.

use super::binning::{cut_equal_width, group, kahan_mean, normalize_by_bin, welford_std};
use crate::error::Result;

/// `(means, dispersions, dispersions_norm)` from per-gene means and variances of `expm1(X)`.
pub(crate) fn normalized_dispersion(
    mean: &[f64],
    var: &[f64],
    n_bins: usize,
) -> Result<(Vec<f64>, Vec<f64>, Vec<f64>)> {
    let mut m: Vec<f64> = mean
        .iter()
        .map(|&v| if v == 0.0 { 1e-12 } else { v })
        .collect();
    let disp: Vec<f64> = m
        .iter()
        .zip(var)
        .map(|(&mm, &vv)| {
            let d = vv / mm;
            if d == 0.0 {
                f64::NAN
            } else {
                d.ln()
            }
        })
        .collect();
    m.iter_mut().for_each(|v| *v = v.ln_1p());
    let bins = cut_equal_width(&m, n_bins);
    let groups = group(&disp, &bins, n_bins);
    let stats: Vec<(f64, f64)> = groups
        .iter()
        .map(|g| {
            let avg = kahan_mean(g);
            let dev = welford_std(g);
            if dev.is_nan() {
                (0.0, avg)
            } else {
                (avg, dev)
            }
        })
        .collect();
    let norm = normalize_by_bin(&disp, &bins, &stats);
    Ok((m, disp, norm))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_gene_bins_score_one_and_zero_dispersion_is_nan() {
        // Two genes far apart in mean: each alone in its bin.
        let (m, d, n) = normalized_dispersion(&[1.0, 100.0, 0.0], &[2.0, 50.0, 0.0], 20).unwrap();
        assert_eq!(m[2], (1e-12f64).ln_1p());
        assert!((d[0] - 2f64.ln()).abs() < 1e-15);
        assert!(d[2].is_nan() && n[2].is_nan());
        assert_eq!(n[1], 1.0);
        // Gene 0 is alone in its bin too.
        assert_eq!(n[0], 1.0);
    }

    #[test]
    fn bin_normalization() {
        let mean = [1.0, 1.0, 1.0, 1.0];
        let var = [1.0, 2.0, 3.0, 4.0];
        let (_, d, n) = normalized_dispersion(&mean, &var, 20).unwrap();
        let avg = d.iter().sum::<f64>() / 4.0;
        let sd = (d.iter().map(|x| (x - avg).powi(2)).sum::<f64>() / 3.0).sqrt();
        for k in 0..4 {
            assert!((n[k] - (d[k] - avg) / sd).abs() < 1e-12);
        }
    }
}
