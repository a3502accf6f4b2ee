//! Figures per device and per process: what each (device, process) pair ran over the whole trace
//! and per measured step, which rank is the slowest, the CUDA graphs of the trace, and the
//! `--device`/`--process` filters.
//!
//! A pair is a process and a device it ran GPU work on; in a DDP run (one process per GPU) it is
//! a rank. Its kernel figures are sums of durations over every kernel the process ran on the
//! device (what SQL grouped by `deviceId` gives); its compute and idle time come from the
//! device's timeline ([`super::breakdown`]) between the first and last op of the pair, and per
//! step from the step's span on the device. The slowest rank is the straggler of
//! [`super::straggler`]: the one whose late arrival at the collectives the others wait for.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::Path;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::model::trace::{Nanos, Trace};

use super::breakdown::Breakdown;
use super::straggler::{Straggler, Waits};

/// One process on one device.
#[derive(Clone, Debug, Serialize)]
pub struct DeviceProfile {
    pub device: u32,
    pub process: u32,
    /// Kernel launches (and graph executions traced as a whole) of the process on the device.
    pub kernels: usize,
    /// Summed kernel durations, graph executions traced as a whole included.
    pub kernel_ns: i64,
    /// Time a kernel that is not communication ran, between the pair's first and last op.
    pub compute_ns: i64,
    /// Summed durations of its communication kernels.
    pub communication_ns: i64,
    /// Summed durations of its graph executions traced as a whole.
    pub graph_ns: i64,
    /// Time the device ran nothing, between the pair's first and last op.
    pub idle_ns: i64,
    /// From the pair's first op's start to its last op's end.
    pub span_ns: i64,
    /// Measured steps of the process that ran work on the device.
    pub steps: usize,
    /// Means per measured step, over the step's span on the device; `None` without steps.
    pub per_step: Option<StepFigures>,
    /// Time it waited at collectives for a later rank ([`super::straggler`]).
    pub waited_ns: i64,
    /// Time the other ranks waited at collectives for it.
    pub wait_caused_ns: i64,
    /// The rank the others wait for: the straggler, when one stands out.
    pub slowest: bool,
}

/// Means over a pair's measured steps.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct StepFigures {
    pub kernel_ns: f64,
    pub compute_ns: f64,
    pub communication_ns: f64,
    pub exposed_communication_ns: f64,
    /// Only memory copies running.
    pub memcpy_ns: f64,
    pub idle_ns: f64,
    pub span_ns: f64,
}

/// One measured step on one device: the span of the work the step launched there, and what the
/// device did during it.
#[derive(Clone, Debug, Serialize)]
pub struct StepBreakdown {
    /// The step range's name (`step_0`, `ProfilerStep#2`).
    pub step: String,
    pub process: u32,
    pub device: u32,
    /// Where the step's span on the device starts (the first op it launched there).
    pub start_ns: i64,
    /// Kernels the step launched on the device (a graph execution traced as a whole counts as
    /// one), and their summed durations.
    pub kernels: usize,
    pub kernel_ns: i64,
    pub breakdown: Breakdown,
}

/// The CUDA graphs of a trace.
#[derive(Clone, Debug, Default, Serialize)]
pub struct GraphSummary {
    /// Graph launches seen: graph executions traced as a whole, and launches whose kernels were
    /// traced node by node.
    pub launches: usize,
    /// Graph executions traced as a whole, without per-kernel detail.
    pub untraced_launches: usize,
    /// Their summed durations.
    pub graph_ns: i64,
}

/// The graphs of `trace`: `untraced[g]` says whether graph execution `g` is work of its own,
/// `traced` holds the (process, correlation id) of the kernels traced inside graphs.
pub fn graph_summary(
    trace: &Trace,
    untraced: &[bool],
    traced: &HashSet<(u32, u64)>,
) -> GraphSummary {
    let mut launches = traced.clone();
    let mut s = GraphSummary::default();
    for (i, g) in trace.graph_execs.iter().enumerate() {
        launches.insert((g.span.pid, g.span.correlation_id));
        if untraced[i] {
            s.untraced_launches += 1;
            s.graph_ns = s.graph_ns.saturating_add(g.duration().0);
        }
    }
    s.launches = launches.len();
    s
}

/// Accumulates one pair's ops.
#[derive(Clone, Copy, Default)]
pub(super) struct Pair {
    pub(super) kernels: usize,
    pub(super) kernel_ns: i64,
    pub(super) communication_ns: i64,
    pub(super) graph_ns: i64,
    pub(super) first: Option<Nanos>,
    pub(super) last: Option<Nanos>,
}

impl Pair {
    pub(super) fn cover(&mut self, start: Nanos, end: Nanos) {
        self.first = Some(self.first.map_or(start, |f| f.min(start)));
        self.last = Some(self.last.map_or(end, |l| l.max(end)));
    }
}

/// The profiles of (device, process) pairs, with `breakdown` of a device's window, `steps` and
/// the waits at collectives folded in, the straggler marked.
pub(super) fn profiles(
    pairs: BTreeMap<(u32, u32), Pair>,
    breakdown: impl Fn(u32, Nanos, Nanos) -> Breakdown,
    steps: &[StepBreakdown],
    waits: &Waits,
    straggler: Option<&Straggler>,
) -> Vec<DeviceProfile> {
    let out: Vec<DeviceProfile> = pairs
        .into_iter()
        .map(|((device, process), p)| {
            let (first, last) = (p.first.unwrap_or_default(), p.last.unwrap_or_default());
            let whole = breakdown(device, first, last);
            let mine: Vec<&StepBreakdown> = steps
                .iter()
                .filter(|s| s.device == device && s.process == process)
                .collect();
            let n = mine.len();
            let mean = |f: &dyn Fn(&StepBreakdown) -> i64| {
                mine.iter().map(|s| f(s) as f64).sum::<f64>() / n as f64
            };
            let per_step = (n > 0).then(|| StepFigures {
                kernel_ns: mean(&|s| s.kernel_ns),
                compute_ns: mean(&|s| s.breakdown.compute_ns),
                communication_ns: mean(&|s| s.breakdown.communication_ns),
                exposed_communication_ns: mean(&|s| s.breakdown.exposed_communication_ns),
                memcpy_ns: mean(&|s| s.breakdown.memcpy_ns),
                idle_ns: mean(&|s| s.breakdown.idle_ns),
                span_ns: mean(&|s| s.breakdown.span_ns),
            });
            DeviceProfile {
                device,
                process,
                kernels: p.kernels,
                kernel_ns: p.kernel_ns,
                compute_ns: whole.compute_ns,
                communication_ns: p.communication_ns,
                graph_ns: p.graph_ns,
                idle_ns: whole.idle_ns,
                span_ns: whole.span_ns,
                steps: n,
                per_step,
                waited_ns: waits.ranks.get(&(device, process)).map_or(0, |w| w.0),
                wait_caused_ns: waits.ranks.get(&(device, process)).map_or(0, |w| w.1),
                slowest: straggler.is_some_and(|s| (s.device, s.process) == (device, process)),
            }
        })
        .collect();
    out
}

/// Fail with one line naming what the trace has when `device` or `process` selects no GPU work;
/// `ops` holds the (device, process) of every piece of GPU work of the file at `path`.
pub fn check_filters(
    path: &Path,
    ops: &BTreeSet<(u32, u32)>,
    device: Option<u32>,
    process: Option<u32>,
) -> Result<()> {
    let list = |mut v: Vec<u32>| {
        v.sort_unstable();
        v.dedup();
        v.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
    };
    let ops = || ops.iter().copied();
    let fail = |message: String| {
        Err(Error::NothingToProfile {
            path: path.to_owned(),
            message,
        })
    };
    if let Some(d) = device {
        if !ops().any(|(x, _)| x == d) {
            return fail(format!(
                "no GPU work on device {d} (devices in this trace: {})",
                list(ops().map(|o| o.0).collect())
            ));
        }
    }
    if let Some(p) = process {
        if !ops().any(|(_, x)| x == p) {
            return fail(format!(
                "no GPU work of process {p} (processes with GPU work: {})",
                list(ops().map(|o| o.1).collect())
            ));
        }
    }
    if let (Some(d), Some(p)) = (device, process) {
        if !ops().any(|o| o == (d, p)) {
            return fail(format!("process {p} ran no GPU work on device {d}"));
        }
    }
    Ok(())
}
