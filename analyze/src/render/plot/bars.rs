//! Stacked bars: one bar per run or snapshot, its parts stacked in one order with one colour per
//! part name across every bar, and a legend. One bar stands upright; several lie down.

use plotters::prelude::*;

use super::{draw_err, grid_style, legend_text, nice_max, Area, Chart, Frame, PALETTE};

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
    pub frame: Frame,
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
    fn frame(&self) -> &Frame {
        &self.frame
    }

    fn draw_body<DB: DrawingBackend>(&self, body: &Area<DB>, w: u32) -> Result<(), String> {
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
            legend_text(&legend_area, text, (32, y))?;
        }
        Ok(())
    }
}
