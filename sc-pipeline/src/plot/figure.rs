//! A picture drawn once per format: PNG (plotters' bitmap backend, encoded by the `image`
//! crate) and SVG, each written under a temporary name (see [`StagedFile`]) that the run moves
//! into place with its other outputs.

use crate::io::StagedFile;
use crate::{Error, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

/// The error of a drawing on backend `DB`.
pub type DrawError<DB> = DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>;

/// A picture that draws itself on any backend.
pub trait Figure {
    /// Width and height in pixels.
    fn size(&self) -> (u32, u32);
    /// Draws on `root` (white already).
    fn draw<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
    ) -> std::result::Result<(), DrawError<DB>>;
}

/// Writes `figure` as `dir/NAME.png` and `dir/NAME.svg` (staged: nothing appears under the
/// final names until the run commits them).
pub fn write(figure: &impl Figure, dir: &Path, name: &str) -> Result<Vec<StagedFile>> {
    let failed = |path: &Path, e: &dyn std::fmt::Display| Error::File {
        path: path.to_path_buf(),
        message: format!("drawing the picture: {e}"),
    };
    let png_path = dir.join(format!("{name}.png"));
    let png = StagedFile::new(&png_path);
    let rgb = render_rgb(figure).map_err(|e| failed(&png_path, &e))?;
    encode_png(&rgb, figure.size(), png.path()).map_err(|e| failed(&png_path, &e))?;
    let svg_path = dir.join(format!("{name}.svg"));
    let svg = StagedFile::new(&svg_path);
    let text = render_svg(figure).map_err(|e| failed(&svg_path, &e))?;
    std::fs::write(svg.path(), text).map_err(|e| failed(&svg_path, &e))?;
    Ok(vec![png, svg])
}

/// The figure's pixels, RGB row by row.
pub fn render_rgb(figure: &impl Figure) -> std::result::Result<Vec<u8>, String> {
    super::font::register();
    let (w, h) = figure.size();
    let mut rgb = vec![255u8; w as usize * h as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        figure.draw(&root).map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(rgb)
}

/// The figure as SVG text.
pub fn render_svg(figure: &impl Figure) -> std::result::Result<String, String> {
    super::font::register();
    let mut text = String::new();
    {
        let root = SVGBackend::with_string(&mut text, figure.size()).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        figure.draw(&root).map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(text)
}

fn encode_png(rgb: &[u8], (w, h): (u32, u32), path: &Path) -> std::result::Result<(), String> {
    use image::ImageEncoder;
    let file = std::fs::File::create(path).map_err(|e| e.to_string())?;
    let mut out = std::io::BufWriter::new(file);
    image::codecs::png::PngEncoder::new(&mut out)
        .write_image(rgb, w, h, image::ColorType::Rgb8)
        .map_err(|e| e.to_string())?;
    std::io::Write::flush(&mut out).map_err(|e| e.to_string())
}
