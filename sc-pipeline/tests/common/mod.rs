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

use sc_kernels::{CsrMatrix, DenseMatrix};
use sc_pipeline::anndata::{ArrayData, Column, DataFrame, DenseArray, Matrix, Raw, Value};
use sc_pipeline::AnnData;
use std::collections::BTreeMap;

/// An object with every kind of part the readers and writers take.
pub fn sample() -> AnnData {
    let x = CsrMatrix::new(
        4,
        3,
        vec![0, 2, 2, 3, 5],
        vec![0, 2, 1, 0, 2],
        vec![1.0f32, 2.5, 3.0, 4.0, 5.0],
    )
    .unwrap();
    let mut a = AnnData::new(Matrix::Sparse(x.clone()));
    a.obs = DataFrame::with_index(vec!["c1".into(), "c2".into(), "c3".into(), "c4".into()]);
    a.obs
        .set_values("n_genes", ArrayData::I32(vec![2, 0, 1, 2]))
        .unwrap();
    a.obs
        .set_values("score", ArrayData::F64(vec![0.5, -1.0, f64::NAN, 2.0]))
        .unwrap();
    a.obs
        .set_values("ok", ArrayData::Bool(vec![true, false, true, true]))
        .unwrap();
    a.obs
        .set_values(
            "label",
            ArrayData::Str(vec!["a".into(), "ü".into(), "".into(), "d".into()]),
        )
        .unwrap();
    a.obs
        .set(
            "batch",
            Column::categorical_from_labels(&["b1", "b2", "b1", "b2"]),
        )
        .unwrap();
    a.obs
        .set(
            "ranked",
            Column::Categorical {
                codes: vec![1, -1, 0, 1],
                categories: ArrayData::Str(vec!["lo".into(), "hi".into()]),
                ordered: true,
            },
        )
        .unwrap();
    a.obs
        .set(
            "maybe",
            Column::Nullable {
                values: ArrayData::I64(vec![1, 0, 3, 4]),
                mask: vec![false, true, false, false],
            },
        )
        .unwrap();
    a.var = DataFrame::with_index(vec!["MT-CO1".into(), "GENE2".into(), "GENE3".into()]);
    a.var.index_name = "gene".into();
    a.var
        .set_values("means", ArrayData::F32(vec![0.1, 0.2, 0.3]))
        .unwrap();
    a.obsm.insert(
        "X_pca".into(),
        DenseArray::matrix_f32(4, 2, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]).unwrap(),
    );
    a.varm.insert(
        "PCs".into(),
        DenseArray::new(vec![3, 2], ArrayData::F64(vec![0.5; 6])).unwrap(),
    );
    a.obsp.insert(
        "connectivities".into(),
        CsrMatrix::new(
            4,
            4,
            vec![0, 1, 2, 2, 3],
            vec![1, 0, 3],
            vec![0.5f32, 0.5, 1.0],
        )
        .unwrap(),
    );
    a.layers.insert(
        "counts".into(),
        Matrix::Dense(DenseMatrix::new(4, 3, vec![1.0; 12]).unwrap()),
    );
    let mut params = BTreeMap::new();
    params.insert("n_neighbors".to_string(), Value::int(15));
    params.insert("method".to_string(), Value::str("umap"));
    params.insert("flag".to_string(), Value::bool(true));
    a.uns.insert(
        "neighbors".into(),
        Value::dict([("params", Value::Dict(params)), ("eps", Value::float(1e-3))]),
    );
    a.uns.insert(
        "variance".into(),
        Value::vector(ArrayData::F32(vec![3.0, 2.0])),
    );
    a.uns.insert(
        "colors".into(),
        Value::vector(ArrayData::Str(vec!["#ff0000".into(), "#00ff00".into()])),
    );
    a.uns.insert(
        "ranked".into(),
        Value::Records(vec![
            ("g1".into(), ArrayData::Str(vec!["A".into(), "B".into()])),
            ("g2".into(), ArrayData::F32(vec![1.5, 2.5])),
        ]),
    );
    a.uns.insert(
        "table".into(),
        Value::DataFrame(DataFrame::with_index(vec!["r".into()])),
    );
    a.uns.insert(
        "graph".into(),
        Value::Sparse(CsrMatrix::new(1, 2, vec![0, 1], vec![1], vec![7.0f32]).unwrap()),
    );
    a.raw = Some(Raw {
        x: Matrix::Sparse(x),
        var: a.var.clone(),
        varm: BTreeMap::new(),
    });
    a
}

/// NaN-aware equality of the whole object, through its debug form (NaN prints the same).
pub fn same(a: &AnnData, b: &AnnData) -> bool {
    format!("{a:?}") == format!("{b:?}")
}
