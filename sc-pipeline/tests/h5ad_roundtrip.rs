//! Writing an AnnData object and reading it back keeps every part.

mod common;

use common::{same, sample};
use sc_kernels::{CsrMatrix, DenseMatrix};
use sc_pipeline::anndata::{ArrayData, Matrix};
use sc_pipeline::io::{read_h5ad, write_h5ad, H5adRowChunks, RowChunks};
use sc_pipeline::AnnData;

#[test]
fn every_part_survives_a_round_trip() {
    let a = sample();
    let path = common::scratch("roundtrip.h5ad");
    write_h5ad(&a, &path).unwrap();
    let b = read_h5ad(&path).unwrap();
    assert!(same(&a, &b), "written:\n{a:#?}\nread back:\n{b:#?}");
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn csr_x_is_read_in_row_chunks() {
    let a = sample();
    let path = common::scratch("chunks.h5ad");
    write_h5ad(&a, &path).unwrap();
    let reader = H5adRowChunks::open(&path).unwrap();
    assert_eq!((reader.n_obs(), reader.n_vars()), (4, 3));
    assert_eq!(reader.obs().index, a.obs.index);
    let Matrix::Sparse(full) = &a.x else {
        unreachable!()
    };
    let mut rows_seen = 0;
    for chunk in reader.chunks(3) {
        let (rows, m) = chunk.unwrap();
        let Matrix::Sparse(m) = m else {
            panic!("CSR X comes back as CSR chunks")
        };
        m.validate().unwrap();
        for (k, i) in rows.clone().enumerate() {
            assert_eq!(m.row(k), full.row(i));
        }
        rows_seen += rows.len();
    }
    assert_eq!(rows_seen, 4);
    assert!(reader.read_rows(2..9).is_err());
}

#[test]
fn dense_x_is_read_in_row_chunks() {
    let mut a = AnnData::new(Matrix::Dense(
        DenseMatrix::new(3, 2, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap(),
    ));
    a.obs
        .set_values("v", ArrayData::I64(vec![1, 2, 3]))
        .unwrap();
    let path = common::scratch("dense.h5ad");
    write_h5ad(&a, &path).unwrap();
    assert!(same(&a, &read_h5ad(&path).unwrap()));
    let reader = H5adRowChunks::open(&path).unwrap();
    let Matrix::Dense(d) = reader.read_rows(1..3).unwrap() else {
        panic!("dense X comes back dense")
    };
    assert_eq!(d.data, vec![3.0, 4.0, 5.0, 6.0]);
}

#[test]
fn an_empty_matrix_round_trips() {
    let a = AnnData::new(Matrix::Sparse(CsrMatrix::zeros(3, 2)));
    let path = common::scratch("empty.h5ad");
    write_h5ad(&a, &path).unwrap();
    assert!(same(&a, &read_h5ad(&path).unwrap()));
}

#[test]
fn a_failed_write_leaves_no_file() {
    let mut a = sample();
    a.obs
        .set_values(
            "bad",
            ArrayData::Str(vec!["a\0b".into(), "".into(), "".into(), "".into()]),
        )
        .unwrap();
    let path = common::scratch("nul.h5ad");
    let err = write_h5ad(&a, &path).unwrap_err().to_string();
    assert!(err.contains("NUL"), "{err}");
    assert!(!path.exists());
}

/// scipy needs `indices` and `indptr` of one integer type: int32 for ordinary matrices, int64
/// when the stored values may pass 2^31 (here announced to the streaming writer).
#[test]
fn sparse_index_types_match_as_scipy_needs() {
    use sc_pipeline::io::H5adStreamWriter;
    let dtype = |path: &std::path::Path, name: &str| {
        let f = hdf5::File::open(path).unwrap();
        let ds = f.dataset(name).unwrap();
        ds.dtype().unwrap().to_descriptor().unwrap().to_string()
    };
    let a = sample();
    let narrow = common::scratch("narrow.h5ad");
    write_h5ad(&a, &narrow).unwrap();
    assert_eq!(
        (dtype(&narrow, "X/indices"), dtype(&narrow, "X/indptr")),
        ("int32".into(), "int32".into())
    );

    let Matrix::Sparse(x) = &a.x else {
        unreachable!()
    };
    let wide = common::scratch("wide.h5ad");
    let mut w = H5adStreamWriter::create(&wide, x.n_cols, 1 << 32).unwrap();
    w.append_rows(&x.select_rows(&[true, true, false, false]).unwrap())
        .unwrap();
    w.append_rows(&x.select_rows(&[false, false, true, true]).unwrap())
        .unwrap();
    w.finish(&a.obs, &a.var).unwrap();
    assert_eq!(
        (dtype(&wide, "X/indices"), dtype(&wide, "X/indptr")),
        ("int64".into(), "int64".into())
    );
    assert_eq!(read_h5ad(&wide).unwrap().x, a.x);

    let mut w = H5adStreamWriter::create(common::scratch("bound.h5ad"), x.n_cols, 2).unwrap();
    let e = w.append_rows(x).unwrap_err().to_string();
    assert!(e.contains("exceed the announced maximum"), "{e}");
}

/// Large arrays are read straight from the file with parallel reads (contiguous and chunked
/// layouts); the values must be exactly what the library reads.
#[test]
fn large_arrays_read_directly_match_the_library() {
    use sc_pipeline::synthetic::{generate, generate_to_h5ad, SyntheticParams};
    let p = SyntheticParams::new(3000, 8000, 5);
    let in_memory = generate(&p).unwrap();
    assert!(
        in_memory.x.stored_values() > 1 << 20,
        "large enough for the direct path"
    );
    let contiguous = common::scratch("contiguous.h5ad");
    write_h5ad(&in_memory, &contiguous).unwrap();
    let chunked = common::scratch("chunked.h5ad");
    generate_to_h5ad(&p, &chunked, &|_| {}).unwrap();
    for path in [&contiguous, &chunked] {
        let f = hdf5::File::open(path).unwrap();
        let data: Vec<f32> = f.dataset("X/data").unwrap().read_raw().unwrap();
        let indices: Vec<i32> = f.dataset("X/indices").unwrap().read_raw().unwrap();
        let a = read_h5ad(path).unwrap();
        let Matrix::Sparse(x) = &a.x else {
            panic!("sparse")
        };
        assert_eq!(x.data, data);
        assert!(x
            .indices
            .iter()
            .zip(&indices)
            .all(|(&u, &i)| u as i64 == i as i64));
        assert_eq!(a, in_memory);
        let chunks = H5adRowChunks::open(path).unwrap();
        let Matrix::Sparse(rows) = chunks.read_rows(100..2900).unwrap() else {
            panic!("sparse")
        };
        assert_eq!(
            rows,
            x.select_rows(
                &(0..3000)
                    .map(|i| (100..2900).contains(&i))
                    .collect::<Vec<_>>()
            )
            .unwrap()
        );
    }
}

/// Large int64 indices are narrowed piece by piece while read directly: the matrix equals the
/// one written, and an index out of range anywhere is still named with its position.
#[test]
fn large_int64_indices_are_narrowed_while_read() {
    use sc_pipeline::io::H5adStreamWriter;
    use sc_pipeline::synthetic::{generate, SyntheticParams};
    let a = generate(&SyntheticParams::new(3000, 8000, 5)).unwrap();
    let Matrix::Sparse(x) = &a.x else {
        unreachable!()
    };
    assert!(x.nnz() > 1 << 20, "large enough for the direct path");
    let wide = common::scratch("wide_large.h5ad");
    let mut w = H5adStreamWriter::create(&wide, x.n_cols, 1 << 32).unwrap();
    w.append_rows(x).unwrap();
    w.finish(&a.obs, &a.var).unwrap();
    let back = read_h5ad(&wide).unwrap();
    assert_eq!(back.x, a.x);
    let at = x.nnz() - 7;
    for bad in [-1i64, x.n_cols as i64] {
        let f = hdf5::File::open_rw(&wide).unwrap();
        let ds = f.dataset("X/indices").unwrap();
        let mut v: Vec<i64> = ds.read_raw().unwrap();
        v[at] = bad;
        ds.write_raw(&v).unwrap();
        drop(f);
        let e = read_h5ad(&wide).unwrap_err().to_string();
        assert!(
            e.contains("X/indices") && e.contains(&format!("index {bad} at position {at}")),
            "{e}"
        );
    }
}
