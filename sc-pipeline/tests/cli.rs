//! The `scpipe` command end to end: generate, run (file, 10x, demo), reports and refusals.

mod common;

use sc_pipeline::anndata::Matrix;
use sc_pipeline::io::read_h5ad;
use sc_pipeline::steps::Flavor;
use std::path::Path;
use std::process::{Command, Output};

fn scpipe(args: &[&str]) -> Output {
    common::output_of(Command::new(env!("CARGO_BIN_EXE_scpipe")).args(args))
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn generate_is_deterministic_and_readable() {
    let a = common::scratch("gen-a.h5ad");
    let b = common::scratch("gen-b.h5ad");
    for p in [&a, &b] {
        let o = scpipe(&[
            "generate",
            "300",
            "2000",
            "-o",
            p.to_str().unwrap(),
            "--seed",
            "3",
        ]);
        assert!(o.status.success(), "{}", text(&o));
    }
    let (x, y) = (read_h5ad(&a).unwrap(), read_h5ad(&b).unwrap());
    assert_eq!((x.n_obs(), x.n_vars()), (300, 2000));
    assert_eq!(x, y);
}

/// A zarr store in and out: the run on the input converted to zarr writes a store that holds
/// what the run on the h5ad input writes.
#[test]
fn zarr_stores_are_read_and_written() {
    let input = common::scratch("zin.h5ad");
    let zin = common::scratch("zin.zarr");
    let (zout, hout) = (common::scratch("zout.zarr"), common::scratch("zout.h5ad"));
    let o = scpipe(&["generate", "800", "3000", "-o", input.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    sc_pipeline::io::write_zarr(&read_h5ad(&input).unwrap(), &zin).unwrap();
    let run = |inp: &std::path::Path, out: &std::path::Path| {
        let o = scpipe(&[
            "run",
            inp.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--device",
            "cpu",
            "--n-top-genes",
            "300",
            "--n-comps",
            "20",
            "--zarr-compression",
            "lz4",
        ]);
        let t = text(&o);
        assert!(o.status.success(), "{t}");
        t
    };
    let t = run(&zin, &zout);
    assert!(t.contains("write zarr"), "{t}");
    run(&input, &hout);
    let (z, h) = (
        sc_pipeline::io::read_zarr(&zout).unwrap(),
        read_h5ad(&hout).unwrap(),
    );
    assert_eq!(z.obs, h.obs);
    assert_eq!(z.var, h.var);
    assert_eq!(z.obsm, h.obsm);
    assert_eq!(z.obsp, h.obsp);
    assert_eq!(z.x, h.x);
    assert_eq!(z.raw, h.raw);
    assert_eq!(
        z.uns.keys().collect::<Vec<_>>(),
        h.uns.keys().collect::<Vec<_>>()
    );
    for p in [&zin, &zout] {
        std::fs::remove_dir_all(p).unwrap();
    }
}

#[test]
fn run_writes_the_output_and_a_report() {
    let input = common::scratch("in.h5ad");
    let output = common::scratch("out.h5ad");
    let report = common::scratch("report.json");
    let o = scpipe(&["generate", "800", "5000", "-o", input.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let o = scpipe(&[
        "run",
        input.to_str().unwrap(),
        "-o",
        output.to_str().unwrap(),
        "--device",
        "cpu",
        "--n-top-genes",
        "400",
        "--n-comps",
        "20",
        "--report",
        report.to_str().unwrap(),
    ]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    for step in [
        "read input",
        "filter_cells",
        "highly_variable_genes",
        "pca",
        "neighbors",
        "write h5ad",
        "total",
    ] {
        assert!(out.contains(step), "summary table lists {step}: {out}");
    }
    // Where X was held, and why: under the table and in the report.
    assert!(
        out.contains("X: in host memory (a CPU run) (--device cpu)"),
        "{out}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(json["x_placement"]["place"], "in host memory (a CPU run)");
    assert_eq!(json["x_placement"]["why"], "--device cpu");
    let steps = json["steps"].as_array().unwrap();
    assert!(steps
        .iter()
        .all(|s| s["seconds"].as_f64().unwrap() >= 0.0 && s["n_obs"].as_u64().is_some()));
    let a = read_h5ad(&output).unwrap();
    assert_eq!(a.n_vars(), 400);
    assert_eq!(a.obsm["X_pca"].shape[1], 20);
    assert!(a.raw.is_some() && a.obsp.contains_key("connectivities"));
}

#[test]
fn steps_can_be_switched_off() {
    let input = common::scratch("in2.h5ad");
    let output = common::scratch("out2.h5ad");
    assert!(
        scpipe(&["generate", "400", "5000", "-o", input.to_str().unwrap()])
            .status
            .success()
    );
    let o = scpipe(&[
        "run",
        input.to_str().unwrap(),
        "-o",
        output.to_str().unwrap(),
        "--no-scale",
        "--no-pca",
        "--no-subset",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let a = read_h5ad(&output).unwrap();
    assert!(a.obsm.is_empty() && a.obsp.is_empty());
    assert!(matches!(a.x, Matrix::Sparse(_)), "unscaled X stays sparse");
    assert!(a.var.column("highly_variable").is_some());
}

#[test]
fn a_10x_file_runs() {
    let output = common::scratch("tenx.h5ad");
    let input = common::shared_data("10x/v3_filtered_feature_bc_matrix.h5");
    let o = scpipe(&[
        "run",
        input.to_str().unwrap(),
        "-o",
        output.to_str().unwrap(),
        "--min-genes",
        "1",
        "--min-cells",
        "1",
        "--n-top-genes",
        "100",
        "--n-comps",
        "10",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(read_h5ad(&output).unwrap().n_vars(), 100);
}

#[test]
fn harmony_runs_after_pca_and_neighbors_use_its_embedding() {
    let input = common::shared_data("scvi_pbmc5k_pbmc10k_400cells_2batches_counts.h5ad");
    let output = common::scratch("harmony.h5ad");
    let o = scpipe(&[
        "run",
        input.to_str().unwrap(),
        "-o",
        output.to_str().unwrap(),
        "--device",
        "cpu",
        "--harmony",
        "batch",
    ]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("harmony_integrate") && out.contains("key=batch: 2 batches"),
        "the step table lists harmony: {out}"
    );
    let a = read_h5ad(&output).unwrap();
    let (pca, h) = (&a.obsm["X_pca"], &a.obsm["X_pca_harmony"]);
    assert_eq!(h.shape, vec![a.n_obs(), 50]);
    assert_eq!(pca.shape, h.shape);
    let params = a.uns["neighbors"].get("params").unwrap();
    assert_eq!(
        params.get("use_rep"),
        Some(&sc_pipeline::anndata::Value::str("X_pca_harmony"))
    );
    // A batch key that is not there, and --harmony without PCA, are refused (the first by the
    // step table's input check, before any step runs).
    let never = common::scratch("never-harmony.h5ad");
    for (extra, expected) in [
        (&["--harmony", "donor"][..], "obs has no column 'donor'"),
        (&["--harmony", "batch", "--no-pca"][..], "--harmony"),
    ] {
        let mut args = vec![
            "run",
            input.to_str().unwrap(),
            "-o",
            never.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let r = scpipe(&args);
        assert!(!r.status.success(), "{args:?} should fail");
        assert!(text(&r).contains(expected), "{args:?}: {}", text(&r));
    }
    // Nothing is left, not even a partial file.
    let left: Vec<_> = std::fs::read_dir(never.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("never-harmony.h5ad"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn the_demo_runs_without_an_input_file() {
    let output = common::scratch("demo.h5ad");
    let o = scpipe(&[
        "run",
        "--demo",
        "--demo-cells",
        "600",
        "--demo-genes",
        "5000",
        "-o",
        output.to_str().unwrap(),
    ]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("output:") && out.contains("generate demo data"),
        "{out}"
    );
    assert!(
        out.contains("running on the CPU"),
        "the device choice is announced: {out}"
    );
    assert!(read_h5ad(&output).unwrap().n_obs() > 500);
}

#[test]
fn neighbors_by_an_inverted_file_report_their_recall() {
    let output = common::scratch("demo_ivf.h5ad");
    let o = scpipe(&[
        "run",
        "--demo",
        "--demo-cells",
        "3000",
        "--demo-genes",
        "3000",
        "--neighbors-method",
        "ivf",
        "--n-lists",
        "30",
        "--n-probes",
        "2",
        "--no-umap",
        "--no-leiden",
        "--no-markers",
        "-o",
        output.to_str().unwrap(),
    ]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("ivf (30 lists, 2 probed") && out.contains("recall@15"),
        "{out}"
    );
    // The scan's recall (0.94 on this build) and the local join's, which finds more.
    let recalls: Vec<f64> = out
        .split("recall@15 ")
        .nth(1)
        .map(|r| {
            r.split(|c: char| !(c.is_ascii_digit() || c == '.'))
                .filter_map(|v| v.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    assert!(
        out.contains("1 round of NN-descent") && recalls.len() >= 3 && recalls[0] > recalls[2],
        "{recalls:?} in {out}"
    );
    let a = read_h5ad(&output).unwrap();
    assert_eq!(a.obsp["distances"].n_rows, a.n_obs());
    // Without --n-probes the probes are the fewest that reach the target on the sample.
    let o = scpipe(&[
        "run",
        "--demo",
        "--demo-cells",
        "3000",
        "--demo-genes",
        "3000",
        "--neighbors-method",
        "ivf",
        "--n-lists",
        "30",
        "--target-recall",
        "0.9",
        "--no-umap",
        "--no-leiden",
        "--no-markers",
        "-o",
        output.to_str().unwrap(),
    ]);
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("(the fewest for recall 0.9 on the sample)"),
        "{out}"
    );
    let recall: f64 = out
        .split("recall@15 ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|r| r.parse().ok())
        .expect("the recall in the note");
    assert!(recall >= 0.9, "{out}");
}

#[test]
fn bad_options_are_refused_clearly() {
    let input = common::shared_data("10x/v2_filtered_gene_bc_matrices_h5.h5");
    let inp = input.to_str().unwrap();
    let out = common::scratch("never.h5ad");
    let o = out.to_str().unwrap();
    let cases: [(&[&str], &str); 32] = [
        (
            &["run", inp, "-o", o, "--hvg-flavor", "seurat_v9"],
            "invalid value 'seurat_v9' for '--hvg-flavor",
        ),
        // The test file's few cells: the filter, then the gene selection, say it themselves.
        (
            &["run", inp, "-o", o],
            "filter_cells: invalid parameter: min_genes=200 keeps",
        ),
        (
            &["run", inp, "-o", o, "--min-genes", "1", "--min-cells", "1"],
            "highly_variable_genes: invalid parameter: selected 0 of",
        ),
        (
            &["run", inp, "-o", o, "--n-neighbors", "1"],
            "--n-neighbors",
        ),
        (&["run", inp, "-o", o, "--target-sum=-5"], "--target-sum"),
        (
            &["run", inp, "-o", o, "--n-lists", "10", "--n-probes", "11"],
            "--n-probes: invalid parameter: 11 is more than the 10 lists",
        ),
        (
            &[
                "run",
                inp,
                "-o",
                o,
                "--neighbors-method",
                "exact",
                "--n-probes",
                "4",
            ],
            "--n-probes",
        ),
        (&["run", inp, "-o", o, "--n-lists", "0"], "--n-lists"),
        // An X over half of the host memory allowed is read from an h5ad file by blocks.
        (
            &["run", inp, "-o", o, "--host-memory-limit", "1K"],
            "--host-memory-limit: invalid parameter: reading X from the file block by block takes h5ad and zarr inputs",
        ),
        (
            &["run", inp, "-o", o, "--descent-rounds", "9"],
            "--descent-rounds: invalid parameter: must be at most 8, got 9",
        ),
        (
            &[
                "run",
                inp,
                "-o",
                o,
                "--neighbors-method",
                "exact",
                "--descent-rounds",
                "1",
            ],
            "--descent-rounds: invalid parameter: refines the inverted file's result",
        ),
        (
            &["run", inp, "-o", o, "--target-recall", "1.5"],
            "--target-recall: invalid parameter: must be above 0 and at most 1, got 1.5",
        ),
        (
            &[
                "run",
                inp,
                "-o",
                o,
                "--target-recall",
                "0.9",
                "--n-probes",
                "4",
            ],
            "--target-recall: invalid parameter: and --n-probes both choose the probes",
        ),
        // More lists than the input has cells: refused before any step.
        (
            &[
                "run",
                inp,
                "-o",
                o,
                "--neighbors-method",
                "ivf",
                "--n-lists",
                "1000000",
            ],
            "n_lists",
        ),
        (
            &["run", inp, "-o", o, "--diffmap", "--diffmap-comps", "2"],
            "--diffmap-comps: invalid parameter: must be greater than 2",
        ),
        (
            &["run", inp, "-o", o, "--louvain", "--louvain-resolution", "0"],
            "--louvain-resolution: invalid parameter: 0 is not positive",
        ),
        (
            &["run", inp, "-o", o, "--kmeans", "0"],
            "--kmeans: invalid parameter: give at least 1 cluster",
        ),
        (
            &["run", inp, "-o", o, "--kmeans", "4", "--no-pca"],
            "--kmeans: invalid parameter: needs the PCA",
        ),
        (
            &["run", inp, "-o", o, "--tsne", "--no-pca"],
            "--tsne: invalid parameter: needs the PCA",
        ),
        (
            &["run", inp, "-o", o, "--draw-graph", "--no-neighbors"],
            "--draw-graph: invalid parameter: needs the neighbors graph",
        ),
        (
            &["run", inp, "-o", o, "--paga-groups", "leiden"],
            "--paga-groups: invalid parameter: only with --paga",
        ),
        (
            &["run", inp, "-o", o, "--paga", "--paga-groups", "nope"],
            "obs has no column 'nope' (--paga-groups)",
        ),
        (
            &["run", inp, "-o", o, "--dpt-root", "cell_0"],
            "--dpt-root: invalid parameter: needs --diffmap",
        ),
        (
            &["run", inp, "-o", o, "--diffmap", "--diffmap-comps", "5", "--dpt-root", "c"],
            "--dpt-root: invalid parameter: dpt reads 10 diffusion components; --diffmap-comps is 5",
        ),
        (
            &["run", inp, "-o", o, "--diffmap", "--dpt-branchings", "2"],
            "--dpt-branchings: invalid parameter: needs --dpt-root",
        ),
        (
            &["run", inp, "-o", o, "--diffmap", "--dpt-root", "no_such_cell"],
            "--dpt-root: invalid parameter: no cell named 'no_such_cell'",
        ),
        (
            &["run", inp, "-o", o, "--embedding-density", "--no-umap"],
            "--embedding-density: invalid parameter: needs the UMAP",
        ),
        (
            &["run", inp, "-o", o, "--embedding-density-groupby", "leiden"],
            "--embedding-density-groupby: invalid parameter: only with --embedding-density",
        ),
        (
            &[
                "run",
                inp,
                "-o",
                o,
                "--embedding-density",
                "--embedding-density-groupby",
                "no_such_column",
            ],
            "obs has no column 'no_such_column' (--embedding-density-groupby)",
        ),
        (&["run", "/no/such/file.h5ad", "-o", o], "no such file"),
        (&["run", inp, "-o", o, "--device", "gpu"], "--device gpu"),
        (&["generate", "0", "100", "-o", o], "N_CELLS"),
    ];
    for (args, expected) in cases {
        let r = scpipe(args);
        assert!(!r.status.success(), "{args:?} should fail");
        assert!(
            text(&r).contains(expected),
            "{args:?}: expected '{expected}' in {}",
            text(&r)
        );
    }
    assert!(!out.exists());
    // A zarr store too large for the host memory allowed is read by rows, on the GPU only.
    let store = common::scratch("big-x.zarr");
    let _ = std::fs::remove_dir_all(&store);
    sc_pipeline::io::write_zarr(&common::sample(), &store).unwrap();
    let s = store.to_str().unwrap();
    let args = [
        "run",
        s,
        "-o",
        o,
        "--host-memory-limit",
        "16",
        "--device",
        "cpu",
    ];
    let r = scpipe(&args);
    assert!(!r.status.success(), "{args:?} should fail");
    let want = "is read from the file block by block, which needs the GPU (--device gpu)";
    assert!(text(&r).contains(want), "{args:?}: {}", text(&r));
    std::fs::remove_dir_all(&store).unwrap();
    assert!(!out.exists());
}

#[test]
fn help_lists_the_hvg_flavors() {
    let o = scpipe(&["run", "--help"]);
    assert!(o.status.success(), "{}", text(&o));
    let names: Vec<&str> = Flavor::ALL.iter().map(|f| f.name()).collect();
    let listed = format!("[possible values: {}]", names.join(", "));
    assert!(text(&o).contains(&listed), "{listed} in {}", text(&o));
    assert!(text(&o).contains("--plot <DIR>"), "{}", text(&o));
    let r = scpipe(&["run", "x.h5ad", "-o", "y.h5ad", "--hvg-flavor", "pearson"]);
    assert_eq!(r.status.code(), Some(2), "a usage error: {}", text(&r));
    assert!(text(&r).contains(&listed), "{}", text(&r));
}

/// The names in `dir`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// A fresh empty directory.
fn scratch_dir(name: &str) -> std::path::PathBuf {
    let dir = common::scratch(name);
    std::fs::create_dir(&dir).unwrap();
    dir
}

#[test]
fn a_failed_generate_leaves_nothing_behind() {
    let dir = scratch_dir("gen-fail");
    // A directory where the file should go: refused before anything is generated.
    std::fs::create_dir(dir.join("taken.h5ad")).unwrap();
    let o = scpipe(&[
        "generate",
        "300",
        "2000",
        "-o",
        dir.join("taken.h5ad").to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(text(&o).contains("is a directory"), "{}", text(&o));
    // A directory that does not exist: refused too.
    let o = scpipe(&[
        "generate",
        "300",
        "2000",
        "-o",
        dir.join("no/out.h5ad").to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(text(&o).contains("does not exist"), "{}", text(&o));
    // Writing X fails mid-way: a file-size limit of 1024 blocks, at most 1 MiB (SIGXFSZ ignored, so the write
    // returns an error), far below the data of 10,000 cells, which HDF5 writes while rows are
    // appended.
    let out = dir.join("big.h5ad");
    let o = common::output_of(
        Command::new("sh")
            .args(["-c", "ulimit -f 1024 && trap '' XFSZ && exec \"$0\" \"$@\""])
            .arg(env!("CARGO_BIN_EXE_scpipe"))
            .args(["generate", "10000", "5000", "-o", out.to_str().unwrap()]),
    );
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("error at '/X/data'"),
        "fails while writing X: {}",
        text(&o)
    );
    assert_eq!(listing(&dir), ["taken.h5ad"]);
    assert!(listing(&dir.join("taken.h5ad")).is_empty());
}

#[test]
fn an_interrupted_command_leaves_no_partial_output() {
    use std::time::{Duration, Instant};
    let dir = scratch_dir("interrupted");
    let out = dir.join("big.h5ad");
    // Two million cells take far longer to generate than the test waits.
    let mut child = Command::new(env!("CARGO_BIN_EXE_scpipe"))
        .args(["generate", "2000000", "20000", "-o", out.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while listing(&dir).is_empty() {
        assert!(child.try_wait().unwrap().is_none(), "generate ended early");
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "no partial file appeared"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        listing(&dir)[0].ends_with(".partial"),
        "{:?}",
        listing(&dir)
    );
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(130), "{}", text(&o));
    assert!(
        text(&o).contains("interrupted: partial outputs removed"),
        "{}",
        text(&o)
    );
    assert!(listing(&dir).is_empty(), "{:?}", listing(&dir));
}

#[test]
fn an_output_that_cannot_be_written_is_refused_before_the_run() {
    let dir = scratch_dir("places");
    let missing = dir.join("no such dir/out.h5ad");
    let o = scpipe(&[
        "run",
        "--demo",
        "--demo-cells",
        "300",
        "-o",
        missing.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    let t = text(&o);
    assert!(
        t.contains("-o") && t.contains("does not exist") && !t.contains(".partial"),
        "{t}"
    );
    assert!(
        !t.contains("generate demo data"),
        "refused before any step: {t}"
    );
    // A directory given as the input is named as such (not with HDF5's internals).
    let o = scpipe(&[
        "run",
        dir.to_str().unwrap(),
        "-o",
        dir.join("out.h5ad").to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(
        text(&o).contains("is a directory: give an .h5ad file"),
        "{}",
        text(&o)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_failed_run_leaves_no_output() {
    let dir = scratch_dir("run-fail");
    let input = dir.join("in.h5ad");
    let o = scpipe(&["generate", "400", "3000", "-o", input.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let before = std::fs::read(&input).unwrap();
    let run = |output: &Path, report: &Path| {
        scpipe(&[
            "run",
            input.to_str().unwrap(),
            "-o",
            output.to_str().unwrap(),
            "--report",
            report.to_str().unwrap(),
            "--n-top-genes",
            "300",
            "--n-comps",
            "10",
        ])
    };
    // The report's directory is missing: refused before the run (what fails later, when the
    // files are moved into place, is `io::commit_all`'s test).
    let o = run(&dir.join("out.h5ad"), &dir.join("no/report.json"));
    assert!(!o.status.success());
    assert!(text(&o).contains("--report"), "{}", text(&o));
    assert_eq!(listing(&dir), ["in.h5ad"]);
    // A directory where the output should go.
    std::fs::create_dir(dir.join("taken.h5ad")).unwrap();
    let o = run(&dir.join("taken.h5ad"), &dir.join("report.json"));
    assert!(!o.status.success());
    assert!(text(&o).contains("is a directory"), "{}", text(&o));
    assert_eq!(listing(&dir), ["in.h5ad", "taken.h5ad"]);
    // The output may not be the input.
    let o = run(&input, &dir.join("report.json"));
    assert!(!o.status.success());
    assert!(text(&o).contains("is the input file"), "{}", text(&o));
    assert_eq!(listing(&dir), ["in.h5ad", "taken.h5ad"]);
    assert_eq!(
        std::fs::read(&input).unwrap(),
        before,
        "the input is untouched"
    );
}

#[test]
fn an_h5ad_file_without_x_is_reported_as_such() {
    let dir = scratch_dir("no-x");
    let write = |name: &str, anndata_root: bool| {
        let path = dir.join(name);
        let _guard = common::HDF5_OR_SPAWN
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let f = hdf5::File::create(&path).unwrap();
        if anndata_root {
            for (attr, value) in [("encoding-type", "anndata"), ("encoding-version", "0.1.0")] {
                let v: hdf5::types::VarLenUnicode = value.parse().unwrap();
                f.new_attr::<hdf5::types::VarLenUnicode>()
                    .create(attr)
                    .unwrap()
                    .write_scalar(&v)
                    .unwrap();
            }
        }
        f.create_group("obs").unwrap();
        f.create_group("var").unwrap();
        path
    };
    // Named .h5ad, or anndata's attributes at the root under any name.
    for input in [
        write("plain.h5ad", false),
        write("anndata.hdf5", true),
        write("anndata.h5", true),
    ] {
        let o = scpipe(&[
            "run",
            input.to_str().unwrap(),
            "-o",
            dir.join("out.h5ad").to_str().unwrap(),
        ]);
        assert!(!o.status.success());
        let out = text(&o);
        assert!(
            out.contains("the h5ad file has no X matrix") && !out.contains("10x"),
            "{input:?}: {out}"
        );
        assert!(!out.contains("genome"), "not sent to the 10x reader: {out}");
    }
    assert!(!dir.join("out.h5ad").exists());
}

#[test]
fn a_float64_x_is_noticed_once() {
    let input = common::scratch("f64-in.h5ad");
    let output = common::scratch("f64-out.h5ad");
    let o = scpipe(&["generate", "400", "3000", "-o", input.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let run = || {
        scpipe(&[
            "run",
            input.to_str().unwrap(),
            "-o",
            output.to_str().unwrap(),
            "--no-pca",
            "--n-top-genes",
            "300",
        ])
    };
    let o = run();
    assert!(o.status.success(), "{}", text(&o));
    assert!(!text(&o).contains("float64"), "{}", text(&o));
    common::store_values_as_float64(&input, "X");
    let o = run();
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        err.matches("notice: X is float64 in the file; scpipe computes in float32")
            .count(),
        1,
        "{err}"
    );
}

#[test]
fn gpu_memory_options_need_the_gpu_and_write_nothing_on_the_cpu() {
    // FILE stands for an output file the option would write (it must not appear).
    for (i, option) in [
        &["--memory-timeline", "FILE"][..],
        &["--memory-snapshot", "FILE"][..],
        &["--allocation-log", "FILE"][..],
        &["--device-memory-limit", "8GiB"][..],
        &["--execution", "streamed"][..],
        &["--gpus", "2"][..],
    ]
    .into_iter()
    .enumerate()
    {
        let out = common::scratch(&format!("gpu-option-cpu-{i}.h5ad"));
        let file = common::scratch(&format!("gpu-option-cpu-{i}.out"));
        let mut args = vec![
            "run",
            "--demo",
            "--demo-cells",
            "300",
            "--demo-genes",
            "500",
            "--device",
            "cpu",
            "-o",
            out.to_str().unwrap(),
        ];
        args.extend(option.iter().map(|a| {
            if *a == "FILE" {
                file.to_str().unwrap()
            } else {
                a
            }
        }));
        let o = scpipe(&args);
        assert!(!o.status.success(), "{option:?} was accepted on the CPU");
        let t = text(&o);
        assert!(
            t.contains(option[0]) && t.contains("needs the GPU"),
            "{option:?}: {t}"
        );
        assert!(!out.exists() && !file.exists());
    }
}

/// logreg's stopping options are checked before any work, by name.
#[test]
fn logreg_stopping_options_are_checked_by_name() {
    let out = common::scratch("logreg-options.h5ad");
    for (option, value) in [("--logreg-tol", "0"), ("--logreg-max-iter", "0")] {
        let o = scpipe(&[
            "run",
            "--demo",
            "--demo-cells",
            "300",
            "--demo-genes",
            "500",
            "--device",
            "cpu",
            "--markers-method",
            "logreg",
            option,
            value,
            "-o",
            out.to_str().unwrap(),
        ]);
        assert!(!o.status.success(), "{option} {value} was accepted");
        let t = text(&o);
        assert!(t.contains(option), "{option}: {t}");
        assert!(!out.exists());
    }
}

#[test]
fn plot_draws_the_pictures_beside_the_output_and_names_what_it_skips() {
    let output = common::scratch("plotted.h5ad");
    let report = common::scratch("plotted.json");
    let dir = common::scratch("pictures");
    let demo = [
        "run",
        "--demo",
        "--demo-cells",
        "600",
        "--demo-genes",
        "3000",
        "--device",
        "cpu",
    ];
    let mut args = demo.to_vec();
    let (o, r, d) = (
        output.to_str().unwrap(),
        report.to_str().unwrap(),
        dir.to_str().unwrap(),
    );
    args.extend(["-o", o, "--report", r, "--plot", d, "--batch-key", "batch"]);
    let run = scpipe(&args);
    let out = text(&run);
    assert!(run.status.success(), "{out}");
    let expected: Vec<String> = [
        "dotplot_markers",
        "qc_violins",
        "umap_batch",
        "umap_leiden",
        "umap_total_counts",
    ]
    .iter()
    .flat_map(|n| [format!("{n}.png"), format!("{n}.svg")])
    .collect();
    assert_eq!(listing(&dir), expected);
    assert!(
        out.contains("draw pictures") && out.contains("umap_leiden.png"),
        "{out}"
    );
    assert!(!out.contains("  skipped "), "{out}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(json["plots"]["written"].as_array().unwrap().len(), 5);
    // The QC violins show the cells before filter_cells beside those it kept.
    let svg = std::fs::read_to_string(dir.join("qc_violins.svg")).unwrap();
    assert!(svg.contains("before filtering") && svg.contains("after filtering"));

    // Without Leiden (so without markers) and without a batch key: what can be drawn is, the
    // rest is named with the reason.
    let fewer = common::scratch("fewer");
    let mut args = demo.to_vec();
    let f = fewer.to_str().unwrap();
    args.extend(["-o", o, "--plot", f, "--no-leiden"]);
    let run = scpipe(&args);
    let out = text(&run);
    assert!(run.status.success(), "{out}");
    assert_eq!(
        listing(&fewer),
        [
            "qc_violins.png",
            "qc_violins.svg",
            "umap_total_counts.png",
            "umap_total_counts.svg"
        ]
    );
    for skipped in [
        "skipped umap_leiden: Leiden did not run",
        "skipped umap_batch: no batch key",
        "skipped dotplot_markers: uns['rank_genes_groups'] is missing",
    ] {
        assert!(out.contains(skipped), "'{skipped}' in {out}");
    }

    // A folder that cannot be made stops the run before any step, naming it.
    let blocker = common::scratch("a-file");
    std::fs::write(&blocker, "x").unwrap();
    let never = common::scratch("never-plotted.h5ad");
    let bad = blocker.join("pictures");
    let mut args = demo.to_vec();
    args.extend([
        "-o",
        never.to_str().unwrap(),
        "--plot",
        bad.to_str().unwrap(),
    ]);
    let run = scpipe(&args);
    let out = text(&run);
    assert!(!run.status.success());
    assert!(
        out.contains("--plot") && out.contains("cannot create the folder"),
        "{out}"
    );
    assert!(
        !out.contains("generate demo data") && !never.exists(),
        "{out}"
    );
}
