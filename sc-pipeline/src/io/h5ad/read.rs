//! Reading h5ad files (anndata's HDF5 layout): `X` as CSR, CSC or dense, `obs`/`var`
//! dataframes with categoricals and nullable columns, `obsm`, `varm`, `obsp`, `varp`, `layers`,
//! nested `uns` and `raw`. Every structural problem is reported with the element's path.

use super::compressed::CompressedArrays;
use super::hdf5_access::H5Ctx;
use crate::anndata::{
    AnnData, ArrayData, Column, DataFrame, DenseArray, DenseMatrix, Matrix, Raw, Value,
};
use crate::io::encoding::ENCODING_TYPE;
use crate::Result;
use hdf5::{Group, Location};
use sc_kernels::CsrMatrix;
use std::collections::BTreeMap;
use std::path::Path;

/// Reads a whole h5ad file into memory.
pub fn read_h5ad(path: impl AsRef<Path>) -> Result<AnnData> {
    read_h5ad_with_notices(path).map(|(adata, _)| adata)
}

/// [`read_h5ad`], also returning what the user should be told (one `notice: ...` line each),
/// such as a float64 `X` read as float32.
pub fn read_h5ad_with_notices(path: impl AsRef<Path>) -> Result<(AnnData, Vec<String>)> {
    let ctx = H5Ctx::new(path.as_ref());
    let file = ctx.open()?;
    let root: &Group = &file;
    if !root.link_exists("X") {
        return Err(ctx.format("/X", "missing: the h5ad file has no X matrix"));
    }
    let mut trace = sc_kernels::gpu::trace::PhaseTrace::on_host("h5ad read");
    let x = read_matrix(&ctx, root, "X", "/X")?;
    trace.mark("X").ok();
    let (n_obs, n_vars) = x.shape();
    let obs = read_dataframe_or_default(&ctx, root, "obs", n_obs)?;
    trace.mark("obs").ok();
    let var = read_dataframe_or_default(&ctx, root, "var", n_vars)?;
    trace.mark("var").ok();
    let mut adata = AnnData::new(x);
    adata.obs = obs;
    adata.var = var;
    adata.obsm = read_dense_dict(&ctx, root, "obsm")?;
    adata.varm = read_dense_dict(&ctx, root, "varm")?;
    adata.obsp = read_sparse_dict(&ctx, root, "obsp")?;
    adata.varp = read_sparse_dict(&ctx, root, "varp")?;
    if root.link_exists("layers") {
        let g = ctx.group(root, "layers", "/layers")?;
        for name in member_names(&ctx, &g, "/layers")? {
            let layer = read_matrix(&ctx, &g, &name, &format!("/layers/{name}"))?;
            adata.layers.insert(name, layer);
        }
    }
    if root.link_exists("uns") {
        let g = ctx.group(root, "uns", "/uns")?;
        if let Value::Dict(d) = read_group_value(&ctx, &g, "/uns")? {
            adata.uns = d;
        }
    }
    if root.link_exists("raw") {
        adata.raw = Some(read_raw(&ctx, root)?);
    }
    // X's offsets and indices were checked while reading.
    adata
        .validate_shapes()
        .map_err(|e| ctx.format("/", e.to_string()))?;
    trace.mark("the rest").ok();
    Ok((adata, ctx.notices.lines()))
}

/// The shape of an h5ad file's X and its stored values (every value of a dense X), read from
/// the file's metadata only.
pub fn h5ad_x_size(path: impl AsRef<Path>) -> Result<(usize, usize, u64)> {
    let ctx = H5Ctx::new(path.as_ref());
    let file = ctx.open()?;
    if let Ok(g) = file.group("X") {
        let sparse = SparseGroup::open(&ctx, &g, "/X")?;
        return Ok((
            sparse.n_rows,
            sparse.n_cols,
            sparse.arrays.data.size() as u64,
        ));
    }
    let ds = ctx.dataset(&file, "X", "/X")?;
    match ds.shape()[..] {
        [n_obs, n_vars] => Ok((n_obs, n_vars, n_obs as u64 * n_vars as u64)),
        _ => Err(ctx.format("/X", format!("X has shape {:?}, not 2 sizes", ds.shape()))),
    }
}

fn read_raw(ctx: &H5Ctx, root: &Group) -> Result<Raw> {
    let g = ctx.group(root, "raw", "/raw")?;
    if !g.link_exists("X") {
        return Err(ctx.format("/raw/X", "missing: raw has no matrix"));
    }
    let x = read_matrix(ctx, &g, "X", "/raw/X")?;
    let var = read_dataframe_or_default(ctx, &g, "var", x.shape().1)?;
    let varm = read_dense_dict(ctx, &g, "varm")?;
    Ok(Raw { x, var, varm })
}

/// The `encoding-type` attribute of an element, if any.
pub(crate) fn encoding_type(ctx: &H5Ctx, loc: &Location, element: &str) -> Result<Option<String>> {
    ctx.string_attr(loc, ENCODING_TYPE, element)
}

pub(crate) fn member_names(ctx: &H5Ctx, g: &Group, element: &str) -> Result<Vec<String>> {
    g.member_names().map_err(ctx.h5(element))
}

/// Whether `name` in `parent` is a group (as opposed to a dataset).
fn is_group(parent: &Group, name: &str) -> bool {
    parent.group(name).is_ok()
}

/// `X`, a layer or `raw/X`: a sparse group or a dense 2-D dataset.
pub(crate) fn read_matrix(
    ctx: &H5Ctx,
    parent: &Group,
    name: &str,
    element: &str,
) -> Result<Matrix> {
    if is_group(parent, name) {
        let g = ctx.group(parent, name, element)?;
        return Ok(Matrix::Sparse(read_sparse(ctx, &g, element)?));
    }
    let ds = ctx.dataset(parent, name, element)?;
    if ds.ndim() != 2 {
        return Err(ctx.format(
            element,
            format!(
                "a dense matrix must be 2-dimensional, has shape {:?}",
                ds.shape()
            ),
        ));
    }
    let shape = ds.shape();
    let data = ctx.matrix_values(&ds, None, element)?;
    Ok(Matrix::Dense(DenseMatrix {
        n_rows: shape[0],
        n_cols: shape[1],
        data,
    }))
}

/// Orientation of a sparse group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SparseFormat {
    Csr,
    Csc,
}

/// The parts of a sparse-matrix group, checked for presence and consistent lengths.
pub(crate) struct SparseGroup {
    pub format: SparseFormat,
    pub n_rows: usize,
    pub n_cols: usize,
    pub arrays: CompressedArrays,
}

impl SparseGroup {
    pub fn open(ctx: &H5Ctx, g: &Group, element: &str) -> Result<SparseGroup> {
        let encoding = encoding_type(ctx, g, element)?;
        let legacy = ctx.string_attr(g, "h5sparse_format", element)?;
        let format = match (encoding.as_deref(), legacy.as_deref()) {
            (Some("csr_matrix"), _) | (None, Some("csr")) => SparseFormat::Csr,
            (Some("csc_matrix"), _) | (None, Some("csc")) => SparseFormat::Csc,
            (Some(other), _) => {
                return Err(ctx.format(
                    element,
                    format!("encoding-type '{other}' is not a sparse matrix"),
                ))
            }
            (None, _) => {
                return Err(ctx.format(element, "group has no encoding-type: not a sparse matrix"))
            }
        };
        let shape = match ctx.int_list_attr(g, "shape", element)? {
            Some(s) => s,
            None => ctx
                .int_list_attr(g, "h5sparse_shape", element)?
                .ok_or_else(|| ctx.format(element, "sparse matrix has no 'shape' attribute"))?,
        };
        if shape.len() != 2 || shape.iter().any(|&d| d < 0) {
            return Err(ctx.format(
                element,
                format!("shape attribute {shape:?} is not two non-negative sizes"),
            ));
        }
        let arrays = CompressedArrays::open(ctx, g, element, true)?;
        Ok(SparseGroup {
            format,
            n_rows: shape[0] as usize,
            n_cols: shape[1] as usize,
            arrays,
        })
    }

    /// Number of rows (CSR) or columns (CSC) that `indptr` covers.
    pub fn n_major(&self) -> usize {
        match self.format {
            SparseFormat::Csr => self.n_rows,
            SparseFormat::Csc => self.n_cols,
        }
    }

    pub fn n_minor(&self) -> usize {
        match self.format {
            SparseFormat::Csr => self.n_cols,
            SparseFormat::Csc => self.n_rows,
        }
    }

    /// Reads everything, converting CSC to CSR.
    pub fn read(&self, ctx: &H5Ctx, element: &str) -> Result<CsrMatrix<f32>> {
        let mut trace = sc_kernels::gpu::trace::PhaseTrace::on_host("h5ad read sparse");
        let (indptr, indices, data) = self.arrays.read(
            ctx,
            self.n_major(),
            self.n_minor(),
            element,
            Some(&mut trace),
        )?;
        let m = match self.format {
            SparseFormat::Csr => CsrMatrix {
                n_rows: self.n_rows,
                n_cols: self.n_cols,
                indptr,
                indices,
                data,
            },
            // CSC arrays are the CSR arrays of the transpose.
            SparseFormat::Csc => CsrMatrix {
                n_rows: self.n_cols,
                n_cols: self.n_rows,
                indptr,
                indices,
                data,
            }
            .transpose(),
        };
        // A column stored twice in a row: added, as scipy reads the file (the steps' dense
        // rows would keep one value).
        let (m, added) = m.into_duplicates_summed();
        if added {
            ctx.notices
                .repeated_columns_added(element.trim_start_matches('/'));
        }
        Ok(m)
    }
}

pub(crate) fn read_sparse(ctx: &H5Ctx, g: &Group, element: &str) -> Result<CsrMatrix<f32>> {
    SparseGroup::open(ctx, g, element)?.read(ctx, element)
}

fn read_dataframe_or_default(
    ctx: &H5Ctx,
    parent: &Group,
    name: &str,
    n_rows: usize,
) -> Result<DataFrame> {
    let element = format!("{}/{name}", parent.name().trim_end_matches('/'));
    if !parent.link_exists(name) {
        return Ok(DataFrame::with_default_index(n_rows));
    }
    let g = ctx.group(parent, name, &element)?;
    let df = read_dataframe(ctx, &g, &element)?;
    if df.n_rows() != n_rows {
        return Err(ctx.format(
            &element,
            format!("has {} rows but the matrix has {n_rows}", df.n_rows()),
        ));
    }
    Ok(df)
}

/// A pandas dataframe stored by anndata: `_index` names the index dataset, `column-order` the
/// columns.
pub(crate) fn read_dataframe(ctx: &H5Ctx, g: &Group, element: &str) -> Result<DataFrame> {
    match encoding_type(ctx, g, element)?.as_deref() {
        Some("dataframe") | None => {}
        Some(other) => {
            return Err(ctx.format(
                element,
                format!("expected a dataframe, encoding-type is '{other}'"),
            ))
        }
    }
    let index_name = ctx
        .string_attr(g, "_index", element)?
        .ok_or_else(|| ctx.format(element, "dataframe has no '_index' attribute"))?;
    let index_el = format!("{element}/{index_name}");
    let index = read_column(ctx, g, &index_name, &index_el)?
        .into_index_names()
        .ok_or_else(|| ctx.format(&index_el, "the index must hold strings"))?;
    let mut df = DataFrame::with_index(index);
    df.index_name = index_name;
    let order = ctx
        .string_list_attr(g, "column-order", element)?
        .unwrap_or_default();
    for name in order {
        let col_el = format!("{element}/{name}");
        let column = read_column(ctx, g, &name, &col_el)?;
        if column.len() != df.n_rows() {
            return Err(ctx.format(
                &col_el,
                format!("has {} values for {} rows", column.len(), df.n_rows()),
            ));
        }
        df.set(name, column)
            .map_err(|e| ctx.format(&col_el, e.to_string()))?;
    }
    Ok(df)
}

/// One dataframe column: a 1-D dataset, a categorical group or a nullable group.
fn read_column(ctx: &H5Ctx, g: &Group, name: &str, element: &str) -> Result<Column> {
    if !g.link_exists(name) {
        return Err(ctx.format(element, "column listed in column-order is missing"));
    }
    if !is_group(g, name) {
        let ds = ctx.dataset(g, name, element)?;
        let (shape, data) = ctx.array(&ds, element)?;
        if shape.len() != 1 {
            return Err(ctx.format(
                element,
                format!("a column must be 1-dimensional, has shape {shape:?}"),
            ));
        }
        return Ok(Column::Values(data));
    }
    let cg = ctx.group(g, name, element)?;
    match encoding_type(ctx, &cg, element)?.as_deref() {
        Some("categorical") => {
            let codes_el = format!("{element}/codes");
            let codes_ds = ctx.dataset(&cg, "codes", &codes_el)?;
            let codes = match ctx.array(&codes_ds, &codes_el)?.1 {
                ArrayData::I32(v) => v,
                other => {
                    return Err(ctx.format(
                        &codes_el,
                        format!("codes must be small integers, are {}", other.type_name()),
                    ))
                }
            };
            let cats_el = format!("{element}/categories");
            let cats_ds = ctx.dataset(&cg, "categories", &cats_el)?;
            let categories = ctx.array(&cats_ds, &cats_el)?.1;
            if let Some(problem) = Column::bad_category_code(&codes, categories.len()) {
                return Err(ctx.format(&codes_el, problem));
            }
            let ordered = ctx.bool_attr(&cg, "ordered", element)?.unwrap_or(false);
            Ok(Column::Categorical {
                codes,
                categories,
                ordered,
            })
        }
        Some(enc @ ("nullable-integer" | "nullable-boolean" | "nullable-string-array")) => {
            let values_el = format!("{element}/values");
            let values_ds = ctx.dataset(&cg, "values", &values_el)?;
            let values = ctx.array(&values_ds, &values_el)?.1;
            let mask_el = format!("{element}/mask");
            let mask_ds = ctx.dataset(&cg, "mask", &mask_el)?;
            let mask = match ctx.array(&mask_ds, &mask_el)?.1 {
                ArrayData::Bool(m) => m,
                other => {
                    return Err(ctx.format(
                        &mask_el,
                        format!("mask must be boolean, is {}", other.type_name()),
                    ))
                }
            };
            if mask.len() != values.len() {
                return Err(ctx.format(
                    element,
                    format!(
                        "{enc}: {} values but {} mask entries",
                        values.len(),
                        mask.len()
                    ),
                ));
            }
            Ok(Column::Nullable { values, mask })
        }
        Some(other) => Err(ctx.format(element, format!("unsupported column encoding '{other}'"))),
        None => Err(ctx.format(element, "column group has no encoding-type")),
    }
}

/// `obsm` / `varm`: dense arrays by name.
fn read_dense_dict(
    ctx: &H5Ctx,
    parent: &Group,
    name: &str,
) -> Result<BTreeMap<String, DenseArray>> {
    let mut out = BTreeMap::new();
    let element = format!("{}/{name}", parent.name().trim_end_matches('/'));
    if !parent.link_exists(name) {
        return Ok(out);
    }
    let g = ctx.group(parent, name, &element)?;
    for key in member_names(ctx, &g, &element)? {
        let el = format!("{element}/{key}");
        if is_group(&g, &key) {
            return Err(ctx.format(
                &el,
                "only dense arrays are supported here (found a group: sparse matrix or dataframe)",
            ));
        }
        let ds = ctx.dataset(&g, &key, &el)?;
        let (shape, data) = ctx.array(&ds, &el)?;
        out.insert(key, DenseArray { shape, data });
    }
    Ok(out)
}

/// `obsp` / `varp`: sparse matrices by name.
fn read_sparse_dict(
    ctx: &H5Ctx,
    parent: &Group,
    name: &str,
) -> Result<BTreeMap<String, CsrMatrix<f32>>> {
    let mut out = BTreeMap::new();
    let element = format!("/{name}");
    if !parent.link_exists(name) {
        return Ok(out);
    }
    let g = ctx.group(parent, name, &element)?;
    for key in member_names(ctx, &g, &element)? {
        let el = format!("{element}/{key}");
        let m = match read_matrix(ctx, &g, &key, &el)? {
            Matrix::Sparse(m) => m,
            Matrix::Dense(d) => CsrMatrix::from_dense(&d),
            Matrix::Device(_) => unreachable!("the reader makes host matrices"),
        };
        out.insert(key, m);
    }
    Ok(out)
}

/// Any element of `uns`, by its encoding.
fn read_value(ctx: &H5Ctx, parent: &Group, name: &str, element: &str) -> Result<Value> {
    if is_group(parent, name) {
        let g = ctx.group(parent, name, element)?;
        return read_group_value(ctx, &g, element);
    }
    let ds = ctx.dataset(parent, name, element)?;
    let encoding = encoding_type(ctx, &ds, element)?;
    match encoding.as_deref() {
        Some("rec-array") => {
            return super::rec_array::read_rec_array(ctx, &ds, element).map(Value::Records)
        }
        Some("null") => return Ok(Value::Null),
        Some("array" | "string-array" | "numeric-scalar" | "string") | None => {}
        Some(other) => {
            return Err(ctx.format(element, format!("unsupported encoding-type '{other}'")))
        }
    }
    let (shape, data) = ctx.array(&ds, element)?;
    Ok(Value::from_array(shape, data))
}

fn read_group_value(ctx: &H5Ctx, g: &Group, element: &str) -> Result<Value> {
    match encoding_type(ctx, g, element)?.as_deref() {
        Some("dict") | None => {
            let mut d = BTreeMap::new();
            for key in member_names(ctx, g, element)? {
                let v = read_value(ctx, g, &key, &format!("{element}/{key}"))?;
                d.insert(key, v);
            }
            Ok(Value::Dict(d))
        }
        Some("dataframe") => Ok(Value::DataFrame(read_dataframe(ctx, g, element)?)),
        Some("csr_matrix" | "csc_matrix") => Ok(Value::Sparse(read_sparse(ctx, g, element)?)),
        Some(other) => Err(ctx.format(
            element,
            format!("unsupported encoding-type '{other}' in uns"),
        )),
    }
}
