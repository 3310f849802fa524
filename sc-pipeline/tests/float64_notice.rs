//! Matrices stored as float64 are read as float32, and the reader says so: one notice line
//! naming each such matrix once.

mod common;

use sc_pipeline::anndata::{Matrix, Raw};
use sc_pipeline::io::{read_h5ad, read_h5ad_with_notices, write_h5ad};
use sc_pipeline::synthetic::{generate, SyntheticParams};

#[test]
fn float64_matrices_are_named_in_one_notice() {
    let path = common::scratch("float64.h5ad");
    let mut a = generate(&SyntheticParams::new(200, 500, 1)).unwrap();
    a.raw = Some(Raw {
        x: a.x.try_clone().unwrap(),
        var: a.var.clone(),
        varm: Default::default(),
    });
    write_h5ad(&a, &path).unwrap();
    let (_, notices) = read_h5ad_with_notices(&path).unwrap();
    assert!(notices.is_empty(), "float32 needs no notice: {notices:?}");

    common::store_values_as_float64(&path, "X");
    let (b, notices) = read_h5ad_with_notices(&path).unwrap();
    assert_eq!(b, a, "integer counts convert exactly");
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert!(
        notices[0].starts_with("notice: X is float64 in the file; scpipe computes in float32"),
        "{}",
        notices[0]
    );

    common::store_values_as_float64(&path, "raw/X");
    let (_, notices) = read_h5ad_with_notices(&path).unwrap();
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert!(
        notices[0].starts_with("notice: X and raw/X are float64 in the file"),
        "{}",
        notices[0]
    );
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_dense_float64_x_is_noticed_and_rounded() {
    let path = common::scratch("float64-dense.h5ad");
    let a = generate(&SyntheticParams::new(20, 50, 2)).unwrap();
    let Matrix::Sparse(x) = &a.x else {
        panic!("generated X is sparse")
    };
    let mut d = generate(&SyntheticParams::new(20, 50, 2)).unwrap();
    d.x = Matrix::Dense(x.to_dense());
    write_h5ad(&d, &path).unwrap();
    common::store_values_as_float64(&path, "X");
    // A value float32 cannot hold: it is rounded, not refused.
    {
        let f = hdf5::File::open_rw(&path).unwrap();
        let ds = f.dataset("X").unwrap();
        let mut v = ds.read_raw::<f64>().unwrap();
        v[0] = 0.1;
        ds.write_raw(&v).unwrap();
    }
    let (b, notices) = read_h5ad_with_notices(&path).unwrap();
    assert!(
        notices.len() == 1 && notices[0].starts_with("notice: X is float64"),
        "{notices:?}"
    );
    let Matrix::Dense(bx) = &b.x else {
        panic!("dense X stays dense")
    };
    assert_eq!(bx.data[0], 0.1f32);
    // The plain reader reads the same data and drops the notices.
    assert_eq!(read_h5ad(&path).unwrap(), b);
    std::fs::remove_file(&path).unwrap();
}
