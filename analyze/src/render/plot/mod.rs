//! Charts, the picture beside the tables: the embedded font, a palette, two chart kinds (a filled
//! timeline with shaded bands and a marked point, and stacked bars with a legend), chart file
//! names ([`file_stem`]) and atomic PNG/SVG output.
//!
//! Charts are plain data ([`TimelineChart`], [`StackedBars`]) drawn by plotters on either backend
//! through the [`Chart`] trait, so the same code makes the PNG and the SVG. Text uses DejaVu Sans,
//! embedded in the binary (`assets/DejaVuSans.ttf`, Bitstream Vera license, see
//! `assets/DejaVuSans-LICENSE.txt`), so output does not depend on the fonts of the machine.
//! Files are written to a temporary name in the target folder and renamed into place.
//!
//! The two chart kinds live in [`timeline`] and [`bars`]; this module holds what they share. It
//! knows nothing about memory or kernels: callers build the chart data.

pub mod bars;
pub mod timeline;

use std::path::Path;
use std::sync::Once;

use plotters::chart::MeshStyle;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::error::{Error, Result};

pub use self::bars::{Bar, StackedBars};
pub use self::timeline::{
    decimate_minmax, lighten, Band, Decimator, HLine, Marker, Series, TimelineChart,
};

/// The font family every chart uses; registered by [`register_fonts`].
pub const FONT: &str = "sans-serif";

static DEJAVU_SANS: &[u8] = include_bytes!("../../../assets/DejaVuSans.ttf");

/// Register the embedded font with plotters (once per process).
pub fn register_fonts() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The font is a file of this crate; failing to parse it is a build defect.
        if plotters::style::register_font(FONT, FontStyle::Normal, DEJAVU_SANS).is_err() {
            panic!("the embedded DejaVu Sans font could not be parsed");
        }
    });
}

/// Output image formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageFormat {
    Png,
    Svg,
}

impl ImageFormat {
    pub fn extension(self) -> &'static str {
        match self {
            ImageFormat::Png => "png",
            ImageFormat::Svg => "svg",
        }
    }
}

/// Tableau 10, the palette of `memory_viz` and matplotlib.
pub const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// What every chart has around its plot: a title, perhaps a subtitle, and its size in pixels.
#[derive(Clone, Debug)]
pub struct Frame {
    pub title: String,
    pub subtitle: Option<String>,
    pub width: u32,
    pub height: u32,
}

/// A drawing area of any backend.
pub type Area<DB> = DrawingArea<DB, Shift>;

/// Something that can draw itself on any plotters backend: its frame, then its body.
pub trait Chart {
    fn frame(&self) -> &Frame;
    /// Draw the chart in `body`, the area under the title, `width` pixels wide.
    fn draw_body<DB: DrawingBackend>(&self, body: &Area<DB>, width: u32) -> Result<(), String>;

    /// Width and height in pixels.
    fn size(&self) -> (u32, u32) {
        (self.frame().width, self.frame().height)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        let frame = self.frame();
        let body = draw_header(root, &frame.title, frame.subtitle.as_deref())?;
        self.draw_body(&body, frame.width)
    }
}

pub(crate) fn draw_err<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

/// The grid and axis text every chart shares: the embedded font, no minor grid lines, major
/// ones in pale grey.
pub(crate) fn grid_style<'m, 'a, 'b, X, Y, DB>(
    mesh: &'m mut MeshStyle<'a, 'b, X, Y, DB>,
) -> &'m mut MeshStyle<'a, 'b, X, Y, DB>
where
    X: Ranged,
    Y: Ranged,
    DB: DrawingBackend,
{
    mesh.label_style((FONT, 14))
        .axis_desc_style((FONT, 15))
        .light_line_style(TRANSPARENT)
        .bold_line_style(RGBColor(225, 225, 225))
}

/// One legend entry's text, left-aligned at `x` and centred on `y`.
pub(crate) fn legend_text<DB: DrawingBackend>(
    area: &Area<DB>,
    text: String,
    (x, y): (i32, i32),
) -> Result<(), String> {
    area.draw(&Text::new(
        text,
        (x, y),
        (FONT, 14)
            .into_font()
            .color(&BLACK)
            .pos(Pos::new(HPos::Left, VPos::Center)),
    ))
    .map_err(draw_err)
}

/// Draw a chart's title (and subtitle, when there is one) across the top of `root`; returns the
/// area below it for the chart itself.
pub(crate) fn draw_header<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    subtitle: Option<&str>,
) -> Result<DrawingArea<DB, Shift>, String> {
    let title_h = if subtitle.is_some() { 62 } else { 40 };
    let (head, body) = root.split_vertically(title_h);
    head.draw(&Text::new(
        title.to_owned(),
        (24, 12),
        (FONT, 22).into_font().color(&BLACK),
    ))
    .map_err(draw_err)?;
    if let Some(sub) = subtitle {
        head.draw(&Text::new(
            sub.to_owned(),
            (24, 40),
            (FONT, 14).into_font().color(&RGBColor(90, 90, 90)),
        ))
        .map_err(draw_err)?;
    }
    Ok(body)
}

/// Render a chart as PNG bytes.
pub fn render_png(chart: &impl Chart) -> Result<Vec<u8>, String> {
    register_fonts();
    let (w, h) = chart.size();
    let mut rgb = vec![0u8; w as usize * h as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        chart.draw(&root)?;
        root.present().map_err(draw_err)?;
    }
    let mut out = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut out, w, h);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut writer = enc.write_header().map_err(draw_err)?;
        writer.write_image_data(&rgb).map_err(draw_err)?;
    }
    Ok(out)
}

/// Render a chart as an SVG document.
pub fn render_svg(chart: &impl Chart) -> Result<String, String> {
    register_fonts();
    let mut s = String::new();
    {
        let root = SVGBackend::with_string(&mut s, chart.size()).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        chart.draw(&root)?;
        root.present().map_err(draw_err)?;
    }
    Ok(s)
}

/// A label made safe for a file name (letters, digits, `-`, `_` and `.` kept, anything else
/// `_`), or `fallback` when nothing is left.
pub fn file_stem(label: &str, fallback: &str) -> String {
    let s: String = label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() {
        fallback.to_owned()
    } else {
        s
    }
}

/// Render `chart` and write it to `path` atomically.
pub fn write_chart(chart: &impl Chart, path: &Path, format: ImageFormat) -> Result<()> {
    let bytes = match format {
        ImageFormat::Png => render_png(chart),
        ImageFormat::Svg => render_svg(chart).map(String::into_bytes),
    }
    .map_err(|message| Error::Malformed {
        path: path.to_owned(),
        message: format!("could not draw the chart: {message}"),
    })?;
    crate::atomic_file::write_file(path, &bytes)
}

/// Write `chart` into `dir` (made if need be) as `<name>.<ext>` in each of `formats`, adding
/// the paths written to `written`.
pub fn write_chart_files(
    chart: &impl Chart,
    dir: &Path,
    name: &str,
    formats: &[ImageFormat],
    written: &mut Vec<std::path::PathBuf>,
) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|source| crate::error::Error::PlotFolder {
        path: dir.to_owned(),
        source,
    })?;
    for &f in formats {
        let path = dir.join(format!("{name}.{}", f.extension()));
        write_chart(chart, &path, f)?;
        written.push(path);
    }
    Ok(())
}

/// The length in characters of the longest of `labels` (10 with none): what sizes a bar chart
/// whose bars are labelled on the left.
pub fn longest_label<'a>(labels: impl IntoIterator<Item = &'a str>) -> u32 {
    labels
        .into_iter()
        .map(|l| l.chars().count())
        .max()
        .unwrap_or(10) as u32
}

/// The end of a value axis whose largest value is `v`: a little headroom above it.
pub(crate) fn nice_max(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    v * 1.12
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimation_keeps_extremes() {
        let pts: Vec<(f64, f64)> = (0..10_000)
            .map(|i| (i as f64, if i == 7_777 { 100.0 } else { (i % 7) as f64 }))
            .collect();
        let d = decimate_minmax(&pts, 100);
        assert!(d.len() <= 3 * 101, "{}", d.len());
        assert!(d.iter().any(|p| p.1 == 100.0));
        assert!(d.windows(2).all(|w| w[0].0 <= w[1].0));
    }

    #[test]
    fn charts_render_to_png_and_svg() {
        let chart = StackedBars {
            frame: Frame {
                title: "t".into(),
                subtitle: None,
                width: 400,
                height: 300,
            },
            value_label: "GiB".into(),
            bars: vec![Bar {
                label: "a".into(),
                parts: vec![("x".into(), 1.0), ("y".into(), 2.0)],
            }],
            colors: Vec::new(),
            legend: Vec::new(),
            value_max: None,
        };
        let png = render_png(&chart).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        let svg = render_svg(&chart).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("GiB"));
    }
}
