//! `nvtx_gpu_proj_sum`: NVTX ranges projected onto the GPU, grouped by `domain:name` and style.
//!
//! As in nsys (its `nvtx_gpu_proj_trace` SQL, then summed):
//! - a GPU operation (kernel, memcpy, memset) belongs to every range that encloses its launch
//!   call on the launching thread ([`super::attribution`]);
//! - a range's projection runs from the earliest start to the latest end of its operations; a
//!   range without operations has none and does not appear;
//! - its operation count is the number of distinct correlation ids among them;
//! - its parent is the shortest *other* attributable range on the same thread that contains it on
//!   the CPU timeline (`start <= child.start`, `end >= child.end`), whether or not either has GPU
//!   work; its level is its depth below a range without parent (0), so identical ranges, each the
//!   other's parent, have no level and are left out of `Avg Range Lvl`;
//! - its child count counts the children that have a projection.
//!
//! Per (name, style): the projected durations' total, mean, median, extremes and sample standard
//! deviation, the CPU durations' total, instance count, total and mean operation count, and the
//! mean level and child count. Rows are ordered by total projected time descending, then name and
//! style. Ranges that nsys's SQL pairs by `rowid` are identified here by their position in the
//! trace; where two candidate parents are equally tight nsys takes the first its R-tree returns,
//! we take the earlier-starting one.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::model::trace::{Range, RangeStyle};
use crate::render::cells::opt_float;
use crate::render::{Cell, Table};

use super::attribution::{is_attributable, FastMap, Labels};
use super::gather::{Gathered, Projection};
use super::{duration_cells, Summary};

/// A row of `nvtx_gpu_proj_sum`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProjRow {
    /// `domain:name`.
    pub range: String,
    pub style: RangeStyle,
    /// Projected durations (first GPU start to last GPU end) of the instances, in ns.
    pub projected: Summary,
    /// Sum of the instances' CPU durations, in ns.
    pub total_range_time: i64,
    pub total_gpu_ops: u64,
    pub avg_gpu_ops: f64,
    /// Mean nesting level; `None` when no instance has one.
    pub avg_level: Option<f64>,
    pub avg_children: f64,
}

/// The rows of `nvtx_gpu_proj_sum`, from the GPU work gathered by launch context; `ranges` are
/// all the trace's ranges in start order, `labels` theirs.
pub fn rows(ranges: &[Range], labels: &Labels, gathered: &Gathered) -> Vec<ProjRow> {
    // Each range's projection: the span and distinct correlation ids of the work of every
    // launch context it encloses (a context's ids are its own: an id has one context).
    let mut projections: FastMap<u32, Projection> = FastMap::default();
    let mut attributions: Vec<(&u32, &Projection)> = gathered.projections.iter().collect();
    attributions.sort_unstable_by_key(|a| *a.0);
    for (&a, p) in attributions {
        for r in gathered.ranges(a) {
            projections
                .entry(r)
                .and_modify(|q| {
                    q.start = q.start.min(p.start);
                    q.end = q.end.max(p.end);
                    q.ops += p.ops;
                })
                .or_insert(*p);
        }
    }

    let parents = parents(ranges);
    let levels = levels(&parents);
    let mut children: FastMap<u32, u64> = FastMap::default();
    for &r in projections.keys() {
        if let Some(p) = parents[r as usize] {
            *children.entry(p).or_default() += 1;
        }
    }

    struct Group {
        style: RangeStyle,
        projected: Vec<i64>,
        range_time: i64,
        ops: u64,
        levels: Vec<i64>,
        children: u64,
    }
    // Keyed by (name, style text): iteration order is nsys's grouping order, kept among ties.
    let mut groups: BTreeMap<(&str, &'static str), Group> = BTreeMap::new();
    for (r, p) in projections {
        let range = &ranges[r as usize];
        let label = labels.text[labels.of_range[r as usize] as usize].as_str();
        let g = groups
            .entry((label, range.style.as_str()))
            .or_insert_with(|| Group {
                style: range.style,
                projected: Vec::new(),
                range_time: 0,
                ops: 0,
                levels: Vec::new(),
                children: 0,
            });
        g.projected.push(p.end - p.start);
        g.range_time += range.duration().0;
        g.ops += p.ops;
        g.levels.extend(levels[r as usize].map(i64::from));
        g.children += children.get(&r).copied().unwrap_or(0);
    }

    let mut rows: Vec<ProjRow> = groups
        .into_iter()
        .filter_map(|((label, _), mut g)| {
            let projected = Summary::of(&mut g.projected)?;
            let n = projected.count as f64;
            Some(ProjRow {
                range: label.to_owned(),
                style: g.style,
                projected,
                total_range_time: g.range_time,
                total_gpu_ops: g.ops,
                avg_gpu_ops: g.ops as f64 / n,
                avg_level: super::summary::mean(&g.levels),
                avg_children: g.children as f64 / n,
            })
        })
        .collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.projected.total));
    rows
}

/// The parent of each range (by index): the attributable range on the same
/// thread, other than itself, that contains it with the least slack, i.e. the shortest one.
/// Ranges that are not attributable have no parent and are no one's parent.
fn parents(ranges: &[Range]) -> Vec<Option<u32>> {
    let mut parents = vec![None; ranges.len()];
    let mut threads: HashMap<(u32, u32), Vec<u32>> = HashMap::new();
    for (i, r) in ranges.iter().enumerate() {
        if is_attributable(r) {
            threads.entry((r.pid, r.tid)).or_default().push(i as u32);
        }
    }
    for members in threads.values() {
        thread_parents(ranges, members, &mut parents);
    }
    parents
}

/// Parents within one thread's ranges (given in start order). Ranges are visited by start; a
/// prefix-minimum Fenwick tree over end times (largest first) answers "the shortest range seen so
/// far that ends at or after this one's end"; ranges sharing a start are compared directly.
fn thread_parents(ranges: &[Range], members: &[u32], parents: &mut [Option<u32>]) {
    let start = |r: u32| ranges[r as usize].start.0;
    let end = |r: u32| ranges[r as usize].end.0;
    // Candidate order: shorter first, then earlier in the trace.
    let rank = |r: u32| (end(r) - start(r), r);

    let mut ends: Vec<i64> = members.iter().map(|&r| end(r)).collect();
    ends.sort_unstable_by(|a, b| b.cmp(a));
    ends.dedup();
    // Position of an end time among `ends` (descending), 1-based for the Fenwick tree: every
    // range with end >= e sits at a position <= pos(e).
    let pos = |e: i64| ends.partition_point(|&x| x > e) + 1;
    let mut tree: Vec<Option<Rank>> = vec![None; ends.len() + 1];
    // Each group of ranges sharing a start with its best peer, a list kept from group to group.
    let mut peers = Vec::new();

    let mut i = 0;
    while i < members.len() {
        let mut j = i;
        while j < members.len() && start(members[j]) == start(members[i]) {
            j += 1;
        }
        let same_start = &members[i..j];
        shortest_peers(same_start, end, rank, &mut peers);
        for &(c, peer) in &peers {
            let mut best = peer;
            let mut k = pos(end(c));
            while k > 0 {
                best = min_rank(best, tree[k]);
                k &= k - 1;
            }
            parents[c as usize] = best.map(|b| b.1);
        }
        for &p in same_start {
            let mut k = pos(end(p));
            while k < tree.len() {
                tree[k] = min_rank(tree[k], Some(rank(p)));
                k += k & k.wrapping_neg();
            }
        }
        i = j;
    }
}

/// A candidate parent's rank, least first: its length, then its index.
type Rank = (i64, u32);

/// Into `out`, each range of `group` (ranges sharing a start) with the least rank among the
/// others of the group that end at or after it. Longest first: a running minimum over those
/// ending later, and the least two ranks of those ending with it (a range takes the least that
/// is not its own), so that many ranges with one start (a trace's timestamps in microseconds,
/// or a damaged file) cost a sort, not every pair.
fn shortest_peers(
    group: &[u32],
    end: impl Fn(u32) -> i64,
    rank: impl Fn(u32) -> Rank,
    out: &mut Vec<(u32, Option<Rank>)>,
) {
    out.clear();
    out.extend(group.iter().map(|&r| (r, None)));
    out.sort_unstable_by_key(|&(r, _)| std::cmp::Reverse(end(r)));
    let mut later: Option<Rank> = None;
    for ties in out.chunk_by_mut(|a, b| end(a.0) == end(b.0)) {
        let (mut least, mut next): (Option<Rank>, Option<Rank>) = (None, None);
        for &(r, _) in ties.iter() {
            let r = Some(rank(r));
            if min_rank(least, r) == r {
                next = least;
                least = r;
            } else {
                next = min_rank(next, r);
            }
        }
        for (c, peer) in ties.iter_mut() {
            let own = if least.map(|l| l.1) == Some(*c) {
                next
            } else {
                least
            };
            *peer = min_rank(later, own);
        }
        later = min_rank(later, least);
    }
}

fn min_rank(a: Option<Rank>, b: Option<Rank>) -> Option<Rank> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

/// Depth of each range below a parentless range (level 0). Ranges whose chain of parents never
/// reaches a parentless one (a cycle among identical ranges) get `None`, as nsys's recursive
/// query never reaches them.
fn levels(parents: &[Option<u32>]) -> Vec<Option<u32>> {
    let mut children: Vec<Vec<u32>> = vec![Vec::new(); parents.len()];
    let mut stack = Vec::new();
    for (i, p) in parents.iter().enumerate() {
        match p {
            Some(p) => children[*p as usize].push(i as u32),
            None => stack.push((i as u32, 0u32)),
        }
    }
    let mut levels = vec![None; parents.len()];
    while let Some((r, level)) = stack.pop() {
        levels[r as usize] = Some(level);
        for &c in &children[r as usize] {
            stack.push((c, level + 1));
        }
    }
    levels
}

/// `nvtx_gpu_proj_sum` as nsys prints it.
pub fn table(ranges: &[Range], labels: &Labels, gathered: &Gathered) -> Table {
    let mut t = Table::new([
        "Range",
        "Style",
        "Total Proj Time (ns)",
        "Total Range Time (ns)",
        "Range Instances",
        "Proj Avg (ns)",
        "Proj Med (ns)",
        "Proj Min (ns)",
        "Proj Max (ns)",
        "Proj StdDev (ns)",
        "Total GPU Ops",
        "Avg GPU Ops",
        "Avg Range Lvl",
        "Avg Num Child",
    ]);
    for r in rows(ranges, labels, gathered) {
        // nsys puts the range time between the projection's total and the rest of its summary.
        let [total, count, mean, median, min, max, std_dev] = duration_cells(&r.projected);
        t.push(vec![
            Cell::text(r.range),
            Cell::text(r.style.as_str()),
            total,
            Cell::Int(r.total_range_time),
            count,
            mean,
            median,
            min,
            max,
            std_dev,
            Cell::Int(r.total_gpu_ops as i64),
            Cell::Float(r.avg_gpu_ops, 1),
            opt_float(r.avg_level, 1),
            Cell::Float(r.avg_children, 1),
        ]);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::trace::{Nanos, Source, SourceFormat, Trace};

    fn trace(ranges: &[(i64, i64)]) -> Trace {
        let mut t = Trace::empty(Source::new("test", SourceFormat::NsysSqlite));
        let name = t.strings.intern("r");
        t.ranges = ranges
            .iter()
            .map(|&(start, end)| Range {
                start: Nanos(start),
                end: Nanos(end),
                style: RangeStyle::StartEnd,
                name,
                domain: None,
                pid: 1,
                tid: 1,
                end_tid: None,
            })
            .collect();
        t
    }

    /// The parent rule of nsys's SQL, by brute force: least slack, then earliest.
    fn brute_parents(t: &Trace) -> Vec<Option<u32>> {
        let r = &t.ranges;
        (0..r.len())
            .map(|c| {
                (0..r.len())
                    .filter(|&p| p != c && r[p].start <= r[c].start && r[p].end >= r[c].end)
                    .min_by_key(|&p| ((r[p].end - r[p].start).0, p))
                    .map(|p| p as u32)
            })
            .collect()
    }

    #[test]
    fn parents_are_the_tightest_container() {
        // Nested, disjoint, crossing start/end ranges, shared starts, zero-length ranges.
        let t = trace(&[
            (0, 100),
            (0, 50),
            (5, 40),
            (5, 40),
            (10, 10),
            (10, 20),
            (30, 60),
            (40, 40),
            (45, 100),
            (60, 70),
            (100, 100),
        ]);
        assert_eq!(parents(&t.ranges), brute_parents(&t));
    }

    #[test]
    fn ranges_sharing_a_start_take_the_shortest_of_the_others() {
        // One start, ends tied and not, the shortest of a tie first and last in the file.
        let t = trace(&[
            (0, 30),
            (0, 50),
            (0, 30),
            (0, 10),
            (0, 50),
            (0, 30),
            (0, 10),
            (0, 80),
            (5, 10),
            (5, 30),
        ]);
        assert_eq!(parents(&t.ranges), brute_parents(&t));
        // Many: a sort, and the same parents.
        let many: Vec<(i64, i64)> = (0..3000).map(|i| (7, 7 + (i * 37) % 101)).collect();
        let t = trace(&many);
        assert_eq!(parents(&t.ranges), brute_parents(&t));
    }

    #[test]
    fn identical_ranges_have_no_level() {
        let t = trace(&[(0, 100), (10, 20), (10, 20), (12, 15)]);
        let p = parents(&t.ranges);
        assert_eq!(p, vec![None, Some(2), Some(1), Some(1)]);
        assert_eq!(levels(&p), vec![Some(0), None, None, None]);
    }
}
