//! `cuda_gpu_mem_time_sum` and `cuda_gpu_mem_size_sum`: GPU memcpy and memset operations grouped
//! by kind (`[CUDA memcpy Host-to-Device]`, `[CUDA memset]`, ...), by time and by size.
//!
//! As in nsys: rows ordered by total time (or total bytes) descending, equal totals by operation
//! name; sizes printed in MB of 10^6 bytes with three decimals; standard deviations are of the
//! sample. Operations on every device and stream are pooled. Unified-memory migrations, which
//! nsys reports elsewhere, are not here.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::model::trace::Trace;
use crate::render::{Cell, Table};

use super::{Summary, TimeRow};

/// Durations (ns) and sizes (bytes) of each kind of memory operation, keyed by label.
fn groups(trace: &Trace) -> BTreeMap<String, (Vec<i64>, Vec<i64>)> {
    let mut groups: BTreeMap<String, (Vec<i64>, Vec<i64>)> = BTreeMap::new();
    for op in &trace.mem_ops {
        let g = groups.entry(op.kind.label()).or_default();
        g.0.push(op.duration().0);
        g.1.push(op.bytes.0 as i64);
    }
    groups
}

/// The rows of `cuda_gpu_mem_time_sum`.
pub fn time_rows(trace: &Trace) -> Vec<TimeRow> {
    // Grouped in name order; the stable sort keeps it among equal totals.
    let mut rows = TimeRow::from_groups(groups(trace).into_iter().map(|(k, (d, _))| (k, d)));
    rows.sort_by_key(|r| std::cmp::Reverse(r.summary.total));
    rows
}

/// `cuda_gpu_mem_time_sum` as nsys prints it.
pub fn time_table(trace: &Trace) -> Table {
    super::time_table(&time_rows(trace), "Count", "Operation")
}

/// A row of `cuda_gpu_mem_size_sum`: the summary of one operation kind's sizes in bytes.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SizeRow {
    pub summary: Summary,
    pub operation: String,
}

/// The rows of `cuda_gpu_mem_size_sum`.
pub fn size_rows(trace: &Trace) -> Vec<SizeRow> {
    let mut rows: Vec<SizeRow> = groups(trace)
        .into_iter()
        .filter_map(|(operation, (_, mut sizes))| {
            Some(SizeRow {
                summary: Summary::of(&mut sizes)?,
                operation,
            })
        })
        .collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.summary.total));
    rows
}

const MB: f64 = 1e6;

/// `cuda_gpu_mem_size_sum` as nsys prints it (MB = 10^6 bytes).
pub fn size_table(trace: &Trace) -> Table {
    let mut t = Table::new([
        "Total (MB)",
        "Count",
        "Avg (MB)",
        "Med (MB)",
        "Min (MB)",
        "Max (MB)",
        "StdDev (MB)",
        "Operation",
    ]);
    for r in size_rows(trace) {
        let s = &r.summary;
        t.push(vec![
            Cell::Float(s.total as f64 / MB, 3),
            Cell::Int(s.count as i64),
            Cell::Float(s.mean / MB, 3),
            Cell::Float(s.median / MB, 3),
            Cell::Float(s.min as f64 / MB, 3),
            Cell::Float(s.max as f64 / MB, 3),
            Cell::Float(s.std_dev / MB, 3),
            Cell::text(r.operation),
        ]);
    }
    t
}
