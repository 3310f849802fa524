//! What a reader tells the user without failing: matrices stored as float64, which are read as
//! float32 (scpipe computes in float32), and sparse matrices that store a column twice in a
//! row, whose values are added (as scipy and scanpy read them).

use std::sync::Mutex;

/// What was noticed while reading one file, each matrix once, in the order read.
#[derive(Debug, Default)]
pub(crate) struct Notices {
    float64: Mutex<Vec<String>>,
    repeated: Mutex<Vec<String>>,
}

impl Notices {
    /// Records that the values of `matrix` (`X`, `raw/X`, `layers/NAME`, ...) were stored as
    /// float64 and read as float32.
    pub fn float64_read_as_float32(&self, matrix: &str) {
        let mut seen = self.float64.lock().unwrap_or_else(|e| e.into_inner());
        if !seen.iter().any(|m| m == matrix) {
            seen.push(matrix.to_string());
        }
    }

    /// Records that the sparse `matrix` stores a column twice in a row, and that its values
    /// there were added.
    pub fn repeated_columns_added(&self, matrix: &str) {
        let mut seen = self.repeated.lock().unwrap_or_else(|e| e.into_inner());
        if !seen.iter().any(|m| m == matrix) {
            seen.push(matrix.to_string());
        }
    }

    /// One line per kind of notice, each starting with `notice: `.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        let float64 = self.float64.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((names, verb)) = listed(&float64) {
            lines.push(format!(
                "notice: {names} {verb} float64 in the file; scpipe computes in float32, so \
                 values that float32 cannot hold exactly are rounded (to about 7 significant \
                 digits)"
            ));
        }
        let repeated = self.repeated.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((names, verb)) = listed(&repeated) {
            lines.push(repeated_columns_added(&names, verb == "is"));
        }
        lines
    }
}

/// The notice that the sparse matrices `names` (one when `one`) store a column twice in a row
/// and that their values there were added.
pub(crate) fn repeated_columns_added(names: &str, one: bool) -> String {
    let verb = if one { "stores" } else { "store" };
    format!(
        "notice: {names} {verb} a column twice in a row; the values there were added, as scipy \
         and scanpy read them"
    )
}

/// `a`, `a and b`, `a, b and c` with its verb (`is` / `are`); `None` for none.
fn listed(names: &[String]) -> Option<(String, &'static str)> {
    match names {
        [] => None,
        [one] => Some((one.clone(), "is")),
        [first @ .., last] => Some((format!("{} and {last}", first.join(", ")), "are")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_matrix_is_named_once_in_one_line() {
        let n = Notices::default();
        assert!(n.lines().is_empty());
        n.float64_read_as_float32("X");
        n.float64_read_as_float32("X");
        assert_eq!(n.lines().len(), 1);
        assert!(n.lines()[0].starts_with("notice: X is float64 in the file;"));
        n.float64_read_as_float32("raw/X");
        n.float64_read_as_float32("layers/counts");
        assert!(n.lines()[0].starts_with("notice: X, raw/X and layers/counts are float64"));
        n.repeated_columns_added("X");
        n.repeated_columns_added("X");
        assert_eq!(n.lines().len(), 2);
        assert!(n.lines()[1].starts_with("notice: X stores a column twice in a row;"));
        n.repeated_columns_added("obsp/distances");
        assert!(n.lines()[1].starts_with("notice: X and obsp/distances store a column twice"));
    }
}
