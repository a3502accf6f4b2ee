//! Many files, one run: the per-rank captures of a distributed job (one nsys export or Kineto
//! trace per rank) read side by side and merged into one [`Trace`] on one timeline, which the
//! profile engine then reads as it reads one file that holds every rank.
//!
//! - **Ranks.** From the files' own records (Kineto's `distributedInfo.rank`, the `RANK` of the
//!   environment nsys recorded) when every file has a distinct one; else from the file names
//!   (`rank3`, `rank_3`, `rank-3`, or a last `_3.`) when every name gives a distinct one; else the
//!   order of the files by name. One rule for the whole run, and [`RankFile::rank_from`] says which.
//! - **Clocks.** Each file counts from its own zero; where the file records that zero as Unix time
//!   (nsys's session start, Kineto's `baseTimeNanoseconds`) the difference puts the file on the
//!   lowest rank's timeline. The collectives check it: the k-th communication kernel of every rank
//!   ends when the last rank arrives, within microseconds on every rank. Where the ends still
//!   differ by more than [`CLOCK_TOLERANCE_NS`] in the median (files from hosts whose clocks
//!   disagree), or a file records no zero, the median difference of the ends is the offset used.
//! - **Ids.** Processes and devices keep their ids unless an earlier file uses the same one (ranks
//!   on other hosts, each with its device 0): then they take the next free id, and a note says so.
//!
//! The files are loaded whole, side by side: memory grows with the run's total size.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::kernels::class::{Classifier, KernelClass};
use crate::model::trace::{Nanos, StrId, Trace};

/// Collective ends further apart than this (median, after the files' own clocks) mean the clocks
/// disagree; the collectives' alignment is used instead.
pub const CLOCK_TOLERANCE_NS: i64 = 100_000;

/// How a run's ranks were told apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RankFrom {
    Metadata,
    FileName,
    Order,
}

impl RankFrom {
    /// Where the ranks came from, in words ("ranks from ...").
    pub fn words(self) -> &'static str {
        match self {
            RankFrom::Metadata => "the files' own records",
            RankFrom::FileName => "the file names",
            RankFrom::Order => "the order of the file names",
        }
    }
}

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

/// One file of a run.
#[derive(Clone, Debug, Serialize)]
pub struct RankFile {
    pub rank: u32,
    pub rank_from: RankFrom,
    pub path: PathBuf,
    /// Added to the file's times to put them on the run's timeline.
    pub offset_ns: i64,
    pub clock_from: ClockFrom,
    /// After the offset: the median of (the reference's k-th collective end − this file's), over
    /// the collectives both have; `None` when the counts differ or there are none.
    pub collective_skew_ns: Option<i64>,
    /// Its processes and devices, as ids of the merged trace.
    pub processes: Vec<u32>,
    pub devices: Vec<u32>,
}

/// The files of a run merged into one trace.
pub struct Run {
    pub trace: Trace,
    /// In rank order.
    pub files: Vec<RankFile>,
    /// Ids moved to keep ranks apart, clocks that disagreed: one line each.
    pub notes: Vec<String>,
}

/// The files named, folders replaced by the traces they hold (nsys exports and reports, Kineto
/// traces), in name order.
pub fn expand(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for path in paths {
        if !path.is_dir() {
            out.push(path.clone());
            continue;
        }
        let mut found: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(Error::io(path))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file() && is_trace_name(p))
            .collect();
        found.sort();
        if found.is_empty() {
            return Err(Error::Malformed {
                path: path.clone(),
                message: "holds no nsys export (.sqlite, .nsys-rep) or Kineto trace (.json)".into(),
            });
        }
        out.extend(found);
    }
    Ok(out)
}

fn is_trace_name(p: &Path) -> bool {
    let name = p
        .file_name()
        .map(|n| n.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    let name = name.strip_suffix(".gz").unwrap_or(&name);
    name.ends_with(".sqlite") || name.ends_with(".nsys-rep") || name.ends_with(".json")
}

/// The trace of `path`: a file's own, or, for a folder of per-rank files, the run they make
/// merged into one trace (a folder of one file is that file).
pub fn load_trace_or_run(path: &Path, classifier: &Classifier) -> Result<Trace> {
    if !path.is_dir() {
        return crate::formats::load_trace(path);
    }
    match &expand(&[path.to_owned()])?[..] {
        [one] => crate::formats::load_trace(one),
        files => Ok(load_run(files, classifier)?.trace),
    }
}

/// Load `paths` side by side and merge them into one run.
pub fn load_run(paths: &[PathBuf], classifier: &Classifier) -> Result<Run> {
    let traces: Vec<Trace> = paths
        .par_iter()
        .map(|p| crate::formats::load_trace(p))
        .collect::<Result<_>>()?;
    let (ranks, rank_from) = ranks(paths, &traces);
    let mut order: Vec<usize> = (0..traces.len()).collect();
    order.sort_by_key(|&i| (ranks[i], i));
    let mut slots: Vec<Option<Trace>> = traces.into_iter().map(Some).collect();
    let mut notes = Vec::new();
    let mut files = Vec::new();
    let mut merged: Option<Trace> = None;
    let mut reference_ends = Vec::new();
    let mut taken = Taken::default();
    for (n, &i) in order.iter().enumerate() {
        let mut trace = slots[i].take().expect("each file once");
        let ends = collective_ends(&trace, classifier);
        let (offset_ns, clock_from, skew) = match &merged {
            None => {
                reference_ends = ends.clone();
                (0, ClockFrom::Reference, None)
            }
            Some(m) => align(m, &trace, &reference_ends, &ends),
        };
        if clock_from == ClockFrom::Collectives {
            notes.push(format!(
                "rank {}: clocks disagree with rank {}'s, aligned by the ends of {} collectives (offset {offset_ns} ns)",
                ranks[i],
                ranks[order[0]],
                ends.len()
            ));
        } else if clock_from == ClockFrom::Unaligned && n > 0 {
            notes.push(format!(
                "rank {}: no clock origin and no collectives to match: times taken as they are",
                ranks[i]
            ));
        }
        let (pids, devices) = taken.claim(&mut trace, ranks[i], &mut notes);
        files.push(RankFile {
            rank: ranks[i],
            rank_from,
            path: paths[i].clone(),
            offset_ns,
            clock_from,
            collective_skew_ns: skew,
            processes: pids,
            devices,
        });
        shift(&mut trace, offset_ns);
        merged = Some(match merged {
            None => trace,
            Some(mut m) => {
                append(&mut m, trace);
                m
            }
        });
    }
    let mut trace = merged.ok_or_else(|| Error::Malformed {
        path: PathBuf::new(),
        message: "no files to read".into(),
    })?;
    trace.sort();
    trace.gpus.sort_by_key(|g| g.id);
    trace.source.path = common_parent(paths);
    trace.source.rank = None;
    Ok(Run {
        trace,
        files,
        notes,
    })
}

/// Each file's rank, by the first rule that tells every file apart.
fn ranks(paths: &[PathBuf], traces: &[Trace]) -> (Vec<u32>, RankFrom) {
    let distinct = |r: &[Option<u32>]| {
        r.iter().all(Option::is_some) && r.iter().collect::<BTreeSet<_>>().len() == r.len()
    };
    let recorded: Vec<Option<u32>> = traces.iter().map(|t| t.source.rank).collect();
    if distinct(&recorded) {
        return (recorded.into_iter().flatten().collect(), RankFrom::Metadata);
    }
    let named: Vec<Option<u32>> = paths.iter().map(|p| rank_in_name(p)).collect();
    if distinct(&named) {
        return (named.into_iter().flatten().collect(), RankFrom::FileName);
    }
    let mut by_name: Vec<usize> = (0..paths.len()).collect();
    by_name.sort_by(|&a, &b| paths[a].cmp(&paths[b]));
    let mut ranks = vec![0; paths.len()];
    for (rank, i) in by_name.into_iter().enumerate() {
        ranks[i] = rank as u32;
    }
    (ranks, RankFrom::Order)
}

/// The rank a file's name gives: `rank3`, `rank_3`, `rank-3` (any case), else a last `_3.`.
pub fn rank_in_name(path: &Path) -> Option<u32> {
    let name = path.file_name()?.to_string_lossy().to_lowercase();
    let digits = |s: &str| -> Option<u32> {
        let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        s[..end].parse().ok()
    };
    if let Some(i) = name.rfind("rank") {
        let rest = &name[i + 4..];
        let rest = rest.strip_prefix(['_', '-']).unwrap_or(rest);
        if let Some(r) = digits(rest) {
            return Some(r);
        }
    }
    let dot = name.find('.')?;
    let stem = &name[..dot];
    let under = stem.rfind('_')?;
    let tail = &stem[under + 1..];
    (!tail.is_empty() && tail.bytes().all(|b| b.is_ascii_digit()))
        .then(|| tail.parse().ok())
        .flatten()
}

/// `path`'s rank where its name says `rank` before it (`rank3`, `rank_3`, `rank-3`), with the
/// name the number leaves (`run_rank.sqlite`), which the other ranks' files share.
fn rank_word(path: &Path) -> Option<(String, u32)> {
    let name = path.file_name()?.to_string_lossy().to_lowercase();
    let i = name.rfind("rank")? + 4;
    let sep = usize::from(name[i..].starts_with(['_', '-']));
    let digits = name[i + sep..]
        .bytes()
        .take_while(u8::is_ascii_digit)
        .count();
    let rank = name[i + sep..i + sep + digits].parse().ok()?;
    Some((
        format!("{}{}", &name[..i + sep], &name[i + sep + digits..]),
        rank,
    ))
}

/// `files` (in order) cut into runs: the files of one folder whose names differ only in a rank
/// number after the word `rank`, ranks 0 to n − 1 with n ≥ 2, make one run (in rank order, at the
/// place of the first); every other file is a run of its own. Stricter than the rule `profile`
/// uses for the files it is given as one run, so that a folder of a sweep's files
/// (`ctx_128.sqlite`, `ctx_256.sqlite`) is never taken for ranks.
pub fn rank_runs(files: Vec<PathBuf>) -> Vec<Vec<PathBuf>> {
    // The folder and the name without its rank number.
    let key = |p: &PathBuf| rank_word(p).map(|(name, rank)| (p.with_file_name(name), rank));
    let mut sets: HashMap<PathBuf, Vec<(u32, PathBuf)>> = HashMap::new();
    for f in &files {
        if let Some((k, rank)) = key(f) {
            sets.entry(k).or_default().push((rank, f.clone()));
        }
    }
    sets.retain(|_, set| {
        set.sort();
        set.len() >= 2 && set.iter().map(|s| s.0).eq(0..set.len() as u32)
    });
    let mut out = Vec::new();
    let mut placed: BTreeSet<PathBuf> = BTreeSet::new();
    for f in files {
        if placed.contains(&f) {
            continue;
        }
        match key(&f).and_then(|(k, _)| sets.remove(&k)) {
            Some(set) => {
                placed.extend(set.iter().map(|s| s.1.clone()));
                out.push(set.into_iter().map(|s| s.1).collect());
            }
            None => out.push(vec![f]),
        }
    }
    out
}

/// End times of the trace's communication kernels, in order.
fn collective_ends(trace: &Trace, classifier: &Classifier) -> Vec<i64> {
    let mut class_of: HashMap<StrId, bool> = HashMap::new();
    let mut ends: Vec<i64> = trace
        .kernels
        .iter()
        .filter(|k| {
            *class_of.entry(k.name).or_insert_with(|| {
                classifier.classify(trace.name(k.name)) == KernelClass::Communication
            })
        })
        .map(|k| k.span.end.0)
        .collect();
    ends.sort_unstable();
    ends
}

/// The offset that puts `trace` on `reference`'s timeline, how it was found, and the collectives'
/// skew after it.
fn align(
    reference: &Trace,
    trace: &Trace,
    reference_ends: &[i64],
    ends: &[i64],
) -> (i64, ClockFrom, Option<i64>) {
    let by_clock = match (
        reference.source.clock_origin_ns,
        trace.source.clock_origin_ns,
    ) {
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
struct Taken {
    pids: BTreeSet<u32>,
    devices: BTreeSet<u32>,
}

impl Taken {
    /// Give `trace`'s processes and devices ids no earlier file uses (their own where free);
    /// returns them.
    fn claim(
        &mut self,
        trace: &mut Trace,
        rank: u32,
        notes: &mut Vec<String>,
    ) -> (Vec<u32>, Vec<u32>) {
        let pids: BTreeSet<u32> = trace
            .gpu_spans()
            .map(|s| s.pid)
            .chain(trace.api_calls.iter().map(|c| c.pid))
            .chain(trace.ranges.iter().map(|r| r.pid))
            .chain(trace.ops.iter().map(|o| o.pid))
            .collect();
        let devices: BTreeSet<u32> = trace.gpu_spans().map(|s| s.device).collect();
        let pid_map = fresh(&pids, &mut self.pids);
        let device_map = fresh(&devices, &mut self.devices);
        for (what, map) in [("process", &pid_map), ("device", &device_map)] {
            for (from, to) in map.iter().filter(|(f, t)| f != t) {
                notes.push(format!(
                    "rank {rank}: {what} {from} shown as {to} (an earlier rank's file uses {from})"
                ));
            }
        }
        let pid = |p: &mut u32| *p = pid_map.get(p).copied().unwrap_or(*p);
        let dev = |d: &mut u32| *d = device_map.get(d).copied().unwrap_or(*d);
        for s in trace.gpu_spans_mut() {
            pid(&mut s.pid);
            dev(&mut s.device);
        }
        for c in &mut trace.api_calls {
            pid(&mut c.pid);
        }
        for r in trace.ranges.iter_mut().chain(&mut trace.open_ranges) {
            pid(&mut r.pid);
        }
        for o in &mut trace.ops {
            pid(&mut o.pid);
        }
        for m in &mut trace.marks {
            pid(&mut m.pid);
        }
        for g in &mut trace.gpus {
            dev(&mut g.id);
        }
        trace.thread_names = std::mem::take(&mut trace.thread_names)
            .into_iter()
            .map(|((p, t), n)| ((pid_map.get(&p).copied().unwrap_or(p), t), n))
            .collect();
        (
            pids.iter().map(|p| pid_map[p]).collect(),
            devices.iter().map(|d| device_map[d]).collect(),
        )
    }
}

/// Each of `ids` mapped to itself when `taken` lacks it, else to the lowest id free; all marked
/// taken.
fn fresh(ids: &BTreeSet<u32>, taken: &mut BTreeSet<u32>) -> HashMap<u32, u32> {
    let clash = ids.iter().any(|i| taken.contains(i));
    let mut map = HashMap::new();
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

/// `other`'s records added to `into`, their names interned in `into`'s strings.
fn append(into: &mut Trace, other: Trace) {
    let ids: Vec<StrId> = (0..other.strings.len())
        .map(|i| into.strings.intern(other.strings.get(StrId(i as u32))))
        .collect();
    let id = |s: StrId| ids[s.0 as usize];
    into.kernels.extend(other.kernels.into_iter().map(|mut k| {
        k.name = id(k.name);
        k.short_name = id(k.short_name);
        k.mangled_name = k.mangled_name.map(id);
        k
    }));
    into.api_calls
        .extend(other.api_calls.into_iter().map(|mut c| {
            c.name = id(c.name);
            c
        }));
    for (list, from) in [
        (&mut into.ranges, other.ranges),
        (&mut into.open_ranges, other.open_ranges),
    ] {
        list.extend(from.into_iter().map(|mut r| {
            r.name = id(r.name);
            r.domain = r.domain.map(id);
            r
        }));
    }
    into.marks.extend(other.marks.into_iter().map(|mut m| {
        m.name = id(m.name);
        m.domain = m.domain.map(id);
        m
    }));
    into.ops.extend(other.ops.into_iter().map(|mut o| {
        o.name = id(o.name);
        o.shapes = o.shapes.map(id);
        o.types = o.types.map(id);
        o.concrete = o.concrete.map(id);
        o
    }));
    into.mem_ops.extend(other.mem_ops);
    into.graph_execs.extend(other.graph_execs);
    for g in other.gpus {
        if !into.gpus.iter().any(|h| h.id == g.id) {
            into.gpus.push(g);
        }
    }
    into.thread_names
        .extend(other.thread_names.into_iter().map(|(k, n)| (k, id(n))));
    into.source
        .missing
        .retain(|t| other.source.missing.contains(t));
}

/// The folder every path lies in (the first path when they share none).
fn common_parent(paths: &[PathBuf]) -> PathBuf {
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
    fn ranks_in_names() {
        let r = |s: &str| rank_in_name(Path::new(s));
        assert_eq!(r("run_rank3.sqlite"), Some(3));
        assert_eq!(r("dir/Rank_12.pt.trace.json.gz"), Some(12));
        assert_eq!(r("trace-rank-0.json"), Some(0));
        assert_eq!(r("worker_7.sqlite.gz"), Some(7));
        assert_eq!(r("torch_small_ctx128.sqlite"), None);
        assert_eq!(r("ranks.json"), None);
    }

    #[test]
    fn a_folders_rank_files_make_one_run_and_a_sweeps_files_do_not() {
        let paths = |names: &[&str]| -> Vec<PathBuf> { names.iter().map(PathBuf::from).collect() };
        let runs = rank_runs(paths(&[
            "a/ctx_128.sqlite",
            "a/ctx_256.sqlite",
            "a/job_rank1.sqlite",
            "a/job_rank0.sqlite",
            "a/job_rank1.nsys-rep",
            "a/other_rank0.json",
            "a/other_rank2.json",
            "b/job_rank0.sqlite",
        ]));
        assert_eq!(
            runs,
            [
                paths(&["a/ctx_128.sqlite"]),
                paths(&["a/ctx_256.sqlite"]),
                paths(&["a/job_rank0.sqlite", "a/job_rank1.sqlite"]),
                paths(&["a/job_rank1.nsys-rep"]),
                paths(&["a/other_rank0.json"]),
                paths(&["a/other_rank2.json"]),
                paths(&["b/job_rank0.sqlite"]),
            ]
        );
    }

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
