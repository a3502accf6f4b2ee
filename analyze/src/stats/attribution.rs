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

use crate::model::trace::{Range, Trace};

/// The fast hash map of the reports, defined once for the crate.
pub use crate::fast_hash::{FastHasher, FastMap};

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
