//! The report's charts, as data for [`crate::render::plot`]: kernel time by class as stacked
//! bars (one bar per run, and one per pass of each run), and the GEMM fraction against context
//! length as lines with marked, labelled points ([`LinePlot`], drawn here because
//! [`crate::render::plot`] has no chart with a categorical x axis). Memory charts come from
//! [`crate::memory::charts`].

use std::path::Path;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::error::Result;
use crate::kernels::class::KernelClass;
use crate::profile::PhaseProfile;
use crate::render::plot::{
    draw_err, grid_style, legend_text, longest_label, write_chart, Area, Chart, Frame, ImageFormat,
    StackedBars, TimelineChart, FONT, PALETTE,
};

/// Any chart of the report.
#[derive(Clone, Debug)]
pub enum ChartData {
    Bars(StackedBars),
    Lines(LinePlot),
    Timeline(TimelineChart),
}

impl ChartData {
    /// Render and write atomically.
    pub fn write(&self, path: &Path, format: ImageFormat) -> Result<()> {
        match self {
            ChartData::Bars(c) => write_chart(c, path, format),
            ChartData::Lines(c) => write_chart(c, path, format),
            ChartData::Timeline(c) => write_chart(c, path, format),
        }
    }
}

/// The colour of a kernel class in every chart: GEMM blue, attention and softmax reds,
/// elementwise orange, optimizer green, data movement greys.
pub fn class_color(c: KernelClass) -> RGBColor {
    match c {
        KernelClass::Gemm => RGBColor(31, 119, 180),
        KernelClass::Attention => RGBColor(140, 20, 30),
        KernelClass::Softmax => RGBColor(214, 39, 40),
        KernelClass::Elementwise => RGBColor(255, 127, 14),
        KernelClass::Reduction => RGBColor(148, 103, 189),
        KernelClass::Normalization => RGBColor(140, 86, 75),
        KernelClass::Optimizer => RGBColor(44, 160, 44),
        KernelClass::Index => RGBColor(188, 189, 34),
        KernelClass::Copy => RGBColor(127, 127, 127),
        KernelClass::Memcpy => RGBColor(180, 180, 180),
        KernelClass::Memset => RGBColor(210, 210, 210),
        KernelClass::Communication => RGBColor(23, 190, 207),
        KernelClass::Convolution => RGBColor(227, 119, 194),
        KernelClass::CudaGraph => RGBColor(23, 100, 140),
        KernelClass::Other => RGBColor(219, 219, 141),
    }
}

/// One bar of kernel time by class: a name and the phase it shows.
pub struct ClassBar<'a> {
    pub label: String,
    pub phase: &'a PhaseProfile,
}

/// Stacked bars of each bar's kernel time by class, in percent.
pub fn class_bars(title: &str, subtitle: &str, bars: &[ClassBar<'_>]) -> StackedBars {
    let colors = KernelClass::ALL
        .iter()
        .map(|&c| (c.label().to_owned(), class_color(c)))
        .collect();
    let longest = longest_label(bars.iter().map(|b| b.label.as_str()));
    StackedBars {
        frame: Frame {
            title: title.to_owned(),
            subtitle: Some(subtitle.to_owned()),
            width: (1000 + longest * 8).min(1600),
            height: (150 + 44 * bars.len() as u32).max(420),
        },
        value_label: "% of GPU kernel time".to_owned(),
        bars: bars
            .iter()
            .map(|b| crate::render::plot::Bar {
                label: b.label.clone(),
                parts: b
                    .phase
                    .classes
                    .iter()
                    .map(|c| (c.class.label().to_owned(), c.share * 100.0))
                    .collect(),
            })
            .collect(),
        colors,
        legend: Vec::new(),
        value_max: Some(100.0),
    }
}

/// Lines over a categorical x axis (context lengths), each point marked and labelled with its
/// value.
#[derive(Clone, Debug)]
pub struct LinePlot {
    pub frame: Frame,
    pub x_label: String,
    pub y_label: String,
    /// The x categories, in order.
    pub x_ticks: Vec<String>,
    /// End of the y axis (starts at 0).
    pub y_max: f64,
    pub series: Vec<LineSeries>,
}

/// One line: (index into `x_ticks`, value) points.
#[derive(Clone, Debug)]
pub struct LineSeries {
    pub name: String,
    pub color: RGBColor,
    /// Dashed lines and hollow points tell families of series apart (training beside
    /// inference, bf16 beside fp32).
    pub dashed: bool,
    pub hollow: bool,
    pub points: Vec<(usize, f64)>,
}

impl Chart for LinePlot {
    fn frame(&self) -> &Frame {
        &self.frame
    }

    fn draw_body<DB: DrawingBackend>(&self, body: &Area<DB>, w: u32) -> Result<(), String> {
        let longest = longest_label(self.series.iter().map(|s| s.name.as_str()));
        let legend_w = (longest * 8 + 64).clamp(160, w / 2);
        let (plot_area, legend_area) = body.split_horizontally(w - legend_w);

        let n = self.x_ticks.len().max(1);
        let ticks = self.x_ticks.clone();
        let tick_at = move |x: &f64| -> String {
            if (x - x.floor() - 0.5).abs() < 1e-6 {
                ticks.get(x.floor() as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        };
        let y_max = if self.y_max > 0.0 { self.y_max } else { 1.0 };
        let mut chart = ChartBuilder::on(&plot_area)
            .margin_left(16)
            .margin_right(24)
            .margin_top(8)
            .margin_bottom(12)
            .x_label_area_size(46)
            .y_label_area_size(64)
            .build_cartesian_2d(0.0..n as f64, 0.0..y_max)
            .map_err(draw_err)?;
        let mut mesh = chart.configure_mesh();
        grid_style(&mut mesh)
            .x_desc(self.x_label.clone())
            .y_desc(self.y_label.clone())
            .disable_x_mesh()
            .x_labels(n * 2 + 1)
            .x_label_formatter(&tick_at)
            .y_label_formatter(&|v| format!("{v:.0}"))
            .draw()
            .map_err(draw_err)?;

        for s in &self.series {
            let pts: Vec<(f64, f64)> = s.points.iter().map(|&(i, y)| (i as f64 + 0.5, y)).collect();
            let style = s.color.stroke_width(2);
            if s.dashed {
                chart
                    .draw_series(DashedLineSeries::new(pts.clone(), 8, 5, style))
                    .map_err(draw_err)?;
            } else {
                chart
                    .draw_series(plotters::series::LineSeries::new(pts.clone(), style))
                    .map_err(draw_err)?;
            }
            let marker = if s.hollow {
                s.color.stroke_width(3)
            } else {
                s.color.filled()
            };
            chart
                .draw_series(pts.iter().map(|&p| Circle::new(p, 6, marker)))
                .map_err(draw_err)?;
            chart
                .draw_series(pts.iter().map(|&(x, y)| {
                    Text::new(
                        format!("{y:.1}"),
                        (x + 0.04 * n as f64 / 4.0, y + y_max * 0.015),
                        (FONT, 14)
                            .into_font()
                            .color(&s.color)
                            .pos(Pos::new(HPos::Left, VPos::Bottom)),
                    )
                }))
                .map_err(draw_err)?;
        }

        for (row, s) in self.series.iter().enumerate() {
            let y = 30 + row as i32 * 24;
            let style = s.color.stroke_width(3);
            if s.dashed {
                for k in 0..3 {
                    legend_area
                        .draw(&PathElement::new(
                            vec![(8 + k * 9, y), (13 + k * 9, y)],
                            style,
                        ))
                        .map_err(draw_err)?;
                }
            } else {
                legend_area
                    .draw(&PathElement::new(vec![(8, y), (30, y)], style))
                    .map_err(draw_err)?;
            }
            let marker = if s.hollow {
                WHITE.filled()
            } else {
                s.color.filled()
            };
            legend_area
                .draw(&Circle::new((19, y), 5, marker))
                .map_err(draw_err)?;
            if s.hollow {
                legend_area
                    .draw(&Circle::new((19, y), 5, s.color.stroke_width(2)))
                    .map_err(draw_err)?;
            }
            legend_text(&legend_area, s.name.clone(), (38, y))?;
        }
        Ok(())
    }
}

/// A colour per series key, stable across the charts of one report.
pub fn series_color(index: usize) -> RGBColor {
    PALETTE[index % PALETTE.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::plot::{render_png, render_svg};

    #[test]
    fn line_plots_render_with_one_point_series() {
        let chart = LinePlot {
            frame: Frame {
                title: "GEMM".into(),
                subtitle: None,
                width: 800,
                height: 500,
            },
            x_label: "context length".into(),
            y_label: "%".into(),
            x_ticks: vec!["128".into(), "256".into()],
            y_max: 100.0,
            series: vec![
                LineSeries {
                    name: "small train fp32".into(),
                    color: series_color(0),
                    dashed: false,
                    hollow: false,
                    points: vec![(0, 59.7)],
                },
                LineSeries {
                    name: "small train bf16".into(),
                    color: series_color(1),
                    dashed: true,
                    hollow: true,
                    points: vec![(0, 40.0), (1, 45.0)],
                },
            ],
        };
        let png = render_png(&chart).unwrap();
        assert_eq!(&png[..4], b"\x89PNG");
        let svg = render_svg(&chart).unwrap();
        assert!(svg.contains("59.7") && svg.contains("256"), "labels drawn");
    }
}
