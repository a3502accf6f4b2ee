//! The profile's attribution handed out op by op: a [`ClaimSink`] attached to the engine receives
//! every piece of GPU work (kernel, memcpy, memset, graph execution traced as a whole) with the
//! measured step and the phase that claimed it, decided where the profile decides them (the
//! plan's `Plan::work`), and the kernel's class from the same classifier. A sink never re-derives
//! attribution: what it writes is what the profile summed.
//!
//! Claims come in batches from the engine's chunks, side by side on every core; a sink that
//! writes them out keeps nothing whole (`crate::export` writes them as Parquet row groups).

use std::borrow::Cow;

use crate::kernels::class::KernelClass;
use crate::model::trace::MemOpKind;
use crate::source::KernelTexts;

use crate::model::trace::Trace;

use super::plan::{Plan, What, Work};

/// Claims a chunk collects before it hands them to the sink.
pub const BATCH: usize = 1 << 13;

/// What a claimed op is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claimed {
    /// A kernel: its id in the chunk (named by [`ClaimSink::claims`]'s `kernel`) and its class.
    Kernel(u32, KernelClass),
    MemOp(MemOpKind),
    /// A graph execution traced as a whole, by graph id.
    Graph(u64),
}

/// One op as the profile attributed it.
#[derive(Clone, Copy, Debug)]
pub struct Claim {
    pub start: i64,
    /// Never before `start`.
    pub end: i64,
    pub device: u32,
    pub stream: u32,
    pub pid: u32,
    pub correlation_id: u64,
    pub what: Claimed,
    /// The measured step instance that claimed it (an index of [`ClaimNames::steps`]), if any.
    pub step: Option<u32>,
    /// The phase that claimed it (an index of [`ClaimNames::phases`]): the first of the
    /// profile's phases, in their order, whose instance claims it.
    pub phase: Option<u32>,
}

/// A measured step instance.
#[derive(Clone, Debug)]
pub struct StepRange {
    pub name: String,
    pub process: u32,
    /// Its range, an index into the ranges of the trace profiled.
    pub range: usize,
}

/// The names claims point at, known before the first claim.
#[derive(Clone, Debug, Default)]
pub struct ClaimNames {
    /// Each measured step instance.
    pub steps: Vec<StepRange>,
    /// The phases found, in the profile's order.
    pub phases: Vec<String>,
}

/// Receives the attributed ops of one profile run.
pub trait ClaimSink: Sync {
    /// Before any claim: the names steps and phases are given by.
    fn begin(&self, names: &ClaimNames);
    /// A batch of claims of one chunk; `kernel(id)` is the (name, short name) of a kernel id of
    /// that chunk.
    fn claims<'n>(&self, claims: &[Claim], kernel: &dyn Fn(u32) -> (Cow<'n, str>, Cow<'n, str>));
}

/// Hand `claims` to `sink` once a batch is full (or whatever there is, with `all`), the
/// chunk's kernels named from `kids` through `texts`.
pub(super) fn hand_over<N, T: KernelTexts<N>>(
    sink: &dyn ClaimSink,
    claims: &mut Vec<Claim>,
    kids: &[N],
    texts: &T,
    all: bool,
) {
    if claims.is_empty() || (!all && claims.len() < BATCH) {
        return;
    }
    let kernel = |kid: u32| {
        let names = &kids[kid as usize];
        (texts.text(names), texts.short_text(names))
    };
    sink.claims(claims, &kernel);
    claims.clear();
}

/// The phase (an index of [`ClaimNames::phases`]) that selection `s` of `plan` is, if it is one.
pub(super) fn claimed_phase(plan: &Plan, s: usize) -> Option<u32> {
    plan.phases.iter().position(|p| p.2 == s).map(|k| k as u32)
}

impl Claim {
    pub(super) fn of(w: &Work, end: i64, step: Option<u32>, phase: Option<u32>) -> Claim {
        Claim {
            start: w.start,
            end,
            device: w.device,
            stream: w.stream,
            pid: w.pid,
            correlation_id: w.corr,
            what: match w.what {
                What::Kernel(kid, class) => Claimed::Kernel(kid, class),
                What::MemOp(kind) => Claimed::MemOp(kind),
                What::Graph(id) => Claimed::Graph(id),
            },
            step,
            phase,
        }
    }
}

impl Plan {
    /// The names of the steps and phases claims point at.
    pub(super) fn claim_names(&self, trace: &Trace) -> ClaimNames {
        let steps = self.step_sel.map_or_else(Vec::new, |s| {
            (self.selections[s].sel.instances.iter())
                .map(|inst| {
                    let r = &trace.ranges[inst.range];
                    StepRange {
                        name: trace.name(r.name).to_owned(),
                        process: r.pid,
                        range: inst.range,
                    }
                })
                .collect()
        });
        ClaimNames {
            steps,
            phases: self.phases.iter().map(|p| p.1.clone()).collect(),
        }
    }
}
