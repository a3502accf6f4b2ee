//! Peak memory from the snapshots: a model × context matrix per precision (forward against train
//! step), fp32 against autocast, the per-snapshot peaks, the categories chart and one timeline
//! chart per snapshot; and memory by module: the largest module of each snapshot, its module
//! table and its module chart.

use crate::memory::charts::{categories_chart, modules_chart};
use crate::memory::modules::{is_fixed_row, BEFORE_RECORDING, NO_MODULE_FRAME, NO_STACK};
use crate::memory::summary::MemoryReport;
use crate::memory::tables::{
    modules_note, modules_table, peak_table, precision_pairs, precision_table, share_of_peak,
};
use crate::render::cells::mib;
use crate::render::plot::file_stem;
use crate::render::{Cell, Table};

use super::super::charts::ChartData;
use super::super::{Block, Inputs, NamedChart, ReportSection};
use super::matrix::{matrix_blocks, Entry};
use super::{add_plot, folded_block, oom, sorted_snapshots, table_block};

/// Modules listed per snapshot in the report's tables and charts.
const MODULES_TOP: usize = 10;

pub(super) fn memory_section(inputs: &Inputs, charts: &mut Vec<NamedChart>) -> ReportSection {
    let snaps = sorted_snapshots(inputs);
    let reports: Vec<MemoryReport> = snaps.iter().map(|s| s.memory.clone()).collect();
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
                mib(r.peak_allocated_bytes)
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
        add_plot(
            charts,
            &mut blocks,
            "memory_categories",
            ChartData::Bars(categories_chart(&refs)),
            "Memory at the peak by category",
        );
    }
    let mut links = Vec::new();
    for s in snaps {
        if let Some(tl) = &s.timeline {
            let stem = format!("memory_timeline_{}", file_stem(&s.label, "run"));
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

/// Memory by module: per snapshot the largest module that the stacks name and the share of the
/// peak that named modules hold, then each snapshot's module table (folded) and chart.
pub(super) fn modules_section(inputs: &Inputs, charts: &mut Vec<NamedChart>) -> ReportSection {
    let snaps = sorted_snapshots(inputs);
    let mut blocks = vec![Block::Text(format!(
        "Memory live at the peak (MiB) by module: the module path, or the innermost frame of the model's own code (`file.py:line function`: the user's code or a model library such as transformers, past PyTorch and the libraries that wrap layers), on each block's stack. Blocks whose stack names neither are counted in `{BEFORE_RECORDING}`, `{NO_STACK}` or `{NO_MODULE_FRAME}` (the autograd engine's backward has C++ frames only), so the rows of a snapshot add up to its peak."
    ))];
    let mut t = Table::new([
        "run",
        "peak MiB",
        "largest module",
        "MiB",
        "% peak",
        "named modules % peak",
    ]);
    for s in &snaps {
        let r = &s.memory;
        let named = r.modules.iter().filter(|m| !is_fixed_row(&m.name));
        let named_bytes = named.clone().map(|m| m.bytes_at_peak).sum();
        let largest = named.clone().next().filter(|m| m.bytes_at_peak > 0);
        t.push(vec![
            Cell::text(&s.label),
            mib(r.peak_allocated_bytes),
            largest.map_or(Cell::Missing, |m| Cell::text(&m.name)),
            largest.map_or(Cell::Missing, |m| mib(m.bytes_at_peak)),
            largest.map_or(Cell::Missing, |m| share_of_peak(r, m.bytes_at_peak)),
            share_of_peak(r, named_bytes),
        ]);
    }
    blocks.push(table_block(
        Some("Largest module at the peak"),
        t,
        vec!["named modules: the share of the peak in rows that name a module or the model's code; the rest was made before recording, without a stack, or by the autograd engine.".into()],
    ));
    let mut links = Vec::new();
    for s in &snaps {
        blocks.push(folded_block(
            &format!("Memory by module: {}", s.label),
            modules_table(&s.memory, MODULES_TOP),
            vec![modules_note(&s.memory)],
        ));
        let stem = format!("memory_modules_{}", file_stem(&s.label, "run"));
        links.push((s.label.clone(), format!("{stem}.png")));
        charts.push(NamedChart {
            stem,
            chart: ChartData::Bars(modules_chart(&s.memory, MODULES_TOP)),
        });
    }
    blocks.push(Block::Links {
        title: "Memory at the peak by module (the largest modules as bars, the rest in one):"
            .into(),
        links,
    });
    ReportSection {
        id: "memory_by_module",
        title: "Memory by module".into(),
        blocks,
    }
}
