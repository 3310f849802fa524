//! The PAGA graph (scanpy's `pl.paga`): one node per group at a force-directed position of the
//! groups' connectivities (edges under 0.01 left out, as scanpy's `threshold`), its area the
//! group's size, its colour the group's in the other pictures and its name on it; an edge's
//! width its connectivity. scanpy lays the nodes out with igraph's Fruchterman-Reingold; here
//! with ForceAtlas2 (`sc_kernels::draw_graph`, from the same kind of start), so the picture
//! shows the same graph, not the same coordinates.

use super::data::{Groups, Missing};
use super::figure::{DrawError, Figure};
use super::font::FAMILY;
use super::palette;
use super::umap::label_with_halo;
use crate::anndata::{Scalar, Value};
use crate::AnnData;
use plotters::coord::Shift;
use plotters::prelude::*;
use sc_kernels::draw_graph::{force_atlas2, numpy_start, Fa2Params};
use sc_kernels::CsrMatrix;

/// scanpy's `pl.paga(threshold=0.01)`: weaker connections are neither drawn nor laid out.
pub const THRESHOLD: f32 = 0.01;

/// The groups' graph as drawn.
pub struct PagaFigure {
    pub key: String,
    pub names: Vec<String>,
    pub sizes: Vec<f64>,
    /// Node positions (`n x 2`).
    pub pos: Vec<f64>,
    /// `(a, b, connectivity)` of the edges drawn, `a < b`.
    pub edges: Vec<(usize, usize, f32)>,
}

/// The PAGA graph of `adata`'s `uns['paga']`, or why there is none.
pub fn prepare(adata: &AnnData) -> Result<(PagaFigure, Option<String>), Missing> {
    let uns = adata.uns.get("paga").ok_or("paga did not run (--paga)")?;
    let key = match uns.get("groups") {
        Some(Value::Scalar(Scalar::Str(k))) => k.clone(),
        _ => return Err("uns['paga'] names no groups".into()),
    };
    let Some(Value::Sparse(conn)) = uns.get("connectivities") else {
        return Err("uns['paga']['connectivities'] is not a sparse matrix".into());
    };
    let names = Groups::of(&adata.obs, &key)?.names;
    let n = names.len();
    if conn.n_rows != n || conn.n_cols != n {
        return Err(format!(
            "uns['paga']['connectivities'] is {} x {}, not the {n} groups of '{key}'",
            conn.n_rows, conn.n_cols
        ));
    }
    let sizes = match adata.uns.get(&format!("{key}_sizes")) {
        Some(Value::Array(a)) => a.data.to_f64().filter(|v| v.len() == n),
        _ => None,
    }
    .ok_or_else(|| format!("uns['{key}_sizes'] is missing or not one size per group"))?;
    let solid = thresholded(conn);
    let pos = force_atlas2(&solid, &numpy_start(n, 0), &Fa2Params::default())
        .map_err(|e| format!("laying out the PAGA graph: {e}"))?;
    let edges = (0..n)
        .flat_map(|a| {
            let (cols, w) = solid.row(a);
            cols.iter()
                .zip(w)
                .filter(move |(&b, _)| a < b as usize)
                .map(move |(&b, &w)| (a, b as usize, w))
        })
        .collect();
    Ok((
        PagaFigure {
            key,
            names,
            sizes,
            pos,
            edges,
        },
        None,
    ))
}

/// `conn` without its entries under [`THRESHOLD`].
fn thresholded(conn: &CsrMatrix<f32>) -> CsrMatrix<f32> {
    let mut rows: Vec<Vec<(u32, f32)>> = vec![Vec::new(); conn.n_rows];
    for (a, row) in rows.iter_mut().enumerate() {
        let (cols, w) = conn.row(a);
        row.extend(
            cols.iter()
                .zip(w)
                .filter(|(_, &w)| w >= THRESHOLD)
                .map(|(&b, &w)| (b, w)),
        );
    }
    let mut indptr = vec![0u64];
    let (mut indices, mut data) = (Vec::new(), Vec::new());
    for row in rows {
        indices.extend(row.iter().map(|e| e.0));
        data.extend(row.iter().map(|e| e.1));
        indptr.push(indices.len() as u64);
    }
    CsrMatrix {
        n_rows: conn.n_rows,
        n_cols: conn.n_cols,
        indptr,
        indices,
        data,
    }
}

const SIZE: (u32, u32) = (800, 800);
/// The largest node's radius, in pixels.
const MAX_RADIUS: f64 = 40.0;
/// The widest edge's width (a connectivity of 1), in pixels.
const MAX_WIDTH: f64 = 12.0;

impl Figure for PagaFigure {
    fn size(&self) -> (u32, u32) {
        SIZE
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), DrawError<DB>> {
        let title = format!("PAGA: {}", self.key);
        let area = root.margin(12, 0, 0, 0).titled(&title, (FAMILY, 22))?;
        let (w, h) = area.dim_in_pixel();
        let margin = MAX_RADIUS + 10.0;
        let n = self.names.len();
        let span = |d: usize| {
            let values = (0..n).map(|i| self.pos[2 * i + d]);
            let lo = values.clone().fold(f64::INFINITY, f64::min);
            let hi = values.fold(f64::NEG_INFINITY, f64::max);
            (lo, if hi > lo { hi - lo } else { 1.0 })
        };
        let ((x0, dx), (y0, dy)) = (span(0), span(1));
        // One scale for both axes, so the layout keeps its shape.
        let scale = ((w as f64 - 2.0 * margin) / dx).min((h as f64 - 2.0 * margin) / dy);
        let at = |i: usize| {
            let x = margin + (self.pos[2 * i] - x0) * scale;
            let y = h as f64 - margin - (self.pos[2 * i + 1] - y0) * scale;
            (x as i32, y as i32)
        };
        for &(a, b, c) in &self.edges {
            let width = (f64::from(c) * MAX_WIDTH).max(1.0) as u32;
            let style = ShapeStyle::from(&BLACK.mix(0.6)).stroke_width(width);
            area.draw(&PathElement::new(vec![at(a), at(b)], style))?;
        }
        let largest = self.sizes.iter().copied().fold(1.0, f64::max);
        let colours = palette::categories(n);
        for (i, (&size, colour)) in self.sizes.iter().zip(colours).enumerate() {
            let radius = (MAX_RADIUS * (size / largest).sqrt()).max(4.0) as i32;
            area.draw(&Circle::new(at(i), radius, colour.filled()))?;
            area.draw(&Circle::new(at(i), radius, BLACK.stroke_width(1)))?;
        }
        for (i, name) in self.names.iter().enumerate() {
            label_with_halo(&area, name, at(i))?;
        }
        Ok(())
    }
}
