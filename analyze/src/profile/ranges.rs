//! Which GPU work belongs to which NVTX range: steps, phases and their kernels.
//!
//! A kernel (or memcpy/memset) belongs to a range when the CUDA API call that launched it,
//! matched by correlation id within the same process, starts inside the range. Two modes
//! ([`Attribution`]) decide which threads count:
//!
//! - [`Attribution::Thread`] is Nsight Systems' rule (`nvtx_kern_sum`, `nvtx_gpu_proj_sum`): the
//!   launch call must be on the thread that pushed the range.
//! - [`Attribution::Process`], the default, accepts a launch from any thread of the range's process
//!   inside the range's time span. PyTorch pushes `backward` on the main thread, but autograd runs
//!   the backward pass, and launches its kernels, from a thread of its own; under the thread rule
//!   `backward` keeps only the dozen kernels the main thread launched (on
//!   `torch_small_ctx128_train_fp32`, 6 of the 2,772 kernels of the measured steps).
//!
//! Steps are the ranges whose name matches a pattern (`step_N` by default). When steps exist, a
//! phase instance counts only inside a step of its process, so warm-up iterations, whose
//! `forward`/`backward`/`optimizer` ranges lie outside any `step_N`, are left out of per-step
//! figures. This module selects ranges and collects their work; it computes no statistics.

use std::collections::HashSet;

use serde::Serialize;

use crate::model::trace::{Nanos, Range, Trace};

/// Which launch calls a range claims.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Attribution {
    /// Launch calls on the range's own thread only (Nsight Systems' rule).
    Thread,
    /// Launch calls on any thread of the range's process.
    #[default]
    Process,
}

impl Attribution {
    pub fn as_str(self) -> &'static str {
        match self {
            Attribution::Thread => "thread",
            Attribution::Process => "process",
        }
    }
}

impl std::str::FromStr for Attribution {
    type Err = String;
    fn from_str(s: &str) -> Result<Attribution, String> {
        match s {
            "thread" => Ok(Attribution::Thread),
            "process" => Ok(Attribution::Process),
            other => Err(format!(
                "unknown attribution `{other}` (expected thread or process)"
            )),
        }
    }
}

/// One piece of GPU work: an index into [`Trace::kernels`] or [`Trace::mem_ops`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GpuOp {
    Kernel(usize),
    MemOp(usize),
}

/// GPU work indexed by the (process, correlation id) of the call that launched it.
pub struct Launches<'a> {
    trace: &'a Trace,
    mode: Attribution,
    /// Sorted by key; one launch call may start several ops (a CUDA graph launch).
    by_corr: Vec<((u32, u64), GpuOp)>,
}

impl<'a> Launches<'a> {
    pub fn new(trace: &'a Trace, mode: Attribution) -> Launches<'a> {
        let mut by_corr: Vec<((u32, u64), GpuOp)> =
            Vec::with_capacity(trace.kernels.len() + trace.mem_ops.len());
        for (i, k) in trace.kernels.iter().enumerate() {
            by_corr.push(((k.pid, k.correlation_id), GpuOp::Kernel(i)));
        }
        for (i, m) in trace.mem_ops.iter().enumerate() {
            by_corr.push(((m.pid, m.correlation_id), GpuOp::MemOp(i)));
        }
        by_corr.sort_unstable_by_key(|(key, _)| *key);
        Launches {
            trace,
            mode,
            by_corr,
        }
    }

    pub fn mode(&self) -> Attribution {
        self.mode
    }

    /// Whether any API call is linked to GPU work (an export without the CUDA API table, or a
    /// trace without correlation ids, has none, and then no range gets any kernel).
    pub fn any_linked(&self) -> bool {
        self.trace
            .api_calls
            .iter()
            .any(|c| c.correlation_id != 0 && !self.ops_of(c.pid, c.correlation_id).is_empty())
    }

    fn ops_of(&self, pid: u32, corr: u64) -> &[((u32, u64), GpuOp)] {
        let key = (pid, corr);
        let lo = self.by_corr.partition_point(|(k, _)| *k < key);
        let hi = lo + self.by_corr[lo..].partition_point(|(k, _)| *k == key);
        &self.by_corr[lo..hi]
    }

    /// Call `f` for each GPU op whose launch call starts inside `range` (both ends included) in
    /// the range's process, and on its thread in thread mode.
    pub fn for_each_in(&self, range: &Range, mut f: impl FnMut(GpuOp)) {
        let calls = &self.trace.api_calls;
        let lo = calls.partition_point(|c| c.start < range.start);
        for call in calls[lo..].iter().take_while(|c| c.start <= range.end) {
            if call.correlation_id == 0 || call.pid != range.pid {
                continue;
            }
            if self.mode == Attribution::Thread && call.tid != range.tid {
                continue;
            }
            for (_, op) in self.ops_of(call.pid, call.correlation_id) {
                f(*op);
            }
        }
    }
}

/// One range instance and the GPU work attributed to it.
#[derive(Clone, Debug)]
pub struct Instance {
    /// Index into [`Trace::ranges`].
    pub range: usize,
    /// Index into the measured steps, when steps are in use.
    pub step: Option<usize>,
    /// Indices into [`Trace::kernels`].
    pub kernels: Vec<usize>,
    /// Indices into [`Trace::mem_ops`].
    pub mem_ops: Vec<usize>,
}

impl Instance {
    pub fn wall(&self, trace: &Trace) -> Nanos {
        trace.ranges[self.range].duration()
    }

    /// From the start of the first GPU op to the end of the last one (kernels and memory ops), as
    /// `nvtx_gpu_proj_sum` projects a range onto the GPU; `None` when the range launched nothing.
    pub fn projection(&self, trace: &Trace) -> Option<Nanos> {
        let spans = self
            .kernels
            .iter()
            .map(|&k| (trace.kernels[k].start, trace.kernels[k].end))
            .chain(
                self.mem_ops
                    .iter()
                    .map(|&m| (trace.mem_ops[m].start, trace.mem_ops[m].end)),
            );
        let (mut first, mut last) = (None::<Nanos>, None::<Nanos>);
        for (s, e) in spans {
            first = Some(first.map_or(s, |f| f.min(s)));
            last = Some(last.map_or(e, |l| l.max(e)));
        }
        Some(last? - first?)
    }
}

/// The instances of one phase (or of the steps themselves) that count.
#[derive(Clone, Debug, Default)]
pub struct Selection {
    /// Sorted by start.
    pub instances: Vec<Instance>,
    /// Distinct measured steps the instances fall in; without steps, the number of instances.
    pub steps: usize,
    /// Every range the filter matched in the trace, warm-up included.
    pub all_ranges: usize,
    pub all_wall: Nanos,
}

impl Selection {
    /// Every kernel of every instance (each kernel once).
    pub fn kernels(&self) -> impl Iterator<Item = usize> + '_ {
        self.instances
            .iter()
            .flat_map(|i| i.kernels.iter().copied())
    }

    pub fn mem_ops(&self) -> impl Iterator<Item = usize> + '_ {
        self.instances
            .iter()
            .flat_map(|i| i.mem_ops.iter().copied())
    }

    pub fn wall(&self, trace: &Trace) -> Nanos {
        self.instances.iter().map(|i| i.wall(trace)).sum()
    }

    pub fn projection(&self, trace: &Trace) -> Nanos {
        self.instances
            .iter()
            .filter_map(|i| i.projection(trace))
            .sum()
    }
}

/// The measured steps: ranges accepted by `is_step`, sorted by start (indices into
/// [`Trace::ranges`]).
pub fn find_steps(trace: &Trace, is_step: impl Fn(&Range) -> bool) -> Vec<usize> {
    let mut steps: Vec<usize> = (0..trace.ranges.len())
        .filter(|&i| is_step(&trace.ranges[i]))
        .collect();
    steps.sort_by_key(|&i| trace.ranges[i].start);
    steps
}

/// The step (index into `steps`) of the same process that contains `range`.
fn containing_step(trace: &Trace, steps: &[usize], range: &Range) -> Option<usize> {
    let n = steps.partition_point(|&s| trace.ranges[s].start <= range.start);
    // Steps do not overlap in practice; walking back also finds an enclosing one if they do.
    (0..n).rev().find(|&i| {
        let s = &trace.ranges[steps[i]];
        s.pid == range.pid && s.end >= range.end
    })
}

/// The instances of the ranges accepted by `matches`, each with the GPU work it launched. With
/// `steps` non-empty, only instances inside a step count (and the steps are the step ranges that
/// hold one); with `steps` empty every instance counts and is its own step. A kernel claimed by
/// an earlier instance (nested ranges of the same name) is not counted again.
pub fn select(
    trace: &Trace,
    launches: &Launches<'_>,
    steps: &[usize],
    matches: impl Fn(&Range) -> bool,
) -> Selection {
    let mut sel = Selection::default();
    let mut kernel_seen = vec![false; trace.kernels.len()];
    let mut mem_seen = vec![false; trace.mem_ops.len()];
    let mut step_ids = HashSet::new();
    for (i, range) in trace.ranges.iter().enumerate() {
        if !matches(range) {
            continue;
        }
        sel.all_ranges += 1;
        sel.all_wall += range.duration();
        let step = if steps.is_empty() {
            None
        } else {
            match containing_step(trace, steps, range) {
                Some(s) => Some(s),
                None => continue,
            }
        };
        let mut inst = Instance {
            range: i,
            step,
            kernels: Vec::new(),
            mem_ops: Vec::new(),
        };
        launches.for_each_in(range, |op| match op {
            GpuOp::Kernel(k) if !kernel_seen[k] => {
                kernel_seen[k] = true;
                inst.kernels.push(k);
            }
            GpuOp::MemOp(m) if !mem_seen[m] => {
                mem_seen[m] = true;
                inst.mem_ops.push(m);
            }
            _ => {}
        });
        if let Some(s) = step {
            step_ids.insert(s);
        }
        sel.instances.push(inst);
    }
    sel.instances
        .sort_by_key(|inst| trace.ranges[inst.range].start);
    sel.steps = if steps.is_empty() {
        sel.instances.len()
    } else {
        step_ids.len()
    };
    sel
}
