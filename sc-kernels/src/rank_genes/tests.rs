//! Hand-checked cases, the sparse shortcuts against a dense brute force, determinism, the
//! errors, and scanpy's own tables and scipy's p-values.

use super::gene_columns::GeneColumns;
use super::scanpy_fixture::SCANPY;
use super::*;
use crate::dense::DenseMatrix;
use rand::{Rng, SeedableRng};

fn params(method: Method, tie_correct: bool) -> RankGenesParams {
    RankGenesParams {
        method,
        n_genes: None,
        tie_correct,
    }
}

fn csr(n_rows: usize, n_cols: usize, dense: Vec<f32>) -> CsrMatrix<f32> {
    CsrMatrix::from_dense(&DenseMatrix::new(n_rows, n_cols, dense).unwrap())
}

fn rel_close(a: f64, b: f64, tol: f64) -> bool {
    a == b || (a.is_nan() && b.is_nan()) || (a - b).abs() <= tol * a.abs().max(b.abs())
}

/// The matrix of [`super::scanpy_fixture`]: 40 cells x 12 genes in 3 groups, values in quarters
/// (exact in f32) from an integer pattern; genes 0-7 generic (raised where `gene % 3` is the
/// cell's group), 8 constant, 9 mostly negative, 10 all zero, 11 constant in group 0 only.
pub(super) fn fixture_matrix() -> (CsrMatrix<f32>, Vec<u32>) {
    let (n_cells, n_genes) = (40usize, 12usize);
    let groups: Vec<u32> = (0..n_cells).map(|i| ((i * 7 + i / 5) % 3) as u32).collect();
    let mut dense = vec![0f32; n_cells * n_genes];
    for i in 0..n_cells {
        for j in 0..n_genes {
            let h = (i * i * 7 + j * j * 3 + i * j * 11 + i * 5 + j) % 23;
            let mut k = if h < 9 { 0 } else { h - 8 } as f32;
            if j % 3 == groups[i] as usize && k > 0.0 {
                k += 6.0;
            }
            dense[i * n_genes + j] = match j {
                0..=7 => k / 4.0,
                8 => 1.25,
                9 => (k - 6.0) / 4.0,
                10 => 0.0,
                _ => {
                    if groups[i] == 0 {
                        0.5
                    } else {
                        0.0
                    }
                }
            };
        }
    }
    (csr(n_cells, n_genes, dense), groups)
}

#[test]
fn matches_scanpy_on_the_fixture() {
    let (x, groups) = fixture_matrix();
    // Largest relative differences: scores, fold changes, p-values, adjusted p-values.
    let mut worst = [0.0f64; 4];
    let mut note = |k: usize, a: f64, b: f64| {
        if a != b && a.is_finite() {
            worst[k] = worst[k].max((a - b).abs() / b.abs());
        }
    };
    for (method, tie_correct, tables) in &SCANPY {
        let p = params(Method::from_name(method).unwrap(), *tie_correct);
        let ours = rank_genes_groups(&x, &groups, 3, &p).unwrap();
        for (g, (table, want)) in ours.iter().zip(tables).enumerate() {
            let at = |gene: u32| want.genes.iter().position(|&w| w == gene).unwrap();
            for (k, &gene) in table.genes.iter().enumerate() {
                let w = at(gene);
                let case = format!("{method} tie_correct={tie_correct} group {g} gene {gene}");
                // The same place in the order, or an exact tie with scanpy's gene there.
                let theirs = want.genes[k];
                assert!(
                    theirs == gene || want.scores[at(theirs)] == want.scores[w],
                    "{case}: at {k} scanpy has gene {theirs}"
                );
                let score = table.scores[k] as f64;
                assert!(
                    rel_close(score, want.scores[w], 1e-5),
                    "{case}: score {score}"
                );
                let lfc = table.logfoldchanges[k] as f64;
                assert!(
                    rel_close(lfc, want.logfoldchanges[w], 1e-5),
                    "{case}: lfc {lfc}"
                );
                let (pv, adj) = (table.pvals[k], table.pvals_adj[k]);
                assert!(rel_close(pv, want.pvals[w], 1e-6), "{case}: pval {pv}");
                assert!(rel_close(adj, want.pvals_adj[w], 1e-6), "{case}: adj {adj}");
                note(0, score, want.scores[w]);
                note(1, lfc, want.logfoldchanges[w]);
                note(2, pv, want.pvals[w]);
                note(3, adj, want.pvals_adj[w]);
            }
        }
    }
    let worst = worst.map(|w| format!("{w:.1e}"));
    println!("largest relative differences to scanpy (score, lfc, pval, pval_adj): {worst:?}");
}

/// Group A = [1, 2], group B = [0, 0]: every statistic by hand.
#[test]
fn hand_checked_two_groups() {
    let x = csr(4, 1, vec![1.0, 2.0, 0.0, 0.0]);
    let groups = [0, 0, 1, 1];
    let run = |m, tie| rank_genes_groups(&x, &groups, 2, &params(m, tie)).unwrap();
    let close = |a: f64, b: f64| assert!(rel_close(a, b, 1e-12), "{a} vs {b}");
    let lfc = ((1.5f64.exp_m1() + 1e-9) / 1e-9).log2() as f32;

    // Welch: means 1.5 and 0, variances 0.5 and 0: t = 1.5 / sqrt(0.5 / 2) = 3 with df = 1,
    // a Cauchy tail: p = 1 - 2 atan(3) / pi.
    let t = run(Method::TTest, false);
    let p = 1.0 - 2.0 * 3f64.atan() / std::f64::consts::PI;
    assert_eq!((t[0].scores[0], t[1].scores[0]), (3.0, -3.0));
    close(t[0].pvals[0], p);
    close(t[1].pvals[0], p);
    assert_eq!(t[0].pvals_adj, t[0].pvals);
    assert_eq!(t[0].logfoldchanges[0], lfc);
    close(t[1].logfoldchanges[0] as f64, -lfc as f64);
    // Overestimated: the rest's variance (0) over n = 2 changes nothing here.
    assert_eq!(run(Method::TTestOverestimVar, false), t);

    // Ranks: zeros 1.5, 1.5; A gets 3 + 4 = 7 against an expected 2 * 5 / 2 = 5, variance
    // 2 * 2 * 5 / 12; the tie correction 1 - (2^3 - 2) / (4^3 - 4) = 0.9.
    let w = run(Method::Wilcoxon, false);
    let z = 2.0 / (20.0f64 / 12.0).sqrt();
    close(w[0].scores[0] as f64, z as f32 as f64);
    close(w[0].pvals[0], libm::erfc(z / 2f64.sqrt()));
    close(w[1].scores[0] as f64, -z as f32 as f64);
    let w = run(Method::Wilcoxon, true);
    let z = 2.0 / (0.9 * 20.0f64 / 12.0).sqrt();
    close(w[0].scores[0] as f64, z as f32 as f64);
    close(w[0].pvals[0], libm::erfc(z / 2f64.sqrt()));
}

#[test]
fn benjamini_hochberg_by_hand() {
    // Sorted: 0.01, 0.03, 0.04, 0.5 -> p m / rank = 0.04, 0.06, 0.0533.., 0.5 -> running min
    // from the top: 0.04, 0.0533.., 0.0533.., 0.5.
    let adj = benjamini_hochberg(&[0.01, 0.04, 0.03, 0.5]);
    let want = [0.04, 0.04 / 0.75, 0.04 / 0.75, 0.5];
    for (a, w) in adj.iter().zip(want) {
        assert!(rel_close(*a, w, 1e-15), "{adj:?}");
    }
    assert_eq!(benjamini_hochberg(&[0.9, 0.95]), vec![0.95, 0.95]);
    assert_eq!(benjamini_hochberg(&[0.6, 1.0, 0.7]), vec![1.0, 1.0, 1.0]);
    assert!(benjamini_hochberg(&[]).is_empty());
}

#[test]
fn top_genes_break_ties_by_index() {
    let s = [
        1.0,
        3.0,
        1.0,
        -0.0,
        0.0,
        3.0,
        f64::NEG_INFINITY,
        f64::INFINITY,
    ];
    assert_eq!(top_genes(&s, 4), vec![7, 1, 5, 0]);
    assert_eq!(top_genes(&s, 100), vec![7, 1, 5, 0, 2, 3, 4, 6]);
    assert_eq!(top_genes(&s, 5), vec![7, 1, 5, 0, 2]);
}

#[test]
fn n_genes_keeps_the_best() {
    let (x, groups) = fixture_matrix();
    let mut p = params(Method::Wilcoxon, false);
    let all = rank_genes_groups(&x, &groups, 3, &p).unwrap();
    p.n_genes = Some(5);
    let top = rank_genes_groups(&x, &groups, 3, &p).unwrap();
    for (a, t) in all.iter().zip(&top) {
        assert_eq!(t.genes, a.genes[..5]);
        assert_eq!(t.pvals_adj, a.pvals_adj[..5]);
    }
    p.n_genes = Some(1000);
    // Debug text: the NaN fold changes (negative means) compare equal there.
    let more = rank_genes_groups(&x, &groups, 3, &p).unwrap();
    assert_eq!(format!("{more:?}"), format!("{all:?}"));
}

/// A random matrix with ties, negative values and explicit zeros, as CSR and dense.
fn random_case(
    rng: &mut rand::rngs::StdRng,
) -> (CsrMatrix<f32>, DenseMatrix<f32>, Vec<u32>, usize) {
    let n_groups = rng.random_range(2..6);
    let n_cells = rng.random_range(2 * n_groups..80);
    let n_genes = rng.random_range(1..15);
    let density = rng.random_range(0.0..1.0);
    let mut groups: Vec<u32> = (0..n_cells).map(|i| (i % n_groups) as u32).collect();
    for i in (1..n_cells).rev() {
        groups.swap(i, rng.random_range(0..=i));
    }
    let dense: Vec<f32> = (0..n_cells * n_genes)
        .map(|_| {
            if rng.random_bool(density) {
                // Few distinct values, so that runs of ties are common; some negative.
                rng.random_range(-3..12) as f32 * 0.37
            } else {
                0.0
            }
        })
        .collect();
    let d = DenseMatrix::new(n_cells, n_genes, dense).unwrap();
    // Store every value, zeros included: explicit zeros must count as zeros.
    let x = CsrMatrix::new(
        n_cells,
        n_genes,
        (0..=n_cells).map(|i| (i * n_genes) as u64).collect(),
        (0..n_cells * n_genes)
            .map(|k| (k % n_genes) as u32)
            .collect(),
        d.data.clone(),
    )
    .unwrap();
    (x, d, groups, n_groups)
}

/// Moments and rank sums by brute force on the dense matrix: every cell's value in cell order,
/// ranks from a full sort.
fn brute_force(d: &DenseMatrix<f32>, groups: &[u32], n_groups: usize) -> (GroupMoments, RankSums) {
    let (n, m) = (d.n_rows, d.n_cols);
    let mut mo = GroupMoments {
        n_groups,
        n_genes: m,
        sum: vec![0.0; n_groups * m],
        sum_sq: vec![0.0; n_groups * m],
        nnz: vec![0; n_groups * m],
    };
    let mut rs = RankSums {
        n_groups,
        n_genes: m,
        rank_sum: vec![0.0; n_groups * m],
        tie_sum: vec![0.0; m],
    };
    for j in 0..m {
        let col: Vec<f32> = (0..n).map(|i| d.data[i * m + j]).collect();
        for (i, &v) in col.iter().enumerate() {
            let k = groups[i] as usize * m + j;
            mo.sum[k] += v as f64;
            mo.sum_sq[k] += (v * v) as f64;
            mo.nnz[k] += u64::from(v != 0.0);
        }
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&a, &b| col[a].partial_cmp(&col[b]).unwrap());
        let mut s = 0;
        while s < n {
            let e = (s..n)
                .find(|&e| col[order[e]] != col[order[s]])
                .unwrap_or(n);
            let rank = (s + 1 + e) as f64 / 2.0;
            for &i in &order[s..e] {
                rs.rank_sum[groups[i] as usize * m + j] += rank;
            }
            let t = (e - s) as f64;
            rs.tie_sum[j] += t * t * t - t;
            s = e;
        }
    }
    (mo, rs)
}

#[test]
fn sparse_passes_equal_the_dense_brute_force() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    for _ in 0..200 {
        let (x, d, groups, n_groups) = random_case(&mut rng);
        let (moments, ranks) = brute_force(&d, &groups, n_groups);
        for block in [1, 3, 8192] {
            let cols = GeneColumns::with_block(&x, &groups, n_groups, block).unwrap();
            assert_eq!(group_moments(&cols), moments);
            assert_eq!(rank_sums(&cols), ranks);
        }
    }
}

#[test]
fn same_result_for_any_thread_count_and_block() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    for _ in 0..20 {
        let (x, _, groups, n_groups) = random_case(&mut rng);
        for method in Method::ALL {
            for tie_correct in [false, true] {
                let p = params(method, tie_correct);
                let run = |threads: usize, block: usize| {
                    let pool = rayon::ThreadPoolBuilder::new()
                        .num_threads(threads)
                        .build()
                        .unwrap();
                    pool.install(|| {
                        let cols = GeneColumns::with_block(&x, &groups, n_groups, block).unwrap();
                        // Debug text: NaN fold changes (negative means) compare equal there.
                        format!("{:?}", markers_from_columns(&cols, &p).unwrap())
                    })
                };
                assert_eq!(run(1, 8192), run(4, 2));
            }
        }
    }
}

#[test]
fn refuses_bad_input() {
    let (x, groups) = fixture_matrix();
    let p = RankGenesParams::default();
    let err = |x: &CsrMatrix<f32>, groups: &[u32], n_groups, p: &RankGenesParams| {
        rank_genes_groups(x, groups, n_groups, p).unwrap_err()
    };
    let too_few = |e: KernelError, what: &str| match e {
        KernelError::Unsupported(m) => assert!(m.contains(what), "{m}"),
        e => panic!("{e:?}"),
    };
    too_few(err(&x, &groups, 1, &p), "at least 2 groups, got 1");
    // Group 3 has no cell; then group 2 with one cell.
    too_few(err(&x, &groups, 4, &p), "group 3 has 0 cell(s)");
    let mut one = groups.clone();
    for g in one.iter_mut().filter(|g| **g == 2).skip(1) {
        *g = 0;
    }
    too_few(err(&x, &one, 3, &p), "group 2 has 1 cell(s)");
    let mut bad = groups.clone();
    bad[7] = 3;
    match err(&x, &bad, 3, &p) {
        KernelError::InvalidParameter {
            name: "groups",
            reason,
        } => {
            assert!(reason.contains("cell 7 is in group 3"), "{reason}")
        }
        e => panic!("{e:?}"),
    }
    assert!(matches!(
        err(&x, &groups[1..], 3, &p),
        KernelError::Shape(_)
    ));
    let zero = RankGenesParams {
        n_genes: Some(0),
        ..p.clone()
    };
    assert!(matches!(
        err(&x, &groups, 3, &zero),
        KernelError::InvalidParameter {
            name: "n_genes",
            ..
        }
    ));
    let mut nan = x.clone();
    nan.data[5] = f32::NAN;
    assert!(matches!(
        err(&nan, &groups, 3, &p),
        KernelError::NonFinite { .. }
    ));
    let mut broken = x.clone();
    broken.indices[0] = 12;
    assert!(matches!(err(&broken, &groups, 3, &p), KernelError::Csr(_)));
    // A cell storing one gene twice.
    let twice =
        CsrMatrix::new(4, 2, vec![0, 2, 3, 4, 5], vec![1, 1, 0, 0, 1], vec![1.0; 5]).unwrap();
    too_few(
        err(&twice, &[0, 0, 1, 1], 2, &p),
        "cell 0 stores gene 1 more than once",
    );
    assert!(Method::from_name("logreg").is_err());
}

#[test]
fn markers_from_stats_refuses_inconsistent_statistics() {
    let (x, groups) = fixture_matrix();
    let cols = GeneColumns::new(&x, &groups, 3).unwrap();
    let (moments, ranks) = (group_moments(&cols), rank_sums(&cols));
    let sizes = cols.group_sizes();
    let wilcoxon = params(Method::Wilcoxon, false);
    let shape = |r: Result<Vec<GroupMarkers>>| assert!(matches!(r, Err(KernelError::Shape(_))));
    shape(markers_from_stats(&moments, None, sizes, &wilcoxon));
    shape(markers_from_stats(
        &moments,
        Some(&ranks),
        &sizes[..2],
        &wilcoxon,
    ));
    let mut short = ranks.clone();
    short.tie_sum.pop();
    shape(markers_from_stats(&moments, Some(&short), sizes, &wilcoxon));
    assert!(markers_from_stats(&moments, None, &[sizes[0], 1, sizes[2]], &wilcoxon).is_err());
    // With rank sums given, a t-test ignores them (Debug text: NaN fold changes compare equal).
    let p = RankGenesParams::default();
    let t = markers_from_stats(&moments, Some(&ranks), sizes, &p).unwrap();
    let direct = rank_genes_groups(&x, &groups, 3, &p).unwrap();
    assert_eq!(format!("{t:?}"), format!("{direct:?}"));
}

#[test]
fn method_names_round_trip() {
    for m in Method::ALL {
        assert_eq!(m.to_string().parse::<Method>().unwrap(), m);
    }
    assert_eq!(Method::TTestOverestimVar.name(), "t-test_overestim_var");
}

#[test]
fn an_all_zero_matrix_gives_null_scores() {
    let x = CsrMatrix::zeros(6, 3);
    for method in Method::ALL {
        for tie_correct in [false, true] {
            let r = rank_genes_groups(&x, &[0, 1, 0, 1, 2, 2], 3, &params(method, tie_correct));
            for t in r.unwrap() {
                assert_eq!(t.genes, vec![0, 1, 2]);
                assert_eq!(t.scores, vec![0.0; 3]);
                assert_eq!((t.pvals, t.pvals_adj), (vec![1.0; 3], vec![1.0; 3]));
                assert_eq!(t.logfoldchanges, vec![0.0; 3]);
            }
        }
    }
}

/// Against scipy 1.17 (`2 * special.stdtr(df, -t)`, `2 * stats.norm.sf(z)`) within 1e-6, and
/// against the exact values (mpmath, 50 digits) within 2e-10, on a grid reaching the far tails
/// (p-values below 1e-300 left out). scipy itself is off by 3e-9 near t = 0 for df = 1; the
/// largest error here is ~1e-10, for df = 2e6 (see [`dist`]).
#[test]
fn p_values_match_scipy_into_the_tails() {
    let mut worst = (0.0f64, 0.0, 0.0);
    for (t, df, scipy, exact) in T_TWO_SIDED {
        let got = dist::student_t_two_sided(t, df);
        assert!(
            rel_close(got, scipy, 1e-6),
            "t = {t}, df = {df}: {got} vs {scipy}"
        );
        assert!(
            rel_close(got, exact, 2e-10),
            "t = {t}, df = {df}: {got} vs {exact}"
        );
        assert_eq!(dist::student_t_two_sided(-t, df), got);
        let rel = (got - exact).abs() / exact;
        if rel > worst.0 {
            worst = (rel, t, df);
        }
    }
    println!(
        "t: largest relative error {:.2e} at t = {}, df = {}",
        worst.0, worst.1, worst.2
    );
    for (z, scipy, exact) in NORMAL_TWO_SIDED {
        let got = dist::normal_two_sided(z);
        assert!(rel_close(got, scipy, 1e-12), "z = {z}: {got} vs {scipy}");
        assert!(rel_close(got, exact, 1e-13), "z = {z}: {got} vs {exact}");
    }
    assert_eq!(dist::student_t_two_sided(f64::INFINITY, 3.0), 0.0);
    assert!(dist::student_t_two_sided(f64::NAN, 3.0).is_nan());
    assert_eq!(dist::student_t_two_sided(0.0, 3.0), 1.0);
    // Past the point where t^2 overflows: 0, as scipy.
    assert_eq!(dist::student_t_two_sided(1e200, 1.0), 0.0);
}

/// Timing of the passes and of the whole step, by default on 100,000 cells x 2,000 genes (10%
/// non-zero, values `ln(1 + k / 10)` for k in 1..=49), 10 groups; `RGG_TIMING=cells,genes,groups,
/// density` sets the shape:
/// `cargo test --release -p sc-kernels --lib rank_genes::tests::timing -- --ignored --nocapture`.
#[test]
#[ignore]
fn timing() {
    let shape = std::env::var("RGG_TIMING").unwrap_or("100000,2000,10,0.1".into());
    let shape: Vec<f64> = shape.split(',').map(|v| v.parse().unwrap()).collect();
    let (n_cells, n_genes, n_groups) = (shape[0] as usize, shape[1] as usize, shape[2] as usize);
    let x = hashed_matrix(n_cells, n_genes, shape[3]);
    println!(
        "{n_cells} cells x {n_genes} genes, {} stored values",
        x.nnz()
    );
    let groups: Vec<u32> = (0..n_cells).map(|i| (i % n_groups) as u32).collect();
    let threads = rayon::current_num_threads();
    let timed = |what: &str, f: &dyn Fn()| {
        let start = std::time::Instant::now();
        f();
        println!(
            "{what}: {:.3} s on {threads} threads",
            start.elapsed().as_secs_f64()
        );
    };
    let cols = GeneColumns::new(&x, &groups, n_groups).unwrap();
    timed("validate + check_finite", &|| {
        x.validate().unwrap();
        x.check_finite().unwrap();
    });
    timed("gene columns", &|| {
        drop(GeneColumns::new(&x, &groups, n_groups).unwrap())
    });
    timed("group moments", &|| drop(group_moments(&cols)));
    timed("rank sums", &|| drop(rank_sums(&cols)));
    for (method, tie_correct) in [
        (Method::Wilcoxon, false),
        (Method::Wilcoxon, true),
        (Method::TTest, false),
    ] {
        let p = params(method, tie_correct);
        timed(&format!("{method} tie_correct={tie_correct}, all"), &|| {
            rank_genes_groups(&x, &groups, n_groups, &p).unwrap();
        });
    }
}

/// A random sparse matrix built in parallel: entry (i, j) from a hash of its position.
fn hashed_matrix(n_cells: usize, n_genes: usize, density: f64) -> CsrMatrix<f32> {
    let mix = |mut z: u64| {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let threshold = (density * (1u64 << 53) as f64) as u64;
    let rows: Vec<(Vec<u32>, Vec<f32>)> = (0..n_cells)
        .into_par_iter()
        .map(|i| {
            let mut row = (Vec::new(), Vec::new());
            for j in 0..n_genes {
                let h = mix((i * n_genes + j) as u64 + 1);
                if h >> 11 < threshold {
                    row.0.push(j as u32);
                    row.1.push(((h % 49 + 1) as f32 * 0.1).ln_1p());
                }
            }
            row
        })
        .collect();
    let mut indptr = vec![0u64];
    indptr.extend(rows.iter().scan(0u64, |n, r| {
        *n += r.0.len() as u64;
        Some(*n)
    }));
    let indices = rows.iter().flat_map(|r| r.0.iter().copied()).collect();
    let data = rows.iter().flat_map(|r| r.1.iter().copied()).collect();
    CsrMatrix::new(n_cells, n_genes, indptr, indices, data).unwrap()
}

const T_TWO_SIDED: [(f64, f64, f64, f64); 95] = [
    (1e-08, 1.0, 0.9999999905136262, 0.9999999936338023),
    (0.3, 1.0, 0.8144528418445154, 0.8144528418445153),
    (1.0, 1.0, 0.5000000000000001, 0.5),
    (1.73, 1.0, 0.33366001957238517, 0.33366001957238517),
    (2.5, 1.0, 0.24223788318168682, 0.2422378831816868),
    (6.0, 1.0, 0.10513691342250688, 0.10513691342250686),
    (40.0, 1.0, 0.015912179824051624, 0.015912179824051628),
    (150.0, 1.0, 0.004244068941433616, 0.004244068941433616),
    (1000.0, 1.0, 0.0006366195601611178, 0.0006366195601611178),
    (100000.0, 1.0, 6.366197723463608e-06, 6.366197723463607e-06),
    (
        10000000000.0,
        1.0,
        6.366197723675814e-11,
        6.366197723675813e-11,
    ),
    (1e-08, 1.5, 0.9999999931853004, 0.9999999931853004),
    (0.3, 1.5, 0.8004721968035851, 0.8004721968035848),
    (1.0, 1.5, 0.45113536727671033, 0.45113536727671033),
    (1.73, 1.5, 0.26539817325553977, 0.26539817325553977),
    (2.5, 1.5, 0.16980650261469604, 0.16980650261469607),
    (6.0, 1.5, 0.05020245677632479, 0.05020245677632478),
    (40.0, 1.5, 0.002979624390931245, 0.0029796243909312454),
    (150.0, 1.5, 0.0004105037550509556, 0.00041050375505095557),
    (1000.0, 1.5, 2.3848945646787014e-05, 2.3848945646787014e-05),
    (
        100000.0,
        1.5,
        2.3848964809196726e-08,
        2.3848964809196722e-08,
    ),
    (
        10000000000.0,
        1.5,
        7.541704864032494e-16,
        7.541704864032492e-16,
    ),
    (1e-08, 2.7, 0.9999999927132435, 0.9999999927132435),
    (0.3, 2.7, 0.7857665326944482, 0.7857665326944481),
    (1.0, 2.7, 0.39832434722077276, 0.39832434722077253),
    (1.73, 2.7, 0.19213694067274467, 0.19213694067274467),
    (2.5, 2.7, 0.09707941444293468, 0.09707941444293466),
    (6.0, 2.7, 0.012437368298139182, 0.012437368298139182),
    (40.0, 2.7, 7.995639890192217e-05, 7.995639890192219e-05),
    (150.0, 2.7, 2.2578322728426936e-06, 2.2578322728426936e-06),
    (1000.0, 2.7, 1.3464561458665902e-08, 1.34645614586659e-08),
    (
        100000.0,
        2.7,
        5.3603538448377836e-14,
        5.3603538448377836e-14,
    ),
    (
        10000000000.0,
        2.7,
        1.695092721899218e-27,
        1.695092721899218e-27,
    ),
    (1e-08, 7.0, 0.999999992300171, 0.999999992300171),
    (0.3, 7.0, 0.7728900504021342, 0.7728900504021343),
    (1.0, 7.0, 0.3506166628202074, 0.35061666282020754),
    (1.73, 7.0, 0.12725004477663318, 0.12725004477663315),
    (2.5, 7.0, 0.04099221858575289, 0.040992218585752895),
    (6.0, 7.0, 0.0005422583420028105, 0.0005422583420028101),
    (40.0, 7.0, 1.5902179984850364e-09, 1.590217998485037e-09),
    (150.0, 7.0, 1.54424462303163e-13, 1.5442446230316299e-13),
    (1000.0, 7.0, 2.640983837521187e-19, 2.6409838375211874e-19),
    (100000.0, 7.0, 2.641041346957753e-33, 2.6410413469577528e-33),
    (
        10000000000.0,
        7.0,
        2.641041352709354e-68,
        2.641041352709354e-68,
    ),
    (1e-08, 13.3, 0.9999999921695941, 0.9999999921695941),
    (0.3, 13.3, 0.7688146746430896, 0.7688146746430896),
    (1.0, 13.3, 0.3351576854121645, 0.3351576854121645),
    (1.73, 13.3, 0.10675304636371614, 0.10675304636371614),
    (2.5, 13.3, 0.026232906345951882, 0.026232906345951906),
    (6.0, 13.3, 4.0394824619145774e-05, 4.039482461914574e-05),
    (40.0, 13.3, 2.9903920012745974e-15, 2.9903920012745934e-15),
    (150.0, 13.3, 7.275502629009538e-23, 7.27550262900953e-23),
    (1000.0, 13.3, 8.043331408004286e-34, 8.043331408004282e-34),
    (100000.0, 13.3, 2.0205605062645108e-60, 2.02056050626451e-60),
    (
        10000000000.0,
        13.3,
        6.389573402797666e-127,
        6.389573402797667e-127,
    ),
    (1e-08, 100.5, 0.9999999920409772, 0.9999999920409772),
    (0.3, 100.5, 0.7647967863920563, 0.7647967863920563),
    (1.0, 100.5, 0.319712177630808, 0.319712177630808),
    (1.73, 100.5, 0.08670008571252732, 0.08670008571252731),
    (2.5, 100.5, 0.014037513382705254, 0.01403751338270526),
    (6.0, 100.5, 3.136844861216368e-08, 3.136844861216366e-08),
    (40.0, 100.5, 1.5314680149537363e-63, 1.5314680149537344e-63),
    (
        150.0,
        100.5,
        5.1896525227535407e-120,
        5.189652522753596e-120,
    ),
    (
        1000.0,
        100.5,
        1.0149615318545318e-202,
        1.01496153185453e-202,
    ),
    (1e-08, 1000.0, 0.9999999920231488, 0.9999999920231488),
    (0.3, 1000.0, 0.7642395041672441, 0.7642395041672441),
    (1.0, 1000.0, 0.31755241808467255, 0.3175524180846723),
    (1.73, 1000.0, 0.0839388165034354, 0.08393881650343538),
    (2.5, 1000.0, 0.012578567801090807, 0.012578567801090797),
    (6.0, 1000.0, 2.7553691733774752e-09, 2.755369173377469e-09),
    (
        40.0,
        1000.0,
        1.0478852155173272e-209,
        1.0478852155173361e-209,
    ),
    (1e-08, 12345.6, 0.999999992021316, 0.999999992021316),
    (0.3, 12345.6, 0.7641822065091413, 0.7641822065091413),
    (1.0, 12345.6, 0.3173301072201357, 0.31733010722013566),
    (1.73, 12345.6, 0.08365526730347721, 0.08365526730347723),
    (2.5, 12345.6, 0.012432200145626467, 0.012432200145626468),
    (6.0, 12345.6, 2.0284595719995662e-09, 2.0284595719995637e-09),
    (1e-08, 100000.0, 0.9999999920211743, 0.9999999920211743),
    (0.3, 100000.0, 0.7641777791903376, 0.7641777791903377),
    (1.0, 100000.0, 0.3173129275641102, 0.31731292756411),
    (1.73, 100000.0, 0.08363336064952197, 0.08363336064952191),
    (2.5, 100000.0, 0.012420919192559051, 0.012420919192559046),
    (
        6.0,
        100000.0,
        1.9799294556017718e-09,
        1.9799294556017627e-09,
    ),
    (1e-08, 1000000.0, 0.9999999920211564, 0.9999999920211564),
    (0.3, 1000000.0, 0.7641772179789942, 0.7641772179789942),
    (1.0, 1000000.0, 0.3173107498335783, 0.31731074983357815),
    (1.73, 1000000.0, 0.08363058376943015, 0.08363058376943008),
    (2.5, 1000000.0, 0.012419489502163254, 0.012419489502163246),
    (6.0, 1000000.0, 1.97384981235443e-09, 1.9738498123544347e-09),
    (1e-08, 2000000.0, 0.9999999920211554, 0.9999999920211554),
    (0.3, 2000000.0, 0.7641771868005466, 0.7641771868005466),
    (1.0, 2000000.0, 0.3173106288482613, 0.3173106288482612),
    (1.73, 2000000.0, 0.0836304294983102, 0.08363042949831019),
    (2.5, 2000000.0, 0.012419410076760826, 0.01241941007676082),
    (
        6.0,
        2000000.0,
        1.9735125263932266e-09,
        1.9735125263932262e-09,
    ),
];
const NORMAL_TWO_SIDED: [(f64, f64, f64); 12] = [
    (0.0, 1.0, 1.0),
    (1e-08, 0.9999999920211544, 0.9999999920211544),
    (0.5, 0.6170750774519738, 0.6170750774519738),
    (1.0, 0.31731050786291415, 0.3173105078629141),
    (1.96, 0.04999579029644087, 0.04999579029644087),
    (3.0, 0.0026997960632601866, 0.002699796063260189),
    (5.0, 5.733031437583866e-07, 5.733031437583878e-07),
    (8.0, 1.244192114854348e-15, 1.2441921148543568e-15),
    (10.0, 1.523970604832094e-23, 1.523970604832105e-23),
    (20.0, 5.507248237212311e-89, 5.5072482372124675e-89),
    (30.0, 9.813427854295816e-198, 9.813427854296374e-198),
    (37.0, 1.1451142445047853e-299, 1.1451142445049154e-299),
];

#[test]
fn fixed_point_moments_are_the_f64_sums_within_rounding() {
    use super::fixed_moments::{fixed_point_moments, MomentScales};
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    for _ in 0..200 {
        let (x, d, groups, n_groups) = random_case(&mut rng);
        let (exact, _) = brute_force(&d, &groups, n_groups);
        let fixed = fixed_point_moments(&x, &groups, n_groups).unwrap();
        assert_eq!(fixed.nnz, exact.nnz);
        for (got, want) in [(&fixed.sum, &exact.sum), (&fixed.sum_sq, &exact.sum_sq)] {
            for (a, b) in got.iter().zip(want) {
                assert!((a - b).abs() <= 1e-9 * (1.0 + b.abs()), "{a} vs {b}");
            }
        }
    }
    // Log-normalized values over a million cells: 2^-38 per value, 2^-35 per square.
    let s = MomentScales::new(9.22, 1_000_000).unwrap();
    assert_eq!((s.s1, s.s2), (2f64.powi(38), 2f64.powi(35)));
    assert_eq!(MomentScales::new(0.0, 10).unwrap().s1, 1.0);
    let e = MomentScales::new(1e30, 10).unwrap_err().to_string();
    assert!(e.contains("too large"), "{e}");
}
