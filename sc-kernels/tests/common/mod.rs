//! Helpers of the harmony tests: gzip TSV fixtures and the comparison figures.

#![allow(dead_code)]

use sc_kernels::DenseMatrix;
use std::io::Read;
use std::path::{Path, PathBuf};

/// `../shared/data` (or `$SCPIPE_DATA` on a machine without it).
pub fn data_dir() -> PathBuf {
    std::env::var_os("SCPIPE_DATA").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data"),
        PathBuf::from,
    )
}

/// The fixtures of this repository (`tests/data/harmony`).
pub fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/harmony")
}

/// A gzip TSV: the header and the rows of fields.
pub fn read_tsv_gz(path: &Path) -> (Vec<String>, Vec<Vec<String>>) {
    let f = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut text = String::new();
    flate2::read::GzDecoder::new(f)
        .read_to_string(&mut text)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut lines = text.lines();
    let header = lines
        .next()
        .unwrap_or_default()
        .split('\t')
        .map(str::to_owned)
        .collect();
    let rows = lines
        .filter(|l| !l.is_empty())
        .map(|l| l.split('\t').map(str::to_owned).collect())
        .collect();
    (header, rows)
}

/// A numeric gzip TSV as a matrix; `skip` leading columns (e.g. a row index) are dropped.
pub fn read_matrix(path: &Path, skip: usize) -> DenseMatrix<f32> {
    let (header, rows) = read_tsv_gz(path);
    let cols = header.len() - skip;
    let data: Vec<f32> = rows
        .iter()
        .flat_map(|r| {
            assert_eq!(r.len(), cols + skip, "{}: ragged row", path.display());
            r[skip..].iter().map(|v| v.parse::<f32>().unwrap())
        })
        .collect();
    DenseMatrix::new(rows.len(), cols, data).unwrap()
}

/// One text column of a gzip TSV, by header name, as codes of its sorted distinct values.
pub fn read_codes(path: &Path, column: &str) -> (Vec<u32>, Vec<String>) {
    let (header, rows) = read_tsv_gz(path);
    let c = header
        .iter()
        .position(|h| h == column)
        .unwrap_or_else(|| panic!("{}: no column {column} in {header:?}", path.display()));
    // A header one shorter than the rows: the rows start with an unnamed index.
    let shift = rows.first().map_or(0, |r| r.len() - header.len());
    let labels: Vec<&str> = rows.iter().map(|r| r[c + shift].as_str()).collect();
    codes(&labels)
}

/// Codes of labels (their sorted distinct values, as pandas' categories).
pub fn codes(labels: &[&str]) -> (Vec<u32>, Vec<String>) {
    let mut cats: Vec<String> = labels.iter().map(|s| s.to_string()).collect();
    cats.sort();
    cats.dedup();
    let codes = labels
        .iter()
        .map(|l| cats.binary_search_by(|c| c.as_str().cmp(l)).unwrap() as u32)
        .collect();
    (codes, cats)
}

/// Pearson correlation of each column of `a` with the same column of `b`.
pub fn column_correlations(a: &DenseMatrix<f32>, b: &DenseMatrix<f32>) -> Vec<f64> {
    assert_eq!((a.n_rows, a.n_cols), (b.n_rows, b.n_cols));
    let n = a.n_rows as f64;
    (0..a.n_cols)
        .map(|j| {
            let col = |m: &DenseMatrix<f32>| -> Vec<f64> {
                (0..m.n_rows).map(|i| m.get(i, j) as f64).collect()
            };
            let (x, y) = (col(a), col(b));
            let (mx, my) = (x.iter().sum::<f64>() / n, y.iter().sum::<f64>() / n);
            let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
            for (u, v) in x.iter().zip(&y) {
                sxy += (u - mx) * (v - my);
                sxx += (u - mx) * (u - mx);
                syy += (v - my) * (v - my);
            }
            sxy / (sxx * syy).sqrt()
        })
        .collect()
}

/// `||a - b|| / ||b||` (Frobenius).
pub fn relative_l2(a: &DenseMatrix<f32>, b: &DenseMatrix<f32>) -> f64 {
    let num: f64 = a
        .data
        .iter()
        .zip(&b.data)
        .map(|(&x, &y)| (x as f64 - y as f64).powi(2))
        .sum();
    let den: f64 = b.data.iter().map(|&y| (y as f64).powi(2)).sum();
    (num / den).sqrt()
}

/// The gate of the GPU harmony comparisons (GPU against CPU, split across ranks against one
/// GPU): every per-PC correlation at least 0.999 and a relative L2 of at most 0.02. Prints
/// `name`, `details` and both figures first.
pub fn check_harmony_agreement(
    name: &str,
    got: &DenseMatrix<f32>,
    want: &DenseMatrix<f32>,
    details: &str,
) {
    let min_r = min(&column_correlations(got, want));
    let l2 = relative_l2(got, want);
    println!("{name}: {details}; min per-PC r {min_r:.6}, relative L2 {l2:.2e}");
    assert!(min_r >= 0.999, "{name}: min per-PC correlation {min_r}");
    assert!(l2 <= 0.02, "{name}: relative L2 {l2}");
}

pub fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

pub fn min(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}
