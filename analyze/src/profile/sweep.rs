//! The timeline sweep: every GPU op, in order of start, swept once per device, cutting the
//! device's timeline into stretches during which the same kinds of work ran (by the precedence
//! of [`super::breakdown`]) and adding each stretch to the windows it overlaps: phase instances
//! and steps on a device, each device's active span, each (device, process) pair's span. The
//! idle stretches inside the gap windows are kept, the longest few only, as the idle gaps.
//!
//! A step's window counts only the step's own ops: when the GPU runs behind the host, one step's
//! span overlaps its neighbours', and the time during which only their work ran is the step's
//! `other_work_ns`, never its compute. So each op's time is in one step, and the steps' sums
//! never exceed the trace's.

use std::collections::BinaryHeap;

use crate::stats::attribution::FastMap;

use super::breakdown::{Breakdown, KINDS};

/// An op as the timeline sweep needs it, in 24 bytes: its start and length, the step that claims
/// it ([`NO_STEP`] for none), its device, and its kind (an index into [`KINDS`]) in the top bits
/// of the process. An op longer than `u32::MAX` ns (4.3 s) is kept as pieces end to end
/// ([`Op::pieces`]), which cut the timeline the same way; the pieces after the first are marked,
/// so that only the first counts as the op's start.
#[derive(Clone, Copy)]
pub(super) struct Op {
    pub(super) start: i64,
    len: u32,
    pub(super) step: u32,
    pub(super) device: u32,
    pid_kind: u32,
}

pub(super) const PID_BITS: u32 = 24;

/// The mark of a piece that continues a long op.
const CONTINUED: u32 = 1 << 31;

/// The most pieces an op is kept as: 1,024 pieces hold 73 minutes; a longer op, which only a
/// damaged file holds, is cut there rather than held as billions of pieces.
const MAX_PIECES: i64 = 1024;

/// The step of an op no step claims, and the owner of a window that counts every op.
pub(super) const NO_STEP: u32 = u32::MAX;

impl Op {
    /// The op `[start, end)` (`end > start`) as one or more pieces, each given to `push`.
    pub(super) fn pieces(
        start: i64,
        end: i64,
        step: u32,
        device: u32,
        pid: u32,
        kind: usize,
        mut push: impl FnMut(Op),
    ) {
        let mut pid_kind = (pid & ((1 << PID_BITS) - 1)) | ((kind as u32) << PID_BITS);
        let piece = i64::from(u32::MAX);
        let end = end.min(start.saturating_add(piece.saturating_mul(MAX_PIECES)));
        let mut at = start;
        while at < end {
            let len = end.saturating_sub(at).min(piece);
            push(Op {
                start: at,
                len: len as u32,
                step,
                device,
                pid_kind,
            });
            pid_kind |= CONTINUED;
            at = at.saturating_add(len);
        }
    }
    pub(super) fn end(&self) -> i64 {
        self.start.saturating_add(i64::from(self.len))
    }
    pub(super) fn pid(&self) -> u32 {
        self.pid_kind & ((1 << PID_BITS) - 1)
    }
    pub(super) fn kind(&self) -> usize {
        ((self.pid_kind & !CONTINUED) >> PID_BITS) as usize
    }
    /// Whether the op starts here: not a later piece of a long op.
    pub(super) fn starts(&self) -> bool {
        self.pid_kind & CONTINUED == 0
    }
}

/// A window of a device's timeline to break down.
#[derive(Clone, Copy)]
pub(super) struct Window {
    pub(super) device: u32,
    pub(super) start: i64,
    pub(super) end: i64,
    /// The step whose ops alone the window counts, or [`NO_STEP`] for every op.
    pub(super) owner: u32,
}

/// The breakdown of every window, and the longest idle stretches inside the gap windows: one
/// sweep of each device's ops (sorted by device, start, process).
pub(super) struct Sweep {
    pub(super) breakdowns: Vec<Breakdown>,
    /// (start, end, gap window) of the idle stretches kept.
    pub(super) gaps: Vec<(i64, i64, usize)>,
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

/// How many ops of each kind are running.
type Counts = [i32; KINDS.len()];

/// One device's state in the sweep: the kinds running, in all and per step, the ends to come
/// (end, kind, step), the time reached, the windows (by start) and which are open.
struct DeviceSweep {
    counts: Counts,
    /// The counts of each step with ops here, in the order they came, and where each step's
    /// are, the last one asked for first (ops come mostly a step at a time).
    by_step: Vec<Counts>,
    slots: FastMap<u32, usize>,
    last: (u32, usize),
    ends: BinaryHeap<std::cmp::Reverse<(i64, usize, u32)>>,
    prev: Option<i64>,
    windows: Vec<usize>,
    next_window: usize,
    active: Vec<usize>,
}

impl DeviceSweep {
    /// The counts of `step`'s ops.
    fn of_step(&mut self, step: u32) -> &mut Counts {
        if self.last.0 != step {
            let next = self.by_step.len();
            let slot = *self.slots.entry(step).or_insert(next);
            if slot == next {
                self.by_step.push([0; KINDS.len()]);
            }
            self.last = (step, slot);
        }
        &mut self.by_step[self.last.1]
    }

    fn new() -> DeviceSweep {
        DeviceSweep {
            counts: [0; KINDS.len()],
            by_step: Vec::new(),
            slots: FastMap::default(),
            last: (NO_STEP, 0),
            ends: BinaryHeap::new(),
            prev: None,
            windows: Vec::new(),
            next_window: 0,
            active: Vec::new(),
        }
    }
}

/// Sweep `ops` (both lists sorted by start) device by device, cutting each device's timeline
/// into segments and adding each segment to the windows it overlaps.
pub(super) fn sweep(
    ops: [&[Op]; 2],
    windows: &[Window],
    gap_windows: &[usize],
    top: usize,
) -> Sweep {
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
            .or_insert_with(DeviceSweep::new)
            .windows
            .push(i);
    }
    for d in devices.values_mut() {
        d.windows.sort_by_key(|&i| windows[i].start);
    }
    let mut heap: BinaryHeap<Stretch> = BinaryHeap::new();
    fn running(counts: &Counts) -> u8 {
        counts
            .iter()
            .zip(KINDS)
            .filter(|(c, _)| **c > 0)
            .fold(0u8, |m, (_, k)| m | k)
    }
    // One segment [a, b) of device `d`, whose counts hold during it.
    let mut feed = |d: &mut DeviceSweep, a: i64, b: i64| {
        while d.next_window < d.windows.len() && windows[d.windows[d.next_window]].start < b {
            d.active.push(d.windows[d.next_window]);
            d.next_window += 1;
        }
        d.active.retain(|&w| windows[w].end > a);
        let all = running(&d.counts);
        // An idle stretch is listed once, in the earliest gap window that holds it (step spans
        // on a device can overlap: a pipelined run, or two processes sharing it).
        let mut listed = false;
        for i in 0..d.active.len() {
            let w = d.active[i];
            let win = &windows[w];
            let o = b.min(win.end).saturating_sub(a.max(win.start));
            if o <= 0 {
                continue;
            }
            let own = match win.owner {
                NO_STEP => all,
                step => running(d.of_step(step)),
            };
            if own != 0 {
                covered[w] = covered[w].saturating_add(o);
                breakdowns[w].add_running(own, o);
            } else if all != 0 {
                covered[w] = covered[w].saturating_add(o);
                breakdowns[w].other_work_ns = breakdowns[w].other_work_ns.saturating_add(o);
            } else if let Some(g) = gap_of[w].filter(|_| !listed) {
                // Idle time is what the segments that ran something leave of the window; an idle
                // stretch is only looked at as a gap.
                listed = true;
                heap.push(Stretch(a.max(win.start), b.min(win.end), g));
                if heap.len() > top {
                    heap.pop();
                }
            }
        }
    };
    // Advance device `d` to time `t` (exclusive of starts at `t`): the segments up to each end
    // before it, then up to `t`.
    let mut advance = |d: &mut DeviceSweep, t: Option<i64>| loop {
        let next_end = d.ends.peek().map(|e| e.0 .0);
        let at = match (next_end, t) {
            (Some(e), Some(t)) if e < t => e,
            (Some(e), None) => e,
            (_, Some(t)) => t,
            (None, None) => break,
        };
        if let Some(p) = d.prev.filter(|&p| at > p) {
            feed(d, p, at);
        }
        while d.ends.peek().is_some_and(|e| e.0 .0 == at) {
            let std::cmp::Reverse((_, kind, step)) = d.ends.pop().expect("peeked");
            d.counts[kind] -= 1;
            if step != NO_STEP {
                d.of_step(step)[kind] -= 1;
            }
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
            let st = devices.remove(&op.device).unwrap_or_else(DeviceSweep::new);
            last = Some((op.device, st));
        }
        let d = &mut last.as_mut().expect("set above").1;
        advance(d, Some(op.start));
        d.counts[op.kind()] += 1;
        if op.step != NO_STEP {
            d.of_step(op.step)[op.kind()] += 1;
        }
        d.ends
            .push(std::cmp::Reverse((op.end(), op.kind(), op.step)));
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
pub(super) fn next_process(ops: [&[Op]; 2], device: u32, t: i64) -> Option<u32> {
    let mut best: Option<(i64, u32)> = None;
    for list in ops {
        let i = list.partition_point(|o| o.start < t);
        let first = list[i..].iter().find(|o| o.device == device && o.starts());
        if let Some(f) = first {
            let pid = list[i..]
                .iter()
                .skip_while(|o| o.start < f.start)
                .take_while(|o| o.start == f.start)
                .filter(|o| o.device == device && o.starts())
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
