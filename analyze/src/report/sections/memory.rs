//! Peak memory from the snapshots: a model × context matrix per precision (forward against train
//! step), fp32 against autocast, the per-snapshot peaks, the categories chart and one timeline
//! chart per snapshot.

use crate::memory::charts::categories_chart;
use crate::memory::summary::MemoryReport;
use crate::memory::tables::{peak_table, precision_pairs, precision_table};
use crate::render::cells::mib;
use crate::render::plot::file_stem;

use super::super::charts::ChartData;
use super::super::{Block, Inputs, NamedChart, ReportSection};
use super::matrix::{matrix_blocks, Entry};
use super::{add_plot, oom, sorted_snapshots, table_block};

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
