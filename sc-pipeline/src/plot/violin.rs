//! The QC violins (scanpy's `pl.violin` of the QC metrics): total counts, genes by counts and
//! percent mitochondrial, one panel each, the cells before `filter_cells` beside those after.
//! Each violin is a Gaussian kernel density with Scott's bandwidth (seaborn's default), cut at
//! the data's range (scanpy's `pl.violin(cut=0)`: no density below zero counts), all violins of
//! a panel on one width scale (seaborn's "area"); inside, the quartiles as a box and the median
//! as a white dot.

use super::data::{numbers, Missing};
use super::figure::{DrawError, Figure};
use super::font::FAMILY;
use super::legend;
use super::palette;
use crate::AnnData;
use plotters::coord::Shift;
use plotters::prelude::*;

/// The per-cell QC columns shown (`calculate_qc_metrics` with the `mt` variable) and their
/// panels' titles.
pub const QC_COLUMNS: [(&str, &str); 3] = [
    ("total_counts", "total counts"),
    ("n_genes_by_counts", "genes by counts"),
    ("pct_counts_mt", "percent mitochondrial"),
];

/// One violin: its cells' density on a grid of values, and their quartiles.
pub struct Violin {
    pub label: String,
    pub n: usize,
    pub grid: Vec<f64>,
    pub density: Vec<f64>,
    pub quartiles: Option<[f64; 3]>,
}

impl Violin {
    pub fn of(label: &str, values: &[f64]) -> Violin {
        let mut finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        let (grid, density) = kde(&finite);
        Violin {
            label: label.to_string(),
            n: finite.len(),
            grid,
            density,
            quartiles: quartiles(&mut finite),
        }
    }
}

/// The three panels.
pub struct QcViolins {
    pub panels: Vec<(String, Vec<Violin>)>,
}

/// The QC violins of `adata` and a note when the cells before filtering are not shown
/// (`filtered`: filter_cells ran), or why there are none.
pub fn prepare(adata: &AnnData, filtered: bool) -> Result<(QcViolins, Option<String>), Missing> {
    let before = match (&adata.obs_before_filter, filtered) {
        (Some(table), true) => Some(table),
        _ => None,
    };
    let note = match (before, filtered) {
        (Some(_), _) => None,
        (None, true) => Some(
            "only the cells after filtering: the values before filter_cells were not kept \
             (a launched run's other ranks hand over only their kept cells)"
                .to_string(),
        ),
        (None, false) => Some("no filter_cells: every cell in one violin".to_string()),
    };
    let mut panels = Vec::new();
    for (key, title) in QC_COLUMNS {
        let after = numbers(&adata.obs, key, "obs")
            .map_err(|e| format!("{e} (the QC metrics did not run: --no-qc)"))?;
        let violins = match before {
            Some(table) => vec![
                Violin::of(
                    "before filtering",
                    &numbers(table, key, "obs before filtering")?,
                ),
                Violin::of("after filtering", &after),
            ],
            None if filtered => vec![Violin::of("after filtering", &after)],
            None => vec![Violin::of("all cells", &after)],
        };
        let title = if key == "pct_counts_mt" && no_mito_genes(adata) {
            format!("{title}: 0, no gene is flagged mt (give --mito-prefix)")
        } else {
            title.to_string()
        };
        panels.push((title, violins));
    }
    Ok((QcViolins { panels }, note))
}

/// Whether `var['mt']` flags no gene (the mitochondrial panel is then all zeros).
fn no_mito_genes(adata: &AnnData) -> bool {
    use crate::anndata::{ArrayData, Column};
    matches!(adata.var.column("mt"), Some(Column::Values(ArrayData::Bool(f))) if !f.contains(&true))
}

/// Scott's bandwidth for `values`: their standard deviation (ddof 1) times n^(-1/5).
pub fn scott_bandwidth(values: &[f64]) -> f64 {
    let n = values.len() as f64;
    if n < 2.0 {
        return 0.0;
    }
    let mean = values.iter().sum::<f64>() / n;
    let var = values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / (n - 1.0);
    var.sqrt() * n.powf(-0.2)
}

/// Points of the density grid, and bins the values are counted into first (a million values
/// then cost one pass, and the grid sums bins instead of values).
const GRID: usize = 200;
const BINS: usize = 1024;

/// The Gaussian kernel density of `values` on a grid from the smallest to the largest (scanpy's
/// `cut=0`); values all equal (no bandwidth) give that value with density 1.
pub fn kde(values: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let Some((lo, hi)) = range(values) else {
        return (Vec::new(), Vec::new());
    };
    let bw = scott_bandwidth(values);
    if bw.is_nan() || bw <= 0.0 || hi == lo {
        return (vec![lo, hi], vec![1.0, 1.0]);
    }
    let width = (hi - lo) / BINS as f64;
    let mut counts = vec![0u64; BINS];
    for v in values {
        counts[(((v - lo) / width) as usize).min(BINS - 1)] += 1;
    }
    let centres: Vec<(f64, f64)> = counts
        .iter()
        .enumerate()
        .filter(|(_, &c)| c > 0)
        .map(|(b, &c)| (lo + (b as f64 + 0.5) * width, c as f64))
        .collect();
    let (start, end) = (lo, hi);
    let norm = 1.0 / (values.len() as f64 * bw * (2.0 * std::f64::consts::PI).sqrt());
    let grid: Vec<f64> = (0..GRID)
        .map(|i| start + (end - start) * i as f64 / (GRID - 1) as f64)
        .collect();
    let density = grid
        .iter()
        .map(|&y| {
            let sum: f64 = centres
                .iter()
                .map(|&(c, n)| {
                    let z = (y - c) / bw;
                    n * (-0.5 * z * z).exp()
                })
                .sum();
            sum * norm
        })
        .collect();
    (grid, density)
}

fn range(values: &[f64]) -> Option<(f64, f64)> {
    let (lo, hi) = values
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &v| {
            (a.min(v), b.max(v))
        });
    (lo <= hi).then_some((lo, hi))
}

/// The 25th, 50th and 75th percentiles (the nearest ranks; `values` is reordered).
fn quartiles(values: &mut [f64]) -> Option<[f64; 3]> {
    if values.is_empty() {
        return None;
    }
    let last = values.len() - 1;
    let mut at = |q: f64| {
        let k = (q * last as f64).round() as usize;
        *values.select_nth_unstable_by(k, |a, b| a.total_cmp(b)).1
    };
    Some([at(0.25), at(0.5), at(0.75)])
}

const SIZE: (u32, u32) = (1200, 500);

impl Figure for QcViolins {
    fn size(&self) -> (u32, u32) {
        SIZE
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), DrawError<DB>> {
        let areas = root.split_evenly((1, self.panels.len().max(1)));
        for ((title, violins), area) in self.panels.iter().zip(&areas) {
            draw_panel(root, area, title, violins)?;
        }
        Ok(())
    }
}

/// Half the width of a violin's slot its widest point takes.
const HALF_WIDTH: f64 = 0.4;

fn draw_panel<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    area: &DrawingArea<DB, Shift>,
    title: &str,
    violins: &[Violin],
) -> Result<(), DrawError<DB>> {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in violins {
        for &g in &v.grid {
            (lo, hi) = (lo.min(g), hi.max(g));
        }
    }
    if lo >= hi {
        (lo, hi) = if lo.is_finite() {
            (lo - 1.0, lo + 1.0)
        } else {
            (0.0, 1.0)
        };
    }
    let pad = (hi - lo) * 0.03;
    let k = violins.len().max(1) as f64;
    let span = hi - lo;
    let mut chart = ChartBuilder::on(area)
        .caption(title, (FAMILY, 20))
        .margin(14)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..k, (lo - pad)..(hi + pad))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_labels(6)
        .y_label_formatter(&|v| legend::format_tick(*v, span))
        .label_style((FAMILY, 13))
        .bold_line_style(RGBColor(225, 225, 225))
        .light_line_style(TRANSPARENT)
        .draw()?;
    let widest = violins
        .iter()
        .flat_map(|v| v.density.iter().copied())
        .fold(0.0, f64::max)
        .max(f64::MIN_POSITIVE);
    for (i, v) in violins.iter().enumerate() {
        let centre = i as f64 + 0.5;
        let colour = palette::category(i);
        let half = |d: f64| HALF_WIDTH * d / widest;
        let outline: Vec<(f64, f64)> = v
            .grid
            .iter()
            .zip(&v.density)
            .map(|(&y, &d)| (centre - half(d), y))
            .chain(
                v.grid
                    .iter()
                    .zip(&v.density)
                    .rev()
                    .map(|(&y, &d)| (centre + half(d), y)),
            )
            .collect();
        if !outline.is_empty() {
            chart.draw_series(std::iter::once(Polygon::new(
                outline.clone(),
                colour.mix(0.75).filled(),
            )))?;
            let mut closed = outline;
            closed.push(closed[0]);
            chart.draw_series(std::iter::once(PathElement::new(closed, BLACK)))?;
        }
        if let Some([q1, q2, q3]) = v.quartiles {
            chart.draw_series(std::iter::once(Rectangle::new(
                [(centre - 0.025, q1), (centre + 0.025, q3)],
                RGBColor(50, 50, 50).filled(),
            )))?;
            chart.draw_series(std::iter::once(Circle::new(
                (centre, q2),
                4,
                WHITE.filled(),
            )))?;
        }
        // The violin's name and size under it, on the whole picture (outside the chart).
        let (x, y) = chart.backend_coord(&(centre, lo - pad));
        root.draw(&Text::new(
            v.label.clone(),
            (x, y + 14),
            legend::centred_text(14),
        ))?;
        root.draw(&Text::new(
            format!("{} cells", v.n),
            (x, y + 32),
            legend::centred_text(12),
        ))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_density_lies_within_the_data_and_holds_nearly_all_its_mass() {
        let values: Vec<f64> = (0..10_000)
            .map(|i| ((i % 100) as f64 - 50.0) / 10.0)
            .collect();
        let (grid, density) = kde(&values);
        assert_eq!((grid[0], grid[GRID - 1]), (-5.0, 4.9));
        let step = grid[1] - grid[0];
        let area: f64 = density.iter().sum::<f64>() * step;
        assert!(area > 0.9 && area < 1.0, "{area}");
        // Counts (never negative): the violin starts at the smallest count, not below zero.
        let counts: Vec<f64> = (0..1000).map(|i| (i % 7) as f64 * 100.0).collect();
        let (grid, density) = kde(&counts);
        assert_eq!(grid[0], 0.0);
        assert!(density.iter().all(|d| *d >= 0.0));
        assert_eq!(kde(&[2.0, 2.0]).0, [2.0, 2.0]);
        assert!(kde(&[]).0.is_empty());
        assert_eq!(
            quartiles(&mut [4.0, 1.0, 3.0, 2.0, 5.0]),
            Some([2.0, 3.0, 4.0])
        );
    }
}
