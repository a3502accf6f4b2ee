//! Time per step and the kernels that take it: forward, backward, optimizer and step time (wall
//! and GPU kernel time), the top kernel of each pass and the top non-GEMM kernel.

use crate::kernels::label::display_name;
use crate::profile::{KernelShare, PhaseProfile, Profile};
use crate::render::cells::{ms, opt_float, opt_ms, pct};
use crate::render::{Cell, Table};

use super::super::{Block, ReportSection, TraceRun};
use super::{pass_names, phase, table_block};

/// Kernel names in tables are cut to this many characters.
const NAME_WIDTH: usize = 70;

pub(super) fn times(traces: &[&TraceRun]) -> ReportSection {
    let passes = pass_names(traces);
    let mut columns = vec!["run".to_owned(), "steps".to_owned()];
    columns.extend(passes.iter().map(|p| format!("{p} (ms)")));
    columns.push("step (ms)".to_owned());
    let mut wall = Table::new(columns.iter().map(String::as_str));
    let mut kernel = Table::new(columns.iter().map(String::as_str));
    for tr in traces {
        let p = &tr.profile;
        let steps = if p.measured_steps > 0 {
            Cell::Int(p.measured_steps as i64)
        } else {
            Cell::Missing
        };
        let mut w = vec![Cell::text(&tr.label), steps.clone()];
        let mut k = vec![Cell::text(&tr.label), steps];
        for name in &passes {
            let f = phase(p, name);
            w.push(opt_ms(f.and_then(|f| f.wall_ns_per_step)));
            k.push(opt_ms(f.and_then(|f| f.kernel_ns_per_step)));
        }
        w.push(opt_ms(p.step.as_ref().and_then(|s| s.wall_ns_per_step)));
        k.push(opt_ms(p.step.as_ref().and_then(|s| s.kernel_ns_per_step)));
        wall.push(w);
        kernel.push(k);
    }
    ReportSection {
        id: "time_per_step",
        title: "Forward, backward and step time".into(),
        blocks: vec![
            Block::Text("Per measured step (NVTX ranges `step_N`, or what `--steps` names; warm-up steps outside them are left out), per pass (the ranges `forward`, `backward` and `optimizer`, or what `--phases` names). Wall time is the NVTX range from push to pop on the CPU, which with a synchronize at the end of each pass is what a timer around the pass measures; GPU kernel time sums the durations of the kernels each pass launched (attributed by their launch call, any thread of the process, or with `--attribution thread` the range's own thread). `-`: the run has no such pass (a forward-only run) or no step ranges.".into()),
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
        pct(k.share),
        if steps > 0 {
            ms(k.total_ns as f64 / steps as f64)
        } else {
            Cell::Missing
        },
        opt_float(k.instances_per_step, 1),
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

/// One row per pass of every run: the kernel `pick` chooses from the pass, if any.
fn kernel_table(
    traces: &[&TraceRun],
    pick: impl Fn(&PhaseProfile) -> Option<&KernelShare>,
) -> Table {
    let mut t = Table::new(KERNEL_COLUMNS);
    for tr in traces {
        for (name, f) in passes(&tr.profile) {
            if let Some(k) = pick(f) {
                t.push(kernel_row(&tr.label, name, k, f.steps));
            }
        }
    }
    t
}

pub(super) fn top_kernels(traces: &[&TraceRun]) -> ReportSection {
    let t = kernel_table(traces, |f| f.top_kernel.as_ref());
    ReportSection {
        id: "top_kernel_per_pass",
        title: "Top kernel per pass".into(),
        blocks: vec![
            Block::Text("The kernel (all launches of one demangled name) with the most GPU time in each pass of the measured steps: its share of the pass's kernel time, its time and launches per step. `step` is the whole measured step. Names are shortened for reading; `report.json` has them in full.".into()),
            table_block(None, t, Vec::new()),
        ],
    }
}

pub(super) fn top_non_gemm(traces: &[&TraceRun]) -> ReportSection {
    // A pass without GEMMs (the optimizer) would repeat its top kernel.
    let t = kernel_table(traces, |f| {
        (f.gemm_ns != 0).then(|| f.top_non_gemm.first()).flatten()
    });
    ReportSection {
        id: "top_non_gemm_kernel",
        title: "Top non-GEMM kernel".into(),
        blocks: vec![
            Block::Text("The kernel with the most GPU time that is not a matrix product, per pass that has GEMMs (passes without any, such as the optimizer, are left out: their top kernel is above).".into()),
            table_block(None, t, Vec::new()),
        ],
    }
}
