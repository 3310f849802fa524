//! The UMAP embedding's scatter, coloured by a grouping of the cells (Leiden clusters, with
//! their names at the clusters' centres; batches) or by a value (total counts), as scanpy's
//! `pl.umap` draws it: the cells rasterised ([`super::raster`]), frame, axis names, title and
//! legend as vector elements.

use super::data::Groups;
use super::figure::{DrawError, Figure};
use super::font::FAMILY;
use super::legend;
use super::palette::{self, VIRIDIS};
use super::raster::{self, Bounds, Raster};
use plotters::coord::Shift;
use plotters::prelude::*;

/// What gives each cell its colour.
pub enum Colouring {
    /// A group per cell, named in the legend; `labels`: the groups' names also at their
    /// centres (the median of their cells).
    Groups {
        key: String,
        groups: Groups,
        labels: bool,
    },
    /// A value per cell on viridis, with a colour bar.
    Values { key: String, values: Vec<f64> },
}

/// A UMAP picture (or another 2-D embedding's: `axis` names its axes, `UMAP` -> UMAP1,
/// UMAP2; `tSNE` as scanpy's `pl.tsne`).
pub struct UmapFigure<'a> {
    pub title: String,
    pub axis: &'static str,
    pub points: &'a [[f32; 2]],
    pub colouring: Colouring,
}

const SIZE: (u32, u32) = (1000, 800);
/// The width of the chart; the legend takes the rest.
const CHART_WIDTH: u32 = 780;
/// Cells without a group.
const NO_GROUP: RGBColor = RGBColor(211, 211, 211);

impl UmapFigure<'_> {
    /// The cells splatted, those outside `bounds` on its edge.
    fn raster(&self, bounds: &Bounds, size: (u32, u32)) -> Raster {
        let d = raster::dot_diameter(self.points.len());
        match &self.colouring {
            Colouring::Groups { groups, .. } => {
                let colours = palette::categories(groups.names.len());
                let color = |i: usize| match groups.codes[i] {
                    Some(c) => colours[c as usize],
                    None => NO_GROUP,
                };
                let order = raster::shuffled_order(self.points.len());
                Raster::splat(self.points, &order, color, bounds, size, d)
            }
            Colouring::Values { values, .. } => {
                let (lo, hi) = value_range(values);
                let span = if hi > lo { hi - lo } else { 1.0 };
                // A cell without a value (NaN, or dpt's infinite pseudotime: unreachable from
                // the root) is grey, as a cell without a group.
                let color = |i: usize| match values[i].is_finite() {
                    true => VIRIDIS.at((values[i] - lo) / span),
                    false => NO_GROUP,
                };
                let order = raster::ascending_order(values);
                Raster::splat(self.points, &order, color, bounds, size, d)
            }
        }
    }
}

/// The finite values' range (0..1 when there are none).
fn value_range(values: &[f64]) -> (f64, f64) {
    let finite = values.iter().copied().filter(|v| v.is_finite());
    let (lo, hi) = finite.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
        (a.min(v), b.max(v))
    });
    if lo <= hi {
        (lo, hi)
    } else {
        (0.0, 1.0)
    }
}

impl Figure for UmapFigure<'_> {
    fn size(&self) -> (u32, u32) {
        SIZE
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), DrawError<DB>> {
        let (left, right) = root.split_horizontally(CHART_WIDTH);
        let bounds = Bounds::robust(self.points, 0.03);
        let mut chart = ChartBuilder::on(&left)
            .caption(&self.title, (FAMILY, 22))
            .margin(12)
            .x_label_area_size(28)
            .y_label_area_size(28)
            .build_cartesian_2d(bounds.x.0..bounds.x.1, bounds.y.0..bounds.y.1)?;
        // scanpy's embeddings have no ticks: the coordinates mean nothing.
        chart
            .configure_mesh()
            .disable_mesh()
            .x_labels(0)
            .y_labels(0)
            .x_desc(format!("{}1", self.axis))
            .y_desc(format!("{}2", self.axis))
            .axis_desc_style((FAMILY, 16))
            .draw()?;
        let area = chart.plotting_area().strip_coord_spec();
        let size = area.dim_in_pixel();
        let raster = self.raster(&bounds, size);
        let image = BitMapElement::with_owned_buffer((0, 0), raster.size, raster.rgb)
            .expect("the raster has its size's pixels");
        area.draw(&image)?;
        let (w, h) = (size.0 as i32, size.1 as i32);
        area.draw(&Rectangle::new([(0, 0), (w - 1, h - 1)], BLACK))?;
        let outside = self.points.iter().filter(|p| bounds.excludes(**p)).count();
        if outside > 0 {
            let note = format!(
                "{outside} cell{} far out drawn at the frame's edge",
                if outside == 1 { "" } else { "s" }
            );
            area.draw(&Text::new(note, (8, h - 22), (FAMILY, 14).into_font()))?;
        }
        let bottom = SIZE.1 as i32 - 40;
        match &self.colouring {
            Colouring::Groups {
                key,
                groups,
                labels,
            } => {
                if *labels {
                    for (name, centre) in groups.names.iter().zip(centres(self.points, groups)) {
                        if let Some(p) = centre.and_then(|c| bounds.pixel(c, size)) {
                            label_with_halo(&area, name, (p.0 as i32, p.1 as i32))?;
                        }
                    }
                }
                let colours = palette::categories(groups.names.len());
                legend::categories(&right, (10, 60), bottom, key, &groups.names, |i| colours[i])?;
            }
            Colouring::Values { key, values } => {
                let range = value_range(values);
                legend::color_bar(&right, (20, 80, bottom - 60), key, range, &VIRIDIS)?;
            }
        }
        Ok(())
    }
}

/// A label readable on any colour: white copies around a black one (the SVG gets them as
/// text too).
pub(crate) fn label_with_halo<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    text: &str,
    (x, y): (i32, i32),
) -> Result<(), DrawError<DB>> {
    let style = legend::centred_text(20);
    for (dx, dy) in [
        (-1, -1),
        (1, -1),
        (-1, 1),
        (1, 1),
        (0, -2),
        (0, 2),
        (-2, 0),
        (2, 0),
    ] {
        area.draw(&Text::new(
            text.to_string(),
            (x + dx, y + dy),
            style.color(&WHITE),
        ))?;
    }
    area.draw(&Text::new(text.to_string(), (x, y), style.color(&BLACK)))
}

/// Each group's centre: the median of its cells' coordinates (`None` for a group without
/// cells).
pub fn centres(points: &[[f32; 2]], groups: &Groups) -> Vec<Option<(f64, f64)>> {
    let mut xs = vec![Vec::new(); groups.names.len()];
    let mut ys = vec![Vec::new(); groups.names.len()];
    for (p, code) in points.iter().zip(&groups.codes) {
        if let Some(c) = code.filter(|_| p[0].is_finite() && p[1].is_finite()) {
            xs[c as usize].push(p[0]);
            ys[c as usize].push(p[1]);
        }
    }
    xs.iter_mut()
        .zip(ys.iter_mut())
        .map(|(x, y)| Some((median(x)?, median(y)?)))
        .collect()
}

fn median(v: &mut [f32]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mid = v.len() / 2;
    let (_, m, _) = v.select_nth_unstable_by(mid, |a, b| a.total_cmp(b));
    Some(*m as f64)
}
