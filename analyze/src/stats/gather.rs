//! What the stats reports read of the kernels and CUDA API calls, gathered in one pass over
//! them, so that an export's largest tables are read as rows and never held whole:
//!
//! - per API function, the calls' durations (`cuda_api_sum`);
//! - per kernel, its duration under its names and under the *launch context* of its launch call:
//!   the call's process and thread and the attributable NVTX ranges enclosing it
//!   ([`super::attribution`]'s rule), which is all that `cuda_gpu_kern_sum`, `nvtx_kern_sum`
//!   and `nvtx_gpu_proj_sum` ask of a kernel besides its times;
//! - per launch context, the first start, last end and distinct correlation ids of its GPU work
//!   (kernels, memcpys, memsets) for `nvtx_gpu_proj_sum`.
//!
//! A call's context is found without sorting the calls: each thread's ranges are cut at their
//! boundaries into pieces (a boundary itself, or the open stretch between two), every piece
//! knowing the ranges that contain it, and a call [start, end] is enclosed by the ranges that
//! contain both its start's piece and its end's. Calls are then indexed by (process, correlation
//! id) in [`CorrIndex`]: a bit per id that a call has, and the context of each run of ids
//! sharing one, which a kernel looks up in constant time. Durations are kept as `u32` where
//! they fit ([`Samples`]).
//!
//! Rows come in chunks, each gathered on its own ([`ApiChunk`], [`KernelChunk`]) and merged in
//! table order, so the chunks of an export's pages can be read side by side. A [`Trace`] goes
//! through the same code as one chunk ([`Gathered::from_trace`]): the reports are computed from
//! what is gathered either way.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::formats::nsys_sqlite::read::RawName;
use crate::model::bounds::LIMIT;
use crate::model::trace::{Range, RangeStyle, StrId, Trace};

use super::attribution::{is_attributable, FastMap};
use super::summary::{Sorted, Summary};

/// Integer samples (durations, sizes), kept as `u32` where they fit.
#[derive(Clone, Debug, Default)]
pub struct Samples {
    small: Vec<u32>,
    /// Values below 0 or above `u32::MAX`.
    large: Vec<i64>,
}

impl Samples {
    #[inline]
    pub fn push(&mut self, v: i64) {
        match u32::try_from(v) {
            Ok(small) => self.small.push(small),
            Err(_) => self.large.push(v),
        }
    }

    pub fn len(&self) -> usize {
        self.small.len() + self.large.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// All of `parts` in one, allocated once at its size.
    pub fn concat(parts: Vec<Samples>) -> Samples {
        if parts.len() == 1 {
            return parts.into_iter().next().unwrap_or_default();
        }
        let mut out = Samples {
            small: Vec::with_capacity(parts.iter().map(|p| p.small.len()).sum()),
            large: Vec::with_capacity(parts.iter().map(|p| p.large.len()).sum()),
        };
        for p in parts {
            out.small.extend_from_slice(&p.small);
            out.large.extend_from_slice(&p.large);
        }
        out
    }

    /// Add `other`'s samples `times` times.
    pub fn extend_from(&mut self, other: &Samples, times: usize) {
        for _ in 0..times {
            self.small.extend_from_slice(&other.small);
            self.large.extend_from_slice(&other.large);
        }
    }

    /// The summary of the samples, as [`Summary::of`] gives it, without sorting them all: the
    /// median is selected (the samples are reordered); `None` when there are none.
    pub fn summary(&mut self) -> Option<Summary> {
        let n = self.len();
        if n == 0 {
            return None;
        }
        self.large.sort_unstable();
        let negative = self.large.partition_point(|&v| v < 0);
        let mut total: i128 = self.large.iter().map(|&v| v as i128).sum();
        // Squares are never negative: the sum overflows whatever the order of its terms.
        let mut squares: Option<i128> = self.large.iter().try_fold(0i128, |a, &v| {
            a.checked_add((v as i128).checked_mul(v as i128)?)
        });
        let (mut lo, mut hi) = (u32::MAX, 0u32);
        let (mut sum, mut sum2) = (0u64, 0u128);
        for &v in &self.small {
            lo = lo.min(v);
            hi = hi.max(v);
            sum += v as u64;
            sum2 += (v as u64 * v as u64) as u128;
        }
        total += sum as i128;
        squares = squares.and_then(|s| s.checked_add(i128::try_from(sum2).ok()?));
        let min = match (negative, self.small.is_empty()) {
            (0, false) => lo as i64,
            _ => self.large[0],
        };
        let max = match (negative == self.large.len(), self.small.is_empty()) {
            (true, false) => hi as i64,
            _ => self.large[self.large.len() - 1],
        };
        let count = n as i128;
        let scaled = squares.and_then(|s2| {
            count
                .checked_mul(s2)?
                .checked_sub(total.checked_mul(total)?)
        });
        let std_dev = match (n, scaled) {
            (1, _) => 0.0,
            (_, Some(v)) => (v as f64 / (n as f64 * (n - 1) as f64)).sqrt(),
            // Only a damaged file's values overflow: then as the sorted samples give it.
            (_, None) => {
                self.sort();
                return self.summary_sorted();
            }
        };
        let median = if n % 2 == 1 {
            self.nth(n / 2, negative) as f64
        } else {
            (self.nth(n / 2 - 1, negative) as i128 + self.nth(n / 2, negative) as i128) as f64 / 2.0
        };
        Some(Summary {
            count: n as u64,
            total: total.clamp(i64::MIN.into(), i64::MAX.into()) as i64,
            min,
            max,
            mean: total as f64 / n as f64,
            median,
            std_dev,
        })
    }

    /// The `k`-th smallest sample (`large` sorted, `negative` of them below 0).
    fn nth(&mut self, k: usize, negative: usize) -> i64 {
        if k < negative {
            self.large[k]
        } else if k - negative < self.small.len() {
            *self.small.select_nth_unstable(k - negative).1 as i64
        } else {
            self.large[k - self.small.len()]
        }
    }

    pub fn sort(&mut self) {
        self.small.sort_unstable();
        self.large.sort_unstable();
    }

    /// The summary of samples already sorted ([`Samples::sort`]).
    pub fn summary_sorted(&self) -> Option<Summary> {
        let negative = self.large.partition_point(|&v| v < 0);
        Summary::of_sorted_values(&SortedSamples {
            negative: &self.large[..negative],
            small: &self.small,
            positive: &self.large[negative..],
        })
    }
}

/// Sorted samples: the negative large ones, the small ones, the positive large ones.
struct SortedSamples<'a> {
    negative: &'a [i64],
    small: &'a [u32],
    positive: &'a [i64],
}

impl Sorted for SortedSamples<'_> {
    fn count(&self) -> usize {
        self.negative.len() + self.small.len() + self.positive.len()
    }
    fn at(&self, i: usize) -> i64 {
        let (a, b) = (self.negative.len(), self.small.len());
        if i < a {
            self.negative[i]
        } else if i < a + b {
            self.small[i - a] as i64
        } else {
            self.positive[i - a - b]
        }
    }
    fn values(&self) -> impl Iterator<Item = i64> + '_ {
        self.negative
            .iter()
            .copied()
            .chain(self.small.iter().map(|&v| v as i64))
            .chain(self.positive.iter().copied())
    }
}

/// Times out of bounds ([`crate::model::bounds`]), found while gathering: the first time out of
/// range, and the durations' total.
#[derive(Clone, Copy, Debug, Default)]
pub struct Bounds {
    pub bad_time: Option<i64>,
    pub total: i128,
}

impl Bounds {
    /// Check a span and return its end, an end before the start read as the start.
    #[inline]
    pub fn span(&mut self, start: i64, end: i64) -> i64 {
        for t in [start, end] {
            if !(-LIMIT..=LIMIT).contains(&t) && self.bad_time.is_none() {
                self.bad_time = Some(t);
            }
        }
        let end = end.max(start);
        self.total += i128::from(end) - i128::from(start);
        end
    }

    pub fn add(&mut self, o: &Bounds) {
        if self.bad_time.is_none() {
            self.bad_time = o.bad_time;
        }
        self.total += o.total;
    }

    /// The error [`crate::model::bounds::check`] gives for spans of `what` out of bounds.
    pub fn error(&self, what: &str) -> Option<String> {
        if let Some(t) = self.bad_time {
            return Some(format!(
                "a time of its {what} ({t} ns) is out of range (more than 73 years from the trace's zero): the file is damaged"
            ));
        }
        (self.total > i128::from(LIMIT)).then(|| {
            format!("the durations of its {what} add up to more than 73 years: the file is damaged")
        })
    }
}

/// A thread's key: process and thread id.
fn thread_key(pid: u32, tid: u32) -> u64 {
    ((pid as u64) << 32) | tid as u64
}

/// Lists of range indices, each stored once; list 0 is the empty one.
#[derive(Default)]
pub(crate) struct Sets {
    spans: Vec<(u32, u32)>,
    items: Vec<u32>,
    index: HashMap<Vec<u32>, u32>,
}

impl Sets {
    pub(crate) fn new() -> Sets {
        let mut s = Sets::default();
        s.intern(&[]);
        s
    }

    fn intern(&mut self, set: &[u32]) -> u32 {
        if let Some(&id) = self.index.get(set) {
            return id;
        }
        let id = self.spans.len() as u32;
        self.spans.push((self.items.len() as u32, set.len() as u32));
        self.items.extend_from_slice(set);
        self.index.insert(set.to_vec(), id);
        id
    }

    pub(crate) fn get(&self, id: u32) -> &[u32] {
        let (a, n) = self.spans[id as usize];
        &self.items[a as usize..(a + n) as usize]
    }
}

/// One thread's attributable ranges, cut into pieces at their boundaries: piece `2i + 1` is the
/// boundary `bounds[i]` itself, piece `2i` the open stretch before it (piece `2n` the one after
/// the last).
pub(crate) struct Pieces {
    bounds: Vec<i64>,
    /// The ranges containing each piece, as a set id.
    pub(crate) sets: Vec<u32>,
}

impl Pieces {
    pub(crate) fn new(ranges: &[Range], members: &[u32], sets: &mut Sets) -> Pieces {
        let mut bounds: Vec<i64> = members
            .iter()
            .flat_map(|&r| [ranges[r as usize].start.0, ranges[r as usize].end.0])
            .collect();
        bounds.sort_unstable();
        bounds.dedup();
        let mut by_end: Vec<u32> = members.to_vec();
        by_end.sort_by_key(|&r| ranges[r as usize].end.0);
        let mut piece_sets = Vec::with_capacity(2 * bounds.len() + 1);
        // Ranges started and not yet ended, in index order (members come in start order).
        let mut active: Vec<u32> = Vec::new();
        let (mut next_start, mut next_end) = (0, 0);
        for &b in &bounds {
            // The open stretch before `b`: ranges that started before it and end at or after it.
            piece_sets.push(sets.intern(&active));
            while next_start < members.len() && ranges[members[next_start] as usize].start.0 == b {
                active.push(members[next_start]);
                next_start += 1;
            }
            piece_sets.push(sets.intern(&active));
            let mut ended = false;
            while next_end < by_end.len() && ranges[by_end[next_end] as usize].end.0 == b {
                next_end += 1;
                ended = true;
            }
            if ended {
                active.retain(|&r| ranges[r as usize].end.0 > b);
            }
        }
        piece_sets.push(sets.intern(&active));
        Pieces {
            bounds,
            sets: piece_sets,
        }
    }

    /// Whether piece `p` holds time `t`.
    #[inline]
    pub(crate) fn holds(&self, p: usize, t: i64) -> bool {
        let i = p / 2;
        if p % 2 == 1 {
            self.bounds[i] == t
        } else {
            (i == 0 || self.bounds[i - 1] < t) && (i == self.bounds.len() || t < self.bounds[i])
        }
    }

    /// The piece holding `t`, trying `hint` and the next two first.
    #[inline]
    pub(crate) fn piece(&self, t: i64, hint: usize) -> usize {
        for p in hint..(hint + 3).min(self.sets.len()) {
            if self.holds(p, t) {
                return p;
            }
        }
        let i = self.bounds.partition_point(|&b| b < t);
        if i < self.bounds.len() && self.bounds[i] == t {
            2 * i + 1
        } else {
            2 * i
        }
    }
}

/// Which attributable ranges enclose a call: every thread's [`Pieces`].
pub struct Enclosure {
    threads: FastMap<u64, usize>,
    pieces: Vec<Pieces>,
    sets: Sets,
    /// The pieces of a thread without ranges.
    none: Pieces,
    /// Each range's label id and style.
    labels: Vec<(u32, RangeStyle)>,
}

impl Enclosure {
    /// Over `ranges` (all of a trace's ranges in start order, open ones included), whose label
    /// ids are `labels`.
    pub fn new(ranges: &[Range], labels: &[u32]) -> Enclosure {
        let mut members: FastMap<u64, Vec<u32>> = FastMap::default();
        for (i, r) in ranges.iter().enumerate() {
            if is_attributable(r) {
                members
                    .entry(thread_key(r.pid, r.tid))
                    .or_default()
                    .push(i as u32);
            }
        }
        let mut sets = Sets::new();
        let mut threads = FastMap::default();
        let mut pieces = Vec::new();
        let mut keys: Vec<u64> = members.keys().copied().collect();
        keys.sort_unstable();
        for k in keys {
            threads.insert(k, pieces.len());
            pieces.push(Pieces::new(ranges, &members[&k], &mut sets));
        }
        Enclosure {
            threads,
            pieces,
            sets,
            none: Pieces {
                bounds: Vec::new(),
                sets: vec![0],
            },
            labels: ranges
                .iter()
                .zip(labels)
                .map(|(r, &l)| (l, r.style))
                .collect(),
        }
    }
}

/// The context a chunk gives a call: its thread and the sets containing its start and end.
type LocalCtx = (u64, u32, u32);

/// Correlation ids of one process and the launch context of each.
#[derive(Default)]
pub(crate) struct CorrRuns {
    /// The id of bit 0 of `bits` (a multiple of 64).
    base: u64,
    bits: Vec<u64>,
    /// (first id, context) of each run of ids (ascending) that share a context.
    runs: Vec<(u64, u32)>,
    last: Option<u64>,
    /// Ids that came out of order, repeated, or too far away for the bits: their contexts.
    extra: FastMap<u64, Vec<u32>>,
}

/// The most bits a process's index of correlation ids holds beyond the rows read.
const SPARE_BITS: u64 = 1 << 22;

/// The most bits an index of correlation ids may hold when about `rows` calls were read.
pub(crate) fn max_bits(rows: u64) -> u64 {
    rows.saturating_mul(16).saturating_add(SPARE_BITS)
}

impl CorrRuns {
    pub(crate) fn insert(&mut self, corr: u64, ctx: u32, max_bits: u64) {
        let ascending = self.last.is_none_or(|l| corr > l);
        if ascending && self.runs.is_empty() {
            self.base = corr & !63;
        }
        if ascending && corr - self.base < max_bits {
            let bit = corr - self.base;
            let word = (bit / 64) as usize;
            if self.bits.len() <= word {
                self.bits.resize(word + 1, 0);
            }
            self.bits[word] |= 1 << (bit % 64);
            if self.runs.last().is_none_or(|r| r.1 != ctx) {
                self.runs.push((corr, ctx));
            }
            self.last = Some(corr);
        } else {
            self.extra.entry(corr).or_default().push(ctx);
        }
    }

    #[inline]
    fn has_bit(&self, corr: u64) -> bool {
        corr >= self.base && {
            let bit = corr - self.base;
            let word = (bit / 64) as usize;
            word < self.bits.len() && self.bits[word] & (1 << (bit % 64)) != 0
        }
    }

    /// The context of the run holding `corr` (whose bit is set), trying run `hint` first.
    #[inline]
    fn run(&self, corr: u64, hint: &mut usize) -> u32 {
        let h = *hint;
        let fits = |i: usize| {
            i < self.runs.len()
                && self.runs[i].0 <= corr
                && self.runs.get(i + 1).is_none_or(|n| corr < n.0)
        };
        let i = if fits(h) {
            h
        } else if fits(h + 1) {
            h + 1
        } else {
            self.runs.partition_point(|r| r.0 <= corr).saturating_sub(1)
        };
        *hint = i;
        self.runs[i].1
    }

    /// Every (id, context) in the bits, ascending.
    fn each(&self) -> Vec<(u64, u32)> {
        let mut out = Vec::new();
        let mut hint = 0;
        for (w, &word) in self.bits.iter().enumerate() {
            let mut bits = word;
            while bits != 0 {
                let b = bits.trailing_zeros() as u64;
                bits &= bits - 1;
                let corr = self.base + w as u64 * 64 + b;
                out.push((corr, self.run(corr, &mut hint)));
            }
        }
        out
    }
}

/// The API calls of one chunk of rows.
#[derive(Default)]
pub struct ApiChunk {
    /// Names (keys as the caller gives them) in first-seen order, with their durations.
    names: Vec<u64>,
    groups: FastMap<u64, u32>,
    /// The groups of small keys (`u32::MAX`: none yet).
    dense: Vec<u32>,
    samples: Vec<Samples>,
    ctx_index: FastMap<LocalCtx, u32>,
    ctxs: Vec<LocalCtx>,
    corr: FastMap<u32, CorrRuns>,
    /// The last thread seen, its pieces, and the pieces its last call's start and end fell in.
    last: Option<(u64, Option<usize>, usize, usize)>,
    /// The last function seen and its group; the last context key and its id.
    last_name: Option<(u64, u32)>,
    last_ctx: Option<(LocalCtx, u32)>,
    pub bounds: Bounds,
}

/// Function keys below this are looked up in a vector, not a map.
const DENSE_KEYS: u64 = 1 << 20;

/// What to gather.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Needs {
    /// Durations per API function.
    pub api_sum: bool,
    /// The kernels.
    pub kernels: bool,
    /// Kernels by launch context (and so the API calls' contexts).
    pub attribution: bool,
    /// Which kernels each launch context launched (`nvtx_kern_sum`'s range instances).
    pub presence: bool,
    /// Per launch context, the span and correlation ids of its GPU work.
    pub projection: bool,
    /// The mangled kernel names.
    pub mangled: bool,
}

/// How to gather: what is needed, the ranges' pieces, and how many bits an index of
/// correlation ids may use.
pub struct Gatherer<'a> {
    pub needs: Needs,
    enclosure: &'a Enclosure,
    max_bits: u64,
}

impl<'a> Gatherer<'a> {
    /// `rows`: about how many API calls there are, which bounds each index of correlation ids.
    pub fn new(needs: Needs, enclosure: &'a Enclosure, rows: u64) -> Gatherer<'a> {
        Gatherer {
            needs,
            enclosure,
            max_bits: max_bits(rows),
        }
    }

    /// One API call; `name` keys the function (the caller resolves keys to names).
    #[inline]
    #[allow(clippy::too_many_arguments)]
    pub fn api_call(
        &self,
        c: &mut ApiChunk,
        start: i64,
        end: i64,
        pid: u32,
        tid: u32,
        corr: u64,
        name: u64,
    ) {
        let end = c.bounds.span(start, end);
        if self.needs.api_sum {
            let g = match c.last_name {
                Some((n, g)) if n == name => g,
                _ => {
                    let next = c.samples.len() as u32;
                    let g = if name < DENSE_KEYS {
                        if c.dense.len() <= name as usize {
                            c.dense.resize(name as usize + 1, u32::MAX);
                        }
                        if c.dense[name as usize] == u32::MAX {
                            c.dense[name as usize] = next;
                        }
                        c.dense[name as usize]
                    } else {
                        *c.groups.entry(name).or_insert(next)
                    };
                    if g == next {
                        c.names.push(name);
                        c.samples.push(Samples::default());
                    }
                    c.last_name = Some((name, g));
                    g
                }
            };
            c.samples[g as usize].push(end.saturating_sub(start));
        }
        if !self.needs.attribution {
            return;
        }
        let key = thread_key(pid, tid);
        let (thread, hint_s, hint_e) = match c.last {
            Some((k, t, s, e)) if k == key => (t, s, e),
            _ => (self.enclosure.threads.get(&key).copied(), 0, 0),
        };
        let pieces = thread.map_or(&self.enclosure.none, |t| &self.enclosure.pieces[t]);
        let ps = pieces.piece(start, hint_s);
        let pe = if pieces.holds(ps, end) {
            ps
        } else {
            pieces.piece(end, hint_e.max(ps))
        };
        c.last = Some((key, thread, ps, pe));
        let local = (key, pieces.sets[ps], pieces.sets[pe]);
        let ctx = match c.last_ctx {
            Some((l, ctx)) if l == local => ctx,
            _ => {
                let next = c.ctxs.len() as u32;
                let ctx = *c.ctx_index.entry(local).or_insert(next);
                if ctx == next {
                    c.ctxs.push(local);
                }
                c.last_ctx = Some((local, ctx));
                ctx
            }
        };
        c.corr
            .entry(pid)
            .or_default()
            .insert(corr, ctx, self.max_bits);
    }
}

/// A launch context: the process and thread of a call and the ranges enclosing it (indices into
/// the ranges the [`Enclosure`] was made of, ascending).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Ctx {
    pub pid: u32,
    pub tid: u32,
    pub ranges: Vec<u32>,
}

/// The correlation ids of one process across all chunks, with global contexts.
struct CorrIndex {
    runs: CorrRuns,
    /// A bit per id of `runs.bits`: some GPU work with this id was seen.
    used: Vec<AtomicU64>,
    used_extra: std::sync::Mutex<std::collections::HashSet<u64>>,
}

/// The API calls gathered: functions' durations, contexts, and the index of correlation ids.
pub struct Calls {
    /// (name key, durations) in first-seen order.
    pub functions: Vec<(u64, Samples)>,
    pub ctxs: Vec<Ctx>,
    launches: LaunchIndex,
    /// The signature of each context, and the signatures.
    ctx_sig: Vec<u32>,
    sigs: Signatures,
}

/// One row key of a kernel's attribution without the kernel: the call's process and thread, and
/// the label and style of one enclosing range (all `None` where there is no call or no range).
pub type SlotKey = (Option<u32>, Option<u32>, Option<u32>, Option<RangeStyle>);

/// Lists of slot keys, each stored once; list 0 is that of work whose launch was not traced.
#[derive(Default)]
pub struct Signatures {
    pub lists: Vec<Vec<SlotKey>>,
    index: HashMap<Vec<SlotKey>, u32>,
}

impl Signatures {
    fn new() -> Signatures {
        let mut s = Signatures::default();
        s.intern(vec![(None, None, None, None)]);
        s
    }

    fn intern(&mut self, keys: Vec<SlotKey>) -> u32 {
        if let Some(&id) = self.index.get(&keys) {
            return id;
        }
        let id = self.lists.len() as u32;
        self.lists.push(keys.clone());
        self.index.insert(keys, id);
        id
    }
}

impl Enclosure {
    /// The slot keys of a context.
    fn slot_keys(&self, ctx: &Ctx) -> Vec<SlotKey> {
        let (pid, tid) = (Some(ctx.pid), Some(ctx.tid));
        if ctx.ranges.is_empty() {
            return vec![(pid, tid, None, None)];
        }
        ctx.ranges
            .iter()
            .map(|&r| {
                let (label, style) = self.labels[r as usize];
                (pid, tid, Some(label), Some(style))
            })
            .collect()
    }
}

/// Calls by (process, correlation id): each call's context.
pub(crate) struct LaunchIndex {
    index: FastMap<u32, CorrIndex>,
}

impl LaunchIndex {
    /// The index of chunks of calls (in table order), each with the global id of each of its
    /// contexts.
    pub(crate) fn build(
        chunks: Vec<(FastMap<u32, CorrRuns>, Vec<u32>)>,
        max_bits: u64,
    ) -> LaunchIndex {
        let mut index: FastMap<u32, CorrRuns> = FastMap::default();
        for (corr, global) in chunks {
            for (pid, mut runs) in corr {
                for r in &mut runs.runs {
                    r.1 = global[r.1 as usize];
                }
                for list in runs.extra.values_mut() {
                    for c in list.iter_mut() {
                        *c = global[*c as usize];
                    }
                }
                match index.get_mut(&pid) {
                    None => {
                        index.insert(pid, runs);
                    }
                    Some(into) => merge_runs(into, runs, max_bits),
                }
            }
        }
        let index = index
            .into_iter()
            .map(|(pid, runs)| {
                let used = (0..runs.bits.len()).map(|_| AtomicU64::new(0)).collect();
                (
                    pid,
                    CorrIndex {
                        runs,
                        used,
                        used_extra: Default::default(),
                    },
                )
            })
            .collect();
        LaunchIndex { index }
    }
}

impl Gatherer<'_> {
    /// Merge the chunks of API calls, in table order.
    pub fn finish_calls(&self, chunks: Vec<ApiChunk>) -> Calls {
        let mut functions: Vec<(u64, Vec<Samples>)> = Vec::new();
        let mut seen: FastMap<u64, usize> = FastMap::default();
        let mut ctxs: Vec<Ctx> = Vec::new();
        let mut ctx_ids: HashMap<Ctx, u32> = HashMap::new();
        let mut launches = Vec::new();
        let sets = &self.enclosure.sets;
        for mut chunk in chunks {
            for (name, samples) in chunk.names.iter().zip(chunk.samples.iter_mut()) {
                match seen.get(name) {
                    Some(&i) => functions[i].1.push(std::mem::take(samples)),
                    None => {
                        seen.insert(*name, functions.len());
                        functions.push((*name, vec![std::mem::take(samples)]));
                    }
                }
            }
            // Local contexts to global ones.
            let global: Vec<u32> = chunk
                .ctxs
                .iter()
                .map(|&(key, a, b)| {
                    let ranges = if a == b {
                        sets.get(a).to_vec()
                    } else {
                        let other = sets.get(b);
                        sets.get(a)
                            .iter()
                            .copied()
                            .filter(|r| other.binary_search(r).is_ok())
                            .collect()
                    };
                    let ctx = Ctx {
                        pid: (key >> 32) as u32,
                        tid: key as u32,
                        ranges,
                    };
                    let next = ctxs.len() as u32;
                    *ctx_ids.entry(ctx.clone()).or_insert_with(|| {
                        ctxs.push(ctx);
                        next
                    })
                })
                .collect();
            launches.push((std::mem::take(&mut chunk.corr), global));
        }
        let mut sigs = Signatures::new();
        let ctx_sig = ctxs
            .iter()
            .map(|c| sigs.intern(self.enclosure.slot_keys(c)))
            .collect();
        Calls {
            functions: functions
                .into_iter()
                .map(|(name, parts)| (name, Samples::concat(parts)))
                .collect(),
            ctx_sig,
            sigs,
            ctxs,
            launches: LaunchIndex::build(launches, self.max_bits),
        }
    }
}

/// Add `more` (a later chunk's ids of one process) to `into`.
fn merge_runs(into: &mut CorrRuns, more: CorrRuns, max_bits: u64) {
    let after = match (into.last, more.runs.first()) {
        (Some(l), Some(f)) => f.0 > l,
        _ => true,
    };
    if after && !more.runs.is_empty() && more.base >= into.base {
        let offset = ((more.base - into.base) / 64) as usize;
        if (offset + more.bits.len()) as u64 * 64 <= max_bits {
            if into.bits.len() < offset + more.bits.len() {
                into.bits.resize(offset + more.bits.len(), 0);
            }
            for (i, w) in more.bits.iter().enumerate() {
                into.bits[offset + i] |= w;
            }
            for r in &more.runs {
                if into.runs.last().is_none_or(|l| l.1 != r.1) {
                    into.runs.push(*r);
                }
            }
            into.last = more.last.or(into.last);
            for (corr, list) in more.extra {
                into.extra.entry(corr).or_default().extend(list);
            }
            return;
        }
    }
    if into.runs.is_empty() && into.extra.is_empty() {
        *into = more;
        return;
    }
    for (corr, ctx) in more.each() {
        into.extra.entry(corr).or_default().push(ctx);
    }
    for (corr, list) in more.extra {
        into.extra.entry(corr).or_default().extend(list);
    }
}

/// Where a lookup of correlation ids left off, for the next one.
#[derive(Default, Clone)]
pub struct Cursor {
    pid: Option<u32>,
    run: usize,
}

impl Calls {
    /// [`LaunchIndex::each`].
    #[inline]
    pub fn each(
        &self,
        pid: u32,
        corr: u64,
        cursor: &mut Cursor,
        mark: bool,
        f: impl FnMut(u32),
    ) -> bool {
        self.launches.each(pid, corr, cursor, mark, f)
    }
}

impl LaunchIndex {
    /// The contexts of the calls with this process and correlation id (normally one; none for
    /// work whose launch was not traced), as `f(context)`. With `mark`, whether this is the
    /// first lookup of the id that marked it is returned.
    #[inline]
    pub(crate) fn each(
        &self,
        pid: u32,
        corr: u64,
        cursor: &mut Cursor,
        mark: bool,
        mut f: impl FnMut(u32),
    ) -> bool {
        if cursor.pid != Some(pid) {
            cursor.pid = Some(pid);
            cursor.run = 0;
        }
        let Some(ix) = self.index.get(&pid) else {
            return false;
        };
        let mut first = false;
        if ix.runs.has_bit(corr) {
            f(ix.runs.run(corr, &mut cursor.run));
            if mark {
                let bit = corr - ix.runs.base;
                let m = 1u64 << (bit % 64);
                first = ix.used[(bit / 64) as usize].fetch_or(m, Ordering::Relaxed) & m == 0;
            }
        }
        if !ix.runs.extra.is_empty() {
            if let Some(list) = ix.runs.extra.get(&corr) {
                for &c in list {
                    f(c);
                }
                if mark && !ix.runs.has_bit(corr) {
                    first = ix
                        .used_extra
                        .lock()
                        .map(|mut s| s.insert(corr))
                        .unwrap_or(false);
                }
            }
        }
        first
    }
}

/// The span and correlation ids of a launch context's GPU work.
#[derive(Clone, Copy, Debug)]
pub struct Projection {
    pub start: i64,
    pub end: i64,
    /// Distinct correlation ids (of this process) of the work.
    pub ops: u64,
}

impl Projection {
    fn add(&mut self, o: &Projection) {
        self.start = self.start.min(o.start);
        self.end = self.end.max(o.end);
        self.ops += o.ops;
    }
}

/// The launch attribution of a kernel: none (0), one context (1 + its id), or several (a list).
const LISTS: u32 = 1 << 31;

/// What a chunk gathers of the work of one attribution: its signature (of the chunk when the
/// attribution is a list of contexts, `LISTS |` its index) and its work's projection.
struct PerAttribution {
    sig: u32,
    projection: Option<Projection>,
}

/// The kernels of one chunk of rows.
#[derive(Default)]
pub struct KernelChunk {
    kid_index: FastMap<[RawName; 3], u32>,
    kids: Vec<[RawName; 3]>,
    /// Per attribution: its signature and its work's projection.
    index: FastMap<u32, usize>,
    per: Vec<(u32, PerAttribution)>,
    /// The last attribution seen and its entry.
    last: Option<(u32, usize)>,
    /// Durations by (signature, kernel names), the last key met and its entry.
    sample_index: FastMap<(u32, u32), usize>,
    samples: Vec<(u32, u32, Samples)>,
    last_sample: Option<((u32, u32), usize)>,
    /// Signatures of the chunk's lists of contexts.
    sigs: Signatures,
    /// (attribution, kernel names) met, and the last one.
    presence: std::collections::HashSet<
        (u32, u32),
        std::hash::BuildHasherDefault<super::attribution::FastHasher>,
    >,
    last_presence: Option<(u32, u32)>,
    list_index: HashMap<Vec<u32>, u32>,
    lists: Vec<Vec<u32>>,
    cursor: Cursor,
    /// Names that are string ids.
    id_index: FastMap<(i64, i64, Option<i64>), u32>,
    pub bounds: Bounds,
    /// Work items looked up (kernels and memory operations), for the memory operations pass.
    scratch: Vec<u32>,
}

impl Gatherer<'_> {
    /// The attribution of GPU work with this process and correlation id, and whether it is the
    /// first work of that id seen.
    fn attribution(&self, c: &mut KernelChunk, calls: &Calls, pid: u32, corr: u64) -> (u32, bool) {
        c.scratch.clear();
        let scratch = &mut c.scratch;
        let first = calls.each(pid, corr, &mut c.cursor, self.needs.projection, |ctx| {
            scratch.push(ctx)
        });
        let a = match c.scratch.len() {
            0 => 0,
            1 => 1 + c.scratch[0],
            _ => {
                let next = c.lists.len() as u32;
                let id = *c.list_index.entry(c.scratch.clone()).or_insert(next);
                if id == next {
                    c.lists.push(c.scratch.clone());
                }
                LISTS | id
            }
        };
        (a, first)
    }

    /// The entry of `attribution` in the chunk.
    #[inline]
    fn entry<'c>(
        &self,
        c: &'c mut KernelChunk,
        calls: &Calls,
        attribution: u32,
    ) -> &'c mut PerAttribution {
        let i = match c.last {
            Some((a, i)) if a == attribution => i,
            _ => {
                let next = c.per.len();
                let i = *c.index.entry(attribution).or_insert(next);
                if i == next {
                    let sig = match attribution {
                        0 => 0,
                        a if a & LISTS != 0 => {
                            let keys = c.lists[(a & !LISTS) as usize]
                                .iter()
                                .flat_map(|&ctx| {
                                    calls.sigs.lists[calls.ctx_sig[ctx as usize] as usize]
                                        .iter()
                                        .copied()
                                })
                                .collect();
                            LISTS | c.sigs.intern(keys)
                        }
                        a => calls.ctx_sig[(a - 1) as usize],
                    };
                    c.per.push((
                        attribution,
                        PerAttribution {
                            sig,
                            projection: None,
                        },
                    ));
                }
                c.last = Some((attribution, i));
                i
            }
        };
        &mut c.per[i].1
    }

    #[inline]
    fn project(&self, e: &mut PerAttribution, attribution: u32, first: bool, start: i64, end: i64) {
        if !self.needs.projection || attribution == 0 {
            return;
        }
        let p = e
            .projection
            .get_or_insert(Projection { start, end, ops: 0 });
        p.start = p.start.min(start);
        p.end = p.end.max(end);
        p.ops += first as u64;
    }

    /// One kernel: its names as read (a caller without nsys ids gives interned ids as
    /// [`RawName::Id`]).
    #[inline]
    #[allow(clippy::too_many_arguments)]
    pub fn kernel(
        &self,
        c: &mut KernelChunk,
        calls: &Calls,
        start: i64,
        end: i64,
        pid: u32,
        corr: u64,
        names: &[RawName; 3],
    ) {
        let end = c.bounds.span(start, end);
        let kid = match names {
            // Names by string id, the usual case, are looked up without allocating.
            [RawName::Id(a), RawName::Id(b), m @ (RawName::Id(_) | RawName::None)] => {
                let m = match m {
                    RawName::Id(m) => Some(*m),
                    _ => None,
                };
                let next = c.kids.len() as u32;
                let id = *c.id_index.entry((*a, *b, m)).or_insert(next);
                if id == next {
                    c.kids.push(names.clone());
                }
                id
            }
            _ => {
                let next = c.kids.len() as u32;
                let id = *c.kid_index.entry(names.clone()).or_insert(next);
                if id == next {
                    c.kids.push(names.clone());
                }
                id
            }
        };
        let (attribution, first) = if self.needs.attribution {
            self.attribution(c, calls, pid, corr)
        } else {
            (0, false)
        };
        let e = self.entry(c, calls, attribution);
        self.project(e, attribution, first, start, end);
        let key = (e.sig, kid);
        let i = match c.last_sample {
            Some((k, i)) if k == key => i,
            _ => {
                let next = c.samples.len();
                let i = *c.sample_index.entry(key).or_insert(next);
                if i == next {
                    c.samples.push((key.0, key.1, Samples::default()));
                }
                c.last_sample = Some((key, i));
                i
            }
        };
        c.samples[i].2.push(end.saturating_sub(start));
        if self.needs.presence && c.last_presence != Some((attribution, kid)) {
            c.presence.insert((attribution, kid));
            c.last_presence = Some((attribution, kid));
        }
    }

    /// One memory operation, for the projections (its own reports read the trace).
    pub fn mem_op(
        &self,
        c: &mut KernelChunk,
        calls: &Calls,
        start: i64,
        end: i64,
        pid: u32,
        corr: u64,
    ) {
        if !self.needs.projection {
            return;
        }
        let (attribution, first) = self.attribution(c, calls, pid, corr);
        let e = self.entry(c, calls, attribution);
        self.project(e, attribution, first, start, end);
    }
}

/// How the keys of a gathering become interned names.
pub trait Names {
    /// An API function's key.
    fn function(&mut self, key: u64) -> StrId;
    /// A kernel name as read; `None` for none.
    fn name(&mut self, raw: &RawName) -> Option<StrId>;
    /// The name of a kernel without one.
    fn unnamed(&mut self) -> StrId;
}

/// A kernel's names, interned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KernelNames {
    pub name: StrId,
    pub short: StrId,
    pub mangled: Option<StrId>,
}

/// Everything gathered: what the kernel and API reports are computed from.
pub struct Gathered {
    /// (function, durations), in the order the functions first occur.
    pub functions: Vec<(StrId, Samples)>,
    pub ctxs: Vec<Ctx>,
    /// Lists of contexts (kernels whose correlation id several calls share).
    pub lists: Vec<Vec<u32>>,
    pub kernel_names: Vec<KernelNames>,
    /// Signatures: the slot keys of the kernels' attributions.
    pub sigs: Vec<Vec<SlotKey>>,
    /// (signature, kernel names index) → durations.
    pub kernels: Vec<(u32, u32, Samples)>,
    /// The (attribution, kernel names index) met, ascending. Attribution 0: no launch call;
    /// `1 + c`: context `c`; `LISTS | l`: list `l`.
    pub presence: Vec<(u32, u32)>,
    pub projections: FastMap<u32, Projection>,
}

/// One slot of a kernel's attribution: the call's process and thread (none when the launch was
/// not traced) and one enclosing range (none when no range encloses the call).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Slot {
    pub pid: Option<u32>,
    pub tid: Option<u32>,
    pub range: Option<u32>,
}

impl Gathered {
    /// The (call, range) slots of an attribution, in order: a kernel counts once in each, as
    /// nsys's join counts it.
    pub fn slots(&self, attribution: u32) -> Vec<Slot> {
        if attribution == 0 {
            return vec![Slot {
                pid: None,
                tid: None,
                range: None,
            }];
        }
        let single;
        let ctxs: &[u32] = if attribution & LISTS != 0 {
            &self.lists[(attribution & !LISTS) as usize]
        } else {
            single = [attribution - 1];
            &single
        };
        let mut out = Vec::new();
        for &c in ctxs {
            let ctx = &self.ctxs[c as usize];
            let (pid, tid) = (Some(ctx.pid), Some(ctx.tid));
            if ctx.ranges.is_empty() {
                out.push(Slot {
                    pid,
                    tid,
                    range: None,
                });
            }
            out.extend(ctx.ranges.iter().map(|&r| Slot {
                pid,
                tid,
                range: Some(r),
            }));
        }
        out
    }

    /// The ranges of an attribution, each once, ascending.
    pub fn ranges(&self, attribution: u32) -> Vec<u32> {
        let mut out: Vec<u32> = self
            .slots(attribution)
            .into_iter()
            .filter_map(|s| s.range)
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Merge the kernel chunks (in table order) of a gathering whose calls are `calls`,
    /// resolving function keys and kernel names with `names`.
    pub fn finish(calls: Calls, chunks: Vec<KernelChunk>, names: &mut dyn Names) -> Gathered {
        let mut functions: Vec<(StrId, Vec<Samples>)> = Vec::new();
        let mut function_index: FastMap<StrId, usize> = FastMap::default();
        for (key, samples) in calls.functions {
            let id = names.function(key);
            match function_index.get(&id) {
                Some(&i) => functions[i].1.push(samples),
                None => {
                    function_index.insert(id, functions.len());
                    functions.push((id, vec![samples]));
                }
            }
        }
        let functions = functions
            .into_iter()
            .map(|(id, parts)| (id, Samples::concat(parts)))
            .collect();
        let mut kernel_names: Vec<KernelNames> = Vec::new();
        let mut names_index: FastMap<KernelNames, u32> = FastMap::default();
        let mut lists: Vec<Vec<u32>> = Vec::new();
        let mut list_index: HashMap<Vec<u32>, u32> = HashMap::new();
        let mut kernels: FastMap<(u32, u32), Vec<Samples>> = FastMap::default();
        let mut projections: FastMap<u32, Projection> = FastMap::default();
        let mut presence: Vec<(u32, u32)> = Vec::new();
        let mut sigs = calls.sigs;
        for chunk in chunks {
            let kid: Vec<u32> = chunk
                .kids
                .iter()
                .map(|raw| {
                    let n = match names.name(&raw[0]) {
                        Some(n) => n,
                        None => names.unnamed(),
                    };
                    let k = KernelNames {
                        name: n,
                        short: names.name(&raw[1]).unwrap_or(n),
                        mangled: names.name(&raw[2]),
                    };
                    let next = kernel_names.len() as u32;
                    *names_index.entry(k).or_insert_with(|| {
                        kernel_names.push(k);
                        next
                    })
                })
                .collect();
            let list: Vec<u32> = chunk
                .lists
                .into_iter()
                .map(|l| {
                    let next = lists.len() as u32;
                    *list_index.entry(l.clone()).or_insert_with(|| {
                        lists.push(l);
                        next
                    })
                })
                .collect();
            let global = |a: u32| {
                if a & LISTS != 0 {
                    LISTS | list[(a & !LISTS) as usize]
                } else {
                    a
                }
            };
            let sig: Vec<u32> = chunk
                .sigs
                .lists
                .into_iter()
                .map(|keys| sigs.intern(keys))
                .collect();
            let global_sig = |s: u32| {
                if s & LISTS != 0 {
                    sig[(s & !LISTS) as usize]
                } else {
                    s
                }
            };
            for (s, k, samples) in chunk.samples {
                kernels
                    .entry((global_sig(s), kid[k as usize]))
                    .or_default()
                    .push(samples);
            }
            presence.extend(
                chunk
                    .presence
                    .into_iter()
                    .map(|(a, k)| (global(a), kid[k as usize])),
            );
            for (a, per) in chunk.per {
                if let Some(p) = per.projection {
                    projections
                        .entry(global(a))
                        .and_modify(|q| q.add(&p))
                        .or_insert(p);
                }
            }
        }
        let mut kernels: Vec<(u32, u32, Samples)> = kernels
            .into_iter()
            .map(|((a, k), parts)| (a, k, Samples::concat(parts)))
            .collect();
        kernels.sort_unstable_by_key(|k| (k.0, k.1));
        presence.sort_unstable();
        presence.dedup();
        Gathered {
            functions,
            ctxs: calls.ctxs,
            lists,
            kernel_names,
            sigs: sigs.lists,
            kernels,
            presence,
            projections,
        }
    }

    /// Gather `trace`'s kernels and API calls (the enclosure made of all its ranges).
    pub fn from_trace(trace: &Trace, needs: Needs, enclosure: &Enclosure) -> Gathered {
        let g = Gatherer::new(needs, enclosure, trace.api_calls.len() as u64);
        let mut api = ApiChunk::default();
        if needs.api_sum || needs.attribution {
            for c in &trace.api_calls {
                g.api_call(
                    &mut api,
                    c.start.0,
                    c.end.0,
                    c.pid,
                    c.tid,
                    c.correlation_id,
                    c.name.0 as u64,
                );
            }
        }
        let calls = g.finish_calls(vec![api]);
        let mut chunk = KernelChunk::default();
        let id = |s: StrId| RawName::Id(s.0 as i64);
        let kernels = if needs.kernels {
            &trace.kernels[..]
        } else {
            &[]
        };
        for k in kernels {
            let names = [
                id(k.name),
                id(k.short_name),
                k.mangled_name.map_or(RawName::None, id),
            ];
            g.kernel(
                &mut chunk,
                &calls,
                k.start.0,
                k.end.0,
                k.pid,
                k.correlation_id,
                &names,
            );
        }
        for m in &trace.mem_ops {
            g.mem_op(
                &mut chunk,
                &calls,
                m.start.0,
                m.end.0,
                m.pid,
                m.correlation_id,
            );
        }
        struct Interned;
        impl Names for Interned {
            fn function(&mut self, key: u64) -> StrId {
                StrId(key as u32)
            }
            fn name(&mut self, raw: &RawName) -> Option<StrId> {
                match raw {
                    RawName::Id(i) => Some(StrId(*i as u32)),
                    _ => None,
                }
            }
            fn unnamed(&mut self) -> StrId {
                StrId(0)
            }
        }
        let mut gathered = Gathered::finish(calls, vec![chunk], &mut Interned);
        // Interned ids follow first occurrence in the file the trace came from.
        gathered.functions.sort_by_key(|f| f.0);
        gathered
    }
}
