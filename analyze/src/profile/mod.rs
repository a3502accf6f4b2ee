//! `profile`: the answers a training-step profile is read for, from one trace.
//!
//! Per phase (`forward`, `backward`, `optimizer` or any named NVTX ranges): the number of
//! measured steps, wall time per step (NVTX), GPU-projected time per step, kernel time, the GEMM
//! fraction, the kernel with the most time (its share and calls per step), the top non-GEMM
//! kernels, time by kernel class, and where the GPU time went (compute, communication, memcpy,
//! memset, graph, idle). Then the same for the measured steps as a whole and for every kernel of
//! the trace, inside attention the kernel time of the
//! `attention_matmul_QK`/`attention_softmax`/`attention_matmul_V` ranges with the softmax/matmul
//! ratio beside the FLOP ratio 5/(4·head_dim), figures per device and process, and the longest
//! idle gaps.
//!
//! [`profile`] is a pure function of a [`Trace`], a [`Classifier`] and [`ProfileOptions`]; its
//! [`Profile`] serialises to the JSON of `analyze profile --format json` and
//! [`Profile::document`] lays it out as tables. Range selection and kernel attribution are in
//! [`ranges`], the timeline breakdown in [`breakdown`], per-device figures in [`devices`]; this
//! module only sums. Kernel figures count kernels, and CUDA graph executions traced as a whole
//! (class `cuda graph`, one launch each): memcpy and memset time is reported beside them, and the
//! GPU projection includes them as nsys does.

pub mod breakdown;
pub mod devices;
pub mod ranges;
mod stream;
mod summary;
mod tables;

use std::collections::HashMap;
use std::path::Path;

use regex::Regex;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::formats::run_metadata;
use crate::kernels::class::{Classifier, KernelClass};
use crate::model::trace::{Nanos, StrId, Trace};
use crate::render::cells::truncate;

use self::breakdown::{longest_idle_gaps, Breakdown, GapWindow, IdleGap, Timelines};
use self::devices::{device_profiles, graph_summary, DeviceProfile, GraphSummary, StepBreakdown};
pub use self::ranges::Attribution;
use self::ranges::{
    find_steps, group_name, select, steps_per_process, untraced_graphs, Launches, Selection,
};
pub use self::stream::profile_file;
use self::summary::{per_step, step_breakdowns, summarize, summarize_selection, Context, Work};

/// The default step pattern: `step_0`, `step_1`, ...
pub const DEFAULT_STEPS: &str = r"^step_\d+$";
/// The steps of a PyTorch profiler schedule, tried when no range matches [`DEFAULT_STEPS`] and
/// the pattern was left at its default.
pub const PROFILER_STEPS: &str = r"^ProfilerStep#\d+$";
/// The default phases.
pub const DEFAULT_PHASES: [&str; 3] = ["forward", "backward", "optimizer"];
/// The default attention ranges: QK matmul, softmax, V matmul.
pub const DEFAULT_ATTENTION: [&str; 3] = [
    "attention_matmul_QK",
    "attention_softmax",
    "attention_matmul_V",
];

/// What to profile and how.
#[derive(Clone, Debug)]
pub struct ProfileOptions {
    pub attribution: Attribution,
    /// Ranges whose names match are the measured steps.
    pub steps: Regex,
    /// Range names to report as phases, in this order.
    pub phases: Vec<String>,
    /// Range names of the QK matmul, the softmax and the V matmul inside attention.
    pub attention: [String; 3],
    /// Attention head dimension, for the FLOP ratio; else taken from the trace's run metadata.
    pub head_dim: Option<u32>,
    /// How many non-GEMM kernels (and idle gaps) to list.
    pub top: usize,
    /// Only the GPU work of this device (and the host activity of the processes that ran work
    /// on it).
    pub device: Option<u32>,
    /// Only the GPU work and host activity of this process.
    pub process: Option<u32>,
}

impl Default for ProfileOptions {
    fn default() -> ProfileOptions {
        ProfileOptions {
            attribution: Attribution::Process,
            steps: Regex::new(DEFAULT_STEPS).expect("valid"),
            phases: DEFAULT_PHASES.iter().map(|s| s.to_string()).collect(),
            attention: DEFAULT_ATTENTION.map(String::from),
            head_dim: None,
            top: 5,
            device: None,
            process: None,
        }
    }
}

/// A kernel (all launches of one demangled name) and its part of a phase.
#[derive(Clone, Debug, Serialize)]
pub struct KernelShare {
    /// Demangled name, as `nsys stats` groups kernels.
    pub name: String,
    pub short_name: String,
    /// A readable form for tables.
    pub display_name: String,
    pub class: KernelClass,
    pub total_ns: i64,
    /// Fraction (0..1) of the phase's kernel time.
    pub share: f64,
    /// Launches in the measured instances of the phase.
    pub instances: usize,
    pub instances_per_step: Option<f64>,
}

/// Time of one kernel class in a phase.
#[derive(Clone, Debug, Serialize)]
pub struct ClassShare {
    pub class: KernelClass,
    pub total_ns: i64,
    pub share: f64,
    pub instances: usize,
}

/// The figures of one phase, of the measured steps, or of the whole trace.
#[derive(Clone, Debug, Serialize)]
pub struct PhaseProfile {
    pub name: String,
    /// Measured steps holding the phase (every instance is a step when the trace has none).
    pub steps: usize,
    /// Range instances counted.
    pub ranges: usize,
    pub wall_ns_per_step: Option<f64>,
    pub gpu_proj_ns_per_step: Option<f64>,
    /// Kernel time of all counted instances.
    pub kernel_ns: i64,
    pub kernel_ns_per_step: Option<f64>,
    pub kernels: usize,
    pub gemm_ns: i64,
    /// GEMM kernel time over kernel time (0..1); `None` without kernels.
    pub gemm_fraction: Option<f64>,
    pub memcpy_ns: i64,
    pub memset_ns: i64,
    pub top_kernel: Option<KernelShare>,
    pub top_non_gemm: Vec<KernelShare>,
    pub classes: Vec<ClassShare>,
    /// Every range of this name in the trace, warm-up included, and their total wall time.
    pub all_ranges: usize,
    pub all_wall_ns: i64,
    /// Where the GPU time of the phase's spans went, summed over its instances and the devices
    /// each ran work on (see [`breakdown`]).
    pub breakdown: Breakdown,
}

/// Time inside one attention range.
#[derive(Clone, Debug, Serialize)]
pub struct RangeTime {
    pub name: String,
    pub ranges: usize,
    pub wall_ns: i64,
    pub gpu_proj_ns: i64,
    pub kernel_ns: i64,
    pub kernels: usize,
}

/// Softmax against matmul inside attention.
#[derive(Clone, Debug, Serialize)]
pub struct AttentionProfile {
    pub qk: RangeTime,
    pub softmax: RangeTime,
    pub v: RangeTime,
    /// Kernel time of the QK and V matmul ranges.
    pub matmul_ns: i64,
    /// Kernel time of the softmax ranges.
    pub softmax_ns: i64,
    /// `softmax_ns / matmul_ns`.
    pub ratio: Option<f64>,
    pub matmul_wall_ns: i64,
    pub softmax_wall_ns: i64,
    pub wall_ratio: Option<f64>,
    pub head_dim: Option<u32>,
    /// Softmax over matmul FLOPs, 5/(4·head_dim): per score, softmax does about 5 operations
    /// (max, subtract, exp, sum, divide) and the two matmuls 2·head_dim each.
    pub flop_ratio: Option<f64>,
}

/// Everything `analyze profile` reports about one trace.
#[derive(Clone, Debug, Serialize)]
pub struct Profile {
    pub file: String,
    pub attribution: Attribution,
    pub step_pattern: String,
    /// Step ranges found (0 when none matched the pattern).
    pub measured_steps: usize,
    pub phases: Vec<PhaseProfile>,
    /// All kernels launched inside the measured steps.
    pub step: Option<PhaseProfile>,
    /// Every kernel of the trace, wherever it was launched.
    pub whole_trace: PhaseProfile,
    pub attention: Option<AttentionProfile>,
    /// What the trace lacks or how figures were taken, one line each.
    pub notes: Vec<String>,
    /// Per device and process: kernel, communication, graph and idle time.
    pub devices: Vec<DeviceProfile>,
    /// CUDA graph launches, and those traced as a whole.
    pub graphs: GraphSummary,
    /// Each measured step on each device it ran work on.
    pub step_breakdown: Vec<StepBreakdown>,
    /// The longest stretches during which a device ran nothing inside the measured steps (inside
    /// each device's active span without steps), longest first.
    pub idle_gaps: Vec<IdleGap>,
}

/// Fail with one clear line when `trace` has nothing a profile can use.
pub fn check_profilable(trace: &Trace) -> Result<()> {
    if trace.kernels.is_empty() {
        let why = if trace
            .source
            .missing
            .iter()
            .any(|t| t == "CUPTI_ACTIVITY_KIND_KERNEL")
        {
            "no CUPTI_ACTIVITY_KIND_KERNEL table (CUDA kernels were not traced; profile with `nsys profile --trace=cuda,nvtx`)"
        } else {
            "the trace holds no GPU kernels"
        };
        return Err(Error::NothingToProfile {
            path: trace.source.path.clone(),
            message: why.to_owned(),
        });
    }
    Ok(())
}

/// Kernel classes by interned name, computed once per name.
struct ClassCache<'a> {
    classifier: &'a Classifier,
    classes: Vec<Option<KernelClass>>,
}

impl ClassCache<'_> {
    fn get(&mut self, trace: &Trace, name: StrId) -> KernelClass {
        let slot = &mut self.classes[name.0 as usize];
        *slot.get_or_insert_with(|| self.classifier.classify(trace.name(name)))
    }
}

/// Profile `trace`. Never fails: what is missing is said in [`Profile::notes`].
pub fn profile(trace: &Trace, classifier: &Classifier, opts: &ProfileOptions) -> Profile {
    let trace = &*devices::restrict(trace, opts.device, opts.process);
    let mut notes = Vec::new();
    let mut cache = ClassCache {
        classifier,
        classes: vec![None; trace.strings.len()],
    };
    let launches = Launches::new(trace, opts.attribution);
    if trace.ranges.is_empty() {
        notes.push(if trace.source.missing.iter().any(|t| t == "NVTX_EVENTS") {
            "no NVTX ranges (the export has no NVTX_EVENTS table): only whole-trace figures".into()
        } else {
            "no NVTX ranges: only whole-trace figures".into()
        });
    } else if !launches.any_linked() {
        notes.push(
            "no CUDA API call is linked to a kernel by correlation id (CUPTI_ACTIVITY_KIND_RUNTIME absent?): kernels cannot be attributed to ranges".into(),
        );
    }
    let untraced = untraced_graphs(trace);
    let communication: Vec<bool> = trace
        .kernels
        .iter()
        .map(|k| cache.get(trace, k.name) == KernelClass::Communication)
        .collect();
    let timelines = Timelines::new(trace, &communication, &untraced);
    let ctx = Context {
        trace,
        timelines: &timelines,
        top: opts.top,
    };

    let mut step_pattern = opts.steps.as_str().to_owned();
    let mut step_names = names_matching(trace, |n| opts.steps.is_match(n));
    if step_names.is_empty() && step_pattern == DEFAULT_STEPS {
        let profiler = Regex::new(PROFILER_STEPS).expect("valid");
        let found = names_matching(trace, |n| profiler.is_match(n));
        if !find_steps(trace, |r| found.contains(&r.name)).is_empty() {
            step_pattern = PROFILER_STEPS.to_owned();
            step_names = found;
        }
    }
    let steps = find_steps(trace, |r| step_names.contains(&r.name));
    if steps.is_empty() && !trace.ranges.is_empty() {
        notes.push(format!(
            "no range matches the step pattern `{}`: every phase range counts and per-step figures are per range",
            opts.steps.as_str()
        ));
    }
    let mut step_breakdown = Vec::new();
    let step = (!steps.is_empty()).then(|| {
        let sel = select(trace, &launches, &[], |r| step_names.contains(&r.name));
        step_breakdown = step_breakdowns(trace, &timelines, &sel);
        summarize_selection(&ctx, &mut cache, "measured steps", &sel)
    });

    let mut phases = Vec::new();
    for name in &opts.phases {
        let ids = names_matching(trace, |n| n == name || group_name(n) == name);
        if ids.is_empty() {
            if !trace.ranges.is_empty() || trace.strings.lookup(name).is_some() {
                notes.push(format!("phase `{name}`: no NVTX range of that name"));
            }
            continue;
        }
        let sel = select(trace, &launches, &steps, |r| ids.contains(&r.name));
        if sel.all_ranges == 0 {
            notes.push(format!("phase `{name}`: no NVTX range of that name"));
            continue;
        }
        if sel.instances.is_empty() {
            notes.push(format!(
                "phase `{name}`: {} range(s), none inside a measured step",
                sel.all_ranges
            ));
            continue;
        }
        phases.push(summarize_selection(&ctx, &mut cache, name, &sel));
    }

    if opts
        .phases
        .iter()
        .any(|p| !phases.iter().any(|f| &f.name == p))
    {
        if let Some(hint) = range_names_hint(trace) {
            notes.push(hint);
        }
    }

    let all_kernels: Vec<usize> = (0..trace.kernels.len()).collect();
    let all_mem_ops: Vec<usize> = (0..trace.mem_ops.len()).collect();
    let all_graphs: Vec<usize> = (0..trace.graph_execs.len())
        .filter(|&g| untraced[g])
        .collect();
    let mut whole_breakdown = Breakdown::default();
    for d in timelines.device_ids() {
        if let Some((s, e)) = timelines.span(d) {
            whole_breakdown.add(&timelines.breakdown(d, s, e));
        }
    }
    let whole_trace = summarize(
        &ctx,
        &mut cache,
        "whole trace",
        Work {
            kernels: &all_kernels,
            mem_ops: &all_mem_ops,
            graphs: &all_graphs,
        },
        None,
        whole_breakdown,
    );

    let head_dim = opts
        .head_dim
        .or_else(|| run_metadata::head_dim(&trace.source.run));
    let attention = attention(trace, &launches, &steps, opts, head_dim);
    if attention.is_none() && !trace.ranges.is_empty() {
        notes.push(format!(
            "attention: no ranges named `{}`, `{}` or `{}` in the measured steps",
            opts.attention[0], opts.attention[1], opts.attention[2]
        ));
    }

    let graphs = graph_summary(trace, &untraced);
    if graphs.untraced_launches > 0 {
        notes.push(format!(
            "{} of {} CUDA graph launches carry no per-kernel detail: their GPU time ({:.3} ms) counts as class `cuda graph`; `nsys profile --cuda-graph-trace=node` traces the kernels inside graphs",
            graphs.untraced_launches,
            graphs.launches,
            graphs.graph_ns as f64 / 1e6
        ));
    }
    let devices = device_profiles(
        trace,
        &timelines,
        &communication,
        &untraced,
        &step_breakdown,
    );
    let processes = steps
        .iter()
        .map(|&s| trace.ranges[s].pid)
        .collect::<std::collections::HashSet<u32>>()
        .len();
    if processes > 1 {
        notes.push(format!(
            "{processes} processes: a step is a step of one process; per-step kernel figures add up the work of every process in a step, wall and GPU-projected time per step are means over the processes"
        ));
    }
    if let Some(d) = opts.device {
        notes.push(format!("only the GPU work of device {d} (--device)"));
    }
    if let Some(p) = opts.process {
        notes.push(format!("only process {p} (--process)"));
    }
    let gap_windows: Vec<GapWindow> = if step_breakdown.is_empty() {
        timelines
            .device_ids()
            .into_iter()
            .filter_map(|d| {
                let (start, end) = timelines.span(d)?;
                Some(GapWindow {
                    device: d,
                    start,
                    end,
                    step: None,
                })
            })
            .collect()
    } else {
        step_gap_windows(&step_breakdown)
    };
    let idle_gaps = longest_idle_gaps(trace, &timelines, &gap_windows, opts.top);

    Profile {
        file: trace.source.path.display().to_string(),
        attribution: opts.attribution,
        step_pattern,
        measured_steps: steps_per_process(trace, &steps),
        phases,
        step,
        whole_trace,
        attention,
        notes,
        devices,
        graphs,
        step_breakdown,
        idle_gaps,
    }
}

/// Interned names of ranges whose name satisfies `f`.
fn names_matching(trace: &Trace, f: impl Fn(&str) -> bool) -> std::collections::HashSet<StrId> {
    let mut seen = HashMap::new();
    for r in &trace.ranges {
        seen.entry(r.name).or_insert_with(|| f(trace.name(r.name)));
    }
    seen.into_iter()
        .filter(|(_, m)| *m)
        .map(|(n, _)| n)
        .collect()
}

/// "ranges in this trace: ..." with the most frequent range names (`emit_nvtx` labels grouped
/// under their operator), to help pick `--phases`.
fn range_names_hint(trace: &Trace) -> Option<String> {
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for r in &trace.ranges {
        *counts.entry(group_name(trace.name(r.name))).or_default() += 1;
    }
    if counts.is_empty() {
        return None;
    }
    let mut names: Vec<(&str, usize)> = counts.into_iter().collect();
    names.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    const SHOWN: usize = 8;
    let list: Vec<String> = names
        .iter()
        .take(SHOWN)
        .map(|(n, c)| format!("`{}` x{c}", truncate(n, 60)))
        .collect();
    let more = names.len().saturating_sub(SHOWN);
    Some(format!(
        "ranges in this trace: {}{}",
        list.join(", "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        }
    ))
}

fn attention(
    trace: &Trace,
    launches: &Launches<'_>,
    steps: &[usize],
    opts: &ProfileOptions,
    head_dim: Option<u32>,
) -> Option<AttentionProfile> {
    let time = |name: &str| -> RangeTime {
        let sel = match trace.strings.lookup(name) {
            Some(id) => select(trace, launches, steps, |r| r.name == id),
            None => Selection::default(),
        };
        RangeTime {
            name: name.to_owned(),
            ranges: sel.instances.len(),
            wall_ns: sel.wall(trace).0,
            gpu_proj_ns: sel.projection(trace).0,
            kernel_ns: sel.kernels().map(|k| trace.kernels[k].duration().0).sum(),
            kernels: sel.kernels().count(),
        }
    };
    let [qk, softmax, v] = [0, 1, 2].map(|i| time(&opts.attention[i]));
    AttentionProfile::from_ranges(qk, softmax, v, head_dim)
}

impl AttentionProfile {
    /// The softmax-against-matmul figures of the three attention ranges' times; `None` when
    /// none of the ranges ran.
    pub(crate) fn from_ranges(
        qk: RangeTime,
        softmax: RangeTime,
        v: RangeTime,
        head_dim: Option<u32>,
    ) -> Option<AttentionProfile> {
        if qk.ranges + softmax.ranges + v.ranges == 0 {
            return None;
        }
        let ratio = |a: i64, b: i64| (b > 0).then(|| a as f64 / b as f64);
        let matmul_ns = qk.kernel_ns + v.kernel_ns;
        let matmul_wall_ns = qk.wall_ns + v.wall_ns;
        Some(AttentionProfile {
            matmul_ns,
            softmax_ns: softmax.kernel_ns,
            ratio: ratio(softmax.kernel_ns, matmul_ns),
            matmul_wall_ns,
            softmax_wall_ns: softmax.wall_ns,
            wall_ratio: ratio(softmax.wall_ns, matmul_wall_ns),
            head_dim,
            flop_ratio: head_dim.filter(|&d| d > 0).map(|d| 5.0 / (4.0 * d as f64)),
            qk,
            softmax,
            v,
        })
    }
}

/// Load a classes file, or the built-in rules when `path` is `None`.
pub fn classifier(path: Option<&Path>) -> Result<Classifier> {
    match path {
        Some(p) => Classifier::load(p),
        None => Ok(Classifier::builtin()),
    }
}

/// One idle-gap window per measured step on each device: the step's span there.
pub(crate) fn step_gap_windows(steps: &[StepBreakdown]) -> Vec<GapWindow> {
    steps
        .iter()
        .map(|s| GapWindow {
            device: s.device,
            start: Nanos(s.start_ns),
            end: Nanos(s.start_ns + s.breakdown.span_ns),
            step: Some(s.step.clone()),
        })
        .collect()
}
