//! `obs` / `var` tables: a string index and named, typed columns in a fixed order.

use super::array::ArrayData;
use crate::{Error, Result};

/// One column of a dataframe.
#[derive(Debug, Clone, PartialEq)]
pub enum Column {
    /// Plain values: numbers, booleans or strings.
    Values(ArrayData),
    /// pandas' categorical: `codes[i]` indexes `categories`, -1 is missing.
    Categorical {
        codes: Vec<i32>,
        categories: ArrayData,
        ordered: bool,
    },
    /// pandas' nullable arrays (Int64, boolean, string): `mask[i]` true means missing.
    Nullable { values: ArrayData, mask: Vec<bool> },
}

impl Column {
    pub fn len(&self) -> usize {
        match self {
            Column::Values(v) => v.len(),
            Column::Categorical { codes, .. } => codes.len(),
            Column::Nullable { mask, .. } => mask.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Builds a categorical column from labels, categories in order of first appearance.
    pub fn categorical_from_labels<S: AsRef<str>>(labels: &[S]) -> Column {
        let mut categories: Vec<String> = Vec::new();
        let mut lookup = std::collections::HashMap::new();
        let codes = labels
            .iter()
            .map(|l| {
                let l = l.as_ref();
                *lookup.entry(l.to_string()).or_insert_with(|| {
                    categories.push(l.to_string());
                    categories.len() as i32 - 1
                })
            })
            .collect();
        Column::Categorical {
            codes,
            categories: ArrayData::Str(categories),
            ordered: false,
        }
    }

    /// What is wrong with categorical `codes` for `n_categories` categories (each must be -1,
    /// missing, or index a category), naming the first bad code; `None`: nothing.
    pub fn bad_category_code(codes: &[i32], n_categories: usize) -> Option<String> {
        codes
            .iter()
            .find(|&&c| c < -1 || c as i64 >= n_categories as i64)
            .map(|bad| format!("code {bad} is outside -1..{n_categories}"))
    }

    /// The column as a dataframe's index (row names): strings, a pandas StringArray (a missing
    /// name reads "NaN", as pandas prints it) or numbers as text; `None` for other columns.
    pub fn into_index_names(self) -> Option<Vec<String>> {
        match self {
            Column::Values(ArrayData::Str(v)) => Some(v),
            Column::Nullable {
                values: ArrayData::Str(v),
                mask,
            } => Some(
                v.into_iter()
                    .zip(mask)
                    .map(|(s, m)| if m { "NaN".to_string() } else { s })
                    .collect(),
            ),
            Column::Values(other) => Some(array_as_strings(&other)),
            _ => None,
        }
    }

    /// Rows picked by `keep`. Categories are kept as they are (as pandas does on subsetting).
    pub fn select(&self, keep: &[bool]) -> Column {
        match self {
            Column::Values(v) => Column::Values(v.select(keep)),
            Column::Categorical {
                codes,
                categories,
                ordered,
            } => Column::Categorical {
                codes: codes
                    .iter()
                    .zip(keep)
                    .filter(|(_, &k)| k)
                    .map(|(&c, _)| c)
                    .collect(),
                categories: categories.clone(),
                ordered: *ordered,
            },
            Column::Nullable { values, mask } => Column::Nullable {
                values: values.select(keep),
                mask: mask
                    .iter()
                    .zip(keep)
                    .filter(|(_, &k)| k)
                    .map(|(&m, _)| m)
                    .collect(),
            },
        }
    }

    /// The value of each row as a group label (for batch keys): categorical codes, or the
    /// distinct values of a string / integer / boolean column numbered in order of first
    /// appearance. Returns the per-row group index and the group names. Missing values are an
    /// error, since a cell without a group cannot be assigned.
    pub fn group_labels(&self, name: &str) -> Result<(Vec<u32>, Vec<String>)> {
        let what = || format!("column '{name}'");
        match self {
            Column::Categorical {
                codes, categories, ..
            } => {
                // Numbered per code, each code's category looked up once (by name, so that
                // repeated category names are one group).
                let names = array_as_strings(categories);
                let mut group_of_code: Vec<Option<u32>> = vec![None; names.len()];
                let mut groups = FirstSeen::new();
                let mut index = Vec::with_capacity(codes.len());
                for (row, &c) in codes.iter().enumerate() {
                    let slot = usize::try_from(c)
                        .ok()
                        .and_then(|c| group_of_code.get_mut(c))
                        .ok_or_else(|| {
                            Error::invalid(what(), format!("row {row} has no category (code {c})"))
                        })?;
                    let g = *slot.get_or_insert_with(|| {
                        groups.number(names[c as usize].as_str(), str::to_string)
                    });
                    index.push(g);
                }
                Ok((index, groups.names))
            }
            Column::Values(ArrayData::F32(_)) | Column::Values(ArrayData::F64(_)) => {
                Err(Error::invalid(
                    what(),
                    "floating-point values cannot be used as group labels",
                ))
            }
            Column::Values(v) => Ok(values_as_groups(v)),
            Column::Nullable { values, mask } => {
                if let Some(row) = mask.iter().position(|&m| m) {
                    return Err(Error::invalid(what(), format!("row {row} is missing")));
                }
                Ok(values_as_groups(values))
            }
        }
    }
}

/// Groups numbered in order of first appearance: each distinct key once, its name rendered once.
struct FirstSeen<K> {
    names: Vec<String>,
    lookup: std::collections::HashMap<K, u32>,
}

impl<K: std::hash::Hash + Eq + Copy> FirstSeen<K> {
    fn new() -> Self {
        FirstSeen {
            names: Vec::new(),
            lookup: std::collections::HashMap::new(),
        }
    }

    fn number(&mut self, key: K, render: impl FnOnce(K) -> String) -> u32 {
        let names = &mut self.names;
        *self.lookup.entry(key).or_insert_with(|| {
            names.push(render(key));
            names.len() as u32 - 1
        })
    }
}

/// [`Column::group_labels`] of plain values: each distinct value looked up once per row by
/// value (not rendered as text per row), rendered once per group.
fn values_as_groups(v: &ArrayData) -> (Vec<u32>, Vec<String>) {
    fn number<K: std::hash::Hash + Eq + Copy>(
        keys: impl Iterator<Item = K>,
        render: impl Fn(K) -> String,
    ) -> (Vec<u32>, Vec<String>) {
        let mut groups = FirstSeen::new();
        let index = keys.map(|k| groups.number(k, &render)).collect();
        (index, groups.names)
    }
    match v {
        ArrayData::Str(s) => number(s.iter().map(String::as_str), str::to_string),
        ArrayData::Bool(b) => number(b.iter().copied(), |x| x.to_string()),
        ArrayData::I32(i) => number(i.iter().copied(), |x| x.to_string()),
        ArrayData::I64(i) => number(i.iter().copied(), |x| x.to_string()),
        // Callers refuse floating-point labels before they get here; rendered as text if not.
        ArrayData::F32(_) | ArrayData::F64(_) => {
            let text = array_as_strings(v);
            number(text.iter().map(String::as_str), str::to_string)
        }
    }
}

/// Every element rendered as text (for labels and messages).
pub fn array_as_strings(a: &ArrayData) -> Vec<String> {
    match a {
        ArrayData::Bool(v) => v.iter().map(|x| x.to_string()).collect(),
        ArrayData::I32(v) => v.iter().map(|x| x.to_string()).collect(),
        ArrayData::I64(v) => v.iter().map(|x| x.to_string()).collect(),
        ArrayData::F32(v) => v.iter().map(|x| x.to_string()).collect(),
        ArrayData::F64(v) => v.iter().map(|x| x.to_string()).collect(),
        ArrayData::Str(v) => v.clone(),
    }
}

/// A table with one row per cell (`obs`) or per gene (`var`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DataFrame {
    /// Name of the index column in the file (`_index` attribute); anndata uses "_index" or the
    /// pandas index name.
    pub index_name: String,
    /// The row names; empty in a table of unnamed rows ([`DataFrame::with_unnamed_rows`]).
    pub index: Vec<String>,
    /// The row count of a table of unnamed rows (0 in a table with names).
    unnamed_rows: usize,
    columns: Vec<(String, Column)>,
}

impl DataFrame {
    /// A table with the given row names and no columns.
    pub fn with_index(index: Vec<String>) -> Self {
        DataFrame {
            index_name: "_index".to_string(),
            index,
            unnamed_rows: 0,
            columns: Vec::new(),
        }
    }

    /// A table of `n` rows named "0", "1", ... (anndata's default names).
    pub fn with_default_index(n: usize) -> Self {
        Self::with_index((0..n).map(|i| i.to_string()).collect())
    }

    /// A table of `n` rows without names (an empty `index`), for a caller that keeps the names
    /// itself (the Python API: 1 M names, even empty strings, cost milliseconds a call to make
    /// and drop).
    pub fn with_unnamed_rows(n: usize) -> Self {
        DataFrame {
            unnamed_rows: n,
            ..Self::with_index(Vec::new())
        }
    }

    /// A table of the same rows (names, or their count) and no columns.
    pub fn with_rows_of(other: &DataFrame) -> Self {
        DataFrame {
            index_name: other.index_name.clone(),
            index: other.index.clone(),
            unnamed_rows: other.unnamed_rows,
            columns: Vec::new(),
        }
    }

    pub fn n_rows(&self) -> usize {
        self.index.len().max(self.unnamed_rows)
    }

    /// Column names in order.
    pub fn column_names(&self) -> impl Iterator<Item = &str> {
        self.columns.iter().map(|(n, _)| n.as_str())
    }

    pub fn columns(&self) -> impl Iterator<Item = (&str, &Column)> {
        self.columns.iter().map(|(n, c)| (n.as_str(), c))
    }

    /// The columns, in their order, taking the table apart.
    pub fn into_columns(self) -> Vec<(String, Column)> {
        self.columns
    }

    pub fn column(&self, name: &str) -> Option<&Column> {
        self.columns.iter().find(|(n, _)| n == name).map(|(_, c)| c)
    }

    /// Inserts or replaces a column (a replaced column keeps its position, as in pandas).
    pub fn set(&mut self, name: impl Into<String>, column: Column) -> Result<()> {
        let name = name.into();
        if column.len() != self.n_rows() {
            return Err(Error::invalid(
                format!("column '{name}'"),
                format!(
                    "{} values for a table of {} rows",
                    column.len(),
                    self.n_rows()
                ),
            ));
        }
        if name == self.index_name && name != "_index" {
            return Err(Error::invalid(
                format!("column '{name}'"),
                "has the name of the index",
            ));
        }
        match self.columns.iter_mut().find(|(n, _)| *n == name) {
            Some((_, c)) => *c = column,
            None => self.columns.push((name, column)),
        }
        Ok(())
    }

    /// Shorthand for a column of plain values.
    pub fn set_values(&mut self, name: impl Into<String>, values: ArrayData) -> Result<()> {
        self.set(name, Column::Values(values))
    }

    pub fn remove(&mut self, name: &str) -> Option<Column> {
        let pos = self.columns.iter().position(|(n, _)| n == name)?;
        Some(self.columns.remove(pos).1)
    }

    /// Rows picked by `keep` (one flag per row).
    pub fn select_rows(&self, keep: &[bool]) -> DataFrame {
        use rayon::prelude::*;
        assert_eq!(keep.len(), self.n_rows(), "row mask length");
        // On every core, the columns side by side (11.4 M cells: tens of millions of values).
        let (unnamed_rows, columns) = self.kept_columns(keep);
        DataFrame {
            index_name: self.index_name.clone(),
            index: self
                .index
                .par_iter()
                .zip(keep)
                .filter(|(_, &k)| k)
                .map(|(s, _)| s.clone())
                .collect(),
            unnamed_rows,
            columns,
        }
    }

    /// [`Self::select_rows`] in place: the kept rows' names move instead of being copied, and
    /// the others' are freed on every core (11.4 M cells: copying the names and freeing the old
    /// ones on one thread took most of a second).
    pub fn retain_rows(&mut self, keep: &[bool]) {
        use rayon::prelude::*;
        assert_eq!(keep.len(), self.n_rows(), "row mask length");
        let (unnamed_rows, columns) = self.kept_columns(keep);
        let index = std::mem::take(&mut self.index);
        self.index = (index.into_par_iter().zip(keep))
            .filter_map(|(s, &k)| k.then_some(s))
            .collect();
        self.unnamed_rows = unnamed_rows;
        self.columns = columns;
    }

    /// The row count of unnamed rows and the columns, of the rows `keep` picks.
    fn kept_columns(&self, keep: &[bool]) -> (usize, Vec<(String, Column)>) {
        use rayon::prelude::*;
        let unnamed_rows = match self.unnamed_rows {
            0 => 0,
            _ => keep.iter().filter(|&&k| k).count(),
        };
        let columns = (self.columns.par_iter())
            .map(|(n, c)| (n.clone(), c.select(keep)))
            .collect();
        (unnamed_rows, columns)
    }

    /// Checks that every column has one value per row and category codes are in range.
    pub fn validate(&self, what: &str) -> Result<()> {
        for (name, c) in &self.columns {
            if c.len() != self.n_rows() {
                return Err(Error::invalid(
                    format!("{what} column '{name}'"),
                    format!("{} values for {} rows", c.len(), self.n_rows()),
                ));
            }
            if let Column::Categorical {
                codes, categories, ..
            } = c
            {
                if let Some(&bad) = codes
                    .iter()
                    .find(|&&k| k < -1 || k >= categories.len() as i32)
                {
                    return Err(Error::invalid(
                        format!("{what} column '{name}'"),
                        format!("category code {bad} outside -1..{}", categories.len()),
                    ));
                }
            }
            if let Column::Nullable { values, mask } = c {
                if values.len() != mask.len() {
                    return Err(Error::invalid(
                        format!("{what} column '{name}'"),
                        format!("{} values but {} mask entries", values.len(), mask.len()),
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> ArrayData {
        ArrayData::Str(v.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn unnamed_rows_count_without_names_through_subsets() {
        let mut t = DataFrame::with_unnamed_rows(4);
        assert_eq!((t.n_rows(), t.index.len()), (4, 0));
        t.set_values("v", ArrayData::F64(vec![1.0, 2.0, 3.0, 4.0]))
            .unwrap();
        assert!(t.set_values("w", ArrayData::F64(vec![1.0])).is_err());
        let kept = t.select_rows(&[true, false, true, true]);
        assert_eq!((kept.n_rows(), kept.index.len()), (3, 0));
        assert_eq!(kept.column("v").unwrap().len(), 3);
        let rows = DataFrame::with_rows_of(&kept);
        assert_eq!((rows.n_rows(), rows.column_names().count()), (3, 0));
        // A named table counts its names.
        let named = DataFrame::with_default_index(2).select_rows(&[false, true]);
        assert_eq!(
            (named.n_rows(), named.index.clone()),
            (1, vec!["1".to_string()])
        );
    }

    #[test]
    fn retaining_rows_in_place_is_selecting_them() {
        let mut named = DataFrame::with_default_index(5);
        named
            .set_values("v", ArrayData::I64(vec![1, 2, 3, 4, 5]))
            .unwrap();
        named
            .set_values("s", strings(&["a", "b", "c", "d", "e"]))
            .unwrap();
        let mut unnamed = DataFrame::with_unnamed_rows(5);
        unnamed
            .set_values("v", ArrayData::F64(vec![0.5; 5]))
            .unwrap();
        let keep = [false, true, true, false, true];
        for mut t in [named, unnamed] {
            let selected = t.select_rows(&keep);
            t.retain_rows(&keep);
            assert_eq!(t, selected);
            assert_eq!(t.n_rows(), 3);
        }
    }

    #[test]
    fn group_labels_number_groups_in_order_of_first_appearance() {
        let cat = Column::Categorical {
            codes: vec![2, 0, 2, 1, 0],
            categories: strings(&["a", "b", "c"]),
            ordered: false,
        };
        assert_eq!(
            cat.group_labels("batch").unwrap(),
            (
                vec![0, 1, 0, 2, 1],
                vec!["c".into(), "a".into(), "b".into()]
            )
        );
        // A repeated category name is one group.
        let repeated = Column::Categorical {
            codes: vec![0, 1, 2],
            categories: strings(&["x", "y", "x"]),
            ordered: false,
        };
        assert_eq!(
            repeated.group_labels("batch").unwrap(),
            (vec![0, 1, 0], vec!["x".into(), "y".into()])
        );
        let s = Column::Values(strings(&["p", "q", "p"]));
        assert_eq!(
            s.group_labels("batch").unwrap(),
            (vec![0, 1, 0], vec!["p".into(), "q".into()])
        );
        let i = Column::Values(ArrayData::I64(vec![7, 3, 7, 7]));
        assert_eq!(
            i.group_labels("batch").unwrap(),
            (vec![0, 1, 0, 0], vec!["7".into(), "3".into()])
        );
        let b = Column::Nullable {
            values: ArrayData::Bool(vec![true, false]),
            mask: vec![false, false],
        };
        assert_eq!(
            b.group_labels("batch").unwrap(),
            (vec![0, 1], vec!["true".into(), "false".into()])
        );
    }

    #[test]
    fn group_labels_refuse_missing_and_floating_values() {
        let bad_code = Column::Categorical {
            codes: vec![0, -1],
            categories: strings(&["a"]),
            ordered: false,
        };
        let e = bad_code.group_labels("batch").unwrap_err().to_string();
        assert!(e.contains("row 1 has no category (code -1)"), "{e}");
        let past_end = Column::Categorical {
            codes: vec![0, 1],
            categories: strings(&["a"]),
            ordered: false,
        };
        let e = past_end.group_labels("batch").unwrap_err().to_string();
        assert!(e.contains("row 1 has no category (code 1)"), "{e}");
        let missing = Column::Nullable {
            values: ArrayData::I32(vec![1, 2]),
            mask: vec![false, true],
        };
        let e = missing.group_labels("batch").unwrap_err().to_string();
        assert!(e.contains("row 1 is missing"), "{e}");
        let float = Column::Values(ArrayData::F32(vec![1.0]));
        let e = float.group_labels("batch").unwrap_err().to_string();
        assert!(e.contains("floating-point"), "{e}");
    }
}
