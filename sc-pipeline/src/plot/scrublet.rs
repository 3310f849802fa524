//! The doublet scores' histograms (scanpy's `pl.scrublet_score_distribution`): for each batch
//! scrublet scored, the observed cells' scores and the simulated doublets', as densities on a
//! logarithmic axis (the few doublets would not show on a linear one), 50 bins from 0, and the
//! threshold as a dashed line.

use super::data::{numbers, Groups, Missing};
use super::figure::{DrawError, Figure};
use super::font::FAMILY;
use super::legend;
use crate::anndata::{ArrayData, Scalar, Value};
use crate::AnnData;
use plotters::coord::Shift;
use plotters::prelude::*;

/// One batch's row: its observed cells' and doublets' scores and its threshold.
pub struct Row {
    pub batch: Option<String>,
    pub observed: Vec<f64>,
    pub simulated: Vec<f64>,
    pub threshold: Option<f64>,
}

/// The rows, one per batch.
pub struct ScoreHistograms {
    pub rows: Vec<Row>,
}

/// Bins of each histogram (scanpy's `np.linspace(0, 1, 50)` edges: 49 bins on [0, 1]).
const BINS: usize = 49;

/// The histograms of `adata`'s scrublet results, or why there are none.
pub fn prepare(adata: &AnnData) -> Result<(ScoreHistograms, Option<String>), Missing> {
    let uns = adata
        .uns
        .get("scrublet")
        .ok_or("scrublet did not run (--scrublet)")?;
    let scores = numbers(&adata.obs, "doublet_score", "obs")?;
    let mut rows = Vec::new();
    match uns.get("batches") {
        None => rows.push(row(None, scores, uns)?),
        Some(Value::Dict(batches)) => {
            let key = match uns.get("batched_by") {
                Some(Value::Scalar(Scalar::Str(k))) => k.clone(),
                _ => return Err("uns['scrublet'] has batches but no 'batched_by'".into()),
            };
            let groups = Groups::of(&adata.obs, &key)?;
            for (name, record) in batches {
                let Some(g) = groups.names.iter().position(|n| n == name) else {
                    continue;
                };
                let mine = scores
                    .iter()
                    .zip(&groups.codes)
                    .filter(|(_, c)| **c == Some(g as u32))
                    .map(|(s, _)| *s)
                    .collect();
                rows.push(row(Some(name.clone()), mine, record)?);
            }
        }
        Some(_) => return Err("uns['scrublet']['batches'] is not a dict".into()),
    }
    let missing: Vec<&str> = rows
        .iter()
        .filter(|r| r.threshold.is_none())
        .map(|r| r.batch.as_deref().unwrap_or("all cells"))
        .collect();
    let note = (!missing.is_empty()).then(|| {
        format!(
            "no threshold found for {} (no line drawn; its cells are not called)",
            missing.join(", ")
        )
    });
    Ok((ScoreHistograms { rows }, note))
}

fn row(batch: Option<String>, observed: Vec<f64>, record: &Value) -> Result<Row, Missing> {
    let simulated = match record.get("doublet_scores_sim") {
        Some(Value::Array(a)) => match &a.data {
            ArrayData::F64(v) => v.clone(),
            ArrayData::F32(v) => v.iter().map(|&x| x as f64).collect(),
            _ => return Err("uns['scrublet']['doublet_scores_sim'] is not numeric".into()),
        },
        _ => return Err("uns['scrublet'] has no 'doublet_scores_sim'".into()),
    };
    let threshold = match record.get("threshold") {
        Some(Value::Scalar(Scalar::Float(t))) => Some(*t),
        _ => None,
    };
    Ok(Row {
        batch,
        observed: observed.into_iter().filter(|s| s.is_finite()).collect(),
        simulated,
        threshold,
    })
}

/// Densities of `values` over `BINS` equal bins of `[0, top]` (values above `top` in the last).
pub fn densities(values: &[f64], top: f64) -> Vec<f64> {
    let width = top / BINS as f64;
    let mut counts = vec![0usize; BINS];
    for &v in values {
        counts[((v.max(0.0) / width) as usize).min(BINS - 1)] += 1;
    }
    let n = values.len().max(1) as f64;
    counts.iter().map(|&c| c as f64 / (n * width)).collect()
}

const ROW_HEIGHT: u32 = 320;
const WIDTH: u32 = 1100;

impl Figure for ScoreHistograms {
    fn size(&self) -> (u32, u32) {
        (WIDTH, ROW_HEIGHT * self.rows.len().max(1) as u32)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), DrawError<DB>> {
        let areas = root.split_evenly((self.rows.len().max(1), 2));
        for (r, row) in self.rows.iter().enumerate() {
            // Scores above 1 happen (few neighbours, a high expected rate): the axis then grows.
            let top = row
                .observed
                .iter()
                .chain(&row.simulated)
                .fold(1.0f64, |a, &b| a.max(b));
            let prefix = row
                .batch
                .as_ref()
                .map(|b| format!("{b}: "))
                .unwrap_or_default();
            for (c, (what, values)) in [
                ("observed cells", &row.observed),
                ("simulated doublets", &row.simulated),
            ]
            .into_iter()
            .enumerate()
            {
                let title = format!("{prefix}{what} ({})", values.len());
                draw_panel(&areas[r * 2 + c], &title, values, top, row.threshold)?;
            }
        }
        Ok(())
    }
}

fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    values: &[f64],
    top: f64,
    threshold: Option<f64>,
) -> Result<(), DrawError<DB>> {
    let density = densities(values, top);
    let positive = density.iter().copied().filter(|d| *d > 0.0);
    let lo = positive.clone().fold(f64::INFINITY, f64::min);
    let hi = positive.fold(0.0, f64::max);
    let (lo, hi) = if hi > 0.0 {
        (lo / 2.0, hi * 2.0)
    } else {
        (0.1, 10.0)
    };
    let mut chart = ChartBuilder::on(area)
        .caption(title, (FAMILY, 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..top, (lo..hi).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("doublet score")
        .y_desc("probability density")
        .x_labels(6)
        .y_labels(5)
        .x_label_formatter(&|v| legend::format_tick(*v, top))
        .y_label_formatter(&|v| format!("{v:.0e}"))
        .label_style((FAMILY, 13))
        .axis_desc_style((FAMILY, 14))
        .bold_line_style(RGBColor(225, 225, 225))
        .light_line_style(TRANSPARENT)
        .draw()?;
    let width = top / BINS as f64;
    chart.draw_series(
        density
            .iter()
            .enumerate()
            .filter(|(_, &d)| d > 0.0)
            .map(|(b, &d)| {
                Rectangle::new(
                    [(b as f64 * width, lo), ((b + 1) as f64 * width, d)],
                    RGBColor(128, 128, 128).filled(),
                )
            }),
    )?;
    if let Some(t) = threshold {
        let dashes = 24;
        chart.draw_series((0..dashes).step_by(2).map(|i| {
            let f = |k: usize| lo * (hi / lo).powf(k as f64 / dashes as f64);
            PathElement::new(vec![(t, f(i)), (t, f(i + 1))], BLACK.stroke_width(2))
        }))?;
    }
    Ok(())
}
