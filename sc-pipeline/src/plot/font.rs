//! The pictures' font: DejaVu Sans, shipped in `sc-pipeline/assets/` (its licence beside it),
//! so text draws the same on a fresh machine with no system fonts (plotters' `ab_glyph`).

use plotters::style::{register_font, FontStyle};

static DEJAVU_SANS: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");

/// The family every picture names.
pub const FAMILY: &str = "sans-serif";

/// Registers the font under [`FAMILY`] (once per process; every style falls back to it).
pub fn register() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if register_font(FAMILY, FontStyle::Normal, DEJAVU_SANS).is_err() {
            panic!("the bundled DejaVu Sans font does not parse");
        }
    });
}
