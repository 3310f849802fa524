//! A file whose sparse matrix stores a column twice in a row (valid for scipy, which adds the
//! values, and so for scanpy): read with the values added and a notice naming the matrix, from
//! h5ad and zarr, X and obsp alike, and X's blocks of rows as streamed runs read them.

mod common;

use sc_kernels::CsrMatrix;
use sc_pipeline::anndata::Matrix;
use sc_pipeline::io::{
    read_h5ad_with_notices, read_zarr_with_notices, write_h5ad, write_zarr, H5adRowChunks,
    RowChunks, ZarrRowChunks,
};
use sc_pipeline::synthetic::{generate, SyntheticParams};

/// `x` with each value of 2 or more in its even rows stored as 1 and the rest, in the same
/// column (the second copy at the row's end, out of column order).
fn split(x: &CsrMatrix<f32>) -> CsrMatrix<f32> {
    let (mut indptr, mut indices, mut data) = (vec![0u64], Vec::new(), Vec::new());
    for r in 0..x.n_rows {
        let (c, v) = x.row(r);
        let mut tail = Vec::new();
        for (&j, &v) in c.iter().zip(v) {
            if r % 2 == 0 && v >= 2.0 {
                indices.push(j);
                data.push(1.0);
                tail.push((j, v - 1.0));
            } else {
                indices.push(j);
                data.push(v);
            }
        }
        for (j, v) in tail {
            indices.push(j);
            data.push(v);
        }
        indptr.push(indices.len() as u64);
    }
    CsrMatrix::new(x.n_rows, x.n_cols, indptr, indices, data).unwrap()
}

#[test]
fn a_column_stored_twice_is_read_added_with_a_notice() {
    // Square, so that the same pattern serves as a graph in obsp.
    let a = generate(&SyntheticParams::new(300, 300, 4)).unwrap();
    let Matrix::Sparse(x) = &a.x else {
        panic!("generated X is sparse")
    };
    let mut b = generate(&SyntheticParams::new(300, 300, 4)).unwrap();
    let twice = split(x);
    assert!(twice.nnz() > x.nnz());
    b.x = Matrix::Sparse(twice.clone());
    b.obsp.insert("g".into(), twice);
    for zarr in [false, true] {
        let path = common::scratch(if zarr { "twice.zarr" } else { "twice.h5ad" });
        let (read, notices) = if zarr {
            write_zarr(&b, &path).unwrap();
            read_zarr_with_notices(&path).unwrap()
        } else {
            write_h5ad(&b, &path).unwrap();
            read_h5ad_with_notices(&path).unwrap()
        };
        let Matrix::Sparse(got) = &read.x else {
            panic!("X stays sparse")
        };
        assert_eq!(got, x, "zarr {zarr}: X added back to the generated one");
        assert_eq!(&read.obsp["g"], x, "zarr {zarr}: obsp added");
        let said = notices.join("\n");
        assert!(
            said.contains("X") && said.contains("a column twice in a row"),
            "{said}"
        );
        assert!(said.contains("obsp/g"), "{said}");
        // Read by blocks of rows, as a streamed run reads X: the same sums.
        let chunks: Box<dyn RowChunks> = if zarr {
            Box::new(ZarrRowChunks::open(&path).unwrap())
        } else {
            Box::new(H5adRowChunks::open(&path).unwrap())
        };
        for rows in [0..7, 7..150, 150..300] {
            let Matrix::Sparse(block) = chunks.read_rows(rows.clone()).unwrap() else {
                panic!("sparse rows")
            };
            let keep: Vec<bool> = (0..300).map(|r| rows.contains(&r)).collect();
            assert_eq!(
                block,
                x.select_rows(&keep).unwrap(),
                "zarr {zarr}: rows {rows:?}"
            );
        }
    }
}
