//! The automatic doublet threshold: scikit-image's `threshold_minimum` (Glasbey's minimum
//! method) on the simulated doublets' scores, as scrublet calls it. A 256-bin histogram over the
//! scores' range (numpy's bins, edges and rounding), smoothed by a running mean of 3 (scipy's
//! `uniform_filter1d`, reflected edges, f32 as scikit-image keeps it) until at most two local
//! maxima remain; the threshold is the centre of the lowest bin between the two.

const BINS: usize = 256;
const MAX_ITERATIONS: usize = 10_000;

/// The threshold, or `None` where scikit-image raises (no two maxima after smoothing, or
/// no values): scanpy then calls no doublets.
pub fn threshold_minimum(values: &[f64]) -> Option<f64> {
    let (counts, centres) = histogram(values)?;
    let mut smooth: Vec<f32> = counts.iter().map(|&c| c as f32).collect();
    let mut maxima = Vec::new();
    let mut iteration = 0;
    while iteration < MAX_ITERATIONS {
        smooth = running_mean_of_3(&smooth);
        maxima = local_maxima(&smooth);
        if maxima.len() < 3 {
            break;
        }
        iteration += 1;
    }
    if maxima.len() != 2 || iteration >= MAX_ITERATIONS - 1 {
        return None;
    }
    let (lo, hi) = (maxima[0], maxima[1]);
    let mut best = lo;
    for i in lo..=hi {
        if smooth[i] < smooth[best] {
            best = i;
        }
    }
    Some(centres[best])
}

/// numpy's `histogram(values, 256, range=(min, max))`: the counts and the bins' centres.
fn histogram(values: &[f64]) -> Option<(Vec<u64>, Vec<f64>)> {
    let (mut first, mut last) = values
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| {
            (lo.min(v), hi.max(v))
        });
    if values.is_empty() || !first.is_finite() || !last.is_finite() {
        return None;
    }
    if first == last {
        first -= 0.5;
        last += 0.5;
    }
    // np.linspace: i * step + start, the last edge set to stop.
    let step = (last - first) / BINS as f64;
    let mut edges: Vec<f64> = (0..=BINS).map(|i| i as f64 * step + first).collect();
    edges[BINS] = last;
    let denom = last - first;
    let mut counts = vec![0u64; BINS];
    for &v in values {
        let mut i = (((v - first) / denom) * BINS as f64) as usize;
        if i == BINS {
            i -= 1;
        }
        if v < edges[i] {
            i -= 1;
        }
        if v >= edges[i + 1] && i != BINS - 1 {
            i += 1;
        }
        counts[i] += 1;
    }
    let centres = (0..BINS).map(|i| (edges[i] + edges[i + 1]) / 2.0).collect();
    Some((counts, centres))
}

/// scipy's `uniform_filter1d(h, 3)` on f32 values: a running mean in f64 over the line
/// extended by reflection (`h[-1] = h[0]`, `h[n] = h[n-1]`), each output rounded to f32.
fn running_mean_of_3(h: &[f32]) -> Vec<f32> {
    let n = h.len();
    let at = |i: isize| -> f64 {
        let j = if i < 0 {
            (-i - 1) as usize
        } else if i as usize >= n {
            2 * n - 1 - i as usize
        } else {
            i as usize
        };
        h[j.min(n - 1)] as f64
    };
    let mut out = Vec::with_capacity(n);
    let mut tmp = (at(-1) + at(0) + at(1)) / 3.0;
    out.push(tmp as f32);
    for i in 1..n as isize {
        tmp += (at(i + 1) - at(i - 2)) / 3.0;
        out.push(tmp as f32);
    }
    out
}

/// scikit-image's local maxima: where a rise (or the start) turns into a fall, plateaus counted
/// once.
fn local_maxima(h: &[f32]) -> Vec<usize> {
    let mut maxima = Vec::new();
    let mut rising = true;
    for i in 0..h.len().saturating_sub(1) {
        if rising {
            if h[i + 1] < h[i] {
                rising = false;
                maxima.push(i);
            }
        } else if h[i + 1] > h[i] {
            rising = true;
        }
    }
    maxima
}
