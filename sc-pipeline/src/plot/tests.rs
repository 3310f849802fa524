//! The pictures rendered from a small synthetic AnnData: files, sizes, colours, labels, notes.

use super::*;
use crate::anndata::{ArrayData, Column, DataFrame, DenseArray, Matrix, Raw, Value};
use figure::Figure;
use sc_kernels::CsrMatrix;

const CLUSTERS: usize = 3;
const PER_CLUSTER: usize = 200;
const GENES: usize = 20;

/// A number in [0, 1) from a counter (the data are fixed).
fn noise(i: usize) -> f32 {
    let mut z = (i as u64).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    ((z >> 40) as f32) / (1u64 << 24) as f32
}

/// Three clusters of cells in a UMAP, two batches, QC columns before and after filtering, a
/// `.raw` where cluster k expresses genes 5k..5k+5, and its marker genes.
fn clustered() -> AnnData {
    let n = CLUSTERS * PER_CLUSTER;
    let centres = [(0.0f32, 0.0f32), (10.0, 0.0), (5.0, 8.0)];
    let mut umap = Vec::with_capacity(2 * n);
    let mut labels = Vec::new();
    let (mut indptr, mut indices, mut data) = (vec![0u64], Vec::new(), Vec::new());
    for i in 0..n {
        let k = i / PER_CLUSTER;
        umap.push(centres[k].0 + 3.0 * noise(2 * i));
        umap.push(centres[k].1 + 3.0 * noise(2 * i + 1));
        labels.push(k.to_string());
        for g in 0..GENES {
            let expressed = g / 5 == k && noise(i * GENES + g) < 0.8;
            if expressed || noise(7 * i + g) < 0.05 {
                indices.push(g as u32);
                data.push(if expressed { 2.0 } else { 0.5 });
            }
        }
        indptr.push(indices.len() as u64);
    }
    let raw_x = CsrMatrix::new(n, GENES, indptr, indices, data).unwrap();
    let mut a = AnnData::new(Matrix::Sparse(CsrMatrix::zeros(n, 5)));
    a.obs
        .set("leiden", Column::categorical_from_labels(&labels))
        .unwrap();
    let batches: Vec<String> = (0..n).map(|i| ["a", "b"][i % 2].to_string()).collect();
    a.obs.set_values("batch", ArrayData::Str(batches)).unwrap();
    let qc = |m: usize, scale: f32| -> Vec<f32> {
        (0..m).map(|i| scale * (1.0 + noise(3 * i))).collect()
    };
    // 150 more cells before filtering, with lower counts and more mitochondrial reads.
    let m = n + 150;
    let mut before = DataFrame::with_default_index(m);
    for (t, rows, shift) in [(&mut a.obs, n, 1.0), (&mut before, m, 0.6)] {
        let columns = [
            ("total_counts", 2000.0),
            ("n_genes_by_counts", 800.0),
            ("pct_counts_mt", 3.0 / shift),
        ];
        for (name, scale) in columns {
            t.set_values(name, ArrayData::F32(qc(rows, scale * shift)))
                .unwrap();
        }
    }
    a.obs_before_filter = Some(before);
    a.obsm
        .insert("X_umap".into(), DenseArray::matrix_f32(n, 2, umap).unwrap());
    let genes: Vec<String> = (0..GENES).map(|g| format!("GENE{g}")).collect();
    a.raw = Some(Raw {
        x: Matrix::Sparse(raw_x),
        var: DataFrame::with_index(genes.clone()),
        varm: Default::default(),
    });
    let names = (0..CLUSTERS)
        .map(|k| {
            let top: Vec<String> = (0..10)
                .map(|j| genes[(5 * k + j) % GENES].clone())
                .collect();
            (k.to_string(), ArrayData::Str(top))
        })
        .collect();
    a.uns.insert(
        "rank_genes_groups".into(),
        Value::dict([
            ("params", Value::dict([("groupby", Value::str("leiden"))])),
            ("names", Value::Records(names)),
        ]),
    );
    a
}

fn full_request() -> Request {
    Request {
        leiden_keys: vec!["leiden".into()],
        other_clusterings: Vec::new(),
        batch_key: Some("batch".into()),
        filtered: true,
        genes_per_group: crate::plot::GENES_PER_GROUP,
    }
}

/// A fresh empty folder for one test.
fn folder(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("scpipe-plot-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Whether the SVG has a text element reading `t`.
fn has_text(svg: &str, t: &str) -> bool {
    svg.contains(&format!(">\n{t}\n</text>"))
}

fn decode(path: &Path) -> image::RgbImage {
    image::open(path).unwrap().to_rgb8()
}

fn pixels_of(img: &image::RgbImage, c: plotters::style::RGBColor) -> usize {
    img.pixels().filter(|p| p.0 == [c.0, c.1, c.2]).count()
}

#[test]
fn every_picture_is_drawn_from_a_whole_run() {
    let dir = folder("all");
    let drawn = draw(&clustered(), &full_request(), &dir).unwrap();
    assert!(
        drawn.summary.skipped.is_empty(),
        "{:?}",
        drawn.summary.skipped
    );
    // Staged: nothing under the final names until committed.
    assert!(listing(&dir).iter().all(|n| n.ends_with(".partial")));
    crate::io::commit_all(drawn.files).unwrap();
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
    let lines = drawn.summary.lines();
    assert!(
        lines.contains("umap_leiden.png") && !lines.contains("skipped"),
        "{lines}"
    );

    let umap = decode(&dir.join("umap_leiden.png"));
    assert_eq!(umap.dimensions(), (1000, 800));
    for k in 0..CLUSTERS {
        let n = pixels_of(&umap, palette::category(k));
        assert!(n > 500, "cluster {k}'s colour covers {n} pixels");
    }
    let white = pixels_of(&umap, plotters::style::RGBColor(255, 255, 255));
    let all = (umap.width() * umap.height()) as usize;
    assert!(
        white < all * 98 / 100 && white > all / 3,
        "{white} of {all} white"
    );
    let svg = std::fs::read_to_string(dir.join("umap_leiden.svg")).unwrap();
    assert!(svg.contains("<image"), "the cells are one embedded image");
    for k in 0..CLUSTERS {
        assert!(has_text(&svg, &k.to_string()), "label {k} in the SVG");
    }
    assert!(has_text(&svg, "UMAP1") && has_text(&svg, "leiden"));

    // Total counts: viridis from its dark end to its bright end.
    let counts = decode(&dir.join("umap_total_counts.png"));
    let dark = counts
        .pixels()
        .filter(|p| p.0[2] > p.0[1] && p.0[0] < 120)
        .count();
    assert!(dark > 100, "{dark} dark-violet pixels");
    // The dot plot: a dot per group and gene, in the reds.
    let dots = decode(&dir.join("dotplot_markers.png"));
    let red = dots
        .pixels()
        .filter(|p| p.0[0] > 150 && p.0[1] < 100 && p.0[2] < 100)
        .count();
    assert!(red > 200, "{red} red pixels");
    let svg = std::fs::read_to_string(dir.join("dotplot_markers.svg")).unwrap();
    assert!(has_text(&svg, "GENE0") && has_text(&svg, "GENE14"));
    // The violins: both colours, both labels.
    let violins = decode(&dir.join("qc_violins.png"));
    assert_eq!(violins.dimensions(), (1200, 500));
    let svg = std::fs::read_to_string(dir.join("qc_violins.svg")).unwrap();
    assert!(has_text(&svg, "before filtering") && has_text(&svg, "after filtering"));
    assert!(has_text(&svg, "750 cells") && has_text(&svg, "600 cells"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_tsne_and_a_force_atlas_are_drawn_by_each_clustering_when_they_ran() {
    let mut a = clustered();
    let umap = a.obsm.get("X_umap").unwrap().clone();
    a.obsm.insert("X_tsne".into(), umap.clone());
    // draw_graph's layout is f64, as scanpy writes it.
    let ArrayData::F32(xy) = &umap.data else {
        panic!("the UMAP is f32")
    };
    let xy = xy.iter().map(|&v| f64::from(v)).collect();
    a.obsm.insert(
        "X_draw_graph_fa".into(),
        DenseArray::new(umap.shape.clone(), ArrayData::F64(xy)).unwrap(),
    );
    // Louvain's clusters, when it ran, drawn as Leiden's (here the same column under its name).
    let leiden = a.obs.column("leiden").unwrap().clone();
    a.obs.set("louvain", leiden).unwrap();
    let dir = folder("tsne");
    let request = Request {
        other_clusterings: vec!["louvain".into()],
        ..full_request()
    };
    let drawn = draw(&a, &request, &dir).unwrap();
    crate::io::commit_all(drawn.files).unwrap();
    let names = listing(&dir);
    for name in [
        "tsne_leiden.png",
        "tsne_louvain.png",
        "umap_louvain.png",
        "draw_graph_fa_leiden.png",
        "draw_graph_fa_louvain.png",
    ] {
        assert!(names.contains(&name.to_string()), "{name}: {names:?}");
    }
    let svg = std::fs::read_to_string(dir.join("tsne_leiden.svg")).unwrap();
    assert!(has_text(&svg, "tSNE1") && has_text(&svg, "t-SNE: leiden"));
    let svg = std::fs::read_to_string(dir.join("draw_graph_fa_leiden.svg")).unwrap();
    assert!(has_text(&svg, "FA1") && has_text(&svg, "ForceAtlas2: leiden"));
    for picture in ["tsne_leiden.png", "draw_graph_fa_leiden.png"] {
        let img = decode(&dir.join(picture));
        for k in 0..CLUSTERS {
            assert!(
                pixels_of(&img, palette::category(k)) > 500,
                "{picture}: cluster {k}"
            );
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The PAGA graph, when paga ran: a node per group in the group's colour, its name on it,
/// the edges at or above the threshold only; skipped with the reason when paga did not run.
#[test]
fn the_paga_graph_is_drawn_when_paga_ran() {
    let mut a = clustered();
    let request = full_request();
    let skipped = draw(&a, &request, &folder("no_paga")).unwrap();
    assert!(!skipped
        .files
        .iter()
        .any(|f| f.destination().ends_with("paga_leiden.png")));
    // Groups 0-1 joined strongly, 1-2 under the threshold.
    let conn = CsrMatrix::new(
        3,
        3,
        vec![0, 1, 3, 4],
        vec![1, 0, 2, 1],
        vec![0.8, 0.8, 0.005, 0.005],
    )
    .unwrap();
    a.uns.insert(
        "paga".into(),
        Value::dict([
            ("connectivities", Value::Sparse(conn)),
            ("groups", Value::str("leiden")),
        ]),
    );
    a.uns.insert(
        "leiden_sizes".into(),
        Value::vector(ArrayData::I64(vec![PER_CLUSTER as i64; CLUSTERS])),
    );
    let (figure, _) = paga::prepare(&a).unwrap();
    assert_eq!(figure.edges, vec![(0, 1, 0.8)]);
    let dir = folder("paga");
    let drawn = draw(&a, &request, &dir).unwrap();
    crate::io::commit_all(drawn.files).unwrap();
    let svg = std::fs::read_to_string(dir.join("paga_leiden.svg")).unwrap();
    assert!(has_text(&svg, "PAGA: leiden") && has_text(&svg, "2"));
    let img = decode(&dir.join("paga_leiden.png"));
    for k in 0..CLUSTERS {
        assert!(pixels_of(&img, palette::category(k)) > 500, "group {k}");
    }
    a.uns.remove("leiden_sizes");
    let why = paga::prepare(&a).err().unwrap();
    assert!(why.contains("leiden_sizes"), "{why}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// embedding_density's column, when it ran, drawn as the UMAP coloured by its values.
#[test]
fn the_umap_is_drawn_by_density_when_it_ran() {
    let mut a = clustered();
    let n = a.n_obs();
    let density: Vec<f64> = (0..n).map(|i| i as f64 / (n - 1) as f64).collect();
    a.obs
        .set(
            "umap_density_leiden",
            Column::Values(ArrayData::F64(density)),
        )
        .unwrap();
    a.uns.insert(
        "umap_density_leiden_params".into(),
        Value::dict([("covariate", Value::str("leiden"))]),
    );
    let dir = folder("density");
    let drawn = draw(&a, &full_request(), &dir).unwrap();
    crate::io::commit_all(drawn.files).unwrap();
    let names = listing(&dir);
    assert!(
        names.contains(&"umap_density_leiden.png".to_string()),
        "{names:?}"
    );
    let svg = std::fs::read_to_string(dir.join("umap_density_leiden.svg")).unwrap();
    assert!(has_text(&svg, "UMAP: umap_density_leiden"), "title");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// dpt's pseudotime, when it ran, drawn as the UMAP coloured by it; the cells the root does
/// not reach (infinite) in grey, under the others.
#[test]
fn the_umap_is_drawn_by_pseudotime_with_unreached_cells_grey() {
    let mut a = clustered();
    let n = a.n_obs();
    // The third cluster is unreachable.
    let t: Vec<f32> = (0..n)
        .map(|i| match i / PER_CLUSTER {
            2 => f32::INFINITY,
            _ => i as f32 / n as f32,
        })
        .collect();
    a.obs
        .set("dpt_pseudotime", Column::Values(ArrayData::F32(t)))
        .unwrap();
    let dir = folder("dpt");
    let drawn = draw(&a, &full_request(), &dir).unwrap();
    crate::io::commit_all(drawn.files).unwrap();
    let svg = std::fs::read_to_string(dir.join("umap_dpt_pseudotime.svg")).unwrap();
    assert!(has_text(&svg, "UMAP: dpt_pseudotime"), "title");
    let img = decode(&dir.join("umap_dpt_pseudotime.png"));
    let grey = plotters::style::RGBColor(211, 211, 211);
    assert!(
        pixels_of(&img, grey) > 500,
        "the unreachable cluster is grey"
    );
    // Nothing is drawn at the colour bar's top but the reachable cells' highest values.
    assert!(pixels_of(&img, palette::VIRIDIS.at(1.0)) > 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn missing_inputs_are_skipped_with_the_reason() {
    let dir = folder("missing");
    let bare = AnnData::new(Matrix::Sparse(CsrMatrix::zeros(10, 4)));
    let request = Request {
        leiden_keys: Vec::new(),
        other_clusterings: Vec::new(),
        batch_key: None,
        filtered: true,
        genes_per_group: crate::plot::GENES_PER_GROUP,
    };
    let drawn = draw(&bare, &request, &dir).unwrap();
    assert!(drawn.files.is_empty() && drawn.summary.written.is_empty());
    let reasons: Vec<(&str, &str)> = drawn
        .summary
        .skipped
        .iter()
        .map(|s| (s.name.as_str(), s.reason.as_str()))
        .collect();
    let names: Vec<&str> = reasons.iter().map(|r| r.0).collect();
    assert_eq!(
        names,
        [
            "umap_leiden",
            "umap_batch",
            "umap_total_counts",
            "dotplot_markers",
            "qc_violins"
        ]
    );
    assert!(reasons[0].1.contains("X_umap") && reasons[0].1.contains("--no-umap"));
    assert!(reasons[1].1.contains("X_umap"), "{reasons:?}");
    assert!(reasons[3].1.contains("rank_genes_groups"), "{reasons:?}");
    assert!(reasons[4].1.contains("--no-qc"), "{reasons:?}");
    assert!(drawn.summary.lines().contains("pictures in"));

    // With the embedding, only what else is missing is skipped; the violins say what they
    // leave out.
    let mut a = clustered();
    a.uns.clear();
    a.obs_before_filter = None;
    let request = Request {
        leiden_keys: Vec::new(),
        other_clusterings: Vec::new(),
        batch_key: None,
        filtered: true,
        genes_per_group: crate::plot::GENES_PER_GROUP,
    };
    let drawn = draw(&a, &request, &dir).unwrap();
    let skipped: Vec<&str> = drawn
        .summary
        .skipped
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(skipped, ["umap_leiden", "umap_batch", "dotplot_markers"]);
    let leiden = &drawn.summary.skipped[0].reason;
    assert!(leiden.contains("--no-leiden"), "{leiden}");
    let batch = &drawn.summary.skipped[1].reason;
    assert!(batch.contains("no batch key"), "{batch}");
    let violins = drawn
        .summary
        .written
        .iter()
        .find(|w| w.name == "qc_violins")
        .unwrap();
    assert!(violins
        .note
        .as_deref()
        .unwrap()
        .contains("only the cells after filtering"));
    drop(drawn);
    assert!(listing(&dir).is_empty(), "dropped pictures leave nothing");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_folder_that_cannot_be_made_is_named() {
    let dir = folder("blocked");
    let file = dir.join("a-file");
    std::fs::write(&file, "x").unwrap();
    let e = create_dir(&file.join("pictures")).unwrap_err().to_string();
    assert!(e.contains("--plot") && e.contains("a-file/pictures"), "{e}");
    create_dir(&dir.join("new/nested")).unwrap();
    assert!(dir.join("new/nested").is_dir());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A million cells' UMAP, drawn as PNG and SVG: `cargo test -p sc-pipeline --release --lib
/// million -- --ignored --nocapture` prints the time.
#[test]
#[ignore]
fn a_million_cells_draw_in_seconds() {
    let n = 1_000_000;
    let points: Vec<[f32; 2]> = (0..n)
        .map(|i| {
            let k = (i % 20) as f32;
            [
                k.cos() * 10.0 + 4.0 * noise(2 * i),
                k.sin() * 10.0 + 4.0 * noise(2 * i + 1),
            ]
        })
        .collect();
    let labels: Vec<String> = (0..n).map(|i| (i % 20).to_string()).collect();
    let mut obs = DataFrame::with_default_index(0);
    obs.index = (0..n).map(|i| i.to_string()).collect();
    obs.set("leiden", Column::categorical_from_labels(&labels))
        .unwrap();
    let figure = umap::UmapFigure {
        axis: "UMAP",
        title: "UMAP: leiden".into(),
        points: &points,
        colouring: umap::Colouring::Groups {
            key: "leiden".into(),
            groups: data::Groups::of(&obs, "leiden").unwrap(),
            labels: true,
        },
    };
    let dir = folder("million");
    let start = std::time::Instant::now();
    let files = figure::write(&figure, &dir, "umap_leiden").unwrap();
    let seconds = start.elapsed().as_secs_f64();
    crate::io::commit_all(files).unwrap();
    println!("1,000,000 cells: PNG and SVG in {seconds:.2} s");
    assert!(seconds < 10.0, "{seconds} s");
    // SCPIPE_KEEP_TEST_FILES keeps the pictures to look at (as the integration tests do).
    match std::env::var_os("SCPIPE_KEEP_TEST_FILES") {
        Some(_) => println!("in {}", dir.display()),
        None => std::fs::remove_dir_all(&dir).unwrap(),
    }
}

#[test]
fn scrublet_scores_are_drawn_per_batch_with_the_threshold() {
    let mut a =
        crate::synthetic::generate(&crate::synthetic::SyntheticParams::new(900, 400, 2)).unwrap();
    let options = crate::steps::ScrubletOptions {
        batch_key: Some("batch".into()),
        ..Default::default()
    };
    crate::steps::scrublet(&mut a, &options, None).unwrap();
    let (figure, _) = scrublet::prepare(&a).unwrap();
    let batches = data::Groups::of(&a.obs, "batch").unwrap().names.len();
    assert_eq!(figure.rows.len(), batches);
    assert_eq!(figure.size().1, 320 * batches as u32);
    let observed: usize = figure.rows.iter().map(|r| r.observed.len()).sum();
    assert_eq!(observed, a.n_obs());
    let svg = figure::render_svg(&figure).unwrap();
    assert!(svg.contains("simulated doublets"), "the doublets' panel");
    assert!(has_text(&svg, "doublet score"));
    // Densities integrate to 1 over the bins.
    let d = scrublet::densities(&figure.rows[0].simulated, 1.0);
    let area: f64 = d.iter().sum::<f64>() / 49.0;
    assert!((area - 1.0).abs() < 1e-9, "{area}");
    // Without scrublet the picture is skipped with the reason.
    let b = clustered();
    assert!(scrublet::prepare(&b).err().unwrap().contains("--scrublet"));
}
