//! Comparing two PyTorch memory snapshots: peak allocated and reserved bytes, the category
//! breakdown at each peak, and the allocation sites live at each peak (category and top user
//! frame, so the same line of model code lines up across runs), each as B minus A, sorted by the
//! size of the change.
//!
//! Built from two analyses ([`crate::memory::summary::analyze`]), so the peaks are those
//! `analyze memory` prints for each file; [`sites_at_peak`] groups one snapshot's live
//! allocations. Pure: the caller loads the files. The tables are
//! [`super::tables::memory_document`].

use std::collections::HashMap;

use serde::Serialize;

use crate::memory::peak::top_frame;
use crate::memory::summary::{Analysis, MemoryReport};
use crate::model::snapshot::Snapshot;

/// Bytes and count of allocations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Held {
    pub bytes: u64,
    pub count: usize,
}

/// Allocations live at the peak that share a category and a top frame.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Site {
    pub category: String,
    /// The top user frame (`model.py:18 forward`), or the autograd node or operator.
    pub frame: String,
    pub held: Held,
}

/// The allocations live at the peak of `analysis`, grouped by category and top frame, largest
/// first.
pub fn sites_at_peak(snap: &Snapshot, analysis: &Analysis) -> Vec<Site> {
    let peak = analysis.report.peak_entry;
    let mut sums: HashMap<(String, String), Held> = HashMap::new();
    for (a, category) in analysis
        .timeline
        .allocations
        .iter()
        .zip(analysis.categories.iter())
        .filter(|(a, _)| a.live_after(peak))
    {
        let frame = top_frame(&snap.frames, a.stack, a.before_recording());
        let h = sums.entry((category.to_owned(), frame)).or_default();
        h.bytes = h.bytes.saturating_add(a.size);
        h.count += 1;
    }
    let mut out: Vec<Site> = sums
        .into_iter()
        .map(|((category, frame), held)| Site {
            category,
            frame,
            held,
        })
        .collect();
    out.sort_by(|x, y| {
        y.held
            .bytes
            .cmp(&x.held.bytes)
            .then_with(|| (&x.category, &x.frame).cmp(&(&y.category, &y.frame)))
    });
    out
}

/// One row in both snapshots: a category, or a (category, frame) site.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HeldDelta {
    pub category: String,
    /// Empty for category rows.
    pub frame: String,
    pub a: Held,
    pub b: Held,
}

/// `b - a` in bytes, saturating at the ends of `i64`.
pub fn byte_delta(a: u64, b: u64) -> i64 {
    (i128::from(b) - i128::from(a)).clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

impl HeldDelta {
    pub fn delta_bytes(&self) -> i64 {
        byte_delta(self.a.bytes, self.b.bytes)
    }
}

/// The headline numbers of one snapshot.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MemorySide {
    pub label: String,
    pub peak_allocated_bytes: u64,
    pub peak_reserved_bytes: u64,
    pub reserved_at_peak_bytes: u64,
    pub forward_peak_bytes: Option<u64>,
    pub start_allocated_bytes: u64,
    pub trace_entries: usize,
    pub oom_events: usize,
}

impl MemorySide {
    fn of(r: &MemoryReport) -> MemorySide {
        MemorySide {
            label: r.label.clone(),
            peak_allocated_bytes: r.peak_allocated_bytes,
            peak_reserved_bytes: r.peak_reserved_bytes,
            reserved_at_peak_bytes: r.reserved_at_peak_bytes,
            forward_peak_bytes: r.forward_peak_bytes,
            start_allocated_bytes: r.start_allocated_bytes,
            trace_entries: r.trace_entries,
            oom_events: r.oom_events,
        }
    }
}

/// Two snapshots compared.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MemoryComparison {
    pub a: MemorySide,
    pub b: MemorySide,
    /// Categories at the peak, by the size of the change.
    pub categories: Vec<HeldDelta>,
    /// Allocation sites at the peak, by the size of the change.
    pub sites: Vec<HeldDelta>,
}

impl MemoryComparison {
    /// B's peak allocated bytes minus A's.
    pub fn peak_allocated_delta(&self) -> i64 {
        byte_delta(self.a.peak_allocated_bytes, self.b.peak_allocated_bytes)
    }
    /// B's peak reserved bytes minus A's.
    pub fn peak_reserved_delta(&self) -> i64 {
        byte_delta(self.a.peak_reserved_bytes, self.b.peak_reserved_bytes)
    }
}

fn by_impact(rows: &mut [HeldDelta]) {
    rows.sort_by(|x, y| {
        y.delta_bytes()
            .abs()
            .cmp(&x.delta_bytes().abs())
            .then_with(|| (&x.category, &x.frame).cmp(&(&y.category, &y.frame)))
    });
}

fn merge(a: &[(String, String, Held)], b: &[(String, String, Held)]) -> Vec<HeldDelta> {
    let mut rows: Vec<HeldDelta> = Vec::new();
    let mut index: HashMap<(String, String), usize> = HashMap::new();
    for (side, list) in [(0, a), (1, b)] {
        for (category, frame, held) in list {
            let i = *index
                .entry((category.clone(), frame.clone()))
                .or_insert_with(|| {
                    rows.push(HeldDelta {
                        category: category.clone(),
                        frame: frame.clone(),
                        a: Held::default(),
                        b: Held::default(),
                    });
                    rows.len() - 1
                });
            if side == 0 {
                rows[i].a = *held;
            } else {
                rows[i].b = *held;
            }
        }
    }
    by_impact(&mut rows);
    rows
}

/// Compare snapshot B against baseline A.
pub fn compare_memory(
    a: &MemoryReport,
    sites_a: &[Site],
    b: &MemoryReport,
    sites_b: &[Site],
) -> MemoryComparison {
    let cats = |r: &MemoryReport| -> Vec<(String, String, Held)> {
        r.categories_at_peak
            .iter()
            .map(|c| {
                (
                    c.category.clone(),
                    String::new(),
                    Held {
                        bytes: c.bytes,
                        count: c.count,
                    },
                )
            })
            .collect()
    };
    let sites = |s: &[Site]| -> Vec<(String, String, Held)> {
        s.iter()
            .map(|s| (s.category.clone(), s.frame.clone(), s.held))
            .collect()
    };
    MemoryComparison {
        a: MemorySide::of(a),
        b: MemorySide::of(b),
        categories: merge(&cats(a), &cats(b)),
        sites: merge(&sites(sites_a), &sites(sites_b)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(bytes: u64, count: usize) -> Held {
        Held { bytes, count }
    }

    #[test]
    fn sites_line_up_by_category_and_frame_and_sort_by_change() {
        let a = vec![
            (
                "FFN".to_owned(),
                "model.py:40 forward".to_owned(),
                held(100, 2),
            ),
            (
                "softmax".to_owned(),
                "model.py:20 forward".to_owned(),
                held(50, 1),
            ),
        ];
        let b = vec![
            (
                "FFN".to_owned(),
                "model.py:40 forward".to_owned(),
                held(60, 2),
            ),
            (
                "autocast copies".to_owned(),
                "model.py:40 forward".to_owned(),
                held(90, 3),
            ),
        ];
        let rows = merge(&a, &b);
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0].category, "autocast copies");
        assert_eq!(rows[0].delta_bytes(), 90);
        assert_eq!(rows[1].category, "softmax");
        assert_eq!(rows[1].delta_bytes(), -50);
        assert_eq!((rows[2].a, rows[2].b), (held(100, 2), held(60, 2)));
    }
}
