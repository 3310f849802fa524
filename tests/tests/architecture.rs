//! The import rule of ARCHITECTURE.md, checked over the sources: a crate names no crate above
//! it, and inside a crate a module names only modules of its own layer or below (never one of
//! a layer above; within a layer marked "apart", not each other). Read from the `crate::`,
//! `super::` and `self::` paths of each file's code (comments and `#[cfg(test)]` parts left
//! out: tests may reach anywhere). A new module must be placed in its table here, and in
//! ARCHITECTURE.md.

use std::path::{Path, PathBuf};

/// The layers of the child modules of one module (`within`, a path below the crate root; empty:
/// the crate's top-level modules), top first: `(modules, apart)`.
struct Layers {
    krate: &'static str,
    within: &'static [&'static str],
    layers: &'static [(&'static [&'static str], bool)],
}

const TABLES: &[Layers] = &[
    Layers {
        krate: "rmm-cuda",
        within: &[],
        layers: &[
            (
                &[
                    "device",
                    "stream",
                    "event",
                    "mem_pool",
                    "virtual_memory",
                    "nccl",
                    "vector_state",
                ],
                false,
            ),
            (&["sim"], false),
            (&["driver"], false),
            (&["error"], false),
        ],
    },
    Layers {
        krate: "rmm-core",
        within: &[],
        layers: &[
            (&["testing", "reinitialize", "containers"], false),
            (&["registry"], false),
            (&["adaptors"], false),
            (&["suballocators"], false),
            (&["resources"], false),
            (&["resource", "identity", "thread_index", "error"], false),
        ],
    },
    Layers {
        krate: "sc-kernels",
        within: &[],
        layers: &[
            (&["warm_up"], false),
            // A step made of other steps (scrublet: filter, normalize, log1p, hvg, pca and the
            // exact kNN, on its own copy of the counts).
            (&["scrublet"], false),
            // Steps that use another step's CPU reference (harmony's LISI the exact kNN, hvg
            // the log1p and normalize of its counts, tsne the exact kNN and the PCA,
            // draw_graph's tests umap's blobs and trustworthiness).
            // ingest maps new cells with the exact kNN's query and umap's gradient.
            (&["harmony", "hvg", "tsne", "draw_graph", "ingest"], false),
            (
                &[
                    "qc",
                    "filter",
                    "normalize",
                    "log1p",
                    "scale",
                    "pca",
                    "neighbors",
                    "umap",
                    "leiden",
                    "rank_genes",
                    "regress",
                    "pearson",
                    "score_genes",
                    "aggregate",
                    "combat",
                    "kmeans",
                    "diffmap",
                    "dpt",
                    "embedding_density",
                    "paga",
                    "synth",
                ],
                false,
            ),
            (&["gpu"], false),
            (
                &[
                    "graph",
                    "quadtree",
                    "stats",
                    "columns",
                    "comm",
                    "csr",
                    "dense",
                    "first_match",
                    "group_by",
                    "eigsh",
                    "random",
                    "fastmath",
                    "real",
                    "error",
                ],
                false,
            ),
        ],
    },
    Layers {
        krate: "sc-kernels",
        within: &["neighbors"],
        layers: &[
            (&["ivf", "bbknn"], true),
            (&["exact"], false),
            (&["pruned", "descent"], true),
            (&["connectivities", "lists"], true),
            (&["scan"], false),
            (&["knn", "result"], false),
        ],
    },
    Layers {
        krate: "sc-pipeline",
        within: &[],
        layers: &[
            (&["cli"], false),
            (&["run", "memory_timeline"], true),
            (&["steps", "plot", "synthetic"], true),
            (&["report"], false),
            (&["io"], false),
            (&["anndata"], false),
            (&["error", "release", "huge_pages"], false),
        ],
    },
    Layers {
        krate: "sc-pipeline",
        within: &["io"],
        layers: &[
            (&["open_rows", "output_file", "detect", "tenx"], false),
            (&["h5ad", "zarr"], true),
            (&["row_chunks", "encoding", "notices", "file_space"], false),
        ],
    },
    Layers {
        krate: "sc-pipeline",
        within: &["steps"],
        layers: &[
            // Louvain is Leiden's partition without the refinement (its partition and write);
            // the markers row runs logreg's fit with `--markers-method logreg`.
            (&["louvain", "markers"], true),
            (
                &[
                    "bbknn",
                    "filter",
                    "harmony",
                    "hvg",
                    "leiden",
                    "log1p",
                    "neighbors",
                    "normalize",
                    "pca",
                    "pearson",
                    "qc",
                    "regress",
                    "scale",
                    "score_genes",
                    "scrublet",
                    "umap",
                    "aggregate",
                    "combat",
                    "diffmap",
                    "dpt",
                    "embedding_density",
                    "kmeans",
                    "paga",
                    "tsne",
                    "draw_graph",
                    "logreg",
                    "ingest",
                ],
                true,
            ),
            (&["step"], false),
            (&["config", "generated_blocks", "generated_ahead"], false),
        ],
    },
];

/// Crates and the crates above them, which their code must not name.
const CRATES_ABOVE: &[(&str, &[&str])] = &[
    (
        "rmm-cuda",
        &["rmm_core", "sc_kernels", "sc_pipeline", "rmm_python"],
    ),
    ("rmm-core", &["sc_kernels", "sc_pipeline", "rmm_python"]),
    ("sc-kernels", &["sc_pipeline", "rmm_python"]),
    ("sc-pipeline", &["rmm_python"]),
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Every `.rs` file of a crate's library (`src/bin` and test files left out), with its module
/// path.
fn sources(krate: &str) -> Vec<(PathBuf, Vec<String>)> {
    let root = workspace().join(krate).join("src");
    let mut out = Vec::new();
    let mut dirs = vec![root.clone()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            if p.is_dir() {
                if name != "bin" && name != "tests" {
                    dirs.push(p);
                }
                continue;
            }
            if !name.ends_with(".rs") || name == "tests.rs" {
                continue;
            }
            let rel = p.strip_prefix(&root).unwrap();
            let mut segs: Vec<String> = rel
                .iter()
                .map(|s| s.to_string_lossy().trim_end_matches(".rs").to_string())
                .collect();
            if matches!(segs.last().map(String::as_str), Some("mod" | "lib")) {
                segs.pop();
            }
            out.push((p, segs));
        }
    }
    out.sort();
    out
}

/// The code of a file without its comments and its `#[cfg(test)]` parts (from the first one on:
/// test modules end the files here).
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let mut out = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with("#[cfg(test)]") {
            break;
        }
        let line = match line.find("//") {
            Some(i) if !line[..i].contains('"') => &line[..i],
            _ => line,
        };
        out.push_str(line);
        out.push('\n');
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Every `crate::a::b`, `super::..`, `self::..` path of `code` as written (a brace group's
/// first names each give a path: `crate::a::{b, c}` is `crate::a::b` and `crate::a::c`).
fn paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let b = code.as_bytes();
    for start in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(i) = code[from..].find(start) {
            let at = from + i;
            from = at + start.len();
            if at > 0 && (is_ident(b[at - 1] as char) || b[at - 1] == b':') {
                continue;
            }
            let mut segs = vec![start.trim_end_matches("::").to_string()];
            let mut j = from;
            loop {
                let end = code[j..]
                    .find(|c: char| !is_ident(c))
                    .map_or(code.len(), |e| j + e);
                if end > j {
                    segs.push(code[j..end].to_string());
                }
                if code[end..].starts_with("::{") {
                    let close = code[end..].find('}').map_or(code.len(), |c| end + c);
                    for part in code[end + 3..close].split(',') {
                        let name: String =
                            part.trim().chars().take_while(|&c| is_ident(c)).collect();
                        if !name.is_empty() {
                            let mut s = segs.clone();
                            s.push(name);
                            out.push(s);
                        }
                    }
                    break;
                }
                if code[end..].starts_with("::") && end > j {
                    j = end + 2;
                    continue;
                }
                out.push(segs);
                break;
            }
        }
    }
    out
}

/// A path as written in the file of module `module` (a `mod.rs` file's module is its folder),
/// from the crate root.
fn resolve(path: &[String], module: &[String]) -> Vec<String> {
    let mut base: Vec<String> = match path[0].as_str() {
        "crate" => Vec::new(),
        _ => module.to_vec(),
    };
    let mut rest = &path[1..];
    if path[0] == "super" {
        base.pop();
    }
    while let Some(first) = rest.first() {
        if first == "super" {
            base.pop();
            rest = &rest[1..];
        } else {
            break;
        }
    }
    base.extend(rest.iter().cloned());
    base
}

/// The child modules of `within` in `krate` (folders and files).
fn children(krate: &str, within: &[&str]) -> Vec<String> {
    let mut d = workspace().join(krate).join("src");
    for w in within {
        d = d.join(w);
    }
    std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter_map(|p| {
            let name = p.file_name()?.to_string_lossy().to_string();
            if p.is_dir() {
                Some(name)
            } else {
                name.strip_suffix(".rs").map(str::to_string)
            }
        })
        .filter(|n| !["mod", "lib", "main", "tests", "bin"].contains(&n.as_str()))
        .collect()
}

#[test]
fn modules_name_only_their_layer_or_below() {
    let mut problems = Vec::new();
    for t in TABLES {
        let layer_of = |m: &str| t.layers.iter().position(|(ms, _)| ms.contains(&m));
        let kids = children(t.krate, t.within);
        for k in &kids {
            if layer_of(k).is_none() {
                problems.push(format!(
                    "{}: module {} is in no layer of the table",
                    t.krate,
                    t.within
                        .iter()
                        .chain([&k.as_str()])
                        .copied()
                        .collect::<Vec<_>>()
                        .join("::")
                ));
            }
        }
        let depth = t.within.len();
        for (file, module) in sources(t.krate) {
            let inside =
                module.len() > depth && module[..depth].iter().zip(t.within).all(|(a, b)| a == b);
            if !inside {
                continue;
            }
            let own = module[depth].as_str();
            let Some(own_layer) = layer_of(own) else {
                continue;
            };
            for p in paths(&code(&file)) {
                let abs = resolve(&p, &module);
                if abs.len() <= depth || abs[..depth].iter().zip(t.within).any(|(a, b)| a != b) {
                    continue;
                }
                let target = abs[depth].as_str();
                if target == own || !kids.iter().any(|k| k == target) {
                    continue;
                }
                let Some(layer) = layer_of(target) else {
                    continue;
                };
                let apart = t.layers[own_layer].1;
                if layer < own_layer || (layer == own_layer && apart) {
                    problems.push(format!(
                        "{}: {} names {} ({})",
                        t.krate,
                        file.strip_prefix(workspace()).unwrap().display(),
                        p.join("::"),
                        if layer < own_layer {
                            "a layer above it"
                        } else {
                            "its own layer, whose modules stay apart"
                        },
                    ));
                }
            }
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

#[test]
fn crates_name_no_crate_above_them() {
    let mut problems = Vec::new();
    for (krate, above) in CRATES_ABOVE {
        for (file, _) in sources(krate) {
            let code = code(&file);
            for a in *above {
                if code.contains(&format!("{a}::")) {
                    problems.push(format!(
                        "{}: names {a}",
                        file.strip_prefix(workspace()).unwrap().display()
                    ));
                }
            }
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

#[test]
fn the_rule_sees_paths_and_brace_groups() {
    let p = paths("use crate::a::{b, c::d};\nlet x = super::e::f(1); // crate::g\n");
    let s: Vec<String> = p.iter().map(|v| v.join("::")).collect();
    assert!(s.contains(&"crate::a::b".to_string()), "{s:?}");
    assert!(s.contains(&"crate::a::c".to_string()), "{s:?}");
    assert!(s.contains(&"super::e::f".to_string()), "{s:?}");
    let module = vec![
        "neighbors".to_string(),
        "ivf".to_string(),
        "gpu".to_string(),
    ];
    let up = resolve(&["super".into(), "super".into(), "exact".into()], &module);
    assert_eq!(up, ["neighbors", "exact"]);
    assert_eq!(resolve(&["crate".into(), "gpu".into()], &module), ["gpu"]);
}
