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
//! A long trace is swept in time slabs side by side, each beginning with the ops still running
//! at its start; the slabs' sums are those of one sweep ([`sweep`] says why).

use std::cmp::Reverse;
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
                self.heap.push(Stretch(a.max(win.start), b.min(win.end), g));
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
/// Ops a slab holds at least: fewer are swept in one piece.
const SLAB_OPS: usize = 1 << 16;

/// Sweep each group's ops (both lists sorted by start, the group holding every op of its
/// devices) device by device, cutting each device's timeline into segments and adding each
/// segment to the windows it overlaps.
///
/// A long trace is cut in time into slabs swept side by side. A slab begins with the ops still
/// running at its start, found among the ops that outlast the slabs before it; there a busy
/// device's segment is split in two, which adds the same to every window, and an idle device is
/// not cut at all. The slabs' parts of each window are added up and their idle stretches merged,
/// so the result is the one sweep's. Groups, whose devices differ, are swept side by side too.
pub(super) fn sweep(
    groups: &[[&[Op]; 2]],
    windows: &[Window],
    gap_windows: &[usize],
    top: usize,
) -> Sweep {
    let most = 4 * rayon::current_num_threads();
    let counts: Vec<usize> = (groups.iter())
        .map(|g| ((g[0].len() + g[1].len()) / SLAB_OPS).clamp(1, most))
        .collect();
    sweep_in(groups, windows, gap_windows, top, &counts)
}

/// [`sweep`] with each group in at most its `counts` slabs.
fn sweep_in(
    groups: &[[&[Op]; 2]],
    windows: &[Window],
    gap_windows: &[usize],
    top: usize,
    counts: &[usize],
) -> Sweep {
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
    let slabs: Vec<Slab> = (groups.par_iter().zip(counts))
        .flat_map_iter(|(&ops, &count)| slabs(&layout, ops, count))
        .collect();

    let mut breakdowns: Vec<Breakdown> = windows
        .iter()
        .map(|w| Breakdown {
            span_ns: w.end.saturating_sub(w.start),
            ..Breakdown::default()
        })
        .collect();
    let mut covered = vec![0i64; windows.len()];
    let mut heap: BinaryHeap<Stretch> = BinaryHeap::new();
    for slab in slabs {
        for (w, part, c) in slab.parts {
            breakdowns[w].add(&part);
            covered[w] = covered[w].saturating_add(c);
        }
        for s in slab.heap {
            heap.push(s);
            if heap.len() > top {
                heap.pop();
            }
        }
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

/// One group's ops (both lists sorted by start) swept in at most `count` slabs side by side.
fn slabs<'a>(layout: &'a Layout<'a>, ops: [&[Op]; 2], count: usize) -> Vec<Slab<'a>> {
    // The slabs' starts: op starts, evenly spaced in the longer list, strictly increasing.
    let longer = if ops[0].len() >= ops[1].len() {
        ops[0]
    } else {
        ops[1]
    };
    let mut cuts: Vec<i64> = (1..count)
        .map(|k| longer[k * longer.len() / count].start)
        .collect();
    cuts.dedup();
    let first = ops.iter().filter_map(|l| l.first()).map(|o| o.start).min();
    cuts.retain(|&t| first.is_some_and(|f| t > f));
    let bounds: Vec<[&[Op]; 2]> = (0..=cuts.len())
        .map(|k| {
            ops.map(|list| {
                let at = |c: Option<&i64>| {
                    c.map_or(list.len(), |&t| list.partition_point(|o| o.start < t))
                };
                let from = if k == 0 { 0 } else { at(cuts.get(k - 1)) };
                &list[from..at(cuts.get(k))]
            })
        })
        .collect();

    // Each slab's latest end per device, and its ops that outlast it.
    let outlasting: Vec<(FastMap<u32, i64>, Vec<Op>)> = bounds
        .par_iter()
        .enumerate()
        .map(|(k, slab)| {
            let mut reached: FastMap<u32, i64> = FastMap::default();
            let mut outlast = Vec::new();
            for op in slab.iter().flat_map(|l| l.iter()) {
                let e = reached.entry(op.device).or_insert(i64::MIN);
                *e = (*e).max(op.end());
                if cuts.get(k).is_some_and(|&t| op.end() > t) {
                    outlast.push(*op);
                }
            }
            (reached, outlast)
        })
        .collect();
    let mut entries = Vec::with_capacity(bounds.len());
    let mut entry = Entry::default();
    for (k, (reached, outlast)) in outlasting.into_iter().enumerate() {
        entries.push(Entry {
            running: entry.running.clone(),
            reached: entry.reached.clone(),
        });
        for (d, e) in reached {
            let r = entry.reached.entry(d).or_insert(e);
            *r = (*r).max(e);
        }
        entry.running.extend(outlast);
        if let Some(&t) = cuts.get(k) {
            entry.running.retain(|o| o.end() > t);
        }
    }

    bounds
        .into_par_iter()
        .zip(entries)
        .enumerate()
        .map(|(k, (slab, entry))| {
            let from = k.checked_sub(1).map(|k| cuts[k]);
            sweep_slab(layout, slab, entry, from, cuts.get(k).copied())
        })
        .collect()
}

/// A profile's ops on timelines no two groups share: each group holds every op of its devices,
/// the kernels' and the others' (memory operations, graphs) apart, each list sorted by start. One
/// export's kernels make one group; the files of a run, whose devices differ, one group each,
/// swept side by side without first being merged into one list.
#[derive(Default)]
pub(super) struct Timelines {
    groups: Vec<[Vec<Op>; 2]>,
    of_device: FastMap<u32, usize>,
}

impl Timelines {
    /// The timelines of `runs`, the kernel chunks' ops in the chunks' order (each chunk's by start
    /// where its source gives them so), and of `rest`, the other ops.
    pub(super) fn new(runs: Vec<Vec<Op>>, rest: Vec<Op>) -> Timelines {
        let sorted = |r: &[Op]| r.windows(2).all(|w| w[0].start <= w[1].start);
        let in_time = runs.iter().all(|r| sorted(r));
        // Chunks that follow each other in time make one run.
        let mut joined: Vec<Vec<Op>> = Vec::new();
        for mut r in runs.into_iter().filter(|r| !r.is_empty()) {
            match joined.last_mut() {
                Some(m) if !in_time || m.last().is_some_and(|l| l.start <= r[0].start) => {
                    m.append(&mut r)
                }
                _ => joined.push(r),
            }
        }
        // Runs that share a device make one group (union-find over the runs).
        let mut parent: Vec<usize> = (0..joined.len()).collect();
        fn root(parent: &mut [usize], mut i: usize) -> usize {
            while parent[i] != i {
                parent[i] = parent[parent[i]];
                i = parent[i];
            }
            i
        }
        let mut first_run: FastMap<u32, usize> = FastMap::default();
        for (i, r) in joined.iter().enumerate() {
            let mut last = None;
            for o in r {
                if last == Some(o.device) {
                    continue;
                }
                last = Some(o.device);
                let j = *first_run.entry(o.device).or_insert(i);
                let (a, b) = (root(&mut parent, i), root(&mut parent, j));
                parent[a.max(b)] = a.min(b);
            }
        }
        let mut slot_of_root: FastMap<usize, usize> = FastMap::default();
        let mut members: Vec<Vec<Vec<Op>>> = Vec::new();
        for (i, r) in joined.into_iter().enumerate() {
            let next = members.len();
            let slot = *slot_of_root.entry(root(&mut parent, i)).or_insert(next);
            if slot == next {
                members.push(Vec::new());
            }
            members[slot].push(r);
        }
        let mut groups: Vec<[Vec<Op>; 2]> = members
            .into_iter()
            .map(|runs| {
                let mut ops = by_start(runs);
                if !sorted(&ops) {
                    ops.par_sort_unstable_by_key(|o| o.start);
                }
                [ops, Vec::new()]
            })
            .collect();
        let mut of_device: FastMap<u32, usize> = FastMap::default();
        for (d, i) in first_run {
            of_device.insert(d, slot_of_root[&root(&mut parent, i)]);
        }
        // The other ops join their device's group; a device with none of the kernels makes a
        // group of its own.
        for o in rest {
            let g = *of_device.entry(o.device).or_insert_with(|| {
                groups.push([Vec::new(), Vec::new()]);
                groups.len() - 1
            });
            groups[g][1].push(o);
        }
        for g in &mut groups {
            g[1].sort_unstable_by_key(|o| o.start);
        }
        Timelines { groups, of_device }
    }

    /// Each group's kernel ops and other ops.
    pub(super) fn groups(&self) -> Vec<[&[Op]; 2]> {
        (self.groups.iter())
            .map(|g| [&g[0][..], &g[1][..]])
            .collect()
    }

    /// The group that holds `device`'s ops: no ops for a device without any.
    pub(super) fn of_device(&self, device: u32) -> [&[Op]; 2] {
        match self.of_device.get(&device) {
            Some(&g) => [&self.groups[g][0], &self.groups[g][1]],
            None => [&[], &[]],
        }
    }

    /// The kernels' ops, group after group.
    pub(super) fn kernels(&self) -> impl Iterator<Item = &Op> {
        self.groups.iter().flat_map(|g| &g[0])
    }

    /// Every op, group after group.
    pub(super) fn all(&self) -> impl Iterator<Item = &Op> {
        self.groups.iter().flat_map(|g| g.iter().flatten())
    }
}

/// Runs of ops, each by start, in one list: merged by start, equal starts in the runs' order, as
/// a stable sort would leave them, without its buffer.
fn by_start(mut runs: Vec<Vec<Op>>) -> Vec<Op> {
    if runs.len() <= 1 {
        return runs.pop().unwrap_or_default();
    }
    let mut out = Vec::with_capacity(runs.iter().map(Vec::len).sum());
    let mut next = vec![0usize; runs.len()];
    let mut heap: BinaryHeap<Reverse<(i64, usize)>> = (runs.iter().enumerate())
        .map(|(i, r)| Reverse((r[0].start, i)))
        .collect();
    while let Some(Reverse((_, i))) = heap.pop() {
        out.push(runs[i][next[i]]);
        next[i] += 1;
        if let Some(o) = runs[i].get(next[i]) {
            heap.push(Reverse((o.start, i)));
        }
    }
    out
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

    /// Swept in slabs side by side, a trace gives what one sweep of it gives.
    #[test]
    fn slabs_sum_to_one_sweep() {
        for seed in [1, 7, 42] {
            let (kernels, rest, windows, gaps) = trace(seed);
            // Every idle stretch listed, so that one split or swept twice would show.
            for top in [10, usize::MAX] {
                let one = sweep_in(&[[&kernels, &rest]], &windows, &gaps, top, &[1]);
                assert!(one.gaps.len() >= 10 && one.breakdowns.iter().any(|b| b.other_work_ns > 0));
                for count in [2, 3, 8, 50] {
                    let cut = sweep_in(&[[&kernels, &rest]], &windows, &gaps, top, &[count]);
                    assert_eq!(cut.breakdowns, one.breakdowns, "seed {seed}, {count} slabs");
                    assert_eq!(cut.gaps, one.gaps, "seed {seed}, {count} slabs");
                }
            }
        }
    }

    /// The ops of each device in a run of their own, as the files of a run come, make a group
    /// each, swept side by side; runs that share a device are merged into one group. Either way
    /// the sweep is that of every op in one list.
    #[test]
    fn groups_sum_to_one_sweep() {
        for seed in [3, 11] {
            let (kernels, rest, windows, gaps) = trace(seed);
            let one = sweep_in(&[[&kernels, &rest]], &windows, &gaps, usize::MAX, &[1]);
            let on = |d: u32| kernels.iter().filter(move |o| o.device == d).copied();
            let per_device =
                Timelines::new((0..3).map(|d| on(d).collect()).collect(), rest.clone());
            // Device 1's ops shared between two runs, which must be swept as one group.
            let (mut a, mut b): (Vec<Op>, Vec<Op>) = (on(0).collect(), on(2).collect());
            for (i, o) in on(1).enumerate() {
                if i % 2 == 0 {
                    a.push(o)
                } else {
                    b.push(o)
                }
            }
            a.sort_by_key(|o| o.start);
            b.sort_by_key(|o| o.start);
            let shared = Timelines::new(vec![a, b], rest.clone());
            for (timelines, groups) in [(per_device, 3), (shared, 1)] {
                assert_eq!(timelines.groups().len(), groups, "seed {seed}");
                let split = sweep(&timelines.groups(), &windows, &gaps, usize::MAX);
                assert_eq!(
                    split.breakdowns, one.breakdowns,
                    "seed {seed}, {groups} groups"
                );
                assert_eq!(split.gaps, one.gaps, "seed {seed}, {groups} groups");
                assert_eq!(timelines.all().count(), kernels.len() + rest.len());
            }
        }
    }
}
