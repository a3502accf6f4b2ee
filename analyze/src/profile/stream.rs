//! [`super::profile`] of an nsys export without loading its kernels and API calls: the same
//! figures, from the same rules, gathered as the rows stream by.
//!
//! The small tables (NVTX ranges, memory operations, graph executions) load as a [`Trace`]
//! without kernels or API calls, so that the range logic (steps, phases, their instances and
//! counts, notes) runs as it does on a whole trace. The API calls are read once for their
//! launch context, the process and thread of the call and the piece of the process's ranges its
//! start falls in: the rule of [`super::ranges`] (a range claims the work whose launch call
//! starts inside it) depends on nothing else. Then every kernel, memory operation and graph
//! execution is attributed on the spot to the instance of each selection (steps, each phase,
//! each attention range) that claims it, and summed there; what the timeline sweep needs of it
//! (start, end, device, process, kind) is kept, 24 bytes an op, and swept once per device for
//! the breakdowns of every window (phase instances, steps, device spans, device and process
//! pairs) and the longest idle gaps. The CUDA call a process was in when each of those gaps
//! began is read last, from the rows near it.
//!
//! With `--device` or `--process`, and for inputs that are not nsys exports, the trace loads
//! whole and [`super::profile`] runs on it.

use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet};
use std::path::Path;

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::formats::limits::Limits;
use crate::formats::nsys_sqlite::read::{Export, RawName, StartIndex, StartSamples, Texts};
use crate::formats::nsys_sqlite::split_global_tid;
use crate::formats::nsys_sqlite::table::{DRIVER, KERNEL, RUNTIME};
use crate::formats::run_metadata;
use crate::kernels::class::{Classifier, KernelClass};
use crate::model::trace::{MemOpKind, Nanos, StrId, Trace};
use crate::stats::attribution::FastMap;
use crate::stats::gather::{max_bits, Bounds, CorrRuns, Cursor, LaunchIndex, Pieces, Sets};

use super::breakdown::{
    Breakdown, GapWindow, HostActivity, IdleGap, COMMUNICATION, COMPUTE, GRAPH, KINDS, MEMCPY,
    MEMSET,
};
use super::devices::{profiles, GraphSummary, Pair, StepBreakdown};
use super::ranges::{find_steps, group_name, is_host_range, select, Launches, Selection};
use super::summary::{phase_profile, Item, Ranged, Totals};
use super::{
    check_profilable, names_matching, range_names_hint, AttentionProfile, Attribution, Profile,
    ProfileOptions, RangeTime, DEFAULT_STEPS, PROFILER_STEPS,
};

/// Bytes kept per kernel (the op for the sweep, sorting, sums) and per API call.
const PER_KERNEL: u64 = 48;
const PER_CALL: u64 = 8;

/// No instance.
const NONE: u32 = u32::MAX;

/// [`super::profile`] of the file at `path`, streaming it when it is an nsys export.
pub fn profile_file(
    path: &Path,
    classifier: &Classifier,
    opts: &ProfileOptions,
) -> Result<Profile> {
    let whole = || -> Result<Profile> {
        let trace = crate::formats::load_trace(path)?;
        check_profilable(&trace)?;
        super::devices::check_filters(&trace, opts.device, opts.process)?;
        Ok(super::profile(&trace, classifier, opts))
    };
    if opts.device.is_some() || opts.process.is_some() {
        return whole();
    }
    let limits = Limits::from_env()?;
    let Some(mut export) = Export::open(path, &limits, PER_KERNEL, PER_CALL)? else {
        return whole();
    };
    let mut trace = export.trace_without_work(true, true)?;
    let ranges = Ranges::new(&trace);
    let rows = export.rows(RUNTIME) + export.rows(DRIVER);
    let bits = max_bits(rows);

    // The API calls: each one's launch context, indexed by correlation id.
    let api = export.scan_api(false, ApiChunk::default, |c, r| {
        let end = c.bounds.span(r.start, r.end);
        c.longest = c.longest.max(end.saturating_sub(r.start));
        c.starts.row(&r);
        if r.correlation_id == 0 {
            return Ok(());
        }
        let (pid, tid) = split_global_tid(r.global_tid);
        let ctx = ranges.context(c, pid, tid, r.start);
        c.corr
            .entry(pid)
            .or_default()
            .insert(r.correlation_id as u64, ctx, bits);
        Ok(())
    })?;
    let mut api_bounds = Bounds::default();
    let mut longest = 0;
    let mut ctxs: Vec<(u32, u32, u32)> = Vec::new();
    let mut ctx_ids: HashMap<(u32, u32, u32), u32> = HashMap::new();
    let mut chunks = Vec::new();
    let mut starts = Vec::new();
    for mut c in api {
        starts.push(std::mem::take(&mut c.starts));
        api_bounds.add(&c.bounds);
        longest = longest.max(c.longest);
        let global = c
            .ctxs
            .iter()
            .map(|k| {
                let next = ctxs.len() as u32;
                *ctx_ids.entry(*k).or_insert_with(|| {
                    ctxs.push(*k);
                    next
                })
            })
            .collect();
        chunks.push((c.corr, global));
    }
    let launches = LaunchIndex::build(chunks, bits);
    let starts = StartIndex::new(starts);

    // The selections, from the ranges alone, and which instance of each claims a context.
    let plan = Plan::new(&trace, opts, &ranges, &ctxs);

    // The kernels, then memory operations and graph executions.
    // Kernels traced inside CUDA graphs carry a graph node; only a capture that launched graphs
    // (a `...GraphLaunch` call among its strings) has any, and the column, far into each row,
    // is read only then.
    let node_traced =
        !trace.graph_execs.is_empty() || export.any_string(|s| s.contains("GraphLaunch"));
    let texts = KernelTexts::new(&export, classifier);
    let mut chunks = export.scan_kernels(false, node_traced, WorkChunk::default, |c, k| {
        let pid = split_global_tid(k.global_pid).0;
        let end = c.bounds.span(k.start, k.end);
        if k.graph_node.is_some() {
            c.traced_graphs.insert((pid, k.correlation_id as u64));
        }
        let kid = c.kid(&k.names);
        let class = texts.class(&mut c.classes, kid, &c.kids);
        plan.work(
            c,
            &launches,
            Work {
                start: k.start,
                end,
                device: k.device as u32,
                pid,
                corr: k.correlation_id as u64,
                what: What::Kernel(kid, class),
            },
        );
        Ok(())
    })?;
    let kernel_count: usize = chunks.iter().map(|c| c.kernels).sum();
    let mut kernel_bounds = Bounds::default();
    for c in &chunks {
        kernel_bounds.add(&c.bounds);
    }
    for (bounds, what) in [(kernel_bounds, "kernels"), (api_bounds, "CUDA API calls")] {
        if let Some(message) = bounds.error(what) {
            return Err(Error::Malformed {
                path: path.to_owned(),
                message,
            });
        }
    }
    if kernel_count == 0 {
        let why = if export.has(KERNEL) {
            "the trace holds no GPU kernels"
        } else {
            "no CUPTI_ACTIVITY_KIND_KERNEL table (CUDA kernels were not traced; profile with `nsys profile --trace=cuda,nvtx`)"
        };
        return Err(Error::NothingToProfile {
            path: path.to_owned(),
            message: why.to_owned(),
        });
    }
    let traced: HashSet<(u32, u64)> = chunks
        .iter_mut()
        .flat_map(|c| std::mem::take(&mut c.traced_graphs))
        .collect();
    let untraced: Vec<bool> = trace
        .graph_execs
        .iter()
        .map(|g| !traced.contains(&(g.pid, g.correlation_id)))
        .collect();
    let mut rest = WorkChunk::default();
    for m in &trace.mem_ops {
        plan.work(
            &mut rest,
            &launches,
            Work {
                start: m.start.0,
                end: m.end.0,
                device: m.device,
                pid: m.pid,
                corr: m.correlation_id,
                what: What::MemOp(m.kind),
            },
        );
    }
    for (g, exec) in trace.graph_execs.iter().enumerate() {
        if untraced[g] {
            plan.work(
                &mut rest,
                &launches,
                Work {
                    start: exec.start.0,
                    end: exec.end.0,
                    device: exec.device,
                    pid: exec.pid,
                    corr: exec.correlation_id,
                    what: What::Graph(exec.graph_id),
                },
            );
        }
    }
    chunks.push(rest);

    // Kernel names, interned in the order the chunks met them.
    let kid_names: Vec<Vec<(StrId, StrId)>> = export.with_names(&mut trace, |export| {
        chunks
            .iter()
            .map(|c| {
                c.kids
                    .iter()
                    .map(|raw| {
                        let name = match export.raw_name(&raw[0]) {
                            Some(n) => n,
                            None => export.intern("<unnamed kernel>"),
                        };
                        (name, export.raw_name(&raw[1]).unwrap_or(name))
                    })
                    .collect()
            })
            .collect()
    });
    let merged = Merged::new(chunks, &kid_names, &plan, &trace);
    let graphs = graph_summary(&trace, &untraced, &traced);
    plan.profile(&trace, opts, merged, graphs, &export, (longest, &starts))
}

/// The host ranges of each process, cut into pieces: the context of a call is its process,
/// thread and the piece its start falls in.
struct Ranges {
    pieces: FastMap<u32, Pieces>,
    sets: Sets,
    none: Pieces,
}

impl Ranges {
    fn new(trace: &Trace) -> Ranges {
        let mut members: FastMap<u32, Vec<u32>> = FastMap::default();
        for (i, r) in trace.ranges.iter().enumerate() {
            if is_host_range(trace, r) {
                members.entry(r.pid).or_default().push(i as u32);
            }
        }
        let mut sets = Sets::new();
        let mut keys: Vec<u32> = members.keys().copied().collect();
        keys.sort_unstable();
        let pieces = keys
            .into_iter()
            .map(|pid| (pid, Pieces::new(&trace.ranges, &members[&pid], &mut sets)))
            .collect();
        Ranges {
            pieces,
            sets,
            none: Pieces::new(&trace.ranges, &[], &mut Sets::new()),
        }
    }

    /// The chunk's id of the context of a call.
    #[inline]
    fn context(&self, c: &mut ApiChunk, pid: u32, tid: u32, start: i64) -> u32 {
        let hint = match c.last {
            Some((p, h)) if p == pid => h,
            _ => 0,
        };
        let pieces = self.pieces.get(&pid).unwrap_or(&self.none);
        let piece = pieces.piece(start, hint);
        c.last = Some((pid, piece));
        let key = (pid, tid, pieces.sets[piece]);
        if let Some((k, id)) = c.last_ctx {
            if k == key {
                return id;
            }
        }
        let next = c.ctxs.len() as u32;
        let id = *c.ctx_index.entry(key).or_insert(next);
        if id == next {
            c.ctxs.push(key);
        }
        c.last_ctx = Some((key, id));
        id
    }
}

/// The API calls of one chunk of rows.
#[derive(Default)]
struct ApiChunk {
    ctx_index: FastMap<(u32, u32, u32), u32>,
    /// (process, thread, set of ranges containing the start).
    ctxs: Vec<(u32, u32, u32)>,
    corr: FastMap<u32, CorrRuns>,
    last: Option<(u32, usize)>,
    last_ctx: Option<((u32, u32, u32), u32)>,
    longest: i64,
    starts: StartSamples,
    bounds: Bounds,
}

/// Kernel names by the chunk's kernel id, with their class and whether it is communication.
struct KernelTexts<'a> {
    texts: Texts<'a>,
    classifier: &'a Classifier,
}

impl<'a> KernelTexts<'a> {
    fn new(export: &'a Export, classifier: &'a Classifier) -> KernelTexts<'a> {
        KernelTexts {
            texts: export.texts(),
            classifier,
        }
    }

    fn class(
        &self,
        classes: &mut Vec<KernelClass>,
        kid: u32,
        kids: &[[RawName; 3]],
    ) -> KernelClass {
        while classes.len() <= kid as usize {
            let raw = &kids[classes.len()][0];
            let text = self.texts.text(raw);
            classes.push(
                self.classifier
                    .classify(text.as_deref().unwrap_or("<unnamed kernel>")),
            );
        }
        classes[kid as usize]
    }
}

/// A piece of GPU work.
#[derive(Clone, Copy)]
enum What {
    /// The chunk's kernel id and the kernel's class.
    Kernel(u32, KernelClass),
    MemOp(MemOpKind),
    /// A graph execution traced as a whole, by graph id.
    Graph(u64),
}

struct Work {
    start: i64,
    end: i64,
    device: u32,
    pid: u32,
    corr: u64,
    what: What,
}

/// An op as the timeline sweep needs it: its kind (an index into [`KINDS`]) in the top bits of
/// the process.
#[derive(Clone, Copy)]
struct Op {
    start: i64,
    end: i64,
    device: u32,
    pid_kind: u32,
}

const PID_BITS: u32 = 24;

impl Op {
    fn pid(&self) -> u32 {
        self.pid_kind & ((1 << PID_BITS) - 1)
    }
    fn kind(&self) -> usize {
        (self.pid_kind >> PID_BITS) as usize
    }
}

/// What one instance's work adds up to.
#[derive(Clone, Default)]
struct InstanceSums {
    /// First start and last end of all its work.
    span: Option<(i64, i64)>,
    /// Per device: first start, last end, kernels (and graphs), their time.
    devices: Vec<(u32, i64, i64, usize, i64)>,
    /// Kernels only: how many, and their time (plain sum, as the attention figures add).
    kernels: usize,
    kernel_ns: i64,
}

impl InstanceSums {
    fn add(&mut self, w: &Work, end: i64) {
        let (s, e) = (w.start, end);
        self.span = Some(self.span.map_or((s, e), |(a, b)| (a.min(s), b.max(e))));
        let counted = !matches!(w.what, What::MemOp(_));
        let d = match self.devices.iter_mut().find(|d| d.0 == w.device) {
            Some(d) => d,
            None => {
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
struct Sums {
    /// Per kernel id: time and launches.
    kernels: Vec<(i64, usize)>,
    /// Per graph id (in the order met): time and launches.
    graphs: Vec<(u64, i64, usize)>,
    memcpy_ns: i64,
    memset_ns: i64,
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
#[derive(Default)]
struct WorkChunk {
    /// Kernels named by string ids, and any others.
    id_index: FastMap<(i64, i64), u32>,
    kid_index: FastMap<[RawName; 3], u32>,
    kids: Vec<[RawName; 3]>,
    classes: Vec<KernelClass>,
    cursor: Cursor,
    scratch: Vec<u32>,
    /// Per selection: per instance, its sums; the selection's sums; the last instance met.
    instances: Vec<FastMap<u32, InstanceSums>>,
    selections: Vec<Sums>,
    last_instance: Vec<Option<u32>>,
    whole: Sums,
    pairs: BTreeMap<(u32, u32), Pair>,
    /// The pair last met and its sums so far (added to `pairs` when another comes).
    pair: Option<((u32, u32), Pair)>,
    ops: Vec<Op>,
    kernels: usize,
    any_linked: bool,
    traced_graphs: HashSet<(u32, u64)>,
    bounds: Bounds,
}

impl WorkChunk {
    fn kid(&mut self, names: &[RawName; 3]) -> u32 {
        if let [RawName::Id(a), RawName::Id(b), RawName::None] = names {
            let next = self.kids.len() as u32;
            let k = *self.id_index.entry((*a, *b)).or_insert(next);
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
struct Selected {
    sel: Selection,
    /// The instance of each context, or [`NONE`].
    of_ctx: Vec<u32>,
}

/// What to select and sum: the steps, the phases, the attention ranges.
struct Plan {
    step_pattern: String,
    steps: Vec<usize>,
    /// Selection 0 is the steps (when there are any); then the phases found; then the three
    /// attention ranges.
    selections: Vec<Selected>,
    step_sel: Option<usize>,
    /// (position in the options' phases, phase name, selection) for each phase with instances.
    phases: Vec<(usize, String, usize)>,
    /// Phases without instances, with the note that says why, in order.
    phase_notes: Vec<(usize, String)>,
    attention: [Option<usize>; 3],
}

impl Plan {
    fn new(
        trace: &Trace,
        opts: &ProfileOptions,
        ranges: &Ranges,
        ctxs: &[(u32, u32, u32)],
    ) -> Plan {
        // No API calls in `trace`: `select` makes the instances and counts, without work.
        let launches = Launches::new(trace, opts.attribution);
        let mut step_pattern = opts.steps.as_str().to_owned();
        let mut step_names = names_matching(trace, |n| opts.steps.is_match(n));
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
            sels.push(select(trace, &launches, &[], |r| {
                step_names.contains(&r.name)
            }));
            0
        });
        let mut phases = Vec::new();
        let mut phase_notes = Vec::new();
        for (i, name) in opts.phases.iter().enumerate() {
            let ids = names_matching(trace, |n| n == name || group_name(n) == name);
            if ids.is_empty() {
                if !trace.ranges.is_empty() || trace.strings.lookup(name).is_some() {
                    phase_notes.push((i, format!("phase `{name}`: no NVTX range of that name")));
                }
                continue;
            }
            let sel = select(trace, &launches, &steps, |r| ids.contains(&r.name));
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
                Some(id) => select(trace, &launches, &steps, |r| r.name == id),
                None => Selection::default(),
            };
            attention[i] = Some(sels.len());
            sels.push(sel);
        }
        let selections = sels
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
                    .map(|&(_, tid, set)| {
                        ranges
                            .sets
                            .get(set)
                            .iter()
                            .filter(|&&r| {
                                opts.attribution == Attribution::Process
                                    || trace.ranges[r as usize].tid == tid
                            })
                            .filter_map(|r| by_range.get(r).map(|&i| (*r, i)))
                            .min()
                            .map_or(NONE, |(_, i)| i)
                    })
                    .collect();
                Selected { sel, of_ctx }
            })
            .collect();
        Plan {
            step_pattern,
            steps,
            selections,
            step_sel,
            phases,
            phase_notes,
            attention,
        }
    }

    /// Attribute one piece of work and add it up everywhere it counts.
    fn work(&self, c: &mut WorkChunk, launches: &LaunchIndex, w: Work) {
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
        for (s, sel) in self.selections.iter().enumerate() {
            let inst = c
                .scratch
                .iter()
                .map(|&ctx| sel.of_ctx[ctx as usize])
                .min()
                .unwrap_or(NONE);
            if inst == NONE {
                continue;
            }
            c.instances[s].entry(inst).or_default().add(&w, end);
            c.selections[s].add(&w, end);
        }
        c.whole.add(&w, end);
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
                c.kernels += 1;
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
            let k = KINDS.iter().position(|&x| x == kind).unwrap_or(0) as u32;
            c.ops.push(Op {
                start: w.start,
                end,
                device: w.device,
                pid_kind: (w.pid & ((1 << PID_BITS) - 1)) | (k << PID_BITS),
            });
        }
    }
}

/// The chunks merged: sums by interned kernel name.
struct Merged {
    instances: Vec<FastMap<u32, InstanceSums>>,
    selections: Vec<Totals>,
    whole: Totals,
    pairs: BTreeMap<(u32, u32), Pair>,
    /// The kernels' ops in table order, and the others'.
    ops: Vec<Op>,
    rest: Vec<Op>,
    any_linked: bool,
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
    fn new(
        chunks: Vec<WorkChunk>,
        names: &[Vec<(StrId, StrId)>],
        plan: &Plan,
        trace: &Trace,
    ) -> Merged {
        let n = plan.selections.len();
        let mut m = Merged {
            instances: vec![FastMap::default(); n],
            selections: (0..n).map(|_| Totals::default()).collect(),
            whole: Totals::default(),
            pairs: BTreeMap::new(),
            ops: Vec::with_capacity(chunks.iter().map(|c| c.ops.len()).sum()),
            rest: Vec::new(),
            any_linked: false,
        };
        let text = |id: StrId| trace.name(id).to_owned();
        let last = chunks.len().saturating_sub(1);
        for (i, mut c) in chunks.into_iter().enumerate() {
            m.any_linked |= c.any_linked;
            if i == last {
                m.rest.append(&mut c.ops);
            } else {
                m.ops.append(&mut c.ops);
            }
            for (s, insts) in c.instances.into_iter().enumerate() {
                for (i, sums) in insts {
                    m.instances[s].entry(i).or_default().merge(sums);
                }
            }
            for (s, sums) in c.selections.iter().enumerate() {
                totals(&mut m.selections[s], sums, &names[i], &c.classes, &text);
            }
            totals(&mut m.whole, &c.whole, &names[i], &c.classes, &text);
            if let Some((k, p)) = c.pair.take() {
                merge_pair(c.pairs.entry(k).or_default(), &p);
            }
            for (k, p) in c.pairs {
                merge_pair(m.pairs.entry(k).or_default(), &p);
            }
        }
        m
    }
}

fn merge_pair(into: &mut Pair, p: &Pair) {
    into.kernels += p.kernels;
    into.kernel_ns = into.kernel_ns.saturating_add(p.kernel_ns);
    into.communication_ns = into.communication_ns.saturating_add(p.communication_ns);
    into.graph_ns = into.graph_ns.saturating_add(p.graph_ns);
    if let (Some(f), Some(l)) = (p.first, p.last) {
        into.cover(f, l);
    }
}

/// The CUDA graphs: `traced` holds the (process, correlation id) of kernels traced in a graph.
fn graph_summary(trace: &Trace, untraced: &[bool], traced: &HashSet<(u32, u64)>) -> GraphSummary {
    let mut launches = traced.clone();
    let mut s = GraphSummary::default();
    for (i, g) in trace.graph_execs.iter().enumerate() {
        launches.insert((g.pid, g.correlation_id));
        if untraced[i] {
            s.untraced_launches += 1;
            s.graph_ns = s.graph_ns.saturating_add(g.duration().0);
        }
    }
    s.launches = launches.len();
    s
}

/// A window of a device's timeline to break down.
#[derive(Clone, Copy)]
struct Window {
    device: u32,
    start: i64,
    end: i64,
}

/// The breakdown of every window, and the longest idle stretches inside the gap windows: one
/// sweep of each device's ops (sorted by device, start, process).
struct Sweep {
    breakdowns: Vec<Breakdown>,
    /// (start, end, gap window) of the idle stretches kept.
    gaps: Vec<(i64, i64, usize)>,
}

/// Idle stretches ordered longest first, then earliest, then by window: the worst at the top of
/// a max-heap.
#[derive(PartialEq, Eq)]
struct Stretch(i64, i64, usize);

impl Ord for Stretch {
    fn cmp(&self, o: &Stretch) -> std::cmp::Ordering {
        let len = |s: &Stretch| s.1.saturating_sub(s.0);
        len(o)
            .cmp(&len(self))
            .then(self.0.cmp(&o.0))
            .then(self.2.cmp(&o.2))
    }
}

impl PartialOrd for Stretch {
    fn partial_cmp(&self, o: &Stretch) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

/// One device's state in the sweep: the kinds running, the ends to come, the time reached, the
/// windows (by start) and which are open.
struct DeviceSweep {
    counts: [i32; KINDS.len()],
    ends: BinaryHeap<std::cmp::Reverse<(i64, usize)>>,
    prev: Option<i64>,
    windows: Vec<usize>,
    next_window: usize,
    active: Vec<usize>,
}

/// Sweep `ops` (both lists sorted by start) device by device, as [`super::breakdown::Timelines`]
/// cuts a device's timeline into segments, adding each segment to the windows it overlaps.
fn sweep(ops: [&[Op]; 2], windows: &[Window], gap_windows: &[usize], top: usize) -> Sweep {
    let mut breakdowns: Vec<Breakdown> = windows
        .iter()
        .map(|w| Breakdown {
            span_ns: w.end.saturating_sub(w.start),
            ..Breakdown::default()
        })
        .collect();
    let mut covered = vec![0i64; windows.len()];
    let mut gap_of = vec![None; windows.len()];
    for (g, &w) in gap_windows.iter().enumerate() {
        gap_of[w] = Some(g);
    }
    let mut devices: FastMap<u32, DeviceSweep> = FastMap::default();
    for (i, w) in windows.iter().enumerate() {
        devices
            .entry(w.device)
            .or_insert_with(|| DeviceSweep {
                counts: [0; KINDS.len()],
                ends: BinaryHeap::new(),
                prev: None,
                windows: Vec::new(),
                next_window: 0,
                active: Vec::new(),
            })
            .windows
            .push(i);
    }
    for d in devices.values_mut() {
        d.windows.sort_by_key(|&i| windows[i].start);
    }
    let mut heap: BinaryHeap<Stretch> = BinaryHeap::new();
    // One segment [a, b) during which `running` ran on device `d`.
    let mut feed = |d: &mut DeviceSweep, a: i64, b: i64, running: u8| {
        while d.next_window < d.windows.len() && windows[d.windows[d.next_window]].start < b {
            d.active.push(d.windows[d.next_window]);
            d.next_window += 1;
        }
        d.active.retain(|&w| windows[w].end > a);
        for &w in &d.active {
            let win = &windows[w];
            let o = b.min(win.end).saturating_sub(a.max(win.start));
            if o <= 0 {
                continue;
            }
            if running != 0 {
                covered[w] = covered[w].saturating_add(o);
                breakdowns[w].add_running(running, o);
            } else if let Some(g) = gap_of[w] {
                // Idle time is what the segments that ran something leave of the window; an idle
                // stretch is only looked at as a gap.
                heap.push(Stretch(a.max(win.start), b.min(win.end), g));
                if heap.len() > top {
                    heap.pop();
                }
            }
        }
    };
    // Advance device `d` to time `t` (exclusive of starts at `t`): the segments up to each end
    // before it, then up to `t`.
    fn running(counts: &[i32; KINDS.len()]) -> u8 {
        counts
            .iter()
            .zip(KINDS)
            .filter(|(c, _)| **c > 0)
            .fold(0u8, |m, (_, k)| m | k)
    }
    let mut advance = |d: &mut DeviceSweep, t: Option<i64>| loop {
        let next_end = d.ends.peek().map(|e| e.0 .0);
        let at = match (next_end, t) {
            (Some(e), Some(t)) if e < t => e,
            (Some(e), None) => e,
            (_, Some(t)) => t,
            (None, None) => break,
        };
        if let Some(p) = d.prev.filter(|&p| at > p) {
            let r = running(&d.counts);
            feed(d, p, at, r);
        }
        while d.ends.peek().is_some_and(|e| e.0 .0 == at) {
            let std::cmp::Reverse((_, kind)) = d.ends.pop().expect("peeked");
            d.counts[kind] -= 1;
        }
        d.prev = Some(at);
        if Some(at) == t {
            break;
        }
    };
    let (mut i, mut j) = (0, 0);
    let [a, b] = ops;
    let mut last: Option<(u32, DeviceSweep)> = None;
    loop {
        let op = match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) if y.start < x.start => {
                j += 1;
                y
            }
            (Some(x), _) => {
                i += 1;
                x
            }
            (None, Some(y)) => {
                j += 1;
                y
            }
            (None, None) => break,
        };
        // The device's state, kept out of the map while its ops come in a row.
        if last.as_ref().is_none_or(|l| l.0 != op.device) {
            if let Some((dev, st)) = last.take() {
                devices.insert(dev, st);
            }
            let st = devices.remove(&op.device).unwrap_or_else(|| DeviceSweep {
                counts: [0; KINDS.len()],
                ends: BinaryHeap::new(),
                prev: None,
                windows: Vec::new(),
                next_window: 0,
                active: Vec::new(),
            });
            last = Some((op.device, st));
        }
        let d = &mut last.as_mut().expect("set above").1;
        advance(d, Some(op.start));
        d.counts[op.kind()] += 1;
        d.ends.push(std::cmp::Reverse((op.end, op.kind())));
    }
    if let Some((dev, st)) = last.take() {
        devices.insert(dev, st);
    }
    for d in devices.values_mut() {
        advance(d, None);
    }
    for (w, b) in breakdowns.iter_mut().enumerate() {
        b.idle_ns = b
            .idle_ns
            .saturating_add(b.span_ns.saturating_sub(covered[w]));
    }
    let mut gaps: Vec<(i64, i64, usize)> = heap.into_iter().map(|s| (s.0, s.1, s.2)).collect();
    let length = |g: &(i64, i64, usize)| g.1.saturating_sub(g.0);
    gaps.sort_unstable_by(|a, b| {
        length(b)
            .cmp(&length(a))
            .then(a.0.cmp(&b.0))
            .then(a.2.cmp(&b.2))
    });
    Sweep { breakdowns, gaps }
}

/// The process of the first op that starts on `device` at or after `t` (the least process among
/// ops starting then); `ops` sorted by start.
fn next_process(ops: [&[Op]; 2], device: u32, t: i64) -> Option<u32> {
    let mut best: Option<(i64, u32)> = None;
    for list in ops {
        let i = list.partition_point(|o| o.start < t);
        let first = list[i..].iter().find(|o| o.device == device);
        if let Some(f) = first {
            let pid = list[i..]
                .iter()
                .skip_while(|o| o.start < f.start)
                .take_while(|o| o.start == f.start)
                .filter(|o| o.device == device)
                .map(Op::pid)
                .min()
                .unwrap_or(f.pid());
            best = Some(match best {
                Some(b) if b <= (f.start, pid) => b,
                _ => (f.start, pid),
            });
        }
    }
    best.map(|b| b.1)
}

impl Plan {
    #[allow(clippy::too_many_arguments)]
    fn profile(
        &self,
        trace: &Trace,
        opts: &ProfileOptions,
        merged: Merged,
        graphs: GraphSummary,
        export: &Export,
        (longest, starts): (i64, &StartIndex),
    ) -> Result<Profile> {
        let Merged {
            instances,
            mut selections,
            whole,
            pairs,
            mut ops,
            mut rest,
            any_linked,
        } = merged;
        let mut notes = Vec::new();
        if trace.ranges.is_empty() {
            notes.push(if trace.source.missing.iter().any(|t| t == "NVTX_EVENTS") {
                "no NVTX ranges (the export has no NVTX_EVENTS table): only whole-trace figures"
                    .into()
            } else {
                "no NVTX ranges: only whole-trace figures".into()
            });
        } else if !any_linked {
            notes.push(
                "no CUDA API call is linked to a kernel by correlation id (CUPTI_ACTIVITY_KIND_RUNTIME absent?): kernels cannot be attributed to ranges".into(),
            );
        }
        if self.steps.is_empty() && !trace.ranges.is_empty() {
            notes.push(format!(
                "no range matches the step pattern `{}`: every phase range counts and per-step figures are per range",
                opts.steps.as_str()
            ));
        }

        // Windows: each instance on each device of the steps and phases, then each device's
        // span, then each (device, process) pair's.
        let mut windows: Vec<Window> = Vec::new();
        let mut inst_windows: Vec<Vec<Vec<(usize, u32, i64)>>> = Vec::new();
        for (s, sel) in self.selections.iter().enumerate() {
            let breaks_down = Some(s) == self.step_sel || self.phases.iter().any(|p| p.2 == s);
            let mut per = Vec::new();
            for i in 0..sel.sel.instances.len() {
                let mut list = Vec::new();
                if breaks_down {
                    if let Some(sums) = instances[s].get(&(i as u32)) {
                        let mut devices = sums.devices.clone();
                        devices.sort_unstable_by_key(|d| d.0);
                        for d in devices {
                            list.push((windows.len(), d.0, d.1));
                            windows.push(Window {
                                device: d.0,
                                start: d.1,
                                end: d.2.max(d.1),
                            });
                        }
                    }
                }
                per.push(list);
            }
            inst_windows.push(per);
        }
        // Kernels come sorted by start from an export as nsys writes it.
        if !ops.windows(2).all(|w| w[0].start <= w[1].start) {
            ops.par_sort_unstable_by_key(|o| o.start);
        }
        rest.sort_unstable_by_key(|o| o.start);
        let mut spans: BTreeMap<u32, (i64, i64)> = BTreeMap::new();
        for o in ops.iter().chain(&rest) {
            let e = spans.entry(o.device).or_insert((o.start, o.end));
            e.0 = e.0.min(o.start);
            e.1 = e.1.max(o.end);
        }
        let span_windows: Vec<(u32, usize)> = spans
            .iter()
            .map(|(&d, &(s, e))| {
                windows.push(Window {
                    device: d,
                    start: s,
                    end: e,
                });
                (d, windows.len() - 1)
            })
            .collect();
        let pair_windows: Vec<usize> = pairs
            .iter()
            .map(|(&(device, _), p)| {
                let (s, e) = (p.first.unwrap_or_default().0, p.last.unwrap_or_default().0);
                windows.push(Window {
                    device,
                    start: s,
                    end: e.max(s),
                });
                windows.len() - 1
            })
            .collect();
        let step_windows: Vec<(usize, usize)> = self
            .step_sel
            .map(|s| {
                inst_windows[s]
                    .iter()
                    .enumerate()
                    .flat_map(|(i, l)| l.iter().map(move |w| (i, w.0)))
                    .collect()
            })
            .unwrap_or_default();
        let gap_windows: Vec<usize> = if step_windows.is_empty() {
            span_windows.iter().map(|w| w.1).collect()
        } else {
            step_windows.iter().map(|w| w.1).collect()
        };
        let swept = sweep([&ops, &rest], &windows, &gap_windows, opts.top);
        let b = |w: usize| swept.breakdowns[w];

        let ranged = |s: usize| -> Ranged {
            let sel = &self.selections[s].sel;
            let proj: Nanos = (0..sel.instances.len())
                .filter_map(|i| instances[s].get(&(i as u32))?.span)
                .map(|(a, e)| Nanos(e) - Nanos(a))
                .sum();
            Ranged {
                steps: sel.steps,
                step_ranges: sel.step_ranges,
                ranges: sel.instances.len(),
                wall: sel.wall(trace),
                proj,
                all_ranges: sel.all_ranges,
                all_wall: sel.all_wall,
            }
        };
        let breakdown_of = |s: usize| {
            let mut out = Breakdown::default();
            for list in &inst_windows[s] {
                for w in list {
                    out.add(&b(w.0));
                }
            }
            out
        };
        let take = |selections: &mut Vec<Totals>, s: usize| std::mem::take(&mut selections[s]);

        let mut step_breakdown = Vec::new();
        let step = self.step_sel.map(|s| {
            let sel = &self.selections[s].sel;
            for (i, inst) in sel.instances.iter().enumerate() {
                let range = &trace.ranges[inst.range];
                let sums = instances[s].get(&(i as u32));
                for &(w, device, start) in &inst_windows[s][i] {
                    let d = sums
                        .and_then(|x| x.devices.iter().find(|d| d.0 == device))
                        .copied()
                        .unwrap_or((device, start, start, 0, 0));
                    step_breakdown.push(StepBreakdown {
                        step: trace.name(range.name).to_owned(),
                        process: range.pid,
                        device,
                        start_ns: start,
                        kernels: d.3,
                        kernel_ns: d.4,
                        breakdown: b(w),
                    });
                }
            }
            phase_profile(
                opts.top,
                "measured steps",
                take(&mut selections, s),
                Some(ranged(s)),
                breakdown_of(s),
            )
        });

        let mut phases = Vec::new();
        let mut found = self.phases.iter().peekable();
        let mut notes_by_phase = self.phase_notes.iter().peekable();
        for (i, _) in opts.phases.iter().enumerate() {
            while let Some((_, note)) = notes_by_phase.next_if(|n| n.0 == i) {
                notes.push(note.clone());
            }
            if let Some((_, name, s)) = found.next_if(|p| p.0 == i) {
                phases.push(phase_profile(
                    opts.top,
                    name,
                    take(&mut selections, *s),
                    Some(ranged(*s)),
                    breakdown_of(*s),
                ));
            }
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

        let mut whole_breakdown = Breakdown::default();
        for &(_, w) in &span_windows {
            whole_breakdown.add(&b(w));
        }
        let whole_trace = phase_profile(opts.top, "whole trace", whole, None, whole_breakdown);

        let head_dim = opts
            .head_dim
            .or_else(|| run_metadata::head_dim(&trace.source.run));
        let time = |k: usize| -> RangeTime {
            let s = self.attention[k].expect("made for each name");
            let sel = &self.selections[s].sel;
            let sums: Vec<&InstanceSums> = (0..sel.instances.len())
                .filter_map(|i| instances[s].get(&(i as u32)))
                .collect();
            RangeTime {
                name: opts.attention[k].clone(),
                ranges: sel.instances.len(),
                wall_ns: sel.wall(trace).0,
                gpu_proj_ns: ranged(s).proj.0,
                kernel_ns: sums.iter().fold(0i64, |a, x| a.wrapping_add(x.kernel_ns)),
                kernels: sums.iter().map(|x| x.kernels).sum(),
            }
        };
        let [qk, softmax, v] = [0, 1, 2].map(time);
        let attention = AttentionProfile::from_ranges(qk, softmax, v, head_dim);
        if attention.is_none() && !trace.ranges.is_empty() {
            notes.push(format!(
                "attention: no ranges named `{}`, `{}` or `{}` in the measured steps",
                opts.attention[0], opts.attention[1], opts.attention[2]
            ));
        }
        if graphs.untraced_launches > 0 {
            notes.push(format!(
                "{} of {} CUDA graph launches carry no per-kernel detail: their GPU time ({:.3} ms) counts as class `cuda graph`; `nsys profile --cuda-graph-trace=node` traces the kernels inside graphs",
                graphs.untraced_launches,
                graphs.launches,
                graphs.graph_ns as f64 / 1e6
            ));
        }
        // `profiles` asks for the pairs' windows in the pairs' order, the order they were swept.
        let next_pair = std::cell::Cell::new(0);
        let devices = profiles(
            pairs,
            |_, _, _| {
                let i = next_pair.get();
                next_pair.set(i + 1);
                b(pair_windows[i])
            },
            &step_breakdown,
        );
        let processes = self
            .steps
            .iter()
            .map(|&s| trace.ranges[s].pid)
            .collect::<HashSet<u32>>()
            .len();
        if processes > 1 {
            notes.push(format!(
                "{processes} processes: a step is a step of one process; per-step kernel figures add up the work of every process in a step, wall and GPU-projected time per step are means over the processes"
            ));
        }

        // The idle gaps, with what the host was doing.
        let gap_list: Vec<GapWindow> = if step_windows.is_empty() {
            span_windows
                .iter()
                .map(|&(d, w)| GapWindow {
                    device: d,
                    start: Nanos(windows[w].start),
                    end: Nanos(windows[w].end),
                    step: None,
                })
                .collect()
        } else {
            super::step_gap_windows(&step_breakdown)
        };
        let host = HostActivity::new(trace);
        let found: Vec<(i64, i64, usize, Option<u32>)> = swept
            .gaps
            .iter()
            .map(|&(s, e, g)| (s, e, g, next_process([&ops, &rest], gap_list[g].device, e)))
            .collect();
        drop(ops);
        let queries: Vec<(u32, i64)> = found.iter().filter_map(|f| Some((f.3?, f.0))).collect();
        let calls = export.calls_at(&queries, longest, starts)?;
        let idle_gaps = found
            .into_iter()
            .map(|(s, e, g, process)| {
                let win = &gap_list[g];
                let (api_call, range) = match process {
                    Some(p) => (calls.get(&(p, s)).cloned().flatten(), host.range_at(p, s)),
                    None => (None, None),
                };
                IdleGap {
                    device: win.device,
                    process,
                    step: win.step.clone(),
                    start_ns: s,
                    idle_ns: e.saturating_sub(s),
                    offset_ns: s.saturating_sub(win.start.0),
                    api_call,
                    range,
                }
            })
            .collect();

        Ok(Profile {
            file: trace.source.path.display().to_string(),
            attribution: opts.attribution,
            step_pattern: self.step_pattern.clone(),
            measured_steps: super::ranges::steps_per_process(trace, &self.steps),
            phases,
            step,
            whole_trace,
            attention,
            notes,
            devices,
            graphs,
            step_breakdown,
            idle_gaps,
        })
    }
}
