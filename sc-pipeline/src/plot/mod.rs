//! Pictures of a finished run (`scpipe run --plot DIR`), drawn from the final AnnData in every
//! mode, as PNG and SVG: the UMAP coloured by each Leiden clustering (names at the clusters'
//! centres), by batch, by total counts and, when they ran, by dpt's pseudotime and the
//! embedding densities ([`umap`]), the t-SNE and the ForceAtlas2 layout by each clustering
//! when `--tsne` and `--draw-graph` ran, the marker genes' dot plot ([`dotplot`]), the PAGA
//! graph when `--paga` ran ([`paga`]),
//! the QC violins before and after filtering ([`violin`]) and, when scrublet ran, the doublet
//! scores' histograms ([`scrublet`]). A picture whose inputs the run did not make is skipped
//! with the reason, never an error.
//!
//! Each picture is a [`figure::Figure`], drawn by plotters on either backend and written by
//! [`figure::write`] under temporary names the run moves into place with its other outputs.

mod data;
pub mod dotplot;
mod figure;
pub(crate) mod font;
mod legend;
pub mod paga;
mod palette;
pub mod raster;
pub mod scrublet;
pub mod umap;
pub mod violin;

#[cfg(test)]
mod tests;

pub use dotplot::GENES_PER_GROUP;
pub use violin::QC_COLUMNS;

use crate::io::StagedFile;
use crate::report::{PlotSummary, SkippedPlot, WrittenPlot};
use crate::{AnnData, Error, Result};
use std::path::Path;
use umap::{Colouring, UmapFigure};

/// What the run made that the pictures show (from its configuration).
#[derive(Debug, Clone)]
pub struct Request {
    /// Leiden's `obs` columns (one per resolution); empty: Leiden did not run.
    pub leiden_keys: Vec<String>,
    /// The other clusterings' `obs` columns that ran (`louvain`, `kmeans`), drawn as Leiden's.
    pub other_clusterings: Vec<String>,
    /// The `obs` column of the batches (`--harmony`, else `--batch-key`).
    pub batch_key: Option<String>,
    /// Whether `filter_cells` ran.
    pub filtered: bool,
    /// The marker genes per group in the dot plot ([`GENES_PER_GROUP`] by default).
    pub genes_per_group: usize,
}

/// The pictures' files, staged, and what was drawn or skipped.
pub struct Drawn {
    pub files: Vec<StagedFile>,
    pub summary: PlotSummary,
}

/// The obsm keys of the embeddings drawn.
const UMAP: &str = "X_umap";
/// The embeddings drawn by each clustering when the run made them: (obsm key, title, axis
/// name, file name's start), as scanpy's `pl.tsne` and `pl.draw_graph`.
const OTHER_EMBEDDINGS: [(&str, &str, &str, &str); 2] = [
    ("X_tsne", "t-SNE", "tSNE", "tsne"),
    ("X_draw_graph_fa", "ForceAtlas2", "FA", "draw_graph_fa"),
];

/// Creates `dir` when it does not exist, naming the problem when it cannot be.
pub fn create_dir(dir: &Path) -> Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    std::fs::create_dir_all(dir).map_err(|e| {
        Error::param(
            "--plot",
            format!("cannot create the folder {}: {e}", dir.display()),
        )
    })
}

/// Draws every picture `adata` has the inputs of into `dir` (which must exist).
pub fn draw(adata: &AnnData, request: &Request, dir: &Path) -> Result<Drawn> {
    let mut out = Drawn {
        files: Vec::new(),
        summary: PlotSummary {
            dir: dir.display().to_string(),
            ..Default::default()
        },
    };
    let umap = data::embedding(adata, UMAP)
        .map_err(|e| format!("{e} (UMAP did not run: --no-umap, --no-neighbors or --no-pca)"));
    let groups_by = |key: &str, labels: bool| -> std::result::Result<Colouring, String> {
        Ok(Colouring::Groups {
            key: key.to_string(),
            groups: data::Groups::of(&adata.obs, key)?,
            labels,
        })
    };
    let mut umaps: Vec<(String, std::result::Result<Colouring, String>)> = Vec::new();
    if request.leiden_keys.is_empty() {
        let why = "Leiden did not run (--no-leiden, or no neighbors graph)".to_string();
        umaps.push(("umap_leiden".into(), Err(why)));
    }
    let clusterings: Vec<&String> = request
        .leiden_keys
        .iter()
        .chain(&request.other_clusterings)
        .collect();
    for key in &clusterings {
        umaps.push((format!("umap_{key}"), groups_by(key, true)));
    }
    let batch = match &request.batch_key {
        Some(key) => groups_by(key, false),
        None => Err("no batch key (--harmony KEY or --batch-key KEY names one)".into()),
    };
    umaps.push(("umap_batch".into(), batch));
    let counts = data::numbers(&adata.obs, "total_counts", "obs")
        .map_err(|e| format!("{e} (the QC metrics did not run: --no-qc)"))
        .map(|values| Colouring::Values {
            key: "total_counts".into(),
            values,
        });
    umaps.push(("umap_total_counts".into(), counts));
    // By value, when the steps that write them ran: dpt's pseudotime (--dpt-root), as scanpy's
    // pl.umap(color='dpt_pseudotime'), the cells the root does not reach (infinite) in grey;
    // embedding_density's columns (--embedding-density: obs['umap_density[_groupby]'] with its
    // uns record), as scanpy's pl.embedding_density.
    let by_value = adata.obs.column_names().filter(|k| {
        *k == "dpt_pseudotime"
            || (k.starts_with("umap_density") && adata.uns.contains_key(&format!("{k}_params")))
    });
    for key in by_value {
        let values = data::numbers(&adata.obs, key, "obs").map_err(|e| e.to_string());
        let colouring = values.map(|values| Colouring::Values {
            key: key.to_string(),
            values,
        });
        let name = match key.starts_with("umap_") {
            true => key.to_string(),
            false => format!("umap_{key}"),
        };
        umaps.push((name, colouring));
    }
    for (name, colouring) in umaps {
        let figure = match (&umap, colouring) {
            (Err(why), _) => Err(why.clone()),
            (Ok(_), Err(why)) => Err(why),
            (Ok(points), Ok(colouring)) => Ok(UmapFigure {
                title: format!("UMAP: {}", colour_name(&colouring)),
                axis: "UMAP",
                points,
                colouring,
            }),
        };
        out.add(dir, &name, figure.map(|f| (f, None)))?;
    }
    // The other embeddings by each clustering, when they ran (--tsne, --draw-graph).
    for (obsm, title, axis, name) in OTHER_EMBEDDINGS {
        let Ok(points) = data::embedding(adata, obsm) else {
            continue;
        };
        for key in &clusterings {
            let figure = groups_by(key, true).map(|colouring| UmapFigure {
                title: format!("{title}: {key}"),
                axis,
                points: &points,
                colouring,
            });
            out.add(dir, &format!("{name}_{key}"), figure.map(|f| (f, None)))?;
        }
    }
    let dots = dotplot::prepare(adata, request.genes_per_group).map(|d| (d, None));
    out.add(dir, "dotplot_markers", dots)?;
    out.add(dir, "qc_violins", violin::prepare(adata, request.filtered))?;
    if adata.uns.contains_key("paga") {
        let prepared = paga::prepare(adata);
        let name = match &prepared {
            Ok((figure, _)) => format!("paga_{}", figure.key),
            Err(_) => "paga".to_string(),
        };
        out.add(dir, &name, prepared)?;
    }
    if adata.uns.contains_key("scrublet") {
        out.add(dir, "scrublet_scores", scrublet::prepare(adata))?;
    }
    Ok(out)
}

fn colour_name(c: &Colouring) -> &str {
    match c {
        Colouring::Groups { key, .. } | Colouring::Values { key, .. } => key,
    }
}

impl Drawn {
    /// Writes a prepared picture as `name` (with its note), or records why it was skipped.
    fn add(
        &mut self,
        dir: &Path,
        name: &str,
        prepared: std::result::Result<(impl figure::Figure, Option<String>), String>,
    ) -> Result<()> {
        let name = file_name(name);
        match prepared {
            Ok((figure, note)) => {
                let files = figure::write(&figure, dir, &name)?;
                let names = files
                    .iter()
                    .map(|f| {
                        let d = f.destination();
                        d.file_name()
                            .unwrap_or_default()
                            .to_string_lossy()
                            .into_owned()
                    })
                    .collect();
                self.files.extend(files);
                self.summary.written.push(WrittenPlot {
                    name,
                    files: names,
                    note,
                });
            }
            Err(reason) => self.summary.skipped.push(SkippedPlot { name, reason }),
        }
        Ok(())
    }
}

/// `name` safe as a file name (an obs column may hold any character).
fn file_name(name: &str) -> String {
    name.chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '.' | '_' | '-' => c,
            _ => '_',
        })
        .collect()
}
