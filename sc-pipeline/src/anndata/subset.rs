//! Subsetting an AnnData object by cells or genes, as `adata[mask]` and `adata[:, mask]` do:
//! every per-cell (per-gene) part is subset along with `X`; `raw` keeps all its genes.

use super::{AnnData, DenseArray};
use crate::{Error, Result};
use sc_kernels::CsrMatrix;
use std::collections::BTreeMap;

impl AnnData {
    /// Keeps the cells whose flag is true.
    pub fn select_obs(&mut self, keep: &[bool]) -> Result<()> {
        check_mask("cell", keep.len(), self.n_obs())?;
        if keep.iter().all(|&k| k) {
            return Ok(());
        }
        self.x = self.x.select_rows(keep)?;
        self.obs.retain_rows(keep);
        self.obsm = select_dense(&self.obsm, keep);
        self.obsp = select_square(&self.obsp, keep)?;
        for layer in self.layers.values_mut() {
            *layer = layer.select_rows(keep)?;
        }
        if let Some(raw) = &mut self.raw {
            raw.x = raw.x.select_rows(keep)?;
        }
        Ok(())
    }

    /// Keeps the genes whose flag is true.
    pub fn select_var(&mut self, keep: &[bool]) -> Result<()> {
        check_mask("gene", keep.len(), self.n_vars())?;
        if keep.iter().all(|&k| k) {
            return Ok(());
        }
        self.x = self.x.select_cols(keep)?;
        self.select_var_annotations(keep)
    }

    /// scanpy's `adata.raw = adata; adata = adata[:, keep]` without copying X twice: X moves
    /// into `raw` (with the current `var`) and the kept genes are taken from it.
    pub fn freeze_raw_and_select_var(&mut self, keep: &[bool]) -> Result<()> {
        check_mask("gene", keep.len(), self.n_vars())?;
        let x = std::mem::replace(&mut self.x, super::Matrix::Sparse(CsrMatrix::zeros(0, 0)));
        let raw = self.raw.insert(super::Raw {
            x,
            var: self.var.clone(),
            varm: BTreeMap::new(),
        });
        self.x = if keep.iter().all(|&k| k) {
            raw.x.try_clone()?
        } else {
            raw.x.select_cols(keep)?
        };
        self.select_var_annotations(keep)
    }

    /// Everything per gene except X.
    fn select_var_annotations(&mut self, keep: &[bool]) -> Result<()> {
        if keep.iter().all(|&k| k) {
            return Ok(());
        }
        self.var = self.var.select_rows(keep);
        self.varm = select_dense(&self.varm, keep);
        self.varp = select_square(&self.varp, keep)?;
        for layer in self.layers.values_mut() {
            *layer = layer.select_cols(keep)?;
        }
        Ok(())
    }
}

fn check_mask(what: &str, got: usize, expected: usize) -> Result<()> {
    if got != expected {
        return Err(Error::invalid(
            format!("{what} mask"),
            format!("{got} flags for {expected} {what}s"),
        ));
    }
    Ok(())
}

fn select_dense(map: &BTreeMap<String, DenseArray>, keep: &[bool]) -> BTreeMap<String, DenseArray> {
    map.iter()
        .map(|(k, a)| (k.clone(), a.select_rows(keep)))
        .collect()
}

fn select_square(
    map: &BTreeMap<String, CsrMatrix<f32>>,
    keep: &[bool],
) -> Result<BTreeMap<String, CsrMatrix<f32>>> {
    map.iter()
        .map(|(k, m)| {
            let picked = m
                .select_rows(keep)
                .and_then(|r| r.select_cols(keep))
                .map_err(|e| Error::invalid(k.clone(), e.to_string()))?;
            Ok((k.clone(), picked))
        })
        .collect()
}
