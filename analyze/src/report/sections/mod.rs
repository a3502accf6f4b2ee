//! The report's sections, built from the loaded runs, one module per topic: `runs` (the run
//! inventory and the skipped files), `kernels` (forward, backward and step time; top kernel per
//! pass; top non-GEMM kernel), `gemm` (GEMM fraction of inference against training, kernel
//! classes), `attention` (softmax against matmul), `gpu_time` (where GPU time goes: compute,
//! communication, memcpy, idle, per run and per device), `memory` (peak memory, forward against
//! training and fp32 against autocast; memory by module) and [`bench`] (bench results). Each
//! section is tables ([`Table`]) and charts; nothing here computes a figure that the single-file
//! analyses do not already give.
//!
//! Matrices (`matrix`) put the model size down the side and the context length (by mode)
//! across; a run whose label lacks a model, context length or mode appears in the per-run tables
//! only. A cell with no run is `-`; a run that ran out of memory reads `OOM`.

mod attention;
mod bench;
mod gemm;
mod gpu_time;
mod kernels;
mod matrix;
mod memory;
mod runs;

use crate::profile::{PhaseProfile, Profile};
use crate::render::{Cell, Table};

use super::charts::ChartData;
use super::{run_order, Block, Inputs, NamedChart, Report, SnapshotRun, TraceRun};

/// All sections and charts of a report over `inputs`.
pub fn build(inputs: &Inputs) -> Report {
    let traces = sorted_traces(inputs);
    let mut charts = Vec::new();
    let mut sections = vec![runs::inventory(inputs)];
    if !traces.is_empty() {
        sections.push(kernels::times(&traces));
        sections.push(kernels::top_kernels(&traces));
        sections.push(kernels::top_non_gemm(&traces));
        sections.push(gemm::gemm_section(&traces, &mut charts));
        sections.push(attention::attention_section(&traces));
        sections.push(gpu_time::gpu_time_section(&traces));
    }
    if !inputs.snapshots.is_empty() {
        sections.push(memory::memory_section(inputs, &mut charts));
        sections.push(memory::modules_section(inputs, &mut charts));
    }
    sections.extend(bench::bench_section(inputs));
    sections.extend(runs::skipped_section(inputs));
    Report { sections, charts }
}

/// Add `chart`, written as `<stem>.png`, and the block that shows it with `caption`.
fn add_plot(
    charts: &mut Vec<NamedChart>,
    blocks: &mut Vec<Block>,
    stem: &str,
    chart: ChartData,
    caption: &str,
) {
    charts.push(NamedChart {
        stem: stem.to_owned(),
        chart,
    });
    blocks.push(Block::Plot {
        file: format!("{stem}.png"),
        caption: caption.to_owned(),
    });
}

/// A run that ran out of memory.
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

/// The passes the runs' profiles report (`forward`, `backward`, `optimizer`, or what
/// `--phases` named), in the order the profiles list them.
fn pass_names(traces: &[&TraceRun]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for tr in traces {
        for f in &tr.profile.phases {
            if !names.contains(&f.name) {
                names.push(f.name.clone());
            }
        }
    }
    if names.is_empty() {
        names = crate::profile::DEFAULT_PHASES.map(str::to_owned).to_vec();
    }
    names
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

/// Snapshots in report order.
fn sorted_snapshots(inputs: &Inputs) -> Vec<&SnapshotRun> {
    let mut v: Vec<&SnapshotRun> = inputs.snapshots.iter().collect();
    v.sort_by(|a, b| run_order(&a.run, &a.label, &b.run, &b.label));
    v
}
