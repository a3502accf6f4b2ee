//! The report's sections, built from the loaded runs: run inventory; forward, backward and step
//! time; top kernel per pass; top non-GEMM kernel; GEMM fraction of inference against training;
//! softmax against matmul; peak memory (forward against training, fp32 against autocast); bench
//! results; skipped files. Each section is tables ([`Table`]) and charts; nothing here computes a
//! figure that the single-file analyses do not already give.
//!
//! Matrices put the model size down the side and the context length (by mode) across; a run
//! whose label lacks a model, context length or mode appears in the per-run tables only. A cell
//! with no run is `-`; a run that ran out of memory reads `OOM`.

use std::collections::BTreeSet;

use crate::kernel_class::KernelClass;
use crate::kernel_label::display_name;
use crate::memory::charts::categories_chart;
use crate::memory::mib;
use crate::memory::summary::{MemoryReport, RunName};
use crate::memory::tables::{peak_table, precision_pairs, precision_table};
use crate::model::SourceFormat;
use crate::profile::{KernelShare, PhaseProfile, Profile};
use crate::render::{Cell, Table};

use super::charts::{class_bars, series_color, ChartData, ClassBar, LinePlot, LineSeries};
use super::labels::model_rank;
use super::{run_order, Block, Inputs, NamedChart, Report, ReportSection, TraceRun};

/// Kernel names in tables are cut to this many characters.
const NAME_WIDTH: usize = 70;
/// Skipped files named per folder (all of them are in `report.json`'s inputs).
const SKIPPED_NAMED: usize = 3;

fn ms(ns: Option<f64>) -> Cell {
    ns.map_or(Cell::Missing, |v| Cell::Float(v / 1e6, 3))
}

fn pct(fraction: Option<f64>) -> Cell {
    fraction.map_or(Cell::Missing, |f| Cell::Float(f * 100.0, 1))
}

fn text(s: Option<&str>) -> Cell {
    s.map_or(Cell::Missing, Cell::text)
}

fn int(v: Option<u32>) -> Cell {
    v.map_or(Cell::Missing, |v| Cell::Int(i64::from(v)))
}

fn oom() -> Cell {
    Cell::text("OOM")
}

fn table_block(title: Option<&str>, table: Table, notes: Vec<String>) -> Block {
    Block::Table {
        title: title.map(str::to_owned),
        table,
        notes,
        folded: false,
    }
}

/// A long table shown collapsed.
fn folded_block(title: &str, table: Table, notes: Vec<String>) -> Block {
    Block::Table {
        title: Some(title.to_owned()),
        table,
        notes,
        folded: true,
    }
}

/// Where a precision sorts: fp32 (the baseline) first.
fn precision_rank(p: &Option<String>) -> (usize, Option<String>) {
    let rank = match p.as_deref() {
        Some("fp32") => 0,
        Some("tf32") => 1,
        Some("bf16") => 2,
        Some("fp16") => 3,
        Some("amp") => 4,
        Some(_) => 5,
        None => 6,
    };
    (rank, p.clone())
}

fn phase<'a>(p: &'a Profile, name: &str) -> Option<&'a PhaseProfile> {
    p.phases.iter().find(|f| f.name == name)
}

/// The figures of a run's measured steps, or of the whole trace when it has no step ranges.
fn step_or_trace(p: &Profile) -> &PhaseProfile {
    p.step.as_ref().unwrap_or(&p.whole_trace)
}

/// Traces in report order.
fn sorted_traces(inputs: &Inputs) -> Vec<&TraceRun> {
    let mut v: Vec<&TraceRun> = inputs.traces.iter().collect();
    v.sort_by(|a, b| run_order(&a.run, &a.label, &b.run, &b.label));
    v
}

fn sorted_reports(inputs: &Inputs) -> Vec<MemoryReport> {
    let mut v: Vec<&super::SnapshotRun> = inputs.snapshots.iter().collect();
    v.sort_by(|a, b| run_order(&a.run, &a.label, &b.run, &b.label));
    v.into_iter().map(|s| s.memory.clone()).collect()
}

/// A cell of a model × context matrix: where it sits and what it shows.
struct Entry<'a> {
    run: &'a RunName,
    cell: Cell,
}

/// One matrix per precision: model sizes down, `ctxN <mode>` across (modes in `modes` order,
/// titled by `mode_titles`). The first entry for a cell wins. Entries without model, context
/// length or a listed mode are left out.
fn matrices(entries: &[Entry<'_>], modes: &[(&str, &str)]) -> Vec<(Option<String>, Table)> {
    let usable: Vec<&Entry<'_>> = entries
        .iter()
        .filter(|e| {
            e.run.model.is_some()
                && e.run.ctx.is_some()
                && modes.iter().any(|(m, _)| e.run.mode.as_deref() == Some(*m))
        })
        .collect();
    let mut precisions: Vec<Option<String>> = usable
        .iter()
        .map(|e| e.run.precision.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    precisions.sort_by_key(precision_rank);
    let mut out = Vec::new();
    for precision in precisions {
        let these: Vec<&&Entry<'_>> = usable
            .iter()
            .filter(|e| e.run.precision == precision)
            .collect();
        let mut models: Vec<String> = these
            .iter()
            .filter_map(|e| e.run.model.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        models.sort_by_key(|m| (model_rank(m), m.clone()));
        let ctxs: BTreeSet<u32> = these.iter().filter_map(|e| e.run.ctx).collect();
        let mut columns: Vec<(u32, &str, &str)> = Vec::new();
        for &ctx in &ctxs {
            for (mode, title) in modes {
                if these
                    .iter()
                    .any(|e| e.run.ctx == Some(ctx) && e.run.mode.as_deref() == Some(*mode))
                {
                    columns.push((ctx, mode, title));
                }
            }
        }
        let mut header = vec!["model".to_owned()];
        header.extend(columns.iter().map(|(c, _, t)| {
            if t.is_empty() {
                format!("ctx {c}")
            } else {
                format!("ctx {c} {t}")
            }
        }));
        let mut table = Table::new(header);
        for model in &models {
            let mut row = vec![Cell::text(model)];
            for (ctx, mode, _) in &columns {
                let cell = these
                    .iter()
                    .find(|e| {
                        e.run.model.as_deref() == Some(model.as_str())
                            && e.run.ctx == Some(*ctx)
                            && e.run.mode.as_deref() == Some(*mode)
                    })
                    .map_or(Cell::Missing, |e| e.cell.clone());
                row.push(cell);
            }
            table.push(row);
        }
        out.push((precision, table));
    }
    out
}

fn matrix_blocks(
    what: &str,
    entries: &[Entry<'_>],
    modes: &[(&str, &str)],
    notes: Vec<String>,
) -> Vec<Block> {
    let m = matrices(entries, modes);
    let several = m.len() > 1;
    let count = m.len();
    m.into_iter()
        .enumerate()
        .map(|(i, (precision, table))| {
            let title = match (&precision, several) {
                (Some(p), _) => format!("{what}, {p}"),
                (None, true) => format!("{what}, precision unknown"),
                (None, false) => what.to_owned(),
            };
            let notes = if i + 1 == count {
                notes.clone()
            } else {
                Vec::new()
            };
            table_block(Some(&title), table, notes)
        })
        .collect()
}

fn format_name(f: SourceFormat) -> &'static str {
    match f {
        SourceFormat::NsysSqlite => "nsys export",
        SourceFormat::Kineto => "Kineto trace",
    }
}

fn inventory(inputs: &Inputs) -> ReportSection {
    let mut t = Table::new([
        "run",
        "input",
        "model",
        "ctx",
        "batch",
        "mode",
        "precision",
        "label from",
        "contents",
        "file",
    ]);
    let run_cells = |r: &RunName| {
        [
            text(r.model.as_deref()),
            int(r.ctx),
            int(r.batch),
            text(r.mode.as_deref()),
            text(r.precision.as_deref()),
        ]
    };
    for tr in sorted_traces(inputs) {
        let mut row = vec![Cell::text(&tr.label), Cell::text(format_name(tr.format))];
        row.extend(run_cells(&tr.run));
        row.push(Cell::text(tr.label_source.as_str()));
        row.push(Cell::text(format!(
            "{} kernels, {} measured steps",
            tr.kernels, tr.profile.measured_steps
        )));
        row.push(Cell::text(&tr.file));
        t.push(row);
    }
    let mut snaps: Vec<&super::SnapshotRun> = inputs.snapshots.iter().collect();
    snaps.sort_by(|a, b| run_order(&a.run, &a.label, &b.run, &b.label));
    for s in snaps {
        let mut row = vec![Cell::text(&s.label), Cell::text("memory snapshot")];
        row.extend(run_cells(&s.run));
        row.push(Cell::text(s.label_source.as_str()));
        let mut contents = format!("{} allocator events", s.memory.trace_entries);
        if s.memory.oom_events > 0 {
            contents.push_str(&format!(", {} out-of-memory events", s.memory.oom_events));
        }
        row.push(Cell::text(contents));
        row.push(Cell::text(&s.file));
        t.push(row);
    }
    for b in &inputs.benches {
        let ooms = b.results.rows.iter().filter(|r| r.oom).count();
        let mut row = vec![Cell::text(&b.label), Cell::text("bench results")];
        row.extend(run_cells(&RunName::default()));
        row.push(Cell::text("file name"));
        row.push(Cell::text(format!(
            "{} configurations ({ooms} OOM){}",
            b.results.rows.len(),
            b.results
                .device
                .as_ref()
                .map(|d| format!(" on {d}"))
                .unwrap_or_default()
        )));
        row.push(Cell::text(&b.file));
        t.push(row);
    }
    let mut notes = vec![
        "Runs are named from the run metadata a file carries (`collect --trace` writes model, ctx, batch, mode and precision), else from its file name (`..._{size}_ctx{N}_{fwd|forward|train}_{fp32|bf16}...`), else as `--label FILE=LABEL` says (a given label wins).".to_owned(),
    ];
    if !inputs.skipped.is_empty() {
        notes.push(format!(
            "{} files found in the folders were skipped; see [Skipped files](#skipped-files).",
            inputs.skipped.len()
        ));
    }
    ReportSection {
        id: "runs",
        title: "Runs".into(),
        blocks: vec![table_block(None, t, notes)],
    }
}

fn times(traces: &[&TraceRun]) -> ReportSection {
    let columns = [
        "run",
        "steps",
        "forward (ms)",
        "backward (ms)",
        "optimizer (ms)",
        "step (ms)",
    ];
    let mut wall = Table::new(columns);
    let mut kernel = Table::new(columns);
    for tr in traces {
        let p = &tr.profile;
        let steps = if p.measured_steps > 0 {
            Cell::Int(p.measured_steps as i64)
        } else {
            Cell::Missing
        };
        let mut w = vec![Cell::text(&tr.label), steps.clone()];
        let mut k = vec![Cell::text(&tr.label), steps];
        for name in ["forward", "backward", "optimizer"] {
            let f = phase(p, name);
            w.push(ms(f.and_then(|f| f.wall_ns_per_step)));
            k.push(ms(f.and_then(|f| f.kernel_ns_per_step)));
        }
        w.push(ms(p.step.as_ref().and_then(|s| s.wall_ns_per_step)));
        k.push(ms(p.step.as_ref().and_then(|s| s.kernel_ns_per_step)));
        wall.push(w);
        kernel.push(k);
    }
    ReportSection {
        id: "time_per_step",
        title: "Forward, backward and step time".into(),
        blocks: vec![
            Block::Text("Per measured step (NVTX ranges `step_N`; warm-up steps outside them are left out). Wall time is the NVTX range from push to pop on the CPU, which with a synchronize at the end of each pass is what a timer around the pass measures; GPU kernel time sums the durations of the kernels each pass launched (attributed by their launch call, any thread of the process). `-`: the run has no such pass (a forward-only run) or no step ranges.".into()),
            table_block(Some("Wall time per step"), wall, Vec::new()),
            table_block(Some("GPU kernel time per step"), kernel, Vec::new()),
        ],
    }
}

fn kernel_row(label: &str, pass: &str, k: &KernelShare, steps: usize) -> Vec<Cell> {
    vec![
        Cell::text(label),
        Cell::text(pass),
        Cell::text(display_name(&k.name, NAME_WIDTH)),
        Cell::text(k.class.label()),
        Cell::Float(k.share * 100.0, 1),
        if steps > 0 {
            Cell::Float(k.total_ns as f64 / steps as f64 / 1e6, 3)
        } else {
            Cell::Missing
        },
        k.instances_per_step
            .map_or(Cell::Missing, |c| Cell::Float(c, 1)),
    ]
}

const KERNEL_COLUMNS: [&str; 7] = [
    "run",
    "pass",
    "kernel",
    "class",
    "share %",
    "time/step (ms)",
    "calls/step",
];

/// Passes of a run in order, then its measured steps (`step`).
fn passes(p: &Profile) -> Vec<(&str, &PhaseProfile)> {
    let mut v: Vec<(&str, &PhaseProfile)> = p.phases.iter().map(|f| (f.name.as_str(), f)).collect();
    // With one pass (a forward-only run) the step would repeat it.
    if let (Some(s), true) = (&p.step, v.len() != 1) {
        v.push(("step", s));
    }
    // A trace without step or phase ranges still has its kernels.
    if v.is_empty() {
        v.push(("whole trace", &p.whole_trace));
    }
    v
}

fn top_kernels(traces: &[&TraceRun]) -> ReportSection {
    let mut t = Table::new(KERNEL_COLUMNS);
    for tr in traces {
        for (name, f) in passes(&tr.profile) {
            if let Some(k) = &f.top_kernel {
                t.push(kernel_row(&tr.label, name, k, f.steps));
            }
        }
    }
    ReportSection {
        id: "top_kernel_per_pass",
        title: "Top kernel per pass".into(),
        blocks: vec![
            Block::Text("The kernel (all launches of one demangled name) with the most GPU time in each pass of the measured steps: its share of the pass's kernel time, its time and launches per step. `step` is the whole measured step. Names are shortened for reading; `report.json` has them in full.".into()),
            table_block(None, t, Vec::new()),
        ],
    }
}

fn top_non_gemm(traces: &[&TraceRun]) -> ReportSection {
    let mut t = Table::new(KERNEL_COLUMNS);
    for tr in traces {
        for (name, f) in passes(&tr.profile) {
            // A pass without GEMMs (the optimizer) would repeat its top kernel.
            if f.gemm_ns == 0 {
                continue;
            }
            if let Some(k) = f.top_non_gemm.first() {
                t.push(kernel_row(&tr.label, name, k, f.steps));
            }
        }
    }
    ReportSection {
        id: "top_non_gemm_kernel",
        title: "Top non-GEMM kernel".into(),
        blocks: vec![
            Block::Text("The kernel with the most GPU time that is not a matrix product, per pass that has GEMMs (passes without any, such as the optimizer, are left out: their top kernel is above).".into()),
            table_block(None, t, Vec::new()),
        ],
    }
}

fn series_key(r: &RunName) -> Option<(String, String, Option<String>)> {
    Some((r.model.clone()?, r.mode.clone()?, r.precision.clone()))
}

fn gemm_section(traces: &[&TraceRun], charts: &mut Vec<NamedChart>) -> ReportSection {
    let entries: Vec<Entry<'_>> = traces
        .iter()
        .map(|tr| Entry {
            run: &tr.run,
            cell: pct(step_or_trace(&tr.profile).gemm_fraction),
        })
        .collect();
    let mut blocks = vec![Block::Text(
        "GEMM share of GPU kernel time, in percent. Inference is a forward-only run, training a full step (forward, backward and optimizer), both over the measured steps (the whole trace when a run has no step ranges). Per pass below.".into(),
    )];
    blocks.extend(matrix_blocks(
        "GEMM % of kernel time",
        &entries,
        &[("forward", "inference"), ("train", "training")],
        Vec::new(),
    ));

    let mut detail = Table::new([
        "run",
        "forward %",
        "backward %",
        "optimizer %",
        "step %",
        "GEMM time/step (ms)",
    ]);
    for tr in traces {
        let p = &tr.profile;
        let s = step_or_trace(p);
        detail.push(vec![
            Cell::text(&tr.label),
            pct(phase(p, "forward").and_then(|f| f.gemm_fraction)),
            pct(phase(p, "backward").and_then(|f| f.gemm_fraction)),
            pct(phase(p, "optimizer").and_then(|f| f.gemm_fraction)),
            pct(s.gemm_fraction),
            if s.steps > 0 {
                Cell::Float(s.gemm_ns as f64 / s.steps as f64 / 1e6, 3)
            } else {
                Cell::Missing
            },
        ]);
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
            row.push(Cell::Float(share * 100.0, 1));
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
        charts.push(NamedChart {
            stem: "kernel_classes".into(),
            chart: ChartData::Bars(class_bars(
                "GPU kernel time by class",
                "Share of the kernel time of the measured steps, per run",
                &bars,
            )),
        });
        blocks.push(Block::Plot {
            file: "kernel_classes.png".into(),
            caption: "GPU kernel time by class, per run".into(),
        });
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
            charts.push(NamedChart {
                stem: "kernel_classes_by_pass".into(),
                chart: ChartData::Bars(class_bars(
                    "GPU kernel time by class and pass",
                    "Share of each pass's kernel time over the measured steps",
                    &by_pass,
                )),
            });
            blocks.push(Block::Plot {
                file: "kernel_classes_by_pass.png".into(),
                caption: "GPU kernel time by class, per pass".into(),
            });
        }
    }

    if let Some(chart) = gemm_chart(traces) {
        charts.push(NamedChart {
            stem: "gemm_fraction".into(),
            chart: ChartData::Lines(chart),
        });
        blocks.push(Block::Plot {
            file: "gemm_fraction.png".into(),
            caption: "GEMM fraction against context length".into(),
        });
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
                let (Some(ctx), Some(f)) = (t.run.ctx, step_or_trace(&t.profile).gemm_fraction)
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
        title: "GEMM fraction of GPU kernel time".into(),
        subtitle: Some(
            "Measured steps; inference = forward-only runs (solid), training = forward + backward + optimizer (dashed); hollow points: reduced precision"
                .into(),
        ),
        x_label: "context length".into(),
        y_label: "GEMM % of kernel time".into(),
        x_ticks: ctxs.iter().map(u32::to_string).collect(),
        y_max: 100.0,
        series,
        width: 1100,
        height: 560,
    })
}

fn attention_section(traces: &[&TraceRun]) -> ReportSection {
    let mut t = Table::new([
        "run",
        "head_dim",
        "matmul QK+V (ms/step)",
        "softmax (ms/step)",
        "softmax/matmul time",
        "softmax/matmul wall",
        "FLOP ratio 5/(4·head_dim)",
        "time ratio ÷ FLOP ratio",
    ]);
    let mut forward_first: Vec<&TraceRun> = traces.to_vec();
    // A forward-only run's attention is the cleanest measure of a cell; training runs follow.
    forward_first.sort_by_key(|t| t.run.mode.as_deref() != Some("forward"));
    for tr in traces {
        let Some(a) = &tr.profile.attention else {
            continue;
        };
        let steps = tr.profile.measured_steps.max(1) as f64;
        t.push(vec![
            Cell::text(&tr.label),
            int(a.head_dim),
            Cell::Float(a.matmul_ns as f64 / steps / 1e6, 3),
            Cell::Float(a.softmax_ns as f64 / steps / 1e6, 3),
            a.ratio.map_or(Cell::Missing, |r| Cell::Float(r, 3)),
            a.wall_ratio.map_or(Cell::Missing, |r| Cell::Float(r, 3)),
            a.flop_ratio.map_or(Cell::Missing, |r| Cell::Float(r, 4)),
            match (a.ratio, a.flop_ratio) {
                (Some(r), Some(f)) if f > 0.0 => Cell::Float(r / f, 1),
                _ => Cell::Missing,
            },
        ]);
    }
    let mut model_ctx = Vec::new();
    for tr in forward_first {
        let Some(a) = &tr.profile.attention else {
            continue;
        };
        let mut run = tr.run.clone();
        // Both modes measure the forward pass's attention: one column per context length.
        run.mode = Some("any".into());
        model_ctx.push((run, a.ratio));
    }
    let entries: Vec<Entry<'_>> = model_ctx
        .iter()
        .map(|(run, ratio)| Entry {
            run,
            cell: ratio.map_or(Cell::Missing, |r| Cell::Float(r, 3)),
        })
        .collect();
    let mut blocks = vec![Block::Text(
        "Kernel time inside the NVTX ranges `attention_matmul_QK` and `attention_matmul_V` (matmul) against `attention_softmax` (softmax), in the forward passes of the measured steps. The FLOP ratio 5/(4·head_dim) is what the softmax would cost if time followed FLOPs: per attention score it does about 5 operations (max, subtract, exp, sum, divide) against 2·head_dim for each of the two matmuls. head_dim comes from the run metadata, else from the model size (small to xl: 64, 2.7B: 80).".into(),
    )];
    if t.rows.is_empty() {
        blocks.push(Block::Text(
            "No run has the attention ranges `attention_matmul_QK`, `attention_softmax` and `attention_matmul_V`.".into(),
        ));
    } else {
        blocks.extend(matrix_blocks(
            "softmax/matmul kernel time",
            &entries,
            &[("any", "")],
            vec!["Forward-only runs fill a cell first; a training run fills it otherwise.".into()],
        ));
        blocks.push(table_block(Some("Per run"), t, Vec::new()));
    }
    ReportSection {
        id: "softmax_vs_matmul",
        title: "Softmax against matmul in attention".into(),
        blocks,
    }
}

fn memory_section(inputs: &Inputs, charts: &mut Vec<NamedChart>) -> ReportSection {
    let reports = sorted_reports(inputs);
    let mut blocks = vec![Block::Text(
        "Peak allocated memory (MiB) from the PyTorch memory snapshots, as the caching allocator counts it: the highest point of the replayed allocator trace of the recorded step. Forward is a forward-only run, train step the peak of a full training step. `OOM`: the snapshot's trace has out-of-memory events.".into(),
    )];
    let entries: Vec<Entry<'_>> = reports
        .iter()
        .map(|r| Entry {
            run: &r.run,
            cell: if r.oom_events > 0 {
                oom()
            } else {
                Cell::Float(mib(r.peak_allocated_bytes), 2)
            },
        })
        .collect();
    blocks.extend(matrix_blocks(
        "Peak allocated (MiB)",
        &entries,
        &[("forward", "forward"), ("train", "train step")],
        Vec::new(),
    ));
    let pairs = precision_pairs(&reports);
    if !pairs.is_empty() {
        blocks.push(table_block(
            Some("Baseline (fp32) against autocast"),
            precision_table(&reports, &pairs),
            vec!["Runs of the same model, context length and mode; Δ = autocast − fp32 (negative: autocast needs less).".into()],
        ));
    }
    blocks.push(table_block(
        Some("Per snapshot"),
        peak_table(&reports),
        vec!["forward peak: the highest allocated bytes in the forward phase (found from the stack frames); step peak: the whole recorded step (training runs); before recording: allocated before the recorded step began (parameters, optimizer state).".into()],
    ));
    if !reports.is_empty() {
        let refs: Vec<&MemoryReport> = reports.iter().collect();
        charts.push(NamedChart {
            stem: "memory_categories".into(),
            chart: ChartData::Bars(categories_chart(&refs)),
        });
        blocks.push(Block::Plot {
            file: "memory_categories.png".into(),
            caption: "Memory at the peak by category".into(),
        });
    }
    let mut snaps: Vec<&super::SnapshotRun> = inputs.snapshots.iter().collect();
    snaps.sort_by(|a, b| run_order(&a.run, &a.label, &b.run, &b.label));
    let mut links = Vec::new();
    for s in snaps {
        if let Some(tl) = &s.timeline {
            let stem = format!("memory_timeline_{}", file_stem(&s.label));
            links.push((s.label.clone(), format!("{stem}.png")));
            charts.push(NamedChart {
                stem,
                chart: ChartData::Timeline(tl.clone()),
            });
        }
    }
    if !links.is_empty() {
        blocks.push(Block::Links {
            title: "Memory timelines (allocated and reserved over the recorded step, phases shaded, peak marked):".into(),
            links,
        });
    }
    ReportSection {
        id: "peak_memory",
        title: "Peak memory".into(),
        blocks,
    }
}

/// A label made safe for a file name.
pub fn file_stem(label: &str) -> String {
    let s: String = label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() {
        "run".into()
    } else {
        s
    }
}

fn bench_section(inputs: &Inputs) -> Option<ReportSection> {
    if inputs.benches.is_empty() {
        return None;
    }
    let mut blocks = vec![Block::Text(
        "`collect bench` results: host-clock step time (mean over the timed steps, after warm-up) and peak device memory per configuration. `OOM`: the configuration ran out of memory.".into(),
    )];
    for b in &inputs.benches {
        let mut rows: Vec<&super::bench::BenchRow> = b.results.rows.iter().collect();
        rows.sort_by(|x, y| run_order(&x.run, "", &y.run, ""));
        let modes = [
            ("forward", "forward"),
            ("forward-backward", "fwd+bwd"),
            ("train", "train"),
        ];
        let time: Vec<Entry<'_>> = rows
            .iter()
            .map(|r| Entry {
                run: &r.run,
                cell: if r.oom {
                    oom()
                } else {
                    r.mean_ms.map_or(Cell::Missing, |v| Cell::Float(v, 3))
                },
            })
            .collect();
        let peak: Vec<Entry<'_>> = rows
            .iter()
            .map(|r| Entry {
                run: &r.run,
                cell: if r.oom {
                    oom()
                } else {
                    r.peak_bytes
                        .map_or(Cell::Missing, |v| Cell::Float(mib(v), 1))
                },
            })
            .collect();
        let prefix = if inputs.benches.len() > 1 {
            format!("{}: ", b.label)
        } else {
            String::new()
        };
        blocks.extend(matrix_blocks(
            &format!("{prefix}mean step time (ms)"),
            &time,
            &modes,
            Vec::new(),
        ));
        blocks.extend(matrix_blocks(
            &format!("{prefix}peak memory (MiB)"),
            &peak,
            &modes,
            Vec::new(),
        ));
        let mut t = Table::new([
            "model",
            "ctx",
            "batch",
            "mode",
            "precision",
            "mean (ms)",
            "std (ms)",
            "median (ms)",
            "steps",
            "tokens/s",
            "peak (MiB)",
        ]);
        for r in rows {
            let or_oom = |c: Cell| if r.oom { oom() } else { c };
            t.push(vec![
                text(r.run.model.as_deref()),
                int(r.run.ctx),
                int(r.run.batch),
                text(r.run.mode.as_deref()),
                text(r.run.precision.as_deref()),
                or_oom(r.mean_ms.map_or(Cell::Missing, |v| Cell::Float(v, 3))),
                or_oom(r.std_ms.map_or(Cell::Missing, |v| Cell::Float(v, 3))),
                or_oom(r.median_ms.map_or(Cell::Missing, |v| Cell::Float(v, 3))),
                Cell::Int(r.steps as i64),
                or_oom(r.tokens_per_s.map_or(Cell::Missing, |v| Cell::Float(v, 0))),
                or_oom(
                    r.peak_bytes
                        .map_or(Cell::Missing, |v| Cell::Float(mib(v), 1)),
                ),
            ]);
        }
        blocks.push(folded_block(
            &format!("{prefix}every configuration: mean, standard deviation and median step time, throughput, peak memory"),
            t,
            Vec::new(),
        ));
    }
    Some(ReportSection {
        id: "bench",
        title: "Benchmark results".into(),
        blocks,
    })
}

fn skipped_section(inputs: &Inputs) -> Option<ReportSection> {
    if inputs.skipped.is_empty() {
        return None;
    }
    // One row per folder and reason: a folder of `nsys stats` CSVs is one line, not forty.
    let mut groups: Vec<(String, String, Vec<String>)> = Vec::new();
    for s in &inputs.skipped {
        let path = std::path::Path::new(&s.file);
        let folder = path
            .parent()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        let name = path
            .file_name()
            .map_or_else(|| s.file.clone(), |n| n.to_string_lossy().into_owned());
        match groups
            .iter_mut()
            .find(|(f, r, _)| *f == folder && *r == s.reason)
        {
            Some(g) => g.2.push(name),
            None => groups.push((folder, s.reason.clone(), vec![name])),
        }
    }
    let mut t = Table::new(["folder", "files", "reason", "first files"]);
    for (folder, reason, names) in &groups {
        let mut shown: Vec<String> = names.iter().take(SKIPPED_NAMED).cloned().collect();
        if names.len() > SKIPPED_NAMED {
            shown.push(format!("… {} more", names.len() - SKIPPED_NAMED));
        }
        t.push(vec![
            Cell::text(if folder.is_empty() { "." } else { folder }),
            Cell::Int(names.len() as i64),
            Cell::text(reason),
            Cell::text(shown.join(", ")),
        ]);
    }
    Some(ReportSection {
        id: "skipped",
        title: "Skipped files".into(),
        blocks: vec![table_block(
            None,
            t,
            vec!["Files found in the folders that are not profiles, or could not be read. `report.json` lists each under `inputs.skipped`.".into()],
        )],
    })
}

/// All sections and charts of a report over `inputs`.
pub fn build(inputs: &Inputs) -> Report {
    let traces = sorted_traces(inputs);
    let mut charts = Vec::new();
    let mut sections = vec![inventory(inputs)];
    if !traces.is_empty() {
        sections.push(times(&traces));
        sections.push(top_kernels(&traces));
        sections.push(top_non_gemm(&traces));
        sections.push(gemm_section(&traces, &mut charts));
        sections.push(attention_section(&traces));
    }
    if !inputs.snapshots.is_empty() {
        sections.push(memory_section(inputs, &mut charts));
    }
    sections.extend(bench_section(inputs));
    sections.extend(skipped_section(inputs));
    Report { sections, charts }
}
