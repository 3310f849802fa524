//! The pieces shared by the dispersion-based flavours, each reproducing the numpy / pandas
//! operation scanpy calls, down to the rounding: `pd.cut` (equal-width bins or explicit edges),
//! `np.percentile` (linear), the per-bin statistics of `groupby` (mean and std, median and
//! statsmodels' MAD), and the selection (`n_top_genes` with ties kept, or the cutoffs).

/// `np.linspace(start, stop, num)`: `k * step + start`, the last point exactly `stop`.
pub(crate) fn linspace(start: f64, stop: f64, num: usize) -> Vec<f64> {
    let div = num - 1;
    let delta = stop - start;
    let step = delta / div as f64;
    let mut y: Vec<f64> = (0..num)
        .map(|k| {
            if step == 0.0 {
                (k as f64 / div as f64) * delta
            } else {
                k as f64 * step
            }
        })
        .map(|v| v + start)
        .collect();
    y[num - 1] = stop;
    y
}

/// `pd.cut(values, n_bins)` (right-closed bins): the bin of each value, `None` for NaN.
pub(crate) fn cut_equal_width(values: &[f64], n_bins: usize) -> Vec<Option<usize>> {
    let finite = values.iter().copied().filter(|v| !v.is_nan());
    let mn = finite.clone().fold(f64::INFINITY, f64::min);
    let mx = finite.fold(f64::NEG_INFINITY, f64::max);
    if !mn.is_finite() || !mx.is_finite() {
        return vec![None; values.len()];
    }
    let edges = if mn == mx {
        let lo = mn - if mn != 0.0 { 0.001 * mn.abs() } else { 0.001 };
        let hi = mx + if mx != 0.0 { 0.001 * mx.abs() } else { 0.001 };
        linspace(lo, hi, n_bins + 1)
    } else {
        let mut e = linspace(mn, mx, n_bins + 1);
        e[0] -= (mx - mn) * 0.001;
        e
    };
    cut_edges(values, &edges)
}

/// `pd.cut(values, edges, duplicates="drop")` (right-closed): bin `k` is `(edges[k], edges[k+1]]`.
pub(crate) fn cut_edges(values: &[f64], edges: &[f64]) -> Vec<Option<usize>> {
    let mut e: Vec<f64> = edges.to_vec();
    e.dedup();
    values
        .iter()
        .map(|&v| {
            if v.is_nan() {
                return None;
            }
            // searchsorted(side="left"): the first edge >= v.
            let id = e.partition_point(|&x| x < v);
            if id == 0 || id == e.len() {
                None
            } else {
                Some(id - 1)
            }
        })
        .collect()
}

/// `np.percentile(values, q)` with the default linear method, as numpy computes it.
pub(crate) fn percentile(sorted: &[f64], q: f64) -> f64 {
    let n = sorted.len();
    let quantile = q / 100.0;
    // numpy's "linear" method: virtual index (n - 1) * q.
    let virtual_index = (n - 1) as f64 * quantile;
    let prev = virtual_index.floor();
    let gamma = virtual_index - prev;
    let lo = (prev.max(0.0) as usize).min(n - 1);
    let hi = ((prev + 1.0).max(0.0) as usize).min(n - 1);
    let (a, b) = (sorted[lo], sorted[hi]);
    let diff = b - a;
    if gamma >= 0.5 {
        b - diff * (1.0 - gamma)
    } else {
        a + diff * gamma
    }
}

/// Mean as pandas' groupby computes it (Kahan-compensated sum over the non-NaN values).
pub(crate) fn kahan_mean(values: &[f64]) -> f64 {
    let mut sum = 0.0f64;
    let mut comp = 0.0f64;
    let mut n = 0usize;
    for &v in values.iter().filter(|v| !v.is_nan()) {
        let y = v - comp;
        let t = sum + y;
        comp = (t - sum) - y;
        sum = t;
        n += 1;
    }
    if n == 0 {
        f64::NAN
    } else {
        sum / n as f64
    }
}

/// Standard deviation (ddof = 1) as pandas' groupby computes it (Welford's updates over the
/// non-NaN values); NaN with fewer than two values.
pub(crate) fn welford_std(values: &[f64]) -> f64 {
    let mut n = 0.0f64;
    let mut mean = 0.0f64;
    let mut m2 = 0.0f64;
    for &v in values.iter().filter(|v| !v.is_nan()) {
        n += 1.0;
        let old = mean;
        mean += (v - old) / n;
        m2 += (v - mean) * (v - old);
    }
    if n < 2.0 {
        f64::NAN
    } else {
        (m2 / (n - 1.0)).sqrt()
    }
}

/// `np.median` of the values (NaN if empty or if any is NaN).
pub(crate) fn np_median(values: &[f64]) -> f64 {
    crate::stats::median(values)
}

/// statsmodels' `mad`: `median(|a - median(a)| / 0.6744897501960817)`.
pub(crate) fn mad(values: &[f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let c = 0.6744897501960817f64;
    let center = np_median(values);
    let err: Vec<f64> = values.iter().map(|v| (v - center).abs() / c).collect();
    np_median(&err)
}

/// Groups `values` by bin: the values of each bin, in input order.
pub(crate) fn group(values: &[f64], bins: &[Option<usize>], n_bins: usize) -> Vec<Vec<f64>> {
    let mut g = vec![Vec::new(); n_bins];
    for (&v, b) in values.iter().zip(bins) {
        if let Some(b) = b {
            g[*b].push(v);
        }
    }
    g
}

/// `np.nan_to_num(v, nan=nan)`: NaN to `nan`, infinities to the largest finite values.
/// Normalised dispersion of each gene against its bin's (centre, scale); NaN for genes in no bin.
pub(crate) fn normalize_by_bin(
    disp: &[f64],
    bins: &[Option<usize>],
    stats: &[(f64, f64)],
) -> Vec<f64> {
    disp.iter()
        .zip(bins)
        .map(|(&d, b)| match b {
            Some(b) => (d - stats[*b].0) / stats[*b].1,
            None => f64::NAN,
        })
        .collect()
}

pub(crate) fn nan_to_num(v: f64, nan: f64) -> f64 {
    if v.is_nan() {
        nan
    } else if v == f64::INFINITY {
        f64::MAX
    } else if v == f64::NEG_INFINITY {
        f64::MIN
    } else {
        v
    }
}

/// scanpy's `_nth_highest`: the `n`-th largest non-NaN value (`n` clipped to their number);
/// `None` when every value is NaN.
pub(crate) fn nth_highest(values: &[f64], n: usize) -> Option<f64> {
    let mut x: Vec<f64> = values.iter().copied().filter(|v| !v.is_nan()).collect();
    if x.is_empty() || n == 0 {
        return None;
    }
    let n = n.min(x.len());
    x.sort_by(|a, b| b.partial_cmp(a).unwrap());
    Some(x[n - 1])
}

/// Selection on normalized dispersions: the top `n_top` (ties at the cut-off kept), or the
/// mean / dispersion cutoffs.
pub(crate) fn select(mean: &[f64], disp_norm: &[f64], cutoff: &super::Selection) -> Vec<bool> {
    match *cutoff {
        super::Selection::NTop(n) => {
            let n = n.min(disp_norm.len());
            match nth_highest(disp_norm, n) {
                None => vec![false; disp_norm.len()],
                Some(cut) => disp_norm
                    .iter()
                    .map(|&d| nan_to_num(d, f64::NEG_INFINITY) >= cut)
                    .collect(),
            }
        }
        super::Selection::Cutoffs {
            min_disp,
            max_disp,
            min_mean,
            max_mean,
        } => mean
            .iter()
            .zip(disp_norm)
            .map(|(&m, &d)| {
                let d = nan_to_num(d, 0.0);
                m > min_mean && m < max_mean && d > min_disp && d < max_disp
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linspace_and_cut_follow_numpy_and_pandas() {
        assert_eq!(linspace(0.0, 1.0, 5), [0.0, 0.25, 0.5, 0.75, 1.0]);
        // Right-closed: 0.5 falls in the first of two bins; the minimum is inside the first.
        assert_eq!(
            cut_equal_width(&[0.0, 0.5, 0.51, 1.0, f64::NAN], 2),
            [Some(0), Some(0), Some(1), Some(1), None]
        );
        // All equal: bins are widened around the value.
        assert_eq!(cut_equal_width(&[2.0, 2.0], 3), [Some(1), Some(1)]);
        assert_eq!(
            cut_edges(
                &[1.0, 2.0, 3.0],
                &[f64::NEG_INFINITY, 1.0, 1.0, 2.5, f64::INFINITY]
            ),
            [Some(0), Some(1), Some(2)]
        );
    }

    #[test]
    fn percentile_matches_numpy() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&v, 50.0), 2.5);
        assert_eq!(percentile(&v, 100.0), 4.0);
        assert_eq!(percentile(&v, 10.0), 1.3);
        assert_eq!(percentile(&[7.0], 35.0), 7.0);
        // Values numpy gives (np.percentile(np.arange(9781) / 7, q)).
        let w: Vec<f64> = (0..9781).map(|i| i as f64 / 7.0).collect();
        assert_eq!(percentile(&w, 95.0), 1327.2857142857142);
        assert_eq!(percentile(&w, 15.0), 209.57142857142858);
    }

    #[test]
    fn group_statistics() {
        assert_eq!(kahan_mean(&[1.0, f64::NAN, 3.0]), 2.0);
        assert!(kahan_mean(&[f64::NAN]).is_nan());
        assert!((welford_std(&[1.0, 2.0, 3.0, 4.0]) - (5.0f64 / 3.0).sqrt()).abs() < 1e-15);
        assert!(welford_std(&[1.0]).is_nan());
        assert!((mad(&[1.0, 2.0, 3.0, 4.0, 100.0]) - 1.0 / 0.6744897501960817).abs() < 1e-15);
    }

    #[test]
    fn selection_keeps_ties_and_handles_nan() {
        let d = [1.0, f64::NAN, 3.0, 3.0, 2.0];
        let m = [0.1; 5];
        assert_eq!(
            select(&m, &d, &crate::hvg::Selection::NTop(1)),
            [false, false, true, true, false]
        );
        assert_eq!(
            select(&m, &d, &crate::hvg::Selection::NTop(10)),
            [true, false, true, true, true]
        );
        let c = crate::hvg::Selection::Cutoffs {
            min_disp: 0.5,
            max_disp: f64::INFINITY,
            min_mean: 0.0125,
            max_mean: 3.0,
        };
        assert_eq!(select(&m, &d, &c), [true, false, true, true, true]);
    }
}
