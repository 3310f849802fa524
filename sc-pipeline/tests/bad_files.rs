//! Malformed files are refused with an error that names the element and the problem.

mod common;

use hdf5::types::VarLenUnicode;
use hdf5::{File, Group};
use sc_pipeline::io::{read_10x_h5, read_h5ad, H5adRowChunks};

fn attr_str(loc: &hdf5::Location, name: &str, value: &str) {
    let v: VarLenUnicode = value.parse().unwrap();
    loc.new_attr::<VarLenUnicode>()
        .create(name)
        .unwrap()
        .write_scalar(&v)
        .unwrap();
}

fn csr_group(
    parent: &Group,
    name: &str,
    shape: [i64; 2],
    data: &[f32],
    indices: &[i32],
    indptr: &[i64],
) -> Group {
    let g = parent.create_group(name).unwrap();
    attr_str(&g, "encoding-type", "csr_matrix");
    attr_str(&g, "encoding-version", "0.1.0");
    g.new_attr::<i64>()
        .shape(2)
        .create("shape")
        .unwrap()
        .write_raw(&shape)
        .unwrap();
    g.new_dataset_builder()
        .with_data(data)
        .create("data")
        .unwrap();
    g.new_dataset_builder()
        .with_data(indices)
        .create("indices")
        .unwrap();
    g.new_dataset_builder()
        .with_data(indptr)
        .create("indptr")
        .unwrap();
    g
}

/// Writes a file through `build` and returns the error message of reading it.
fn read_error(build: impl FnOnce(&File)) -> String {
    let path = common::scratch("bad.h5ad");
    {
        let f = File::create(&path).unwrap();
        build(&f);
    }
    let e = read_h5ad(&path)
        .expect_err("the file is malformed")
        .to_string();
    std::fs::remove_file(&path).unwrap();
    e
}

#[test]
fn a_missing_file_is_named() {
    let e = read_h5ad("/nonexistent/dir/x.h5ad")
        .unwrap_err()
        .to_string();
    assert!(e.contains("no such file"), "{e}");
}

#[test]
fn a_file_that_is_not_hdf5_is_refused() {
    let path = common::scratch("text.h5ad");
    std::fs::write(&path, "just text").unwrap();
    let e = read_h5ad(&path).unwrap_err().to_string();
    assert!(e.contains("not a readable HDF5 file"), "{e}");
}

#[test]
fn a_missing_x_is_refused() {
    let e = read_error(|f| {
        f.create_group("obs").unwrap();
    });
    assert!(e.contains("/X") && e.contains("missing"), "{e}");
}

#[test]
fn missing_sparse_parts_are_named() {
    let e = read_error(|f| {
        let g = f.create_group("X").unwrap();
        attr_str(&g, "encoding-type", "csr_matrix");
        g.new_attr::<i64>()
            .shape(2)
            .create("shape")
            .unwrap()
            .write_raw(&[2i64, 2])
            .unwrap();
        g.new_dataset_builder()
            .with_data(&[1.0f32])
            .create("data")
            .unwrap();
        g.new_dataset_builder()
            .with_data(&[0i32])
            .create("indices")
            .unwrap();
    });
    assert!(e.contains("/X/indptr") && e.contains("missing"), "{e}");
}

#[test]
fn a_sparse_group_without_shape_is_refused() {
    let e = read_error(|f| {
        let g = f.create_group("X").unwrap();
        attr_str(&g, "encoding-type", "csr_matrix");
    });
    assert!(e.contains("shape"), "{e}");
}

#[test]
fn offsets_out_of_range_are_refused() {
    let e = read_error(|f| {
        csr_group(f, "X", [2, 3], &[1.0, 2.0], &[0, 1], &[0, 1, 5]);
    });
    assert!(e.contains("/X/indptr") && e.contains("ends at 5"), "{e}");
    let e = read_error(|f| {
        csr_group(f, "X", [2, 3], &[1.0, 2.0], &[0, 1], &[0, 2, 1]);
    });
    assert!(e.contains("decreases"), "{e}");
    let e = read_error(|f| {
        csr_group(f, "X", [3, 3], &[1.0, 2.0], &[0, 1], &[0, 2]);
    });
    assert!(e.contains("/X/indptr") && e.contains("expected 4"), "{e}");
}

#[test]
fn column_indices_out_of_range_are_refused() {
    let e = read_error(|f| {
        csr_group(f, "X", [2, 3], &[1.0, 2.0], &[0, 3], &[0, 1, 2]);
    });
    assert!(e.contains("/X/indices") && e.contains("index 3"), "{e}");
    let e = read_error(|f| {
        csr_group(f, "X", [2, 3], &[1.0, 2.0], &[0, -1], &[0, 1, 2]);
    });
    assert!(e.contains("index -1"), "{e}");
}

#[test]
fn data_and_indices_of_different_lengths_are_refused() {
    let e = read_error(|f| {
        csr_group(f, "X", [2, 3], &[1.0, 2.0, 3.0], &[0, 1], &[0, 1, 2]);
    });
    assert!(e.contains("data has 3 values but indices has 2"), "{e}");
}

#[test]
fn a_table_of_the_wrong_length_is_refused() {
    let e = read_error(|f| {
        csr_group(f, "X", [2, 3], &[1.0, 2.0], &[0, 1], &[0, 1, 2]);
        let obs = f.create_group("obs").unwrap();
        attr_str(&obs, "encoding-type", "dataframe");
        attr_str(&obs, "_index", "_index");
        let names: Vec<VarLenUnicode> =
            ["a", "b", "c"].iter().map(|s| s.parse().unwrap()).collect();
        obs.new_dataset_builder()
            .with_data(&names)
            .create("_index")
            .unwrap();
    });
    assert!(
        e.contains("/obs") && e.contains("has 3 rows but the matrix has 2"),
        "{e}"
    );
}

#[test]
fn a_listed_column_that_is_missing_is_named() {
    let e = read_error(|f| {
        csr_group(f, "X", [1, 1], &[1.0], &[0], &[0, 1]);
        let obs = f.create_group("obs").unwrap();
        attr_str(&obs, "_index", "_index");
        let cols: Vec<VarLenUnicode> = vec!["n_genes".parse().unwrap()];
        obs.new_attr::<VarLenUnicode>()
            .shape(1)
            .create("column-order")
            .unwrap()
            .write_raw(&cols)
            .unwrap();
        let names: Vec<VarLenUnicode> = vec!["a".parse().unwrap()];
        obs.new_dataset_builder()
            .with_data(&names)
            .create("_index")
            .unwrap();
    });
    assert!(e.contains("/obs/n_genes") && e.contains("missing"), "{e}");
}

#[test]
fn category_codes_out_of_range_are_refused() {
    let e = read_error(|f| {
        csr_group(f, "X", [2, 1], &[1.0], &[0], &[0, 1, 1]);
        let obs = f.create_group("obs").unwrap();
        attr_str(&obs, "_index", "_index");
        let cols: Vec<VarLenUnicode> = vec!["batch".parse().unwrap()];
        obs.new_attr::<VarLenUnicode>()
            .shape(1)
            .create("column-order")
            .unwrap()
            .write_raw(&cols)
            .unwrap();
        let names: Vec<VarLenUnicode> = vec!["a".parse().unwrap(), "b".parse().unwrap()];
        obs.new_dataset_builder()
            .with_data(&names)
            .create("_index")
            .unwrap();
        let cat = obs.create_group("batch").unwrap();
        attr_str(&cat, "encoding-type", "categorical");
        cat.new_dataset_builder()
            .with_data(&[0i8, 2])
            .create("codes")
            .unwrap();
        let cats: Vec<VarLenUnicode> = vec!["x".parse().unwrap(), "y".parse().unwrap()];
        cat.new_dataset_builder()
            .with_data(&cats)
            .create("categories")
            .unwrap();
    });
    assert!(
        e.contains("/obs/batch/codes") && e.contains("code 2"),
        "{e}"
    );
}

#[test]
fn a_dense_x_that_is_not_2d_is_refused() {
    let e = read_error(|f| {
        f.new_dataset_builder()
            .with_data(&[1.0f32, 2.0])
            .create("X")
            .unwrap();
    });
    assert!(e.contains("2-dimensional"), "{e}");
}

#[test]
fn string_matrix_values_are_refused() {
    let e = read_error(|f| {
        let g = csr_group(f, "Y", [1, 1], &[1.0], &[0], &[0, 1]);
        drop(g);
        let x = f.create_group("X").unwrap();
        attr_str(&x, "encoding-type", "csr_matrix");
        x.new_attr::<i64>()
            .shape(2)
            .create("shape")
            .unwrap()
            .write_raw(&[1i64, 1])
            .unwrap();
        let s: Vec<VarLenUnicode> = vec!["1".parse().unwrap()];
        x.new_dataset_builder()
            .with_data(&s)
            .create("data")
            .unwrap();
        x.new_dataset_builder()
            .with_data(&[0i32])
            .create("indices")
            .unwrap();
        x.new_dataset_builder()
            .with_data(&[0i64, 1])
            .create("indptr")
            .unwrap();
    });
    assert!(
        e.contains("/X/data") && e.contains("must be numbers"),
        "{e}"
    );
}

#[test]
fn counts_too_large_for_float32_are_refused() {
    let e = read_error(|f| {
        let x = f.create_group("X").unwrap();
        attr_str(&x, "encoding-type", "csr_matrix");
        x.new_attr::<i64>()
            .shape(2)
            .create("shape")
            .unwrap()
            .write_raw(&[1i64, 1])
            .unwrap();
        x.new_dataset_builder()
            .with_data(&[16_777_217i64])
            .create("data")
            .unwrap();
        x.new_dataset_builder()
            .with_data(&[0i32])
            .create("indices")
            .unwrap();
        x.new_dataset_builder()
            .with_data(&[0i64, 1])
            .create("indptr")
            .unwrap();
    });
    assert!(e.contains("float32"), "{e}");
}

#[test]
fn row_chunks_refuse_csc() {
    let path = common::scratch("csc.h5ad");
    {
        let f = File::create(&path).unwrap();
        let g = csr_group(&f, "X", [2, 2], &[1.0], &[0], &[0, 1, 1]);
        g.delete_attr("encoding-type").unwrap();
        attr_str(&g, "encoding-type", "csc_matrix");
    }
    let e = H5adRowChunks::open(&path)
        .err()
        .expect("CSC cannot be read by rows")
        .to_string();
    assert!(e.contains("csc_matrix"), "{e}");
    // The whole-file reader converts it.
    let a = read_h5ad(&path).unwrap();
    assert_eq!(a.n_obs(), 2);
}

fn tenx_error(build: impl FnOnce(&File)) -> String {
    let path = common::scratch("bad10x.h5");
    {
        let f = File::create(&path).unwrap();
        build(&f);
    }
    read_10x_h5(&path, None)
        .expect_err("malformed 10x file")
        .to_string()
}

fn tenx_matrix(
    f: &File,
    data: &[i32],
    indices: &[i64],
    indptr: &[i64],
    shape: [i32; 2],
    n_barcodes: usize,
    n_features: usize,
) {
    let m = f.create_group("matrix").unwrap();
    m.new_dataset_builder()
        .with_data(data)
        .create("data")
        .unwrap();
    m.new_dataset_builder()
        .with_data(indices)
        .create("indices")
        .unwrap();
    m.new_dataset_builder()
        .with_data(indptr)
        .create("indptr")
        .unwrap();
    m.new_dataset_builder()
        .with_data(&shape)
        .create("shape")
        .unwrap();
    let bc: Vec<VarLenUnicode> = (0..n_barcodes)
        .map(|i| format!("BC{i}").parse().unwrap())
        .collect();
    m.new_dataset_builder()
        .with_data(&bc)
        .create("barcodes")
        .unwrap();
    let feats = m.create_group("features").unwrap();
    for name in ["id", "name", "feature_type", "genome"] {
        let v: Vec<VarLenUnicode> = (0..n_features)
            .map(|i| format!("{name}{i}").parse().unwrap())
            .collect();
        feats
            .new_dataset_builder()
            .with_data(&v)
            .create(name)
            .unwrap();
    }
}

#[test]
fn malformed_10x_files_are_refused() {
    let e = tenx_error(|_| {});
    assert!(e.contains("not a 10x HDF5 file"), "{e}");
    let e = tenx_error(|f| tenx_matrix(f, &[1, 2], &[0, 5], &[0, 1, 2], [3, 2], 2, 3));
    assert!(
        e.contains("/matrix/indices") && e.contains("index 5"),
        "{e}"
    );
    let e = tenx_error(|f| tenx_matrix(f, &[1, -2], &[0, 1], &[0, 1, 2], [3, 2], 2, 3));
    assert!(
        e.contains("not valid counts") && e.contains("negative"),
        "{e}"
    );
    let e = tenx_error(|f| tenx_matrix(f, &[1, 2], &[0, 1], &[0, 1, 2], [3, 2], 3, 3));
    assert!(
        e.contains("/matrix/barcodes") && e.contains("expected 2"),
        "{e}"
    );
}

#[test]
fn non_finite_counts_are_refused_by_the_pipeline() {
    use sc_pipeline::anndata::Matrix;
    use sc_pipeline::run::{run_pipeline, PipelineConfig, Silent};
    let x = sc_kernels::CsrMatrix::new(2, 2, vec![0, 1, 2], vec![0, 1], vec![1.0f32, f32::NAN])
        .unwrap();
    let mut a = sc_pipeline::AnnData::new(Matrix::Sparse(x));
    let e = run_pipeline(&mut a, &PipelineConfig::default(), &mut Silent)
        .unwrap_err()
        .to_string();
    assert!(e.contains("raw counts") && e.contains("non-finite"), "{e}");
}
