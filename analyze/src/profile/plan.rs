//! The profile's plan: which ranges are the measured steps, the phases and the attention ranges
//! (their instances, from the ranges alone), and for every piece of GPU work, the instance of
//! each that claims it, summed there as the rows stream by.
//!
//! A range claims the work whose launch call starts inside it ([`super::ranges`]). A call's
//! launch context is its process, thread and the piece of its process's host ranges its start
//! falls in ([`crate::attribution::ranges::Pieces`]); the calls are indexed by (process,
//! correlation id) with their context ([`crate::attribution::launches`]), so a kernel finds its
//! instances in constant time. What is summed per instance, per selection, per (device, process)
//! pair and for the whole trace is kept per chunk of rows ([`WorkChunk`]) and merged in order
//! ([`Merged`]); each op's start, end, device, process and kind go to the timeline sweep, a
//! chunk's ops buffered a run at a time and spilled when the buffer is full ([`super::runs`]).
//! With `--by op` a context also names the operator call its calls were made in, and each kernel
//! of the measured steps is summed under that call's operator as well ([`super::operators`]).

use std::collections::{BTreeMap, HashSet};

use crate::attribution::launches::{Cursor, LaunchIndex};
use crate::attribution::operators::Operators;
use crate::kernels::class::KernelClass;
use crate::model::trace::{MemOpKind, Nanos, Span, StrId, Trace};
use crate::stats::attribution::FastMap;

use super::breakdown::{COMMUNICATION, COMPUTE, GRAPH, KINDS, MEMCPY, MEMSET};
use super::claims::{claimed_phase, Claim};
pub(super) use super::context::{ApiChunk, Classes, Context, Ranges};
use super::devices::Pair;
use super::operators::{OpChunk, OpPlan, OpTotals};
use super::ranges::{closest_name, find_steps, group_name, is_host_range, select, Selection};
use super::runs::{Merge, Spill, RUN_OPS};
use super::summary::{Item, Totals};
use super::sweep::{Op, NO_STEP};
use super::{names_matching, Attribution, ProfileOptions, DEFAULT_STEPS, PROFILER_STEPS};

/// No instance.
pub(super) const NONE: u32 = u32::MAX;

/// A piece of GPU work.
#[derive(Clone, Copy)]
pub(super) enum What {
    /// The chunk's kernel id and the kernel's class.
    Kernel(u32, KernelClass),
    MemOp(MemOpKind),
    /// A graph execution traced as a whole, by graph id.
    Graph(u64),
}

pub(super) struct Work {
    pub(super) start: i64,
    pub(super) end: i64,
    pub(super) device: u32,
    pub(super) stream: u32,
    pub(super) pid: u32,
    pub(super) corr: u64,
    pub(super) what: What,
}

impl Work {
    /// The work of an op of the trace's small tables.
    pub(super) fn of(span: &Span, what: What) -> Work {
        Work {
            start: span.start.0,
            end: span.end.0,
            device: span.device,
            stream: span.stream,
            pid: span.pid,
            corr: span.correlation_id,
            what,
        }
    }
}

/// What one instance's work adds up to.
#[derive(Clone, Default)]
pub(super) struct InstanceSums {
    /// First start and last end of all its work.
    pub(super) span: Option<(i64, i64)>,
    /// Per device: first start, last end, kernels (and graphs), their time.
    pub(super) devices: Vec<(u32, i64, i64, usize, i64)>,
    /// Kernels only: how many, and their time (plain sum, as the attention figures add).
    pub(super) kernels: usize,
    pub(super) kernel_ns: i64,
}

impl InstanceSums {
    fn add(&mut self, w: &Work, end: i64) {
        let (s, e) = (w.start, end);
        self.span = Some(self.span.map_or((s, e), |(a, b)| (a.min(s), b.max(e))));
        let counted = !matches!(w.what, What::MemOp(_));
        let d = match self.devices.iter_mut().find(|d| d.0 == w.device) {
            Some(d) => d,
            None => {
                // Nearly every instance runs on one device: room for one, not the four a first
                // push makes (an instance of each range of the trace is summed).
                self.devices.reserve_exact(1);
                self.devices.push((w.device, s, e, 0, 0));
                self.devices.last_mut().expect("pushed")
            }
        };
        d.1 = d.1.min(s);
        d.2 = d.2.max(e);
        if counted {
            d.3 += 1;
            d.4 = d.4.saturating_add(e.saturating_sub(s));
        }
        if let What::Kernel(..) = w.what {
            self.kernels += 1;
            self.kernel_ns = self.kernel_ns.wrapping_add(e.saturating_sub(s));
        }
    }

    fn merge(&mut self, o: InstanceSums) {
        if let Some((s, e)) = o.span {
            self.span = Some(self.span.map_or((s, e), |(a, b)| (a.min(s), b.max(e))));
        }
        for d in o.devices {
            match self.devices.iter_mut().find(|x| x.0 == d.0) {
                Some(x) => {
                    x.1 = x.1.min(d.1);
                    x.2 = x.2.max(d.2);
                    x.3 += d.3;
                    x.4 = x.4.saturating_add(d.4);
                }
                None => self.devices.push(d),
            }
        }
        self.kernels += o.kernels;
        self.kernel_ns = self.kernel_ns.wrapping_add(o.kernel_ns);
    }
}

/// The sums of some work, by the chunk's kernel ids.
#[derive(Clone, Default)]
pub(super) struct Sums {
    /// Per kernel id: time and launches.
    pub(super) kernels: Vec<(i64, usize)>,
    /// Per graph id (in the order met): time and launches.
    pub(super) graphs: Vec<(u64, i64, usize)>,
    pub(super) memcpy_ns: i64,
    pub(super) memset_ns: i64,
}

impl Sums {
    fn add(&mut self, w: &Work, end: i64) {
        let d = end.saturating_sub(w.start);
        match w.what {
            What::Kernel(kid, _) => {
                if self.kernels.len() <= kid as usize {
                    self.kernels.resize(kid as usize + 1, (0, 0));
                }
                let e = &mut self.kernels[kid as usize];
                e.0 = e.0.saturating_add(d);
                e.1 += 1;
            }
            What::Graph(id) => match self.graphs.iter_mut().find(|g| g.0 == id) {
                Some(g) => {
                    g.1 = g.1.saturating_add(d);
                    g.2 += 1;
                }
                None => self.graphs.push((id, d, 1)),
            },
            What::MemOp(kind) => match KernelClass::of_mem_op(kind) {
                KernelClass::Memset => self.memset_ns = self.memset_ns.saturating_add(d),
                _ => self.memcpy_ns = self.memcpy_ns.saturating_add(d),
            },
        }
    }
}

/// The work of one chunk of rows.
pub(super) struct WorkChunk<N> {
    /// Kernels by the pair of ids that names them, and any others by their names.
    pub(super) id_index: FastMap<(i64, i64), u32>,
    pub(super) kid_index: FastMap<N, u32>,
    pub(super) kids: Vec<N>,
    pub(super) classes: Vec<KernelClass>,
    pub(super) cursor: Cursor,
    pub(super) scratch: Vec<u32>,
    /// Per selection: per instance, its sums; the selection's sums; the last instance met.
    pub(super) instances: Vec<FastMap<u32, InstanceSums>>,
    pub(super) selections: Vec<Sums>,
    pub(super) last_instance: Vec<Option<u32>>,
    pub(super) whole: Sums,
    pub(super) pairs: BTreeMap<(u32, u32), Pair>,
    /// The pair last met and its sums so far (added to `pairs` when another comes).
    pub(super) pair: Option<((u32, u32), Pair)>,
    /// The ops not yet spilled ([`RUN_OPS`] at most), and the first start and last end of the
    /// ops of each device.
    pub(super) ops: Vec<Op>,
    pub(super) spans: FastMap<u32, (i64, i64)>,
    /// Kernel rows read, kept or not.
    pub(super) kernels: usize,
    pub(super) any_linked: bool,
    /// Kernels and graphs no launch call claims that a step holds in time: count, time.
    pub(super) by_time: (usize, i64),
    pub(super) traced_graphs: HashSet<(u32, u64)>,
    /// The operator sums (`--by op`), and the views a piece of work counts in.
    pub(super) operators: OpChunk,
    pub(super) op_views: Vec<usize>,
    /// The attributed ops not yet handed to the claim sink (with one attached).
    pub(super) claims: Vec<Claim>,
}

impl<N> Default for WorkChunk<N> {
    fn default() -> WorkChunk<N> {
        WorkChunk {
            id_index: FastMap::default(),
            kid_index: FastMap::default(),
            kids: Vec::new(),
            classes: Vec::new(),
            cursor: Cursor::default(),
            scratch: Vec::new(),
            instances: Vec::new(),
            selections: Vec::new(),
            last_instance: Vec::new(),
            whole: Sums::default(),
            pairs: BTreeMap::new(),
            pair: None,
            ops: Vec::new(),
            spans: FastMap::default(),
            kernels: 0,
            any_linked: false,
            by_time: (0, 0),
            traced_graphs: HashSet::new(),
            operators: OpChunk::default(),
            op_views: Vec::new(),
            claims: Vec::new(),
        }
    }
}

impl<N: Clone + Eq + std::hash::Hash> WorkChunk<N> {
    /// The chunk's id of a kernel's names; `key`, where the source has one, is a pair of ids
    /// that names the kernel, cheaper to hash than the names.
    pub(super) fn kid(&mut self, names: &N, key: Option<(i64, i64)>) -> u32 {
        if let Some(key) = key {
            let next = self.kids.len() as u32;
            let k = *self.id_index.entry(key).or_insert(next);
            if k == next {
                self.kids.push(names.clone());
            }
            return k;
        }
        if let Some(&k) = self.kid_index.get(names) {
            return k;
        }
        let k = self.kids.len() as u32;
        self.kids.push(names.clone());
        self.kid_index.insert(names.clone(), k);
        k
    }
}

/// One selection: its instances (from the ranges), and which instance claims each context.
pub(super) struct Selected {
    pub(super) sel: Selection,
    /// The instance of each context, or [`NONE`].
    pub(super) of_ctx: Vec<u32>,
}

/// What to select and sum: the steps, the phases, the attention ranges.
pub(super) struct Plan {
    pub(super) step_pattern: String,
    pub(super) steps: Vec<usize>,
    /// Selection 0 is the steps (when there are any); then the phases found; then the three
    /// attention ranges.
    pub(super) selections: Vec<Selected>,
    pub(super) step_sel: Option<usize>,
    /// The steps' instances as (start, end, process, instance), by start: where work that no
    /// launch call claims falls in time.
    pub(super) step_times: Vec<(i64, i64, u32, u32)>,
    /// (position in the options' phases, phase name, selection) for each phase with instances.
    pub(super) phases: Vec<(usize, String, usize)>,
    /// Phases without instances, with the note that says why, in order.
    pub(super) phase_notes: Vec<(usize, String)>,
    pub(super) attention: [Option<usize>; 3],
    /// The operator calls and their views (`--by op`).
    pub(super) operators: Option<OpPlan>,
    /// Whether each piece of work is kept as a [`Claim`] for a sink.
    pub(super) claims: bool,
    /// Where the chunks' full buffers of ops go.
    pub(super) spill: Spill,
}

impl Plan {
    pub(super) fn new(
        trace: &Trace,
        opts: &ProfileOptions,
        ranges: &Ranges,
        ctxs: &[Context],
        operators: Option<Operators>,
    ) -> Plan {
        let mut step_pattern = opts.steps.as_str().to_owned();
        let mut step_names = names_matching(trace, |n| opts.steps.is_match(n));
        if step_names.is_empty() {
            // Case is not what tells steps apart: `Step_3` is a step to `^step_\d+$`.
            let any_case = regex::RegexBuilder::new(&step_pattern)
                .case_insensitive(true)
                .build();
            if let Ok(re) = any_case {
                step_names = names_matching(trace, |n| re.is_match(n));
                if !step_names.is_empty() {
                    step_pattern = format!("(?i){step_pattern}");
                }
            }
        }
        if step_names.is_empty() && step_pattern == DEFAULT_STEPS {
            let profiler = regex::Regex::new(PROFILER_STEPS).expect("valid");
            let found = names_matching(trace, |n| profiler.is_match(n));
            if !find_steps(trace, |r| found.contains(&r.name)).is_empty() {
                step_pattern = PROFILER_STEPS.to_owned();
                step_names = found;
            }
        }
        let steps = find_steps(trace, |r| step_names.contains(&r.name));
        let mut sels = Vec::new();
        let step_sel = (!steps.is_empty()).then(|| {
            sels.push(select(trace, &[], |r| step_names.contains(&r.name)));
            0
        });
        let mut phases = Vec::new();
        let mut phase_notes = Vec::new();
        for (i, name) in opts.phases.iter().enumerate() {
            let mut ids = names_matching(trace, |n| n == name || group_name(n) == name);
            if ids.is_empty() {
                // `Forward` finds `forward` when no range is named exactly as typed.
                let same = |n: &str| n.eq_ignore_ascii_case(name);
                ids = names_matching(trace, |n| same(n) || same(group_name(n)));
            }
            if ids.is_empty() {
                if !trace.ranges.is_empty() || trace.strings.lookup(name).is_some() {
                    let guess = closest_name(trace, name)
                        .map(|n| format!(" (did you mean `{n}`?)"))
                        .unwrap_or_default();
                    phase_notes.push((
                        i,
                        format!("phase `{name}`: no NVTX range of that name{guess}"),
                    ));
                }
                continue;
            }
            let sel = select(trace, &steps, |r| ids.contains(&r.name));
            if sel.all_ranges == 0 {
                phase_notes.push((i, format!("phase `{name}`: no NVTX range of that name")));
                continue;
            }
            if sel.instances.is_empty() {
                phase_notes.push((
                    i,
                    format!(
                        "phase `{name}`: {} range(s), none inside a measured step",
                        sel.all_ranges
                    ),
                ));
                continue;
            }
            phases.push((i, name.clone(), sels.len()));
            sels.push(sel);
        }
        let mut attention = [None; 3];
        for (i, name) in opts.attention.iter().enumerate() {
            let sel = match trace.strings.lookup(name) {
                Some(id) => select(trace, &steps, |r| r.name == id),
                None => Selection::default(),
            };
            attention[i] = Some(sels.len());
            sels.push(sel);
        }
        let selections: Vec<Selected> = sels
            .into_iter()
            .map(|sel| {
                // Instances by range, and for each context the first instance (in range order)
                // whose range holds the call's start, in its process (and thread).
                let mut by_range: FastMap<u32, u32> = FastMap::default();
                for (i, inst) in sel.instances.iter().enumerate() {
                    by_range.insert(inst.range as u32, i as u32);
                }
                let of_ctx = ctxs
                    .iter()
                    .map(|ctx| {
                        ranges
                            .sets
                            .get(ctx.set)
                            .iter()
                            .filter(|&&r| {
                                opts.attribution == Attribution::Process
                                    || trace.ranges[r as usize].tid == ctx.tid
                            })
                            .filter_map(|r| by_range.get(r).map(|&i| (*r, i)))
                            .min()
                            .map_or(NONE, |(_, i)| i)
                    })
                    .collect();
                Selected { sel, of_ctx }
            })
            .collect();
        // Each step's range, and its GPU-side mirror where the trace has one (a Kineto
        // `gpu_user_annotation` of the same name and process, spanning the step's GPU work).
        let mut step_times: Vec<(i64, i64, u32, u32)> = Vec::new();
        if let Some(s) = step_sel {
            let mut of_name: FastMap<(StrId, u32), u32> = FastMap::default();
            for (i, inst) in selections[s].sel.instances.iter().enumerate() {
                let r = &trace.ranges[inst.range];
                step_times.push((r.start.0, r.end.0, r.pid, i as u32));
                of_name.insert((r.name, r.pid), i as u32);
            }
            for r in trace.ranges.iter().filter(|r| !is_host_range(trace, r)) {
                if let Some(&i) = of_name.get(&(r.name, r.pid)) {
                    step_times.push((r.start.0, r.end.0, r.pid, i));
                }
            }
        }
        step_times.sort_unstable();
        let operators = operators.map(|ops| {
            let mut view_of_selection = vec![None; selections.len()];
            for (k, p) in phases.iter().enumerate() {
                view_of_selection[p.2] = Some(k + 1);
            }
            OpPlan {
                ops,
                of_ctx: ctxs.iter().map(|c| c.op).collect(),
                view_of_selection,
                views: phases.len() + 1,
            }
        });
        Plan {
            step_pattern,
            steps,
            selections,
            step_sel,
            step_times,
            phases,
            phase_notes,
            attention,
            operators,
            claims: false,
            spill: Spill::default(),
        }
    }

    /// The step instance whose range holds `t`: of process `pid` where one does, else any.
    fn step_at(&self, t: i64, pid: u32) -> Option<u32> {
        let n = self.step_times.partition_point(|s| s.0 <= t);
        let holding = self.step_times[..n].iter().rev().filter(|s| s.1 >= t);
        let mut any = None;
        for s in holding {
            if s.2 == pid {
                return Some(s.3);
            }
            any.get_or_insert(s.3);
        }
        any
    }

    /// Attribute one piece of work and add it up everywhere it counts.
    pub(super) fn work<N>(&self, c: &mut WorkChunk<N>, launches: &LaunchIndex, w: Work) {
        let end = w.end.max(w.start);
        if c.instances.len() < self.selections.len() {
            c.instances
                .resize_with(self.selections.len(), FastMap::default);
            c.selections
                .resize_with(self.selections.len(), Sums::default);
            c.last_instance.resize(self.selections.len(), None);
        }
        // The launch calls' contexts (none for an id of 0: no call).
        c.scratch.clear();
        if w.corr != 0 {
            let scratch = &mut c.scratch;
            launches.each(w.pid, w.corr, &mut c.cursor, false, |ctx| scratch.push(ctx));
        }
        if !c.scratch.is_empty() {
            c.any_linked = true;
        }
        // A kernel or graph no launch call claims (its call fell outside the capture, or a
        // Kineto trace holds only the end of its flow) counts in the step that holds its start
        // in time, in its process where it has one there.
        let by_time = match (self.step_sel, &w.what) {
            (Some(s), What::Kernel(..) | What::Graph(_)) if c.scratch.is_empty() => {
                self.step_at(w.start, w.pid).map(|inst| (s, inst))
            }
            _ => None,
        };
        if by_time.is_some() {
            c.by_time.0 += 1;
            c.by_time.1 = c.by_time.1.saturating_add(end.saturating_sub(w.start));
        }
        c.op_views.clear();
        if self.operators.is_some() && self.step_sel.is_none() {
            c.op_views.push(0);
        }
        // The step instance that claims the op, for the timeline sweep (and a claim sink), and
        // for a claim sink the first phase that claims it.
        let mut step = NO_STEP;
        let mut phase = None;
        for (s, sel) in self.selections.iter().enumerate() {
            let inst = c
                .scratch
                .iter()
                .map(|&ctx| sel.of_ctx[ctx as usize])
                .min()
                .or_else(|| by_time.filter(|b| b.0 == s).map(|b| b.1))
                .unwrap_or(NONE);
            if inst == NONE {
                continue;
            }
            if Some(s) == self.step_sel {
                step = inst;
            } else if self.claims && phase.is_none() {
                phase = claimed_phase(self, s);
            }
            c.instances[s].entry(inst).or_default().add(&w, end);
            c.selections[s].add(&w, end);
            if let Some(ops) = &self.operators {
                ops.claimed(&mut c.op_views, s, self.step_sel);
            }
        }
        if let Some(ops) = &self.operators {
            let d = end.saturating_sub(w.start);
            ops.work(&mut c.operators, &mut c.op_views, &c.scratch, w.what, d);
        }
        c.whole.add(&w, end);
        if self.claims {
            let step = (step != NO_STEP).then_some(step);
            c.claims.push(Claim::of(&w, end, step, phase));
        }
        let key = (w.device, w.pid);
        if c.pair.as_ref().is_none_or(|p| p.0 != key) {
            if let Some((k, p)) = c.pair.take() {
                merge_pair(c.pairs.entry(k).or_default(), &p);
            }
            c.pair = Some((key, Pair::default()));
        }
        let pair = &mut c.pair.as_mut().expect("set above").1;
        let d = end.saturating_sub(w.start);
        match w.what {
            What::Kernel(_, class) => {
                pair.kernels += 1;
                pair.kernel_ns = pair.kernel_ns.saturating_add(d);
                if class == KernelClass::Communication {
                    pair.communication_ns = pair.communication_ns.saturating_add(d);
                }
            }
            What::Graph(_) => {
                pair.kernels += 1;
                pair.kernel_ns = pair.kernel_ns.saturating_add(d);
                pair.graph_ns = pair.graph_ns.saturating_add(d);
            }
            What::MemOp(_) => {}
        }
        pair.cover(Nanos(w.start), Nanos(end));
        if end > w.start {
            let kind = match w.what {
                What::Kernel(_, KernelClass::Communication) => COMMUNICATION,
                What::Kernel(..) => COMPUTE,
                What::Graph(_) => GRAPH,
                What::MemOp(MemOpKind::Memset) => MEMSET,
                What::MemOp(_) => MEMCPY,
            };
            let k = KINDS.iter().position(|&x| x == kind).unwrap_or(0);
            let ops = &mut c.ops;
            let mut last = end;
            Op::pieces(w.start, end, step, w.device, w.pid, k, |op| {
                last = op.end();
                ops.push(op)
            });
            let span = c.spans.entry(w.device).or_insert((w.start, last));
            span.0 = span.0.min(w.start);
            span.1 = span.1.max(last);
            if c.ops.len() >= RUN_OPS {
                self.spill.put(&mut c.ops);
            }
        }
    }
}

/// The chunks merged: sums by interned kernel name.
pub(super) struct Merged {
    pub(super) instances: Vec<FastMap<u32, InstanceSums>>,
    pub(super) selections: Vec<Totals>,
    pub(super) whole: Totals,
    pub(super) pairs: BTreeMap<(u32, u32), Pair>,
    /// Every op, kernels and the others, by start.
    pub(super) ops: Merge,
    /// The first start and last end of each device's ops.
    pub(super) spans: BTreeMap<u32, (i64, i64)>,
    pub(super) any_linked: bool,
    /// Kernels and graphs counted in a step by time, not by a launch call: count, time.
    pub(super) by_time: (usize, i64),
    pub(super) operators: Option<OpTotals>,
}

/// Totals of sums whose kernel ids name `names`.
fn totals(
    into: &mut Totals,
    sums: &Sums,
    names: &[(StrId, StrId)],
    classes: &[KernelClass],
    trace_names: &dyn Fn(StrId) -> String,
) {
    for (kid, &(d, n)) in sums.kernels.iter().enumerate() {
        if n == 0 {
            continue;
        }
        let (name, short) = names[kid];
        into.add(Item::Kernel(name), d, n, || {
            (trace_names(name), trace_names(short), classes[kid])
        });
    }
    for &(id, d, n) in &sums.graphs {
        into.add(Item::Graph(id), d, n, || {
            let label = format!("[CUDA graph {id}]");
            (label.clone(), label, KernelClass::CudaGraph)
        });
    }
    // Launches count kernels and graphs; the memory operations only their time.
    into.memcpy_ns = into.memcpy_ns.saturating_add(sums.memcpy_ns);
    into.memset_ns = into.memset_ns.saturating_add(sums.memset_ns);
}

impl Merged {
    /// The chunks' sums merged, and their ops, those spilled to `spill` and those left in the
    /// chunks, merged by start.
    pub(super) fn new<N>(
        chunks: Vec<WorkChunk<N>>,
        names: &[Vec<(StrId, StrId)>],
        plan: &Plan,
        trace: &Trace,
        spill: Spill,
    ) -> crate::error::Result<Merged> {
        let n = plan.selections.len();
        let mut instances: Vec<FastMap<u32, InstanceSums>> = vec![FastMap::default(); n];
        let mut selections: Vec<Totals> = (0..n).map(|_| Totals::default()).collect();
        let mut whole = Totals::default();
        let mut pairs = BTreeMap::new();
        let mut spans: BTreeMap<u32, (i64, i64)> = BTreeMap::new();
        let mut any_linked = false;
        let mut by_time: (usize, i64) = (0, 0);
        let text = |id: StrId| trace.name(id).to_owned();
        let mut runs = Vec::new();
        let mut op_chunks = Vec::new();
        for (i, mut c) in chunks.into_iter().enumerate() {
            op_chunks.push(std::mem::take(&mut c.operators));
            any_linked |= c.any_linked;
            by_time.0 += c.by_time.0;
            by_time.1 = by_time.1.saturating_add(c.by_time.1);
            runs.push(std::mem::take(&mut c.ops));
            for (d, (s, e)) in c.spans.drain() {
                let span = spans.entry(d).or_insert((s, e));
                span.0 = span.0.min(s);
                span.1 = span.1.max(e);
            }
            for (s, insts) in c.instances.into_iter().enumerate() {
                for (i, sums) in insts {
                    instances[s].entry(i).or_default().merge(sums);
                }
            }
            for (s, sums) in c.selections.iter().enumerate() {
                totals(&mut selections[s], sums, &names[i], &c.classes, &text);
            }
            totals(&mut whole, &c.whole, &names[i], &c.classes, &text);
            if let Some((k, p)) = c.pair.take() {
                merge_pair(c.pairs.entry(k).or_default(), &p);
            }
            for (k, p) in c.pairs {
                merge_pair(pairs.entry(k).or_default(), &p);
            }
        }
        Ok(Merged {
            instances,
            selections,
            whole,
            pairs,
            ops: spill.merge(runs)?,
            spans,
            any_linked,
            by_time,
            operators: (plan.operators.as_ref()).map(|p| OpTotals::new(p, op_chunks.into_iter())),
        })
    }
}

pub(super) fn merge_pair(into: &mut Pair, p: &Pair) {
    into.kernels += p.kernels;
    into.kernel_ns = into.kernel_ns.saturating_add(p.kernel_ns);
    into.communication_ns = into.communication_ns.saturating_add(p.communication_ns);
    into.graph_ns = into.graph_ns.saturating_add(p.graph_ns);
    if let (Some(f), Some(l)) = (p.first, p.last) {
        into.cover(f, l);
    }
}
