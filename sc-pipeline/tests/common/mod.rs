//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Held while this test process has an HDF5 file open and while it starts a child process. A
/// child inherits the open file descriptors of the moment it is started, and with them HDF5's
/// lock on the file: a `scpipe` started by another test in the middle of a write here would keep
/// the file locked for its whole run, and a later `scpipe` reading it would be refused.
pub static HDF5_OR_SPAWN: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs `cmd` to completion, started while no HDF5 file of this process is open.
pub fn output_of(cmd: &mut std::process::Command) -> std::process::Output {
    let child = {
        let _guard = HDF5_OR_SPAWN.lock().unwrap_or_else(|e| e.into_inner());
        cmd.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("the command starts")
    };
    child.wait_with_output().expect("the command runs")
}

/// This test process's scratch directory.
fn scratch_dir() -> PathBuf {
    std::env::temp_dir().join(format!("sc-pipeline-tests-{}", std::process::id()))
}

/// Removes the scratch directory when the test process exits (the test harness ends through
/// `exit`, passed or failed), unless `SCPIPE_KEEP_TEST_FILES` is set: a test that fails midway
/// leaves its files, and every run would leave tens of MB in the temporary directory.
extern "C" fn remove_scratch_dir() {
    if std::env::var_os("SCPIPE_KEEP_TEST_FILES").is_none() {
        let _ = std::fs::remove_dir_all(scratch_dir());
    }
}

/// A fresh path in a per-process scratch directory, removed when the process exits.
pub fn scratch(name: &str) -> PathBuf {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    static CLEAN_AT_EXIT: std::sync::Once = std::sync::Once::new();
    CLEAN_AT_EXIT.call_once(|| {
        // SAFETY: registers a function that takes no arguments and does not unwind.
        unsafe { libc::atexit(remove_scratch_dir) };
    });
    let dir = scratch_dir();
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(format!("{}-{name}", COUNTER.fetch_add(1, Ordering::SeqCst)))
}

/// A file of the shared test datasets.
pub fn shared_data(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data/")).join(name)
}

/// Rewrites the values of the matrix `matrix` (`X`, `raw/X`, ...; sparse or dense) of an h5ad
/// file as float64, as files written by other tools often store them.
pub fn store_values_as_float64(path: &std::path::Path, matrix: &str) {
    let _guard = HDF5_OR_SPAWN.lock().unwrap_or_else(|e| e.into_inner());
    let f = hdf5::File::open_rw(path).unwrap();
    let (parent, name) = match f.group(matrix) {
        Ok(sparse) => (sparse, "data".to_string()),
        Err(_) => {
            let (dir, name) = matrix.rsplit_once('/').unwrap_or(("/", matrix));
            (f.group(dir).unwrap(), name.to_string())
        }
    };
    let ds = parent.dataset(&name).unwrap();
    let shape = ds.shape();
    let values: Vec<f64> = ds
        .read_raw::<f32>()
        .unwrap()
        .into_iter()
        .map(f64::from)
        .collect();
    drop(ds);
    parent.unlink(&name).unwrap();
    parent
        .new_dataset::<f64>()
        .shape(shape)
        .create(name.as_str())
        .unwrap()
        .write_raw(&values)
        .unwrap();
}
