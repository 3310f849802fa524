//! Colours: scanpy's categorical palette and matplotlib's continuous colour maps.

use plotters::style::RGBColor;

/// scanpy's `default_20` (`vega_20_scanpy`), the palette of up to 20 categories; more categories
/// get [`categories`]' generated palette (scanpy too switches to larger palettes past 20).
const DEFAULT_20: [u32; 20] = [
    0x1f77b4, 0xff7f0e, 0x279e68, 0xd62728, 0xaa40fc, 0x8c564b, 0xe377c2, 0xb5bd61, 0x17becf,
    0xaec7e8, 0xffbb78, 0x98df8a, 0xff9896, 0xc5b0d5, 0xc49c94, 0xf7b6d2, 0xdbdb8d, 0x9edae5,
    0xad494a, 0x8c6d31,
];

fn rgb(hex: u32) -> RGBColor {
    RGBColor((hex >> 16) as u8, (hex >> 8) as u8, hex as u8)
}

/// The colour of category `i` of at most 20 (cycling past them: see [`categories`]).
pub fn category(i: usize) -> RGBColor {
    rgb(DEFAULT_20[i % DEFAULT_20.len()])
}

/// The colours of `n` categories, all distinct: scanpy's 20 up to 20, else `n` colours spread
/// over the hue circle by the golden angle (neighbouring categories far apart in hue) at three
/// lightness and two saturation levels in turn, so that no two are alike.
pub fn categories(n: usize) -> Vec<RGBColor> {
    if n <= DEFAULT_20.len() {
        return (0..n).map(category).collect();
    }
    const GOLDEN_ANGLE: f64 = 137.507_764_050_037_85;
    (0..n)
        .map(|i| {
            let hue = (i as f64 * GOLDEN_ANGLE) % 360.0;
            let lightness = [0.45, 0.62, 0.32][i % 3];
            let saturation = [0.85, 0.6][(i / 3) % 2];
            hsl(hue, saturation, lightness)
        })
        .collect()
}

/// An HSL colour (hue in degrees, saturation and lightness in [0, 1]) as RGB.
fn hsl(h: f64, s: f64, l: f64) -> RGBColor {
    let c = (1.0 - (2.0 * l - 1.0).abs()) * s;
    let hp = h / 60.0;
    let x = c * (1.0 - (hp % 2.0 - 1.0).abs());
    let (r, g, b) = match hp as u32 {
        0 => (c, x, 0.0),
        1 => (x, c, 0.0),
        2 => (0.0, c, x),
        3 => (0.0, x, c),
        4 => (x, 0.0, c),
        _ => (c, 0.0, x),
    };
    let m = l - c / 2.0;
    let to = |v: f64| ((v + m) * 255.0).round().clamp(0.0, 255.0) as u8;
    RGBColor(to(r), to(g), to(b))
}

/// A continuous colour map: evenly spaced stops, linearly interpolated.
pub struct ColorMap(&'static [u32]);

/// matplotlib's viridis (9 of its stops): the total counts on the UMAP.
pub const VIRIDIS: ColorMap = ColorMap(&[
    0x440154, 0x472c7a, 0x3b518b, 0x2c718e, 0x21908d, 0x27ad81, 0x5cc863, 0xaadc32, 0xfde725,
]);

/// matplotlib's Reds: the dot plot's mean expression (scanpy's default there).
pub const REDS: ColorMap = ColorMap(&[
    0xfff5f0, 0xfee0d2, 0xfcbba1, 0xfc9272, 0xfb6a4a, 0xef3b2c, 0xcb181d, 0xa50f15, 0x67000d,
]);

impl ColorMap {
    /// The colour at `t` in [0, 1] (clamped; NaN takes the low end).
    pub fn at(&self, t: f64) -> RGBColor {
        let t = if t.is_nan() { 0.0 } else { t.clamp(0.0, 1.0) };
        let last = self.0.len() - 1;
        let pos = t * last as f64;
        let i = (pos.floor() as usize).min(last - 1);
        let f = pos - i as f64;
        let (a, b) = (rgb(self.0[i]), rgb(self.0[i + 1]));
        let mix = |x: u8, y: u8| (x as f64 + (y as f64 - x as f64) * f).round() as u8;
        RGBColor(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn categories_cycle_and_maps_interpolate() {
        assert_eq!(category(0), RGBColor(0x1f, 0x77, 0xb4));
        assert_eq!(category(20), category(0));
        assert_eq!(categories(12), (0..12).map(category).collect::<Vec<_>>());
        for n in [21, 40, 102] {
            let c = categories(n);
            let mut distinct = c.clone();
            distinct.sort_by_key(|c| (c.0, c.1, c.2));
            distinct.dedup();
            assert_eq!(
                distinct.len(),
                n,
                "{n} categories, {} colours",
                distinct.len()
            );
        }
        assert_eq!(VIRIDIS.at(0.0), RGBColor(0x44, 0x01, 0x54));
        assert_eq!(VIRIDIS.at(1.0), RGBColor(0xfd, 0xe7, 0x25));
        assert_eq!(VIRIDIS.at(f64::NAN), VIRIDIS.at(0.0));
        let mid = REDS.at(0.5);
        assert_eq!(mid, RGBColor(0xfb, 0x6a, 0x4a));
    }
}
