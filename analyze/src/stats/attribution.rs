//! How `nsys stats` ties GPU work to NVTX ranges, shared by `nvtx_kern_sum` and
//! `nvtx_gpu_proj_sum`.
//!
//! A GPU operation (kernel, memcpy, memset) was launched by the CUDA API call with the same
//! correlation id in the same process. It belongs to every NVTX range that encloses that call
//! (`range.start <= call.start` and `call.end <= range.end`) on the call's own thread; a stack of
//! nested push/pop ranges therefore gets it once per level. Ranges that ended on another thread
//! than they started on (`endGlobalTid` set) take no part, as in nsys. Nothing here looks at GPU
//! timestamps: a kernel may run long after its range was popped and still belong to it.

use std::collections::HashMap;

use crate::model::{ApiCall, Range, Trace};

/// The API calls that launched GPU work, found by (process, correlation id).
pub struct Launchers {
    /// (pid, correlation id, index into `Trace::api_calls`), sorted.
    keys: Vec<(u32, u64, u32)>,
}

impl Launchers {
    pub fn new(trace: &Trace) -> Launchers {
        let mut keys: Vec<(u32, u64, u32)> = trace
            .api_calls
            .iter()
            .enumerate()
            .map(|(i, c)| (c.pid, c.correlation_id, i as u32))
            .collect();
        keys.sort_unstable();
        Launchers { keys }
    }

    /// Indices of the API calls with this process and correlation id: normally one, none for work
    /// whose launch was not traced, several only in a malformed export (nsys's SQL join then
    /// counts the work once per call, and so do we).
    pub fn of(&self, pid: u32, correlation_id: u64) -> &[(u32, u64, u32)] {
        let lo = self
            .keys
            .partition_point(|k| (k.0, k.1) < (pid, correlation_id));
        let hi = lo + self.keys[lo..].partition_point(|k| (k.0, k.1) == (pid, correlation_id));
        &self.keys[lo..hi]
    }
}

/// Whether a range takes part in GPU attribution: it ended on the thread it started on.
pub fn is_attributable(range: &Range) -> bool {
    range.end_tid.is_none()
}

/// For each API call asked about, the attributable ranges enclosing it on its thread, as indices
/// into `Trace::ranges` in start order.
pub struct Enclosing {
    /// `ranges[offsets[c]..offsets[c + 1]]` enclose API call `c`.
    offsets: Vec<u32>,
    ranges: Vec<u32>,
}

impl Enclosing {
    /// The ranges enclosing every API call `c` with `wanted[c]`.
    pub fn new(trace: &Trace, wanted: &[bool]) -> Enclosing {
        // Per thread: its attributable ranges and its wanted calls, both in start order (the
        // trace keeps both lists sorted by start).
        let mut threads: HashMap<(u32, u32), (Vec<u32>, Vec<u32>)> = HashMap::new();
        for (i, r) in trace.ranges.iter().enumerate() {
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
        let mut found: Vec<Vec<u32>> = vec![Vec::new(); trace.api_calls.len()];
        for (ranges, calls) in threads.values() {
            sweep(&trace.ranges, ranges, &trace.api_calls, calls, &mut found);
        }
        let mut offsets = Vec::with_capacity(found.len() + 1);
        let mut flat = Vec::new();
        offsets.push(0);
        for f in found {
            flat.extend(f);
            offsets.push(flat.len() as u32);
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
    calls: &[ApiCall],
    wanted: &[u32],
    found: &mut [Vec<u32>],
) {
    let mut next = 0;
    let mut active: Vec<u32> = Vec::new();
    for &c in wanted {
        let call = &calls[c as usize];
        while next < ranges.len() && all_ranges[ranges[next] as usize].start <= call.start {
            active.push(ranges[next]);
            next += 1;
        }
        // A range that ended before this call started cannot enclose any later call either.
        active.retain(|&r| all_ranges[r as usize].end >= call.start);
        found[c as usize].extend(
            active
                .iter()
                .copied()
                .filter(|&r| all_ranges[r as usize].end >= call.end),
        );
        // Keep start order: `active` is filled in start order and `retain` keeps it.
    }
}

/// Range labels as nsys prints them (`domain:name`), interned so that grouping by label is cheap.
pub struct Labels {
    /// Label id of each range in `Trace::ranges`.
    pub of_range: Vec<u32>,
    /// Label text by id.
    pub text: Vec<String>,
}

impl Labels {
    pub fn new(trace: &Trace) -> Labels {
        let mut ids: HashMap<String, u32> = HashMap::new();
        let mut text = Vec::new();
        let of_range = trace
            .ranges
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
