//! One timeline and one set of ids for the files of a run: each file's clock offset, found from
//! the zeros the files record and checked against the ends of their collectives ([`align`]), and
//! the processes and devices that take another id because an earlier file uses theirs
//! ([`Taken`]). A file's place on the run's timeline is one [`Remap`], applied alike to the
//! records of a trace in memory and to the rows a stream hands over.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::fast_hash::FastMap;
use crate::model::trace::{Nanos, StrId, Trace};
use crate::source::{ApiRow, KernelRow};

/// Collective ends further apart than this (median, after the files' own clocks) mean the clocks
/// disagree; the collectives' alignment is used instead.
pub const CLOCK_TOLERANCE_NS: i64 = 100_000;

/// How a file was put on the run's timeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ClockFrom {
    /// The file is the run's reference (the lowest rank).
    Reference,
    /// The Unix time of the file's zero, as the file records it.
    Metadata,
    /// The ends of the collectives, matched in order with the reference's.
    Collectives,
    /// Neither: the file's times are taken as they are.
    Unaligned,
}

/// What a file's clock and collectives say: the Unix time of its zero, where it records one, and
/// the end times of its communication kernels, in order.
pub(super) struct Clock {
    pub(super) origin_ns: Option<i64>,
    pub(super) ends: Vec<i64>,
}

/// The offset that puts a file on the reference's timeline, how it was found, and the
/// collectives' skew after it.
pub(super) fn align(reference: &Clock, file: &Clock) -> (i64, ClockFrom, Option<i64>) {
    let (reference_ends, ends) = (&reference.ends, &file.ends);
    let by_clock = match (reference.origin_ns, file.origin_ns) {
        (Some(r), Some(t)) => Some(t - r),
        _ => None,
    };
    let skew = |offset: i64| -> Option<i64> {
        if ends.is_empty() || ends.len() != reference_ends.len() {
            return None;
        }
        let mut d: Vec<i64> = reference_ends
            .iter()
            .zip(ends)
            .map(|(r, e)| r - (e + offset))
            .collect();
        d.sort_unstable();
        Some(d[d.len() / 2])
    };
    match (by_clock, skew(by_clock.unwrap_or(0))) {
        (Some(offset), Some(s)) if s.abs() <= CLOCK_TOLERANCE_NS => {
            (offset, ClockFrom::Metadata, Some(s))
        }
        (Some(offset), None) => (offset, ClockFrom::Metadata, None),
        (by_clock, Some(s)) => {
            let offset = by_clock.unwrap_or(0) + s;
            (offset, ClockFrom::Collectives, skew(offset))
        }
        (None, None) => (0, ClockFrom::Unaligned, None),
    }
}

/// The process and device ids the files so far use.
#[derive(Default)]
pub(super) struct Taken {
    pids: BTreeSet<u32>,
    devices: BTreeSet<u32>,
}

impl Taken {
    /// Give a file's processes and devices ids no earlier file uses (their own where free), a
    /// note for each moved.
    pub(super) fn claim(
        &mut self,
        pids: &BTreeSet<u32>,
        devices: &BTreeSet<u32>,
        rank: u32,
        notes: &mut Vec<String>,
    ) -> (FastMap<u32, u32>, FastMap<u32, u32>) {
        let pid_map = fresh(pids, &mut self.pids);
        let device_map = fresh(devices, &mut self.devices);
        for (what, ids, map) in [
            ("process", pids, &pid_map),
            ("device", devices, &device_map),
        ] {
            for from in ids {
                let to = map[from];
                if *from != to {
                    notes.push(format!(
                        "rank {rank}: {what} {from} shown as {to} (an earlier rank's file uses {from})"
                    ));
                }
            }
        }
        (pid_map, device_map)
    }
}

/// Each of `ids` mapped to itself when `taken` lacks it, else to the lowest id free; all marked
/// taken.
fn fresh(ids: &BTreeSet<u32>, taken: &mut BTreeSet<u32>) -> FastMap<u32, u32> {
    let clash = ids.iter().any(|i| taken.contains(i));
    let mut map = FastMap::default();
    for &id in ids {
        let to = if clash && taken.contains(&id) {
            (0..)
                .find(|c| !taken.contains(c) && !ids.contains(c))
                .expect("a free id")
        } else {
            id
        };
        taken.insert(to);
        map.insert(id, to);
    }
    map
}

/// The processes of a trace's records that a run keeps apart: those of its GPU work, ranges and
/// operator calls, with `more` (the kernels' of a stream). A process that only made API calls
/// launched nothing to attribute.
pub(super) fn processes(trace: &Trace, more: impl Iterator<Item = u32>) -> BTreeSet<u32> {
    trace
        .gpu_spans()
        .map(|s| s.pid)
        .chain(trace.ranges.iter().map(|r| r.pid))
        .chain(trace.ops.iter().map(|o| o.pid))
        .chain(more)
        .collect()
}

/// A file's place on the run's timeline: the offset added to its times, its processes' and
/// devices' ids in the run.
#[derive(Default)]
pub(super) struct Remap {
    pub(super) offset: i64,
    pub(super) pids: FastMap<u32, u32>,
    pub(super) devices: FastMap<u32, u32>,
}

impl Remap {
    fn pid(&self, p: u32) -> u32 {
        self.pids.get(&p).copied().unwrap_or(p)
    }

    fn device(&self, d: u32) -> u32 {
        self.devices.get(&d).copied().unwrap_or(d)
    }

    /// Every record of `trace` moved onto the run's timeline and ids; the API calls of processes
    /// the run does not keep ([`processes`]) left out, as [`Remap::api`] leaves them.
    pub(super) fn apply(&self, trace: &mut Trace) {
        trace.api_calls.retain(|c| self.pids.contains_key(&c.pid));
        for s in trace.gpu_spans_mut() {
            s.pid = self.pid(s.pid);
            s.device = self.device(s.device);
        }
        for c in &mut trace.api_calls {
            c.pid = self.pid(c.pid);
        }
        for r in trace.ranges.iter_mut().chain(&mut trace.open_ranges) {
            r.pid = self.pid(r.pid);
        }
        for o in &mut trace.ops {
            o.pid = self.pid(o.pid);
        }
        for m in &mut trace.marks {
            m.pid = self.pid(m.pid);
        }
        for g in &mut trace.gpus {
            g.id = self.device(g.id);
        }
        trace.thread_names = std::mem::take(&mut trace.thread_names)
            .into_iter()
            .map(|((p, t), n)| ((self.pid(p), t), n))
            .collect();
        shift(trace, self.offset);
    }

    /// An API call on the run's timeline; `None` for a process the run does not keep.
    pub(super) fn api(&self, r: &ApiRow, name: u64) -> Option<ApiRow> {
        Some(ApiRow {
            start: r.start + self.offset,
            end: r.end + self.offset,
            pid: *self.pids.get(&r.pid)?,
            name,
            ..*r
        })
    }

    /// A kernel on the run's timeline, named by `names`.
    pub(super) fn kernel<'a, N, M>(&self, k: &KernelRow<'_, M>, names: &'a N) -> KernelRow<'a, N> {
        KernelRow {
            start: k.start + self.offset,
            end: k.end + self.offset,
            device: self.device(k.device),
            stream: k.stream,
            pid: self.pid(k.pid),
            correlation_id: k.correlation_id,
            names,
            graph_node: k.graph_node,
        }
    }
}

/// Every time of `trace` moved by `offset`.
fn shift(trace: &mut Trace, offset: i64) {
    if offset == 0 {
        return;
    }
    let by = |t: &mut Nanos| t.0 += offset;
    for s in trace.gpu_spans_mut() {
        by(&mut s.start);
        by(&mut s.end);
    }
    for c in &mut trace.api_calls {
        by(&mut c.start);
        by(&mut c.end);
    }
    for r in trace.ranges.iter_mut().chain(&mut trace.open_ranges) {
        by(&mut r.start);
        by(&mut r.end);
    }
    for m in &mut trace.marks {
        by(&mut m.time);
    }
    for o in &mut trace.ops {
        by(&mut o.start);
        by(&mut o.end);
    }
}

/// `other`'s records moved into `into`, their names interned in `into`'s strings; `other` keeps
/// its strings and source.
pub(super) fn append(into: &mut Trace, other: &mut Trace) {
    let ids: Vec<StrId> = (0..other.strings.len())
        .map(|i| into.strings.intern(other.strings.get(StrId(i as u32))))
        .collect();
    let id = |s: StrId| ids[s.0 as usize];
    into.kernels.extend(other.kernels.drain(..).map(|mut k| {
        k.name = id(k.name);
        k.short_name = id(k.short_name);
        k.mangled_name = k.mangled_name.map(id);
        k
    }));
    into.api_calls
        .extend(other.api_calls.drain(..).map(|mut c| {
            c.name = id(c.name);
            c
        }));
    for (list, from) in [
        (&mut into.ranges, &mut other.ranges),
        (&mut into.open_ranges, &mut other.open_ranges),
    ] {
        list.extend(from.drain(..).map(|mut r| {
            r.name = id(r.name);
            r.domain = r.domain.map(id);
            r
        }));
    }
    into.marks.extend(other.marks.drain(..).map(|mut m| {
        m.name = id(m.name);
        m.domain = m.domain.map(id);
        m
    }));
    into.ops.extend(other.ops.drain(..).map(|mut o| {
        o.name = id(o.name);
        o.shapes = o.shapes.map(id);
        o.types = o.types.map(id);
        o.concrete = o.concrete.map(id);
        o
    }));
    into.mem_ops.append(&mut other.mem_ops);
    into.graph_execs.append(&mut other.graph_execs);
    for g in other.gpus.drain(..) {
        if !into.gpus.iter().any(|h| h.id == g.id) {
            into.gpus.push(g);
        }
    }
    into.thread_names
        .extend((other.thread_names.drain()).map(|(k, n)| (k, id(n))));
    into.source
        .missing
        .retain(|t| other.source.missing.contains(t));
}

/// The folder every path lies in (the first path when they share none).
pub(super) fn common_parent(paths: &[PathBuf]) -> PathBuf {
    let first = paths[0].parent().map(Path::to_path_buf).unwrap_or_default();
    let mut common = first;
    for p in &paths[1..] {
        while !p.starts_with(&common) {
            if !common.pop() {
                return paths[0].clone();
            }
        }
    }
    if common.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        common
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clashing_ids_take_the_lowest_free_ones() {
        let mut taken: BTreeSet<u32> = [0, 1].into_iter().collect();
        let ids: BTreeSet<u32> = [0, 5].into_iter().collect();
        let map = fresh(&ids, &mut taken);
        assert_eq!((map[&0], map[&5]), (2, 5));
        let ids: BTreeSet<u32> = [7].into_iter().collect();
        assert_eq!(fresh(&ids, &mut taken)[&7], 7);
    }
}
