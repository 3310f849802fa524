//! Cutting an AnnData object into contiguous blocks of cells and stacking such blocks back
//! (anndata's `concat(axis=0)` of parts that share their genes): how a run split across
//! ranks hands each rank its cells and assembles the result.

use super::gather::split_lengths;
use super::{AnnData, ArrayData, Column, DataFrame, DenseArray, DeviceMatrix, Matrix, Raw};
use crate::{Error, Result};
use sc_kernels::{CsrMatrix, DenseMatrix};
use std::collections::BTreeMap;

impl AnnData {
    /// `parts` contiguous blocks of cells, as even as possible, each with every per-cell part
    /// of this object; the per-gene parts and `uns` are copied into each (see
    /// [`AnnData::obs_block`]).
    pub fn split_obs(&self, parts: usize) -> Result<Vec<AnnData>> {
        use rayon::prelude::*;
        // The blocks are cut at once (each scans every row of the tables).
        (0..parts.max(1))
            .into_par_iter()
            .map(|part| self.obs_block(part, parts))
            .collect()
    }

    /// Block `part` of `parts` contiguous blocks of cells (cells `part * n / parts` up to
    /// `(part + 1) * n / parts`), with its rows of every per-cell part and a copy of the
    /// per-gene parts and `uns`. Pairwise cell graphs (`obsp`) cannot be cut into blocks and
    /// are refused.
    pub fn obs_block(&self, part: usize, parts: usize) -> Result<AnnData> {
        if part >= parts {
            return Err(Error::invalid(
                "split",
                format!("block {part} of {parts} does not exist"),
            ));
        }
        if let Some(k) = self.obsp.keys().next() {
            return Err(Error::invalid(
                format!("obsp['{k}']"),
                "a cell x cell graph cannot be split across ranks; remove it or run on one GPU",
            ));
        }
        let n = self.n_obs();
        let range = sc_kernels::comm::rank_rows(n, parts, part);
        let keep: Vec<bool> = (0..n).map(|i| range.contains(&i)).collect();
        let mut layers = BTreeMap::new();
        for (k, l) in &self.layers {
            layers.insert(k.clone(), l.row_block(range.clone())?);
        }
        Ok(AnnData {
            x: self.x.row_block(range.clone())?,
            obs: self.obs.select_rows(&keep),
            var: self.var.clone(),
            obsm: self
                .obsm
                .iter()
                .map(|(k, a)| (k.clone(), a.select_rows(&keep)))
                .collect(),
            varm: self.varm.clone(),
            obsp: BTreeMap::new(),
            varp: self.varp.clone(),
            layers,
            uns: self.uns.clone(),
            raw: match &self.raw {
                Some(r) => Some(Raw {
                    x: r.x.row_block(range.clone())?,
                    var: r.var.clone(),
                    varm: r.varm.clone(),
                }),
                None => None,
            },
            ranks: None,
            obs_before_filter: None,
        })
    }

    /// Stacks blocks of cells that share their genes: per-cell parts are concatenated in
    /// order, per-gene parts and `uns` are taken from the first block. X and `raw.X` blocks in
    /// GPU memory stay there (see [`Matrix::stack_blocks`]).
    pub fn stack_obs(mut parts: Vec<AnnData>) -> Result<AnnData> {
        // The cell names are moved, not copied: the parts are this function's.
        let index: Vec<String> = parts
            .iter_mut()
            .flat_map(|p| std::mem::take(&mut p.obs.index))
            .collect();
        let Some(first) = parts.first() else {
            return Err(Error::invalid("stack", "needs at least one part"));
        };
        let n_vars = first.n_vars();
        if let Some(p) = parts.iter().find(|p| p.n_vars() != n_vars) {
            return Err(Error::invalid(
                "stack",
                format!("parts have {} and {} genes", n_vars, p.n_vars()),
            ));
        }
        if parts.iter().any(|p| !p.obsp.is_empty()) {
            return Err(Error::invalid("stack", "parts with obsp graphs"));
        }
        let obs_parts: Vec<&DataFrame> = parts.iter().map(|p| &p.obs).collect();
        let obs = DataFrame::stack_rows_with_index(&obs_parts, index)?;
        let obs_before_filter = stack_before_filter(&parts)?;
        let mut obsm = BTreeMap::new();
        for k in first.obsm.keys() {
            let arrays = each_part(&parts, &format!("obsm['{k}']"), |p| p.obsm.get(k))?;
            obsm.insert(k.clone(), DenseArray::stack_rows(&arrays)?);
        }
        let mut layers = BTreeMap::new();
        for k in first.layers.keys() {
            let ms = each_part(&parts, &format!("layers['{k}']"), |p| p.layers.get(k))?;
            layers.insert(k.clone(), Matrix::stack_rows(&ms)?);
        }
        let raw_meta = first.raw.as_ref().map(|r| (r.var.clone(), r.varm.clone()));
        // X and raw.X are moved out of the parts (blocks on GPUs stay where they are).
        let taken = || Matrix::Sparse(CsrMatrix::zeros(0, 0));
        let x = Matrix::stack_blocks(
            parts
                .iter_mut()
                .map(|p| std::mem::replace(&mut p.x, taken()))
                .collect(),
        )?;
        let raw = match raw_meta {
            None => None,
            Some((var, varm)) => {
                let xs = parts
                    .iter_mut()
                    .map(|p| match &mut p.raw {
                        Some(r) => Ok(std::mem::replace(&mut r.x, taken())),
                        None => Err(Error::invalid("raw", "missing from a part")),
                    })
                    .collect::<Result<Vec<_>>>()?;
                Some(Raw {
                    x: Matrix::stack_blocks(xs)?,
                    var,
                    varm,
                })
            }
        };
        let first = parts.swap_remove(0);
        // What is left of the other parts (a million cells' tables: tens of ms) goes off the
        // critical path.
        crate::release::drop_in_background(parts);
        let stacked = AnnData {
            x,
            obs,
            var: first.var,
            obsm,
            varm: first.varm,
            obsp: BTreeMap::new(),
            varp: first.varp,
            layers,
            uns: first.uns,
            raw,
            ranks: None,
            obs_before_filter,
        };
        stacked.validate_shapes()?;
        Ok(stacked)
    }
}

/// The parts' `obs_before_filter` stacked in order, when every part kept one (a part read back
/// from a file, as a launched rank's, has none: then nothing is known of the whole).
fn stack_before_filter(parts: &[AnnData]) -> Result<Option<DataFrame>> {
    let tables: Option<Vec<&DataFrame>> =
        parts.iter().map(|p| p.obs_before_filter.as_ref()).collect();
    let Some(tables) = tables else {
        return Ok(None);
    };
    let index = tables
        .iter()
        .flat_map(|t| t.index.iter().cloned())
        .collect();
    DataFrame::stack_rows_with_index(&tables, index).map(Some)
}

/// The parts as device matrices, when they all are and can be stacked as blocks of rows
/// (all CSR or all dense in device memory, with the same columns).
fn device_blocks<'a>(parts: &[&'a Matrix]) -> Option<Vec<&'a DeviceMatrix>> {
    let blocks: Vec<&DeviceMatrix> = parts
        .iter()
        .map(|m| match m {
            Matrix::Device(d) => Some(d),
            _ => None,
        })
        .collect::<Option<_>>()?;
    DeviceMatrix::stack_as_rows(&blocks).then_some(blocks)
}

/// `get` of every part, or an error naming `what` when a part lacks it.
fn each_part<'a, T: ?Sized>(
    parts: &'a [AnnData],
    what: &str,
    get: impl Fn(&'a AnnData) -> Option<&'a T>,
) -> Result<Vec<&'a T>> {
    parts
        .iter()
        .map(|p| get(p).ok_or_else(|| Error::invalid(what.to_string(), "missing from a part")))
        .collect()
}

impl Matrix {
    /// The rows `rows` of a host matrix (contiguous: copied as whole ranges).
    pub fn row_block(&self, rows: std::ops::Range<usize>) -> Result<Matrix> {
        let n_cols = self.shape().1;
        match self {
            Matrix::Sparse(c) => {
                let (lo, hi) = (c.indptr[rows.start], c.indptr[rows.end]);
                let indptr = c.indptr[rows.start..=rows.end]
                    .iter()
                    .map(|&p| p - lo)
                    .collect();
                let (lo, hi) = (lo as usize, hi as usize);
                Ok(Matrix::Sparse(CsrMatrix {
                    n_rows: rows.len(),
                    n_cols,
                    indptr,
                    indices: concat_par(&[&c.indices[lo..hi]]),
                    data: concat_par(&[&c.data[lo..hi]]),
                }))
            }
            Matrix::Dense(d) => Ok(Matrix::Dense(DenseMatrix {
                n_rows: rows.len(),
                n_cols,
                data: concat_par(&[&d.data[rows.start * n_cols..rows.end * n_cols]]),
            })),
            Matrix::Device(_) => Err(Error::invalid("split", "matrices must be on the host")),
        }
    }

    /// Matrices one under the other. Parts that are all in GPU memory, all CSR or all dense,
    /// stay on their GPUs as one [`DeviceMatrix::rows`] (written to a file or downloaded later,
    /// every GPU at once); any other parts are stacked on the host ([`Matrix::stack_rows`]).
    pub fn stack_blocks(mut parts: Vec<Matrix>) -> Result<Matrix> {
        if parts.len() == 1 {
            return Ok(parts.remove(0));
        }
        if device_blocks(&parts.iter().collect::<Vec<_>>()).is_some() {
            let blocks = parts
                .into_iter()
                .filter_map(|m| match m {
                    Matrix::Device(d) => Some(d),
                    _ => None,
                })
                .collect();
            return Ok(Matrix::Device(DeviceMatrix::rows(blocks)?));
        }
        Matrix::stack_rows(&parts.iter().collect::<Vec<_>>())
    }

    /// Matrices one under the other, on the host: dense when every part is dense, CSR
    /// otherwise. Parts on GPUs are downloaded first (see [`Matrix::stack_blocks`] to leave
    /// them there).
    pub fn stack_rows(parts: &[&Matrix]) -> Result<Matrix> {
        let n_cols = parts.first().map_or(0, |m| m.shape().1);
        if let Some(p) = parts.iter().find(|m| m.shape().1 != n_cols) {
            return Err(Error::invalid(
                "stack",
                format!("parts have {n_cols} and {} columns", p.shape().1),
            ));
        }
        if let Some(blocks) = device_blocks(parts) {
            return super::gather::gather_blocks(&blocks)
                .map_err(|e| Error::Device(format!("gathering the blocks of rows: {e}")));
        }
        if parts.iter().any(|m| matches!(m, Matrix::Device(_))) {
            let host = parts
                .iter()
                .map(|m| m.host_copy())
                .collect::<Result<Vec<_>>>()?;
            return Matrix::stack_rows(&host.iter().collect::<Vec<_>>());
        }
        if parts.iter().all(|m| matches!(m, Matrix::Dense(_))) {
            let datas: Vec<&[f32]> = parts
                .iter()
                .filter_map(|m| match m {
                    Matrix::Dense(d) => Some(&d.data[..]),
                    _ => None,
                })
                .collect();
            let data = concat_par(&datas);
            let n_rows = if n_cols == 0 {
                parts.iter().map(|m| m.shape().0).sum()
            } else {
                data.len() / n_cols
            };
            return Ok(Matrix::Dense(DenseMatrix {
                n_rows,
                n_cols,
                data,
            }));
        }
        let csrs = parts
            .iter()
            .map(|m| m.to_csr())
            .collect::<Result<Vec<_>>>()?;
        let mut indptr = Vec::with_capacity(1 + csrs.iter().map(|c| c.n_rows).sum::<usize>());
        indptr.push(0u64);
        for c in &csrs {
            let base = *indptr.last().expect("starts with 0");
            indptr.extend(c.indptr[1..].iter().map(|&p| p + base));
        }
        let indices = concat_par(&csrs.iter().map(|c| &c.indices[..]).collect::<Vec<_>>());
        let data = concat_par(&csrs.iter().map(|c| &c.data[..]).collect::<Vec<_>>());
        // Well formed by construction: each part is, and the offsets are shifted in order.
        Ok(Matrix::Sparse(CsrMatrix {
            n_rows: indptr.len() - 1,
            n_cols,
            indptr,
            indices,
            data,
        }))
    }
}

/// The slices one after the other, copied by every thread of the pool at once (stacking
/// tens of gigabytes on one thread takes seconds, mostly in page faults of the new memory).
fn concat_par<T: Copy + Send + Sync>(parts: &[&[T]]) -> Vec<T> {
    use rayon::prelude::*;
    const CHUNK: usize = 1 << 20;
    let total = parts.iter().map(|p| p.len()).sum();
    let mut out: Vec<T> = Vec::with_capacity(total);
    let dsts = split_lengths(
        &mut out.spare_capacity_mut()[..total],
        parts.iter().map(|p| p.len()),
    );
    dsts.into_par_iter().zip(parts).for_each(|(d, s)| {
        d.par_chunks_mut(CHUNK)
            .zip(s.par_chunks(CHUNK))
            .for_each(|(d, s)| {
                for (x, y) in d.iter_mut().zip(s) {
                    x.write(*y);
                }
            });
    });
    // SAFETY: every one of the `total` elements was written above.
    unsafe { out.set_len(total) };
    out
}

impl DataFrame {
    /// Tables with the same columns, one under the other.
    pub fn stack_rows(parts: &[&DataFrame]) -> Result<DataFrame> {
        let index = parts.iter().flat_map(|p| p.index.iter().cloned()).collect();
        Self::stack_rows_with_index(parts, index)
    }

    /// [`DataFrame::stack_rows`] with the stacked index given (moved out of the parts by a
    /// caller that owns them; the parts' own index is not read).
    pub(crate) fn stack_rows_with_index(
        parts: &[&DataFrame],
        index: Vec<String>,
    ) -> Result<DataFrame> {
        let Some(first) = parts.first() else {
            return Ok(DataFrame::default());
        };
        let mut out = DataFrame::with_index(index);
        out.index_name = first.index_name.clone();
        for (name, _) in first.columns() {
            let cols = parts
                .iter()
                .map(|p| {
                    p.column(name).ok_or_else(|| {
                        Error::invalid(format!("column '{name}'"), "missing from a part")
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            out.set(name, Column::stack(name, &cols)?)?;
        }
        Ok(out)
    }
}

impl Column {
    /// Columns of one kind one after the other (categorical parts must share their
    /// categories, as blocks cut from one column do).
    pub fn stack(name: &str, parts: &[&Column]) -> Result<Column> {
        let mismatch = || Error::invalid(format!("column '{name}'"), "parts of different kinds");
        match parts.first() {
            None => Err(mismatch()),
            Some(Column::Values(_)) => {
                let vals = parts
                    .iter()
                    .map(|c| match c {
                        Column::Values(v) => Ok(v),
                        _ => Err(mismatch()),
                    })
                    .collect::<Result<Vec<_>>>()?;
                Ok(Column::Values(ArrayData::stack(name, &vals)?))
            }
            Some(Column::Categorical {
                categories,
                ordered,
                ..
            }) => {
                let mut codes = Vec::new();
                for c in parts {
                    match c {
                        Column::Categorical {
                            codes: c,
                            categories: cats,
                            ..
                        } if cats == categories => codes.extend_from_slice(c),
                        _ => return Err(mismatch()),
                    }
                }
                Ok(Column::Categorical {
                    codes,
                    categories: categories.clone(),
                    ordered: *ordered,
                })
            }
            Some(Column::Nullable { .. }) => {
                let mut vals = Vec::new();
                let mut mask = Vec::new();
                for c in parts {
                    match c {
                        Column::Nullable { values, mask: m } => {
                            vals.push(values);
                            mask.extend_from_slice(m);
                        }
                        _ => return Err(mismatch()),
                    }
                }
                Ok(Column::Nullable {
                    values: ArrayData::stack(name, &vals)?,
                    mask,
                })
            }
        }
    }
}

impl ArrayData {
    /// Arrays of one element type one after the other.
    pub fn stack(name: &str, parts: &[&ArrayData]) -> Result<ArrayData> {
        /// Each part's values of one type (`None` when a part has another type).
        fn each<'a, T>(
            parts: &[&'a ArrayData],
            get: impl Fn(&'a ArrayData) -> Option<&'a Vec<T>>,
        ) -> Option<Vec<&'a [T]>> {
            parts.iter().map(|p| get(p).map(Vec::as_slice)).collect()
        }
        let first = parts
            .first()
            .ok_or_else(|| Error::invalid(name, "no parts"))?;
        // Numbers are copied in parallel (a million cells' embedding is 200 MB), strings cloned.
        macro_rules! stack_as {
            ($variant:ident, $concat:expr) => {
                each(parts, |a| match a {
                    ArrayData::$variant(v) => Some(v),
                    _ => None,
                })
                .map(|p| ArrayData::$variant($concat(&p)))
            };
        }
        let stacked = match first {
            ArrayData::Bool(_) => stack_as!(Bool, concat_par),
            ArrayData::I32(_) => stack_as!(I32, concat_par),
            ArrayData::I64(_) => stack_as!(I64, concat_par),
            ArrayData::F32(_) => stack_as!(F32, concat_par),
            ArrayData::F64(_) => stack_as!(F64, concat_par),
            ArrayData::Str(_) => stack_as!(Str, |p: &[&[String]]| p.concat()),
        };
        stacked.ok_or_else(|| Error::invalid(name, "parts of different element types"))
    }
}

impl DenseArray {
    /// Arrays with the same trailing shape, stacked along the first axis.
    pub fn stack_rows(parts: &[&DenseArray]) -> Result<DenseArray> {
        let first = parts
            .first()
            .ok_or_else(|| Error::invalid("array", "no parts"))?;
        if first.shape.is_empty() || parts.iter().any(|p| p.shape[1..] != first.shape[1..]) {
            return Err(Error::invalid("array", "parts of different shapes"));
        }
        let data = ArrayData::stack("array", &parts.iter().map(|p| &p.data).collect::<Vec<_>>())?;
        let mut shape = first.shape.clone();
        shape[0] = parts.iter().map(|p| p.shape[0]).sum();
        DenseArray::new(shape, data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(n: usize) -> AnnData {
        let dense = DenseMatrix::new(n, 3, (0..n * 3).map(|v| (v % 4) as f32).collect()).unwrap();
        let mut a = AnnData::new(Matrix::Sparse(CsrMatrix::from_dense(&dense)));
        a.obs
            .set("batch", Column::categorical_from_labels(&vec!["a"; n]))
            .unwrap();
        a.obs
            .set_values("n", ArrayData::I64((0..n as i64).collect()))
            .unwrap();
        a.obsm.insert(
            "X_pca".into(),
            DenseArray::matrix_f32(n, 2, (0..2 * n).map(|v| v as f32).collect()).unwrap(),
        );
        a
    }

    #[test]
    fn split_then_stack_gives_back_the_object() {
        let a = sample(10);
        for parts in 1..=4 {
            let blocks = a.split_obs(parts).unwrap();
            assert_eq!(blocks.len(), parts);
            assert_eq!(blocks.iter().map(|b| b.n_obs()).sum::<usize>(), 10);
            assert_eq!(AnnData::stack_obs(blocks).unwrap(), a);
        }
    }

    #[test]
    fn mismatched_parts_are_refused() {
        let a = sample(4);
        let mut b = sample(4);
        b.obs.set_values("n", ArrayData::F64(vec![0.0; 4])).unwrap();
        let e = AnnData::stack_obs(vec![a, b]).unwrap_err().to_string();
        assert!(e.contains("different element types"), "{e}");
        let mut c = sample(3);
        c.obsp.insert("g".into(), CsrMatrix::zeros(3, 3));
        let e = c.split_obs(2).unwrap_err().to_string();
        assert!(e.contains("obsp['g']"), "{e}");
        let e = sample(3).obs_block(2, 2).unwrap_err().to_string();
        assert!(e.contains("block 2 of 2"), "{e}");
    }
}
