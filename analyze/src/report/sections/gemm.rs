//! The GEMM fraction of inference against training: a model × context matrix per precision, the
//! fraction per pass, kernel time by class (table and bars), and the fraction against context
//! length as lines.

use std::collections::BTreeSet;

use crate::compare::passes::{seen_gemm_fraction, untraced_graph_fraction, MOSTLY_UNTRACED};
use crate::kernels::class::KernelClass;
use crate::memory::summary::RunName;
use crate::profile::PhaseProfile;
use crate::render::cells::{ms, pct};
use crate::render::plot::Frame;
use crate::render::{Cell, Table};

use super::super::charts::{class_bars, series_color, ChartData, ClassBar, LinePlot, LineSeries};
use super::super::labels::model_rank;
use super::super::{Block, NamedChart, ReportSection, TraceRun};
use super::matrix::{matrix_blocks, Entry};
use super::{add_plot, pass_names, phase, precision_rank, step_or_trace, table_block};

/// A GEMM share, or `n/a` where most of the time ran in CUDA graphs without per-kernel detail.
fn gemm_cell(p: &PhaseProfile) -> Cell {
    match seen_gemm_fraction(p) {
        Some(f) => pct(f),
        None if p.gemm_fraction.is_some() => Cell::text("n/a"),
        None => Cell::Missing,
    }
}

fn series_key(r: &RunName) -> Option<(String, String, Option<String>)> {
    Some((r.model.clone()?, r.mode.clone()?, r.precision.clone()))
}

pub(super) fn gemm_section(traces: &[&TraceRun], charts: &mut Vec<NamedChart>) -> ReportSection {
    let entries: Vec<Entry<'_>> = traces
        .iter()
        .map(|tr| Entry {
            run: &tr.run,
            cell: gemm_cell(step_or_trace(&tr.profile)),
        })
        .collect();
    let mut blocks = vec![Block::Text(
        "GEMM share of GPU kernel time, in percent. Inference is a forward-only run, training a full step (forward, backward and optimizer), both over the measured steps (the whole trace when a run has no step ranges). Per pass below.".into(),
    )];
    let unseen: Vec<&str> = traces
        .iter()
        .filter(|tr| {
            std::iter::once(step_or_trace(&tr.profile))
                .chain(&tr.profile.phases)
                .any(|p| untraced_graph_fraction(p).is_some_and(|u| u > MOSTLY_UNTRACED))
        })
        .map(|tr| tr.label.as_str())
        .collect();
    let caveats = if unseen.is_empty() {
        Vec::new()
    } else {
        vec![format!(
            "n/a: most of the GPU time ran in CUDA graphs traced without per-kernel detail (nsys's default `--cuda-graph-trace=graph`), so the GEMMs inside them are not seen; a share would read as \"no GEMMs\". Capture with `--cuda-graph-trace=node` to see them. Runs: {}.",
            unseen.join(", ")
        )]
    };
    blocks.extend(matrix_blocks(
        "GEMM % of kernel time",
        &entries,
        &[("forward", "inference"), ("train", "training")],
        caveats,
    ));

    let passes = pass_names(traces);
    let mut columns = vec!["run".to_owned()];
    columns.extend(passes.iter().map(|p| format!("{p} %")));
    columns.extend(["step %".to_owned(), "GEMM time/step (ms)".to_owned()]);
    let mut detail = Table::new(columns);
    for tr in traces {
        let p = &tr.profile;
        let s = step_or_trace(p);
        let mut row = vec![Cell::text(&tr.label)];
        row.extend(
            passes
                .iter()
                .map(|name| phase(p, name).map_or(Cell::Missing, gemm_cell)),
        );
        row.push(gemm_cell(s));
        row.push(
            if seen_gemm_fraction(s).is_none() && s.gemm_fraction.is_some() {
                Cell::text("n/a")
            } else if s.steps > 0 {
                ms(s.gemm_ns as f64 / s.steps as f64)
            } else {
                Cell::Missing
            },
        );
        detail.push(row);
    }
    blocks.push(table_block(Some("GEMM % per pass"), detail, Vec::new()));

    // Kernel time by class: the numbers behind the bars.
    let used: Vec<KernelClass> = KernelClass::ALL
        .into_iter()
        .filter(|c| {
            traces.iter().any(|tr| {
                step_or_trace(&tr.profile)
                    .classes
                    .iter()
                    .any(|s| s.class == *c && s.total_ns > 0)
            })
        })
        .collect();
    let mut header = vec!["run".to_owned()];
    header.extend(used.iter().map(|c| format!("{} %", c.label())));
    let mut classes = Table::new(header);
    for tr in traces {
        let s = step_or_trace(&tr.profile);
        let mut row = vec![Cell::text(&tr.label)];
        for c in &used {
            let share = s
                .classes
                .iter()
                .find(|x| x.class == *c)
                .map_or(0.0, |x| x.share);
            row.push(pct(share));
        }
        classes.push(row);
    }
    blocks.push(table_block(
        Some("Kernel time by class, measured steps"),
        classes,
        vec!["Classes come from rules over the kernel names (see `analyze profile --help` and `--classes`).".into()],
    ));

    if !traces.is_empty() {
        let bars: Vec<ClassBar<'_>> = traces
            .iter()
            .map(|tr| ClassBar {
                label: tr.label.clone(),
                phase: step_or_trace(&tr.profile),
            })
            .collect();
        add_plot(
            charts,
            &mut blocks,
            "kernel_classes",
            ChartData::Bars(class_bars(
                "GPU kernel time by class",
                "Share of the kernel time of the measured steps, per run",
                &bars,
            )),
            "GPU kernel time by class, per run",
        );
        let by_pass: Vec<ClassBar<'_>> = traces
            .iter()
            .flat_map(|tr| {
                tr.profile.phases.iter().map(|f| ClassBar {
                    label: format!("{} · {}", tr.label, f.name),
                    phase: f,
                })
            })
            .collect();
        if !by_pass.is_empty() {
            add_plot(
                charts,
                &mut blocks,
                "kernel_classes_by_pass",
                ChartData::Bars(class_bars(
                    "GPU kernel time by class and pass",
                    "Share of each pass's kernel time over the measured steps",
                    &by_pass,
                )),
                "GPU kernel time by class, per pass",
            );
        }
    }

    if let Some(chart) = gemm_chart(traces) {
        add_plot(
            charts,
            &mut blocks,
            "gemm_fraction",
            ChartData::Lines(chart),
            "GEMM fraction against context length",
        );
    }
    ReportSection {
        id: "gemm_fraction",
        title: "GEMM fraction: inference against training".into(),
        blocks,
    }
}

/// The GEMM fraction of the measured steps against context length, one line per model, mode and
/// precision.
fn gemm_chart(traces: &[&TraceRun]) -> Option<LinePlot> {
    let ctxs: Vec<u32> = traces
        .iter()
        .filter(|t| series_key(&t.run).is_some())
        .filter_map(|t| t.run.ctx)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    if ctxs.is_empty() {
        return None;
    }
    let mut keys: Vec<(String, String, Option<String>)> = Vec::new();
    for t in traces {
        if let (Some(k), Some(_)) = (series_key(&t.run), t.run.ctx) {
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
    }
    keys.sort_by(|a, b| {
        (
            model_rank(&a.0),
            &a.0,
            a.1 != "forward",
            precision_rank(&a.2),
        )
            .cmp(&(
                model_rank(&b.0),
                &b.0,
                b.1 != "forward",
                precision_rank(&b.2),
            ))
    });
    let mut models: Vec<&String> = Vec::new();
    for k in &keys {
        if !models.contains(&&k.0) {
            models.push(&k.0);
        }
    }
    let series = keys
        .iter()
        .enumerate()
        .map(|(i, key)| {
            let mut points: Vec<(usize, f64)> = Vec::new();
            for t in traces {
                if series_key(&t.run).as_ref() != Some(key) {
                    continue;
                }
                let (Some(ctx), Some(f)) =
                    (t.run.ctx, seen_gemm_fraction(step_or_trace(&t.profile)))
                else {
                    continue;
                };
                let x = ctxs.iter().position(|&c| c == ctx).unwrap_or(0);
                if !points.iter().any(|(px, _)| *px == x) {
                    points.push((x, f * 100.0));
                }
            }
            points.sort_by_key(|p| p.0);
            let (model, mode, precision) = key;
            let mode_name = match mode.as_str() {
                "forward" => "inference",
                "train" => "training",
                other => other,
            };
            // Colour by model, dashes for training, hollow points for reduced precision.
            let model_index = models.iter().position(|m| *m == model).unwrap_or(i);
            LineSeries {
                name: format!(
                    "{model} {mode_name}{}",
                    precision
                        .as_ref()
                        .map(|p| format!(" {p}"))
                        .unwrap_or_default()
                ),
                color: series_color(model_index),
                dashed: mode != "forward",
                hollow: precision.as_deref().is_some_and(|p| p != "fp32"),
                points,
            }
        })
        .collect();
    Some(LinePlot {
        frame: Frame {
            title: "GEMM fraction of GPU kernel time".into(),
            subtitle: Some(
                "Measured steps; inference = forward-only runs (solid), training = forward + backward + optimizer (dashed); hollow points: reduced precision"
                    .into(),
            ),
            width: 1100,
            height: 560,
        },
        x_label: "context length".into(),
        y_label: "GEMM % of kernel time".into(),
        x_ticks: ctxs.iter().map(u32::to_string).collect(),
        y_max: 100.0,
        series,
    })
}
