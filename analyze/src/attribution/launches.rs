//! The correlation index: API calls by (process, correlation id), each with the launch context
//! the caller gave it, so that a kernel finds the call that launched it in constant time. Per
//! process a bit per correlation id a call has, and the context of each run of ids that share
//! one ([`CorrRuns`]); ids out of order or far apart go to a map. Chunks of calls read side by
//! side are indexed on their own and merged in table order ([`LaunchIndex::build`]). Which ids
//! GPU work was seen for is a bit per call, not per id: correlation ids are sparse (nsys numbers
//! records other than API calls too, so a capture's calls hold about one id in nine).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use crate::stats::attribution::FastMap;

/// Correlation ids of one process and the launch context of each.
#[derive(Default)]
pub struct CorrRuns {
    /// The id of bit 0 of `bits` (a multiple of 64).
    base: u64,
    bits: Vec<u64>,
    /// (first id, as an offset from `base`, and context) of each run of ids (ascending) that
    /// share a context.
    runs: Vec<(u32, u32)>,
    last: Option<u64>,
    /// Ids that came out of order, repeated, or too far away for the bits: their contexts.
    extra: FastMap<u64, Vec<u32>>,
}

/// The most bits a process's index of correlation ids holds beyond the rows read.
const SPARE_BITS: u64 = 1 << 22;

/// The most bits an index of correlation ids may hold when about `rows` calls were read: at
/// most 2^32, so that an id's offset in the bits fits in a `u32`.
pub fn max_bits(rows: u64) -> u64 {
    rows.saturating_mul(16)
        .saturating_add(SPARE_BITS)
        .min(1 << 32)
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
                // Below `max_bits`, itself at most 2^32.
                self.runs.push((bit as u32, ctx));
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
        // An id with a bit lies below `base + max_bits`: its offset fits.
        let corr = (corr - self.base) as u32;
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
    /// Which ids of `runs.bits` some GPU work was seen for. Made by the first lookup that
    /// marks, so that an index only looked up (the profile's) costs nothing more.
    used: OnceLock<Used>,
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
        // Each process's bits are sized once for the ids of all its chunks (within `max_bits`):
        // grown chunk by chunk, they would hold up to twice that.
        let mut ends: FastMap<u32, u64> = FastMap::default();
        for (corr, _) in &chunks {
            for (&pid, runs) in corr.iter().filter(|(_, r)| !r.runs.is_empty()) {
                let end = runs.base + 64 * runs.bits.len() as u64;
                let e = ends.entry(pid).or_insert(end);
                *e = (*e).max(end);
            }
        }
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
                        if let Some(&end) = ends.get(&pid) {
                            let words = (end.saturating_sub(runs.base).min(max_bits) / 64) as usize;
                            runs.bits
                                .reserve_exact(words.saturating_sub(runs.bits.len()));
                        }
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
        (Some(l), Some(f)) => more.base + u64::from(f.0) > l,
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
            // Within `max_bits` of `into.base`: the offsets fit.
            let shift = (more.base - into.base) as u32;
            for r in &more.runs {
                if into.runs.last().is_none_or(|l| l.1 != r.1) {
                    into.runs.push((r.0 + shift, r.1));
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
                let bits = &ix.runs.bits;
                let used = ix.used.get_or_init(|| Used::new(bits));
                first = used.mark(bits, corr - ix.runs.base);
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

/// A mark per set bit of an index's bits (per call, where the bits have one per id): the marks
/// of a bit are found by its rank among the set bits, counted from the block of
/// [`RANK_WORDS`] words that holds it.
struct Used {
    /// The set bits before each block of words.
    ranks: Vec<u32>,
    marks: Vec<AtomicU64>,
}

/// Words of the bits per entry of [`Used::ranks`]: a rank is at most this many word counts away.
const RANK_WORDS: usize = 4;

impl Used {
    fn new(bits: &[u64]) -> Used {
        let mut ranks = Vec::with_capacity(bits.len().div_ceil(RANK_WORDS));
        let mut set = 0u64;
        for block in bits.chunks(RANK_WORDS) {
            // At most 2^32 bits (`max_bits`): fewer set before any block.
            ranks.push(set as u32);
            set += block.iter().map(|w| u64::from(w.count_ones())).sum::<u64>();
        }
        Used {
            ranks,
            marks: (0..set.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Mark bit `bit` of `bits` (which must be set); whether it was not marked before.
    #[inline]
    fn mark(&self, bits: &[u64], bit: u64) -> bool {
        let word = (bit / 64) as usize;
        let block = word / RANK_WORDS;
        let before = &bits[block * RANK_WORDS..word];
        let rank = u64::from(self.ranks[block])
            + before
                .iter()
                .map(|w| u64::from(w.count_ones()))
                .sum::<u64>()
            + u64::from((bits[word] & ((1u64 << (bit % 64)) - 1)).count_ones());
        let m = 1u64 << (rank % 64);
        self.marks[(rank / 64) as usize].fetch_or(m, Ordering::Relaxed) & m == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_set_bit_is_marked_once_and_apart_from_the_others() {
        // Ids spread as a capture spreads them (about one in nine), with dense and empty
        // stretches, over more than one block of words.
        let mut ids: Vec<u64> = (0..3000u64).map(|i| i * 9 + i % 7).collect();
        ids.extend(1_000_000..1_000_300);
        let mut bits = vec![0u64; (ids.last().unwrap() / 64 + 1) as usize];
        for &id in &ids {
            bits[(id / 64) as usize] |= 1 << (id % 64);
        }
        let used = Used::new(&bits);
        assert_eq!(used.marks.len(), ids.len().div_ceil(64));
        for &id in ids.iter().step_by(2) {
            assert!(used.mark(&bits, id), "{id} marked first");
        }
        for (i, &id) in ids.iter().enumerate() {
            assert_eq!(used.mark(&bits, id), i % 2 == 1, "{id} marked again");
        }
    }

    #[test]
    fn chunks_merge_into_the_index_of_all_their_calls() {
        let max = max_bits(100);
        let (pid, corr) = (7u32, [5u64, 6, 7, 70, 71, 300, 301, 302]);
        // Each chunk's calls share its one context, whose global id is `g`.
        let chunk = |ids: &[u64], g: u32| {
            let mut runs = CorrRuns::default();
            for &id in ids {
                runs.insert(id, 0, max);
            }
            let mut m = FastMap::default();
            m.insert(pid, runs);
            (m, vec![g])
        };
        let index = LaunchIndex::build(
            vec![
                chunk(&corr[..3], 3),
                chunk(&corr[3..5], 4),
                chunk(&corr[5..], 3),
            ],
            max,
        );
        let mut cursor = Cursor::default();
        let context = |id: u64, cursor: &mut Cursor| {
            let mut seen = Vec::new();
            let first = index.each(pid, id, cursor, true, |c| seen.push(c));
            (seen, first)
        };
        assert_eq!(context(6, &mut cursor), (vec![3], true));
        assert_eq!(context(6, &mut cursor), (vec![3], false));
        assert_eq!(context(71, &mut cursor), (vec![4], true));
        assert_eq!(context(301, &mut cursor), (vec![3], true));
        assert_eq!(context(8, &mut cursor), (vec![], false));
        assert_eq!(context(5, &mut cursor), (vec![3], true));
    }
}
