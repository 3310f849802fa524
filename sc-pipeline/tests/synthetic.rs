//! The synthetic generator: seeded, thread-count independent, with section B's shape.

mod common;

use sc_pipeline::anndata::{array_as_strings, Column, Matrix};
use sc_pipeline::io::{read_h5ad, write_h5ad};
use sc_pipeline::synthetic::{
    expected_stored_values, generate, max_stored_values, SyntheticParams, CELLS_PER_BLOCK,
    MITO_GENES,
};

#[test]
fn the_shape_matches_the_specification() {
    let a = generate(&SyntheticParams::new(3000, 20000, 7)).unwrap();
    let Matrix::Sparse(x) = &a.x else {
        panic!("counts are sparse")
    };
    x.validate().unwrap();
    let per_cell: Vec<u64> = x.indptr.windows(2).map(|w| w[1] - w[0]).collect();
    let mean = per_cell.iter().sum::<u64>() as f64 / per_cell.len() as f64;
    assert!(
        (1900.0..2060.0).contains(&mean),
        "mean genes per cell {mean}"
    );
    let low = per_cell.iter().filter(|&&n| n <= 400).count();
    assert!(low > 10 && low < 60, "about 1% low-quality cells: {low}");
    assert!(per_cell.iter().all(|&n| (50..=2500).contains(&n)));
    // The estimate a GPU run reserves its output's pages by, and the bound.
    let p = SyntheticParams::new(3000, 20000, 7);
    let expected = expected_stored_values(&p) as f64;
    let nnz = x.data.len() as f64;
    assert!(
        (nnz / expected - 1.0).abs() < 0.02,
        "{nnz} stored values, {expected} expected"
    );
    assert!(nnz as u64 <= max_stored_values(&p));
    assert!(
        x.data.iter().all(|&v| v >= 1.0 && v.fract() == 0.0),
        "counts are 1 + NB"
    );
    let mito = a.var.index.iter().filter(|g| g.starts_with("MT-")).count();
    assert_eq!(mito, MITO_GENES.len());
    for (key, n) in [("batch", 4), ("cell_type", 8)] {
        match a.obs.column(key) {
            Some(Column::Categorical {
                categories, codes, ..
            }) => {
                assert_eq!(array_as_strings(categories).len(), n);
                for c in 0..n as i32 {
                    assert!(
                        codes.iter().filter(|&&k| k == c).count() > 3000 / n / 2,
                        "{key} {c} is populated"
                    );
                }
            }
            other => panic!("{key}: {other:?}"),
        }
    }
}

#[test]
fn output_does_not_depend_on_the_thread_count() {
    let p = SyntheticParams::new(3 * CELLS_PER_BLOCK + 17, 800, 42);
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap()
        .install(|| generate(&p).unwrap());
    let many = rayon::ThreadPoolBuilder::new()
        .num_threads(4)
        .build()
        .unwrap()
        .install(|| generate(&p).unwrap());
    assert_eq!(one, many);
    let other_seed = generate(&SyntheticParams {
        seed: 43,
        ..p.clone()
    })
    .unwrap();
    assert_ne!(one.x, other_seed.x);
}

#[test]
fn it_writes_h5ad_that_reads_back() {
    let a = generate(&SyntheticParams::new(500, 1000, 1)).unwrap();
    let path = common::scratch("synthetic.h5ad");
    write_h5ad(&a, &path).unwrap();
    assert_eq!(read_h5ad(&path).unwrap(), a);
}

#[test]
fn bad_parameters_are_refused() {
    let e = generate(&SyntheticParams::new(10, 5, 0))
        .unwrap_err()
        .to_string();
    assert!(e.contains("mitochondrial"), "{e}");
    let mut p = SyntheticParams::new(10, 100, 0);
    p.genes_per_cell = (30, 20);
    assert!(generate(&p).unwrap_err().to_string().contains("min <= max"));
    let mut p = SyntheticParams::new(10, 100, 0);
    p.popularity_sigma = f64::NAN;
    assert!(generate(&p)
        .unwrap_err()
        .to_string()
        .contains("popularity_sigma"));
}

#[test]
fn streaming_to_a_file_gives_the_in_memory_dataset() {
    let p = SyntheticParams::new(2 * CELLS_PER_BLOCK + 5, 900, 11);
    let path = common::scratch("streamed.h5ad");
    let cells_seen = std::sync::Mutex::new(Vec::new());
    let nnz = sc_pipeline::synthetic::generate_to_h5ad(&p, &path, &|n| {
        cells_seen.lock().unwrap().push(n)
    })
    .unwrap();
    let streamed = read_h5ad(&path).unwrap();
    let in_memory = generate(&p).unwrap();
    assert_eq!(streamed, in_memory);
    assert_eq!(nnz as usize, in_memory.x.stored_values());
    assert_eq!(cells_seen.into_inner().unwrap().last(), Some(&p.n_cells));
    assert!(sc_pipeline::io::H5adRowChunks::open(&path)
        .unwrap()
        .chunks(1000)
        .all(|c| c.is_ok()));
}
