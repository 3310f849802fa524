//! Output files written under a temporary name next to their final path and moved into place
//! only once complete, so a failed write never leaves a file that looks finished.

use crate::{Error, Result};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The temporary files of this process's staged files, from their making to their drop (after
/// a commit or not), for [`remove_staged_files`].
static PENDING: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn pending() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    PENDING.lock().unwrap_or_else(|p| p.into_inner())
}

/// Removes the temporary file of every staged file of this process not committed yet: what an
/// interrupted run must not leave behind (on tmpfs one can hold tens of GB of pages reserved
/// beyond its end, which its size does not show).
pub fn remove_staged_files() {
    for path in pending().drain(..) {
        let _ = std::fs::remove_file(path);
    }
}

/// A file being written at [`StagedFile::path`] (`NAME.PID.partial`, in the directory of the
/// final file `NAME`). [`StagedFile::commit`] renames it to its final name; dropped without a
/// commit (on an error, a panic), it is removed.
#[derive(Debug)]
pub struct StagedFile {
    temporary: PathBuf,
    destination: PathBuf,
    committed: bool,
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
        let temporary = destination.with_file_name(name);
        pending().push(temporary.clone());
        StagedFile {
            temporary,
            destination,
            committed: false,
        }
    }

    /// Where to write the file now.
    pub fn path(&self) -> &Path {
        &self.temporary
    }

    /// Where the file goes once complete.
    pub fn destination(&self) -> &Path {
        &self.destination
    }

    /// Moves the written file to its final name (replacing a file there). On failure the
    /// written file is removed.
    pub fn commit(mut self) -> Result<()> {
        std::fs::rename(&self.temporary, &self.destination).map_err(|e| Error::File {
            path: self.destination.clone(),
            message: format!("cannot move the written file into place: {e}"),
        })?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for StagedFile {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_file(&self.temporary);
        }
        let mut pending = pending();
        if let Some(i) = pending.iter().position(|p| p == &self.temporary) {
            pending.swap_remove(i);
        }
    }
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
        assert!(pending().contains(&temporary), "listed for an interruption");
        staged.commit().unwrap();
        assert!(!pending().contains(&temporary), "no longer once committed");
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
}
