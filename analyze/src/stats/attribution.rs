//! How `nsys stats` ties GPU work to NVTX ranges, shared by `nvtx_kern_sum` and
//! `nvtx_gpu_proj_sum`.
//!
//! A GPU operation (kernel, memcpy, memset) was launched by the CUDA API call with the same
//! correlation id in the same process. It belongs to every NVTX range that encloses that call
//! (`range.start <= call.start` and `call.end <= range.end`) on the call's own thread; a stack of
//! nested push/pop ranges therefore gets it once per level. Ranges that ended on another thread
//! than they started on (`endGlobalTid` set) take no part, as in nsys. Nothing here looks at GPU
//! timestamps: a kernel may run long after its range was popped and still belong to it.
//! [`super::gather`] finds, for every call, the ranges that enclose it.

use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::model::trace::{Range, Trace};

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

/// Whether a range takes part in GPU attribution: it ended on the thread it started on.
pub fn is_attributable(range: &Range) -> bool {
    range.end_tid.is_none()
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
