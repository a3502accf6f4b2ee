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
//! idle gaps. With `--by op`, the kernel time per PyTorch operator and each operator's place
//! under the GPU's roofs ([`operators`]).
//!
//! One engine computes all of it (`engine`): a [`crate::source::TraceSource`] (an nsys export
//! streamed, or a loaded trace) pushes its API calls and GPU work through the profile's plan
//! (`plan`: which step, phase and attention range claims each piece of work, summed there, by
//! the launch context of its call, `context`),
//! and one sweep of each device's timeline (`sweep`) gives every breakdown and the idle gaps.
//! [`profile_file`] reads a file, [`profile`] a trace already loaded; the [`Profile`]
//! serialises to the JSON of `analyze profile --format json` and [`Profile::document`] lays it
//! out as tables. Range selection is in [`ranges`], the breakdown's parts in [`breakdown`],
//! per-device figures in [`devices`]. Kernel figures count kernels, and CUDA graph executions
//! traced as a whole (class `cuda graph`, one launch each): memcpy and memset time is reported
//! beside them, and the GPU projection includes them as nsys does.

pub mod breakdown;
pub mod claims;
mod context;
pub mod devices;
mod engine;
pub mod mfu;
pub mod operators;
mod plan;
pub mod ranges;
pub mod ranks;
mod runs;
pub mod straggler;
mod summary;
mod sweep;
mod tables;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use regex::Regex;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::kernels::class::{Classifier, KernelClass};
use crate::model::trace::{Nanos, StrId, Trace};
use crate::render::cells::truncate;
use crate::source::loaded::LoadedSource;
use crate::source::many::Run;
use crate::source::{self, Opened, TraceSource};

use self::breakdown::{Breakdown, GapWindow, IdleGap};
use self::claims::ClaimSink;
use self::devices::{DeviceProfile, GraphSummary, StepBreakdown};
use self::ranges::group_name;
pub use self::ranges::Attribution;

/// Bytes kept per streamed kernel (the op for the sweep, sorting, sums) and per API call.
pub const PER_KERNEL: u64 = 48;
pub const PER_CALL: u64 = 8;

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
    /// Also sum the kernel time per PyTorch operator, with its roofline (`--by op`).
    pub operators: bool,
    /// The compute roof, TFLOP/s, over the table's figure for the trace's GPU.
    pub peak_tflops: Option<f64>,
    /// The memory roof, TB/s, over the table's figure.
    pub peak_tbps: Option<f64>,
    /// The FLOPs one measured step needs, for its model FLOP utilisation, over what the run
    /// metadata or the operator view say.
    pub model_flops_per_step: Option<f64>,
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
            operators: false,
            peak_tflops: None,
            peak_tbps: None,
            model_flops_per_step: None,
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
    /// The rank the others wait for at the collectives, when one stands out.
    pub straggler: Option<straggler::Straggler>,
    /// One row per rank when the trace holds several (processes or devices, in one file or one
    /// file each).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ranks: Vec<ranks::RankRow>,
    /// Per rank, what was added to its file's times to put every rank on one timeline (a run read
    /// from one file per rank).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub clock_offsets_ns: BTreeMap<u32, i64>,
    /// The operator view (`--by op`): per operator kernel time, calls, shapes, FLOPs, bytes and
    /// roofline, its keys at the top level of the JSON.
    /// The measured steps' model and hardware FLOP utilisation, where their FLOPs are known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mfu: Option<mfu::Mfu>,
    #[serde(flatten)]
    pub by_operator: Option<operators::OperatorView>,
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

/// Profile `trace`, a loaded trace read as a source like any other. Never fails: what is
/// missing is said in [`Profile::notes`] (a trace without kernels gives a profile of nothing;
/// [`check_profilable`] says why first, where that is an error).
pub fn profile(trace: &Trace, classifier: &Classifier, opts: &ProfileOptions) -> Profile {
    let mut source = LoadedSource::new(trace);
    let small = source.small_tables(true, true);
    small
        .and_then(|small| engine::run(&mut source, small, classifier, opts, false, None))
        .expect("a loaded trace reads without error")
        .0
}

/// Profile the file at `path`: an nsys export streams, anything else loads whole. A file
/// without kernels, or whose GPU work `--device`/`--process` leave empty, is an error naming it.
pub fn profile_file(
    path: &Path,
    classifier: &Classifier,
    opts: &ProfileOptions,
) -> Result<Profile> {
    match source::open(path, PER_KERNEL, PER_CALL)? {
        Opened::Export(mut export) => {
            let trace = export.small_tables(true, true)?;
            Ok(profile_source(&mut *export, trace, classifier, opts)?.0)
        }
        Opened::Loaded(trace) => {
            let mut source = LoadedSource::new(&trace);
            let small = source.small_tables(true, true)?;
            Ok(profile_source(&mut source, small, classifier, opts)?.0)
        }
    }
}

/// Profile the per-rank files `paths` (folders stand for the traces in them) as one run: read as
/// one source on one timeline ([`crate::source::many`]), with a rank table and each rank's clock
/// offset. One path that is a file is profiled as [`profile_file`] does.
pub fn profile_files(
    paths: &[PathBuf],
    classifier: &Classifier,
    opts: &ProfileOptions,
) -> Result<Profile> {
    let files = crate::source::many::expand(paths)?;
    if let [one] = &files[..] {
        return profile_file(one, classifier, opts);
    }
    let mut run = Run::open(&files, classifier, PER_KERNEL, PER_CALL)?;
    let trace = run.small_tables(true, true)?;
    Ok(profile_run(&mut run, trace, classifier, opts, None)?.0)
}

/// Profile the files of `run`, whose small tables are `trace`: one rank each, with a rank table
/// and each rank's clock offset; every attributed op handed to `sink` too, when there is one.
/// With how many kernels the run has.
pub fn profile_run(
    run: &mut Run,
    trace: Trace,
    classifier: &Classifier,
    opts: &ProfileOptions,
    sink: Option<&dyn ClaimSink>,
) -> Result<(Profile, usize)> {
    let (mut p, kernels) = profile_source_into(run, trace, classifier, opts, sink)?;
    let files = run.files();
    p.ranks = ranks::of_files(&p.devices, files);
    p.clock_offsets_ns = files.iter().map(|f| (f.rank, f.offset_ns)).collect();
    p.rank_the_straggler();
    let from = files[0].rank_from.words();
    p.notes.push(format!(
        "{} files read as one run, one rank each: ranks from {from}; clocks aligned to rank {}'s",
        files.len(),
        files[0].rank
    ));
    p.notes.extend(run.notes().iter().cloned());
    Ok((p, kernels))
}

/// Profile `source`, whose small tables (ranges, memory operations, graph executions, metadata)
/// are `trace`; with how many kernels it has. A source without kernels, or whose GPU work
/// `--device`/`--process` leave empty, is an error naming its file.
pub fn profile_source<S: TraceSource>(
    source: &mut S,
    trace: Trace,
    classifier: &Classifier,
    opts: &ProfileOptions,
) -> Result<(Profile, usize)> {
    profile_source_into(source, trace, classifier, opts, None)
}

/// [`profile_source`], every attributed op handed to `sink` as well ([`claims`]).
pub fn profile_source_into<S: TraceSource>(
    source: &mut S,
    trace: Trace,
    classifier: &Classifier,
    opts: &ProfileOptions,
    sink: Option<&dyn ClaimSink>,
) -> Result<(Profile, usize)> {
    engine::run(source, trace, classifier, opts, true, sink)
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

/// "ranges in this trace: ..." with the most frequent host range names (`emit_nvtx` labels grouped
/// under their operator), to help pick `--phases`.
fn range_names_hint(trace: &Trace) -> Option<String> {
    let mut counts: HashMap<&str, usize> = HashMap::new();
    // A profiler's GPU-side mirror of an annotation is the same range again: counted once.
    for r in trace
        .ranges
        .iter()
        .filter(|r| ranges::is_host_range(trace, r))
    {
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
