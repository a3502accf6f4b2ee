//! The correlation index: API calls by (process, correlation id), each with the launch context
//! the caller gave it, so that a kernel finds the call that launched it in constant time. Per
//! process a bit per correlation id a call has, and the context of each run of ids that share
//! one ([`CorrRuns`]); ids out of order or far apart go to a map. Chunks of calls read side by
//! side are indexed on their own and merged in table order ([`LaunchIndex::build`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use crate::stats::attribution::FastMap;

/// Correlation ids of one process and the launch context of each.
#[derive(Default)]
pub struct CorrRuns {
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
pub fn max_bits(rows: u64) -> u64 {
    rows.saturating_mul(16).saturating_add(SPARE_BITS)
}

impl CorrRuns {
    pub fn insert(&mut self, corr: u64, ctx: u32, max_bits: u64) {
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

/// The correlation ids of one process across all chunks, with global contexts.
struct CorrIndex {
    runs: CorrRuns,
    /// A bit per id of `runs.bits`: some GPU work with this id was seen. Made by the first
    /// lookup that marks, so that an index only looked up (the profile's) costs no second set
    /// of bits.
    used: OnceLock<Vec<AtomicU64>>,
    used_extra: std::sync::Mutex<std::collections::HashSet<u64>>,
}

/// Calls by (process, correlation id): each call's context.
pub struct LaunchIndex {
    index: FastMap<u32, CorrIndex>,
}

impl LaunchIndex {
    /// The index of chunks of calls (in table order), each with the global id of each of its
    /// contexts.
    pub fn build(chunks: Vec<(FastMap<u32, CorrRuns>, Vec<u32>)>, max_bits: u64) -> LaunchIndex {
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
                (
                    pid,
                    CorrIndex {
                        runs,
                        used: OnceLock::new(),
                        used_extra: Default::default(),
                    },
                )
            })
            .collect();
        LaunchIndex { index }
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

impl LaunchIndex {
    /// The contexts of the calls with this process and correlation id (normally one; none for
    /// work whose launch was not traced), as `f(context)`. With `mark`, whether this is the
    /// first lookup of the id that marked it is returned.
    #[inline]
    pub fn each(
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
                let used = ix
                    .used
                    .get_or_init(|| (0..ix.runs.bits.len()).map(|_| AtomicU64::new(0)).collect());
                first = used[(bit / 64) as usize].fetch_or(m, Ordering::Relaxed) & m == 0;
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
