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
//! figures. A step is a step of one process: two ranks that each ran 3 steps ran 3 steps, not 6.
//!
//! GPU work is kernels, memcpys and memsets, and CUDA graph executions traced as a whole
//! (without their kernels); a graph launched inside a range belongs to it like a kernel. With
//! node tracing the kernels inside a graph carry the graph launch's correlation id, so they
//! belong to the range of the launch. Ranges a profiler recorded on the GPU side (Kineto's
//! `gpu_user_annotation`, the device's view of a CPU annotation of the same name) are never
//! steps or phase instances: the CPU range they mirror is. PyTorch's `emit_nvtx` labels
//! (`aten::mm, seq = 45, op_id = 678`) group under their operator name ([`group_name`]). This
//! module selects ranges; which work each claims is `plan`'s, and it computes no
//! statistics.

use std::collections::{HashMap, HashSet};

use serde::Serialize;

pub use crate::attribution::operators::group_name;
use crate::formats::kineto::GPU_ANNOTATION_DOMAIN;
use crate::model::trace::{GraphExec, Nanos, Range, Trace};

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

/// For each graph execution, whether it is GPU work of its own: true unless kernels of that
/// launch were traced too (node tracing), which then stand for it. `traced` holds the (process,
/// correlation id) of the kernels traced inside graphs.
pub fn untraced(graph_execs: &[GraphExec], traced: &HashSet<(u32, u64)>) -> Vec<bool> {
    graph_execs
        .iter()
        .map(|g| !traced.contains(&(g.span.pid, g.span.correlation_id)))
        .collect()
}

/// [`untraced`] of a loaded trace's graph executions.
pub fn untraced_graphs(trace: &Trace) -> Vec<bool> {
    if trace.graph_execs.is_empty() {
        return Vec::new();
    }
    let traced: HashSet<(u32, u64)> = trace
        .kernels
        .iter()
        .filter(|k| k.graph_node_id.is_some())
        .map(|k| (k.span.pid, k.span.correlation_id))
        .collect();
    untraced(&trace.graph_execs, &traced)
}

/// Whether a range was recorded on the host (every NVTX range; Kineto's CPU annotations), not as
/// the GPU-side mirror of one (Kineto's `gpu_user_annotation`).
pub fn is_host_range(trace: &Trace, range: &Range) -> bool {
    !matches!(range.domain, Some(d) if trace.name(d) == GPU_ANNOTATION_DOMAIN)
}

/// The host range name (grouped as [`group_name`]) nearest to `wanted` ignoring case, when it is
/// near enough to be a slip of the keyboard: at most a third of `wanted`'s letters apart (and at
/// least one). For "did you mean" in the note of a phase that matched nothing.
pub fn closest_name<'t>(trace: &'t Trace, wanted: &str) -> Option<&'t str> {
    let wanted: Vec<char> = wanted.to_lowercase().chars().collect();
    let limit = (wanted.len() / 3).max(1);
    let mut names: Vec<&str> = trace
        .ranges
        .iter()
        .filter(|r| is_host_range(trace, r))
        .map(|r| group_name(trace.name(r.name)))
        .collect();
    names.sort_unstable();
    names.dedup();
    names
        .into_iter()
        .filter_map(|name| {
            let letters: Vec<char> = name.to_lowercase().chars().collect();
            let d = edit_distance(&wanted, &letters, limit)?;
            Some((d, name))
        })
        .min()
        .map(|(_, name)| name)
}

/// Levenshtein distance of `a` and `b` when it is at most `limit`.
fn edit_distance(a: &[char], b: &[char], limit: usize) -> Option<usize> {
    if a.len().abs_diff(b.len()) > limit {
        return None;
    }
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut row = vec![0; b.len() + 1];
    for (i, ca) in a.iter().enumerate() {
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let swap = prev[j] + usize::from(ca != cb);
            row[j + 1] = swap.min(prev[j + 1] + 1).min(row[j] + 1);
        }
        std::mem::swap(&mut prev, &mut row);
    }
    Some(prev[b.len()]).filter(|&d| d <= limit)
}

/// One range instance that counts.
#[derive(Clone, Debug)]
pub struct Instance {
    /// Index into [`Trace::ranges`].
    pub range: usize,
}

/// The instances of one phase (or of the steps themselves) that count.
#[derive(Clone, Debug, Default)]
pub struct Selection {
    /// Sorted by start.
    pub instances: Vec<Instance>,
    /// Measured steps the instances fall in, per process (the most of any process: a step is a
    /// step of one process); without steps, the instances of the process with the most.
    pub steps: usize,
    /// Step ranges the instances fall in, of all processes together; without steps, the number
    /// of instances. Equal to `steps` in a trace of one process.
    pub step_ranges: usize,
    /// Every range the filter matched in the trace, warm-up included.
    pub all_ranges: usize,
    pub all_wall: Nanos,
}

impl Selection {
    pub fn wall(&self, trace: &Trace) -> Nanos {
        self.instances
            .iter()
            .map(|i| trace.ranges[i.range].duration())
            .sum()
    }
}

/// The measured steps: host ranges accepted by `is_step`, sorted by start (indices into
/// [`Trace::ranges`]).
pub fn find_steps(trace: &Trace, is_step: impl Fn(&Range) -> bool) -> Vec<usize> {
    let mut steps: Vec<usize> = (0..trace.ranges.len())
        .filter(|&i| is_step(&trace.ranges[i]) && is_host_range(trace, &trace.ranges[i]))
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

/// The instances of the host ranges accepted by `matches`. With `steps` non-empty, only
/// instances inside a step count (and the steps are the step ranges that hold one); with `steps`
/// empty every instance counts and is its own step. Which work each claims is the plan's
/// (`plan`): a piece of work launched inside nested ranges of the same name counts once,
/// for the first instance.
pub fn select(trace: &Trace, steps: &[usize], matches: impl Fn(&Range) -> bool) -> Selection {
    let mut sel = Selection::default();
    let mut step_ids = HashSet::new();
    for (i, range) in trace.ranges.iter().enumerate() {
        if !matches(range) || !is_host_range(trace, range) {
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
        if let Some(s) = step {
            step_ids.insert(s);
        }
        sel.instances.push(Instance { range: i });
    }
    sel.instances
        .sort_by_key(|inst| trace.ranges[inst.range].start);
    if steps.is_empty() {
        // Every instance is its own step, counted per process.
        let mut per_process: HashMap<u32, usize> = HashMap::new();
        for inst in &sel.instances {
            *per_process.entry(trace.ranges[inst.range].pid).or_default() += 1;
        }
        sel.steps = per_process.values().copied().max().unwrap_or(0);
        sel.step_ranges = sel.instances.len();
    } else {
        let mut per_process: HashMap<u32, usize> = HashMap::new();
        for &s in &step_ids {
            *per_process.entry(trace.ranges[steps[s]].pid).or_default() += 1;
        }
        sel.steps = per_process.values().copied().max().unwrap_or(0);
        sel.step_ranges = step_ids.len();
    }
    sel
}

/// Steps per process: the most measured steps any one process ran (0 without steps).
pub fn steps_per_process(trace: &Trace, steps: &[usize]) -> usize {
    let mut per_process: HashMap<u32, usize> = HashMap::new();
    for &s in steps {
        *per_process.entry(trace.ranges[s].pid).or_default() += 1;
    }
    per_process.values().copied().max().unwrap_or(0)
}
