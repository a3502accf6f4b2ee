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
//! This module knows nothing about memory or kernels: callers build the chart data.

use std::path::Path;
use std::sync::Once;

use plotters::chart::MeshStyle;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::error::{Error, Result};

/// The font family every chart uses; registered by [`register_fonts`].
pub const FONT: &str = "sans-serif";

static DEJAVU_SANS: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");

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

/// Something that can draw itself on any plotters backend.
pub trait Chart {
    /// Width and height in pixels.
    fn size(&self) -> (u32, u32);
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String>;
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

/// Keep at most about `2 * buckets` points of a series sorted by x, keeping each bucket's
/// minimum and maximum so peaks survive.
pub fn decimate_minmax(points: &[(f64, f64)], buckets: usize) -> Vec<(f64, f64)> {
    if points.len() <= 2 * buckets.max(1) {
        return points.to_vec();
    }
    let (x0, x1) = (points[0].0, points[points.len() - 1].0);
    let width = (x1 - x0) / buckets as f64;
    if width <= 0.0 || !width.is_finite() {
        return points.to_vec();
    }
    let mut out = Vec::with_capacity(2 * buckets + 2);
    let mut i = 0;
    while i < points.len() {
        let b = ((points[i].0 - x0) / width).floor();
        let mut j = i;
        let (mut lo, mut hi) = (i, i);
        while j < points.len() && ((points[j].0 - x0) / width).floor() == b {
            if points[j].1 < points[lo].1 {
                lo = j;
            }
            if points[j].1 > points[hi].1 {
                hi = j;
            }
            j += 1;
        }
        let (a, c) = if lo <= hi { (lo, hi) } else { (hi, lo) };
        out.push(points[a]);
        if c != a {
            out.push(points[c]);
        }
        // Keep the bucket's last point so steps end where they should.
        if j - 1 != c && j - 1 != a {
            out.push(points[j - 1]);
        }
        i = j;
    }
    out
}

/// A line (optionally filled down to zero) of a [`TimelineChart`].
#[derive(Clone, Debug)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    pub color: RGBColor,
    pub filled: bool,
}

/// A shaded x-range with a label at its top.
#[derive(Clone, Debug)]
pub struct Band {
    pub start: f64,
    pub end: f64,
    pub label: String,
    pub color: RGBColor,
}

/// A highlighted point with a label.
#[derive(Clone, Debug)]
pub struct Marker {
    pub x: f64,
    pub y: f64,
    pub label: String,
}

/// A horizontal reference line with a label.
#[derive(Clone, Debug)]
pub struct HLine {
    pub y: f64,
    pub label: String,
}

/// Values over x: filled areas and lines, shaded bands, a marked point, reference lines.
#[derive(Clone, Debug)]
pub struct TimelineChart {
    pub title: String,
    pub subtitle: Option<String>,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
    pub bands: Vec<Band>,
    pub marker: Option<Marker>,
    pub hlines: Vec<HLine>,
    pub width: u32,
    pub height: u32,
}

/// `c` blended towards white by `amount` (0: unchanged, 1: white), as an opaque colour.
pub fn lighten(c: RGBColor, amount: f64) -> RGBColor {
    let mix = |v: u8| (f64::from(v) + (255.0 - f64::from(v)) * amount).round() as u8;
    RGBColor(mix(c.0), mix(c.1), mix(c.2))
}

fn nice_max(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    v * 1.12
}

impl Chart for TimelineChart {
    fn size(&self) -> (u32, u32) {
        (self.width, self.height)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        let (w, _) = self.size();
        let body = draw_header(root, &self.title, self.subtitle.as_deref())?;

        let all = self.series.iter().flat_map(|s| s.points.iter());
        let (mut x0, mut x1, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, 0.0f64);
        for &(x, y) in all {
            x0 = x0.min(x);
            x1 = x1.max(x);
            y1 = y1.max(y);
        }
        if !x0.is_finite() {
            (x0, x1) = (0.0, 1.0);
        }
        if x1 <= x0 {
            x1 = x0 + 1.0;
        }
        let y_top = nice_max(y1);

        let mut chart = ChartBuilder::on(&body)
            .margin_left(16)
            .margin_right(28)
            .margin_bottom(12)
            .x_label_area_size(46)
            .y_label_area_size(72)
            .build_cartesian_2d(x0..x1, 0.0..y_top)
            .map_err(draw_err)?;
        let mut mesh = chart.configure_mesh();
        grid_style(&mut mesh)
            .x_desc(self.x_label.clone())
            .y_desc(self.y_label.clone())
            .y_label_formatter(&|v| format!("{v:.1}"))
            .x_label_formatter(&|v| format!("{v:.0}"))
            .draw()
            .map_err(draw_err)?;

        // Bands under everything, labelled along the top edge.
        for b in &self.bands {
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(b.start, 0.0), (b.end, y_top)],
                    b.color.mix(0.13).filled(),
                )))
                .map_err(draw_err)?;
        }
        let plot_w = f64::from(w.saturating_sub(130).max(1));
        for b in &self.bands {
            // Skip labels of bands too narrow to hold them.
            let px = (b.end - b.start) / (x1 - x0) * plot_w;
            if px < 8.0 * b.label.len() as f64 {
                continue;
            }
            chart
                .draw_series(std::iter::once(Text::new(
                    b.label.clone(),
                    ((b.start + b.end) / 2.0, y_top * 0.975),
                    (FONT, 14)
                        .into_font()
                        .color(&b.color.mix(0.9))
                        .pos(Pos::new(HPos::Center, VPos::Top)),
                )))
                .map_err(draw_err)?;
        }

        for s in &self.series {
            let color = s.color;
            if s.filled {
                chart
                    .draw_series(
                        // Opaque, so the bands show above the curve and do not tint the area.
                        AreaSeries::new(s.points.iter().copied(), 0.0, lighten(color, 0.55))
                            .border_style(color.stroke_width(2)),
                    )
                    .map_err(draw_err)?
                    .label(s.name.clone())
                    .legend(move |(x, y)| {
                        Rectangle::new([(x, y - 6), (x + 16, y + 6)], lighten(color, 0.55).filled())
                    });
            } else {
                chart
                    .draw_series(LineSeries::new(
                        s.points.iter().copied(),
                        color.stroke_width(2),
                    ))
                    .map_err(draw_err)?
                    .label(s.name.clone())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
                    });
            }
        }

        for h in &self.hlines {
            let grey = RGBColor(80, 80, 80);
            chart
                .draw_series(DashedLineSeries::new(
                    [(x0, h.y), (x1, h.y)],
                    6,
                    4,
                    grey.stroke_width(1),
                ))
                .map_err(draw_err)?;
            chart
                .draw_series(std::iter::once(Text::new(
                    h.label.clone(),
                    (x0 + (x1 - x0) * 0.01, h.y - y_top * 0.012),
                    (FONT, 13)
                        .into_font()
                        .color(&grey)
                        .pos(Pos::new(HPos::Left, VPos::Top)),
                )))
                .map_err(draw_err)?;
        }

        if let Some(m) = &self.marker {
            let red = RGBColor(200, 30, 30);
            chart
                .draw_series(std::iter::once(Circle::new((m.x, m.y), 6, red.filled())))
                .map_err(draw_err)?;
            // Put the label on the side of the point with more room.
            let right_side = m.x - x0 < (x1 - x0) * 0.6;
            let (hpos, dx) = if right_side {
                (HPos::Left, (x1 - x0) * 0.012)
            } else {
                (HPos::Right, -(x1 - x0) * 0.012)
            };
            chart
                .draw_series(std::iter::once(Text::new(
                    m.label.clone(),
                    (m.x + dx, m.y),
                    (FONT, 15)
                        .into_font()
                        .color(&red)
                        .pos(Pos::new(hpos, VPos::Bottom)),
                )))
                .map_err(draw_err)?;
        }

        // Bands join the legend (once per label), so narrow ones are still named.
        let mut seen: Vec<&str> = Vec::new();
        for b in &self.bands {
            if seen.contains(&b.label.as_str()) {
                continue;
            }
            seen.push(&b.label);
            let color = b.color;
            chart
                .draw_series(std::iter::empty::<Rectangle<(f64, f64)>>())
                .map_err(draw_err)?
                .label(b.label.clone())
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 6), (x + 16, y + 6)], color.mix(0.25).filled())
                });
        }

        if !self.series.is_empty() || !self.bands.is_empty() {
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .margin(12)
                .label_font((FONT, 14))
                .background_style(WHITE.mix(0.85))
                .border_style(RGBColor(200, 200, 200))
                .draw()
                .map_err(draw_err)?;
        }
        Ok(())
    }
}

/// One stacked bar: named parts.
#[derive(Clone, Debug)]
pub struct Bar {
    pub label: String,
    pub parts: Vec<(String, f64)>,
}

/// Stacked bars sharing one legend; parts with the same name have the same colour and stack in
/// the same order in every bar. One bar stands upright; several lie down, one per row, so their
/// labels stay readable.
#[derive(Clone, Debug)]
pub struct StackedBars {
    pub title: String,
    pub subtitle: Option<String>,
    /// Axis title of the values.
    pub value_label: String,
    pub bars: Vec<Bar>,
    /// Part names with their colours, in stacking order (first at the bottom/left). Parts not
    /// listed follow in order of appearance, in palette colours.
    pub colors: Vec<(String, RGBColor)>,
    /// Legend text for part names (defaults to the name).
    pub legend: Vec<(String, String)>,
    /// End of the value axis (`None`: a little above the longest bar); `Some(100.0)` for shares
    /// in percent.
    pub value_max: Option<f64>,
    pub width: u32,
    pub height: u32,
}

impl StackedBars {
    /// Part names in stacking order.
    fn part_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.colors.iter().map(|(n, _)| n.clone()).collect();
        for b in &self.bars {
            for (n, _) in &b.parts {
                if !names.contains(n) {
                    names.push(n.clone());
                }
            }
        }
        names
    }

    fn color_of(&self, name: &str, index: usize) -> RGBColor {
        self.colors
            .iter()
            .find(|(n, _)| n == name)
            .map_or(PALETTE[index % PALETTE.len()], |(_, c)| *c)
    }

    /// The parts of bar `b` in stacking order, as (name index, value).
    fn stacked(&self, b: &Bar, names: &[String]) -> Vec<(usize, f64)> {
        let mut parts: Vec<(usize, f64)> = b
            .parts
            .iter()
            .filter_map(|(n, v)| Some((names.iter().position(|x| x == n)?, v.max(0.0))))
            .filter(|(_, v)| *v > 0.0)
            .collect();
        parts.sort_by_key(|(i, _)| *i);
        parts
    }
}

impl Chart for StackedBars {
    fn size(&self) -> (u32, u32) {
        (self.width, self.height)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        let (w, _) = self.size();
        let body = draw_header(root, &self.title, self.subtitle.as_deref())?;
        let names = self.part_names();
        let used: Vec<bool> = (0..names.len())
            .map(|i| {
                self.bars
                    .iter()
                    .any(|b| self.stacked(b, &names).iter().any(|(j, _)| *j == i))
            })
            .collect();
        let longest_legend = names
            .iter()
            .map(|n| {
                self.legend
                    .iter()
                    .find(|(x, _)| x == n)
                    .map_or(n.chars().count(), |(_, t)| t.chars().count())
            })
            .max()
            .unwrap_or(10);
        let legend_w = ((longest_legend as u32 * 8 + 60).min(w / 2)).max(160);
        let (plot_area, legend_area) = body.split_horizontally(w - legend_w);

        let n = self.bars.len().max(1);
        let top = self.value_max.filter(|m| *m > 0.0).unwrap_or_else(|| {
            nice_max(
                self.bars
                    .iter()
                    .map(|b| self.stacked(b, &names).iter().map(|(_, v)| v).sum::<f64>())
                    .fold(0.0f64, f64::max),
            )
        });
        let labels: Vec<String> = self.bars.iter().map(|b| b.label.clone()).collect();
        let label_at = |x: f64| -> String {
            if (x - x.floor() - 0.5).abs() < 1e-6 {
                labels.get(x.floor() as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        };
        let segment = |i: usize, from: f64, to: f64, horizontal: bool| {
            let (a, b) = (i as f64 + 0.18, i as f64 + 0.82);
            if horizontal {
                [(from, n as f64 - b), (to, n as f64 - a)]
            } else {
                [(a, from), (b, to)]
            }
        };
        let horizontal = self.bars.len() > 1;
        let longest_label = labels.iter().map(|l| l.chars().count()).max().unwrap_or(4) as u32;
        let mut builder = ChartBuilder::on(&plot_area);
        builder.margin_left(16).margin_right(16).margin_bottom(12);
        if horizontal {
            builder
                .x_label_area_size(46)
                .y_label_area_size((longest_label * 8 + 16).min((w - legend_w) / 2));
        } else {
            builder.x_label_area_size(36).y_label_area_size(72);
        }
        let (x_range, y_range) = if horizontal {
            (0.0..top, 0.0..n as f64)
        } else {
            (0.0..n as f64, 0.0..top)
        };
        let mut chart = builder
            .build_cartesian_2d(x_range, y_range)
            .map_err(draw_err)?;
        let bar_label = |v: &f64| {
            if horizontal {
                label_at(n as f64 - v)
            } else {
                label_at(*v)
            }
        };
        let value_fmt = |v: &f64| format!("{v:.1}");
        {
            let mut mesh = chart.configure_mesh();
            grid_style(&mut mesh);
            if horizontal {
                mesh.disable_y_mesh()
                    .x_desc(self.value_label.clone())
                    .y_labels(n * 2 + 1)
                    .y_label_formatter(&bar_label)
                    .x_label_formatter(&value_fmt);
            } else {
                mesh.disable_x_mesh()
                    .y_desc(self.value_label.clone())
                    .x_labels(n * 2 + 1)
                    .x_label_formatter(&bar_label)
                    .y_label_formatter(&value_fmt);
            }
            mesh.draw().map_err(draw_err)?;
        }

        for (i, b) in self.bars.iter().enumerate() {
            let mut base = 0.0;
            for (idx, v) in self.stacked(b, &names) {
                let color = self.color_of(&names[idx], idx);
                let rect = segment(i, base, base + v, horizontal);
                chart
                    .draw_series([
                        Rectangle::new(rect, color.filled()),
                        Rectangle::new(rect, WHITE.stroke_width(1)),
                    ])
                    .map_err(draw_err)?;
                base += v;
            }
        }

        // Legend in stacking order, reversed for an upright bar so it reads like the bar.
        let line_h = 24;
        let mut order: Vec<usize> = (0..names.len()).filter(|&i| used[i]).collect();
        if !horizontal {
            order.reverse();
        }
        for (row, idx) in order.into_iter().enumerate() {
            let name = &names[idx];
            let y = 30 + row as i32 * line_h;
            let color = self.color_of(name, idx);
            legend_area
                .draw(&Rectangle::new([(8, y - 8), (24, y + 8)], color.filled()))
                .map_err(draw_err)?;
            let text = self
                .legend
                .iter()
                .find(|(n, _)| n == name)
                .map_or_else(|| name.clone(), |(_, t)| t.clone());
            legend_area
                .draw(&Text::new(
                    text,
                    (32, y),
                    (FONT, 14)
                        .into_font()
                        .color(&BLACK)
                        .pos(Pos::new(HPos::Left, VPos::Center)),
                ))
                .map_err(draw_err)?;
        }
        Ok(())
    }
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
            title: "t".into(),
            subtitle: None,
            value_label: "GiB".into(),
            bars: vec![Bar {
                label: "a".into(),
                parts: vec![("x".into(), 1.0), ("y".into(), 2.0)],
            }],
            colors: Vec::new(),
            legend: Vec::new(),
            value_max: None,
            width: 400,
            height: 300,
        };
        let png = render_png(&chart).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        let svg = render_svg(&chart).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("GiB"));
    }
}
