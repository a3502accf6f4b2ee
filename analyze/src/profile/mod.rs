//! `profile`: the answers a training-step profile is read for, from one trace.
//!
//! Per phase (`forward`, `backward`, `optimizer` or any named NVTX ranges): the number of
//! measured steps, wall time per step (NVTX), GPU-projected time per step, kernel time, the GEMM
//! fraction, the kernel with the most time (its share and calls per step), the top non-GEMM
//! kernels, and time by kernel class. Then the same for the measured steps as a whole and for
//! every kernel of the trace, and inside attention the kernel time of the
//! `attention_matmul_QK`/`attention_softmax`/`attention_matmul_V` ranges with the softmax/matmul
//! ratio beside the FLOP ratio 5/(4·head_dim).
//!
//! [`profile`] is a pure function of a [`Trace`], a [`Classifier`] and [`ProfileOptions`]; its
//! [`Profile`] serialises to the JSON of `analyze profile --format json` and
//! [`Profile::document`] lays it out as tables. Range selection and kernel attribution are in
//! [`ranges`]; this module only sums. Kernel figures count kernels only: memcpy and memset
//! time is reported beside them, and the GPU projection includes them as nsys does.

pub mod ranges;
mod tables;

use std::collections::HashMap;
use std::path::Path;

use regex::Regex;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::formats::run_metadata;
use crate::kernels::class::{Classifier, KernelClass};
use crate::kernels::label::display_name;
use crate::model::trace::{Nanos, StrId, Trace};
use crate::render::cells::truncate;

pub use self::ranges::Attribution;
use self::ranges::{find_steps, select, Launches, Selection};

/// The default step pattern: `step_0`, `step_1`, ...
pub const DEFAULT_STEPS: &str = r"^step_\d+$";
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
    /// How many non-GEMM kernels to list per phase.
    pub top: usize,
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

    let step_names = names_matching(trace, |n| opts.steps.is_match(n));
    let steps = find_steps(trace, |r| step_names.contains(&r.name));
    if steps.is_empty() && !trace.ranges.is_empty() {
        notes.push(format!(
            "no range matches the step pattern `{}`: every phase range counts and per-step figures are per range",
            opts.steps.as_str()
        ));
    }
    let step = (!steps.is_empty()).then(|| {
        let sel = select(trace, &launches, &[], |r| step_names.contains(&r.name));
        summarize_selection(trace, &mut cache, "measured steps", &sel, opts.top)
    });

    let mut phases = Vec::new();
    for name in &opts.phases {
        let Some(id) = trace.strings.lookup(name) else {
            if !trace.ranges.is_empty() {
                notes.push(format!("phase `{name}`: no NVTX range of that name"));
            }
            continue;
        };
        let sel = select(trace, &launches, &steps, |r| r.name == id);
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
        phases.push(summarize_selection(trace, &mut cache, name, &sel, opts.top));
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
    let whole_trace = summarize(
        trace,
        &mut cache,
        "whole trace",
        &all_kernels,
        &all_mem_ops,
        None,
        opts.top,
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

    Profile {
        file: trace.source.path.display().to_string(),
        attribution: opts.attribution,
        step_pattern: opts.steps.as_str().to_owned(),
        measured_steps: steps.len(),
        phases,
        step,
        whole_trace,
        attention,
        notes,
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

/// "ranges in this trace: ..." with the most frequent range names, to help pick `--phases`.
fn range_names_hint(trace: &Trace) -> Option<String> {
    let mut counts: HashMap<StrId, usize> = HashMap::new();
    for r in &trace.ranges {
        *counts.entry(r.name).or_default() += 1;
    }
    if counts.is_empty() {
        return None;
    }
    let mut names: Vec<(StrId, usize)> = counts.into_iter().collect();
    names.sort_by(|a, b| {
        b.1.cmp(&a.1)
            .then_with(|| trace.name(a.0).cmp(trace.name(b.0)))
    });
    const SHOWN: usize = 8;
    let list: Vec<String> = names
        .iter()
        .take(SHOWN)
        .map(|(n, c)| format!("`{}` x{c}", truncate(trace.name(*n), 60)))
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

fn per_step(v: f64, steps: usize) -> Option<f64> {
    (steps > 0).then(|| v / steps as f64)
}

/// Range figures of a phase: absent for the whole-trace row.
struct Ranged {
    steps: usize,
    ranges: usize,
    wall: Nanos,
    proj: Nanos,
    all_ranges: usize,
    all_wall: Nanos,
}

fn summarize_selection(
    trace: &Trace,
    cache: &mut ClassCache<'_>,
    name: &str,
    sel: &Selection,
    top: usize,
) -> PhaseProfile {
    let kernels: Vec<usize> = sel.kernels().collect();
    let mem_ops: Vec<usize> = sel.mem_ops().collect();
    let ranged = Ranged {
        steps: sel.steps,
        ranges: sel.instances.len(),
        wall: sel.wall(trace),
        proj: sel.projection(trace),
        all_ranges: sel.all_ranges,
        all_wall: sel.all_wall,
    };
    summarize(trace, cache, name, &kernels, &mem_ops, Some(ranged), top)
}

fn summarize(
    trace: &Trace,
    cache: &mut ClassCache<'_>,
    name: &str,
    kernel_ids: &[usize],
    mem_op_ids: &[usize],
    ranged: Option<Ranged>,
    top: usize,
) -> PhaseProfile {
    let steps = ranged.as_ref().map_or(0, |r| r.steps);
    // name -> (short name, total ns, launches)
    let mut by_name: HashMap<StrId, (StrId, i64, usize)> = HashMap::new();
    let mut by_class: HashMap<KernelClass, (i64, usize)> = HashMap::new();
    let (mut kernel_ns, mut gemm_ns) = (0i64, 0i64);
    for &k in kernel_ids {
        let kernel = &trace.kernels[k];
        let d = kernel.duration().0;
        kernel_ns += d;
        let e = by_name
            .entry(kernel.name)
            .or_insert((kernel.short_name, 0, 0));
        e.1 += d;
        e.2 += 1;
        let class = cache.get(trace, kernel.name);
        let c = by_class.entry(class).or_default();
        c.0 += d;
        c.1 += 1;
        if class == KernelClass::Gemm {
            gemm_ns += d;
        }
    }
    let (mut memcpy_ns, mut memset_ns) = (0i64, 0i64);
    for &m in mem_op_ids {
        let op = &trace.mem_ops[m];
        match KernelClass::of_mem_op(op.kind) {
            KernelClass::Memset => memset_ns += op.duration().0,
            _ => memcpy_ns += op.duration().0,
        }
    }
    let share = |ns: i64| {
        if kernel_ns > 0 {
            ns as f64 / kernel_ns as f64
        } else {
            0.0
        }
    };
    let mut names: Vec<(StrId, StrId, i64, usize)> = by_name
        .into_iter()
        .map(|(n, (short, t, c))| (n, short, t, c))
        .collect();
    // Most time first; the name breaks ties so the order never depends on hashing.
    names.sort_by(|a, b| {
        b.2.cmp(&a.2)
            .then_with(|| trace.name(a.0).cmp(trace.name(b.0)))
    });
    let mut kernel_share = |&(n, short, t, c): &(StrId, StrId, i64, usize)| KernelShare {
        name: trace.name(n).to_owned(),
        short_name: trace.name(short).to_owned(),
        display_name: display_name(trace.name(n), 80),
        class: cache.get(trace, n),
        total_ns: t,
        share: share(t),
        instances: c,
        instances_per_step: ranged.as_ref().and_then(|_| per_step(c as f64, steps)),
    };
    let top_kernel = names.first().map(&mut kernel_share);
    let top_non_gemm: Vec<KernelShare> = names
        .iter()
        .map(&mut kernel_share)
        .filter(|k| k.class != KernelClass::Gemm)
        .take(top)
        .collect();
    let mut classes: Vec<ClassShare> = by_class
        .into_iter()
        .map(|(class, (t, c))| ClassShare {
            class,
            total_ns: t,
            share: share(t),
            instances: c,
        })
        .collect();
    classes.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then(a.class.cmp(&b.class)));
    let per = |v: f64| ranged.as_ref().and_then(|_| per_step(v, steps));
    PhaseProfile {
        name: name.to_owned(),
        steps,
        ranges: ranged.as_ref().map_or(0, |r| r.ranges),
        wall_ns_per_step: ranged.as_ref().and_then(|r| per(r.wall.as_f64())),
        gpu_proj_ns_per_step: ranged.as_ref().and_then(|r| per(r.proj.as_f64())),
        kernel_ns,
        kernel_ns_per_step: per(kernel_ns as f64),
        kernels: kernel_ids.len(),
        gemm_ns,
        gemm_fraction: (kernel_ns > 0).then(|| gemm_ns as f64 / kernel_ns as f64),
        memcpy_ns,
        memset_ns,
        top_kernel,
        top_non_gemm,
        classes,
        all_ranges: ranged.as_ref().map_or(0, |r| r.all_ranges),
        all_wall_ns: ranged.as_ref().map_or(0, |r| r.all_wall.0),
    }
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

/// Load a classes file, or the built-in rules when `path` is `None`.
pub fn classifier(path: Option<&Path>) -> Result<Classifier> {
    match path {
        Some(p) => Classifier::load(p),
        None => Ok(Classifier::builtin()),
    }
}
