//! Output files written under a temporary name next to their final path and moved into place
//! only once complete, so a failed write never leaves a file that looks finished.

use crate::{Error, Result};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

/// This process's partial files (see [`PartialFile`]), from their making to their drop, for
/// [`exit_interrupted`].
static PENDING: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Held while files are moved into place together ([`commit_all`]), so that an interruption
/// waits for the whole group: a report never lands without its output.
static COMMITTING: Mutex<()> = Mutex::new(());

fn lock<T>(m: &'static Mutex<T>) -> MutexGuard<'static, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Ends the process as an interruption (Ctrl-C, a termination signal) should: once any group of
/// files being moved into place has landed, every partial file of the process is removed (on
/// tmpfs one can hold tens of GB of pages reserved beyond its end, which its size does not
/// show), and the process exits with the shell's status for an interrupted command (130)
/// without running destructors or exit handlers while other threads are in CUDA or NCCL calls.
/// The locks stay held until then, so no partial file appears after the removal.
pub fn exit_interrupted() -> ! {
    let _committing = lock(&COMMITTING);
    let mut pending = lock(&PENDING);
    for path in pending.drain(..) {
        remove(&path);
    }
    eprintln!("interrupted: partial outputs removed");
    // SAFETY: _exit ends the process at once; it has no preconditions.
    unsafe { libc::_exit(130) }
}

/// A file this process is writing that must not outlive it unfinished: removed when dropped
/// (unless kept) and when the process is interrupted (see [`exit_interrupted`]).
#[derive(Debug)]
pub struct PartialFile {
    path: PathBuf,
    keep: bool,
}

impl PartialFile {
    /// Registers `path` (nothing is created).
    pub fn new(path: PathBuf) -> Self {
        lock(&PENDING).push(path.clone());
        PartialFile { path, keep: false }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Removes a file, or a directory with everything in it (a zarr store).
fn remove(path: &Path) {
    if path.is_dir() {
        let _ = std::fs::remove_dir_all(path);
    } else {
        let _ = std::fs::remove_file(path);
    }
}

impl Drop for PartialFile {
    fn drop(&mut self) {
        if !self.keep {
            remove(&self.path);
        }
        let mut pending = lock(&PENDING);
        if let Some(i) = pending.iter().position(|p| p == &self.path) {
            pending.swap_remove(i);
        }
    }
}

/// A file being written at [`StagedFile::path`] (`NAME.PID.partial`, in the directory of the
/// final file `NAME`). [`StagedFile::commit`] renames it to its final name; dropped without a
/// commit (on an error, a panic) or interrupted, it is removed.
#[derive(Debug)]
pub struct StagedFile {
    temporary: PartialFile,
    destination: PathBuf,
}

impl StagedFile {
    /// Stages a file that will become `destination`; nothing is created yet.
    pub fn new(destination: impl AsRef<Path>) -> Self {
        let destination = destination.as_ref().to_path_buf();
        let mut name = destination
            .file_name()
            .map(|n| n.to_os_string())
            .unwrap_or_default();
        // The process id keeps two runs writing the same output apart.
        name.push(format!(".{}.partial", std::process::id()));
        StagedFile {
            temporary: PartialFile::new(destination.with_file_name(name)),
            destination,
        }
    }

    /// Where to write the file now.
    pub fn path(&self) -> &Path {
        self.temporary.path()
    }

    /// Where the file goes once complete.
    pub fn destination(&self) -> &Path {
        &self.destination
    }

    /// Moves the written file to its final name (replacing a file there, or a directory when
    /// the written file is one: a zarr store). On failure the written file is removed.
    pub fn commit(self) -> Result<()> {
        commit_all(vec![self])
    }

    fn rename(&mut self) -> Result<()> {
        let failed = |e: std::io::Error| Error::File {
            path: self.destination.clone(),
            message: format!("cannot move the written file into place: {e}"),
        };
        // A directory replaces a directory: the old one is moved aside first (a rename cannot
        // replace a directory that is not empty), and removed once the new one is in place.
        let aside = (self.temporary.path().is_dir() && self.destination.is_dir()).then(|| {
            let mut name = self
                .destination
                .file_name()
                .unwrap_or_default()
                .to_os_string();
            name.push(format!(".{}.replaced", std::process::id()));
            self.destination.with_file_name(name)
        });
        if let Some(old) = &aside {
            std::fs::rename(&self.destination, old).map_err(failed)?;
        }
        if let Err(e) = std::fs::rename(self.temporary.path(), &self.destination) {
            if let Some(old) = &aside {
                let _ = std::fs::rename(old, &self.destination);
            }
            return Err(failed(e));
        }
        self.temporary.keep = true;
        if let Some(old) = aside {
            let _ = std::fs::remove_dir_all(old);
        }
        Ok(())
    }
}

/// Moves written files to their final names in the given order, as one group: when one fails,
/// those moved before it are removed and the rest are dropped (removed), and an interruption
/// waits for the group. Put the file whose presence says "done" (the main output) last.
pub fn commit_all(files: Vec<StagedFile>) -> Result<()> {
    let _committing = lock(&COMMITTING);
    let mut moved: Vec<PathBuf> = Vec::with_capacity(files.len());
    for mut file in files {
        if let Err(e) = file.rename() {
            for path in moved {
                remove(&path);
            }
            return Err(e);
        }
        moved.push(file.destination.clone());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("staged-file-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn commit_moves_the_file_into_place() {
        let d = dir("commit");
        let staged = StagedFile::new(d.join("out.h5ad"));
        assert_eq!(staged.path().parent(), Some(d.as_path()));
        assert!(staged.path().to_str().unwrap().ends_with(".partial"));
        std::fs::write(staged.path(), "done").unwrap();
        let temporary = staged.path().to_path_buf();
        assert!(
            lock(&PENDING).contains(&temporary),
            "listed for an interruption"
        );
        staged.commit().unwrap();
        assert!(
            !lock(&PENDING).contains(&temporary),
            "no longer once committed"
        );
        assert_eq!(std::fs::read_to_string(d.join("out.h5ad")).unwrap(), "done");
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_dropped_or_failed_file_is_removed() {
        let d = dir("drop");
        let staged = StagedFile::new(d.join("out.h5ad"));
        std::fs::write(staged.path(), "half").unwrap();
        drop(staged);
        // A directory in the way: the rename fails and the written file goes.
        std::fs::create_dir(d.join("taken")).unwrap();
        let staged = StagedFile::new(d.join("taken"));
        std::fs::write(staged.path(), "whole").unwrap();
        let e = staged.commit().unwrap_err().to_string();
        assert!(e.contains("cannot move the written file into place"), "{e}");
        let left: Vec<_> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["taken"]);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_group_lands_whole_or_not_at_all() {
        let staged = |d: &Path, name: &str| {
            let f = StagedFile::new(d.join(name));
            std::fs::write(f.path(), name).unwrap();
            f
        };
        let d = dir("group");
        commit_all(vec![staged(&d, "report.json"), staged(&d, "out.h5ad")]).unwrap();
        let mut left: Vec<_> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["out.h5ad", "report.json"]);
        std::fs::remove_dir_all(&d).unwrap();
        // The second move fails (a directory in the way): the first file goes too, and the
        // third, never moved, is removed.
        let d = dir("group-fail");
        std::fs::create_dir(d.join("taken")).unwrap();
        let parts = vec![
            staged(&d, "a.svg"),
            staged(&d, "taken"),
            staged(&d, "out.h5ad"),
        ];
        let partial = parts[2].path().to_path_buf();
        assert!(commit_all(parts).is_err());
        let left: Vec<_> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["taken"]);
        assert!(!lock(&PENDING).contains(&partial));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_partial_file_is_listed_until_dropped() {
        let d = dir("partial");
        let path = d.join("block.partial");
        let f = PartialFile::new(path.clone());
        std::fs::write(f.path(), "x").unwrap();
        assert!(lock(&PENDING).contains(&path));
        drop(f);
        assert!(!path.exists() && !lock(&PENDING).contains(&path));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
