//! What the pictures read from the final AnnData: the embedding, groupings and numeric
//! columns of `obs`. Each reader says, as a skip reason, what is missing.

use crate::anndata::{array_as_strings, ArrayData, Column, DataFrame};
use crate::AnnData;

/// Why a picture is not drawn.
pub type Missing = String;

/// `obsm[key]` as one `[x, y]` per cell (its first two columns).
pub fn embedding(adata: &AnnData, key: &str) -> Result<Vec<[f32; 2]>, Missing> {
    let a = adata
        .obsm
        .get(key)
        .ok_or_else(|| format!("obsm['{key}'] is missing"))?;
    let cols = match a.shape.as_slice() {
        [n, c] if *n == adata.n_obs() && *c >= 2 => *c,
        shape => return Err(format!("obsm['{key}'] has shape {shape:?}, not cells x 2")),
    };
    let pairs = |v: &dyn Fn(usize) -> f32| {
        (0..adata.n_obs())
            .map(|i| [v(i * cols), v(i * cols + 1)])
            .collect()
    };
    match &a.data {
        ArrayData::F32(v) => Ok(pairs(&|i| v[i])),
        ArrayData::F64(v) => Ok(pairs(&|i| v[i] as f32)),
        other => Err(format!(
            "obsm['{key}'] holds {} values, not numbers",
            other.type_name()
        )),
    }
}

/// Cells grouped by a column of `obs`: each cell's group (`None`: missing) and the group
/// names, a categorical's in its categories' order, other columns' sorted.
pub struct Groups {
    pub codes: Vec<Option<u32>>,
    pub names: Vec<String>,
}

impl Groups {
    pub fn of(obs: &DataFrame, key: &str) -> Result<Groups, Missing> {
        let column = obs
            .column(key)
            .ok_or_else(|| format!("obs has no column '{key}'"))?;
        if let Column::Categorical {
            codes, categories, ..
        } = column
        {
            let names = array_as_strings(categories);
            let codes = codes
                .iter()
                .map(|&c| (c >= 0 && (c as usize) < names.len()).then_some(c as u32))
                .collect();
            return Ok(Groups { codes, names });
        }
        let (index, first_seen) = column
            .group_labels(key)
            .map_err(|e| format!("obs['{key}'] cannot group cells: {e}"))?;
        let mut names = first_seen.clone();
        names.sort();
        let rank: Vec<u32> = first_seen
            .iter()
            .map(|n| names.binary_search(n).expect("a listed name") as u32)
            .collect();
        Ok(Groups {
            codes: index.iter().map(|&g| Some(rank[g as usize])).collect(),
            names,
        })
    }
}

/// A numeric column of `table` (`what` names the table in the reason) as f64.
pub fn numbers(table: &DataFrame, key: &str, what: &str) -> Result<Vec<f64>, Missing> {
    match table.column(key) {
        Some(Column::Values(v)) => v
            .to_f64()
            .ok_or_else(|| format!("{what}['{key}'] holds text, not numbers")),
        Some(_) => Err(format!("{what}['{key}'] is not a plain numeric column")),
        None => Err(format!("{what} has no column '{key}'")),
    }
}
