//! The marker genes' dot plot (scanpy's `pl.rank_genes_groups_dotplot`): the top
//! [`GENES_PER_GROUP`] genes of each group from `uns['rank_genes_groups']['names']` on x, in
//! blocks under their group's name, the groups on y; each dot's size is the fraction of the
//! group's cells that express the gene (> 0) and its colour the gene's mean expression in the
//! group, from the matrix the markers were ranked on (`.raw`: log-normalized, every filtered
//! gene).

use super::data::{Groups, Missing};
use super::figure::{DrawError, Figure};
use super::font::FAMILY;
use super::legend;
use super::palette::REDS;
use crate::anndata::{ArrayData, Matrix, Scalar, Value};
use crate::AnnData;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::collections::HashMap;

/// Genes shown per group: scanpy's dot plot of markers shows 10; 5 keeps a plot of 20
/// clusters readable (100 columns).
pub const GENES_PER_GROUP: usize = 5;

/// The dot plot's numbers.
pub struct DotPlot {
    pub groupby: String,
    pub groups: Vec<String>,
    /// Each group's top genes, in the groups' order (the x axis, left to right).
    pub blocks: Vec<(String, Vec<String>)>,
    /// `[group][column]`: fraction of the group's cells with the column's gene > 0.
    pub fraction: Vec<Vec<f64>>,
    /// `[group][column]`: the gene's mean in the group.
    pub mean: Vec<Vec<f64>>,
}

/// The dot plot of `adata`'s marker genes, or why there is none.
pub fn prepare(adata: &AnnData, genes_per_group: usize) -> Result<DotPlot, Missing> {
    let markers = adata
        .uns
        .get("rank_genes_groups")
        .ok_or("uns['rank_genes_groups'] is missing (the marker genes did not run)")?;
    let groupby = match markers.get("params").and_then(|p| p.get("groupby")) {
        Some(Value::Scalar(Scalar::Str(g))) => g.clone(),
        _ => return Err("uns['rank_genes_groups'] does not name its groupby".into()),
    };
    let blocks: Vec<(String, Vec<String>)> = match markers.get("names") {
        Some(Value::Records(fields)) => fields
            .iter()
            .map(|(group, genes)| match genes {
                ArrayData::Str(g) => Ok((
                    group.clone(),
                    g.iter().take(genes_per_group).cloned().collect(),
                )),
                _ => Err(format!(
                    "uns['rank_genes_groups']['names']['{group}'] is not text"
                )),
            })
            .collect::<Result<_, _>>()?,
        _ => return Err("uns['rank_genes_groups']['names'] is missing".into()),
    };
    let groups = Groups::of(&adata.obs, &groupby)?;
    // The matrix the markers were ranked on: `.raw` when there is one.
    let (matrix, genes) = match &adata.raw {
        Some(r) => (&r.x, &r.var.index),
        None => (&adata.x, &adata.var.index),
    };
    let columns: Vec<&String> = blocks.iter().flat_map(|(_, g)| g).collect();
    let stats = group_stats(matrix, genes, &groups, &columns)?;
    // The groups in the order of the markers' record (the categories' order).
    let order: Vec<usize> = blocks
        .iter()
        .map(|(g, _)| groups.names.iter().position(|n| n == g))
        .collect::<Option<_>>()
        .ok_or_else(|| format!("a group of the marker genes is not in obs['{groupby}']"))?;
    Ok(DotPlot {
        groupby,
        groups: order.iter().map(|&g| groups.names[g].clone()).collect(),
        fraction: order.iter().map(|&g| stats.fraction[g].clone()).collect(),
        mean: order.iter().map(|&g| stats.mean[g].clone()).collect(),
        blocks,
    })
}

struct Stats {
    fraction: Vec<Vec<f64>>,
    mean: Vec<Vec<f64>>,
}

/// Per group of `groups` and per gene of `columns` (named in `genes`, the matrix's columns):
/// the fraction of cells > 0 and the mean. Only the columns shown are read (on the GPU, only
/// they are copied back).
fn group_stats(
    matrix: &Matrix,
    genes: &[String],
    groups: &Groups,
    columns: &[&String],
) -> Result<Stats, Missing> {
    let position: HashMap<&str, usize> = genes
        .iter()
        .enumerate()
        .map(|(i, g)| (g.as_str(), i))
        .collect();
    let mut keep = vec![false; genes.len()];
    let mut wanted = Vec::with_capacity(columns.len());
    for gene in columns {
        let &i = position
            .get(gene.as_str())
            .ok_or_else(|| format!("marker gene '{gene}' is not among the matrix's genes"))?;
        keep[i] = true;
        wanted.push(i);
    }
    // Kept columns keep their order: the k-th kept gene is column k.
    let mut kept_at = vec![usize::MAX; genes.len()];
    for (k, i) in (0..genes.len()).filter(|&i| keep[i]).enumerate() {
        kept_at[i] = k;
    }
    let sub = matrix
        .select_cols(&keep)
        .and_then(|m| m.to_csr().map(|c| c.into_owned()))
        .map_err(|e| format!("the expression values cannot be read: {e}"))?;
    if sub.n_rows != groups.codes.len() {
        return Err("the expression matrix's cells are not obs's".into());
    }
    let (n_groups, n_kept) = (groups.names.len(), sub.n_cols);
    let mut cells = vec![0usize; n_groups];
    let mut expressed = vec![vec![0usize; n_kept]; n_groups];
    let mut sums = vec![vec![0f64; n_kept]; n_groups];
    for (row, code) in groups.codes.iter().enumerate() {
        let Some(g) = code.map(|c| c as usize) else {
            continue;
        };
        cells[g] += 1;
        let (cols, vals) = sub.row(row);
        for (&c, &v) in cols.iter().zip(vals) {
            expressed[g][c as usize] += (v > 0.0) as usize;
            sums[g][c as usize] += v as f64;
        }
    }
    let per_column = |table: &Vec<Vec<f64>>| -> Vec<Vec<f64>> {
        table
            .iter()
            .map(|row| wanted.iter().map(|&i| row[kept_at[i]]).collect())
            .collect()
    };
    let divide = |counts: Vec<Vec<f64>>| -> Vec<Vec<f64>> {
        counts
            .into_iter()
            .zip(&cells)
            .map(|(row, &n)| row.into_iter().map(|v| v / n.max(1) as f64).collect())
            .collect()
    };
    let expressed: Vec<Vec<f64>> = expressed
        .into_iter()
        .map(|r| r.into_iter().map(|v| v as f64).collect())
        .collect();
    Ok(Stats {
        fraction: divide(per_column(&expressed)),
        mean: divide(per_column(&sums)),
    })
}

const CELL: i32 = 22;
const TITLE: i32 = 44;
const BRACKETS: i32 = 40;
const LEGEND: i32 = 230;

impl DotPlot {
    fn columns(&self) -> usize {
        self.blocks.iter().map(|(_, g)| g.len()).sum()
    }

    /// Pixels left of the dots (the groups' names) and below them (the genes' names).
    fn margins(&self) -> (i32, i32) {
        let longest = |names: &mut dyn Iterator<Item = &String>| {
            names.map(|n| n.chars().count()).max().unwrap_or(1) as i32
        };
        let left = (longest(&mut self.groups.iter()) * 9 + 24).max(60);
        let genes = longest(&mut self.blocks.iter().flat_map(|(_, g)| g));
        let bottom = (genes * 8 + 20).clamp(60, 200);
        (left, bottom)
    }

    fn value_range(&self) -> (f64, f64) {
        let all = self
            .mean
            .iter()
            .flatten()
            .copied()
            .filter(|v| v.is_finite());
        let (lo, hi) = all.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
            (a.min(v), b.max(v))
        });
        if lo < hi {
            (lo, hi)
        } else if lo == hi {
            (lo, lo + 1.0)
        } else {
            (0.0, 1.0)
        }
    }

    /// scanpy's `dot_max`: the largest fraction rounded up to a tenth.
    fn dot_max(&self) -> f64 {
        let max = self.fraction.iter().flatten().copied().fold(0.0, f64::max);
        ((max * 10.0).ceil() / 10.0).max(0.1)
    }
}

/// The dot of a fraction `f` of cells, of area proportional to it.
fn dot_radius(f: f64, dot_max: f64) -> i32 {
    (CELL as f64 * 0.45 * (f / dot_max).min(1.0).sqrt()).round() as i32
}

impl Figure for DotPlot {
    fn size(&self) -> (u32, u32) {
        let (left, bottom) = self.margins();
        let w = left + self.columns() as i32 * CELL + LEGEND + 20;
        let h = TITLE + BRACKETS + self.groups.len() as i32 * CELL + bottom;
        (w.max(500) as u32, h.max(430) as u32)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), DrawError<DB>> {
        let (left, _) = self.margins();
        let top = TITLE + BRACKETS;
        let (w, _) = self.size();
        let plot_w = self.columns() as i32 * CELL;
        let plot_h = self.groups.len() as i32 * CELL;
        root.draw(&Text::new(
            format!("marker genes by {}", self.groupby),
            (left + plot_w / 2, 20),
            legend::centred_text(20),
        ))?;
        let grey = RGBColor(220, 220, 220);
        let (lo, hi) = self.value_range();
        let dot_max = self.dot_max();
        let right_name =
            TextStyle::from((FAMILY, 14).into_font()).pos(Pos::new(HPos::Right, VPos::Center));
        for (r, group) in self.groups.iter().enumerate() {
            let y = top + r as i32 * CELL + CELL / 2;
            root.draw(&Text::new(group.clone(), (left - 8, y), right_name.clone()))?;
        }
        let gene_style = TextStyle::from((FAMILY, 13).into_font())
            .transform(FontTransform::Rotate270)
            .pos(Pos::new(HPos::Right, VPos::Center));
        let mut column = 0;
        for (group, genes) in &self.blocks {
            // The block's bracket and its group's name above it.
            let (x0, x1) = (
                left + column * CELL + 3,
                left + (column + genes.len() as i32) * CELL - 3,
            );
            let yb = top - 8;
            root.draw(&PathElement::new(
                vec![(x0, yb + 5), (x0, yb), (x1, yb), (x1, yb + 5)],
                BLACK,
            ))?;
            root.draw(&Text::new(
                group.clone(),
                ((x0 + x1) / 2, yb - 12),
                legend::centred_text(13),
            ))?;
            for gene in genes {
                let x = left + column * CELL + CELL / 2;
                root.draw(&Text::new(
                    gene.clone(),
                    (x, top + plot_h + 6),
                    gene_style.clone(),
                ))?;
                for r in 0..self.groups.len() {
                    let y = top + r as i32 * CELL + CELL / 2;
                    let f = self.fraction[r][column as usize];
                    let radius = dot_radius(f, dot_max);
                    if radius > 0 {
                        let m = self.mean[r][column as usize];
                        let c = REDS.at((m - lo) / (hi - lo));
                        root.draw(&Circle::new((x, y), radius, c.filled()))?;
                        root.draw(&Circle::new((x, y), radius, grey.stroke_width(1)))?;
                    }
                }
                column += 1;
            }
        }
        root.draw(&Rectangle::new(
            [(left, top), (left + plot_w, top + plot_h)],
            BLACK,
        ))?;
        // Legends: the colour bar, then the dot sizes.
        let lx = w as i32 - LEGEND + 10;
        legend::color_bar(
            root,
            (lx, top + 20, top + 170),
            "mean expression in group",
            (lo, hi),
            &REDS,
        )?;
        let sy = top + 215;
        root.draw(&Text::new(
            "fraction of cells in group (%)",
            (lx, sy),
            legend::left_text(14),
        ))?;
        let sizes = legend::nice_ticks(0.0, dot_max, 5)
            .into_iter()
            .filter(|&f| f > 0.0);
        for (i, f) in sizes.enumerate() {
            let x = lx + 12 + i as i32 * 36;
            root.draw(&Circle::new(
                (x, sy + 30),
                dot_radius(f, dot_max),
                RGBColor(120, 120, 120).filled(),
            ))?;
            root.draw(&Text::new(
                format!("{:.0}", f * 100.0),
                (x, sy + 52),
                legend::centred_text(12),
            ))?;
        }
        Ok(())
    }
}
