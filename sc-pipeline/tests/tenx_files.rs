//! The 10x Genomics HDF5 files of the shared data (Cell Ranger 3 and 2 layouts).

mod common;

use sc_pipeline::anndata::{array_as_strings, Column, Matrix};
use sc_pipeline::io::{is_10x_h5, read_10x_h5};

#[test]
fn cell_ranger_3_is_read_as_cells_by_genes() {
    let a = read_10x_h5(
        common::shared_data("10x/v3_filtered_feature_bc_matrix.h5"),
        None,
    )
    .unwrap();
    assert_eq!((a.n_obs(), a.n_vars()), (1107, 507));
    assert_eq!(a.x.stored_values(), 23_866);
    let Matrix::Sparse(x) = &a.x else {
        panic!("10x matrices are sparse")
    };
    x.validate().unwrap();
    assert!(
        a.obs.index[0].ends_with("-1"),
        "barcodes index obs: {}",
        a.obs.index[0]
    );
    assert!(a.var.column("gene_ids").is_some());
    match a.var.column("feature_types") {
        Some(Column::Categorical { categories, .. }) => {
            assert!(array_as_strings(categories).contains(&"Gene Expression".to_string()))
        }
        other => panic!("feature_types: {other:?}"),
    }
    assert!(x.data.iter().all(|&v| v >= 1.0 && v.fract() == 0.0));
}

#[test]
fn cell_ranger_3_genome_filter_keeps_that_genome() {
    let path = common::shared_data("10x/v3_filtered_feature_bc_matrix.h5");
    let all = read_10x_h5(&path, None).unwrap();
    let Some(Column::Categorical { categories, .. }) = all.var.column("genome") else {
        panic!("genome column")
    };
    let genome = array_as_strings(categories)[0].clone();
    let one = read_10x_h5(&path, Some(&genome)).unwrap();
    assert!(one.n_vars() > 0 && one.n_vars() <= all.n_vars());
    let e = read_10x_h5(&path, Some("no_such_genome"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("no_such_genome"), "{e}");
}

#[test]
fn cell_ranger_2_single_genome() {
    let a = read_10x_h5(
        common::shared_data("10x/v2_filtered_gene_bc_matrices_h5.h5"),
        None,
    )
    .unwrap();
    assert_eq!((a.n_obs(), a.n_vars()), (12, 343));
    assert_eq!(a.x.stored_values(), 12);
    assert_eq!(a.var.index[0], "DSCAM");
}

#[test]
fn cell_ranger_2_several_genomes_need_a_choice() {
    let path = common::shared_data("10x/v2_multiple_genomes.h5");
    let e = read_10x_h5(&path, None).unwrap_err().to_string();
    assert!(
        e.contains("several genomes") && e.contains("hg19_chr21") && e.contains("another_genome"),
        "{e}"
    );
    let a = read_10x_h5(&path, Some("another_genome")).unwrap();
    assert_eq!(a.var.index[0], "gene_0");
    let b = read_10x_h5(&path, Some("hg19_chr21")).unwrap();
    assert_eq!(b.var.index[0], "DSCAM");
    let e = read_10x_h5(&path, Some("mm10")).unwrap_err().to_string();
    assert!(e.contains("mm10") && e.contains("hg19_chr21"), "{e}");
}

#[test]
fn ten_x_files_are_told_from_h5ad_files() {
    for name in [
        "10x/v3_filtered_feature_bc_matrix.h5",
        "10x/v2_filtered_gene_bc_matrices_h5.h5",
        "10x/v2_multiple_genomes.h5",
    ] {
        assert!(is_10x_h5(&common::shared_data(name)), "{name}");
    }
    for name in [
        "celltypist_sample_559x32786_counts.h5ad",
        "pbmc68k_reduced.h5ad",
    ] {
        assert!(!is_10x_h5(&common::shared_data(name)), "{name}");
    }
    // An h5ad file under another name is still recognised by its content.
    let renamed = common::scratch("pbmc.h5");
    std::fs::copy(common::shared_data("pbmc68k_reduced.h5ad"), &renamed).unwrap();
    assert!(!is_10x_h5(&renamed));
    std::fs::remove_file(&renamed).unwrap();
}
