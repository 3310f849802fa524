//! What a reader tells the user without failing. One kind so far: matrices stored as float64,
//! which are read as float32 (scpipe computes in float32).

use std::sync::Mutex;

/// What was noticed while reading one file, each matrix once, in the order read.
#[derive(Debug, Default)]
pub(crate) struct Notices {
    float64: Mutex<Vec<String>>,
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

    /// One line per kind of notice, each starting with `notice: `.
    pub fn lines(&self) -> Vec<String> {
        let seen = self.float64.lock().unwrap_or_else(|e| e.into_inner());
        let (names, verb) = match seen.as_slice() {
            [] => return Vec::new(),
            [one] => (one.clone(), "is"),
            [first @ .., last] => (format!("{} and {last}", first.join(", ")), "are"),
        };
        vec![format!(
            "notice: {names} {verb} float64 in the file; scpipe computes in float32, so values \
             that float32 cannot hold exactly are rounded (to about 7 significant digits)"
        )]
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
    }
}
