//! How `nsys stats` ties GPU work to NVTX ranges, shared by `nvtx_kern_sum` and
//! `nvtx_gpu_proj_sum`.
//!
//! A GPU operation (kernel, memcpy, memset) was launched by the CUDA API call with the same
//! correlation id in the same process. It belongs to every NVTX range that encloses that call
//! (`range.start <= call.start` and `call.end <= range.end`) on the call's own thread; a stack of
//! nested push/pop ranges therefore gets it once per level. Ranges that ended on another thread
//! than they started on (`endGlobalTid` set) take no part, as in nsys. Nothing here looks at GPU
//! timestamps: a kernel may run long after its range was popped and still belong to it.

use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::model::trace::{ApiCall, Range, Trace};

/// A fast hasher for the small integer keys of the reports' hash maps (the FxHash mix): the
/// default SipHash costs more than the rest of a lookup, and these keys come from one file, not
/// from an adversary.
#[derive(Default, Clone, Copy)]
pub struct FastHasher(u64);

impl Hasher for FastHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(b));
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.write_u64(i as u64);
    }
    fn write_u32(&mut self, i: u32) {
        self.write_u64(i as u64);
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
}

/// A `HashMap` with [`FastHasher`].
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

/// The API calls that launched GPU work, found by (process, correlation id).
pub struct Launchers {
    by_pid: FastMap<u32, ProcessCalls>,
}

/// One process's API calls by correlation id.
#[derive(Default)]
struct ProcessCalls {
    /// Call index + 1 by correlation id (0: none), for ids small enough to index a vector, which
    /// nsys's per-process counters are.
    dense: Vec<u32>,
    /// The first call of larger ids.
    sparse: FastMap<u64, u32>,
    /// Second and later calls with one id, which only a malformed export has.
    more: FastMap<u64, Vec<u32>>,
}

impl Launchers {
    pub fn new(trace: &Trace) -> Launchers {
        let mut stats: FastMap<u32, (u64, u64)> = FastMap::default();
        for c in &trace.api_calls {
            let e = stats.entry(c.pid).or_default();
            e.0 += 1;
            e.1 = e.1.max(c.correlation_id);
        }
        let mut by_pid: FastMap<u32, ProcessCalls> = stats
            .iter()
            .map(|(&pid, &(count, max_id))| {
                let mut p = ProcessCalls::default();
                if max_id <= 4 * count + 4096 {
                    p.dense = vec![0; max_id as usize + 1];
                }
                (pid, p)
            })
            .collect();
        for (i, c) in trace.api_calls.iter().enumerate() {
            let Some(p) = by_pid.get_mut(&c.pid) else {
                continue;
            };
            let id = c.correlation_id;
            let first = match p.dense.get_mut(id as usize) {
                Some(slot) if *slot == 0 => {
                    *slot = i as u32 + 1;
                    true
                }
                Some(_) => false,
                None => match p.sparse.entry(id) {
                    std::collections::hash_map::Entry::Vacant(v) => {
                        v.insert(i as u32);
                        true
                    }
                    std::collections::hash_map::Entry::Occupied(_) => false,
                },
            };
            if !first {
                p.more.entry(id).or_default().push(i as u32);
            }
        }
        Launchers { by_pid }
    }

    /// The API calls with this process and correlation id (indices into `Trace::api_calls`):
    /// normally one, none for work whose launch was not traced, several only in a malformed
    /// export (nsys's SQL join then counts the work once per call, and so do we).
    pub fn of(&self, pid: u32, correlation_id: u64) -> Calls<'_> {
        let Some(p) = self.by_pid.get(&pid) else {
            return Calls::default();
        };
        let first = match p.dense.get(correlation_id as usize) {
            Some(&slot) => slot.checked_sub(1),
            None => p.sparse.get(&correlation_id).copied(),
        };
        let more = match first {
            Some(_) if !p.more.is_empty() => p
                .more
                .get(&correlation_id)
                .map_or(&[][..], |v| v.as_slice()),
            _ => &[],
        };
        Calls { first, more }
    }
}

/// The API calls [`Launchers::of`] found.
#[derive(Default)]
pub struct Calls<'a> {
    first: Option<u32>,
    more: &'a [u32],
}

impl Calls<'_> {
    pub fn is_empty(&self) -> bool {
        self.first.is_none()
    }
}

impl Iterator for Calls<'_> {
    type Item = u32;
    fn next(&mut self) -> Option<u32> {
        if let Some(f) = self.first.take() {
            return Some(f);
        }
        let (&next, rest) = self.more.split_first()?;
        self.more = rest;
        Some(next)
    }
}

/// Every NVTX range nsys's reports count, in start order: the closed ones and those still open
/// when the capture ended ([`Trace::open_ranges`]). Range indices in this module point into it.
pub fn all_ranges(trace: &Trace) -> Cow<'_, [Range]> {
    if trace.open_ranges.is_empty() {
        return Cow::Borrowed(&trace.ranges);
    }
    let mut all: Vec<Range> = trace.ranges.clone();
    all.extend(trace.open_ranges.iter().cloned());
    all.sort_by_key(|r| r.start);
    Cow::Owned(all)
}

/// What the NVTX-by-GPU reports share: the ranges, launch calls, the ranges enclosing every call
/// that launched GPU work, and range labels. Built once when several reports need it.
pub struct Attribution<'t> {
    /// [`all_ranges`].
    pub ranges: Cow<'t, [Range]>,
    pub launchers: Launchers,
    pub enclosing: Enclosing,
    pub labels: Labels,
}

impl<'t> Attribution<'t> {
    pub fn new(trace: &'t Trace) -> Attribution<'t> {
        let ranges = all_ranges(trace);
        let launchers = Launchers::new(trace);
        let mut wanted = vec![false; trace.api_calls.len()];
        let kernels = trace.kernels.iter().map(|k| (k.pid, k.correlation_id));
        let mem_ops = trace.mem_ops.iter().map(|m| (m.pid, m.correlation_id));
        for (pid, corr) in kernels.chain(mem_ops) {
            for call in launchers.of(pid, corr) {
                wanted[call as usize] = true;
            }
        }
        Attribution {
            enclosing: Enclosing::new(trace, &ranges, &wanted),
            labels: Labels::new(trace, &ranges),
            launchers,
            ranges,
        }
    }
}

/// Whether a range takes part in GPU attribution: it ended on the thread it started on.
pub fn is_attributable(range: &Range) -> bool {
    range.end_tid.is_none()
}

/// For each API call asked about, the attributable ranges enclosing it on its thread, as indices
/// into the ranges given (in start order).
pub struct Enclosing {
    /// `ranges[offsets[c]..offsets[c + 1]]` enclose API call `c`.
    offsets: Vec<u32>,
    ranges: Vec<u32>,
}

impl Enclosing {
    /// Among `ranges` (sorted by start), those enclosing every API call `c` with `wanted[c]`.
    pub fn new(trace: &Trace, ranges: &[Range], wanted: &[bool]) -> Enclosing {
        // Per thread: its attributable ranges and its wanted calls, both in start order (the
        // trace keeps its calls sorted by start).
        let mut threads: HashMap<(u32, u32), (Vec<u32>, Vec<u32>)> = HashMap::new();
        for (i, r) in ranges.iter().enumerate() {
            if is_attributable(r) {
                threads.entry((r.pid, r.tid)).or_default().0.push(i as u32);
            }
        }
        for (i, c) in trace.api_calls.iter().enumerate() {
            if wanted.get(i).copied().unwrap_or(false) {
                if let Some(t) = threads.get_mut(&(c.pid, c.tid)) {
                    t.1.push(i as u32);
                }
            }
        }
        // (call, range) pairs, then counted into per-call slices.
        let mut pairs: Vec<(u32, u32)> = Vec::new();
        for (members, calls) in threads.values() {
            sweep(ranges, members, &trace.api_calls, calls, &mut pairs);
        }
        let mut offsets = vec![0u32; trace.api_calls.len() + 1];
        for &(c, _) in &pairs {
            offsets[c as usize + 1] += 1;
        }
        for i in 1..offsets.len() {
            offsets[i] += offsets[i - 1];
        }
        let mut next = offsets.clone();
        let mut flat = vec![0u32; pairs.len()];
        // Pairs of one call are pushed in range start order, and this keeps that order.
        for (c, r) in pairs {
            flat[next[c as usize] as usize] = r;
            next[c as usize] += 1;
        }
        Enclosing {
            offsets,
            ranges: flat,
        }
    }

    /// The ranges enclosing API call `call`.
    pub fn of(&self, call: u32) -> &[u32] {
        let c = call as usize;
        match (self.offsets.get(c), self.offsets.get(c + 1)) {
            (Some(&a), Some(&b)) => &self.ranges[a as usize..b as usize],
            _ => &[],
        }
    }
}

/// One thread: walk its calls in start order, keeping the ranges that started at or before the
/// call and have not ended before it; those that also end at or after the call's end enclose it.
fn sweep(
    all_ranges: &[Range],
    ranges: &[u32],
    all_calls: &[ApiCall],
    calls: &[u32],
    pairs: &mut Vec<(u32, u32)>,
) {
    let mut next = 0;
    let mut active: Vec<u32> = Vec::new();
    for &c in calls {
        let call = &all_calls[c as usize];
        while next < ranges.len() && all_ranges[ranges[next] as usize].start <= call.start {
            active.push(ranges[next]);
            next += 1;
        }
        // A range that ended before this call started cannot enclose any later call either.
        active.retain(|&r| all_ranges[r as usize].end >= call.start);
        // `active` is in start order (filled so, and `retain` keeps order).
        pairs.extend(
            active
                .iter()
                .filter(|&&r| all_ranges[r as usize].end >= call.end)
                .map(|&r| (c, r)),
        );
    }
}

/// Range labels as nsys prints them (`domain:name`), interned so that grouping by label is cheap.
pub struct Labels {
    /// Label id of each range, by index into the ranges given.
    pub of_range: Vec<u32>,
    /// Label text by id.
    pub text: Vec<String>,
}

impl Labels {
    pub fn new(trace: &Trace, ranges: &[Range]) -> Labels {
        let mut ids: HashMap<String, u32> = HashMap::new();
        let mut text = Vec::new();
        let of_range = ranges
            .iter()
            .map(|r| {
                let label = trace.range_label(r);
                *ids.entry(label).or_insert_with_key(|l| {
                    text.push(l.clone());
                    (text.len() - 1) as u32
                })
            })
            .collect();
        Labels { of_range, text }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::trace::{ApiKind, Nanos, Source, SourceFormat};

    fn call(pid: u32, correlation_id: u64) -> ApiCall {
        ApiCall {
            start: Nanos(0),
            end: Nanos(1),
            pid,
            tid: pid,
            correlation_id,
            name: crate::model::trace::StrId(0),
            kind: ApiKind::Runtime,
        }
    }

    #[test]
    fn launchers_by_process_and_correlation_id() {
        let mut t = Trace::empty(Source::new("test", SourceFormat::NsysSqlite));
        t.api_calls = vec![
            call(1, 5),
            call(2, 5),
            call(1, 1 << 40),
            call(1, 5),
            call(1, 7),
        ];
        let l = Launchers::new(&t);
        let of = |pid, id| l.of(pid, id).collect::<Vec<u32>>();
        assert_eq!(of(1, 5), [0, 3]);
        assert_eq!(of(2, 5), [1]);
        assert_eq!(of(1, 1 << 40), [2]);
        assert_eq!(of(1, 7), [4]);
        assert!(l.of(1, 6).is_empty());
        assert!(l.of(3, 5).is_empty());
        assert!(of(1, u64::MAX).is_empty());
    }
}
