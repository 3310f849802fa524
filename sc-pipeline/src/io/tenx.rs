//! 10x Genomics HDF5 matrices (`filtered_feature_bc_matrix.h5`).
//!
//! Cell Ranger 3+ writes one `/matrix` group: a features x barcodes CSC matrix (`data`,
//! `indices`, `indptr`, `shape`), `barcodes` and a `features` group (`id`, `name`,
//! `feature_type`, `genome`). Cell Ranger 2 writes one group per genome with `genes` and
//! `gene_names` instead of `features`. Features x barcodes CSC is exactly barcodes x features
//! CSR, so the arrays become the cells x genes matrix without any reordering.

use super::h5ad::compressed::CompressedArrays;
use super::h5ad::hdf5_access::H5Ctx;
use crate::anndata::{AnnData, ArrayData, Column, DataFrame, Matrix};
use crate::{Error, Result};
use hdf5::Group;
use sc_kernels::CsrMatrix;
use std::path::Path;

/// Reads a 10x HDF5 file. `genome` picks the genome: for Cell Ranger 2 files the group to read
/// (required when the file holds several), for Cell Ranger 3 files the features to keep.
///
/// `var` is indexed by gene symbol (scanpy's default) with columns `gene_ids`,
/// `feature_types` and `genome`; `obs` is indexed by barcode.
pub fn read_10x_h5(path: impl AsRef<Path>, genome: Option<&str>) -> Result<AnnData> {
    read_10x_h5_with_notices(path, genome).map(|(adata, _)| adata)
}

/// [`read_10x_h5`], also returning what the user should be told (one `notice: ...` line each),
/// such as float64 counts read as float32.
pub fn read_10x_h5_with_notices(
    path: impl AsRef<Path>,
    genome: Option<&str>,
) -> Result<(AnnData, Vec<String>)> {
    let ctx = H5Ctx::new(path.as_ref());
    let adata = read_file(&ctx, genome)?;
    Ok((adata, ctx.notices.lines()))
}

fn read_file(ctx: &H5Ctx, genome: Option<&str>) -> Result<AnnData> {
    let file = ctx.open()?;
    if file.link_exists("matrix") {
        let g = ctx.group(&file, "matrix", "/matrix")?;
        read_v3(ctx, &g, genome)
    } else {
        let genomes = file.member_names().map_err(ctx.h5("/"))?;
        let name = match (genome, genomes.as_slice()) {
            (_, []) => {
                return Err(ctx.format(
                    "/",
                    "no '/matrix' group and no genome groups: not a 10x HDF5 file",
                ))
            }
            (Some(g), _) if genomes.iter().any(|x| x == g) => g.to_string(),
            (Some(g), _) => {
                return Err(ctx.format(
                    "/",
                    format!(
                        "genome '{g}' is not in the file; it has {}",
                        genomes.join(", ")
                    ),
                ))
            }
            (None, [only]) => only.clone(),
            (None, _) => {
                return Err(ctx.format(
                    "/",
                    format!(
                        "the file holds several genomes ({}): choose one",
                        genomes.join(", ")
                    ),
                ))
            }
        };
        let g = ctx.group(&file, &name, &format!("/{name}"))?;
        read_v2(ctx, &g, &name)
    }
}

/// Barcodes x features CSR from the 10x CSC arrays in `g`.
fn read_counts(ctx: &H5Ctx, g: &Group, element: &str) -> Result<CsrMatrix<f32>> {
    let shape_el = format!("{element}/shape");
    let shape_ds = ctx.dataset(g, "shape", &shape_el)?;
    let shape = match ctx.array(&shape_ds, &shape_el)?.1.to_f64() {
        Some(s) if s.len() == 2 && s.iter().all(|&d| d >= 0.0) => s,
        _ => {
            return Err(ctx.format(
                &shape_el,
                "must hold two non-negative sizes (features, barcodes)",
            ))
        }
    };
    let (n_features, n_barcodes) = (shape[0] as usize, shape[1] as usize);
    // Not checked to be 1-dimensional (h5ad's groups are).
    let arrays = CompressedArrays::open(ctx, g, element, false)?;
    let (indptr, indices, values) = arrays.read(ctx, n_barcodes, n_features, element, None)?;
    let m = CsrMatrix {
        n_rows: n_barcodes,
        n_cols: n_features,
        indptr,
        indices,
        data: values,
    };
    m.check_counts()
        .map_err(|e| ctx.format(&format!("{element}/data"), format!("not valid counts: {e}")))?;
    Ok(m)
}

fn strings(
    ctx: &H5Ctx,
    g: &Group,
    name: &str,
    element: &str,
    expected: usize,
) -> Result<Vec<String>> {
    let el = format!("{element}/{name}");
    let ds = ctx.dataset(g, name, &el)?;
    let v = ctx.strings(&ds, &el)?;
    if v.len() != expected {
        return Err(ctx.format(&el, format!("has {} entries, expected {expected}", v.len())));
    }
    Ok(v)
}

fn assemble(
    x: CsrMatrix<f32>,
    barcodes: Vec<String>,
    names: Vec<String>,
    ids: Vec<String>,
) -> Result<AnnData> {
    let mut adata = AnnData::new(Matrix::Sparse(x));
    adata.obs = DataFrame::with_index(barcodes);
    adata.var = DataFrame::with_index(names);
    adata.var.set_values("gene_ids", ArrayData::Str(ids))?;
    Ok(adata)
}

fn read_v3(ctx: &H5Ctx, g: &Group, genome: Option<&str>) -> Result<AnnData> {
    let x = read_counts(ctx, g, "/matrix")?;
    let barcodes = strings(ctx, g, "barcodes", "/matrix", x.n_rows)?;
    let features = ctx.group(g, "features", "/matrix/features")?;
    let el = "/matrix/features";
    let ids = strings(ctx, &features, "id", el, x.n_cols)?;
    let names = strings(ctx, &features, "name", el, x.n_cols)?;
    let types = strings(ctx, &features, "feature_type", el, x.n_cols)?;
    let genomes = if features.link_exists("genome") {
        Some(strings(ctx, &features, "genome", el, x.n_cols)?)
    } else {
        None
    };
    let mut adata = assemble(x, barcodes, names, ids)?;
    adata
        .var
        .set("feature_types", Column::categorical_from_labels(&types))?;
    if let Some(genomes) = &genomes {
        adata
            .var
            .set("genome", Column::categorical_from_labels(genomes))?;
    }
    if let Some(wanted) = genome {
        let available = genomes.ok_or_else(|| {
            ctx.format(
                el,
                format!("genome '{wanted}' was asked for but the file has no 'genome' dataset"),
            )
        })?;
        let keep: Vec<bool> = available.iter().map(|g| g == wanted).collect();
        if !keep.iter().any(|&k| k) {
            let mut distinct = available.clone();
            distinct.sort();
            distinct.dedup();
            return Err(ctx.format(
                el,
                format!(
                    "no feature belongs to genome '{wanted}'; genomes: {}",
                    distinct.join(", ")
                ),
            ));
        }
        adata.select_var(&keep)?;
    }
    Ok(adata)
}

fn read_v2(ctx: &H5Ctx, g: &Group, genome: &str) -> Result<AnnData> {
    let element = format!("/{genome}");
    let x = read_counts(ctx, g, &element)?;
    let barcodes = strings(ctx, g, "barcodes", &element, x.n_rows)?;
    let ids = strings(ctx, g, "genes", &element, x.n_cols)?;
    let names = strings(ctx, g, "gene_names", &element, x.n_cols)?;
    assemble(x, barcodes, names, ids).map_err(|e| match e {
        Error::InvalidData { what, problem } => ctx.format(&element, format!("{what}: {problem}")),
        other => other,
    })
}
