//! The roofline chart, as data for [`crate::render::plot`]: arithmetic intensity (FLOP/B) across,
//! achieved TFLOP/s up, both on log scales; the memory roof (bandwidth × intensity) and one flat
//! compute roof per peak in use; one point per piece of work, its area in proportion to its GPU
//! time, the longest-running ones named with their share of the GPU time.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::render::plot::{draw_err, grid_style, legend_text, Area, Chart, Frame, FONT, PALETTE};

/// One piece of work on the chart.
#[derive(Clone, Debug)]
pub struct Point {
    pub label: String,
    /// FLOPs per byte.
    pub intensity: f64,
    pub tflops: f64,
    /// Its GPU time, ns: what its size shows.
    pub ns: i64,
}

/// A flat compute roof.
#[derive(Clone, Debug)]
pub struct Ceiling {
    pub label: String,
    pub tflops: f64,
}

/// A roofline: the roofs and the points under them.
#[derive(Clone, Debug)]
pub struct RooflineChart {
    pub frame: Frame,
    /// Memory bandwidth, TB/s.
    pub tbps: f64,
    /// Compute roofs, highest last.
    pub ceilings: Vec<Ceiling>,
    pub points: Vec<Point>,
    /// How many of the points, longest first, carry their label.
    pub labelled: usize,
    /// The GPU time the legend's shares are of, ns.
    pub total_ns: i64,
}

impl RooflineChart {
    /// The axes' ranges: every point, and each roof's ridge, with room around them.
    fn ranges(&self) -> ((f64, f64), (f64, f64)) {
        let ridges = self.ceilings.iter().map(|c| c.tflops / self.tbps);
        let xs = self.points.iter().map(|p| p.intensity).chain(ridges);
        let top = self.ceilings.iter().map(|c| c.tflops).fold(0.0, f64::max);
        let ys = self.points.iter().map(|p| p.tflops).chain([top]);
        let span = |v: &mut dyn Iterator<Item = f64>| {
            let (lo, hi) = v
                .filter(|x| x.is_finite() && *x > 0.0)
                .fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)));
            if lo > hi {
                (0.01, 1.0)
            } else {
                (decade_below(lo), decade_above(hi * 1.5))
            }
        };
        (span(&mut xs.into_iter()), span(&mut ys.into_iter()))
    }
}

fn decade_below(v: f64) -> f64 {
    10f64.powf(v.log10().floor())
}

fn decade_above(v: f64) -> f64 {
    10f64.powf(v.log10().ceil())
}

/// A number on a log axis: plain where it is short, else as a power of ten.
fn tick(v: &f64) -> String {
    let e = v.log10();
    if (e - e.round()).abs() > 1e-9 {
        return String::new();
    }
    match e.round() as i32 {
        -2..=4 => format!("{v}"),
        e => format!("1e{e}"),
    }
}

impl Chart for RooflineChart {
    fn frame(&self) -> &Frame {
        &self.frame
    }

    fn draw_body<DB: DrawingBackend>(&self, body: &Area<DB>, w: u32) -> Result<(), String> {
        let legend_w = (w / 4).clamp(180, 300);
        let (plot_area, legend_area) = body.split_horizontally(w - legend_w);
        let ((x0, x1), (y0, y1)) = self.ranges();
        let mut chart = ChartBuilder::on(&plot_area)
            .margin(16)
            .x_label_area_size(46)
            .y_label_area_size(72)
            .build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())
            .map_err(draw_err)?;
        {
            let mut mesh = chart.configure_mesh();
            grid_style(&mut mesh);
            mesh.x_desc("arithmetic intensity (FLOP/byte)")
                .y_desc("achieved TFLOP/s")
                .x_label_formatter(&tick)
                .y_label_formatter(&tick)
                .draw()
                .map_err(draw_err)?;
        }
        // The roofs: bandwidth × intensity up to each ceiling's ridge, then flat.
        let grey = RGBColor(90, 90, 90);
        let steps = 64;
        // Up to the highest roof's ridge: above it the compute roofs bound.
        let top = self.ceilings.iter().map(|c| c.tflops).fold(0.0, f64::max);
        let end = if top > 0.0 { top / self.tbps } else { x1 }.min(x1);
        let memory: Vec<(f64, f64)> = (0..=steps)
            .map(|i| x0 * (end / x0).powf(i as f64 / steps as f64))
            .map(|x| (x, x * self.tbps))
            .filter(|&(_, y)| y <= y1)
            .collect();
        chart
            .draw_series(LineSeries::new(memory, grey.stroke_width(2)))
            .map_err(draw_err)?;
        for c in &self.ceilings {
            let ridge = c.tflops / self.tbps;
            chart
                .draw_series(LineSeries::new(
                    [(ridge.max(x0), c.tflops), (x1, c.tflops)],
                    grey.stroke_width(2),
                ))
                .map_err(draw_err)?;
            chart
                .draw_series([Text::new(
                    format!("{} {} TFLOP/s", c.label, c.tflops),
                    (x1, c.tflops),
                    (FONT, 13)
                        .into_font()
                        .color(&grey)
                        .pos(Pos::new(HPos::Right, VPos::Bottom)),
                )])
                .map_err(draw_err)?;
        }
        // The points, the longest-running drawn last so they stay on top.
        let plotted: i64 = self.points.iter().map(|p| p.ns.max(0)).sum::<i64>().max(1);
        let total = self.total_ns.max(1);
        let mut order: Vec<usize> = (0..self.points.len()).collect();
        order.sort_by_key(|&i| (self.points[i].ns, std::cmp::Reverse(i)));
        let radius = |p: &Point| {
            let share = p.ns.max(0) as f64 / plotted as f64;
            (4.0 + 36.0 * share.sqrt()).round() as i32
        };
        let ranked: Vec<usize> = order.iter().rev().copied().collect();
        for &i in &order {
            let p = &self.points[i];
            if !(p.intensity > 0.0 && p.tflops > 0.0) {
                continue;
            }
            let rank = ranked.iter().position(|&j| j == i).unwrap_or(usize::MAX);
            let color = PALETTE[rank.min(PALETTE.len() - 1)];
            chart
                .draw_series([
                    Circle::new((p.intensity, p.tflops), radius(p), color.mix(0.55).filled()),
                    Circle::new((p.intensity, p.tflops), radius(p), color.stroke_width(1)),
                ])
                .map_err(draw_err)?;
        }
        // The legend: the labelled points, longest first.
        let line_h = 24;
        let mut row = 0;
        for (rank, &i) in ranked.iter().enumerate().take(self.labelled) {
            let p = &self.points[i];
            if !(p.intensity > 0.0 && p.tflops > 0.0) {
                continue;
            }
            let y = 30 + row * line_h;
            let color = PALETTE[rank.min(PALETTE.len() - 1)];
            legend_area
                .draw(&Circle::new((16, y), 7, color.mix(0.55).filled()))
                .map_err(draw_err)?;
            let share = p.ns.max(0) as f64 / total as f64 * 100.0;
            legend_text(&legend_area, format!("{} ({share:.0}%)", p.label), (30, y))?;
            row += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::plot::{render_png, render_svg};

    #[test]
    fn a_roofline_renders_with_its_roofs_and_points() {
        let chart = RooflineChart {
            frame: Frame {
                title: "roofline".into(),
                subtitle: None,
                width: 900,
                height: 600,
            },
            tbps: 4.8,
            ceilings: vec![Ceiling {
                label: "fp32 vector".into(),
                tflops: 67.0,
            }],
            points: vec![
                Point {
                    label: "aten::bmm".into(),
                    intensity: 118.7,
                    tflops: 34.0,
                    ns: 12_525_486,
                },
                Point {
                    label: "aten::mul".into(),
                    intensity: 0.098,
                    tflops: 0.164,
                    ns: 1_207_741,
                },
            ],
            labelled: 8,
            total_ns: 21_234_633,
        };
        let ((x0, x1), (y0, y1)) = chart.ranges();
        assert!(x0 <= 0.098 && x1 >= 118.7 && y0 <= 0.164 && y1 >= 67.0);
        let png = render_png(&chart).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        let svg = render_svg(&chart).unwrap();
        assert!(svg.contains("aten::bmm") && svg.contains("fp32 vector 67 TFLOP/s"));
    }
}
