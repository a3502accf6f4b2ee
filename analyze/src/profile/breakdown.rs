//! Where GPU time goes on a device: its timeline cut into compute, communication, graph, memcpy,
//! memset and idle over a window (a phase instance's or a step's span on that device, or the
//! device's whole active span), and the longest idle gaps with what the host was doing when each
//! began. Holistic Trace Analysis calls this the temporal breakdown.
//!
//! A device's timeline holds every GPU op that ran on it (kernels, memcpys, memsets, graph
//! executions traced as a whole), whichever process or range launched it. At each instant the
//! device is in one state, by precedence: compute (a kernel that is not communication is running)
//! ▸ graph (a graph execution traced as a whole, whose kernels are unknown) ▸ communication (only
//! communication kernels) ▸ memcpy ▸ memset ▸ idle (nothing). A step's window looks at the step's
//! own ops only: where only others ran (a neighbouring step's, when the GPU runs behind the host
//! and step spans overlap, or work of no step), that is its `other_work_ns`. So the states
//! partition a window exactly, `compute + exposed communication + graph + memcpy + memset + other
//! work + idle = span`, in integer nanoseconds. Beside them, `communication_ns` is all the time a communication kernel ran,
//! overlapped or not: `exposed_communication_ns` is the part that no compute (or graph) hid.
//!
//! This module knows nothing of ranges: [`super::ranges`] says which windows to look at, and
//! `sweep` cuts the timelines.

use serde::Serialize;

use crate::model::trace::{Nanos, Trace};

use super::ranges::is_host_range;

/// The time of one or more windows by what the device was doing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Breakdown {
    /// A kernel that is not communication was running.
    pub compute_ns: i64,
    /// A communication kernel was running, overlapped by compute or not.
    pub communication_ns: i64,
    /// Only communication kernels were running: communication nothing hid.
    pub exposed_communication_ns: i64,
    /// Only copies were running.
    pub memcpy_ns: i64,
    /// Only memsets were running.
    pub memset_ns: i64,
    /// A graph execution without per-kernel detail was running, and no known compute kernel.
    pub graph_ns: i64,
    /// Only ops of other steps, or of none, were running (a step's window only; absent when 0).
    #[serde(skip_serializing_if = "is_zero")]
    pub other_work_ns: i64,
    /// Nothing was running.
    pub idle_ns: i64,
    /// The windows' length: the sum of compute, exposed communication, memcpy, memset, graph,
    /// other work and idle.
    pub span_ns: i64,
}

impl Breakdown {
    /// Add `o` part by part (saturating, as every sum of times here: a damaged file's extreme
    /// times give extreme figures, never an overflow).
    pub fn add(&mut self, o: &Breakdown) {
        for (a, b) in [
            (&mut self.compute_ns, o.compute_ns),
            (&mut self.communication_ns, o.communication_ns),
            (
                &mut self.exposed_communication_ns,
                o.exposed_communication_ns,
            ),
            (&mut self.memcpy_ns, o.memcpy_ns),
            (&mut self.memset_ns, o.memset_ns),
            (&mut self.graph_ns, o.graph_ns),
            (&mut self.other_work_ns, o.other_work_ns),
            (&mut self.idle_ns, o.idle_ns),
            (&mut self.span_ns, o.span_ns),
        ] {
            *a = a.saturating_add(b);
        }
    }

    /// `o` ns during which the kinds `running` ran, counted in the part they make.
    pub(super) fn add_running(&mut self, running: u8, o: i64) {
        if running & COMMUNICATION != 0 {
            self.communication_ns = self.communication_ns.saturating_add(o);
        }
        let part = if running & COMPUTE != 0 {
            &mut self.compute_ns
        } else if running & GRAPH != 0 {
            &mut self.graph_ns
        } else if running & COMMUNICATION != 0 {
            &mut self.exposed_communication_ns
        } else if running & MEMCPY != 0 {
            &mut self.memcpy_ns
        } else if running & MEMSET != 0 {
            &mut self.memset_ns
        } else {
            &mut self.idle_ns
        };
        *part = part.saturating_add(o);
    }

    /// The parts that partition the span, summed (equal to `span_ns`).
    pub fn parts_ns(&self) -> i64 {
        [
            self.exposed_communication_ns,
            self.memcpy_ns,
            self.memset_ns,
            self.graph_ns,
            self.other_work_ns,
            self.idle_ns,
        ]
        .into_iter()
        .fold(self.compute_ns, i64::saturating_add)
    }
}

fn is_zero(x: &i64) -> bool {
    *x == 0
}

/// What may be running: one bit each.
pub(super) const COMPUTE: u8 = 1;
pub(super) const GRAPH: u8 = 1 << 1;
pub(super) const COMMUNICATION: u8 = 1 << 2;
pub(super) const MEMCPY: u8 = 1 << 3;
pub(super) const MEMSET: u8 = 1 << 4;
pub(super) const KINDS: [u8; 5] = [COMPUTE, GRAPH, COMMUNICATION, MEMCPY, MEMSET];

/// A window over which to look for idle gaps: a step's span on a device, or a device's active
/// span.
pub struct GapWindow {
    pub device: u32,
    pub start: Nanos,
    pub end: Nanos,
    /// The step the window is (`None` for a device's whole active span).
    pub step: Option<String>,
}

/// A stretch during which a device ran nothing, and what the host was doing when it began.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct IdleGap {
    pub device: u32,
    /// The process that launched the op that ended the gap: the one the device waited for.
    pub process: Option<u32>,
    /// The measured step whose span on the device holds the gap (`None`: no step ranges, the
    /// gap is in the device's whole active span).
    pub step: Option<String>,
    pub start_ns: i64,
    pub idle_ns: i64,
    /// How far into the step's span (or the device's active span) the gap began.
    pub offset_ns: i64,
    /// The CUDA API call that process was in when the gap began (the latest-started one then in
    /// flight): a synchronize, a copy, a launch; `None` when it was in none (running host code).
    pub api_call: Option<String>,
    /// The innermost NVTX range (or annotation) open on that process when the gap began.
    pub range: Option<String>,
}

/// What a process was doing on the host at a given time: the NVTX range in flight (the CUDA API
/// call is the source's to find, [`crate::source::TraceSource::calls_at`]).
pub(super) struct HostActivity<'a> {
    trace: &'a Trace,
    /// The longest range: how far back a search must look.
    longest_range: i64,
}

impl<'a> HostActivity<'a> {
    pub(super) fn new(trace: &'a Trace) -> HostActivity<'a> {
        HostActivity {
            trace,
            longest_range: trace
                .ranges
                .iter()
                .map(|r| r.duration().0)
                .max()
                .unwrap_or(0),
        }
    }

    /// The innermost (latest-started) host range of `pid` open at `t`.
    pub(super) fn range_at(&self, pid: u32, t: i64) -> Option<String> {
        let ranges = &self.trace.ranges;
        let hi = ranges.partition_point(|r| r.start.0 <= t);
        let lo = ranges.partition_point(|r| r.start.0 < t.saturating_sub(self.longest_range));
        ranges[lo..hi]
            .iter()
            .rev()
            .find(|r| r.pid == pid && r.end.0 > t && is_host_range(self.trace, r))
            .map(|r| self.trace.name(r.name).to_owned())
    }
}

#[cfg(test)]
mod tests {
    use crate::kernels::class::Classifier;
    use crate::model::trace::{Kernel, MemOp, MemOpKind, Nanos, Source, SourceFormat, Span, Trace};
    use crate::model::Bytes;
    use crate::profile::{profile, ProfileOptions};

    /// Work of process 1 on stream 7 of device 0.
    fn span(start: i64, end: i64) -> Span {
        Span {
            start: Nanos(start),
            end: Nanos(end),
            device: 0,
            stream: 7,
            correlation_id: 0,
            pid: 1,
        }
    }

    fn kernel(t: &mut Trace, name: &str, start: i64, end: i64) -> Kernel {
        let name = t.strings.intern(name);
        Kernel::named(name, span(start, end))
    }

    fn mem_op(start: i64, end: i64, kind: MemOpKind) -> MemOp {
        MemOp {
            span: span(start, end),
            kind,
            bytes: Bytes(4),
        }
    }

    #[test]
    fn overlaps_resolve_by_precedence_and_parts_add_up() {
        let mut t = Trace::empty(Source::new("t", SourceFormat::NsysSqlite));
        // compute 0-10, a collective 5-30 (hidden until 10, exposed 10-30), idle 30-40,
        // a copy 40-50 overlapping a memset 45-55.
        t.kernels = vec![
            kernel(&mut t, "gemm_kernel", 0, 10),
            kernel(&mut t, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 5, 30),
        ];
        t.mem_ops = vec![
            mem_op(40, 50, MemOpKind::HostToDevice),
            mem_op(45, 55, MemOpKind::Memset),
        ];
        let p = profile(&t, &Classifier::builtin(), &ProfileOptions::default());
        let b = p.whole_trace.breakdown;
        assert_eq!(b.span_ns, 55);
        assert_eq!(b.compute_ns, 10);
        assert_eq!(b.communication_ns, 25);
        assert_eq!(b.exposed_communication_ns, 20);
        assert_eq!(b.idle_ns, 10);
        assert_eq!(b.memcpy_ns, 10);
        assert_eq!(b.memset_ns, 5);
        assert_eq!(b.parts_ns(), b.span_ns);
        assert_eq!(p.idle_gaps.len(), 1);
        let gap = &p.idle_gaps[0];
        assert_eq!((gap.start_ns, gap.idle_ns, gap.offset_ns), (30, 10, 30));
        assert_eq!(gap.process, Some(1));
    }

    /// Two processes share device 0 and their steps overlap on it: the idle stretch inside both
    /// steps' spans is one gap, listed once.
    #[test]
    fn an_idle_stretch_in_overlapping_steps_is_listed_once() {
        use crate::model::trace::{ApiCall, ApiKind, Range};
        let mut t = Trace::empty(Source::new("t", SourceFormat::NsysSqlite));
        let launch = t.strings.intern("cudaLaunchKernel");
        let step = t.strings.intern("step_0");
        // Process 1's step launches kernels at 0-10 and 50-60, process 2's at 5-15 and 40-45:
        // the device idles 15-40 inside both steps' spans.
        let mut kernels = Vec::new();
        for (i, (pid, s, e)) in [(1, 0, 10), (2, 5, 15), (2, 40, 45), (1, 50, 60)]
            .into_iter()
            .enumerate()
        {
            let mut k = kernel(&mut t, "gemm_kernel", s, e);
            k.span.pid = pid;
            k.span.correlation_id = i as u64 + 1;
            kernels.push(k);
            t.api_calls.push(ApiCall {
                start: Nanos(s - 1),
                end: Nanos(s),
                pid,
                tid: pid,
                correlation_id: i as u64 + 1,
                name: launch,
                kind: ApiKind::Runtime,
            });
        }
        t.kernels = kernels;
        t.api_calls.sort_by_key(|c| c.start);
        for pid in [1, 2] {
            t.ranges
                .push(Range::push_pop(step, pid, pid, Nanos(-10), Nanos(100)));
        }
        let p = profile(&t, &Classifier::builtin(), &ProfileOptions::default());
        assert_eq!(p.step_breakdown.len(), 2, "{:?}", p.step_breakdown);
        let gaps: Vec<(i64, i64)> = p
            .idle_gaps
            .iter()
            .map(|g| (g.start_ns, g.idle_ns))
            .collect();
        assert_eq!(gaps, vec![(15, 25), (45, 5)]);
    }
}
