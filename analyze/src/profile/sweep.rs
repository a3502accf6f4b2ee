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
//!
//! The ops stream in by start ([`super::runs::Merge`]) and are swept in time slabs of a bounded
//! number of ops, side by side, each beginning with the ops still running at its start; the
//! slabs' sums are those of one sweep ([`sweep`] says why), and no more than a few slabs of ops
//! are held at once.

use std::collections::BinaryHeap;

use rayon::prelude::*;

use crate::fast_hash::FastMap;

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

/// The bytes of an op as it is spilled ([`Op::to_bytes`]).
pub(super) const OP_BYTES: usize = 24;

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

    /// The op as bytes, for a temporary file ([`super::runs`]).
    pub(super) fn to_bytes(self) -> [u8; OP_BYTES] {
        let mut b = [0u8; OP_BYTES];
        b[..8].copy_from_slice(&self.start.to_le_bytes());
        b[8..12].copy_from_slice(&self.len.to_le_bytes());
        b[12..16].copy_from_slice(&self.step.to_le_bytes());
        b[16..20].copy_from_slice(&self.device.to_le_bytes());
        b[20..].copy_from_slice(&self.pid_kind.to_le_bytes());
        b
    }

    /// The op of [`Op::to_bytes`]'s bytes (`b` holds [`OP_BYTES`]).
    pub(super) fn from_bytes(b: &[u8]) -> Op {
        let word = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut start = [0u8; 8];
        start.copy_from_slice(&b[..8]);
        Op {
            start: i64::from_le_bytes(start),
            len: word(8),
            step: word(12),
            device: word(16),
            pid_kind: word(20),
        }
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
/// sweep of each device's ops.
pub(super) struct Sweep {
    pub(super) breakdowns: Vec<Breakdown>,
    /// (start, end, gap window, process of the first op to start on the device at or after
    /// the end: the one that ended it) of the idle stretches kept.
    pub(super) gaps: Vec<(i64, i64, usize, Option<u32>)>,
}

/// Idle stretches ordered longest first, then earliest, then by window: the worst at the top of
/// a max-heap. The process that ends one (found once it is kept) takes no part in the order.
struct Stretch(i64, i64, usize, Option<u32>);

impl PartialEq for Stretch {
    fn eq(&self, o: &Stretch) -> bool {
        self.cmp(o) == std::cmp::Ordering::Equal
    }
}

impl Eq for Stretch {}

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

/// The kinds of which some op is running.
fn running(counts: &Counts) -> u8 {
    counts
        .iter()
        .zip(KINDS)
        .filter(|(c, _)| **c > 0)
        .fold(0u8, |m, (_, k)| m | k)
}

/// One device's state in a slab's sweep: the kinds running, in all and per step, the ends to come
/// (end, kind, step), the latest end pushed, the time reached, and which of the device's windows
/// (by start) are open, each with its slot in the slab's parts.
struct DeviceSweep<'w> {
    counts: Counts,
    /// The counts of each step with ops here, in the order they came, and where each step's
    /// are, the last one asked for first (ops come mostly a step at a time).
    by_step: Vec<Counts>,
    slots: FastMap<u32, usize>,
    last: (u32, usize),
    ends: BinaryHeap<std::cmp::Reverse<(i64, usize, u32)>>,
    max_end: i64,
    prev: Option<i64>,
    windows: &'w [usize],
    next_window: usize,
    active: Vec<(usize, usize)>,
}

impl<'w> DeviceSweep<'w> {
    fn new(windows: &'w [usize], prev: Option<i64>) -> DeviceSweep<'w> {
        DeviceSweep {
            counts: [0; KINDS.len()],
            by_step: Vec::new(),
            slots: FastMap::default(),
            last: (NO_STEP, 0),
            ends: BinaryHeap::new(),
            max_end: i64::MIN,
            prev,
            windows,
            next_window: 0,
            active: Vec::new(),
        }
    }

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

    /// `op` begins to run.
    fn push(&mut self, op: &Op) {
        self.counts[op.kind()] += 1;
        if op.step != NO_STEP {
            self.of_step(op.step)[op.kind()] += 1;
        }
        self.ends
            .push(std::cmp::Reverse((op.end(), op.kind(), op.step)));
        self.max_end = self.max_end.max(op.end());
    }
}

/// What the sweep shares between slabs: the windows, each device's windows by start, and which
/// windows are gap windows (their index among them).
struct Layout<'a> {
    windows: &'a [Window],
    by_device: FastMap<u32, Vec<usize>>,
    gap_of: Vec<Option<usize>>,
    top: usize,
}

/// A stretch of time swept on its own: what it adds to each window it touches, and its longest
/// idle stretches.
struct Slab<'a> {
    layout: &'a Layout<'a>,
    /// (window, breakdown part, covered ns) per window opened here.
    parts: Vec<(usize, Breakdown, i64)>,
    heap: BinaryHeap<Stretch>,
}

impl Slab<'_> {
    /// One segment `[a, b)` of device `d`, whose counts hold during it.
    fn feed(&mut self, d: &mut DeviceSweep, a: i64, b: i64) {
        let windows = self.layout.windows;
        while d.next_window < d.windows.len() && windows[d.windows[d.next_window]].start < b {
            let w = d.windows[d.next_window];
            if windows[w].end > a {
                d.active.push((w, self.parts.len()));
                self.parts.push((w, Breakdown::default(), 0));
            }
            d.next_window += 1;
        }
        d.active.retain(|&(w, _)| windows[w].end > a);
        let all = running(&d.counts);
        // An idle stretch is listed once, in the earliest gap window that holds it (step spans
        // on a device can overlap: a pipelined run, or two processes sharing it).
        let mut listed = false;
        for i in 0..d.active.len() {
            let (w, slot) = d.active[i];
            let win = &windows[w];
            let o = b.min(win.end).saturating_sub(a.max(win.start));
            if o <= 0 {
                continue;
            }
            let own = match win.owner {
                NO_STEP => all,
                step => running(d.of_step(step)),
            };
            let (_, part, covered) = &mut self.parts[slot];
            if own != 0 {
                *covered = covered.saturating_add(o);
                part.add_running(own, o);
            } else if all != 0 {
                *covered = covered.saturating_add(o);
                part.other_work_ns = part.other_work_ns.saturating_add(o);
            } else if let Some(g) = self.layout.gap_of[w].filter(|_| !listed) {
                // Idle time is what the segments that ran something leave of the window; an idle
                // stretch is only looked at as a gap.
                listed = true;
                self.heap
                    .push(Stretch(a.max(win.start), b.min(win.end), g, None));
                if self.heap.len() > self.layout.top {
                    self.heap.pop();
                }
            }
        }
    }

    /// Advance device `d` to time `t` (exclusive of starts at `t`): the segments up to each end
    /// before it, then up to `t`; with no `t`, up to its last end.
    fn advance(&mut self, d: &mut DeviceSweep, t: Option<i64>) {
        loop {
            let next_end = d.ends.peek().map(|e| e.0 .0);
            let at = match (next_end, t) {
                (Some(e), Some(t)) if e < t => e,
                (Some(e), None) => e,
                (_, Some(t)) => t,
                (None, None) => break,
            };
            if let Some(p) = d.prev.filter(|&p| at > p) {
                self.feed(d, p, at);
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
        }
    }
}

/// Where a slab begins: the ops started before it and still running at its start, and the time
/// each device last reached (the latest end of its ops before the slab).
#[derive(Default)]
struct Entry {
    running: Vec<Op>,
    reached: FastMap<u32, i64>,
}

/// Sweep the ops of one slab (both lists sorted by start), from `entry` to `stop`, the next
/// slab's start (none for the last). A device still busy at `stop` is swept up to it, the rest
/// of its time being the next slab's; a device idle there stops at its last end, so that the idle
/// stretch across the cut is swept whole by the next slab, from the time the device reached.
fn sweep_slab<'a>(
    layout: &'a Layout<'a>,
    ops: [&[Op]; 2],
    entry: Entry,
    from: Option<i64>,
    stop: Option<i64>,
) -> Slab<'a> {
    static NONE: [usize; 0] = [];
    let mut slab = Slab {
        layout,
        parts: Vec::new(),
        heap: BinaryHeap::new(),
    };
    let windows_of = |device: u32| -> &'a [usize] {
        layout.by_device.get(&device).map_or(&NONE[..], |v| &v[..])
    };
    let mut devices: FastMap<u32, DeviceSweep<'a>> = FastMap::default();
    // A device busy at the slab's start is cut there: its running ops keep it busy, so the cut
    // splits no idle stretch.
    for op in &entry.running {
        devices
            .entry(op.device)
            .or_insert_with(|| DeviceSweep::new(windows_of(op.device), from))
            .push(op);
    }
    let (mut i, mut j) = (0, 0);
    let [a, b] = ops;
    let mut last: Option<(u32, DeviceSweep<'a>)> = None;
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
            let st = devices.remove(&op.device).unwrap_or_else(|| {
                DeviceSweep::new(
                    windows_of(op.device),
                    entry.reached.get(&op.device).copied(),
                )
            });
            last = Some((op.device, st));
        }
        let d = &mut last.as_mut().expect("set above").1;
        slab.advance(d, Some(op.start));
        d.push(op);
    }
    if let Some((dev, st)) = last.take() {
        devices.insert(dev, st);
    }
    for d in devices.values_mut() {
        slab.advance(d, stop.filter(|&t| d.max_end > t));
    }
    slab
}
/// Ops a slab holds at least: 1.5 MiB (the last slab fewer).
const SLAB_OPS: usize = 1 << 16;

/// Sweep the ops `next` gives (by start, `None` after the last) device by device, cutting each
/// device's timeline into segments and adding each segment to the windows it overlaps; `each`
/// sees every op, in order.
///
/// The ops are cut in time into slabs of about [`SLAB_OPS`], a few swept side by side while
/// the next few are read. A slab begins with the ops still running at its start, carried over
/// from the slabs before it; there a busy device's segment is split in two, which adds the same
/// to every window, and an idle device is not cut at all. The slabs' parts of each window are
/// added up and their idle stretches merged, so the result is the one sweep's. An idle stretch
/// ends where an op of its device starts in the same slab, so the process that ends it is found
/// there, while the slab's ops are held.
pub(super) fn sweep<E: Send>(
    next: impl FnMut() -> Result<Option<Op>, E> + Send,
    windows: &[Window],
    gap_windows: &[usize],
    top: usize,
    each: impl FnMut(&Op) + Send,
) -> Result<Sweep, E> {
    sweep_in(next, windows, gap_windows, top, each, SLAB_OPS)
}

/// A slab read and ready to sweep: its ops, its entry, where it begins and where the next does.
type Ready = (Vec<Op>, Entry, Option<i64>, Option<i64>);

/// [`sweep`] in slabs of at least `slab_ops`.
fn sweep_in<E: Send>(
    mut next: impl FnMut() -> Result<Option<Op>, E> + Send,
    windows: &[Window],
    gap_windows: &[usize],
    top: usize,
    mut each: impl FnMut(&Op) + Send,
    slab_ops: usize,
) -> Result<Sweep, E> {
    let mut layout = Layout {
        windows,
        by_device: FastMap::default(),
        gap_of: vec![None; windows.len()],
        top,
    };
    for (g, &w) in gap_windows.iter().enumerate() {
        layout.gap_of[w] = Some(g);
    }
    for (i, w) in windows.iter().enumerate() {
        layout.by_device.entry(w.device).or_default().push(i);
    }
    for list in layout.by_device.values_mut() {
        list.sort_by_key(|&i| windows[i].start);
    }
    let mut breakdowns: Vec<Breakdown> = windows
        .iter()
        .map(|w| Breakdown {
            span_ns: w.end.saturating_sub(w.start),
            ..Breakdown::default()
        })
        .collect();
    let mut covered = vec![0i64; windows.len()];
    let mut heap: BinaryHeap<Stretch> = BinaryHeap::new();

    let side_by_side = rayon::current_num_threads().max(1);
    // The ops before the next slab that are still running at its start, and the time each
    // device last reached.
    let mut carried = Entry::default();
    let mut from: Option<i64> = None;
    let mut pending = next()?;
    let mut read = |pending: &mut Option<Op>, from: &mut Option<i64>| -> Result<Vec<Ready>, E> {
        let mut batch = Vec::new();
        while batch.len() < side_by_side && pending.is_some() {
            let mut ops: Vec<Op> = Vec::with_capacity(slab_ops.min(SLAB_OPS));
            // All the ops of one start go to one slab: the next begins at a later start.
            while let Some(op) = *pending {
                if ops.len() >= slab_ops && ops.last().is_some_and(|l| l.start < op.start) {
                    break;
                }
                each(&op);
                ops.push(op);
                *pending = next()?;
            }
            let stop = pending.map(|o| o.start);
            let entry = Entry {
                running: carried.running.clone(),
                reached: carried.reached.clone(),
            };
            for op in &ops {
                let e = carried.reached.entry(op.device).or_insert(i64::MIN);
                *e = (*e).max(op.end());
                if stop.is_some_and(|t| op.end() > t) {
                    carried.running.push(*op);
                }
            }
            if let Some(t) = stop {
                carried.running.retain(|o| o.end() > t);
            }
            batch.push((ops, entry, *from, stop));
            *from = stop;
        }
        Ok(batch)
    };
    let mut batch = read(&mut pending, &mut from)?;
    while !batch.is_empty() {
        // Sweep this batch while the next is read.
        let (slabs, more) = rayon::join(
            || {
                batch
                    .into_par_iter()
                    .map(|(ops, entry, from, stop)| {
                        let slab = sweep_slab(&layout, [&ops, &[]], entry, from, stop);
                        let found: Vec<Stretch> = (slab.heap.into_iter())
                            .map(|s| {
                                let device = windows[gap_windows[s.2]].device;
                                let pid = next_process([&ops, &[]], device, s.1);
                                Stretch(s.0, s.1, s.2, pid)
                            })
                            .collect();
                        (slab.parts, found)
                    })
                    .collect::<Vec<_>>()
            },
            || read(&mut pending, &mut from),
        );
        for (parts, found) in slabs {
            for (w, part, c) in parts {
                breakdowns[w].add(&part);
                covered[w] = covered[w].saturating_add(c);
            }
            for s in found {
                heap.push(s);
                if heap.len() > top {
                    heap.pop();
                }
            }
        }
        batch = more?;
    }
    for (w, b) in breakdowns.iter_mut().enumerate() {
        b.idle_ns = b
            .idle_ns
            .saturating_add(b.span_ns.saturating_sub(covered[w]));
    }
    let mut gaps: Vec<(i64, i64, usize, Option<u32>)> =
        heap.into_iter().map(|s| (s.0, s.1, s.2, s.3)).collect();
    let length = |g: &(i64, i64, usize, Option<u32>)| g.1.saturating_sub(g.0);
    gaps.sort_unstable_by(|a, b| {
        length(b)
            .cmp(&length(a))
            .then(a.0.cmp(&b.0))
            .then(a.2.cmp(&b.2))
    });
    Ok(Sweep { breakdowns, gaps })
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Ops on three devices: bursts of overlapping ops with idle stretches between, a few long
    /// ones, in steps whose spans overlap; their windows (each device's span, each step's span
    /// owned by the step, and some unowned windows) with the steps as gap windows.
    fn trace(seed: u64) -> (Vec<Op>, Vec<Op>, Vec<Window>, Vec<usize>) {
        let mut state = seed;
        let mut next = move |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        let (mut kernels, mut rest) = (Vec::new(), Vec::new());
        let mut steps: Vec<(u32, i64, i64)> = Vec::new();
        for device in 0..3u32 {
            let mut t = next(1000) as i64;
            for i in 0..3000 {
                t += if next(20) == 0 {
                    5_000 + next(20_000) as i64
                } else {
                    next(300) as i64
                };
                let len = if next(200) == 0 {
                    40_000
                } else {
                    1 + next(2_000) as i64
                };
                let step = (i / 500) as u32;
                let step = if next(10) == 0 { NO_STEP } else { step };
                let list = if next(4) == 0 {
                    &mut rest
                } else {
                    &mut kernels
                };
                let kind = next(KINDS.len() as u64) as usize;
                Op::pieces(t, t + len, step, device, next(3) as u32, kind, |o| {
                    list.push(o)
                });
                if step != NO_STEP {
                    match steps.iter_mut().find(|s| s.0 == device * 100 + step) {
                        Some(s) => s.2 = s.2.max(t + len),
                        None => steps.push((device * 100 + step, t, t + len)),
                    }
                }
            }
        }
        kernels.sort_by_key(|o| o.start);
        rest.sort_by_key(|o| o.start);
        let mut windows = Vec::new();
        let mut gaps = Vec::new();
        for &(id, start, end) in &steps {
            gaps.push(windows.len());
            windows.push(Window {
                device: id / 100,
                start,
                end,
                owner: id % 100,
            });
        }
        for device in 0..3 {
            for k in 0..20 {
                let start = next(3_000_000) as i64;
                windows.push(Window {
                    device,
                    start,
                    end: start + next(400_000) as i64 + 1,
                    owner: NO_STEP,
                });
                if k == 0 {
                    windows.push(Window {
                        device,
                        start: 0,
                        end: i64::MAX / 4,
                        owner: NO_STEP,
                    });
                }
            }
        }
        (kernels, rest, windows, gaps)
    }

    /// Swept in slabs side by side, a trace gives what one sweep of it gives, and the process
    /// found in its slab to end each idle gap is the one the whole trace gives.
    #[test]
    fn slabs_sum_to_one_sweep() {
        for seed in [1, 7, 42] {
            let (kernels, rest, windows, gaps) = trace(seed);
            let mut all: Vec<Op> = kernels.iter().chain(&rest).copied().collect();
            all.sort_by_key(|o| o.start);
            let run = |top: usize, slab_ops: usize| {
                let mut ops = all.iter().copied();
                let mut seen = 0;
                let swept = sweep_in(
                    || Ok::<_, ()>(ops.next()),
                    &windows,
                    &gaps,
                    top,
                    |_| seen += 1,
                    slab_ops,
                )
                .expect("no error");
                assert_eq!(seen, all.len());
                swept
            };
            // Every idle stretch listed, so that one split or swept twice would show.
            for top in [10, usize::MAX] {
                let one = run(top, usize::MAX);
                assert!(one.gaps.len() >= 10 && one.breakdowns.iter().any(|b| b.other_work_ns > 0));
                for g in &one.gaps {
                    let device = windows[gaps[g.2]].device;
                    assert_eq!(g.3, next_process([&all, &[]], device, g.1), "seed {seed}");
                }
                for slab_ops in [1, 7, 100, 1000] {
                    let cut = run(top, slab_ops);
                    assert_eq!(cut.breakdowns, one.breakdowns, "seed {seed}, {slab_ops}");
                    assert_eq!(cut.gaps, one.gaps, "seed {seed}, {slab_ops}");
                }
            }
        }
    }
}
