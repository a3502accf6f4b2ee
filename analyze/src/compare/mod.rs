//! Comparing two GPU traces: what got slower or faster, by kernel, by variant family, by class,
//! by pass and by range; and two memory snapshots ([`memory`]).
//!
//! Both traces may come from any reader (two nsys exports, two Kineto traces, or one of each):
//! kernels are matched by their GNU-demangled name ([`crate::kernels::name::canonical_names`]), so
//! nsys's and Kineto's spellings of one kernel line up. Kernels are also grouped by a caller-given
//! function of that name: the variant family ([`crate::kernels::name::family`], which folds tile
//! sizes, precisions and split-K variants of one GEMM together) and the kernel class
//! ([`Grouping::class`]; [`compare_traces`] uses a [`Classifier`], so fp32 `sm80_xmma_gemm_*` and
//! bf16 `nvjet_*` kernels, different families, meet in the `gemm` class). CUDA graphs executed
//! without per-kernel detail count as GPU work, one row per graph (`[CUDA graph 4]`). Ranges
//! (NVTX, or Kineto annotations) are compared by label (`domain:name`, PyTorch `emit_nvtx` labels
//! grouped under their operator), for labels present in both traces;
//! passes (forward, backward, optimizer, the measured steps) per step through
//! [`crate::profile::profile`] ([`passes`]), with the GEMM fraction of each. Rows are sorted by
//! impact: the absolute change in total time. When the two traces ran different amounts of work
//! (their kernel instance counts differ), totals measure the work, not the speed: [`per_call`]
//! then gives each kernel's time per call weighted by A's instances, and [`check_slower`]
//! judges that. Everything here is pure and returns data
//! ([`Comparison`], [`memory::MemoryComparison`], [`Regression`]); [`tables`] lays the results out
//! as tables and says what a failed [`check_slower`] prints. The command line decides the exit
//! code.

pub mod memory;
pub mod passes;
pub mod per_call;
pub mod tables;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;

use crate::kernels::class::{Classifier, KernelClass};
use crate::kernels::name::{canonical_names, family};
use crate::model::trace::{Nanos, SourceFormat, Trace};
use crate::profile::ranges::{group_name, untraced_graphs};
use crate::profile::{profile, ProfileOptions};

use self::passes::{pass_deltas, PassDelta};
use self::per_call::Work;
pub use self::tables::{document, DocumentOptions};

/// Count and total time of a kernel (or group, or range) in one trace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Side {
    pub instances: u64,
    pub total: Nanos,
}

impl Side {
    /// Average time per instance, in ns; `None` when there are none.
    pub fn average(&self) -> Option<f64> {
        (self.instances > 0).then(|| self.total.as_f64() / self.instances as f64)
    }

    fn add(&mut self, other: Side) {
        self.instances += other.instances;
        self.total += other.total;
    }
}

/// Whether a row is in both traces or only one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Presence {
    Both,
    OnlyA,
    OnlyB,
}

impl Presence {
    pub fn label(self) -> &'static str {
        match self {
            Presence::Both => "both",
            Presence::OnlyA => "only A",
            Presence::OnlyB => "only B",
        }
    }
}

/// One kernel, family or class in both traces.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Delta {
    /// The kernel name, family or class.
    pub name: String,
    /// The class of the kernels in the row (`mixed` when they differ).
    pub class: String,
    pub a: Side,
    pub b: Side,
}

impl Delta {
    /// B's total time minus A's.
    pub fn time_delta(&self) -> Nanos {
        self.b.total - self.a.total
    }

    /// The change in total time as a percentage of A's; `None` when A has none.
    pub fn time_delta_pct(&self) -> Option<f64> {
        pct(self.a.total, self.b.total)
    }

    pub fn presence(&self) -> Presence {
        match (self.a.instances > 0, self.b.instances > 0) {
            (true, false) => Presence::OnlyA,
            (false, true) => Presence::OnlyB,
            _ => Presence::Both,
        }
    }
}

fn pct(a: Nanos, b: Nanos) -> Option<f64> {
    (a.0 != 0).then(|| (b.0 - a.0) as f64 / a.0 as f64 * 100.0)
}

/// One range label in both traces.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PhaseDelta {
    /// `domain:name`, as `nsys stats` prints it (`:forward`).
    pub range: String,
    pub a: Side,
    pub b: Side,
    /// The labels as recorded, when the row groups `emit_nvtx` labels under their operator
    /// (`:aten::mm, op_id = 123`): the first [`RAW_LABELS_KEPT`] in order, of both traces.
    pub raw_labels: Vec<String>,
    /// How many distinct labels as recorded the row groups (0: the label is as recorded).
    pub raw_label_count: usize,
}

/// Recorded labels a grouped range row keeps.
pub const RAW_LABELS_KEPT: usize = 10;

impl PhaseDelta {
    pub fn time_delta(&self) -> Nanos {
        self.b.total - self.a.total
    }
    pub fn time_delta_pct(&self) -> Option<f64> {
        pct(self.a.total, self.b.total)
    }
}

/// What one side of a comparison is.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TraceSummary {
    pub path: String,
    pub format: SourceFormat,
    /// Sum of every kernel's duration.
    pub kernel_time: Nanos,
    pub kernel_instances: u64,
    pub distinct_kernels: usize,
    /// CUDA graph executions without per-kernel detail: each counts as one instance (a row
    /// `[CUDA graph N]`), however many kernels it ran.
    pub untraced_graph_executions: u64,
    /// Their summed durations (part of `kernel_time`).
    pub untraced_graph_time: Nanos,
}

impl TraceSummary {
    /// Time in CUDA graphs traced without per-kernel detail over all kernel time (0..1).
    pub fn untraced_share(&self) -> f64 {
        if self.kernel_time.0 > 0 {
            self.untraced_graph_time.as_f64() / self.kernel_time.as_f64()
        } else {
            0.0
        }
    }
}

/// How kernels are grouped besides by name. Both functions receive the GNU-demangled kernel
/// name.
pub struct Grouping<'a> {
    /// The variant family a kernel belongs to.
    pub family: &'a dyn Fn(&str) -> String,
    /// The class a kernel belongs to (GEMM, softmax, ...).
    pub class: &'a dyn Fn(&str) -> String,
}

/// Every kernel in one class, `other`: for comparisons that do not classify.
pub fn no_class(_: &str) -> String {
    "other".to_owned()
}

/// The class of a kernel by `classifier`, as [`Grouping::class`] wants it (`gemm`, `softmax`).
pub fn class_of(classifier: &Classifier) -> impl Fn(&str) -> String + '_ {
    move |name| classifier.classify(name).as_str().to_owned()
}

/// GEMM-class kernel time over all kernel time, in A and B (0..1; `None` without kernels).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct GemmFraction {
    pub a: Option<f64>,
    pub b: Option<f64>,
}

impl GemmFraction {
    /// The change in percentage points.
    pub fn delta_points(&self) -> Option<f64> {
        Some((self.b? - self.a?) * 100.0)
    }
}

impl Default for Grouping<'static> {
    fn default() -> Self {
        Grouping {
            family: &family,
            class: &no_class,
        }
    }
}

/// Two traces compared.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Comparison {
    pub a: TraceSummary,
    pub b: TraceSummary,
    /// Per kernel (GNU-demangled name), by impact.
    pub kernels: Vec<Delta>,
    /// Per variant family, by impact.
    pub families: Vec<Delta>,
    /// Per kernel class, by impact.
    pub classes: Vec<Delta>,
    /// Per range label present in both traces, by impact.
    pub phases: Vec<PhaseDelta>,
    /// Per pass and per step (forward, backward, optimizer, measured steps) where both traces
    /// have the pass; empty unless made by [`compare_traces`].
    pub passes: Vec<PassDelta>,
    /// Whole-trace GEMM fraction; `None` unless kernels were classified ([`compare_traces`]).
    pub gemm_fraction: Option<GemmFraction>,
}

/// Which figure a comparison leads with and `--fail-if-slower` judges.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Basis {
    /// Kernel time per call at A's instance counts ([`per_call::PerCall`]): the two traces ran
    /// different amounts of work, so totals would mistake less work for faster work.
    PerCall,
    /// GPU time per measured step: both traces have measured steps and ran the same work.
    PerStep,
    /// The whole traces' GPU kernel time.
    Total,
}

/// The figure a comparison leads with and `--fail-if-slower` judges.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Headline {
    pub basis: Basis,
    /// What is compared: `GPU kernel time per call at A's instance counts`, `GPU time per
    /// measured step` or `GPU kernel time`.
    pub figure: &'static str,
    pub a_ns: f64,
    pub b_ns: f64,
    /// B against A, in percent; `None` when A has none.
    pub change_pct: Option<f64>,
}

/// The name of the measured steps in [`Comparison::passes`].
const MEASURED_STEPS: &str = "measured steps";

/// Which side of a comparison does not see most of its kernels: most of its GPU time (in the
/// measured steps when both traces have them, else in the whole trace) ran in CUDA graphs traced
/// without per-kernel detail.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Unseen {
    pub a: bool,
    pub b: bool,
}

impl Unseen {
    pub fn any(&self) -> bool {
        self.a || self.b
    }
}

impl Comparison {
    /// Which sides run mostly in CUDA graphs whose kernels were not traced ([`Unseen`]).
    pub fn unseen(&self) -> Unseen {
        match self.passes.iter().find(|p| p.name == MEASURED_STEPS) {
            Some(p) => Unseen {
                a: p.a.mostly_untraced(),
                b: p.b.mostly_untraced(),
            },
            None => Unseen {
                a: self.a.untraced_share() > passes::MOSTLY_UNTRACED,
                b: self.b.untraced_share() > passes::MOSTLY_UNTRACED,
            },
        }
    }

    /// Whether `--fail-if-slower` may judge this comparison. GPU time per measured step counts
    /// graph executions as GPU time on both sides, and time per call is led only where instance
    /// counts measure the work; but whole-trace kernel time of a trace with CUDA graphs traced
    /// without per-kernel detail holds whatever else the trace ran (compilation, autotuning,
    /// warm-up), which the other side may not have: no verdict is drawn from it.
    pub fn judgeable(&self) -> bool {
        let untraced = self.a.untraced_graph_executions + self.b.untraced_graph_executions > 0;
        !(untraced && self.headline().basis == Basis::Total)
    }

    /// When the two traces ran different amounts of work ([`per_call::Work::differs`]) and
    /// their instance counts can say so (no CUDA graph ran without per-kernel detail) over
    /// kernels both ran, kernel time per call at A's instance counts; else GPU time per measured
    /// step (kernels and CUDA graphs executed without per-kernel detail, as `analyze profile`
    /// gives each trace's measured steps) when both traces have measured steps, so that work
    /// outside them (warm-up, compilation, autotuning) does not move it; else the whole traces'
    /// GPU kernel time.
    pub fn headline(&self) -> Headline {
        if self.per_call_leads() {
            let p = self.per_call();
            return Headline {
                basis: Basis::PerCall,
                figure: "GPU kernel time per call at A's instance counts",
                a_ns: p.a_ns,
                b_ns: p.b_ns,
                change_pct: p.delta_pct(),
            };
        }
        if let Some(h) = self.per_step() {
            return h;
        }
        Headline {
            basis: Basis::Total,
            figure: "GPU kernel time",
            a_ns: self.a.kernel_time.as_f64(),
            b_ns: self.b.kernel_time.as_f64(),
            change_pct: self.kernel_time_delta_pct(),
        }
    }

    /// GPU time per measured step, when both traces have measured steps.
    pub fn per_step(&self) -> Option<Headline> {
        let p = self.passes.iter().find(|p| p.name == MEASURED_STEPS)?;
        Some(Headline {
            basis: Basis::PerStep,
            figure: "GPU time per measured step",
            a_ns: p.a.kernel_ns_per_step?,
            b_ns: p.b.kernel_ns_per_step?,
            change_pct: p.kernel_delta_pct(),
        })
    }

    pub fn kernel_time_delta(&self) -> Nanos {
        self.b.kernel_time - self.a.kernel_time
    }

    /// The change in total kernel time as a percentage of A's; `None` when A has no kernels.
    pub fn kernel_time_delta_pct(&self) -> Option<f64> {
        pct(self.a.kernel_time, self.b.kernel_time)
    }
}

/// Instances and total time of every kernel, by GNU-demangled name, and of every CUDA graph
/// executed without per-kernel detail (`[CUDA graph 4]`): GPU work too.
pub fn kernel_totals(trace: &Trace) -> BTreeMap<String, Side> {
    let names = canonical_names(trace);
    let mut by_index: Vec<Side> = vec![Side::default(); names.names.len()];
    for (i, k) in trace.kernels.iter().enumerate() {
        by_index[names.of_kernel[i]].add(Side {
            instances: 1,
            total: k.duration(),
        });
    }
    let mut totals: BTreeMap<String, Side> = names.names.into_iter().zip(by_index).collect();
    let untraced = untraced_graphs(trace);
    for (g, exec) in trace.graph_execs.iter().enumerate() {
        if untraced[g] {
            totals.entry(exec.label()).or_default().add(Side {
                instances: 1,
                total: exec.duration(),
            });
        }
    }
    totals
}

/// Rows of `a` and `b` grouped by `key` (the identity for per-kernel rows), by impact.
pub fn deltas(
    a: &BTreeMap<String, Side>,
    b: &BTreeMap<String, Side>,
    key: &dyn Fn(&str) -> String,
    class: &dyn Fn(&str) -> String,
) -> Vec<Delta> {
    let mut rows: HashMap<String, Delta> = HashMap::new();
    for (side, totals) in [(0, a), (1, b)] {
        for (name, s) in totals {
            let k = key(name);
            let c = class(name);
            let row = rows.entry(k.clone()).or_insert_with(|| Delta {
                name: k,
                class: c.clone(),
                a: Side::default(),
                b: Side::default(),
            });
            if row.class != c {
                row.class = "mixed".to_owned();
            }
            if side == 0 {
                row.a.add(*s);
            } else {
                row.b.add(*s);
            }
        }
    }
    let mut rows: Vec<Delta> = rows.into_values().collect();
    rows.sort_by(|x, y| {
        y.time_delta()
            .0
            .abs()
            .cmp(&x.time_delta().0.abs())
            .then_with(|| x.name.cmp(&y.name))
    });
    rows
}

/// Instances and total time of every range label (`emit_nvtx` labels grouped under their
/// operator), with the labels as recorded that each groups.
fn range_totals(trace: &Trace) -> HashMap<String, (Side, BTreeSet<String>)> {
    let mut out: HashMap<String, (Side, BTreeSet<String>)> = HashMap::new();
    for r in &trace.ranges {
        let name = trace.name(r.name);
        let group = group_name(name);
        let domain = r.domain.map(|d| trace.name(d)).unwrap_or("");
        let e = out.entry(format!("{domain}:{group}")).or_default();
        e.0.add(Side {
            instances: 1,
            total: r.duration(),
        });
        if group.len() != name.len() {
            e.1.insert(trace.range_label(r));
        }
    }
    out
}

/// Ranges whose label is in both traces, by impact.
pub fn phase_deltas(a: &Trace, b: &Trace) -> Vec<PhaseDelta> {
    let ra = range_totals(a);
    let rb = range_totals(b);
    let mut rows: Vec<PhaseDelta> = ra
        .into_iter()
        .filter_map(|(label, (sa, raw_a))| {
            rb.get(&label).map(|(sb, raw_b)| {
                let raw: BTreeSet<&String> = raw_a.iter().chain(raw_b).collect();
                PhaseDelta {
                    range: label,
                    a: sa,
                    b: *sb,
                    raw_labels: raw
                        .iter()
                        .take(RAW_LABELS_KEPT)
                        .map(|s| s.to_string())
                        .collect(),
                    raw_label_count: raw.len(),
                }
            })
        })
        .collect();
    rows.sort_by(|x, y| {
        y.time_delta()
            .0
            .abs()
            .cmp(&x.time_delta().0.abs())
            .then_with(|| x.range.cmp(&y.range))
    });
    rows
}

/// Summed durations of the CUDA graph executions traced without per-kernel detail.
fn untraced_time(trace: &Trace) -> Nanos {
    let untraced = untraced_graphs(trace);
    trace
        .graph_execs
        .iter()
        .enumerate()
        .filter(|(g, _)| untraced[*g])
        .map(|(_, e)| e.duration())
        .sum()
}

fn summary(trace: &Trace, totals: &BTreeMap<String, Side>) -> TraceSummary {
    TraceSummary {
        path: trace.source.path.display().to_string(),
        format: trace.source.format,
        kernel_time: totals.values().map(|s| s.total).sum(),
        kernel_instances: totals.values().map(|s| s.instances).sum(),
        distinct_kernels: totals.len(),
        untraced_graph_executions: untraced_graphs(trace).iter().filter(|&&u| u).count() as u64,
        untraced_graph_time: untraced_time(trace),
    }
}

/// Compare trace `b` against trace `a`.
pub fn compare(a: &Trace, b: &Trace, grouping: &Grouping<'_>) -> Comparison {
    let ta = kernel_totals(a);
    let tb = kernel_totals(b);
    let identity = |n: &str| n.to_owned();
    Comparison {
        a: summary(a, &ta),
        b: summary(b, &tb),
        kernels: deltas(&ta, &tb, &identity, grouping.class),
        families: deltas(&ta, &tb, grouping.family, grouping.class),
        classes: deltas(&ta, &tb, grouping.class, grouping.class),
        phases: phase_deltas(a, b),
        passes: Vec::new(),
        gemm_fraction: None,
    }
}

/// Compare trace `b` against trace `a` with kernel classes: per-class deltas, the GEMM fraction
/// of each, and per-step pass deltas from both traces' profiles.
pub fn compare_traces(
    a: &Trace,
    b: &Trace,
    classifier: &Classifier,
    opts: &ProfileOptions,
) -> Comparison {
    let class = class_of(classifier);
    let grouping = Grouping {
        family: &family,
        class: &class,
    };
    let mut c = compare(a, b, &grouping);
    let gemm = KernelClass::Gemm.as_str();
    let share = |side: fn(&Delta) -> Nanos, total: Nanos| {
        (total.0 > 0).then(|| {
            let g: i64 = c
                .classes
                .iter()
                .filter(|d| d.name == gemm)
                .map(|d| side(d).0)
                .sum();
            g as f64 / total.0 as f64
        })
    };
    let a_share = share(|d| d.a.total, c.a.kernel_time);
    let b_share = share(|d| d.b.total, c.b.kernel_time);
    c.passes = pass_deltas(&profile(a, classifier, opts), &profile(b, classifier, opts));
    // A side whose time is mostly graphs without per-kernel detail has no GEMM fraction to
    // give: the GEMMs inside its graphs count as `cuda_graph`, and 0% would read as "no GEMMs".
    let unseen = c.unseen();
    c.gemm_fraction = Some(GemmFraction {
        a: a_share.filter(|_| !unseen.a),
        b: b_share.filter(|_| !unseen.b),
    });
    c
}

/// A `--fail-if-slower` check that failed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Regression {
    /// The allowed increase, in percent.
    pub threshold_pct: f64,
    /// The figure judged: [`Comparison::headline`]'s.
    pub basis: Basis,
    /// The measured increase of that figure, in percent (`None`: A had none).
    pub change_pct: Option<f64>,
    /// Kernels that got slower, largest rise first: in total time, or per call (weighted by
    /// A's instances) when the basis is per call.
    pub slowed: Vec<Delta>,
    /// How much work each trace ran.
    pub work: Work,
}

/// `Some` when B's [`Comparison::headline`] figure (time per call at A's instance counts when
/// the two ran different amounts of work, else GPU time per measured step, else total kernel
/// time) is more than `threshold_pct` percent above A's.
///
/// `None` too when the comparison cannot be judged ([`Comparison::judgeable`]): a side's CUDA
/// graphs ran without per-kernel detail and only whole-trace totals are left to compare.
pub fn check_slower(c: &Comparison, threshold_pct: f64) -> Option<Regression> {
    if !c.judgeable() {
        return None;
    }
    let headline = c.headline();
    let change = headline.change_pct;
    let failed = match change {
        Some(p) => p > threshold_pct,
        None => headline.basis != Basis::PerCall && headline.b_ns > 0.0,
    };
    if !failed {
        return None;
    }
    let slowed = if headline.basis == Basis::PerCall {
        c.per_call()
            .kernels
            .into_iter()
            .filter(|d| d.per_call_delta_ns().is_some_and(|x| x > 0.0))
            .collect()
    } else {
        let mut slowed: Vec<Delta> = c
            .kernels
            .iter()
            .filter(|d| d.time_delta().0 > 0)
            .cloned()
            .collect();
        slowed.sort_by(|x, y| {
            y.time_delta()
                .cmp(&x.time_delta())
                .then_with(|| x.name.cmp(&y.name))
        });
        slowed
    };
    Some(Regression {
        threshold_pct,
        basis: headline.basis,
        change_pct: change,
        slowed,
        work: c.work(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(instances: u64, total: i64) -> Side {
        Side {
            instances,
            total: Nanos(total),
        }
    }

    fn totals(rows: &[(&str, u64, i64)]) -> BTreeMap<String, Side> {
        rows.iter()
            .map(|&(n, i, t)| (n.to_owned(), side(i, t)))
            .collect()
    }

    #[test]
    fn rows_are_grouped_and_sorted_by_absolute_change() {
        let a = totals(&[
            ("cutlass_80_simt_sgemm_256x128_8x4_nn_align1", 2, 100),
            ("softmax", 1, 50),
            ("gone", 1, 5),
        ]);
        let b = totals(&[
            ("cutlass_80_simt_sgemm_128x64_8x4_nn_align1", 2, 40),
            ("softmax", 1, 120),
        ]);
        let fam = deltas(&a, &b, &family, &no_class);
        assert_eq!(fam.len(), 3);
        assert_eq!(fam[0].name, "softmax");
        assert_eq!(fam[0].time_delta(), Nanos(70));
        assert_eq!(fam[1].name, "cutlass_80_gemm_nn");
        assert_eq!((fam[1].a, fam[1].b), (side(2, 100), side(2, 40)));
        assert_eq!(fam[1].presence(), Presence::Both);
        assert_eq!(fam[2].presence(), Presence::OnlyA);
        assert_eq!(fam[2].time_delta_pct(), Some(-100.0));

        let per_kernel = deltas(&a, &b, &|n: &str| n.to_owned(), &no_class);
        assert_eq!(per_kernel.len(), 4);
        assert_eq!(
            per_kernel
                .iter()
                .filter(|d| d.presence() == Presence::OnlyB)
                .count(),
            1
        );
    }

    #[test]
    fn classes_plug_in_and_mixed_groups_say_so() {
        let a = totals(&[("gemm_a", 1, 10), ("relu", 1, 10)]);
        let b = totals(&[("gemm_b", 1, 30)]);
        let class = |n: &str| {
            if n.starts_with("gemm") {
                "gemm".to_owned()
            } else {
                "elementwise".to_owned()
            }
        };
        let rows = deltas(&a, &b, &class, &class);
        assert_eq!(rows[0].name, "gemm");
        assert_eq!(rows[0].time_delta(), Nanos(20));
        let everything = deltas(&a, &b, &|_: &str| "all".to_owned(), &class);
        assert_eq!(everything[0].class, "mixed");
    }

    #[test]
    fn slower_check_uses_total_kernel_time() {
        let mk = |a: i64, b: i64| Comparison {
            a: TraceSummary {
                path: "a".into(),
                format: SourceFormat::Kineto,
                kernel_time: Nanos(a),
                kernel_instances: 1,
                distinct_kernels: 1,
                untraced_graph_executions: 0,
                untraced_graph_time: Nanos(0),
            },
            b: TraceSummary {
                path: "b".into(),
                format: SourceFormat::Kineto,
                kernel_time: Nanos(b),
                kernel_instances: 1,
                distinct_kernels: 1,
                untraced_graph_executions: 0,
                untraced_graph_time: Nanos(0),
            },
            kernels: vec![Delta {
                name: "k".into(),
                class: "other".into(),
                a: side(1, a),
                b: side(1, b),
            }],
            families: Vec::new(),
            classes: Vec::new(),
            phases: Vec::new(),
            passes: Vec::new(),
            gemm_fraction: None,
        };
        assert!(
            check_slower(&mk(1000, 1050), 5.0).is_none(),
            "exactly 5% passes"
        );
        let r = check_slower(&mk(1000, 1051), 5.0).unwrap();
        assert_eq!(r.slowed.len(), 1);
        assert!((r.change_pct.unwrap() - 5.1).abs() < 1e-9);
        assert!(check_slower(&mk(1000, 900), 0.0).is_none());
        assert!(check_slower(&mk(0, 0), 0.0).is_none());
        assert!(check_slower(&mk(0, 1), 50.0).is_some());

        // With CUDA graphs traced as wholes and no measured steps, only whole-trace totals are
        // left: no verdict, however far apart they are.
        let mut c = mk(1000, 2290);
        c.b.untraced_graph_executions = 10;
        c.b.untraced_graph_time = Nanos(2000);
        assert!(!c.judgeable());
        assert!(check_slower(&c, 5.0).is_none());
        assert!(c.unseen().b && !c.unseen().a);
    }
}
