//! Files written by anndata (the shared datasets) are read completely, and survive being
//! written again.

mod common;

use sc_pipeline::anndata::{ArrayData, Column, Matrix, Value};
use sc_pipeline::io::{read_h5ad, write_h5ad};

#[test]
fn pbmc68k_reduced_is_read_with_every_part() {
    let a = read_h5ad(common::shared_data("pbmc68k_reduced.h5ad")).unwrap();
    assert_eq!((a.n_obs(), a.n_vars()), (700, 765));
    assert!(matches!(a.x, Matrix::Dense(_)), "X is dense in this file");
    let raw = a.raw.as_ref().expect("raw is present");
    assert_eq!(raw.x.shape(), (700, 765));
    assert_eq!(raw.x.stored_values(), 174_400);
    match a.obs.column("bulk_labels") {
        Some(Column::Categorical {
            categories: ArrayData::Str(c),
            codes,
            ..
        }) => {
            assert_eq!(c.len(), 10);
            assert!(codes.iter().all(|&k| (0..10).contains(&k)));
        }
        other => panic!("bulk_labels should be categorical, is {other:?}"),
    }
    assert!(matches!(
        a.obs.column("n_genes"),
        Some(Column::Values(ArrayData::I64(_)))
    ));
    assert!(matches!(
        a.var.column("highly_variable"),
        Some(Column::Values(ArrayData::Bool(_)))
    ));
    assert_eq!(a.obs.column_names().count(), 8);
    assert_eq!(a.obsm["X_pca"].shape, vec![700, 50]);
    assert!(matches!(a.obsm["X_umap"].data, ArrayData::F64(_)));
    assert_eq!(a.varm["PCs"].shape, vec![765, 50]);
    assert_eq!(a.obsp["distances"].nnz(), 6300);
    assert_eq!(a.obsp["connectivities"].nnz(), 9992);
    let params = a.uns["neighbors"].get("params").unwrap();
    assert_eq!(params.get("method"), Some(&Value::str("umap")));
    assert!(matches!(
        a.uns["pca"].get("variance"),
        Some(Value::Array(_))
    ));
    match a.uns["rank_genes_groups"].get("names") {
        Some(Value::Records(fields)) => {
            assert_eq!(fields.len(), 10);
            assert!(matches!(&fields[0].1, ArrayData::Str(v) if v.len() == 100));
        }
        other => panic!("names should be a record array, is {other:?}"),
    }
}

#[test]
fn gzip_compressed_files_with_nullable_indexes_are_read() {
    let a = read_h5ad(common::shared_data(
        "celltypist_sample_559x32786_counts.h5ad",
    ))
    .unwrap();
    assert_eq!((a.n_obs(), a.n_vars()), (559, 32786));
    assert_eq!(a.x.stored_values(), 1_027_859);
    assert!(
        a.x.values()
            .expect("host matrix")
            .iter()
            .all(|&v| v >= 0.0 && v.fract() == 0.0),
        "raw UMI counts"
    );
    assert_eq!(a.var.index.len(), 32786);
    assert!(a.var.index.iter().all(|g| !g.is_empty()));
}

#[test]
fn batches_are_read_as_categoricals() {
    let a = read_h5ad(common::shared_data(
        "scvi_pbmc5k_pbmc10k_400cells_2batches_counts.h5ad",
    ))
    .unwrap();
    assert_eq!((a.n_obs(), a.n_vars()), (400, 15792));
    let (codes, groups) = a
        .obs
        .column("batch")
        .unwrap()
        .group_labels("batch")
        .unwrap();
    assert_eq!(groups.len(), 2);
    assert_eq!(codes.len(), 400);
}

#[test]
fn anndata_files_survive_a_rewrite() {
    for name in [
        "pbmc68k_reduced.h5ad",
        "scvi_pbmc5k_pbmc10k_400cells_2batches_counts.h5ad",
    ] {
        let a = read_h5ad(common::shared_data(name)).unwrap();
        let path = common::scratch(name);
        write_h5ad(&a, &path).unwrap();
        let b = read_h5ad(&path).unwrap();
        assert!(
            format!("{a:?}") == format!("{b:?}"),
            "{name} changed on rewrite"
        );
        std::fs::remove_file(&path).unwrap();
    }
}
