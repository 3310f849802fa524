//! AnnData zarr stores: every part survives a round trip with each compression, large arrays
//! span many chunks, damaged or foreign stores get named errors, and a failed write leaves no
//! store behind.

mod common;

use common::{same, sample};
use sc_kernels::CsrMatrix;
use sc_pipeline::anndata::{ArrayData, Matrix, Value};
use sc_pipeline::io::{
    read_h5ad, read_zarr, write_h5ad, write_zarr, write_zarr_staged, ZarrCompression,
};
use sc_pipeline::AnnData;
use std::path::Path;

fn fresh(name: &str) -> std::path::PathBuf {
    let p = common::scratch(name);
    let _ = std::fs::remove_dir_all(&p);
    p
}

#[test]
fn every_part_survives_a_round_trip_with_each_compression() {
    let a = sample();
    for c in [
        ZarrCompression::None,
        ZarrCompression::Zstd,
        ZarrCompression::Lz4,
    ] {
        let path = fresh(&format!("roundtrip-{c:?}.zarr"));
        write_zarr_staged(&a, &path, c, true)
            .unwrap()
            .commit()
            .unwrap();
        assert!(sc_pipeline::io::is_zarr(&path));
        let b = read_zarr(&path).unwrap();
        assert!(same(&a, &b), "{c:?}: written:\n{a:#?}\nread back:\n{b:#?}");
        std::fs::remove_dir_all(&path).unwrap();
    }
}

#[test]
fn the_zarr_and_h5ad_outputs_hold_the_same() {
    let a = sample();
    let (z, h) = (fresh("same.zarr"), common::scratch("same.h5ad"));
    write_zarr(&a, &z).unwrap();
    write_h5ad(&a, &h).unwrap();
    assert!(same(&read_zarr(&z).unwrap(), &read_h5ad(&h).unwrap()));
    // Written again over the first store: replaced whole.
    let mut b = sample();
    b.uns.insert("again".into(), Value::int(2));
    write_zarr(&b, &z).unwrap();
    assert!(same(&read_zarr(&z).unwrap(), &b));
    let dir = z.parent().unwrap();
    let stale = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.starts_with("same.zarr.") && (n.ends_with(".partial") || n.ends_with(".replaced"))
        })
        .count();
    assert_eq!(stale, 0, "no temporary stores left");
}

/// A matrix of several chunks (each chunk is encoded on its own thread).
#[test]
fn a_large_matrix_spans_many_chunks() {
    let (n_rows, n_cols, per_row) = (60_000usize, 2_000usize, 90usize);
    let mut indptr = vec![0u64];
    let mut indices = Vec::with_capacity(n_rows * per_row);
    let mut data = Vec::with_capacity(n_rows * per_row);
    for r in 0..n_rows {
        for k in 0..per_row {
            indices.push(((r * 7 + k * 13) % n_cols) as u32);
            data.push((r % 97) as f32 + k as f32 * 0.25);
        }
        let row = &mut indices[r * per_row..];
        row.sort_unstable();
        indptr.push(indices.len() as u64);
    }
    // Columns within a row are distinct: 13 * k mod 2000 repeats only after 2000 / gcd steps.
    let x = CsrMatrix::new(n_rows, n_cols, indptr, indices, data).unwrap();
    let a = AnnData::new(Matrix::Sparse(x));
    let path = fresh("large.zarr");
    write_zarr(&a, &path).unwrap();
    let chunks = std::fs::read_dir(path.join("X/data/c")).unwrap().count();
    assert!(chunks >= 2, "{chunks} chunks");
    assert!(same(&a, &read_zarr(&path).unwrap()));
    std::fs::remove_dir_all(&path).unwrap();
}

fn error_of(path: &Path) -> String {
    read_zarr(path).unwrap_err().to_string()
}

#[test]
fn damaged_or_foreign_stores_get_named_errors() {
    let a = sample();
    let store_in = |name: &str, compression: ZarrCompression| {
        let p = fresh(name);
        write_zarr_staged(&a, &p, compression, true)
            .unwrap()
            .commit()
            .unwrap();
        p
    };
    let fresh_store = |name: &str| store_in(name, ZarrCompression::Zstd);
    // A missing array.
    let p = fresh_store("missing.zarr");
    std::fs::remove_dir_all(p.join("X/indices")).unwrap();
    let e = error_of(&p);
    assert!(e.contains("X/indices"), "{e}");
    // A truncated chunk.
    let p = fresh_store("truncated.zarr");
    let chunk = p.join("X/data/c/0");
    let bytes = std::fs::read(&chunk).unwrap();
    std::fs::write(&chunk, &bytes[..bytes.len() / 2]).unwrap();
    let e = error_of(&p);
    assert!(e.contains("X/data"), "{e}");
    // Uncompressed chunks, read straight into place: a short one, and an index out of range.
    let plain_store = |name: &str| store_in(name, ZarrCompression::None);
    let p = plain_store("short_plain.zarr");
    let chunk = p.join("X/indices/c/0");
    let bytes = std::fs::read(&chunk).unwrap();
    std::fs::write(&chunk, &bytes[..bytes.len() - 4]).unwrap();
    let e = error_of(&p);
    assert!(e.contains("X/indices"), "{e}");
    let p = plain_store("bad_index.zarr");
    let chunk = p.join("X/indices/c/0");
    let mut bytes = std::fs::read(&chunk).unwrap();
    bytes[..8].fill(0xff);
    std::fs::write(&chunk, &bytes).unwrap();
    let e = error_of(&p);
    assert!(e.contains("X/indices") && e.contains("out of range"), "{e}");
    // An unknown codec.
    let p = fresh_store("codec.zarr");
    let meta = p.join("obsm/X_pca/zarr.json");
    let text = std::fs::read_to_string(&meta)
        .unwrap()
        .replace("\"zstd\"", "\"zorro\"");
    std::fs::write(&meta, text).unwrap();
    let e = error_of(&p);
    assert!(e.contains("obsm/X_pca"), "{e}");
    // A group that is not AnnData.
    let p = fresh_store("foreign.zarr");
    let root = p.join("zarr.json");
    let text = std::fs::read_to_string(&root)
        .unwrap()
        .replace("\"anndata\"", "\"dict\"");
    std::fs::write(&root, text).unwrap();
    let e = error_of(&p);
    assert!(e.contains("is not anndata"), "{e}");
    // Not a store at all.
    let e = error_of(&common::scratch("no-such-store.zarr"));
    assert!(e.contains("not a zarr store"), "{e}");
}

#[test]
fn a_failed_write_leaves_no_store() {
    let mut a = sample();
    a.uns.insert(
        "uneven".into(),
        Value::Records(vec![
            ("a".into(), ArrayData::I32(vec![1, 2])),
            ("b".into(), ArrayData::I32(vec![1])),
        ]),
    );
    let path = fresh("failed.zarr");
    let e = write_zarr(&a, &path).unwrap_err().to_string();
    assert!(e.contains("uneven") && e.contains("field 'b'"), "{e}");
    assert!(!path.exists());
    let left = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("failed.zarr"))
        .count();
    assert_eq!(left, 0, "no partial store");
}

/// A store's X read by blocks of rows (inputs larger than memory): the blocks, across chunk
/// boundaries, are X's rows, for a CSR and a dense X, compressed or not; its extent comes from
/// the metadata; a CSC X and rows past the end are refused by name.
#[test]
fn x_is_read_by_blocks_of_rows() {
    use sc_pipeline::io::{open_row_chunks, row_chunks_extent, ZarrRowChunks};
    let (n_rows, n_cols) = (25_000usize, 300usize);
    let dense: Vec<f32> = (0..n_rows * n_cols)
        .map(|v| if v % 3 == 0 { (v % 101) as f32 } else { 0.0 })
        .collect();
    let dense = sc_pipeline::anndata::DenseMatrix::new(n_rows, n_cols, dense).unwrap();
    let csr = CsrMatrix::from_dense(&dense);
    // Several chunks each: 2,500,000 stored values of CSR, 7,500,000 dense.
    for (what, x, c) in [
        ("csr", Matrix::Sparse(csr.clone()), ZarrCompression::Lz4),
        ("dense", Matrix::Dense(dense.clone()), ZarrCompression::None),
    ] {
        let mut a = AnnData::new(x);
        a.obs = sample_obs(n_rows);
        let path = fresh(&format!("rows-{what}.zarr"));
        write_zarr_staged(&a, &path, c, true)
            .unwrap()
            .commit()
            .unwrap();
        let stored = csr.nnz() as u64;
        let want = (
            n_rows,
            n_cols,
            if what == "csr" {
                stored
            } else {
                (n_rows * n_cols) as u64
            },
        );
        assert_eq!(row_chunks_extent(&path).unwrap(), Some(want), "{what}");
        let r = open_row_chunks(&path).unwrap();
        assert_eq!((r.n_obs(), r.n_vars()), (n_rows, n_cols));
        assert_eq!(r.obs().n_rows(), n_rows);
        for start in (0..n_rows).step_by(4_567) {
            let rows = start..(start + 4_567).min(n_rows);
            let block = r.read_rows(rows.clone()).unwrap();
            let block = block.to_csr().unwrap();
            assert_eq!(block.n_rows, rows.len(), "{what} {rows:?}");
            for (i, row) in rows.clone().enumerate() {
                assert_eq!(block.row(i), csr.row(row), "{what}: row {row}");
            }
            let values = match what {
                "csr" => block.nnz(),
                _ => rows.len() * n_cols,
            };
            assert_eq!(
                r.stored_values(rows.clone()),
                values as u64,
                "{what} {rows:?}"
            );
        }
        let e = r.read_rows(n_rows - 1..n_rows + 1).unwrap_err().to_string();
        assert!(e.contains("outside"), "{e}");
        std::fs::remove_dir_all(&path).unwrap();
    }
    // CSC: refused with the reason.
    let mut a = AnnData::new(Matrix::Sparse(csr.transpose()));
    a.obs = sample_obs(n_cols);
    let path = fresh("rows-csc.zarr");
    write_zarr(&a, &path).unwrap();
    let csc_group = path.join("X/zarr.json");
    let meta = std::fs::read_to_string(&csc_group).unwrap();
    std::fs::write(&csc_group, meta.replace("csr_matrix", "csc_matrix")).unwrap();
    let e = ZarrRowChunks::open(&path).err().unwrap().to_string();
    assert!(e.contains("csc_matrix") && e.contains("/X"), "{e}");
    std::fs::remove_dir_all(&path).unwrap();
}

fn sample_obs(n: usize) -> sc_pipeline::anndata::DataFrame {
    sc_pipeline::anndata::DataFrame::with_index((0..n).map(|i| format!("cell{i}")).collect())
}
