use super::passes::{col_pass, col_pass_expm1, group_sizes, rows_by_code};
use super::*;
use crate::dense::DenseMatrix;
use crate::stats::ranges;
use rayon::prelude::*;

/// Log-normalized-like data with an all-zero gene (0), a constant gene (1) and a gene seen in
/// one cell only (2).
fn data(cells: usize, genes: usize, seed: u64) -> CsrMatrix<f32> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut d = vec![0f32; cells * genes];
    for i in 0..cells {
        for j in 3..genes {
            if rng.random_bool(0.3 + 0.5 * (j as f64 / genes as f64)) {
                d[i * genes + j] = rng.random_range(1..(2 + j / 3)) as f32;
            }
        }
        d[i * genes + 1] = 2.0;
    }
    d[genes + 2] = 5.0;
    CsrMatrix::from_dense(&DenseMatrix::new(cells, genes, d).unwrap())
}

#[test]
fn every_flavour_handles_zero_constant_and_rare_genes() {
    let counts = data(60, 80, 1);
    let mut lognorm = counts.clone();
    crate::normalize::normalize_total(
        &mut lognorm,
        &crate::normalize::NormalizeParams {
            target_sum: Some(1e4),
            ..Default::default()
        },
    )
    .unwrap();
    crate::log1p::log1p(&mut lognorm, None).unwrap();
    let batches = Batches {
        codes: (0..60).map(|i| (i % 3) as u32).collect(),
        categories: vec!["c".into(), "a".into(), "b".into()],
    };
    for flavor in [
        Flavor::Seurat,
        Flavor::CellRanger,
        Flavor::SeuratV3,
        Flavor::SeuratV3Paper,
    ] {
        let x = if matches!(flavor, Flavor::SeuratV3 | Flavor::SeuratV3Paper) {
            &counts
        } else {
            &lognorm
        };
        for b in [None, Some(&batches)] {
            for n_top in [Some(10), None] {
                let p = HvgParams {
                    flavor,
                    n_top_genes: n_top,
                    ..Default::default()
                };
                let r = highly_variable_genes(x, &p, b, None)
                    .unwrap_or_else(|e| panic!("{flavor:?} {b:?} {n_top:?}: {e}"));
                assert_eq!(r.highly_variable.len(), 80);
                // The all-zero gene is never selected by the dispersion flavours.
                if matches!(flavor, Flavor::Seurat | Flavor::CellRanger) {
                    assert!(!r.highly_variable[0], "{flavor:?}");
                }
                if let Some(n) = n_top {
                    let k = r.highly_variable.iter().filter(|&&h| h).count();
                    if b.is_some() || matches!(flavor, Flavor::SeuratV3 | Flavor::SeuratV3Paper) {
                        assert_eq!(k, n, "{flavor:?} {b:?}");
                    } else {
                        assert!(k >= n, "{flavor:?}: ties are kept");
                    }
                }
                for (name, c) in &r.columns {
                    assert_eq!(c.len(), 80, "{name}");
                }
            }
        }
    }
}

#[test]
fn refuses_bad_input() {
    let x = data(10, 20, 2);
    let p = HvgParams {
        n_top_genes: Some(0),
        ..Default::default()
    };
    assert!(highly_variable_genes(&x, &p, None, None).is_err());
    let one = x
        .select_rows(&[
            true, false, false, false, false, false, false, false, false, false,
        ])
        .unwrap();
    assert!(highly_variable_genes(&one, &HvgParams::default(), None, None).is_err());
    let b = Batches {
        codes: vec![0; 9],
        categories: vec!["a".into()],
    };
    assert!(matches!(
        highly_variable_genes(&x, &HvgParams::default(), Some(&b), None),
        Err(KernelError::Shape(_))
    ));
    let b = Batches {
        codes: vec![3; 10],
        categories: vec!["a".into()],
    };
    assert!(highly_variable_genes(&x, &HvgParams::default(), Some(&b), None).is_err());
    let mut bad = x.clone();
    bad.data[0] = f32::NAN;
    assert!(matches!(
        highly_variable_genes(&bad, &HvgParams::default(), None, None),
        Err(KernelError::NonFinite { .. })
    ));
    assert!(Flavor::from_name("pearson").is_err());
    assert_eq!(Flavor::from_name("seurat_v3").unwrap().name(), "seurat_v3");
    for f in Flavor::ALL {
        assert_eq!(Flavor::from_name(f.name()).unwrap(), f);
    }
    // seurat_v3 with too few non-constant genes for the loess.
    let tiny = data(10, 5, 3);
    let p = HvgParams {
        flavor: Flavor::SeuratV3,
        ..Default::default()
    };
    assert!(highly_variable_genes(&tiny, &p, None, None).is_err());
}

/// The GPU's way on the host: one sequential pass over all rows, each row adding into its
/// batch's slot (codes per row instead of row lists per batch).
struct CodePasses<'a> {
    x: &'a CsrMatrix<f32>,
    codes: Option<(&'a [u32], usize)>,
}

impl CodePasses<'_> {
    fn pass(&self, per_group: bool, f: impl Fn(f32, usize) -> (f64, f64)) -> Vec<Moments> {
        let g = self.x.n_cols;
        let codes = self.codes.filter(|_| per_group);
        let nb = codes.map_or(1, |c| c.1);
        let mut m = Moments::zeros(nb * g);
        for i in 0..self.x.n_rows {
            let off = codes.map_or(0, |c| c.0[i] as usize * g);
            let (c, v) = self.x.row(i);
            for (&cc, &vv) in c.iter().zip(v) {
                let j = off + cc as usize;
                let (a, b) = f(vv, j);
                m.sums[j] += a;
                m.sq[j] += b;
                m.positive[j] += (vv > 0.0) as i64;
            }
        }
        (0..nb)
            .map(|k| Moments {
                sums: m.sums[k * g..(k + 1) * g].to_vec(),
                sq: m.sq[k * g..(k + 1) * g].to_vec(),
                positive: m.positive[k * g..(k + 1) * g].to_vec(),
            })
            .collect()
    }
}

impl ColumnPasses for CodePasses<'_> {
    fn n_rows(&self) -> usize {
        self.x.n_rows
    }
    fn n_cols(&self) -> usize {
        self.x.n_cols
    }
    fn moments(&self, t: Transform, per_group: bool) -> Result<Vec<Moments>> {
        Ok(self.pass(per_group, |v, _| match t {
            Transform::Identity => (v as f64, (v * v) as f64),
            Transform::Expm1 => {
                let e = v.exp_m1();
                (e as f64, (e * e) as f64)
            }
            Transform::Expm1Base(b) => {
                let e = (v as f64 * b.ln()).exp_m1();
                (e, e * e)
            }
        }))
    }
    fn clipped_sums(&self, clip: &[f64]) -> Result<(Vec<f64>, Vec<f64>)> {
        let m = self.pass(true, |v, j| {
            let e = (v as f64).min(clip[j]);
            (e, e * e)
        });
        Ok((
            m.iter().flat_map(|m| m.sums.clone()).collect(),
            m.iter().flat_map(|m| m.sq.clone()).collect(),
        ))
    }
}

fn close(a: &Column, b: &Column, what: &str) {
    let f = |c: &Column| -> Vec<f64> {
        match c {
            Column::Bool(v) => v.iter().map(|&x| x as u8 as f64).collect(),
            Column::I32(v) => v.iter().map(|&x| x as f64).collect(),
            Column::I64(v) => v.iter().map(|&x| x as f64).collect(),
            Column::F32(v) => v.iter().map(|&x| x as f64).collect(),
            Column::F64(v) => v.clone(),
        }
    };
    for (k, (x, y)) in f(a).iter().zip(f(b)).enumerate() {
        assert!(
            (x.is_nan() && y.is_nan()) || (x - y).abs() <= 1e-5 * (1.0 + x.abs()),
            "{what}[{k}]: {x} vs {y}"
        );
    }
}

#[test]
fn per_row_codes_give_the_result_of_per_batch_row_lists() {
    let counts = data(90, 70, 4);
    let mut lognorm = counts.clone();
    crate::normalize::normalize_total(&mut lognorm, &Default::default()).unwrap();
    crate::log1p::log1p(&mut lognorm, None).unwrap();
    // An empty category (1) and names out of code order.
    let codes: Vec<u32> = (0..90).map(|i| [0, 2, 3][i % 3]).collect();
    let b = Batches {
        codes: codes.clone(),
        categories: vec!["z".into(), "empty".into(), "a".into(), "m".into()],
    };
    for (flavor, base) in [
        (Flavor::Seurat, None),
        (Flavor::Seurat, Some(2.0)),
        (Flavor::CellRanger, None),
        (Flavor::SeuratV3, None),
        (Flavor::SeuratV3Paper, None),
    ] {
        let x = if matches!(flavor, Flavor::SeuratV3 | Flavor::SeuratV3Paper) {
            &counts
        } else {
            &lognorm
        };
        for batched in [false, true] {
            for n_top in [Some(12), None] {
                let p = HvgParams {
                    flavor,
                    n_top_genes: n_top,
                    log1p_base: base,
                    ..Default::default()
                };
                let batches = batched.then_some(&b);
                let cpu = highly_variable_genes(x, &p, batches, None).unwrap();
                let passes = CodePasses {
                    x,
                    codes: batched.then_some((&codes[..], 4)),
                };
                let other = run(&passes, &p, batches, None).unwrap();
                let what = format!("{flavor:?} {base:?} {batched} {n_top:?}");
                assert_eq!(cpu.highly_variable, other.highly_variable, "{what}");
                assert_eq!(cpu.columns.len(), other.columns.len());
                for ((na, ca), (nb, cb)) in cpu.columns.iter().zip(&other.columns) {
                    assert_eq!(na, nb);
                    close(ca, cb, &format!("{what} {na}"));
                }
            }
        }
    }
}

/// The column passes before their accumulators were interleaved: three arrays per part.
fn col_pass_three_arrays(
    x: &CsrMatrix<f32>,
    rows: Option<&[usize]>,
    f: impl Fn(f32) -> (f64, f64) + Sync,
) -> (Vec<f64>, Vec<f64>, Vec<i64>) {
    use crate::stats::add_into;
    let n = rows.map_or(x.n_rows, |r| r.len());
    let nc = x.n_cols;
    ranges(n)
        .into_par_iter()
        .map(|range| {
            let (mut s, mut q, mut c) = (vec![0.0; nc], vec![0.0; nc], vec![0i64; nc]);
            for k in range {
                let (ci, vi) = x.row(rows.map_or(k, |r| r[k]));
                for (&cc, &vv) in ci.iter().zip(vi) {
                    let (a, b) = f(vv);
                    s[cc as usize] += a;
                    q[cc as usize] += b;
                    c[cc as usize] += (vv > 0.0) as i64;
                }
            }
            (s, q, c)
        })
        .reduce(
            || (vec![0.0; nc], vec![0.0; nc], vec![0; nc]),
            |mut a, b| {
                add_into(&mut a.0, &b.0);
                add_into(&mut a.1, &b.1);
                add_into(&mut a.2, &b.2);
                a
            },
        )
}

#[test]
fn interleaved_col_pass_equals_three_arrays() {
    // One thread: the same parts reduced in the same order, so the sums are bit-identical.
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    pool.install(|| {
        for seed in 0..4 {
            let mut x = data(300, 57, seed);
            x.data.iter_mut().for_each(|v| *v = (*v * 0.37).ln_1p());
            let rows: Vec<usize> = (0..300).filter(|i| i % 3 != 1).collect();
            for r in [None, Some(&rows[..])] {
                let plain = |v: f32| (v as f64, (v * v) as f64);
                assert_eq!(col_pass(&x, r, plain), col_pass_three_arrays(&x, r, plain));
                let expm1 = |v: f32| {
                    let e = crate::fastmath::exp_m1_f32(v);
                    (e as f64, (e * e) as f64)
                };
                assert_eq!(col_pass_expm1(&x, r), col_pass_three_arrays(&x, r, expm1));
            }
        }
    });
}

#[test]
fn cpu_groups_follow_codes_and_sizes() {
    let x = data(12, 9, 5);
    let b = Batches {
        codes: vec![2, 0, 2, 2, 0, 2, 0, 0, 2, 2, 0, 2],
        categories: vec!["x".into(), "none".into(), "y".into()],
    };
    assert_eq!(group_sizes(12, Some(&b)), [5, 0, 7]);
    assert_eq!(group_sizes(12, None), [12]);
    let rows = rows_by_code(&b);
    assert_eq!(rows[0], [1, 4, 6, 7, 10]);
    assert!(rows[1].is_empty());
    let p = CpuPasses::new(&x, Some(&b));
    let m = p.moments(Transform::Identity, true).unwrap();
    assert_eq!(m.len(), 3);
    assert_eq!(m[1], Moments::zeros(9));
    let (s, q, c) = col_pass(&x, Some(&rows[2]), |v: f32| (v as f64, (v * v) as f64));
    assert_eq!((&m[2].sums, &m[2].sq, &m[2].positive), (&s, &q, &c));
    let all = p.moments(Transform::Identity, false).unwrap();
    assert_eq!(all.len(), 1);
    for j in 0..9 {
        assert!((all[0].sums[j] - m[0].sums[j] - m[2].sums[j]).abs() < 1e-9);
    }
    // Clipped sums: group 1 is empty; a clip of +inf is the plain sum.
    let mut clip = vec![f64::INFINITY; 27];
    clip[18..].iter_mut().for_each(|c| *c = 1.0);
    let (cs, cq) = p.clipped_sums(&clip).unwrap();
    assert_eq!(&cs[..9], &m[0].sums[..]);
    assert!(cs[9..18].iter().chain(&cq[9..18]).all(|&v| v == 0.0));
    let d = x.to_dense();
    for j in 0..9 {
        let ones = rows[2].iter().filter(|&&i| d.get(i, j) > 0.0).count() as f64;
        assert_eq!((cs[18 + j], cq[18 + j]), (ones, ones));
    }
}
