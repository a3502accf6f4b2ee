//! The memory charts, as data for [`crate::render::plot`]: the allocated-memory timeline (reserved
//! beside it, phases shaded, the peak marked, the bytes allocated before recording as a
//! reference line), the stacked bar of categories at the peak (one bar per snapshot) and the
//! bars of the largest modules at the peak ([`modules_chart`]); [`write_charts`] and
//! [`write_module_charts`] write them as `analyze memory --plot` does.

use std::path::{Path, PathBuf};

use plotters::style::RGBColor;

use super::categories::{self, BUILTIN};
use super::modules::{is_fixed_row, top_and_rest, ModuleShare};
use super::phases::Phase;
use super::summary::{category_order, Analysis, MemoryReport};
use crate::error::Result;
use crate::render::plot::{
    file_stem, longest_label, write_chart_files, Band, Bar, Decimator, Frame, HLine, ImageFormat,
    Marker, Series, StackedBars, TimelineChart, PALETTE,
};

const MIB: f64 = 1024.0 * 1024.0;

/// Unit of every memory figure in charts: MiB, as in the tables beside them (`peak MiB`,
/// `before recording MiB`), so a number read off a chart is the number in the table, whatever
/// the size. `_max_bytes` is the largest value the chart shows.
fn unit(_max_bytes: u64) -> (f64, &'static str) {
    (MIB, "MiB")
}

fn phase_color(p: Phase) -> RGBColor {
    match p {
        Phase::Forward => RGBColor(31, 119, 180),
        Phase::Backward => RGBColor(230, 110, 0),
        Phase::Optimizer => RGBColor(44, 160, 44),
    }
}

/// The colour of a category in every chart.
pub fn category_color(name: &str) -> Option<RGBColor> {
    let c = match name {
        categories::PARAMETERS => RGBColor(31, 119, 180),
        categories::GRADIENTS => RGBColor(255, 127, 14),
        categories::OPTIMIZER_STATE => RGBColor(44, 160, 44),
        categories::OPTIMIZER_TEMP => RGBColor(152, 223, 138),
        categories::ATTENTION => RGBColor(214, 39, 40),
        categories::SOFTMAX => RGBColor(255, 152, 150),
        categories::FFN => RGBColor(148, 103, 189),
        categories::NORM => RGBColor(140, 86, 75),
        categories::EMBEDDING => RGBColor(188, 189, 34),
        categories::LOGITS => RGBColor(23, 190, 207),
        categories::ACTIVATIONS_OTHER => RGBColor(174, 199, 232),
        categories::BACKWARD => RGBColor(255, 187, 120),
        categories::AUTOCAST => RGBColor(227, 119, 194),
        categories::WORKSPACE => RGBColor(99, 99, 99),
        categories::BEFORE_RECORDING => RGBColor(199, 199, 199),
        categories::OTHER => RGBColor(219, 219, 141),
        _ => return None,
    };
    Some(c)
}

/// The timeline chart of one analysed snapshot.
pub fn timeline_chart(a: &Analysis) -> TimelineChart {
    let r = &a.report;
    let tl = &a.timeline;
    let t0 = tl.first_time_us();
    let n = tl.trace.len();
    let has_time = t0.is_some() && (0..n).all(|i| tl.time_us(i).is_some());
    let x_at = |entry: usize, time_us: Option<i64>| -> f64 {
        match (has_time, t0) {
            (true, Some(t0)) => time_us.map_or(0.0, |t| (t as f64 - t0 as f64) / 1000.0),
            _ => entry as f64,
        }
    };
    let x_of = |entry: usize| x_at(entry, tl.time_us(entry));
    // The most of either line: the higher of the two peaks.
    let max_bytes = match (tl.peak_allocated(), tl.peak_reserved()) {
        (Some(a), Some(r)) => a.allocated.max(r.reserved),
        _ => r.end_reserved_bytes,
    }
    .max(tl.start_reserved);
    let (div, unit_name) = unit(max_bytes);
    let y = |b: u64| b as f64 / div;

    // A phase with no allocator event (a fused optimizer step) is shaded where its annotations
    // put it, and the lines are held to its end.
    let mut extra_bands = Vec::new();
    let mut held_to: Vec<f64> = Vec::new();
    let mut last_x = if n > 0 { x_of(n - 1) } else { 1.0 };
    if let (true, Some(t0)) = (has_time, t0) {
        for p in &a.annotated_phases {
            if a.spans.iter().any(|s| s.phase == p.phase) {
                continue;
            }
            let (start, end) = (
                (p.start_us - t0) as f64 / 1000.0,
                (p.end_us - t0) as f64 / 1000.0,
            );
            if start < 0.0 {
                continue;
            }
            if end > last_x {
                held_to.push(end);
                last_x = end;
            }
            extra_bands.push(Band {
                start,
                end,
                label: p.phase.name().to_owned(),
                color: phase_color(p.phase),
            });
        }
    }

    // Both lines step (the value holds until the next event), decimated as the points come.
    let len = if n > 0 { 1 + 2 * n } else { 2 } + held_to.len();
    let first_x = if n > 0 { x_of(0) } else { 0.0 };
    let mut allocated = Decimator::new(first_x, last_x, len, 1500);
    let mut reserved = Decimator::new(first_x, last_x, len, 1500);
    let (mut last_allocated, mut last_reserved);
    if n > 0 {
        (last_allocated, last_reserved) = (y(tl.start_allocated), y(tl.start_reserved));
        allocated.push((first_x, last_allocated));
        reserved.push((first_x, last_reserved));
        for p in tl.points() {
            let x = x_at(p.entry, p.time_us);
            allocated.push((x, last_allocated));
            last_allocated = y(p.allocated);
            allocated.push((x, last_allocated));
            reserved.push((x, last_reserved));
            last_reserved = y(p.reserved);
            reserved.push((x, last_reserved));
        }
    } else {
        // No trace: a flat line at the end state.
        (last_allocated, last_reserved) = (y(r.end_allocated_bytes), y(r.end_reserved_bytes));
        allocated.push((0.0, last_allocated));
        allocated.push((1.0, last_allocated));
        reserved.push((0.0, last_reserved));
        reserved.push((1.0, last_reserved));
    }
    for &end in &held_to {
        allocated.push((end, last_allocated));
        reserved.push((end, last_reserved));
    }
    let allocated = allocated.finish();
    let reserved = reserved.finish();

    let mut bands: Vec<Band> = a
        .spans
        .iter()
        .map(|s| {
            // A band reaches to where the next one begins, so phases tile the axis.
            let end_entry = (s.last_entry + 1).min(n.saturating_sub(1));
            let mut end = x_of(end_entry);
            // One phase of one step annotated: its band lasts until its END mark (the last
            // allocation of a backward comes well before its GPU work has finished).
            let marks: Vec<_> = a
                .annotated_phases
                .iter()
                .filter(|p| p.phase == s.phase)
                .collect();
            let spans_of_phase = a.spans.iter().filter(|o| o.phase == s.phase).count();
            if let ([m], 1, true, Some(t0)) = (marks.as_slice(), spans_of_phase, has_time, t0) {
                end = end.max((m.end_us - t0) as f64 / 1000.0);
            }
            Band {
                start: x_of(s.first_entry),
                end,
                label: s.phase.name().to_owned(),
                color: phase_color(s.phase),
            }
        })
        .collect();
    bands.extend(extra_bands);

    let marker = r.peak_entry.map(|e| Marker {
        x: x_of(e),
        y: y(r.peak_allocated_bytes),
        label: format!(
            "peak {:.2} {unit_name}{}",
            y(r.peak_allocated_bytes),
            match (has_time, r.peak_time_us) {
                (true, Some(t)) => format!(" at {:.1} ms", t / 1000.0),
                _ => format!(" at entry {e}"),
            }
        ),
    });
    let hlines = if r.start_allocated_bytes > 0 && n > 0 {
        vec![HLine {
            y: y(r.start_allocated_bytes),
            label: format!(
                "allocated before recording: {:.2} {unit_name}",
                y(r.start_allocated_bytes)
            ),
        }]
    } else {
        Vec::new()
    };

    let mut subtitle = format!(
        "peak allocated {:.2} {unit_name}, peak reserved {:.2} {unit_name}",
        y(r.peak_allocated_bytes),
        y(r.peak_reserved_bytes)
    );
    if let Some(f) = r.forward_peak_bytes {
        subtitle.push_str(&format!(", forward peak {:.2} {unit_name}", y(f)));
    }
    subtitle.push_str(&format!(", device {}", r.device));

    TimelineChart {
        frame: Frame {
            title: format!("Memory timeline: {}", r.label),
            subtitle: Some(subtitle),
            width: 1280,
            height: 640,
        },
        x_label: if has_time {
            "time since recording began (ms)".into()
        } else {
            "trace entry".into()
        },
        y_label: format!("memory ({unit_name})"),
        series: vec![
            Series {
                name: "allocated".into(),
                points: allocated,
                color: RGBColor(31, 119, 180),
                filled: true,
            },
            Series {
                name: "reserved".into(),
                points: reserved,
                color: RGBColor(120, 120, 120),
                filled: false,
            },
        ],
        bands,
        marker,
        hlines,
    }
}

/// Stacked bars of the categories at the peak, one bar per report.
pub fn categories_chart(reports: &[&MemoryReport]) -> StackedBars {
    let max = reports
        .iter()
        .map(|r| r.peak_allocated_bytes)
        .max()
        .unwrap_or(0);
    let (div, unit_name) = unit(max);
    let bars: Vec<Bar> = reports
        .iter()
        .map(|r| Bar {
            label: r.label.clone(),
            parts: r
                .categories_at_peak
                .iter()
                .map(|c| (c.category.clone(), c.bytes as f64 / div))
                .collect(),
        })
        .collect();
    // Every category of every bar, in display order, each with its colour.
    let names = category_order(reports.iter().copied());
    let mut spare = PALETTE.iter().cycle();
    let colors = names
        .iter()
        .map(|n| {
            let c = category_color(n).unwrap_or_else(|| *spare.next().unwrap_or(&PALETTE[0]));
            (n.clone(), c)
        })
        .collect();
    // With one bar the legend carries the numbers; with several, just the names.
    let legend = if let [r] = reports {
        r.categories_at_peak
            .iter()
            .map(|c| {
                (
                    c.category.clone(),
                    format!(
                        "{}  {:.2} {unit_name} ({:.1}%)",
                        c.category,
                        c.bytes as f64 / div,
                        c.share * 100.0
                    ),
                )
            })
            .collect()
    } else {
        Vec::new()
    };
    let title = match reports {
        [r] => format!("Memory at the peak by category: {}", r.label),
        _ => "Memory at the peak by category".to_owned(),
    };
    let subtitle = match reports {
        [r] => Some(format!(
            "{:.2} {unit_name} allocated at the peak; categories from stack frames ({} built-in kinds, user rules first)",
            r.peak_allocated_bytes as f64 / div,
            BUILTIN.len()
        )),
        _ => None,
    };
    let height = if reports.len() > 1 {
        (160 + 56 * reports.len() as u32).max(480)
    } else {
        640
    };
    StackedBars {
        frame: Frame {
            title,
            subtitle,
            width: if reports.len() > 1 { 1400 } else { 1000 },
            height,
        },
        value_label: format!("allocated at the peak ({unit_name})"),
        bars,
        colors,
        legend,
        value_max: None,
    }
}

/// Bars of the `top` modules of one snapshot by bytes live at the peak, largest first, and one
/// bar for the rest, so that the bars add up to the peak. Rows that name no module are grey.
pub fn modules_chart(r: &MemoryReport, top: usize) -> StackedBars {
    let (div, unit_name) = unit(r.peak_allocated_bytes);
    const MODULE: &str = "module";
    const UNNAMED: &str = "no module named";
    let (shown, rest) = top_and_rest(&r.modules, top);
    let mut rows: Vec<(&ModuleShare, bool)> =
        shown.iter().map(|m| (m, !is_fixed_row(&m.name))).collect();
    rows.extend(rest.as_ref().map(|m| (m, false)));
    let bars: Vec<Bar> = rows
        .into_iter()
        .map(|(m, named)| {
            let value = m.bytes_at_peak as f64 / div;
            Bar {
                // The value in the label: the bars carry no numbers of their own.
                label: format!("{}  {value:.2} {unit_name}", m.name),
                parts: vec![((if named { MODULE } else { UNNAMED }).to_owned(), value)],
            }
        })
        .collect();
    let longest = longest_label(bars.iter().map(|b| b.label.as_str()));
    StackedBars {
        frame: Frame {
            title: format!("Memory at the peak by module: {}", r.label),
            subtitle: Some(format!(
                "{:.2} {unit_name} allocated at the peak; the {} largest of {} modules, the rest in one bar",
                r.peak_allocated_bytes as f64 / div,
                shown.len(),
                r.modules.len()
            )),
            width: (900 + longest * 8).min(1800),
            height: (160 + 40 * bars.len() as u32).max(480),
        },
        value_label: format!("allocated at the peak ({unit_name})"),
        bars,
        colors: vec![
            (MODULE.to_owned(), RGBColor(31, 119, 180)),
            (UNNAMED.to_owned(), RGBColor(199, 199, 199)),
        ],
        legend: vec![
            (MODULE.to_owned(), "named by its stack".to_owned()),
            (
                UNNAMED.to_owned(),
                "no module named, or the rest".to_owned(),
            ),
        ],
        value_max: None,
    }
}

/// Write the module chart of each of `reports` into `dir` (made if need be) as
/// `<label>.modules` in each of `formats`, the `top` modules each. Returns the files written.
pub fn write_module_charts(
    dir: &Path,
    reports: &[&MemoryReport],
    top: usize,
    formats: &[ImageFormat],
) -> Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    for r in reports {
        let stem = file_stem(&r.label, "snapshot");
        let chart = modules_chart(r, top);
        write_chart_files(
            &chart,
            dir,
            &format!("{stem}.modules"),
            formats,
            &mut written,
        )?;
    }
    Ok(written)
}

/// Write the charts of `analyses` into `dir` (made if need be) in each of `formats`: per
/// snapshot `<label>.timeline` and `<label>.categories`, and with several snapshots one
/// `categories` chart over all of them. Returns the files written, in the order written.
pub fn write_charts(
    dir: &Path,
    analyses: &[Analysis],
    formats: &[ImageFormat],
) -> Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    for a in analyses {
        let stem = file_stem(&a.report.label, "snapshot");
        let timeline = timeline_chart(a);
        write_chart_files(
            &timeline,
            dir,
            &format!("{stem}.timeline"),
            formats,
            &mut written,
        )?;
        let cats = categories_chart(&[&a.report]);
        write_chart_files(
            &cats,
            dir,
            &format!("{stem}.categories"),
            formats,
            &mut written,
        )?;
    }
    if analyses.len() > 1 {
        let reports: Vec<&MemoryReport> = analyses.iter().map(|a| &a.report).collect();
        let chart = categories_chart(&reports);
        write_chart_files(&chart, dir, "categories", formats, &mut written)?;
    }
    Ok(written)
}
