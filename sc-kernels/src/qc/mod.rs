//! `calculate_qc_metrics`: per-cell and per-gene quality-control metrics, with scanpy's names,
//! definitions and dtypes (`scanpy.pp.calculate_qc_metrics`, `expr_type="counts"`,
//! `var_type="genes"`).
//!
//! Per cell (`obs`): `n_genes_by_counts` (stored non-zero values), `log1p_n_genes_by_counts`,
//! `total_counts`, `log1p_total_counts`, `pct_counts_in_top_{n}_genes` for each `n` of
//! `percent_top` (ascending), and per QC variable `q`: `total_counts_{q}`, `log1p_total_counts_{q}`,
//! `pct_counts_{q}`.
//! Per gene (`var`): `n_cells_by_counts`, `mean_counts`, `log1p_mean_counts`,
//! `pct_dropout_by_counts`, `total_counts`, `log1p_total_counts`.
//!
//! Sums are accumulated in `f64` and rounded to the element type, where scanpy keeps the matrix's
//! dtype (float32 columns stay float32); for integer counts below 2^24 per sum this is bit-exact.

use crate::columns::{Column, NamedColumns};
use crate::csr::CsrMatrix;
use crate::error::{KernelError, Result};
use crate::real::Real;
use crate::stats;
use rayon::prelude::*;

pub(crate) mod gpu;

/// The step's kernel module, for the warm-up ([`crate::warm_up`]).
pub const KERNELS: crate::gpu::module_cache::KernelSource = gpu::SRC;
pub use gpu::{
    calculate_qc_metrics_blocks, calculate_qc_metrics_gpu, calculate_qc_metrics_streamed,
    qc_sums_gpu, qc_sums_gpu_in_launches, QcBlocks,
};

/// Parameters of [`calculate_qc_metrics`].
#[derive(Debug, Clone)]
pub struct QcParams {
    /// Boolean gene masks whose share of counts is reported (`qc_vars`), e.g. `("mt", is_mito)`.
    pub qc_vars: Vec<(String, Vec<bool>)>,
    /// Ranks at which the cumulative share of the top genes is reported (scanpy: 50, 100, 200, 500).
    pub percent_top: Vec<usize>,
    /// Add the `log1p_` columns.
    pub log1p: bool,
}

impl Default for QcParams {
    fn default() -> Self {
        QcParams {
            qc_vars: Vec::new(),
            percent_top: vec![50, 100, 200, 500],
            log1p: true,
        }
    }
}

/// The metrics, as named columns in scanpy's order and dtypes.
#[derive(Debug, Clone)]
pub struct QcMetrics {
    pub obs: NamedColumns,
    pub var: NamedColumns,
}

impl QcMetrics {
    /// The `obs` column called `name`.
    pub fn obs_column(&self, name: &str) -> Option<&Column> {
        self.obs.iter().find(|(n, _)| n == name).map(|(_, c)| c)
    }
    /// The `var` column called `name`.
    pub fn var_column(&self, name: &str) -> Option<&Column> {
        self.var.iter().find(|(n, _)| n == name).map(|(_, c)| c)
    }
}

/// A column of the element type `T` (`f32` or `f64`) of `value(i)` rounded to it, for `i` in
/// `0..len`, made by one parallel pass (new memory written by all threads at once: its first
/// touch is most of the cost).
fn column_of<T: Real>(len: usize, value: impl Fn(usize) -> f64 + Send + Sync) -> Column {
    if std::mem::size_of::<T>() == 4 {
        Column::F32((0..len).into_par_iter().map(|i| value(i) as f32).collect())
    } else {
        Column::F64((0..len).into_par_iter().map(value).collect())
    }
}

/// The `log1p` of a column of the element type, computed in that type.
fn log1p_col<T: Real>(c: &Column) -> Column {
    match c {
        Column::F32(v) => Column::F32(v.par_iter().map(|x| x.ln_1p()).collect()),
        Column::F64(v) => Column::F64(v.par_iter().map(|x| x.ln_1p()).collect()),
        _ => unreachable!("totals are floating point"),
    }
}

struct RowQc {
    n_genes: i32,
    total: f64,
    top: Vec<f64>,
    qc: Vec<f64>,
}

/// Per column: stored non-zero values and their sum (`f64`), in one pass.
fn col_counts_sums<T: Real>(x: &CsrMatrix<T>) -> (Vec<i64>, Vec<f64>) {
    let nc = x.n_cols;
    stats::ranges(x.n_rows)
        .into_par_iter()
        .map(|range| {
            let mut cnt = vec![0i64; nc];
            let mut sum = vec![0.0f64; nc];
            for i in range {
                let (c, v) = x.row(i);
                for (&cc, &vv) in c.iter().zip(v) {
                    cnt[cc as usize] += (vv != T::ZERO) as i64;
                    sum[cc as usize] += vv.to_f64();
                }
            }
            (cnt, sum)
        })
        .reduce(
            || (vec![0; nc], vec![0.0; nc]),
            |mut a, b| {
                stats::add_into(&mut a.0, &b.0);
                stats::add_into(&mut a.1, &b.1);
                a
            },
        )
}

/// Sums of the `ns[k]` largest values of a row of small non-negative integers, by counting sort.
/// Returns false (leaving `top` alone) when the row holds anything else.
fn top_by_counting<T: Real>(v: &[T], ns: &[usize], hist: &mut Vec<u32>, top: &mut [f64]) -> bool {
    const MAX: f64 = 4096.0;
    let mut maxv = 0.0f64;
    for &a in v {
        let f = a.to_f64();
        if !(f >= 0.0 && f < MAX && f == f.trunc()) {
            return false;
        }
        maxv = maxv.max(f);
    }
    let maxv = maxv as usize;
    hist.clear();
    hist.resize(maxv + 1, 0);
    for &a in v {
        hist[a.to_f64() as usize] += 1;
    }
    let (mut k, mut taken, mut acc) = (0usize, 0usize, 0.0f64);
    for val in (1..=maxv).rev() {
        let cnt = hist[val] as usize;
        if cnt == 0 {
            continue;
        }
        while k < ns.len() && taken + cnt >= ns[k] {
            top[k] = acc + ((ns[k] - taken) * val) as f64;
            k += 1;
        }
        taken += cnt;
        acc += (cnt * val) as f64;
        if k == ns.len() {
            break;
        }
    }
    for t in top.iter_mut().skip(k) {
        *t = acc;
    }
    true
}

/// The sums QC is made of, per cell and per gene (what the CPU and the GPU compute; the
/// columns are assembled from them by [`assemble`]).
#[derive(Debug, Clone, PartialEq)]
pub struct QcSums {
    /// Stored non-zero values per cell.
    pub n_genes: Vec<i32>,
    /// Sum of each cell's values.
    pub total: Vec<f64>,
    /// `top[k][i]`: sum of cell `i`'s `ns[k]` largest values (`ns` = `percent_top` ascending).
    pub top: Vec<Vec<f64>>,
    /// `qc[q][i]`: sum of cell `i`'s values in the genes of QC variable `q`.
    pub qc: Vec<Vec<f64>>,
    /// Cells with a non-zero value, per gene.
    pub gene_n_cells: Vec<i64>,
    /// Sum of each gene's values.
    pub gene_sums: Vec<f64>,
}

impl QcSums {
    /// The sums of no cell: `n_qc` QC variables, `n_top` `percent_top` entries, `n_cols` genes.
    pub fn empty(n_qc: usize, n_top: usize, n_cols: usize) -> Self {
        QcSums {
            n_genes: Vec::new(),
            total: Vec::new(),
            top: vec![Vec::new(); n_top],
            qc: vec![Vec::new(); n_qc],
            gene_n_cells: vec![0; n_cols],
            gene_sums: vec![0.0; n_cols],
        }
    }

    /// Adds the sums of the next block of cells: their per-cell sums follow ours, their per-gene
    /// sums are added to ours.
    pub fn append(&mut self, block: QcSums) {
        self.n_genes.extend(block.n_genes);
        self.total.extend(block.total);
        for (a, b) in self.top.iter_mut().zip(block.top) {
            a.extend(b);
        }
        for (a, b) in self.qc.iter_mut().zip(block.qc) {
            a.extend(b);
        }
        stats::add_into(&mut self.gene_n_cells, &block.gene_n_cells);
        stats::add_into(&mut self.gene_sums, &block.gene_sums);
    }
}

/// Checks the parameters against an `n_cols`-gene matrix; returns `percent_top` ascending.
pub fn check_params(n_cols: usize, params: &QcParams) -> Result<Vec<usize>> {
    for (name, mask) in &params.qc_vars {
        if mask.len() != n_cols {
            return Err(KernelError::Shape(format!(
                "qc_var `{name}` has {} entries for {} genes",
                mask.len(),
                n_cols
            )));
        }
    }
    let mut ns = params.percent_top.clone();
    ns.sort_unstable();
    if let (Some(&lo), Some(&hi)) = (ns.first(), ns.last()) {
        if lo == 0 || hi > n_cols {
            return Err(KernelError::param(
                "percent_top",
                format!("positions outside range of features (1..={})", n_cols),
            ));
        }
    }
    Ok(ns)
}

/// Computes the QC metrics of `x` (counts) on the CPU. Rejects NaN and infinite values.
pub fn calculate_qc_metrics<T: Real>(x: &CsrMatrix<T>, params: &QcParams) -> Result<QcMetrics> {
    x.check_finite()?;
    let ns = check_params(x.n_cols, params)?;
    let sums = qc_sums(x, params, &ns);
    Ok(assemble::<T>(&sums, params, &ns, x.n_rows))
}

/// The per-cell and per-gene sums on the CPU.
pub fn qc_sums<T: Real>(x: &CsrMatrix<T>, params: &QcParams, ns: &[usize]) -> QcSums {
    let nmax = ns.last().copied().unwrap_or(0);
    let rows: Vec<RowQc> = (0..x.n_rows)
        .into_par_iter()
        .map_init(
            || (Vec::<f64>::new(), Vec::<u32>::new()),
            |(buf, hist), i| {
                let (c, v) = x.row(i);
                let n_genes = v.iter().filter(|&&a| a != T::ZERO).count() as i32;
                let total: f64 = v.iter().map(|a| a.to_f64()).sum();
                let mut top = vec![0.0; ns.len()];
                if nmax > 0 && top_by_counting(v, ns, hist, &mut top) {
                    // done: small non-negative integer counts
                } else if nmax > 0 {
                    buf.clear();
                    buf.extend(v.iter().map(|a| a.to_f64()));
                    let desc = |a: &f64, b: &f64| b.partial_cmp(a).unwrap();
                    let mut lim = buf.len();
                    // Partition so that buf[..n] holds the n largest values, largest n first.
                    for (k, &n) in ns.iter().enumerate().rev() {
                        if n < lim {
                            buf[..lim].select_nth_unstable_by(n - 1, desc);
                            lim = n;
                        }
                        top[k] = buf[..n.min(buf.len())].iter().sum();
                    }
                }
                let qc = params
                    .qc_vars
                    .iter()
                    .map(|(_, mask)| {
                        c.iter()
                            .zip(v)
                            .filter(|(&cc, _)| mask[cc as usize])
                            .map(|(_, a)| a.to_f64())
                            .sum()
                    })
                    .collect();
                RowQc {
                    n_genes,
                    total,
                    top,
                    qc,
                }
            },
        )
        .collect();
    let (gene_n_cells, gene_sums) = col_counts_sums(x);
    QcSums {
        n_genes: rows.iter().map(|r| r.n_genes).collect(),
        total: rows.iter().map(|r| r.total).collect(),
        top: (0..ns.len())
            .map(|k| rows.iter().map(|r| r.top[k]).collect())
            .collect(),
        qc: (0..params.qc_vars.len())
            .map(|q| rows.iter().map(|r| r.qc[q]).collect())
            .collect(),
        gene_n_cells,
        gene_sums,
    }
}

/// The `obs` and `var` columns from the sums, in scanpy's order and dtypes (`T` is the
/// matrix's element type).
pub fn assemble<T: Real>(s: &QcSums, params: &QcParams, ns: &[usize], n_rows: usize) -> QcMetrics {
    // Every column is made by one parallel pass over the sums, straight in its dtype.
    // This rank's cells (`n_rows` counts every rank's, for the per-gene means).
    let cells = s.total.len();
    let total_t = |i: usize| T::from_f64(s.total[i]);
    let mut obs: NamedColumns = Vec::new();
    let n_genes: Vec<i32> = s.n_genes.par_iter().copied().collect();
    obs.push(("n_genes_by_counts".into(), Column::I32(n_genes)));
    if params.log1p {
        let l = s.n_genes.par_iter().map(|&n| (n as f64).ln_1p()).collect();
        obs.push(("log1p_n_genes_by_counts".into(), Column::F64(l)));
    }
    // Totals rounded to the element type, as scanpy keeps them.
    let total = column_of::<T>(cells, |i| s.total[i]);
    if params.log1p {
        let l = log1p_col::<T>(&total);
        obs.push(("total_counts".into(), total));
        obs.push(("log1p_total_counts".into(), l));
    } else {
        obs.push(("total_counts".into(), total));
    }
    for (k, n) in ns.iter().enumerate() {
        let pct = s.top[k]
            .par_iter()
            .enumerate()
            .map(|(i, &top)| T::from_f64(top).to_f64() / total_t(i).to_f64() * 100.0)
            .collect();
        obs.push((format!("pct_counts_in_top_{n}_genes"), Column::F64(pct)));
    }
    for (q, (name, _)) in params.qc_vars.iter().enumerate() {
        let col = column_of::<T>(cells, |i| s.qc[q][i]);
        if params.log1p {
            let l = log1p_col::<T>(&col);
            obs.push((format!("total_counts_{name}"), col));
            obs.push((format!("log1p_total_counts_{name}"), l));
        } else {
            obs.push((format!("total_counts_{name}"), col));
        }
        // Computed in the element type, as pandas does on float32 Series.
        let pct = column_of::<T>(cells, |i| {
            (T::from_f64(s.qc[q][i]) / total_t(i) * T::from_f64(100.0)).to_f64()
        });
        obs.push((format!("pct_counts_{name}"), pct));
    }

    // Per gene.
    let nobs = n_rows as f64;
    let mean: Vec<f64> = s.gene_sums.iter().map(|v| v / nobs).collect();
    let mut var: NamedColumns = Vec::new();
    let dropout = s
        .gene_n_cells
        .iter()
        .map(|&c| (1.0 - c as f64 / nobs) * 100.0)
        .collect();
    var.push((
        "n_cells_by_counts".into(),
        Column::I64(s.gene_n_cells.clone()),
    ));
    if params.log1p {
        let l = mean.iter().map(|m| m.ln_1p()).collect();
        var.push(("mean_counts".into(), Column::F64(mean)));
        var.push(("log1p_mean_counts".into(), Column::F64(l)));
    } else {
        var.push(("mean_counts".into(), Column::F64(mean)));
    }
    var.push(("pct_dropout_by_counts".into(), Column::F64(dropout)));
    let gt = column_of::<T>(s.gene_sums.len(), |i| s.gene_sums[i]);
    var.push(("total_counts".into(), gt.clone()));
    if params.log1p {
        var.push(("log1p_total_counts".into(), log1p_col::<T>(&gt)));
    }
    QcMetrics { obs, var }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn m(rows: &[&[f32]]) -> CsrMatrix<f32> {
        let d = crate::dense::DenseMatrix::new(rows.len(), rows[0].len(), rows.concat()).unwrap();
        CsrMatrix::from_dense(&d)
    }

    fn f(c: &Column) -> Vec<f64> {
        c.to_f64()
    }

    #[test]
    fn hand_checked_small_matrix() {
        let x = m(&[
            &[1.0, 0.0, 3.0, 6.0],
            &[0.0, 0.0, 0.0, 0.0],
            &[2.0, 2.0, 0.0, 0.0],
        ]);
        let p = QcParams {
            qc_vars: vec![("mt".into(), vec![false, false, true, true])],
            percent_top: vec![2, 1],
            log1p: true,
        };
        let q = calculate_qc_metrics(&x, &p).unwrap();
        let names: Vec<&str> = q.obs.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "n_genes_by_counts",
                "log1p_n_genes_by_counts",
                "total_counts",
                "log1p_total_counts",
                "pct_counts_in_top_1_genes",
                "pct_counts_in_top_2_genes",
                "total_counts_mt",
                "log1p_total_counts_mt",
                "pct_counts_mt"
            ]
        );
        assert_eq!(
            q.obs_column("n_genes_by_counts"),
            Some(&Column::I32(vec![3, 0, 2]))
        );
        assert_eq!(f(q.obs_column("total_counts").unwrap()), [10.0, 0.0, 4.0]);
        let top1 = f(q.obs_column("pct_counts_in_top_1_genes").unwrap());
        assert_eq!(top1[0], 60.0);
        assert!(top1[1].is_nan());
        assert_eq!(top1[2], 50.0);
        let top2 = f(q.obs_column("pct_counts_in_top_2_genes").unwrap());
        assert_eq!(top2[0], 90.0);
        assert_eq!(top2[2], 100.0);
        assert_eq!(f(q.obs_column("total_counts_mt").unwrap()), [9.0, 0.0, 0.0]);
        let pct = f(q.obs_column("pct_counts_mt").unwrap());
        assert!((pct[0] - 90.0).abs() < 1e-5 && pct[1].is_nan() && pct[2] == 0.0);
        assert_eq!(
            q.var_column("n_cells_by_counts"),
            Some(&Column::I64(vec![2, 1, 1, 1]))
        );
        assert_eq!(
            f(q.var_column("mean_counts").unwrap()),
            [1.0, 2.0 / 3.0, 1.0, 2.0]
        );
        assert_eq!(
            f(q.var_column("pct_dropout_by_counts").unwrap())[0],
            (1.0 - 2.0 / 3.0) * 100.0
        );
        assert_eq!(
            f(q.var_column("total_counts").unwrap()),
            [3.0, 2.0, 3.0, 6.0]
        );
        assert!((f(q.var_column("log1p_total_counts").unwrap())[3] - 7f64.ln()).abs() < 1e-6);
    }

    #[test]
    fn explicit_zeros_are_not_genes() {
        let x = CsrMatrix::new(1, 3, vec![0, 3], vec![0, 1, 2], vec![1.0f32, 0.0, 2.0]).unwrap();
        let q = calculate_qc_metrics(
            &x,
            &QcParams {
                percent_top: vec![],
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(
            q.obs_column("n_genes_by_counts"),
            Some(&Column::I32(vec![2]))
        );
        assert_eq!(
            q.var_column("n_cells_by_counts"),
            Some(&Column::I64(vec![1, 0, 1]))
        );
    }

    #[test]
    fn rejects_non_finite_and_bad_parameters() {
        let x = CsrMatrix::new(1, 3, vec![0, 1], vec![1], vec![f32::NAN]).unwrap();
        assert!(matches!(
            calculate_qc_metrics(&x, &QcParams::default()),
            Err(KernelError::NonFinite { row: 0, col: 1, .. })
        ));
        let x = CsrMatrix::new(1, 3, vec![0, 1], vec![1], vec![1.0f32]).unwrap();
        assert!(matches!(
            calculate_qc_metrics(&x, &QcParams::default()),
            Err(KernelError::InvalidParameter { .. })
        ));
        let p = QcParams {
            qc_vars: vec![("mt".into(), vec![true])],
            percent_top: vec![],
            log1p: false,
        };
        assert!(matches!(
            calculate_qc_metrics(&x, &p),
            Err(KernelError::Shape(_))
        ));
        let q = calculate_qc_metrics(
            &x,
            &QcParams {
                percent_top: vec![],
                log1p: false,
                qc_vars: vec![],
            },
        )
        .unwrap();
        assert_eq!(q.obs.len(), 2);
        assert_eq!(q.var.len(), 4);
    }

    #[test]
    fn counting_and_selection_agree() {
        // Integer rows take the counting path, the same rows plus 0.5 the selection path.
        let rows: Vec<Vec<f32>> = vec![
            vec![3.0, 1.0, 3.0, 7.0, 0.0, 2.0, 2.0, 9.0],
            vec![1.0; 8],
            vec![0.0, 4000.0, 1.0, 0.0, 5.0, 5.0, 5.0, 1.0],
        ];
        for r in rows {
            let mut top = vec![0.0; 3];
            let mut hist = Vec::new();
            assert!(top_by_counting(&r, &[1, 3, 5], &mut hist, &mut top));
            let mut s: Vec<f64> = r.iter().map(|&v| v as f64).collect();
            s.sort_by(|a, b| b.partial_cmp(a).unwrap());
            for (k, n) in [1usize, 3, 5].iter().enumerate() {
                assert_eq!(top[k], s[..*n].iter().sum::<f64>());
            }
        }
        let mut hist = Vec::new();
        assert!(!top_by_counting(&[1.5f32], &[1], &mut hist, &mut [0.0]));
        assert!(!top_by_counting(&[5000.0f32], &[1], &mut hist, &mut [0.0]));
        let x = CsrMatrix::new(1, 4, vec![0, 3], vec![0, 1, 3], vec![1.5f32, 2.5, 0.5]).unwrap();
        let q = calculate_qc_metrics(
            &x,
            &QcParams {
                percent_top: vec![1, 2],
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(
            f(q.obs_column("pct_counts_in_top_1_genes").unwrap())[0],
            2.5 / 4.5 * 100.0
        );
        assert_eq!(
            f(q.obs_column("pct_counts_in_top_2_genes").unwrap())[0],
            4.0 / 4.5 * 100.0
        );
    }

    /// The streamed QC's combination: the sums of row blocks, appended, are the sums of the
    /// whole matrix (per-gene sums of small integers add up exactly).
    #[test]
    fn block_sums_appended_are_the_whole_matrix_sums() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let (rows, cols) = (97, 31);
        let dense: Vec<f32> = (0..rows * cols)
            .map(|_| {
                if rng.random_bool(0.3) {
                    rng.random_range(1..40) as f32
                } else {
                    0.0
                }
            })
            .collect();
        let x = CsrMatrix::from_dense(&crate::dense::DenseMatrix::new(rows, cols, dense).unwrap());
        let params = QcParams {
            qc_vars: vec![("a".into(), (0..cols).map(|j| j % 4 == 0).collect())],
            percent_top: vec![5, 2],
            log1p: true,
        };
        let ns = check_params(cols, &params).unwrap();
        let whole = qc_sums(&x, &params, &ns);
        for budget in [200usize, 1000, 1 << 20] {
            let mut parts = QcSums::empty(1, ns.len(), cols);
            for b in crate::gpu::streamed::csr_blocks(&x, budget) {
                let block = x.take_rows(&b.collect::<Vec<_>>());
                parts.append(qc_sums(&block, &params, &ns));
            }
            assert_eq!(parts, whole, "blocks of {budget} bytes");
        }
    }

    proptest! {
        #[test]
        fn matches_naive_dense(rows in 1usize..12, cols in 1usize..15, seed in any::<u64>()) {
            use rand::{Rng, SeedableRng};
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let dense: Vec<f32> = (0..rows * cols).map(|_| if rng.random_bool(0.4) { rng.random_range(1..20) as f32 } else { 0.0 }).collect();
            let x = CsrMatrix::from_dense(&crate::dense::DenseMatrix::new(rows, cols, dense.clone()).unwrap());
            let mask: Vec<bool> = (0..cols).map(|j| j % 3 == 0).collect();
            let n = cols.min(3);
            let q = calculate_qc_metrics(&x, &QcParams { qc_vars: vec![("a".into(), mask.clone())], percent_top: vec![n], log1p: true }).unwrap();
            for i in 0..rows {
                let r = &dense[i * cols..(i + 1) * cols];
                let tot: f32 = r.iter().sum();
                let mut s = r.to_vec();
                s.sort_by(|a, b| b.partial_cmp(a).unwrap());
                let topn: f32 = s[..n].iter().sum();
                let pt = f(q.obs_column(&format!("pct_counts_in_top_{n}_genes")).unwrap())[i];
                let want = topn as f64 / tot as f64 * 100.0;
                prop_assert!(pt == want || (pt.is_nan() && want.is_nan()));
                prop_assert_eq!(f(q.obs_column("total_counts").unwrap())[i], tot as f64);
                let ta: f32 = r.iter().zip(&mask).filter(|(_, &m)| m).map(|(v, _)| v).sum();
                prop_assert_eq!(f(q.obs_column("total_counts_a").unwrap())[i], ta as f64);
            }
            for j in 0..cols {
                let colv: Vec<f32> = (0..rows).map(|i| dense[i * cols + j]).collect();
                prop_assert_eq!(f(q.var_column("n_cells_by_counts").unwrap())[j], colv.iter().filter(|&&v| v != 0.0).count() as f64);
                prop_assert_eq!(f(q.var_column("total_counts").unwrap())[j], colv.iter().sum::<f32>() as f64);
            }
        }
    }
}
