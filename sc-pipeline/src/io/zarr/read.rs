//! Reading AnnData zarr stores (format 2 or 3, as anndata writes them): `X` as CSR, CSC or
//! dense, `obs`/`var` dataframes with categoricals and nullable columns, `obsm`, `varm`,
//! `obsp`, `varp`, `layers`, nested `uns` and `raw`; chunks decoded in parallel by `zarrs`.
//! Every structural problem is reported with the element's path. The [`Reader`]'s arrays are
//! read in [`super::read_arrays`], its matrices in [`super::read_matrices`]; the dataframes,
//! dicts and values of `uns` here.

use super::store::{child, is_zarr, NodeKind, ZarrCompression, ZarrStore};
use crate::anndata::{AnnData, ArrayData, Column, DataFrame, DenseArray, Matrix, Raw, Value};
use crate::io::encoding::ENCODING_TYPE;
use crate::Result;
use sc_kernels::CsrMatrix;
use serde_json::{Map, Value as Json};
use std::collections::BTreeMap;
use std::path::Path;

/// Reads a whole zarr store into memory.
pub fn read_zarr(path: impl AsRef<Path>) -> Result<AnnData> {
    read_zarr_with_notices(path).map(|(a, _)| a)
}

/// [`read_zarr`], also returning what the user should be told (e.g. a float64 X read as
/// float32).
pub fn read_zarr_with_notices(path: impl AsRef<Path>) -> Result<(AnnData, Vec<String>)> {
    let mut trace = sc_kernels::gpu::trace::PhaseTrace::on_host("zarr read");
    let mut r = Reader::open(path.as_ref())?;
    let x = r.matrix("/X")?;
    trace.mark("X").ok();
    let (n_obs, n_vars) = x.shape();
    let mut adata = AnnData::new(x);
    adata.obs = r.dataframe_or_default("/obs", n_obs)?;
    trace.mark("obs").ok();
    adata.var = r.dataframe_or_default("/var", n_vars)?;
    trace.mark("var").ok();
    adata.obsm = r.dense_dict("/obsm")?;
    adata.varm = r.dense_dict("/varm")?;
    adata.obsp = r.sparse_dict("/obsp")?;
    adata.varp = r.sparse_dict("/varp")?;
    if r.s.kind("/layers").is_some() {
        for name in r.s.members("/layers")? {
            let layer = r.matrix(&child("/layers", &name))?;
            adata.layers.insert(name, layer);
        }
    }
    if r.s.kind("/uns").is_some() {
        if let Value::Dict(d) = r.group_value("/uns")? {
            adata.uns = d;
        }
    }
    // anndata writes a missing `.raw` as a group encoded "null".
    if r.s.kind("/raw").is_some() && r.encoding("/raw")?.as_deref() != Some("null") {
        let x = r.matrix("/raw/X")?;
        let var = r.dataframe_or_default("/raw/var", x.shape().1)?;
        let varm = r.dense_dict("/raw/varm")?;
        adata.raw = Some(Raw { x, var, varm });
    }
    // The sparse matrices' offsets and indices were checked while reading.
    adata
        .validate_shapes()
        .map_err(|e| r.s.format("/", e.to_string()))?;
    trace.mark("the rest").ok();
    Ok((adata, r.notices))
}

pub(super) struct Reader {
    pub(super) s: ZarrStore,
    pub(super) notices: Vec<String>,
}

impl Reader {
    /// The AnnData store at `path` (a zarr store whose root is not another encoding, with an
    /// X), to be read.
    pub(super) fn open(path: &Path) -> Result<Reader> {
        if !is_zarr(path) {
            return Err(crate::Error::File {
                path: path.to_path_buf(),
                message: "not a zarr store (a directory with zarr.json or .zgroup)".into(),
            });
        }
        let s = ZarrStore::open(path, ZarrCompression::None)?;
        let root = s.attrs("/")?;
        if let Some(kind) = root.get(ENCODING_TYPE).and_then(Json::as_str) {
            if kind != "anndata" {
                return Err(s.format("/", format!("encoding-type '{kind}' is not anndata")));
            }
        }
        if s.kind("/X").is_none() {
            return Err(s.format("/X", "missing: the store has no X matrix"));
        }
        Ok(Reader {
            s,
            notices: Vec::new(),
        })
    }

    fn encoding(&self, element: &str) -> Result<Option<String>> {
        Ok(self
            .s
            .attrs(element)?
            .get(ENCODING_TYPE)
            .and_then(Json::as_str)
            .map(str::to_string))
    }

    pub(super) fn dataframe_or_default(
        &mut self,
        element: &str,
        n_rows: usize,
    ) -> Result<DataFrame> {
        if self.s.kind(element).is_none() {
            return Ok(DataFrame::with_default_index(n_rows));
        }
        let df = self.dataframe(element)?;
        if df.n_rows() != n_rows {
            return Err(self.s.format(
                element,
                format!("has {} rows but the matrix has {n_rows}", df.n_rows()),
            ));
        }
        Ok(df)
    }

    /// A pandas dataframe: `_index` names the index array, `column-order` the columns.
    pub(super) fn dataframe(&mut self, element: &str) -> Result<DataFrame> {
        let attrs = self.s.attrs(element)?;
        match attrs.get(ENCODING_TYPE).and_then(Json::as_str) {
            Some("dataframe") | None => {}
            Some(other) => {
                return Err(self.s.format(
                    element,
                    format!("expected a dataframe, encoding-type is '{other}'"),
                ))
            }
        }
        let index_name = str_attr(&attrs, "_index").ok_or_else(|| {
            self.s
                .format(element, "dataframe has no '_index' attribute")
        })?;
        let index_el = child(element, &index_name);
        let index = self
            .column(&index_el)?
            .into_index_names()
            .ok_or_else(|| self.s.format(&index_el, "the index must hold strings"))?;
        let mut df = DataFrame::with_index(index);
        df.index_name = index_name;
        let order: Vec<String> = attrs
            .get("column-order")
            .and_then(Json::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Json::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        for name in order {
            let col_el = child(element, &name);
            if self.s.kind(&col_el).is_none() {
                return Err(self
                    .s
                    .format(&col_el, "column listed in column-order is missing"));
            }
            let column = self.column(&col_el)?;
            if column.len() != df.n_rows() {
                return Err(self.s.format(
                    &col_el,
                    format!("has {} values for {} rows", column.len(), df.n_rows()),
                ));
            }
            df.set(name, column)
                .map_err(|e| self.s.format(&col_el, e.to_string()))?;
        }
        Ok(df)
    }

    /// One dataframe column: a 1-D array, a categorical group or a nullable group.
    pub(super) fn column(&mut self, element: &str) -> Result<Column> {
        if self.s.kind(element) == Some(NodeKind::Array) {
            let (shape, data) = self.array(element)?;
            if shape.len() != 1 {
                return Err(self.s.format(
                    element,
                    format!("a column must be 1-dimensional, has shape {shape:?}"),
                ));
            }
            return Ok(Column::Values(data));
        }
        let attrs = self.s.attrs(element)?;
        match attrs.get(ENCODING_TYPE).and_then(Json::as_str) {
            Some("categorical") => {
                let codes_el = child(element, "codes");
                let codes = match self.array(&codes_el)?.1 {
                    ArrayData::I32(v) => v,
                    other => {
                        return Err(self.s.format(
                            &codes_el,
                            format!("codes must be small integers, are {}", other.type_name()),
                        ))
                    }
                };
                let categories = self.array(&child(element, "categories"))?.1;
                if let Some(problem) = Column::bad_category_code(&codes, categories.len()) {
                    return Err(self.s.format(&codes_el, problem));
                }
                let ordered = attrs
                    .get("ordered")
                    .and_then(Json::as_bool)
                    .unwrap_or(false);
                Ok(Column::Categorical {
                    codes,
                    categories,
                    ordered,
                })
            }
            Some("nullable-integer" | "nullable-boolean" | "nullable-string-array") => {
                let values = self.array(&child(element, "values"))?.1;
                let mask_el = child(element, "mask");
                let mask = match self.array(&mask_el)?.1 {
                    ArrayData::Bool(m) => m,
                    other => {
                        return Err(self.s.format(
                            &mask_el,
                            format!("mask must be boolean, is {}", other.type_name()),
                        ))
                    }
                };
                if mask.len() != values.len() {
                    return Err(self.s.format(
                        element,
                        format!("{} values but {} mask entries", values.len(), mask.len()),
                    ));
                }
                Ok(Column::Nullable { values, mask })
            }
            Some(other) => Err(self
                .s
                .format(element, format!("unsupported column encoding '{other}'"))),
            None => Err(self.s.format(element, "column group has no encoding-type")),
        }
    }

    /// `obsm` / `varm`: dense arrays by name.
    pub(super) fn dense_dict(&mut self, element: &str) -> Result<BTreeMap<String, DenseArray>> {
        let mut out = BTreeMap::new();
        if self.s.kind(element).is_none() {
            return Ok(out);
        }
        for key in self.s.members(element)? {
            let el = child(element, &key);
            if self.s.kind(&el) == Some(NodeKind::Group) {
                return Err(self.s.format(
                    &el,
                    "only dense arrays are supported here (found a group: sparse matrix or dataframe)",
                ));
            }
            let (shape, data) = self.array(&el)?;
            out.insert(key, DenseArray { shape, data });
        }
        Ok(out)
    }

    /// `obsp` / `varp`: sparse matrices by name.
    pub(super) fn sparse_dict(
        &mut self,
        element: &str,
    ) -> Result<BTreeMap<String, CsrMatrix<f32>>> {
        let mut out = BTreeMap::new();
        if self.s.kind(element).is_none() {
            return Ok(out);
        }
        for key in self.s.members(element)? {
            let m = match self.matrix(&child(element, &key))? {
                Matrix::Sparse(m) => m,
                Matrix::Dense(d) => CsrMatrix::from_dense(&d),
                Matrix::Device(_) => unreachable!("the reader makes host matrices"),
            };
            out.insert(key, m);
        }
        Ok(out)
    }

    /// Any element of `uns`, by its encoding.
    pub(super) fn value(&mut self, element: &str) -> Result<Value> {
        if self.s.kind(element) == Some(NodeKind::Group) {
            return self.group_value(element);
        }
        match self.encoding(element)?.as_deref() {
            Some("rec-array") => {
                return super::records::read_records(&self.s, element).map(Value::Records)
            }
            Some("null") => return Ok(Value::Null),
            Some("array" | "string-array" | "numeric-scalar" | "string") | None => {}
            Some(other) => {
                return Err(self
                    .s
                    .format(element, format!("unsupported encoding-type '{other}'")))
            }
        }
        let (shape, data) = self.array(element)?;
        Ok(Value::from_array(shape, data))
    }

    pub(super) fn group_value(&mut self, element: &str) -> Result<Value> {
        match self.encoding(element)?.as_deref() {
            Some("dict") | None => {
                let mut d = BTreeMap::new();
                for key in self.s.members(element)? {
                    let el = child(element, &key);
                    // A None that anndata wrote ("null"): no value to hold.
                    if self.encoding(&el)?.as_deref() == Some("null") {
                        continue;
                    }
                    let v = self.value(&el)?;
                    d.insert(key, v);
                }
                Ok(Value::Dict(d))
            }
            Some("dataframe") => Ok(Value::DataFrame(self.dataframe(element)?)),
            Some("csr_matrix" | "csc_matrix") => Ok(Value::Sparse(self.sparse(element)?)),
            Some(other) => Err(self.s.format(
                element,
                format!("unsupported encoding-type '{other}' in uns"),
            )),
        }
    }
}

fn str_attr(attrs: &Map<String, Json>, key: &str) -> Option<String> {
    attrs.get(key).and_then(Json::as_str).map(str::to_string)
}
