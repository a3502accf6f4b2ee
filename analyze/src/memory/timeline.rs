//! Allocated and reserved bytes over the recorded window, replayed from the allocator's trace the
//! way the caching allocator counts them.
//!
//! Three things make a trace-only sum differ from `torch.cuda.max_memory_allocated()`, and the
//! replay handles each:
//!
//! 1. **Rounding.** Trace entries carry the requested size; the allocator counts the block it
//!    handed out, at least the request rounded up to 512 bytes ([`round_size`]).
//! 2. **Unsplit blocks.** When the free block the allocator picks is only a little larger than
//!    the request (less than 1 MiB left over in the large pool, less than 512 bytes in the small
//!    pool), it hands out the whole block and counts all of it. The replay keeps the segments'
//!    layout (which addresses are occupied) and applies the same rule, so the counted size of an
//!    allocation is the distance to the next occupied address when the allocator would not split.
//! 3. **Allocations made before recording began.** They appear in no `alloc` entry, only in the
//!    end-state `segments` (if still live) or as a `free_requested` of an address never allocated
//!    in the window. Replaying the trace backwards from the end state gives the allocations live
//!    at the start of the window, so the timeline starts from the right baseline.
//!
//! What it does not do: it does not model private pools of CUDA graphs or expandable segments'
//! page mapping (their allocations count as the rounded request), and it trusts the trace's
//! order. On the ten snapshots of `fixtures/memsnap` the replayed peak equals
//! `max_memory_allocated` exactly.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;

use crate::model::snapshot::{Action, AllocatorSettings, BlockState, Snapshot, StackId};

/// The allocator's smallest block and rounding unit (`kMinBlockSize`).
pub const MIN_BLOCK: u64 = 512;
/// Largest request served from the small pool (`kSmallSize`), and the most a large block may be
/// oversized before the allocator splits it.
pub const SMALL_SIZE: u64 = 1 << 20;

/// The size the caching allocator reserves for a request of `size` bytes (`round_size`).
pub fn round_size(size: u64, settings: &AllocatorSettings) -> u64 {
    if size < MIN_BLOCK {
        return MIN_BLOCK;
    }
    let divisions = power2_divisions(size, settings);
    if divisions > 1 && size > MIN_BLOCK.saturating_mul(divisions) {
        return roundup_power2_next_division(size, divisions);
    }
    size.div_ceil(MIN_BLOCK).saturating_mul(MIN_BLOCK)
}

/// `roundup_power2_divisions` for the size's interval: intervals start at 1 MiB and double.
fn power2_divisions(size: u64, settings: &AllocatorSettings) -> u64 {
    if settings.roundup_power2_divisions.is_empty() {
        return 0;
    }
    let log_size = 63 - u64::from(size.leading_zeros());
    let index = log_size.saturating_sub(20) as usize;
    let last = settings.roundup_power2_divisions.len() - 1;
    settings.roundup_power2_divisions[index.min(last)]
}

fn roundup_power2_next_division(size: u64, divisions: u64) -> u64 {
    if size.is_power_of_two() {
        return size;
    }
    let floor = 1u64 << (63 - size.leading_zeros());
    let step = floor >> (63 - divisions.leading_zeros());
    if step == 0 {
        return floor << 1;
    }
    let rounded_floor = size & !(step - 1);
    if rounded_floor == size {
        size
    } else {
        rounded_floor.saturating_add(step)
    }
}

/// One allocation seen in the window or live at its start.
#[derive(Clone, Debug, Serialize)]
pub struct Allocation {
    pub addr: u64,
    /// Bytes the allocator counts for it.
    pub size: u64,
    /// Bytes the caller asked for.
    pub requested: u64,
    pub stream: u64,
    pub stack: StackId,
    /// Trace entry that allocated it; `None` when it was allocated before recording began.
    pub alloc_entry: Option<usize>,
    /// Trace entry that freed it (`free_requested`); `None` when still allocated at the end.
    pub free_entry: Option<usize>,
}

impl Allocation {
    pub fn before_recording(&self) -> bool {
        self.alloc_entry.is_none()
    }

    /// Whether it is allocated just after trace entry `entry` (or at the start, for `None`).
    pub fn live_after(&self, entry: Option<usize>) -> bool {
        let allocated = match (self.alloc_entry, entry) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(a), Some(e)) => a <= e,
        };
        let freed = match (self.free_entry, entry) {
            (None, _) => false,
            (Some(_), None) => false,
            (Some(f), Some(e)) => f <= e,
        };
        allocated && !freed
    }
}

/// The state just after one trace entry.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Point {
    pub entry: usize,
    pub time_us: Option<i64>,
    pub allocated: u64,
    pub reserved: u64,
}

/// Allocated and reserved bytes of one device over the recorded window.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Timeline {
    pub device: i64,
    /// Every allocation live at the start or made in the window, in order of allocation.
    pub allocations: Vec<Allocation>,
    /// One point per trace entry.
    pub points: Vec<Point>,
    pub start_allocated: u64,
    pub start_reserved: u64,
    /// From the end-state segments.
    pub end_allocated: u64,
    pub end_reserved: u64,
    /// Trace entries whose counted size had to fall back to the rounded request because the
    /// segment layout did not explain the address.
    pub size_fallbacks: usize,
    /// Frees of addresses that were not allocated (a damaged or truncated trace).
    pub unmatched_frees: usize,
    pub oom_entries: Vec<usize>,
}

impl Timeline {
    /// The first point where allocated bytes are highest; `None` when the window is empty.
    pub fn peak_allocated(&self) -> Option<Point> {
        self.points
            .iter()
            .fold(None, |best: Option<Point>, p| match best {
                Some(b) if b.allocated >= p.allocated => Some(b),
                _ => Some(*p),
            })
    }

    pub fn peak_reserved(&self) -> Option<Point> {
        self.points
            .iter()
            .fold(None, |best: Option<Point>, p| match best {
                Some(b) if b.reserved >= p.reserved => Some(b),
                _ => Some(*p),
            })
    }

    /// Allocations live just after trace entry `entry` (`None`: at the start of the window).
    pub fn live_at(&self, entry: Option<usize>) -> impl Iterator<Item = &Allocation> {
        self.allocations.iter().filter(move |a| a.live_after(entry))
    }

    /// Time of the first entry that has one, the origin of relative times.
    pub fn first_time_us(&self) -> Option<i64> {
        self.points.iter().find_map(|p| p.time_us)
    }
}

/// Replay `device`'s trace against the snapshot's end state.
pub fn replay(snap: &Snapshot, device: i64) -> Timeline {
    let trace = snap.trace(device);
    let settings = &snap.settings;
    let segments: Vec<_> = snap
        .segments
        .iter()
        .filter(|s| s.device == device)
        .collect();

    // End state.
    let mut end_allocated = 0u64;
    let mut end_reserved = 0u64;
    // addr -> (size, requested, stream, stack) of blocks held by tensors at the end.
    let mut live_end: HashMap<u64, (u64, u64, u64, StackId)> = HashMap::new();
    let mut occupied: BTreeMap<u64, u64> = BTreeMap::new();
    let mut layout: BTreeMap<u64, (u64, bool)> = BTreeMap::new();
    for seg in &segments {
        end_reserved = end_reserved.saturating_add(seg.total_size);
        layout.insert(seg.address, (seg.total_size, seg.is_expandable));
        for b in &seg.blocks {
            match b.state {
                BlockState::ActiveAllocated => {
                    end_allocated = end_allocated.saturating_add(b.size);
                    live_end.insert(b.address, (b.size, b.requested_size, seg.stream, b.stack));
                    occupied.insert(b.address, b.size);
                }
                BlockState::ActivePendingFree => {
                    occupied.insert(b.address, b.size);
                }
                BlockState::Inactive => {}
            }
        }
    }

    // Walk backwards to the start of the window.
    let mut live_start: HashMap<u64, (u64, u64, u64, StackId)> = live_end.clone();
    let mut reserved = end_reserved;
    let mut last_alloc_of: HashMap<u64, usize> = HashMap::new();
    let mut freed_later: HashSet<u64> = HashSet::new();
    for (i, e) in trace.iter().enumerate().rev() {
        match e.action {
            Action::Alloc => {
                live_start.remove(&e.addr);
                occupied.remove(&e.addr);
                if !freed_later.contains(&e.addr) {
                    last_alloc_of.entry(e.addr).or_insert(i);
                }
                freed_later.remove(&e.addr);
            }
            Action::FreeRequested => {
                let r = round_size(e.size, settings);
                live_start.insert(e.addr, (r, e.size, e.stream, StackId::EMPTY));
                freed_later.insert(e.addr);
            }
            Action::FreeCompleted => {
                occupied.insert(e.addr, round_size(e.size, settings));
            }
            Action::SegmentAlloc | Action::SegmentMap => {
                reserved = reserved.saturating_sub(e.size);
                if e.action == Action::SegmentAlloc {
                    layout.remove(&e.addr);
                }
            }
            Action::SegmentFree | Action::SegmentUnmap => {
                reserved = reserved.saturating_add(e.size);
                if e.action == Action::SegmentFree {
                    layout.insert(e.addr, (e.size, settings.expandable_segments));
                }
            }
            Action::Snapshot | Action::Oom | Action::Other => {}
        }
    }
    // Blocks allocated before the window and still live occupy their space from the start.
    for (&addr, &(size, ..)) in &live_start {
        occupied.entry(addr).or_insert(size);
    }

    let mut tl = Timeline {
        device,
        start_reserved: reserved,
        end_allocated,
        end_reserved,
        ..Timeline::default()
    };
    let mut live: HashMap<u64, usize> = HashMap::with_capacity(live_start.len());
    let mut start: Vec<_> = live_start.into_iter().collect();
    start.sort_unstable_by_key(|(addr, _)| *addr);
    let mut allocated = 0u64;
    for (addr, (size, requested, stream, stack)) in start {
        allocated = allocated.saturating_add(size);
        live.insert(addr, tl.allocations.len());
        tl.allocations.push(Allocation {
            addr,
            size,
            requested,
            stream,
            stack,
            alloc_entry: None,
            free_entry: None,
        });
    }
    tl.start_allocated = allocated;

    tl.points.reserve(trace.len());
    for (i, e) in trace.iter().enumerate() {
        match e.action {
            Action::Alloc => {
                let size = match (last_alloc_of.get(&e.addr), live_end.get(&e.addr)) {
                    // Still live at the end: the end state knows its exact size.
                    (Some(&last), Some(&(size, ..))) if last == i => size,
                    _ => {
                        let (size, fallback) =
                            counted_size(e.addr, e.size, &occupied, &layout, settings);
                        tl.size_fallbacks += usize::from(fallback);
                        size
                    }
                };
                allocated = allocated.saturating_add(size);
                occupied.insert(e.addr, size);
                if let Some(prev) = live.insert(e.addr, tl.allocations.len()) {
                    // Allocated twice without a free: the trace lost the free.
                    tl.unmatched_frees += 1;
                    let old = &mut tl.allocations[prev];
                    old.free_entry = Some(i);
                    allocated = allocated.saturating_sub(old.size);
                }
                tl.allocations.push(Allocation {
                    addr: e.addr,
                    size,
                    requested: e.size,
                    stream: e.stream,
                    stack: e.stack,
                    alloc_entry: Some(i),
                    free_entry: None,
                });
            }
            Action::FreeRequested => match live.remove(&e.addr) {
                Some(idx) => {
                    let a = &mut tl.allocations[idx];
                    a.free_entry = Some(i);
                    allocated = allocated.saturating_sub(a.size);
                }
                None => tl.unmatched_frees += 1,
            },
            Action::FreeCompleted => {
                occupied.remove(&e.addr);
            }
            Action::SegmentAlloc | Action::SegmentMap => {
                reserved = reserved.saturating_add(e.size);
                if e.action == Action::SegmentAlloc {
                    layout.insert(e.addr, (e.size, settings.expandable_segments));
                }
            }
            Action::SegmentFree | Action::SegmentUnmap => {
                reserved = reserved.saturating_sub(e.size);
                if e.action == Action::SegmentFree {
                    layout.remove(&e.addr);
                }
            }
            Action::Oom => tl.oom_entries.push(i),
            Action::Snapshot | Action::Other => {}
        }
        tl.points.push(Point {
            entry: i,
            time_us: e.time_us,
            allocated,
            reserved,
        });
    }
    tl
}

/// The bytes the allocator counts for a request of `requested` bytes served at `addr`: the
/// rounded request, or the whole free block when the allocator would not split it. The second
/// value says whether the layout failed to explain the address (and the rounded request was used).
fn counted_size(
    addr: u64,
    requested: u64,
    occupied: &BTreeMap<u64, u64>,
    layout: &BTreeMap<u64, (u64, bool)>,
    settings: &AllocatorSettings,
) -> (u64, bool) {
    let rounded = round_size(requested, settings);
    let Some((&seg_addr, &(seg_size, expandable))) = layout.range(..=addr).next_back() else {
        return (rounded, true);
    };
    let seg_end = seg_addr.saturating_add(seg_size);
    if addr >= seg_end {
        return (rounded, true);
    }
    if expandable {
        // Expandable segments split any block with at least 512 bytes left over.
        return (rounded, false);
    }
    if let Some((&b, &bs)) = occupied.range(..=addr).next_back() {
        if b >= seg_addr && b.saturating_add(bs) > addr {
            return (rounded, true);
        }
    }
    let next = occupied
        .range(addr.saturating_add(1)..)
        .next()
        .map_or(seg_end, |(&b, _)| b.min(seg_end));
    let free_block = next - addr;
    if free_block < rounded {
        return (rounded, true);
    }
    let remaining = free_block - rounded;
    let split = if rounded <= SMALL_SIZE {
        remaining >= MIN_BLOCK
    } else {
        !matches!(settings.max_split_size, Some(m) if rounded >= m) && remaining > SMALL_SIZE
    };
    (if split { rounded } else { free_block }, false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::snapshot::{Segment, TraceEntry};

    fn entry(action: Action, addr: u64, size: u64) -> TraceEntry {
        TraceEntry {
            action,
            addr,
            size,
            stream: 0,
            time_us: None,
            stack: StackId::EMPTY,
            compile_context: None,
            user_metadata: None,
        }
    }

    #[test]
    fn round_size_matches_the_caching_allocator() {
        let s = AllocatorSettings::default();
        assert_eq!(round_size(1, &s), 512);
        assert_eq!(round_size(512, &s), 512);
        assert_eq!(round_size(513, &s), 1024);
        assert_eq!(round_size(30_720_000, &s), 30_720_000);
        // roundup_power2_divisions=4 for every interval: 1.1 MiB rounds to 1.25 MiB.
        let s = AllocatorSettings {
            roundup_power2_divisions: vec![4; 16],
            ..AllocatorSettings::default()
        };
        assert_eq!(round_size(1_153_434, &s), 1_310_720);
        assert_eq!(round_size(1 << 21, &s), 1 << 21);
    }

    #[test]
    fn replay_counts_unsplit_blocks_and_what_was_allocated_before() {
        // One 20 MiB segment. Before recording: a 4 MiB tensor at the start (still live at the
        // end) and a 1 MiB one freed in the window. In the window a 15.5 MiB request lands in the
        // 16 MiB gap behind the first tensor: less than 1 MiB would be left, so the allocator
        // hands out (and counts) all 16 MiB.
        let mib = 1u64 << 20;
        let base = 1u64 << 32;
        let snap = Snapshot {
            segments: vec![Segment::one_live_block(0, base, 20 * mib, 4 * mib)],
            traces: vec![vec![
                entry(Action::FreeRequested, base + 4 * mib, mib),
                entry(Action::FreeCompleted, base + 4 * mib, mib),
                entry(Action::Alloc, base + 4 * mib, 15 * mib + mib / 2),
                entry(Action::FreeRequested, base + 4 * mib, 15 * mib + mib / 2),
                entry(Action::FreeCompleted, base + 4 * mib, 15 * mib + mib / 2),
            ]],
            ..Snapshot::default()
        };
        let tl = replay(&snap, 0);
        assert_eq!(tl.start_allocated, 5 * mib);
        let allocated: Vec<u64> = tl.points.iter().map(|p| p.allocated / mib).collect();
        assert_eq!(allocated, vec![4, 4, 20, 4, 4]);
        assert_eq!(tl.peak_allocated().map(|p| p.entry), Some(2));
        assert_eq!(tl.size_fallbacks, 0);
        assert_eq!(tl.end_allocated, 4 * mib);
    }
}
