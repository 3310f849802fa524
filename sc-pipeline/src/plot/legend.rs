//! Legends drawn beside a chart, in pixels: a category list (colour dot and name) and a colour
//! bar with its ticks.

use super::figure::DrawError;
use super::font::FAMILY;
use super::palette::ColorMap;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// Text of `size` pixels, anchored at its left middle.
pub fn left_text(size: u32) -> TextStyle<'static> {
    TextStyle::from((FAMILY, size).into_font()).pos(Pos::new(HPos::Left, VPos::Center))
}

/// Text of `size` pixels, anchored at its centre.
pub fn centred_text(size: u32) -> TextStyle<'static> {
    TextStyle::from((FAMILY, size).into_font()).pos(Pos::new(HPos::Center, VPos::Center))
}

/// The category `names` with their colours, under `title`, from `(x, y)` down; a second and
/// further columns start when a column would pass `bottom`.
pub fn categories<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    (x, y): (i32, i32),
    bottom: i32,
    title: &str,
    names: &[String],
    color: impl Fn(usize) -> RGBColor,
) -> Result<(), DrawError<DB>> {
    const ROW: i32 = 20;
    area.draw(&Text::new(title.to_string(), (x, y), left_text(16)))?;
    let per_column = ((bottom - y - ROW) / ROW).max(1) as usize;
    let widest = names.iter().map(|n| n.chars().count()).max().unwrap_or(1) as i32;
    let column_width = 30 + widest * 8;
    for (i, name) in names.iter().enumerate() {
        let cx = x + 6 + (i / per_column) as i32 * column_width;
        let cy = y + ROW + (i % per_column) as i32 * ROW;
        area.draw(&Circle::new((cx, cy), 6, color(i).filled()))?;
        area.draw(&Text::new(name.clone(), (cx + 12, cy), left_text(14)))?;
    }
    Ok(())
}

/// A vertical colour bar of `map` for values `lo..hi`, `title` above it, ticks on its right;
/// `top` and `bottom` bound the bar.
pub fn color_bar<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    (x, top, bottom): (i32, i32, i32),
    title: &str,
    (lo, hi): (f64, f64),
    map: &ColorMap,
) -> Result<(), DrawError<DB>> {
    const WIDTH: i32 = 18;
    area.draw(&Text::new(title.to_string(), (x, top - 16), left_text(14)))?;
    let height = (bottom - top).max(1);
    for row in 0..height {
        let t = 1.0 - row as f64 / (height - 1).max(1) as f64;
        let c = map.at(t);
        area.draw(&Rectangle::new(
            [(x, top + row), (x + WIDTH, top + row + 1)],
            c.filled(),
        ))?;
    }
    area.draw(&Rectangle::new([(x, top), (x + WIDTH, bottom)], BLACK))?;
    let span = if hi > lo { hi - lo } else { 1.0 };
    for v in nice_ticks(lo, hi, 5) {
        let y = bottom - ((v - lo) / span * height as f64).round() as i32;
        area.draw(&PathElement::new(
            vec![(x + WIDTH, y), (x + WIDTH + 4, y)],
            BLACK,
        ))?;
        area.draw(&Text::new(
            format_tick(v, hi - lo),
            (x + WIDTH + 7, y),
            left_text(13),
        ))?;
    }
    Ok(())
}

/// About `n` round values (1, 2 or 5 times a power of ten apart) within `lo..=hi`.
pub fn nice_ticks(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    if hi <= lo || !lo.is_finite() || !hi.is_finite() {
        return if lo.is_finite() { vec![lo] } else { Vec::new() };
    }
    let raw = (hi - lo) / n.max(1) as f64;
    let power = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * power);
    let first = (lo / step).ceil() as i64;
    let last = (hi / step).floor() as i64;
    (first..=last).map(|k| k as f64 * step).collect()
}

/// A tick's label: as many decimals as the range needs.
pub fn format_tick(v: f64, range: f64) -> String {
    if range >= 10.0 {
        format!("{v:.0}")
    } else if range >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_inside() {
        assert_eq!(nice_ticks(0.0, 10.0, 5), [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(nice_ticks(3.0, 47.0, 4), [20.0, 40.0]);
        assert_eq!(nice_ticks(0.5, 3.2, 5), [1.0, 2.0, 3.0]);
        assert_eq!(nice_ticks(1.0, 1.0, 5), [1.0]);
        assert_eq!(format_tick(2000.0, 5000.0), "2000");
        assert_eq!(format_tick(0.25, 0.5), "0.25");
    }
}
