//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A fresh path in a per-process scratch directory (removed by the OS's temp cleaning; tests
/// remove what they can).
pub fn scratch(name: &str) -> PathBuf {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!("sc-pipeline-tests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(format!("{}-{name}", COUNTER.fetch_add(1, Ordering::SeqCst)))
}

/// A file of the shared test datasets.
pub fn shared_data(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data/")).join(name)
}
