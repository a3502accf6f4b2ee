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

use serde::Serialize;

use super::address_map::{AddressMap, Addresses};
use crate::fast_hash::FastMap;
use crate::model::snapshot::{
    Action, AllocatorSettings, BlockState, DeviceTrace, Snapshot, StackId, TraceEntry,
};

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

/// A trace entry's index as an [`Allocation`] keeps it: 32 bits (a trace holds fewer than
/// 2^32 entries), all ones for none.
const NO_ENTRY: u32 = u32::MAX;

fn entry_ref(entry: Option<usize>) -> u32 {
    entry.map_or(NO_ENTRY, |e| e as u32)
}

fn entry_of(r: u32) -> Option<usize> {
    (r != NO_ENTRY).then_some(r as usize)
}

/// One allocation seen in the window or live at its start.
#[derive(Clone, Copy, Debug)]
pub struct Allocation {
    /// Bytes the allocator counts for it.
    pub size: u64,
    /// Bytes the caller asked for.
    pub requested: u64,
    pub stream: u64,
    pub stack: StackId,
    alloc_entry: u32,
    free_entry: u32,
}

impl Allocation {
    /// An allocation made at trace entry `alloc_entry` (`None`: before recording began) and
    /// freed at `free_entry` (`None`: still allocated at the end).
    pub fn new(
        size: u64,
        requested: u64,
        stream: u64,
        stack: StackId,
        alloc_entry: Option<usize>,
        free_entry: Option<usize>,
    ) -> Allocation {
        Allocation {
            size,
            requested,
            stream,
            stack,
            alloc_entry: entry_ref(alloc_entry),
            free_entry: entry_ref(free_entry),
        }
    }

    /// Trace entry that allocated it; `None` when it was allocated before recording began.
    pub fn alloc_entry(&self) -> Option<usize> {
        entry_of(self.alloc_entry)
    }

    /// Trace entry that freed it (`free_requested`); `None` when still allocated at the end.
    pub fn free_entry(&self) -> Option<usize> {
        entry_of(self.free_entry)
    }

    pub fn before_recording(&self) -> bool {
        self.alloc_entry().is_none()
    }

    /// Whether it is allocated just after trace entry `entry` (or at the start, for `None`).
    pub fn live_after(&self, entry: Option<usize>) -> bool {
        let allocated = match (self.alloc_entry(), entry) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(a), Some(e)) => a <= e,
        };
        let freed = match (self.free_entry(), entry) {
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
///
/// It keeps the trace it replayed (shared, not copied) and one record per allocation, not a
/// point per entry: [`Timeline::points`] replays the levels again from the two when a chart
/// wants every point, and the peaks are folded as the replay passes.
#[derive(Clone, Debug, Default)]
pub struct Timeline {
    pub device: i64,
    /// The device's trace.
    pub trace: DeviceTrace,
    /// Every allocation live at the start or made in the window: those live at the start first
    /// (by address), then those of the window in order of allocation.
    pub allocations: Vec<Allocation>,
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
    /// Addresses of the allocations live at the start (the first of `allocations`).
    pub(crate) start_addrs: Vec<u64>,
    pub(crate) peak_allocated: Option<Point>,
    pub(crate) peak_reserved: Option<Point>,
    pub(crate) last: Option<Point>,
    /// The most bytes allocated at the entries of the ranges the replay watched
    /// ([`replay_watching`]); `None` when it watched none.
    pub highest_in_ranges: Option<u64>,
}

impl Timeline {
    /// The first point where allocated bytes are highest; `None` when the window is empty.
    pub fn peak_allocated(&self) -> Option<Point> {
        self.peak_allocated
    }

    /// The first point where reserved bytes are highest; `None` when the window is empty.
    pub fn peak_reserved(&self) -> Option<Point> {
        self.peak_reserved
    }

    /// The point after the last entry; `None` when the window is empty.
    pub fn last_point(&self) -> Option<Point> {
        self.last
    }

    /// Allocations live just after trace entry `entry` (`None`: at the start of the window).
    pub fn live_at(&self, entry: Option<usize>) -> impl Iterator<Item = &Allocation> {
        self.allocations.iter().filter(move |a| a.live_after(entry))
    }

    /// Time of the first entry that has one, the origin of relative times.
    pub fn first_time_us(&self) -> Option<i64> {
        (0..self.trace.len()).find_map(|i| self.trace.time_us(i))
    }

    /// Time of trace entry `entry`, if it has one.
    pub fn time_us(&self, entry: usize) -> Option<i64> {
        self.trace.time_us(entry)
    }

    /// One point per trace entry, in order: the levels replayed again from the allocations.
    pub fn points(&self) -> impl Iterator<Item = Point> + '_ {
        let allocations = &self.allocations[..];
        let mut levels = Levels::start(&self.trace, allocations, &self.start_addrs);
        levels.reserved = self.start_reserved;
        let mut next = self.start_addrs.len();
        self.trace.iter().enumerate().map(move |(i, e)| {
            let a = self.trace.address_of(i);
            if e.action == Action::Alloc {
                levels.alloc(allocations, a, next);
                next += 1;
            } else {
                levels.other(allocations, &e, a);
            }
            levels.point(i, e.time_us)
        })
    }
}

/// Allocated and reserved bytes as the entries pass, and the allocation each address holds (by
/// the trace's number of the address): the one walk of both the replay and
/// [`Timeline::points`].
struct Levels {
    live: Vec<u32>,
    allocated: u64,
    reserved: u64,
}

impl Levels {
    /// The levels at the start of the window: the allocations made before it (the first of
    /// `allocations`, at `addrs`) live, nothing reserved yet.
    fn start(trace: &DeviceTrace, allocations: &[Allocation], addrs: &[u64]) -> Self {
        let mut live = vec![NO_ENTRY; trace.address_count()];
        let mut allocated = 0u64;
        for (i, (a, &addr)) in allocations.iter().zip(addrs).enumerate() {
            allocated = allocated.saturating_add(a.size);
            // An address no entry names is never freed in the window.
            if let Some(id) = trace.address_id(addr) {
                live[id] = i as u32;
            }
        }
        Levels {
            live,
            allocated,
            reserved: 0,
        }
    }

    /// Allocation `index` of `allocations`, made at address `addr`; the allocation the address
    /// held, if the trace lost its free.
    fn alloc(&mut self, allocations: &[Allocation], addr: usize, index: usize) -> Option<usize> {
        self.allocated = self.allocated.saturating_add(allocations[index].size);
        let prev = entry_of(std::mem::replace(&mut self.live[addr], index as u32))?;
        self.allocated = self.allocated.saturating_sub(allocations[prev].size);
        Some(prev)
    }

    /// Any entry but an allocation, at address `addr`: a free takes its allocation's bytes
    /// (`Some(Ok)` with the allocation, `Some(Err)` when the address held none), a segment
    /// moves the reserved bytes.
    fn other(
        &mut self,
        allocations: &[Allocation],
        e: &TraceEntry,
        addr: usize,
    ) -> Option<Result<usize, ()>> {
        match e.action {
            Action::FreeRequested => Some(
                match entry_of(std::mem::replace(&mut self.live[addr], NO_ENTRY)) {
                    Some(idx) => {
                        self.allocated = self.allocated.saturating_sub(allocations[idx].size);
                        Ok(idx)
                    }
                    None => Err(()),
                },
            ),
            Action::SegmentAlloc | Action::SegmentMap => {
                self.reserved = self.reserved.saturating_add(e.size);
                None
            }
            Action::SegmentFree | Action::SegmentUnmap => {
                self.reserved = self.reserved.saturating_sub(e.size);
                None
            }
            _ => None,
        }
    }

    fn point(&self, entry: usize, time_us: Option<i64>) -> Point {
        Point {
            entry,
            time_us,
            allocated: self.allocated,
            reserved: self.reserved,
        }
    }
}

/// A block held by a tensor: its counted and requested size, stream and stack.
type Held = (u64, u64, u64, StackId);

/// Replay `device`'s trace against the snapshot's end state.
pub fn replay(snap: &Snapshot, device: i64) -> Timeline {
    replay_watching(snap, device, &[])
}

/// [`replay`], also folding the most bytes allocated at the entries of `ranges` (first and last
/// entry of each, in order, apart) into [`Timeline::highest_in_ranges`].
pub fn replay_watching(snap: &Snapshot, device: i64, ranges: &[(usize, usize)]) -> Timeline {
    let trace = snap.trace(device);
    let settings = &snap.settings;
    let segments: Vec<_> = snap
        .segments
        .iter()
        .filter(|s| s.device == device)
        .collect();

    // Every address the replay can meet, numbered in address order: the maps of occupied
    // blocks and of segments are kept by that number.
    let mut universe: Vec<u64> = (0..trace.address_count())
        .map(|a| trace.address(a))
        .collect();
    for seg in &segments {
        universe.push(seg.address);
        universe.extend(seg.blocks.iter().map(|b| b.address));
    }
    let addrs = Addresses::new(universe);
    let rank_of: Vec<usize> = (0..trace.address_count())
        .map(|a| addrs.rank(trace.address(a)))
        .collect();

    // End state.
    let mut end_allocated = 0u64;
    let mut end_reserved = 0u64;
    let mut live_end: FastMap<u64, Held> = FastMap::default();
    let mut occupied: AddressMap<u64> = AddressMap::new(addrs.len());
    let mut layout: AddressMap<(u64, bool)> = AddressMap::new(addrs.len());
    for seg in &segments {
        end_reserved = end_reserved.saturating_add(seg.total_size);
        layout.insert(addrs.rank(seg.address), (seg.total_size, seg.is_expandable));
        for b in &seg.blocks {
            match b.state {
                BlockState::ActiveAllocated => {
                    end_allocated = end_allocated.saturating_add(b.size);
                    live_end.insert(b.address, (b.size, b.requested_size, seg.stream, b.stack));
                    occupied.insert(addrs.rank(b.address), b.size);
                }
                BlockState::ActivePendingFree => {
                    occupied.insert(addrs.rank(b.address), b.size);
                }
                BlockState::Inactive => {}
            }
        }
    }

    // What is followed per address is kept by the trace's number of the address; blocks at
    // addresses no entry names are live from start to end.
    let addresses = trace.address_count();
    let mut end_of: Vec<Option<Held>> = vec![None; addresses];
    let mut untouched: Vec<(u64, Held)> = Vec::new();
    for (&addr, &held) in &live_end {
        match trace.address_id(addr) {
            Some(a) => end_of[a] = Some(held),
            None => untouched.push((addr, held)),
        }
    }

    // Walk backwards to the start of the window.
    let mut start_of = end_of.clone();
    let mut reserved = end_reserved;
    let mut last_alloc_of: Vec<u32> = vec![NO_ENTRY; addresses];
    let mut freed_later: Vec<bool> = vec![false; addresses];
    for (i, e) in trace.iter().enumerate().rev() {
        let a = trace.address_of(i);
        match e.action {
            Action::Alloc => {
                start_of[a] = None;
                occupied.remove(rank_of[a]);
                if !freed_later[a] && last_alloc_of[a] == NO_ENTRY {
                    last_alloc_of[a] = i as u32;
                }
                freed_later[a] = false;
            }
            Action::FreeRequested => {
                let r = round_size(e.size, settings);
                start_of[a] = Some((r, e.size, e.stream, StackId::EMPTY));
                freed_later[a] = true;
            }
            Action::FreeCompleted => {
                occupied.insert(rank_of[a], round_size(e.size, settings));
            }
            Action::SegmentAlloc | Action::SegmentMap => {
                reserved = reserved.saturating_sub(e.size);
                if e.action == Action::SegmentAlloc {
                    layout.remove(rank_of[a]);
                }
            }
            Action::SegmentFree | Action::SegmentUnmap => {
                reserved = reserved.saturating_add(e.size);
                if e.action == Action::SegmentFree {
                    layout.insert(rank_of[a], (e.size, settings.expandable_segments));
                }
            }
            Action::Snapshot | Action::Oom | Action::Other => {}
        }
    }
    // The allocations live at the start, by address.
    let mut start = untouched;
    for (a, held) in start_of.into_iter().enumerate() {
        if let Some(held) = held {
            start.push((trace.address(a), held));
        }
    }
    // Blocks allocated before the window and still live occupy their space from the start.
    for &(addr, (size, ..)) in &start {
        occupied.insert_if_absent(addrs.rank(addr), size);
    }

    let mut tl = Timeline {
        device,
        trace: trace.clone(),
        start_reserved: reserved,
        end_allocated,
        end_reserved,
        ..Timeline::default()
    };
    start.sort_unstable_by_key(|(addr, _)| *addr);
    for (addr, (size, requested, stream, stack)) in start {
        tl.start_addrs.push(addr);
        tl.allocations
            .push(Allocation::new(size, requested, stream, stack, None, None));
    }
    let mut levels = Levels::start(trace, &tl.allocations, &tl.start_addrs);
    levels.reserved = reserved;
    tl.start_allocated = levels.allocated;

    let mut ranges = ranges.iter().peekable();
    tl.highest_in_ranges = ranges.peek().map(|_| 0);
    for (i, e) in trace.iter().enumerate() {
        let a = trace.address_of(i);
        match e.action {
            Action::Alloc => {
                let size = match end_of[a] {
                    // Still live at the end: the end state knows its exact size.
                    Some((size, ..)) if last_alloc_of[a] == i as u32 => size,
                    _ => {
                        let (size, fallback) = counted_size(
                            (&addrs, rank_of[a]),
                            e.size,
                            &occupied,
                            &layout,
                            settings,
                        );
                        tl.size_fallbacks += usize::from(fallback);
                        size
                    }
                };
                occupied.insert(rank_of[a], size);
                let index = tl.allocations.len();
                tl.allocations.push(Allocation::new(
                    size,
                    e.size,
                    e.stream,
                    e.stack,
                    Some(i),
                    None,
                ));
                if let Some(prev) = levels.alloc(&tl.allocations, a, index) {
                    // Allocated twice without a free: the trace lost the free.
                    tl.unmatched_frees += 1;
                    tl.allocations[prev].free_entry = i as u32;
                }
            }
            _ => {
                match levels.other(&tl.allocations, &e, a) {
                    Some(Ok(idx)) => tl.allocations[idx].free_entry = i as u32,
                    Some(Err(())) => tl.unmatched_frees += 1,
                    None => {}
                }
                match e.action {
                    Action::FreeCompleted => {
                        occupied.remove(rank_of[a]);
                    }
                    Action::SegmentAlloc => {
                        layout.insert(rank_of[a], (e.size, settings.expandable_segments));
                    }
                    Action::SegmentFree => {
                        layout.remove(rank_of[a]);
                    }
                    Action::Oom => tl.oom_entries.push(i),
                    _ => {}
                }
            }
        }
        let p = levels.point(i, e.time_us);
        if tl.peak_allocated.is_none_or(|b| b.allocated < p.allocated) {
            tl.peak_allocated = Some(p);
        }
        if tl.peak_reserved.is_none_or(|b| b.reserved < p.reserved) {
            tl.peak_reserved = Some(p);
        }
        while ranges.next_if(|&&(_, last)| last < i).is_some() {}
        if let (Some(&&(first, _)), Some(h)) = (ranges.peek(), &mut tl.highest_in_ranges) {
            if first <= i {
                *h = (*h).max(p.allocated);
            }
        }
        tl.last = Some(p);
    }
    tl
}

/// The bytes the allocator counts for a request of `requested` bytes served at an address: the
/// rounded request, or the whole free block when the allocator would not split it. The second
/// value says whether the layout failed to explain the address (and the rounded request was used).
/// The address is given by its rank among the replay's addresses.
fn counted_size(
    (addrs, rank): (&Addresses, usize),
    requested: u64,
    occupied: &AddressMap<u64>,
    layout: &AddressMap<(u64, bool)>,
    settings: &AllocatorSettings,
) -> (u64, bool) {
    let addr = addrs.addr(rank);
    let rounded = round_size(requested, settings);
    let Some((seg_rank, (seg_size, expandable))) = layout.at_or_before(rank) else {
        return (rounded, true);
    };
    let seg_addr = addrs.addr(seg_rank);
    let seg_end = seg_addr.saturating_add(seg_size);
    if addr >= seg_end {
        return (rounded, true);
    }
    if expandable {
        // Expandable segments split any block with at least 512 bytes left over.
        return (rounded, false);
    }
    if let Some((b_rank, bs)) = occupied.at_or_before(rank) {
        let b = addrs.addr(b_rank);
        if b >= seg_addr && b.saturating_add(bs) > addr {
            return (rounded, true);
        }
    }
    let next = occupied
        .after(rank)
        .map_or(seg_end, |r| addrs.addr(r).min(seg_end));
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
            traces: vec![DeviceTrace::from(vec![
                entry(Action::FreeRequested, base + 4 * mib, mib),
                entry(Action::FreeCompleted, base + 4 * mib, mib),
                entry(Action::Alloc, base + 4 * mib, 15 * mib + mib / 2),
                entry(Action::FreeRequested, base + 4 * mib, 15 * mib + mib / 2),
                entry(Action::FreeCompleted, base + 4 * mib, 15 * mib + mib / 2),
            ])],
            ..Snapshot::default()
        };
        let tl = replay(&snap, 0);
        assert_eq!(tl.start_allocated, 5 * mib);
        let allocated: Vec<u64> = tl.points().map(|p| p.allocated / mib).collect();
        assert_eq!(allocated, vec![4, 4, 20, 4, 4]);
        assert_eq!(tl.peak_allocated().map(|p| p.entry), Some(2));
        assert_eq!(tl.size_fallbacks, 0);
        assert_eq!(tl.end_allocated, 4 * mib);
    }
}
