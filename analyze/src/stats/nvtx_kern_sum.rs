//! `nvtx_kern_sum`: GPU kernels grouped by the NVTX range they were launched in, per process and
//! thread.
//!
//! As in nsys: a kernel belongs to every range that encloses its launch call on the launching
//! thread ([`super::attribution`]), so a kernel under `measurement > step_0 > forward` counts
//! under all three; kernels launched outside any range form rows with an empty range name, and
//! kernels whose launch call was not traced have no PID/TID either. One row per (range name,
//! style, PID, TID, kernel name). `NVTX Inst` counts distinct range instances, `Kern Inst`
//! distinct kernels, while the durations are summed over (kernel, range) pairs, so a kernel
//! inside two nested ranges of the same name counts twice in `Total Time` but once in
//! `Kern Inst`, exactly as nsys's SQL does. Rows are ordered by range name (empty first), PID,
//! TID, total time descending, then style and kernel name.
//!
//! Thread attribution has a known consequence for PyTorch: autograd launches backward kernels
//! from its own thread, so a `backward` range pushed on the main thread gets few kernels.

use serde::Serialize;

use crate::model::trace::{RangeStyle, StrId, Trace};
use crate::render::cells::opt_int;
use crate::render::{Cell, Table};

use super::attribution::{Attribution, FastMap};
use super::{duration_cells, KernelName, Summary};

/// A row of `nvtx_kern_sum`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NvtxKernRow {
    /// `domain:name` of the range; `None` for kernels launched outside every range.
    pub range: Option<String>,
    pub style: Option<RangeStyle>,
    /// Process and thread of the launch call; `None` when the launch was not traced.
    pub pid: Option<u32>,
    pub tid: Option<u32>,
    pub nvtx_instances: u64,
    pub kernel_instances: u64,
    /// Kernel durations over (kernel, range) pairs, in ns.
    pub summary: Summary,
    pub kernel: String,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    pid: Option<u32>,
    tid: Option<u32>,
    label: Option<u32>,
    style: Option<RangeStyle>,
    kernel: StrId,
}

#[derive(Default)]
struct Group {
    durations: Vec<i64>,
    ranges: Vec<u32>,
    kernels: u64,
    last_kernel: Option<usize>,
}

/// The rows of `nvtx_kern_sum`, kernels named as `names` says.
pub fn rows(trace: &Trace, names: KernelName) -> Vec<NvtxKernRow> {
    rows_with(trace, &Attribution::new(trace), names)
}

/// [`rows`], with the attribution of GPU work to ranges already made.
pub fn rows_with(trace: &Trace, attribution: &Attribution, names: KernelName) -> Vec<NvtxKernRow> {
    let Attribution {
        ranges: all_ranges,
        launchers,
        enclosing,
        labels,
    } = attribution;
    let mut groups: FastMap<Key, Group> = FastMap::default();
    let mut add = |key: Key, kernel: usize, duration: i64, range: Option<u32>| {
        let g = groups.entry(key).or_default();
        g.durations.push(duration);
        g.ranges.extend(range);
        // A kernel's pairs are added one after another: counting changes of kernel counts
        // distinct kernels.
        if g.last_kernel != Some(kernel) {
            g.kernels += 1;
            g.last_kernel = Some(kernel);
        }
    };
    for (ki, k) in trace.kernels.iter().enumerate() {
        let kernel = names.of(k);
        let duration = k.duration().0;
        let calls = launchers.of(k.pid, k.correlation_id);
        if calls.is_empty() {
            let key = Key {
                pid: None,
                tid: None,
                label: None,
                style: None,
                kernel,
            };
            add(key, ki, duration, None);
        }
        for call in calls {
            let c = &trace.api_calls[call as usize];
            let ranges = enclosing.of(call);
            let mut key = Key {
                pid: Some(c.pid),
                tid: Some(c.tid),
                label: None,
                style: None,
                kernel,
            };
            if ranges.is_empty() {
                add(key, ki, duration, None);
            }
            for &r in ranges {
                key.label = Some(labels.of_range[r as usize]);
                key.style = Some(all_ranges[r as usize].style);
                add(key, ki, duration, Some(r));
            }
        }
    }

    let mut rows: Vec<(Key, NvtxKernRow)> = groups
        .into_iter()
        .filter_map(|(key, mut g)| {
            g.ranges.sort_unstable();
            g.ranges.dedup();
            let row = NvtxKernRow {
                range: key.label.map(|l| labels.text[l as usize].clone()),
                style: key.style,
                pid: key.pid,
                tid: key.tid,
                nvtx_instances: g.ranges.len() as u64,
                kernel_instances: g.kernels,
                summary: Summary::of(&mut g.durations)?,
                kernel: trace.name(key.kernel).to_owned(),
            };
            Some((key, row))
        })
        .collect();
    // nsys: GROUP BY pid, tid, range, style, kernel; ORDER BY range, pid, tid, total DESC. Its
    // sort is stable, so equal totals stay in grouping order: style, then kernel name.
    rows.sort_by(|(_, a), (_, b)| {
        a.range
            .cmp(&b.range)
            .then(a.pid.cmp(&b.pid))
            .then(a.tid.cmp(&b.tid))
            .then(b.summary.total.cmp(&a.summary.total))
            .then(style_order(a.style).cmp(&style_order(b.style)))
            .then_with(|| a.kernel.cmp(&b.kernel))
    });
    rows.into_iter().map(|(_, r)| r).collect()
}

/// Styles sort as their printed text does (`PushPop` < `StartEnd`), absent first.
fn style_order(s: Option<RangeStyle>) -> Option<&'static str> {
    s.map(RangeStyle::as_str)
}

/// `nvtx_kern_sum` as nsys prints it.
pub fn table(trace: &Trace, names: KernelName) -> Table {
    table_with(trace, &Attribution::new(trace), names)
}

/// [`table`], with the attribution of GPU work to ranges already made.
pub fn table_with(trace: &Trace, attribution: &Attribution, names: KernelName) -> Table {
    let mut t = Table::new([
        "NVTX Range",
        "Style",
        "PID",
        "TID",
        "NVTX Inst",
        "Kern Inst",
        "Total Time (ns)",
        "Avg (ns)",
        "Med (ns)",
        "Min (ns)",
        "Max (ns)",
        "StdDev (ns)",
        "Kernel Name",
    ]);
    for r in rows_with(trace, attribution, names) {
        let [total, _count, avg, med, min, max, std] = duration_cells(&r.summary);
        t.push(vec![
            r.range.map_or(Cell::Missing, Cell::Text),
            r.style.map_or(Cell::Missing, |s| Cell::text(s.as_str())),
            opt_int(r.pid),
            opt_int(r.tid),
            Cell::Int(r.nvtx_instances as i64),
            Cell::Int(r.kernel_instances as i64),
            total,
            avg,
            med,
            min,
            max,
            std,
            Cell::text(r.kernel),
        ]);
    }
    t
}
