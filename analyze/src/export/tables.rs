//! The `ranges` and `rank_steps` tables: one row per NVTX range (or Kineto annotation) of the
//! run, and one per measured step on each device it ran work on, as the profile measured it (its
//! `step_breakdown`). Both are small beside the ops and written whole, one file per rank.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::Path;

use super::ops::{part, Ranks};
use super::parquet::{bytes, Field, Kind, ParquetFile};
use crate::error::Result;
use crate::model::trace::Trace;
use crate::profile::devices::StepBreakdown;
use crate::profile::ranges::is_host_range;

/// The columns of the ranges table.
pub const RANGES: &[Field] = &[
    Field::new("rank", Kind::Int),
    Field::new("process", Kind::Int),
    Field::new("thread", Kind::Int),
    Field::optional("end_thread", Kind::Int),
    Field::optional("domain", Kind::Text),
    Field::new("name", Kind::Text),
    Field::new("style", Kind::Text),
    Field::new("gpu", Kind::Bool),
    Field::new("depth", Kind::Int),
    Field::new("is_step", Kind::Bool),
    Field::new("start_ns", Kind::Int),
    Field::new("end_ns", Kind::Int),
    Field::new("duration_ns", Kind::Int),
];

/// The columns of the rank × step table.
pub const RANK_STEPS: &[Field] = &[
    Field::new("rank", Kind::Int),
    Field::new("device", Kind::Int),
    Field::new("process", Kind::Int),
    Field::new("step", Kind::Text),
    Field::new("start_ns", Kind::Int),
    Field::new("step_ns", Kind::Int),
    Field::new("kernels", Kind::Int),
    Field::new("kernel_ns", Kind::Int),
    Field::new("compute_ns", Kind::Int),
    Field::new("communication_ns", Kind::Int),
    Field::new("exposed_communication_ns", Kind::Int),
    Field::new("memcpy_ns", Kind::Int),
    Field::new("memset_ns", Kind::Int),
    Field::new("graph_ns", Kind::Int),
    Field::new("idle_ns", Kind::Int),
];

/// One range, its text resolved.
pub struct RangeRow {
    pid: u32,
    tid: u32,
    end_tid: Option<u32>,
    domain: Option<String>,
    name: String,
    style: &'static str,
    gpu: bool,
    depth: u32,
    start: i64,
    end: i64,
}

/// The ranges of `trace` as rows, in the trace's order (the indices the profile's steps use),
/// each with its depth: how many ranges of its thread (and side, host or GPU) hold it; `shift`
/// added to their times.
pub fn range_rows(trace: &Trace, shift: i64) -> Vec<RangeRow> {
    let mut rows: Vec<RangeRow> = trace
        .ranges
        .iter()
        .map(|r| RangeRow {
            pid: r.pid,
            tid: r.tid,
            end_tid: r.end_tid,
            domain: r.domain.map(|d| trace.name(d).to_owned()),
            name: trace.name(r.name).to_owned(),
            style: match r.style {
                crate::model::trace::RangeStyle::PushPop => "push_pop",
                crate::model::trace::RangeStyle::StartEnd => "start_end",
            },
            gpu: !is_host_range(trace, r),
            depth: 0,
            start: r.start.0.saturating_add(shift),
            end: r.end.0.saturating_add(shift),
        })
        .collect();
    let mut threads: HashMap<(u32, u32, bool), Vec<usize>> = HashMap::new();
    for (i, r) in rows.iter().enumerate() {
        threads.entry((r.pid, r.tid, r.gpu)).or_default().push(i);
    }
    for list in threads.values_mut() {
        list.sort_by_key(|&i| (rows[i].start, std::cmp::Reverse(rows[i].end)));
        let mut open: Vec<i64> = Vec::new();
        for &i in list.iter() {
            while open.last().is_some_and(|&end| end <= rows[i].start) {
                open.pop();
            }
            rows[i].depth = open.len() as u32;
            open.push(rows[i].end);
        }
    }
    rows
}

/// The rank of each range.
pub fn range_ranks<'r>(rows: &'r [RangeRow], ranks: &'r Ranks) -> impl Iterator<Item = u32> + 'r {
    rows.iter().map(|r| ranks.rank(r.pid))
}

/// Write `rows` into `dir/rank=N/part-0.parquet`, one file per rank of `all` (empty for a rank
/// without ranges); `steps` are the indices of the ranges that are measured steps. Returns the
/// rows per rank.
pub fn write_ranges(
    dir: &Path,
    rows: &[RangeRow],
    steps: &HashSet<usize>,
    ranks: &Ranks,
    all: &BTreeSet<u32>,
) -> Result<BTreeMap<u32, u64>> {
    let mut by_rank: BTreeMap<u32, Vec<usize>> = all.iter().map(|&r| (r, Vec::new())).collect();
    for (i, r) in rows.iter().enumerate() {
        by_rank.entry(ranks.rank(r.pid)).or_default().push(i);
    }
    let mut written = BTreeMap::new();
    for (rank, list) in by_rank {
        let mut file = create(dir, rank, RANGES)?;
        let mut c = file.columns(list.len());
        for &i in &list {
            let r = &rows[i];
            c[0].int(Some(rank as i64));
            c[1].int(Some(r.pid as i64));
            c[2].int(Some(r.tid as i64));
            c[3].int(r.end_tid.map(i64::from));
            c[4].text(r.domain.as_deref().map(bytes));
            c[5].text(Some(bytes(&r.name)));
            c[6].text(Some(bytes(r.style)));
            c[7].bool(Some(r.gpu));
            c[8].int(Some(r.depth as i64));
            c[9].bool(Some(steps.contains(&i)));
            c[10].int(Some(r.start));
            c[11].int(Some(r.end));
            c[12].int(Some(r.end - r.start));
        }
        file.write(c, list.len())?;
        written.insert(rank, file.finish()?);
    }
    Ok(written)
}

/// Write the profile's `steps` (one per measured step and device) into `dir`, one file per rank
/// of `all` (empty for a rank without steps), `shift` added to their starts. Returns the rows per
/// rank.
pub fn write_rank_steps(
    dir: &Path,
    steps: &[StepBreakdown],
    ranks: &Ranks,
    shift: i64,
    all: &BTreeSet<u32>,
) -> Result<BTreeMap<u32, u64>> {
    let mut by_rank: BTreeMap<u32, Vec<&StepBreakdown>> =
        all.iter().map(|&r| (r, Vec::new())).collect();
    for s in steps {
        by_rank.entry(ranks.rank(s.process)).or_default().push(s);
    }
    let mut written = BTreeMap::new();
    for (rank, list) in by_rank {
        let mut file = create(dir, rank, RANK_STEPS)?;
        let mut c = file.columns(list.len());
        for s in &list {
            let b = &s.breakdown;
            let ints = [rank as i64, s.device as i64, s.process as i64];
            for (k, v) in ints.into_iter().enumerate() {
                c[k].int(Some(v));
            }
            c[3].text(Some(bytes(&s.step)));
            let ints = [
                s.start_ns.saturating_add(shift),
                b.span_ns,
                s.kernels as i64,
                s.kernel_ns,
                b.compute_ns,
                b.communication_ns,
                b.exposed_communication_ns,
                b.memcpy_ns,
                b.memset_ns,
                b.graph_ns,
                b.idle_ns,
            ];
            for (k, v) in ints.into_iter().enumerate() {
                c[4 + k].int(Some(v));
            }
        }
        file.write(c, list.len())?;
        written.insert(rank, file.finish()?);
    }
    Ok(written)
}

/// `dir/rank=N/part-0.parquet`, created for a table of `fields`.
fn create(dir: &Path, rank: u32, fields: &'static [Field]) -> Result<ParquetFile> {
    ParquetFile::create(&part(dir, rank)?, fields)
}
