//! The profile engine: one pass of a [`TraceSource`] through the profile's plan. The small
//! tables (ranges, memory operations, graph executions) come first, and the selections (steps,
//! phases, attention ranges) are made from the ranges alone ([`Plan::new`]); the API calls are
//! read once for their launch context (with `--by op`, the operator call each was made in); then
//! every kernel, memory operation and graph execution is attributed on the spot to the instance
//! of each selection that claims it and summed there, and to its operator ([`Plan::work`]). What
//! the timeline sweep needs of each op (24 bytes) goes to a buffer of each chunk, spilled as a
//! sorted run to a temporary file when full ([`super::runs`]); after the scan the runs are merged
//! by start and swept once per device, a slab at a time, for the breakdowns of every window and
//! the longest idle gaps ([`super::sweep`]); the CUDA call a process was in when each of those
//! gaps began is asked of the source last.
//!
//! An nsys export streams through this; a loaded trace (Kineto, or a test's) is one more source.
//! `--device` and `--process` keep only the GPU work they name, and the host activity of the
//! processes that ran it: with a filter, a first pass over the kernels finds which processes
//! those are.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use crate::error::{Error, Result};
use crate::formats::run_metadata;
use crate::kernels::class::Classifier;
use crate::model::trace::{Nanos, Trace};
use crate::source::TraceSource;

use super::breakdown::{Breakdown, GapWindow, HostActivity};
use super::breakdown::{COMMUNICATION, KINDS};
use super::claims::{hand_over, ClaimSink};
use super::devices::{check_filters, graph_summary, profiles, GraphSummary, StepBreakdown};
use super::operators::{runs_tf32, without_operators, ViewInputs};
use super::plan::{
    ApiChunk, Classes, Context, InstanceSums, Merged, Plan, Ranges, What, Work, WorkChunk,
};
use super::straggler;
use super::summary::{phase_profile, Ranged, Totals};
use super::sweep::{sweep, Op, Window, NO_STEP};
use super::{range_names_hint, AttentionProfile, IdleGap, Profile, ProfileOptions, RangeTime};
use crate::attribution::launches::{max_bits, LaunchIndex};
use crate::attribution::operators::{Operators, NONE as NO_CALL};
use crate::source::KernelTexts;

/// Which GPU work and host activity `--device` and `--process` keep.
struct Filter {
    device: Option<u32>,
    process: Option<u32>,
}

impl Filter {
    fn keep_op(&self, device: u32, pid: u32) -> bool {
        self.device.is_none_or(|x| x == device) && self.process.is_none_or(|x| x == pid)
    }
}

/// The profile of `source`, whose small tables (ranges, memory operations, graph executions) are
/// `trace`, and how many kernels it has. With `strict`, a source without kernels, or whose GPU
/// work the filters leave empty, is an error naming the file; else its profile is one of
/// nothing. With a `sink`, every piece of work goes to it as the plan attributes it.
pub(super) fn run<S: TraceSource>(
    source: &mut S,
    mut trace: Trace,
    classifier: &Classifier,
    opts: &ProfileOptions,
    strict: bool,
    sink: Option<&dyn ClaimSink>,
) -> Result<(Profile, usize)> {
    let filter = Filter {
        device: opts.device,
        process: opts.process,
    };
    if filter.device.is_some() || filter.process.is_some() {
        restrict(&*source, &mut trace, &filter, strict)?;
    }
    let ranges = Ranges::new(&trace);
    let bits = max_bits(source.api_rows());
    // The operator calls, when the profile is by operator.
    let operators = if opts.operators {
        Operators::new(&mut trace)
    } else {
        None
    };

    // The API calls: each one's launch context (and operator call), indexed by correlation id.
    let api = source.scan_api(false, ApiChunk::default, |c, r| {
        if r.correlation_id == 0 {
            return;
        }
        let op = match &operators {
            Some(ops) => ops.innermost(r.pid, r.tid, r.start),
            None => NO_CALL,
        };
        let ctx = ranges.context(c, r.pid, r.tid, r.start, op);
        c.corr
            .entry(r.pid)
            .or_default()
            .insert(r.correlation_id, ctx, bits);
    })?;
    let mut ctxs: Vec<Context> = Vec::new();
    let mut ctx_ids: HashMap<Context, u32> = HashMap::new();
    let mut chunks = Vec::new();
    for c in api {
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
    drop(ctx_ids);

    // The selections, from the ranges alone, and which instance of each claims a context.
    let mut plan = Plan::new(&trace, opts, &ranges, &ctxs, operators);
    drop(ctxs);
    let by_op = plan.operators.is_some();
    if let Some(sink) = sink {
        plan.claims = true;
        sink.begin(&plan.claim_names(&trace));
    }

    // The kernels, then memory operations and graph executions.
    let classes = Classes {
        texts: source.texts(),
        classifier,
    };
    let mut chunks = source.scan_kernels(false, true, WorkChunk::default, |c, k| {
        c.kernels += 1;
        if !filter.keep_op(k.device, k.pid) {
            return;
        }
        if k.graph_node.is_some() {
            c.traced_graphs.insert((k.pid, k.correlation_id));
        }
        let kid = c.kid(k.names, S::name_key(k.names));
        let class = classes.class(&mut c.classes, kid, &c.kids);
        if by_op {
            let flags = &mut c.operators.tf32;
            while flags.len() <= kid as usize {
                flags.push(runs_tf32(&classes.texts.text(&c.kids[flags.len()])));
            }
        }
        plan.work(
            c,
            &launches,
            Work {
                start: k.start,
                end: k.end,
                device: k.device,
                stream: k.stream,
                pid: k.pid,
                corr: k.correlation_id,
                what: What::Kernel(kid, class),
            },
        );
        if let Some(sink) = sink {
            hand_over(sink, &mut c.claims, &c.kids, &classes.texts, false);
        }
    })?;
    if let Some(sink) = sink {
        for c in &mut chunks {
            hand_over(sink, &mut c.claims, &c.kids, &classes.texts, true);
        }
    }
    drop(classes);
    source.check_bounds()?;
    let kernel_count: usize = chunks.iter().map(|c| c.kernels).sum();
    if kernel_count == 0 && strict {
        return Err(no_kernels(&*source));
    }
    let traced: HashSet<(u32, u64)> = chunks
        .iter_mut()
        .flat_map(|c| std::mem::take(&mut c.traced_graphs))
        .collect();
    let untraced = super::ranges::untraced(&trace.graph_execs, &traced);
    let mut rest = WorkChunk::default();
    let mem_ops = (trace.mem_ops.iter()).map(|m| Work::of(&m.span, What::MemOp(m.kind)));
    let graphs = (trace.graph_execs.iter().zip(&untraced))
        .filter(|(_, &untraced)| untraced)
        .map(|(g, _)| Work::of(&g.span, What::Graph(g.graph_id)));
    for w in mem_ops.chain(graphs) {
        plan.work(&mut rest, &launches, w);
    }
    // The launch index and the ranges' pieces have served: what follows holds no call.
    drop(launches);
    drop(ranges);
    if let Some(sink) = sink {
        // Memory operations and graphs name no kernel.
        hand_over(
            sink,
            &mut rest.claims,
            &[] as &[S::Names],
            &source.texts(),
            true,
        );
    }
    chunks.push(rest);

    // Kernel names, interned in the order the chunks met them.
    let kid_names: Vec<_> = chunks
        .iter()
        .map(|c| source.intern_kernels(&mut trace, &c.kids))
        .collect();
    let spill = std::mem::take(&mut plan.spill);
    let merged = Merged::new(chunks, &kid_names, &plan, &trace, spill)?;
    let graphs = graph_summary(&trace, &untraced, &traced);
    let profile = plan.profile(&trace, opts, merged, graphs, &*source)?;
    Ok((profile, kernel_count))
}

/// The error of a source without kernels.
fn no_kernels<S: TraceSource>(source: &S) -> Error {
    let why = if source.has_kernel_table() {
        "the trace holds no GPU kernels"
    } else {
        "no CUPTI_ACTIVITY_KIND_KERNEL table (CUDA kernels were not traced; profile with `nsys profile --trace=cuda,nvtx`)"
    };
    Error::NothingToProfile {
        path: source.path().to_owned(),
        message: why.to_owned(),
    }
}

/// Keep in `trace` only the memory operations and graph executions `filter` keeps, and the host
/// ranges of the processes whose GPU work it keeps (for a device, found by a first pass over the
/// kernels). With `strict`, an error when the trace has no kernels or the filters keep no work.
fn restrict<S: TraceSource>(
    source: &S,
    trace: &mut Trace,
    filter: &Filter,
    strict: bool,
) -> Result<()> {
    let kernels = source.scan_kernels(
        false,
        false,
        || (0usize, BTreeSet::new()),
        |(n, pairs): &mut (usize, BTreeSet<(u32, u32)>), k| {
            *n += 1;
            pairs.insert((k.device, k.pid));
        },
    )?;
    source.check_bounds()?;
    let count: usize = kernels.iter().map(|k| k.0).sum();
    let mut ops: BTreeSet<(u32, u32)> = kernels.into_iter().flat_map(|k| k.1).collect();
    ops.extend(trace.mem_ops.iter().map(|m| (m.span.device, m.span.pid)));
    ops.extend(
        trace
            .graph_execs
            .iter()
            .map(|g| (g.span.device, g.span.pid)),
    );
    if strict {
        if count == 0 {
            return Err(no_kernels(source));
        }
        check_filters(source.path(), &ops, filter.device, filter.process)?;
    }
    let processes: HashSet<u32> = ops
        .iter()
        .filter(|&&(d, p)| filter.keep_op(d, p))
        .map(|o| o.1)
        .collect();
    let keep_host = |p: u32| {
        filter.process.is_none_or(|x| x == p) && (filter.device.is_none() || processes.contains(&p))
    };
    trace
        .mem_ops
        .retain(|m| filter.keep_op(m.span.device, m.span.pid));
    trace
        .graph_execs
        .retain(|g| filter.keep_op(g.span.device, g.span.pid));
    trace.ranges.retain(|r| keep_host(r.pid));
    trace.ops.retain(|o| keep_host(o.pid));
    trace.open_ranges.retain(|r| keep_host(r.pid));
    trace.marks.retain(|m| keep_host(m.pid));
    Ok(())
}

impl Plan {
    /// The profile from what the scans summed, with the idle gaps' host activity from `source`.
    fn profile<S: TraceSource>(
        &self,
        trace: &Trace,
        opts: &ProfileOptions,
        merged: Merged,
        graphs: GraphSummary,
        source: &S,
    ) -> Result<Profile> {
        let Merged {
            instances,
            mut selections,
            whole,
            pairs,
            mut ops,
            spans,
            any_linked,
            by_time,
            operators,
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
        if by_time.0 > 0 {
            notes.push(format!(
                "{} kernels ({:.3} ms) have no launch call in the trace (a Kineto flow with only its end, a call before the capture began): each counts in the step that holds its start in time",
                by_time.0,
                by_time.1 as f64 / 1e6
            ));
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
            let is_step = Some(s) == self.step_sel;
            let breaks_down = is_step || self.phases.iter().any(|p| p.2 == s);
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
                                // A step counts its own ops only.
                                owner: if is_step { i as u32 } else { NO_STEP },
                            });
                        }
                    }
                }
                per.push(list);
            }
            inst_windows.push(per);
        }
        let span_windows: Vec<(u32, usize)> = spans
            .iter()
            .map(|(&d, &(s, e))| {
                windows.push(Window {
                    device: d,
                    start: s,
                    end: e,
                    owner: NO_STEP,
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
                    owner: NO_STEP,
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
        // The ops, by start, swept; the communication kernels kept for the waits.
        let mut communication: Vec<Op> = Vec::new();
        let swept = sweep(
            || ops.next_op(),
            &windows,
            &gap_windows,
            opts.top,
            |o| {
                if arrives(o) {
                    communication.push(*o);
                }
            },
        )?;
        drop(ops);
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
        // The waits at collectives: each rank's communication kernels, in the measured steps.
        let waits = straggler::waits(&arrivals(&communication, &step_breakdown));
        let steps_run = super::ranges::steps_per_process(trace, &self.steps);
        let step_ns = (!step_breakdown.is_empty()).then(|| {
            let spans: i64 = step_breakdown.iter().map(|s| s.breakdown.span_ns).sum();
            spans as f64 / step_breakdown.len() as f64
        });
        let straggler = waits.straggler(steps_run, step_ns);
        if pairs.len() > 1 {
            notes.push(waits.note(straggler.as_ref()));
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
            &waits,
            straggler.as_ref(),
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
        if let Some(d) = opts.device {
            notes.push(format!("only the GPU work of device {d} (--device)"));
        }
        if let Some(p) = opts.process {
            notes.push(format!("only process {p} (--process)"));
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
        let found = swept.gaps;
        let queries: Vec<(u32, i64)> = found.iter().filter_map(|f| Some((f.3?, f.0))).collect();
        let calls = source.calls_at(&queries)?;
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

        let by_operator = opts.operators.then(|| {
            let over = step.as_ref().unwrap_or(&whole_trace);
            match (&self.operators, operators) {
                (Some(plan), Some(totals)) => {
                    let inputs = ViewInputs {
                        trace,
                        phases: self.phases.iter().map(|p| p.1.clone()).collect(),
                        steps: super::ranges::steps_per_process(trace, &self.steps),
                        peak_tflops: opts.peak_tflops,
                        peak_tbps: opts.peak_tbps,
                    };
                    plan.view(totals, &inputs)
                }
                _ => without_operators(
                    trace,
                    over.kernels,
                    over.kernel_ns,
                    opts.peak_tflops,
                    opts.peak_tbps,
                ),
            }
        });
        let mfu = step.as_ref().and_then(|s| {
            let dtype = super::operators::default_dtype(trace).0;
            super::mfu::of_steps(trace, opts, s, by_operator.as_ref(), dtype)
        });
        let file = trace.source.path.display().to_string();
        let ranks = super::ranks::in_one_file(&devices, &file);
        let mut profile = Profile {
            file,
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
            straggler,
            ranks,
            clock_offsets_ns: BTreeMap::new(),
            mfu,
            by_operator,
        };
        profile.rank_the_straggler();
        Ok(profile)
    }
}

/// Whether an op is an arrival at a collective: the start of a communication kernel.
fn arrives(o: &Op) -> bool {
    o.starts() && KINDS.get(o.kind()) == Some(&COMMUNICATION)
}

/// Each rank's arrivals at collectives: the starts of its communication kernels (`ops`, the ops
/// that [`arrives`] keeps, by start), inside its measured steps when there are any.
fn arrivals(ops: &[Op], steps: &[StepBreakdown]) -> BTreeMap<(u32, u32), Vec<i64>> {
    let mut windows: HashMap<(u32, u32), Vec<(i64, i64)>> = HashMap::new();
    for s in steps {
        let end = s.start_ns.saturating_add(s.breakdown.span_ns);
        windows
            .entry((s.device, s.process))
            .or_default()
            .push((s.start_ns, end));
    }
    let mut out: BTreeMap<(u32, u32), Vec<i64>> = BTreeMap::new();
    for o in ops {
        let rank = (o.device, o.pid());
        let inside = steps.is_empty()
            || windows
                .get(&rank)
                .is_some_and(|w| w.iter().any(|&(s, e)| (s..=e).contains(&o.start)));
        if inside {
            out.entry(rank).or_default().push(o.start);
        }
    }
    out
}
