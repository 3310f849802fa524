//! Writing h5ad files that `anndata.read_h5ad` opens: the whole AnnData, in one go or in two
//! parts at once ([`H5adWrite`]), from the elements of [`super::elements`].

use super::device_write::write_matrix;
use super::elements::write_sparse_dict;
use super::elements::{create_file, new_group, write_dataframe, write_dense_dict, write_dict};
use super::elements::{write_dataframe_columns, write_index_only};
use super::hdf5_access::H5Ctx;
use crate::anndata::{AnnData, DataFrame, Matrix, Raw};
use crate::io::encoding;
use crate::io::file_space::reserve_ahead::ReservedAhead;
use crate::io::file_space::staged_file::StagedFile;
use crate::io::file_space::system;
use crate::{Error, Result};
use hdf5::File;
use rayon::prelude::*;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

/// Writes `adata` to `path`, replacing any existing file. The file is written under a
/// temporary name and renamed at the end, so a failed write never leaves a truncated h5ad.
pub fn write_h5ad(adata: &AnnData, path: impl AsRef<Path>) -> Result<()> {
    write_h5ad_staged(adata, path)?.commit()
}

/// Writes `adata` under a temporary name next to `path` and leaves it there: the caller moves it
/// into place with [`StagedFile::commit`] once everything else has succeeded (dropping it removes
/// the file).
pub fn write_h5ad_staged(adata: &AnnData, path: impl AsRef<Path>) -> Result<StagedFile> {
    adata.validate()?;
    let staged = StagedFile::new(path);
    write_to(adata, staged.path(), true)?;
    Ok(staged)
}

/// [`write_h5ad_staged`] of everything but X (and `.raw`), for a result whose X never existed
/// whole (cells generated block by block for every pass): anndata reads the file with
/// `X = None`.
pub fn write_h5ad_staged_without_x(adata: &AnnData, path: impl AsRef<Path>) -> Result<StagedFile> {
    adata.validate()?;
    let staged = StagedFile::new(path);
    write_to(adata, staged.path(), false)?;
    Ok(staged)
}

/// An h5ad file written in parts that may be written at once, from several threads, so that its
/// bulk is written while the steps after PCA run: [`H5adWrite::write_x_and_raw`] (X and `.raw`,
/// final once PCA has run: harmony and neighbors add to obsm, obsp and uns only),
/// [`H5adWrite::write_obs_names`] (the cell names, final by then too) and
/// [`H5adWrite::write_rest`] (everything else, as soon as those steps end: on several GPUs
/// neighbors ends well before X and `.raw` are in the file). HDF5's calls are serialised by the
/// hdf5 crate; the large datasets' bytes are copied outside them (`parallel_fill`).
/// [`H5adWrite::close`] ends the file. Dropped unclosed, it removes its file.
pub struct H5adWrite {
    ctx: H5Ctx,
    file: File,
    staged: StagedFile,
    /// Each part waits for the reservation to end before it writes (see [`create_h5ad`]).
    ahead: Mutex<Option<ReservedAhead>>,
    obs_names: Mutex<ObsNamesWritten>,
}

/// The row names of a table and the name of their dataset, as they were when taken: what
/// [`H5adWrite::write_obs_names`] writes while the table itself goes on changing.
pub struct RowNames {
    index_name: String,
    names: Vec<String>,
}

impl RowNames {
    /// A copy of `df`'s row names (copied on rayon's threads: ten million cell names).
    pub fn of(df: &DataFrame) -> RowNames {
        RowNames {
            index_name: encoding::index_name(df).to_string(),
            names: df.index.par_iter().cloned().collect(),
        }
    }

    /// Whether `df` still has these names.
    fn same_as(&self, df: &DataFrame) -> bool {
        self.index_name == encoding::index_name(df)
            && self.names.len() == df.index.len()
            && self.names.par_iter().zip(&df.index).all(|(a, b)| a == b)
    }
}

/// Whether the obs names went into the file before the rest.
enum ObsNamesWritten {
    /// No: the rest writes them.
    No,
    /// Yes, these (the rest checks that obs still has them).
    Yes(RowNames),
    /// The rest has begun: names come no more.
    Closed,
}

/// Creates the h5ad for `path` (under a temporary name, see [`write_h5ad_staged`]) and starts
/// reserving `expected_bytes` for it (a bound on the whole file, see
/// [`crate::run::memory_plan::output_bytes`]; nothing when that is 0), from offset 0 and beyond the
/// file's end, on a thread of its own. The fills of X and `.raw` then copy into pages already
/// there (on tmpfs, allocating them is most of a large write's time). Best effort: nothing is
/// reserved when there is too little to matter, with `SCPIPE_RESERVE_WRITE=0`, without room on
/// the file system, or, on a file system in memory (tmpfs), when `host_memory` (the host's
/// available bytes) is not at least twice `expected_bytes`. What the finished file does not use
/// is given back.
pub fn create_h5ad(
    path: impl AsRef<Path>,
    expected_bytes: u64,
    host_memory: Option<u64>,
) -> Result<H5adWrite> {
    let staged = StagedFile::new(path);
    let ctx = H5Ctx::new(staged.path());
    let file = create_file(&ctx)?;
    let ahead = match expected_bytes {
        0 => None,
        bytes => ReservedAhead::start(&ctx.path, bytes, host_memory),
    };
    Ok(H5adWrite {
        ctx,
        file,
        staged,
        ahead: Mutex::new(ahead),
        obs_names: Mutex::new(ObsNamesWritten::No),
    })
}

impl H5adWrite {
    /// The reservation ahead, if any (a poisoned lock still holds it).
    fn ahead(&self) -> MutexGuard<'_, Option<ReservedAhead>> {
        self.ahead.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn obs_names(&self) -> MutexGuard<'_, ObsNamesWritten> {
        self.obs_names.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether pages are being reserved (or were) for this file.
    pub fn reserves(&self) -> bool {
        self.ahead().is_some()
    }

    /// Waits for the reservation to end: while fallocate runs, the file's writes and page faults
    /// wait on its lock.
    fn wait_for_reservation(&self) {
        if let Some(ahead) = self.ahead().as_mut() {
            ahead.wait();
        }
    }

    /// Writes X and `.raw` (whose shapes are checked first: [`H5adWrite::write_rest`] checks
    /// the rest against X's shape, without them).
    pub fn write_x_and_raw(&self, x: &Matrix, raw: Option<&Raw>) -> Result<()> {
        if let Some(raw) = raw {
            raw.validate_shapes(x.shape().0)?;
        }
        self.wait_for_reservation();
        write_matrix(&self.ctx, &self.file, "X", x)?;
        if let Some(raw) = raw {
            write_raw(&self.ctx, &self.file, raw)?;
        }
        Ok(())
    }

    /// Writes the cell names (obs's index) ahead of the rest of obs, from a thread of their own
    /// while the steps that add to obs run: as HDF5's variable-length strings they take seconds
    /// for ten million cells. Nothing happens once the rest has begun (it writes them then), or
    /// for a table without names. [`H5adWrite::write_rest`] writes them again if obs no longer
    /// has them (the space they took stays in the file).
    pub fn write_obs_names(&self, names: RowNames) -> Result<()> {
        let mut written = self.obs_names();
        if !matches!(*written, ObsNamesWritten::No) || names.names.is_empty() {
            return Ok(());
        }
        self.wait_for_reservation();
        system::traced(
            || "write obs names".into(),
            || {
                write_index_only(
                    &self.ctx,
                    &self.file,
                    "obs",
                    &names.index_name,
                    &names.names,
                )
            },
        )?;
        *written = ObsNamesWritten::Yes(names);
        Ok(())
    }

    /// Writes everything of `adata` but X and `.raw` (which are [`H5adWrite::write_x_and_raw`]'s:
    /// `adata`'s X need only have the real X's shape).
    pub fn write_rest(&self, adata: &AnnData) -> Result<()> {
        adata.validate()?;
        self.wait_for_reservation();
        let names = std::mem::replace(&mut *self.obs_names(), ObsNamesWritten::Closed);
        write_rest(&self.ctx, &self.file, adata, names)
    }

    /// Closes the file, still under its temporary name, and gives back what was reserved ahead
    /// beyond its end.
    pub fn close(self) -> Result<StagedFile> {
        let H5adWrite {
            ctx,
            file,
            staged,
            ahead,
            obs_names: _,
        } = self;
        system::traced(|| "close".into(), || file.close()).map_err(ctx.h5("/"))?;
        if let Some(ahead) = ahead.into_inner().unwrap_or_else(|p| p.into_inner()) {
            ahead.give_back_beyond_end().map_err(|e| Error::File {
                path: ctx.path.clone(),
                message: format!("giving back the space reserved ahead: {e}"),
            })?;
        }
        Ok(staged)
    }
}

fn write_to(adata: &AnnData, path: &Path, with_x: bool) -> Result<()> {
    let ctx = H5Ctx::new(path);
    let file = create_file(&ctx)?;
    if with_x {
        write_matrix(&ctx, &file, "X", &adata.x)?;
        if let Some(raw) = &adata.raw {
            write_raw(&ctx, &file, raw)?;
        }
    }
    write_rest(&ctx, &file, adata, ObsNamesWritten::No)?;
    file.close().map_err(ctx.h5("/"))?;
    Ok(())
}

/// `.raw`: its X, var and varm.
fn write_raw(ctx: &H5Ctx, file: &File, raw: &Raw) -> Result<()> {
    let g = new_group(ctx, file, "raw", "raw", "0.1.0")?;
    write_matrix(ctx, &g, "X", &raw.x)?;
    write_dataframe(ctx, &g, "var", &raw.var)?;
    write_dense_dict(ctx, &g, "varm", &raw.varm)
}

/// Everything but X and `.raw` (obs's names may be in the file already).
fn write_rest(ctx: &H5Ctx, file: &File, adata: &AnnData, names: ObsNamesWritten) -> Result<()> {
    let timed = |part: &str, write: &dyn Fn() -> Result<()>| {
        system::traced(|| format!("write {part}"), write)
    };
    timed("obs", &|| write_obs(ctx, file, &adata.obs, &names))?;
    timed("var", &|| write_dataframe(ctx, file, "var", &adata.var))?;
    timed("obsm", &|| write_dense_dict(ctx, file, "obsm", &adata.obsm))?;
    timed("varm", &|| write_dense_dict(ctx, file, "varm", &adata.varm))?;
    timed("obsp", &|| {
        write_sparse_dict(ctx, file, "obsp", &adata.obsp)
    })?;
    timed("varp", &|| {
        write_sparse_dict(ctx, file, "varp", &adata.varp)
    })?;
    timed("layers", &|| {
        let layers = new_group(ctx, file, "layers", "dict", "0.1.0")?;
        for (k, m) in &adata.layers {
            write_matrix(ctx, &layers, k, m)?;
        }
        Ok(())
    })?;
    timed("uns", &|| write_dict(ctx, file, "uns", &adata.uns))
}

/// obs, completing the group of its names written ahead when it still has those names.
fn write_obs(ctx: &H5Ctx, file: &File, obs: &DataFrame, names: &ObsNamesWritten) -> Result<()> {
    if let ObsNamesWritten::Yes(written) = names {
        if written.same_as(obs) {
            let g = file.group("obs").map_err(ctx.h5("/obs"))?;
            return write_dataframe_columns(ctx, &g, obs);
        }
        // Names changed after they were written (no run does this): written again.
        file.unlink("obs").map_err(ctx.h5("/obs"))?;
    }
    write_dataframe(ctx, file, "obs", obs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::anndata::{ArrayData, DenseArray};
    use crate::io::file_space::parallel_fill;
    use sc_kernels::CsrMatrix;
    use std::collections::BTreeMap;

    #[test]
    fn without_x_writes_everything_else_and_no_x() {
        let x = CsrMatrix::new(3, 2, vec![0, 1, 1, 2], vec![0, 1], vec![1.0, 2.0]).unwrap();
        let mut a = AnnData::new(Matrix::Sparse(x));
        a.obsm.insert(
            "X_pca".into(),
            DenseArray::matrix_f32(3, 1, vec![0.5, 1.5, 2.5]).unwrap(),
        );
        let dir = std::env::temp_dir().join(format!("scpipe-nox-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("r.h5ad");
        write_h5ad_staged_without_x(&a, &path)
            .unwrap()
            .commit()
            .unwrap();
        let f = File::open(&path).unwrap();
        assert!(!f.link_exists("X"));
        assert!(f.link_exists("obs") && f.link_exists("var") && f.link_exists("obsm/X_pca"));
        drop(f);
        let e = crate::io::read_h5ad(&path).unwrap_err().to_string();
        assert!(e.contains("no X matrix"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Datasets past the parallel-fill size (dense X, `.raw`'s data and indices, an obsm
    /// matrix), written in one go, in two parts at once from two threads, and in two parts one
    /// after the other into a file created ahead, read back equal.
    #[test]
    fn large_datasets_filled_in_parallel_read_back() {
        let (n, g) = (1000, 2200); // dense X: 8.8 MB, past the (test's) parallel-fill size
        let dense: Vec<f32> = (0..n * g).map(|i| (i % 977) as f32 * 0.25).collect();
        let per_row = 2200;
        let indptr: Vec<u64> = (0..=n as u64).map(|r| r * per_row as u64).collect();
        let indices: Vec<u32> = (0..n * per_row).map(|i| (i % per_row) as u32).collect();
        let data: Vec<f32> = (0..n * per_row).map(|i| (i % 13) as f32 + 1.0).collect();
        let raw_x = CsrMatrix::new(n, g, indptr, indices, data).unwrap();
        assert!(raw_x.nnz() * 4 >= parallel_fill::PARALLEL_FILL_BYTES);
        let mut a = AnnData::new(Matrix::Dense(
            sc_kernels::DenseMatrix::new(n, g, dense).unwrap(),
        ));
        a.raw = Some(Raw {
            x: Matrix::Sparse(raw_x),
            var: a.var.clone(),
            varm: BTreeMap::new(),
        });
        a.obsm.insert(
            "X_pca".into(),
            DenseArray::matrix_f32(n, 2, (0..2 * n).map(|v| v as f32).collect()).unwrap(),
        );
        // The rest's own dataset past the parallel-fill size.
        let wide: Vec<f32> = (0..n * 2200).map(|i| (i % 613) as f32).collect();
        assert!(wide.len() * 4 >= parallel_fill::PARALLEL_FILL_BYTES);
        a.obsm.insert(
            "X_wide".into(),
            DenseArray::matrix_f32(n, 2200, wide).unwrap(),
        );
        let dir = std::env::temp_dir().join(format!("scpipe-fill-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (one, two) = (dir.join("one.h5ad"), dir.join("two.h5ad"));
        write_h5ad(&a, &one).unwrap();
        // The two parts at once, from two threads, each with datasets filled in parallel.
        let both = create_h5ad(&two, 0, None).unwrap();
        std::thread::scope(|s| {
            let bulk = s.spawn(|| both.write_x_and_raw(&a.x, a.raw.as_ref()));
            both.write_rest(&a).unwrap();
            bulk.join().unwrap().unwrap();
        });
        both.close().unwrap().commit().unwrap();
        // Created first with more room reserved than it needs (on tmpfs where there is one),
        // filled later.
        let shm = std::path::Path::new("/dev/shm");
        let ahead_dir = match shm.is_dir() {
            true => shm.join(format!("scpipe-fill-ahead-{}", std::process::id())),
            false => dir.join("ahead"),
        };
        std::fs::create_dir_all(&ahead_dir).unwrap();
        let (ahead, short) = (ahead_dir.join("ahead.h5ad"), ahead_dir.join("short.h5ad"));
        // More than the file needs, and less (the fills reserve what lies beyond).
        for (path, expected) in [
            (&ahead, 4 * (n * g * 4) as u64),
            (&short, (n * g * 6) as u64),
        ] {
            let file = create_h5ad(path, expected, Some(u64::MAX)).unwrap();
            assert!(file.reserves(), "room for {expected} bytes");
            file.write_x_and_raw(&a.x, a.raw.as_ref()).unwrap();
            file.write_rest(&a).unwrap();
            file.close().unwrap().commit().unwrap();
        }
        for path in [&one, &two, &ahead, &short] {
            let b = crate::io::read_h5ad(path).unwrap();
            assert_eq!(b.x, a.x, "{}", path.display());
            assert_eq!(b.raw, a.raw, "{}", path.display());
            assert_eq!(b.obsm, a.obsm, "{}", path.display());
        }
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(&ahead).unwrap();
        assert!(
            meta.blocks() * 512 <= meta.len() + (1 << 20),
            "nothing reserved stays beyond the end: {} bytes held for {}",
            meta.blocks() * 512,
            meta.len()
        );
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::remove_dir_all(&ahead_dir).unwrap();
    }

    /// The cell names written ahead of the rest (from another thread, in slices), then the
    /// rest: the file reads back as written in one go; names changed after they were written
    /// are written again; names offered once the rest has begun are not written twice.
    #[test]
    fn obs_names_written_ahead_complete_the_rest() {
        let n = 600_000; // past one slice of names
        let x = CsrMatrix::new(n, 1, vec![0; n + 1], vec![], vec![]).unwrap();
        let mut a = AnnData::new(Matrix::Sparse(x));
        a.obs = DataFrame::with_index((0..n).map(|i| format!("cell-{i}")).collect());
        let dir = std::env::temp_dir().join(format!("scpipe-names-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let read = |path: &std::path::Path| crate::io::read_h5ad(path).unwrap();
        let (ahead, changed, late) = (
            dir.join("ahead.h5ad"),
            dir.join("changed.h5ad"),
            dir.join("late.h5ad"),
        );
        let file = create_h5ad(&ahead, 0, None).unwrap();
        let names = RowNames::of(&a.obs);
        std::thread::scope(|s| s.spawn(|| file.write_obs_names(names)).join())
            .unwrap()
            .unwrap();
        // What the steps add to obs while the names are written.
        a.obs
            .set_values("leiden_size", ArrayData::F64(vec![1.0; n]))
            .unwrap();
        file.write_x_and_raw(&a.x, None).unwrap();
        file.write_rest(&a).unwrap();
        file.close().unwrap().commit().unwrap();
        let b = read(&ahead);
        assert_eq!(b.obs, a.obs);

        let file = create_h5ad(&changed, 0, None).unwrap();
        file.write_obs_names(RowNames::of(&a.obs)).unwrap();
        let mut renamed = a.obs.clone();
        renamed.index[7] = "renamed".into();
        let before = std::mem::replace(&mut a.obs, renamed);
        file.write_x_and_raw(&a.x, None).unwrap();
        file.write_rest(&a).unwrap();
        file.close().unwrap().commit().unwrap();
        assert_eq!(read(&changed).obs.index[7], "renamed");
        a.obs = before;

        let file = create_h5ad(&late, 0, None).unwrap();
        file.write_x_and_raw(&a.x, None).unwrap();
        file.write_rest(&a).unwrap();
        file.write_obs_names(RowNames::of(&a.obs)).unwrap();
        file.close().unwrap().commit().unwrap();
        assert_eq!(read(&late).obs, a.obs);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_raw_of_other_cells_is_refused_before_it_is_written() {
        let x = |rows| CsrMatrix::new(rows, 2, vec![0; rows + 1], vec![], vec![]).unwrap();
        let a = AnnData::new(Matrix::Sparse(x(2)));
        let raw = Raw {
            x: Matrix::Sparse(x(3)),
            var: a.var.clone(),
            varm: BTreeMap::new(),
        };
        let dir = std::env::temp_dir().join(format!("scpipe-rawrows-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = create_h5ad(dir.join("out.h5ad"), 0, None).unwrap();
        let e = file
            .write_x_and_raw(&a.x, Some(&raw))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("raw.X rows") && e.contains("has 3 rows, expected 2"),
            "{e}"
        );
        drop(file);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_file_created_ahead_and_never_begun_leaves_nothing() {
        let dir = std::env::temp_dir().join(format!("scpipe-ahead-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("out.h5ad");
        let file = create_h5ad(&out, 256 << 20, Some(u64::MAX)).unwrap();
        let partial = file.staged.path().to_path_buf();
        assert!(partial.exists());
        drop(file);
        assert!(!partial.exists() && !out.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
