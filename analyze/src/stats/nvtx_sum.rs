//! `nvtx_sum`: NVTX ranges (push/pop and start/end) grouped by `domain:name` and style, longest
//! total first.
//!
//! As in nsys: a range's time is its CPU-side duration, from push (or start) to pop (or end),
//! whatever thread it ended on; ranges of the default domain print as `:name`; a range still open
//! when the capture ended counts too, until the last NVTX range timestamp of the export
//! ([`Trace::open_ranges`]). Rows are ordered by total time descending, equal totals by
//! name then style. Marks (instants) are not ranges and are not counted.

use std::collections::BTreeMap;

use crate::model::trace::{RangeStyle, Trace};
use crate::render::cells::opt_float;
use crate::render::{Cell, Table};

use super::attribution::{all_ranges, Labels};
use super::{duration_cells, TimeRow};

/// A row of `nvtx_sum`.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct NvtxRow {
    pub style: RangeStyle,
    /// The range's name, `domain:name`, and the duration summary, with the share of all ranges'
    /// summed time.
    pub time: TimeRow,
}

/// The rows of `nvtx_sum`.
pub fn rows(trace: &Trace) -> Vec<NvtxRow> {
    let ranges = all_ranges(trace);
    let labels = Labels::new(trace, &ranges);
    // Keyed by (label text, style) so that iteration, and thus ties, follow nsys's grouping.
    let mut groups: BTreeMap<(&str, &'static str), (RangeStyle, Vec<i64>)> = BTreeMap::new();
    for (i, r) in ranges.iter().enumerate() {
        let label = labels.text[labels.of_range[i] as usize].as_str();
        groups
            .entry((label, r.style.as_str()))
            .or_insert_with(|| (r.style, Vec::new()))
            .1
            .push(r.duration().0);
    }
    let styles: Vec<RangeStyle> = groups.values().map(|g| g.0).collect();
    let times = TimeRow::from_groups(
        groups
            .into_iter()
            .map(|((label, _), (_, d))| (label.to_owned(), d)),
    );
    let mut rows: Vec<NvtxRow> = styles
        .into_iter()
        .zip(times)
        .map(|(style, time)| NvtxRow { style, time })
        .collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.time.summary.total));
    rows
}

/// `nvtx_sum` as nsys prints it.
pub fn table(trace: &Trace) -> Table {
    let mut t = Table::new([
        "Time (%)",
        "Total Time (ns)",
        "Instances",
        "Avg (ns)",
        "Med (ns)",
        "Min (ns)",
        "Max (ns)",
        "StdDev (ns)",
        "Style",
        "Range",
    ]);
    for r in rows(trace) {
        let mut row = vec![opt_float(r.time.percent, 1)];
        row.extend(duration_cells(&r.time.summary));
        row.push(Cell::text(r.style.as_str()));
        row.push(Cell::text(r.time.name));
        t.push(row);
    }
    t
}
