//! Where GPU time goes on a device: its timeline cut into compute, communication, graph, memcpy,
//! memset and idle over a window (a phase instance's or a step's span on that device, or the
//! device's whole active span), and the longest idle gaps with what the host was doing when each
//! began. Holistic Trace Analysis calls this the temporal breakdown.
//!
//! A device's timeline holds every GPU op that ran on it (kernels, memcpys, memsets, graph
//! executions traced as a whole), whichever process or range launched it. At each instant the
//! device is in one state, by precedence: compute (a kernel that is not communication is running)
//! ▸ graph (a graph execution traced as a whole, whose kernels are unknown) ▸ communication (only
//! communication kernels) ▸ memcpy ▸ memset ▸ idle (nothing). So the states partition a window
//! exactly, `compute + exposed communication + graph + memcpy + memset + idle = span`, in integer
//! nanoseconds. Beside them, `communication_ns` is all the time a communication kernel ran,
//! overlapped or not: `exposed_communication_ns` is the part that no compute (or graph) hid.
//!
//! This module knows nothing of ranges: [`super::ranges`] says which windows to look at.

use std::collections::HashMap;

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
    /// Nothing was running.
    pub idle_ns: i64,
    /// The windows' length: the sum of compute, exposed communication, memcpy, memset, graph and
    /// idle.
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
            self.idle_ns,
        ]
        .into_iter()
        .fold(self.compute_ns, i64::saturating_add)
    }
}

/// What may be running: one bit each.
pub(super) const COMPUTE: u8 = 1;
pub(super) const GRAPH: u8 = 1 << 1;
pub(super) const COMMUNICATION: u8 = 1 << 2;
pub(super) const MEMCPY: u8 = 1 << 3;
pub(super) const MEMSET: u8 = 1 << 4;
pub(super) const KINDS: [u8; 5] = [COMPUTE, GRAPH, COMMUNICATION, MEMCPY, MEMSET];

/// A stretch of a device's timeline during which the same kinds of work were running.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Segment {
    start: i64,
    end: i64,
    running: u8,
}

/// One device: its segments from the first op's start to the last op's end (idle ones included),
/// and the start and process of each op, for naming who ended an idle gap.
#[derive(Default)]
struct Device {
    segments: Vec<Segment>,
    /// (start, process) of every op, sorted.
    starts: Vec<(i64, u32)>,
}

/// Every device's timeline, built once per trace.
pub struct Timelines {
    devices: HashMap<u32, Device>,
}

/// One device's edges (time, +1 or -1, kind index) and its op starts (time, process).
type DeviceEvents = (Vec<(i64, i32, usize)>, Vec<(i64, u32)>);

impl Timelines {
    /// The timelines of `trace`. `communication[k]` says whether kernel `k` is communication;
    /// `untraced[g]` whether graph execution `g` is work of its own (see
    /// [`super::ranges::untraced_graphs`]).
    pub fn new(trace: &Trace, communication: &[bool], untraced: &[bool]) -> Timelines {
        // Per device: (time, +1 or -1, kind index) and the op starts.
        let mut events: HashMap<u32, DeviceEvents> = HashMap::new();
        let mut add = |device: u32, start: Nanos, end: Nanos, pid: u32, kind: u8| {
            if end <= start {
                return;
            }
            let k = KINDS.iter().position(|&x| x == kind).unwrap_or(0);
            let e = events.entry(device).or_default();
            e.0.push((start.0, 1, k));
            e.0.push((end.0, -1, k));
            e.1.push((start.0, pid));
        };
        for (i, k) in trace.kernels.iter().enumerate() {
            let kind = if communication.get(i).copied().unwrap_or(false) {
                COMMUNICATION
            } else {
                COMPUTE
            };
            add(k.device, k.start, k.end, k.pid, kind);
        }
        for m in &trace.mem_ops {
            let kind = if m.kind == crate::model::trace::MemOpKind::Memset {
                MEMSET
            } else {
                MEMCPY
            };
            add(m.device, m.start, m.end, m.pid, kind);
        }
        for (i, g) in trace.graph_execs.iter().enumerate() {
            if untraced.get(i).copied().unwrap_or(false) {
                add(g.device, g.start, g.end, g.pid, GRAPH);
            }
        }
        let devices = events
            .into_iter()
            .map(|(d, (mut ev, mut starts))| {
                ev.sort_unstable_by_key(|e| e.0);
                starts.sort_unstable();
                (
                    d,
                    Device {
                        segments: sweep(&ev),
                        starts,
                    },
                )
            })
            .collect();
        Timelines { devices }
    }

    /// The devices that ran any work, sorted.
    pub fn device_ids(&self) -> Vec<u32> {
        let mut ids: Vec<u32> = self.devices.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// From the first op's start to the last op's end on `device`.
    pub fn span(&self, device: u32) -> Option<(Nanos, Nanos)> {
        let s = &self.devices.get(&device)?.segments;
        Some((Nanos(s.first()?.start), Nanos(s.last()?.end)))
    }

    fn segments(&self, device: u32) -> &[Segment] {
        self.devices.get(&device).map_or(&[], |d| &d.segments)
    }

    /// The segments of `device` that overlap `[start, end)`.
    fn overlapping(&self, device: u32, start: i64, end: i64) -> &[Segment] {
        let segs = self.segments(device);
        let lo = segs.partition_point(|s| s.end <= start);
        let hi = lo + segs[lo..].partition_point(|s| s.start < end);
        &segs[lo..hi]
    }

    /// What `device` did from `start` to `end`. Time outside its active span is idle.
    pub fn breakdown(&self, device: u32, start: Nanos, end: Nanos) -> Breakdown {
        let (ws, we) = (start.0, end.0.max(start.0));
        let mut b = Breakdown {
            span_ns: we.saturating_sub(ws),
            ..Breakdown::default()
        };
        let mut covered: i64 = 0;
        for s in self.overlapping(device, ws, we) {
            let o = s.end.min(we).saturating_sub(s.start.max(ws));
            if o <= 0 {
                continue;
            }
            covered = covered.saturating_add(o);
            b.add_running(s.running, o);
        }
        b.idle_ns = b.idle_ns.saturating_add(b.span_ns.saturating_sub(covered));
        b
    }

    /// The stretches of `[start, end)` during which `device` ran nothing, clipped to the window.
    fn idle_stretches(&self, device: u32, start: Nanos, end: Nanos) -> Vec<(i64, i64)> {
        self.overlapping(device, start.0, end.0)
            .iter()
            .filter(|s| s.running == 0)
            .map(|s| (s.start.max(start.0), s.end.min(end.0)))
            .filter(|(s, e)| e > s)
            .collect()
    }

    /// The process of the first op that starts on `device` at or after `t`.
    fn next_process(&self, device: u32, t: i64) -> Option<u32> {
        let starts = &self.devices.get(&device)?.starts;
        let i = starts.partition_point(|s| s.0 < t);
        starts.get(i).map(|s| s.1)
    }
}

/// Segments from events sorted by time: one per stretch between two event times during which
/// the same kinds ran, neighbours with the same kinds merged.
fn sweep(events: &[(i64, i32, usize)]) -> Vec<Segment> {
    let mut counts = [0i32; KINDS.len()];
    let mut out: Vec<Segment> = Vec::new();
    let mut prev: Option<i64> = None;
    let mut i = 0;
    while i < events.len() {
        let t = events[i].0;
        if let Some(p) = prev.filter(|&p| t > p) {
            let running = counts
                .iter()
                .zip(KINDS)
                .filter(|(c, _)| **c > 0)
                .fold(0u8, |m, (_, k)| m | k);
            match out.last_mut() {
                Some(last) if last.running == running && last.end == p => last.end = t,
                _ => out.push(Segment {
                    start: p,
                    end: t,
                    running,
                }),
            }
        }
        while i < events.len() && events[i].0 == t {
            counts[events[i].2] += events[i].1;
            i += 1;
        }
        prev = Some(t);
    }
    out
}

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

/// The `top` longest idle gaps inside `windows`, longest first (earlier first among equals, then
/// in the windows' order).
pub fn longest_idle_gaps(
    trace: &Trace,
    timelines: &Timelines,
    windows: &[GapWindow],
    top: usize,
) -> Vec<IdleGap> {
    let mut found: Vec<(i64, i64, usize)> = Vec::new();
    for (w, win) in windows.iter().enumerate() {
        for (s, e) in timelines.idle_stretches(win.device, win.start, win.end) {
            found.push((s, e, w));
        }
    }
    let length = |g: &(i64, i64, usize)| g.1.saturating_sub(g.0);
    found.sort_unstable_by(|a, b| {
        length(b)
            .cmp(&length(a))
            .then(a.0.cmp(&b.0))
            .then(a.2.cmp(&b.2))
    });
    found.truncate(top);
    let host = HostActivity::new(trace);
    found
        .into_iter()
        .map(|(s, e, w)| {
            let win = &windows[w];
            let process = timelines.next_process(win.device, e);
            let (api_call, range) = match process {
                Some(p) => (host.call_at(p, s), host.range_at(p, s)),
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
        .collect()
}

/// What a process was doing on the host at a given time: the CUDA API call and the NVTX range
/// in flight.
pub(super) struct HostActivity<'a> {
    trace: &'a Trace,
    /// The longest API call and range: how far back a search must look.
    longest_call: i64,
    longest_range: i64,
}

impl<'a> HostActivity<'a> {
    pub(super) fn new(trace: &'a Trace) -> HostActivity<'a> {
        HostActivity {
            trace,
            longest_call: trace
                .api_calls
                .iter()
                .map(|c| c.duration().0)
                .max()
                .unwrap_or(0),
            longest_range: trace
                .ranges
                .iter()
                .map(|r| r.duration().0)
                .max()
                .unwrap_or(0),
        }
    }

    /// The latest-started API call of `pid` in flight at `t`.
    fn call_at(&self, pid: u32, t: i64) -> Option<String> {
        let calls = &self.trace.api_calls;
        let hi = calls.partition_point(|c| c.start.0 <= t);
        let lo = calls.partition_point(|c| c.start.0 < t.saturating_sub(self.longest_call));
        calls[lo..hi]
            .iter()
            .rev()
            .find(|c| c.pid == pid && c.end.0 > t)
            .map(|c| self.trace.name(c.name).to_owned())
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
    use super::*;
    use crate::model::trace::{Kernel, MemOp, MemOpKind, Source, SourceFormat, StrId};
    use crate::model::Bytes;

    fn kernel(start: i64, end: i64) -> Kernel {
        Kernel {
            start: Nanos(start),
            end: Nanos(end),
            device: 0,
            stream: 7,
            correlation_id: 0,
            pid: 1,
            name: StrId(0),
            short_name: StrId(0),
            mangled_name: None,
            grid: [1; 3],
            block: [1; 3],
            registers_per_thread: 0,
            static_shared_memory: 0,
            dynamic_shared_memory: 0,
            graph_node_id: None,
        }
    }

    #[test]
    fn overlaps_resolve_by_precedence_and_parts_add_up() {
        let mut t = Trace::empty(Source::new("t", SourceFormat::NsysSqlite));
        t.strings.intern("k");
        // compute 0-10, a collective 5-30 (hidden until 10, exposed 10-30), idle 30-40,
        // a copy 40-50 overlapping a memset 45-55.
        t.kernels = vec![kernel(0, 10), kernel(5, 30)];
        t.mem_ops = vec![
            MemOp {
                start: Nanos(40),
                end: Nanos(50),
                device: 0,
                stream: 7,
                correlation_id: 0,
                pid: 1,
                kind: MemOpKind::HostToDevice,
                bytes: Bytes(4),
            },
            MemOp {
                start: Nanos(45),
                end: Nanos(55),
                device: 0,
                stream: 7,
                correlation_id: 0,
                pid: 1,
                kind: MemOpKind::Memset,
                bytes: Bytes(4),
            },
        ];
        let tl = Timelines::new(&t, &[false, true], &[]);
        assert_eq!(tl.span(0), Some((Nanos(0), Nanos(55))));
        let b = tl.breakdown(0, Nanos(0), Nanos(55));
        assert_eq!(b.compute_ns, 10);
        assert_eq!(b.communication_ns, 25);
        assert_eq!(b.exposed_communication_ns, 20);
        assert_eq!(b.idle_ns, 10);
        assert_eq!(b.memcpy_ns, 10);
        assert_eq!(b.memset_ns, 5);
        assert_eq!(b.parts_ns(), b.span_ns);
        // A window past the device's work is idle there.
        let b = tl.breakdown(0, Nanos(50), Nanos(70));
        assert_eq!((b.memset_ns, b.idle_ns, b.span_ns), (5, 15, 20));
        assert_eq!(tl.idle_stretches(0, Nanos(0), Nanos(55)), vec![(30, 40)]);
        let gaps = longest_idle_gaps(
            &t,
            &tl,
            &[GapWindow {
                device: 0,
                start: Nanos(0),
                end: Nanos(55),
                step: None,
            }],
            5,
        );
        assert_eq!(gaps.len(), 1);
        assert_eq!((gaps[0].start_ns, gaps[0].idle_ns), (30, 10));
        assert_eq!(gaps[0].process, Some(1));
    }
}
