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

use crate::model::trace::{Range, RangeStyle, StrId, Trace};
use crate::render::cells::opt_int;
use crate::render::{Cell, Table};

use super::attribution::{FastMap, Labels};
use super::gather::{Gathered, Samples, Slot};
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
    /// (index into the gathered kernels, times each of their durations counts).
    parts: Vec<(u32, u32)>,
    ranges: Vec<u32>,
    kernels: u64,
}

/// The rows of `nvtx_kern_sum`, kernels named as `names` says, from the kernels gathered by
/// launch context; `ranges` are all the trace's ranges in start order, `labels` theirs.
pub fn rows(
    trace: &Trace,
    ranges: &[Range],
    labels: &Labels,
    gathered: &Gathered,
    names: KernelName,
) -> Vec<NvtxKernRow> {
    let mut groups: FastMap<Key, Group> = FastMap::default();
    // Durations and kernel counts, by the slot keys of the kernels' attributions: each
    // (call, range) slot is a row of nsys's join.
    let mut keys: Vec<(Key, u32)> = Vec::new();
    for (i, (sig, kid, d)) in gathered.kernels.iter().enumerate() {
        let kernel = names.of_names(&gathered.kernel_names[*kid as usize]);
        keys.clear();
        for &(pid, tid, label, style) in &gathered.sigs[*sig as usize] {
            let key = Key {
                pid,
                tid,
                label,
                style,
                kernel,
            };
            match keys.iter_mut().find(|k| k.0 == key) {
                Some(k) => k.1 += 1,
                None => keys.push((key, 1)),
            }
        }
        for (key, times) in keys.drain(..) {
            let g = groups.entry(key).or_default();
            g.parts.push((i as u32, times));
            g.kernels += d.len() as u64;
        }
    }
    // The range instances of each row: those enclosing a launch of one of its kernels.
    let mut slots: Option<(u32, Vec<Slot>)> = None;
    for &(attribution, kid) in &gathered.presence {
        if slots.as_ref().is_none_or(|s| s.0 != attribution) {
            slots = Some((attribution, gathered.slots(attribution)));
        }
        let kernel = names.of_names(&gathered.kernel_names[kid as usize]);
        for slot in &slots.as_ref().expect("set above").1 {
            let Some(r) = slot.range else {
                continue;
            };
            let key = Key {
                pid: slot.pid,
                tid: slot.tid,
                label: Some(labels.of_range[r as usize]),
                style: Some(ranges[r as usize].style),
                kernel,
            };
            if let Some(g) = groups.get_mut(&key) {
                g.ranges.push(r);
            }
        }
    }

    let mut rows: Vec<(Key, NvtxKernRow)> = groups
        .into_iter()
        .filter_map(|(key, mut g)| {
            g.ranges.sort_unstable();
            g.ranges.dedup();
            let durations = Samples::sum(
                (g.parts.iter())
                    .map(|&(i, times)| (&gathered.kernels[i as usize].2, times as usize)),
            );
            let row = NvtxKernRow {
                range: key.label.map(|l| labels.text[l as usize].clone()),
                style: key.style,
                pid: key.pid,
                tid: key.tid,
                nvtx_instances: g.ranges.len() as u64,
                kernel_instances: g.kernels,
                summary: durations.summary()?,
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
pub fn table(
    trace: &Trace,
    ranges: &[Range],
    labels: &Labels,
    gathered: &Gathered,
    names: KernelName,
) -> Table {
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
    for r in rows(trace, ranges, labels, gathered, names) {
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
