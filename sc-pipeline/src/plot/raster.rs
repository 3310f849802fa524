//! The scatter of an embedding, rasterised: each cell splatted as a small disc into an RGB
//! buffer the size of the chart's plotting area, which the chart then shows as one image (in
//! the SVG too, as an embedded PNG). A million cells draw in milliseconds, and the SVG stays
//! small, where a million vector circles would not.

use plotters::style::RGBColor;

/// The data range a plotting area shows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bounds {
    pub x: (f64, f64),
    pub y: (f64, f64),
}

impl Bounds {
    /// The finite points' range with a margin of `pad` of its extent on each side (a point
    /// range of zero extent gets one unit).
    pub fn around(points: &[[f32; 2]], pad: f64) -> Bounds {
        let mut x = (f64::INFINITY, f64::NEG_INFINITY);
        let mut y = x;
        for p in points
            .iter()
            .filter(|p| p[0].is_finite() && p[1].is_finite())
        {
            x = (x.0.min(p[0] as f64), x.1.max(p[0] as f64));
            y = (y.0.min(p[1] as f64), y.1.max(p[1] as f64));
        }
        let widen = |(lo, hi): (f64, f64)| {
            if lo > hi {
                return (0.0, 1.0);
            }
            let d = if hi > lo { (hi - lo) * pad } else { 0.5 };
            (lo - d, hi + d)
        };
        Bounds {
            x: widen(x),
            y: widen(y),
        }
    }

    /// The frame of a scatter that a few far-flung points cannot shrink to a corner: the
    /// 0.5th to 99.5th percentiles of each coordinate, widened by a quarter of their extent on
    /// each side, and no wider than [`Bounds::around`] all points (so a layout without
    /// outliers keeps every point in the frame). [`Raster::splat`] draws points outside on the
    /// frame's edge.
    pub fn robust(points: &[[f32; 2]], pad: f64) -> Bounds {
        let all = Bounds::around(points, pad);
        let finite: Vec<&[f32; 2]> = points
            .iter()
            .filter(|p| p[0].is_finite() && p[1].is_finite())
            .collect();
        if finite.len() < 2 {
            return all;
        }
        let axis = |k: usize, (lo_all, hi_all): (f64, f64)| {
            let mut v: Vec<f64> = finite.iter().map(|p| p[k] as f64).collect();
            let lo = quantile(&mut v, ROBUST_QUANTILE);
            let hi = quantile(&mut v, 1.0 - ROBUST_QUANTILE);
            let reach = (hi - lo).max(f64::MIN_POSITIVE) * ROBUST_WIDEN;
            ((lo - reach).max(lo_all), (hi + reach).min(hi_all))
        };
        Bounds {
            x: axis(0, all.x),
            y: axis(1, all.y),
        }
    }

    /// Whether the finite point `p` lies outside the frame.
    pub fn excludes(&self, p: [f32; 2]) -> bool {
        let (x, y) = (p[0] as f64, p[1] as f64);
        p[0].is_finite()
            && p[1].is_finite()
            && (x < self.x.0 || x > self.x.1 || y < self.y.0 || y > self.y.1)
    }

    /// The pixel of `(x, y)` in an area of `size` pixels (y grows downwards); `None` outside.
    pub fn pixel(&self, (x, y): (f64, f64), (w, h): (u32, u32)) -> Option<(f64, f64)> {
        let (fx, fy) = self.fractions((x, y));
        ((0.0..=1.0).contains(&fx) && (0.0..=1.0).contains(&fy))
            .then(|| (fx * (w - 1) as f64, fy * (h - 1) as f64))
    }

    /// [`Bounds::pixel`], a finite point outside the frame moved onto its edge; `None` for a
    /// point that is not finite.
    pub fn pixel_or_edge(&self, (x, y): (f64, f64), (w, h): (u32, u32)) -> Option<(f64, f64)> {
        let (fx, fy) = self.fractions((x, y));
        (fx.is_finite() && fy.is_finite()).then(|| {
            let (fx, fy) = (fx.clamp(0.0, 1.0), fy.clamp(0.0, 1.0));
            (fx * (w - 1) as f64, fy * (h - 1) as f64)
        })
    }

    /// Where `(x, y)` lies across the frame, 0 to 1 from the left and from the top.
    fn fractions(&self, (x, y): (f64, f64)) -> (f64, f64) {
        (
            (x - self.x.0) / (self.x.1 - self.x.0),
            (self.y.1 - y) / (self.y.1 - self.y.0),
        )
    }
}

/// The share of points each side of [`Bounds::robust`]'s percentiles, and how far beyond them
/// the frame reaches (in their extent).
const ROBUST_QUANTILE: f64 = 0.005;
const ROBUST_WIDEN: f64 = 0.25;

/// The `q` quantile of `v` by the nearest rank (`v` is reordered).
fn quantile(v: &mut [f64], q: f64) -> f64 {
    let k = ((v.len() - 1) as f64 * q).round() as usize;
    *v.select_nth_unstable_by(k, |a, b| a.total_cmp(b)).1
}

/// A disc's diameter in pixels for `n` cells: scanpy's marker area of 120,000 / n points²,
/// at about 2 pixels a point, from one pixel (a million cells) to 10.
pub fn dot_diameter(n: usize) -> f64 {
    ((120_000.0 / n.max(1) as f64).sqrt() * 2.0).clamp(1.0, 10.0)
}

/// The order scanpy-style pictures draw categorical cells in: shuffled by a fixed hash of the
/// cell's index, so that no category is drawn last everywhere and hides the others, and the
/// same data always gives the same picture.
pub fn shuffled_order(n: usize) -> Vec<u32> {
    let mut order: Vec<u32> = (0..n as u32).collect();
    order.sort_unstable_by_key(|&i| splitmix64(i as u64));
    order
}

/// Cells by increasing value (those without a finite value first), so the highest values are
/// drawn on top (scanpy's `sort_order` for a continuous colour).
pub fn ascending_order(values: &[f64]) -> Vec<u32> {
    let mut order: Vec<u32> = (0..values.len() as u32).collect();
    let key = |i: &u32| {
        let v = values[*i as usize];
        if v.is_finite() {
            v
        } else {
            f64::NEG_INFINITY
        }
    };
    order.sort_by(|a, b| key(a).total_cmp(&key(b)));
    order
}

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// An RGB image, row by row (the pixel format plotters' bitmap element takes).
pub struct Raster {
    pub size: (u32, u32),
    pub rgb: Vec<u8>,
}

impl Raster {
    /// Draws `points` in `order` as discs of `diameter` pixels, coloured by `color(cell)`, on
    /// white, `bounds` mapped onto `size` pixels. Points outside `bounds` are drawn on its
    /// edge; points that are not finite are left out.
    pub fn splat(
        points: &[[f32; 2]],
        order: &[u32],
        color: impl Fn(usize) -> RGBColor,
        bounds: &Bounds,
        size: (u32, u32),
        diameter: f64,
    ) -> Raster {
        let (w, h) = (size.0.max(1), size.1.max(1));
        let mut rgb = vec![255u8; w as usize * h as usize * 3];
        let disc = disc_offsets(diameter);
        for &cell in order {
            let p = points[cell as usize];
            let Some((px, py)) = bounds.pixel_or_edge((p[0] as f64, p[1] as f64), (w, h)) else {
                continue;
            };
            let RGBColor(r, g, b) = color(cell as usize);
            let (cx, cy) = (px.round() as i64, py.round() as i64);
            for &(dx, dy) in &disc {
                let (x, y) = (cx + dx as i64, cy + dy as i64);
                if x < 0 || y < 0 || x >= w as i64 || y >= h as i64 {
                    continue;
                }
                let at = (y as usize * w as usize + x as usize) * 3;
                rgb[at..at + 3].copy_from_slice(&[r, g, b]);
            }
        }
        Raster { size: (w, h), rgb }
    }
}

/// The pixels of a disc of `diameter` around its centre.
fn disc_offsets(diameter: f64) -> Vec<(i32, i32)> {
    let r = diameter / 2.0;
    let reach = r.ceil() as i32;
    let mut out = Vec::new();
    for dy in -reach..=reach {
        for dx in -reach..=reach {
            let d2 = (dx * dx + dy * dy) as f64;
            if d2 <= r * r || (dx == 0 && dy == 0) {
                out.push((dx, dy));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_point_lands_on_its_pixel_in_its_colour() {
        let points = [[0.0f32, 0.0], [1.0, 1.0], [f32::NAN, 0.5]];
        let b = Bounds {
            x: (0.0, 1.0),
            y: (0.0, 1.0),
        };
        let red = RGBColor(255, 0, 0);
        let r = Raster::splat(&points, &[0, 1, 2], |_| red, &b, (11, 11), 1.0);
        let px = |x: usize, y: usize| &r.rgb[(y * 11 + x) * 3..(y * 11 + x) * 3 + 3];
        // (0, 0) is the bottom left, (1, 1) the top right.
        assert_eq!(px(0, 10), [255, 0, 0]);
        assert_eq!(px(10, 0), [255, 0, 0]);
        assert_eq!(px(5, 5), [255, 255, 255]);
        let coloured = r.rgb.chunks(3).filter(|c| c != &[255, 255, 255]).count();
        assert_eq!(coloured, 2, "one pixel each; the NaN point is left out");
    }

    #[test]
    fn orders_are_fixed_and_complete() {
        let a = shuffled_order(1000);
        assert_eq!(a, shuffled_order(1000));
        let mut sorted = a.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..1000).collect::<Vec<u32>>());
        assert_ne!(a[..10], sorted[..10]);
        assert_eq!(ascending_order(&[3.0, f64::NAN, 1.0]), [1, 2, 0]);
        assert_eq!(disc_offsets(1.0).len(), 1);
        assert!(disc_offsets(5.0).len() > 9);
        assert_eq!(dot_diameter(1_000_000), 1.0);
        assert_eq!(dot_diameter(10), 10.0);
        let b = Bounds::around(&[[0.0, 0.0], [10.0, 20.0]], 0.05);
        assert_eq!(b.x, (-0.5, 10.5));
        assert_eq!(b.y, (-1.0, 21.0));
    }

    #[test]
    fn robust_bounds_keep_a_clean_layout_whole_and_frame_the_bulk_past_outliers() {
        // A 100 x 100 grid of cells in [0, 10]: every point stays in the frame.
        let grid: Vec<[f32; 2]> = (0..10_000)
            .map(|i| [(i % 100) as f32 / 9.9, (i / 100) as f32 / 9.9])
            .collect();
        assert_eq!(Bounds::robust(&grid, 0.03), Bounds::around(&grid, 0.03));
        // Six cells 80 to 300 units out: the frame stays near the bulk, they are drawn at its
        // edge and counted.
        let mut far = grid.clone();
        for (k, d) in [80.0f32, 120.0, 150.0, 200.0, 250.0, 300.0]
            .iter()
            .enumerate()
        {
            far[k] = if k % 2 == 0 { [*d, 5.0] } else { [5.0, -*d] };
        }
        let b = Bounds::robust(&far, 0.03);
        assert!(b.x.1 < 16.0 && b.y.0 > -6.0, "{b:?}");
        assert_eq!(far.iter().filter(|p| b.excludes(**p)).count(), 6);
        // Drawn on the edge.
        for p in far.iter().take(6) {
            let at = b.pixel_or_edge((p[0] as f64, p[1] as f64), (100, 100));
            assert!(at.is_some(), "{p:?}");
        }
        assert_eq!(b.pixel_or_edge((300.0, 5.0), (100, 100)).unwrap().0, 99.0);
        assert_eq!(b.pixel_or_edge((f64::NAN, 5.0), (100, 100)), None);
        let red = RGBColor(255, 0, 0);
        let r = Raster::splat(&far[..1], &[0], |_| red, &b, (100, 100), 1.0);
        let coloured = r.rgb.chunks(3).filter(|c| c != &[255, 255, 255]).count();
        assert_eq!(coloured, 1, "the far cell is drawn on the edge");
    }
}
