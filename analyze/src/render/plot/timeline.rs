//! The timeline chart: values over x as filled areas and lines, shaded bands (phases), a marked
//! point (the peak) and labelled reference lines, with a legend; and the decimation that keeps a
//! long series drawable without losing its extremes.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{draw_err, grid_style, nice_max, Area, Chart, Frame, FONT};

/// Keep at most about `2 * buckets` points of a series sorted by x, keeping each bucket's
/// minimum and maximum so peaks survive.
pub fn decimate_minmax(points: &[(f64, f64)], buckets: usize) -> Vec<(f64, f64)> {
    let (Some(first), Some(last)) = (points.first(), points.last()) else {
        return Vec::new();
    };
    let mut d = Decimator::new(first.0, last.0, points.len(), buckets);
    for &p in points {
        d.push(p);
    }
    d.finish()
}

/// [`decimate_minmax`] of a series whose points come one at a time, so that a series of millions
/// of points is never held: given its first and last x and its length beforehand, it keeps the
/// same points.
pub struct Decimator {
    x0: f64,
    /// Bucket width; `None` keeps every point (a short series, or one without width).
    width: Option<f64>,
    out: Vec<(f64, f64)>,
    /// The bucket being filled: its number, and its lowest, highest and last point, each with
    /// its index in the series.
    bucket: Option<(f64, Kept, Kept, Kept)>,
    next: usize,
}

type Kept = (usize, (f64, f64));

impl Decimator {
    /// A series of `len` points from x `x0` to `x1`, decimated into `buckets` buckets.
    pub fn new(x0: f64, x1: f64, len: usize, buckets: usize) -> Decimator {
        let width = (x1 - x0) / buckets as f64;
        let decimate = len > 2 * buckets.max(1) && width > 0.0 && width.is_finite();
        Decimator {
            x0,
            width: decimate.then_some(width),
            out: Vec::with_capacity(if decimate { 2 * buckets + 2 } else { len }),
            bucket: None,
            next: 0,
        }
    }

    pub fn push(&mut self, p: (f64, f64)) {
        let Some(width) = self.width else {
            self.out.push(p);
            return;
        };
        let i = self.next;
        self.next += 1;
        let b = ((p.0 - self.x0) / width).floor();
        if let Some((bucket, lo, hi, last)) = &mut self.bucket {
            if *bucket == b {
                // The first lowest and the first highest, as the points come.
                if p.1 < lo.1 .1 {
                    *lo = (i, p);
                }
                if p.1 > hi.1 .1 {
                    *hi = (i, p);
                }
                *last = (i, p);
                return;
            }
            self.flush();
        }
        self.bucket = Some((b, (i, p), (i, p), (i, p)));
    }

    /// The bucket's lowest and highest point in series order, and its last point so steps end
    /// where they should.
    fn flush(&mut self) {
        let Some((_, lo, hi, last)) = self.bucket.take() else {
            return;
        };
        let (a, c) = if lo.0 <= hi.0 { (lo, hi) } else { (hi, lo) };
        self.out.push(a.1);
        if c.0 != a.0 {
            self.out.push(c.1);
        }
        if last.0 != c.0 && last.0 != a.0 {
            self.out.push(last.1);
        }
    }

    /// The points kept.
    pub fn finish(mut self) -> Vec<(f64, f64)> {
        self.flush();
        self.out
    }
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
    pub frame: Frame,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
    pub bands: Vec<Band>,
    pub marker: Option<Marker>,
    pub hlines: Vec<HLine>,
}

/// `c` blended towards white by `amount` (0: unchanged, 1: white), as an opaque colour.
pub fn lighten(c: RGBColor, amount: f64) -> RGBColor {
    let mix = |v: u8| (f64::from(v) + (255.0 - f64::from(v)) * amount).round() as u8;
    RGBColor(mix(c.0), mix(c.1), mix(c.2))
}

impl Chart for TimelineChart {
    fn frame(&self) -> &Frame {
        &self.frame
    }

    fn draw_body<DB: DrawingBackend>(&self, body: &Area<DB>, w: u32) -> Result<(), String> {
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

        let mut chart = ChartBuilder::on(body)
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
