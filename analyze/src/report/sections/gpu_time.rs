//! Where GPU time goes: per run, what the devices did during the measured steps (compute,
//! exposed communication, memcpy, memset, CUDA graphs, idle) and the longest idle gap; per
//! device and process for runs on several GPUs or ranks, with the slowest rank named. Every
//! figure is the one `analyze profile` gives for the run (its breakdown, `devices` and
//! `idle_gaps`).

use crate::profile::breakdown::Breakdown;
use crate::render::cells::{ms, opt_ms, opt_pct};
use crate::render::{Cell, Table};

use super::super::{Block, ReportSection, TraceRun};
use super::{step_or_trace, table_block};

fn share(b: &Breakdown, ns: i64) -> Cell {
    opt_pct((b.span_ns > 0).then(|| ns as f64 / b.span_ns as f64))
}

pub(super) fn gpu_time_section(traces: &[&TraceRun]) -> ReportSection {
    let mut runs = Table::new([
        "run",
        "steps",
        "span/step (ms)",
        "compute %",
        "exposed comm %",
        "memcpy %",
        "memset %",
        "graph %",
        "idle %",
        "comm (all) %",
        "longest idle gap (ms)",
        "host then in",
    ]);
    // Model FLOP utilisation, for the runs whose steps' FLOPs are known.
    let any_mfu = traces.iter().any(|t| t.profile.mfu.is_some());
    if any_mfu {
        runs.columns.push("MFU %".into());
    }
    let mut devices = Table::new([
        "run",
        "device",
        "process",
        "steps",
        "kernel/step (ms)",
        "compute/step (ms)",
        "comm/step (ms)",
        "exposed comm/step (ms)",
        "idle/step (ms)",
        "slowest",
    ]);
    let mut notes = Vec::new();
    for tr in traces {
        let p = &tr.profile;
        let f = step_or_trace(p);
        let b = &f.breakdown;
        let span = if f.ranges > 0 && f.steps > 0 {
            ms(b.span_ns as f64 / f.steps as f64)
        } else {
            ms(b.span_ns as f64)
        };
        let gap = p.idle_gaps.first();
        let host = gap.and_then(|g| g.api_call.as_deref().or(g.range.as_deref()));
        let mut row = vec![
            Cell::text(&tr.label),
            if p.measured_steps > 0 {
                Cell::Int(p.measured_steps as i64)
            } else {
                Cell::Missing
            },
            span,
            share(b, b.compute_ns),
            share(b, b.exposed_communication_ns),
            share(b, b.memcpy_ns),
            share(b, b.memset_ns),
            share(b, b.graph_ns),
            share(b, b.idle_ns),
            share(b, b.communication_ns),
            opt_ms(gap.map(|g| g.idle_ns as f64)),
            host.map_or(Cell::Missing, Cell::text),
        ];
        if any_mfu {
            row.push(opt_pct(p.mfu.as_ref().and_then(|m| m.mfu)));
        }
        runs.push(row);
        if p.devices.len() > 1 {
            for d in &p.devices {
                let mut row = vec![Cell::text(&tr.label)];
                row.extend(d.step_cells());
                row.push(Cell::text(if d.slowest { "slowest" } else { "" }));
                devices.push(row);
            }
            if let Some(s) = &p.straggler {
                let cost = match s.wait_caused_ns_per_step {
                    Some(ns) => format!("{:.3} ms per step", ns / 1e6),
                    None => format!("{:.3} ms in all", s.wait_caused_ns as f64 / 1e6),
                };
                notes.push(format!(
                    "{}: the slowest rank is device {} (process {}), the straggler: it arrives last at the collectives, and the others wait {cost} for it.",
                    tr.label, s.device, s.process
                ));
            }
        }
        if p.graphs.untraced_launches > 0 {
            notes.push(format!(
                "{}: {} CUDA graph launches without per-kernel detail ({:.3} ms); capture with `nsys profile --cuda-graph-trace=node` to see their kernels.",
                tr.label,
                p.graphs.untraced_launches,
                p.graphs.graph_ns as f64 / 1e6
            ));
        }
    }
    let mut blocks = vec![
        Block::Text("What the GPUs did during the measured steps (the whole trace for runs without step ranges): each step's span on each device, from the first GPU op it launched there to the end of the last, cut by what was running, by precedence compute ▸ CUDA graph ▸ communication ▸ memcpy ▸ memset ▸ idle, so the six parts make 100%. Comm (all) is all the time a communication kernel ran, hidden behind compute or not. The longest idle gap is the longest stretch with nothing running inside a step, with the CUDA call (or, outside any call, the NVTX range) the host was in when it began.".into()),
        table_block(Some("Per run"), runs, notes),
    ];
    if !devices.rows.is_empty() {
        blocks.push(table_block(
            Some("Per device and process"),
            devices,
            vec!["Per step: means over each process's measured steps, each over the step's span on the device.".into()],
        ));
    }
    ReportSection {
        id: "gpu_time",
        title: "Where GPU time goes".into(),
        blocks,
    }
}
