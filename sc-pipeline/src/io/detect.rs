//! Which reader an input file needs: h5ad, or a 10x Genomics HDF5 matrix.

use super::encoding::ENCODING_TYPE;
use super::h5ad::hdf5_access::H5Ctx;
use std::path::Path;

/// Whether `path` holds a 10x Genomics HDF5 matrix rather than an AnnData (h5ad) file.
///
/// A file is h5ad when it is named `*.h5ad`, has a main matrix `/X` or carries anndata's
/// `encoding-type` attribute at its root, so that an h5ad file without `/X` gets the h5ad
/// reader's error (no X matrix) rather than a 10x one. A file that cannot be opened goes to the
/// h5ad reader too, which says why.
pub fn is_10x_h5(path: &Path) -> bool {
    if path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("h5ad"))
    {
        return false;
    }
    let ctx = H5Ctx::new(path);
    let Ok(file) = ctx.open() else {
        return false;
    };
    let anndata_root = ctx
        .string_attr(&file, ENCODING_TYPE, "/")
        .is_ok_and(|e| e.as_deref() == Some("anndata"));
    !file.link_exists("X") && !anndata_root
}
