use super::*;

/// A small model: skewed popularity (a few genes take much of the weight), 2 batches x 3
/// types with their own boosted genes.
pub(crate) fn small_model(n_genes: usize, seed: u64) -> CountModel {
    let (nb, nt) = (2, 3);
    let mut relative = Vec::new();
    let mut tables = Vec::new();
    for group in 0..nb * nt {
        let w: Vec<f64> = (0..n_genes)
            .map(|g| {
                let base = 1.0 / (1.0 + g as f64).powf(0.8);
                if g % (nb * nt) == group {
                    base * 4.0
                } else {
                    base
                }
            })
            .collect();
        let mean = w.iter().sum::<f64>() / n_genes as f64;
        tables.push(AliasTable::new(&w));
        relative.extend(w.iter().map(|x| x / mean));
    }
    CountModel {
        n_genes,
        seed,
        n_batches: nb,
        n_cell_types: nt,
        genes_per_cell: (150, 250),
        low_quality_fraction: 0.05,
        low_quality_genes: (5, 40),
        density: 1.0,
        library_sigma: 0.4,
        nb_shape: 2,
        mean_extra_count: 0.5,
        relative,
        tables,
    }
}

#[test]
fn rows_hold_exactly_the_wanted_distinct_genes_in_order() {
    let m = small_model(2000, 7);
    let (x, groups) = m.generate(0..500).unwrap();
    x.validate().unwrap();
    assert_eq!(groups.len(), 500);
    for c in 0..500u64 {
        let d = m.cell(c);
        let r = x.indptr[c as usize] as usize..x.indptr[c as usize + 1] as usize;
        assert_eq!(r.len(), d.wanted, "cell {c}");
        assert!(x.indices[r.clone()].windows(2).all(|w| w[0] < w[1]));
        assert!(x.data[r].iter().all(|&v| v >= 1.0 && v.fract() == 0.0));
        assert_eq!(groups[c as usize], (d.batch, d.cell_type));
    }
    let low = (0..500).filter(|&c| m.cell(c).wanted <= 40).count();
    assert!((5..=60).contains(&low), "{low} low-quality cells of 500");
}

#[test]
fn any_split_of_the_cells_gives_the_same_rows() {
    let m = small_model(700, 3);
    let (whole, g_whole) = m.generate(100..400).unwrap();
    let mut parts = Vec::new();
    let mut groups = Vec::new();
    for r in [100..101, 101..250, 250..400] {
        let (x, g) = m.generate(r).unwrap();
        parts.push(x);
        groups.extend(g);
    }
    let mut indptr = vec![0u64];
    let (mut indices, mut data) = (vec![], vec![]);
    for p in &parts {
        let base = *indptr.last().unwrap();
        indptr.extend(p.indptr[1..].iter().map(|o| o + base));
        indices.extend_from_slice(&p.indices);
        data.extend_from_slice(&p.data);
    }
    assert_eq!(whole.indptr, indptr);
    assert_eq!(whole.indices, indices);
    assert_eq!(whole.data, data);
    assert_eq!(g_whole, groups);
    // Another seed, other cells.
    let other = CountModel { seed: 4, ..m };
    assert_ne!(other.generate(100..400).unwrap().0.indices, whole.indices);
}

#[test]
fn counts_follow_the_negative_binomial_mean() {
    let m = small_model(1500, 11);
    let (x, groups) = m.generate(0..3000).unwrap();
    // Sum over expressed genes of (count - 1) against the model's mean.
    let (mut got, mut want) = (0.0f64, 0.0f64);
    for c in 0..x.n_rows {
        let d = m.cell(c as u64);
        let group = groups[c].0 as usize * m.n_cell_types + groups[c].1 as usize;
        for k in x.indptr[c] as usize..x.indptr[c + 1] as usize {
            got += x.data[k] as f64 - 1.0;
            want += m.mean_extra_count
                * d.library
                * m.relative[group * m.n_genes + x.indices[k] as usize];
        }
    }
    assert!(
        (got / want - 1.0).abs() < 0.02,
        "mean extra count {got} vs {want}"
    );
}

#[test]
fn popular_genes_are_expressed_more_often() {
    let m = small_model(1000, 5);
    let (x, _) = m.generate(0..2000).unwrap();
    let mut cells = vec![0usize; m.n_genes];
    for &g in &x.indices {
        cells[g as usize] += 1;
    }
    let head: usize = cells[..50].iter().sum();
    let tail: usize = cells[950..].iter().sum();
    assert!(head > 5 * tail, "head {head}, tail {tail}");
}

#[test]
fn draws_stop_at_the_cap_when_genes_cannot_be_found() {
    // One gene holds nearly all the weight: 150+ distinct genes of 200 take many draws.
    let mut m = small_model(200, 1);
    for t in 0..m.n_groups() {
        let mut w = vec![1e-9; 200];
        w[0] = 1.0;
        m.tables[t] = AliasTable::new(&w);
    }
    let (x, _) = m.generate(0..20).unwrap();
    x.validate().unwrap();
    for c in 0..20 {
        let len = (x.indptr[c + 1] - x.indptr[c]) as usize;
        assert!(len >= 1 && len <= m.cell(c as u64).wanted);
    }
}

#[test]
fn broken_models_are_refused_with_the_reason() {
    let m = small_model(100, 0);
    let e = |m: CountModel| m.generate(0..1).unwrap_err().to_string();
    assert!(e(CountModel {
        nb_shape: 0,
        ..m.clone()
    })
    .contains("nb_shape"));
    assert!(e(CountModel {
        n_genes: 99,
        ..m.clone()
    })
    .contains("tables"));
    assert!(e(CountModel {
        n_genes: MAX_GENES + 1,
        ..m.clone()
    })
    .contains("genes"));
    assert!(e(CountModel {
        density: f64::NAN,
        ..m.clone()
    })
    .contains("density"));
    assert!(e(CountModel {
        genes_per_cell: (5, 4),
        ..m
    })
    .contains("min <= max"));
}
