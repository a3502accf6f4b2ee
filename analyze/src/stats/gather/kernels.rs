//! The kernels (and memory operations) of one chunk of rows, gathered: each under its names and
//! under the launch attribution its call gives it, with the projection of each context's work.

use std::collections::HashMap;

use crate::attribution::launches::Cursor;
use crate::formats::nsys_sqlite::read::RawName;
use crate::stats::attribution::FastMap;

use super::*;

/// A piece of GPU work (a kernel or a memory operation) as the gather places it: its times,
/// and the process and correlation id that find its launch call.
#[derive(Clone, Copy, Debug)]
pub struct Work {
    pub start: i64,
    pub end: i64,
    pub pid: u32,
    pub correlation_id: u64,
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
    pub(super) fn add(&mut self, o: &Projection) {
        self.start = self.start.min(o.start);
        self.end = self.end.max(o.end);
        self.ops += o.ops;
    }
}

/// The launch attribution of a kernel: none (0), one context (1 + its id), or several (a list).
pub(super) const LISTS: u32 = 1 << 31;

/// What a chunk gathers of the work of one attribution: its signature (of the chunk when the
/// attribution is a list of contexts, `LISTS |` its index) and its work's projection.
pub(super) struct PerAttribution {
    pub(super) sig: u32,
    pub(super) projection: Option<Projection>,
}

/// The kernels of one chunk of rows.
#[derive(Default)]
pub struct KernelChunk {
    pub(super) kid_index: FastMap<[RawName; 3], u32>,
    pub(super) kids: Vec<[RawName; 3]>,
    /// Per attribution: its signature and its work's projection.
    pub(super) index: FastMap<u32, usize>,
    pub(super) per: Vec<(u32, PerAttribution)>,
    /// The last attribution seen and its entry.
    pub(super) last: Option<(u32, usize)>,
    /// Durations by (signature, kernel names), the last key met and its entry.
    pub(super) sample_index: FastMap<(u32, u32), usize>,
    pub(super) samples: Vec<(u32, u32, Samples)>,
    pub(super) last_sample: Option<((u32, u32), usize)>,
    /// Signatures of the chunk's lists of contexts.
    pub(super) sigs: Signatures,
    /// (attribution, kernel names) met, and the last one.
    pub(super) presence: std::collections::HashSet<
        (u32, u32),
        std::hash::BuildHasherDefault<crate::stats::attribution::FastHasher>,
    >,
    pub(super) last_presence: Option<(u32, u32)>,
    pub(super) list_index: HashMap<Vec<u32>, u32>,
    pub(super) lists: Vec<Vec<u32>>,
    pub(super) cursor: Cursor,
    /// Names that are string ids.
    pub(super) id_index: FastMap<(i64, i64, Option<i64>), u32>,
    /// Work items looked up (kernels and memory operations), for the memory operations pass.
    pub(super) scratch: Vec<u32>,
}

impl Gatherer<'_> {
    /// The attribution of GPU work with this process and correlation id, and whether it is the
    /// first work of that id seen.
    fn attribution(&self, c: &mut KernelChunk, calls: &Calls, pid: u32, corr: u64) -> (u32, bool) {
        c.scratch.clear();
        let scratch = &mut c.scratch;
        let first = calls
            .launches
            .each(pid, corr, &mut c.cursor, self.needs.projection, |ctx| {
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

    /// The attribution of `work` (none unless `attributed`), its entry in the chunk, and the
    /// work added to the entry's projection.
    #[inline]
    fn place<'c>(
        &self,
        c: &'c mut KernelChunk,
        calls: &Calls,
        work: &Work,
        attributed: bool,
    ) -> (u32, &'c mut PerAttribution) {
        let (attribution, first) = if attributed {
            self.attribution(c, calls, work.pid, work.correlation_id)
        } else {
            (0, false)
        };
        let e = self.entry(c, calls, attribution);
        self.project(e, attribution, first, work.start, work.end);
        (attribution, e)
    }

    /// One kernel: its names as read (a caller without nsys ids gives interned ids as
    /// [`RawName::Id`]).
    #[inline]
    pub fn kernel(&self, c: &mut KernelChunk, calls: &Calls, work: Work, names: &[RawName; 3]) {
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
        let (attribution, e) = self.place(c, calls, &work, self.needs.attribution);
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
        c.samples[i].2.push(work.end.saturating_sub(work.start));
        if self.needs.presence && c.last_presence != Some((attribution, kid)) {
            c.presence.insert((attribution, kid));
            c.last_presence = Some((attribution, kid));
        }
    }

    /// One memory operation, for the projections (its own reports read the trace).
    pub fn mem_op(&self, c: &mut KernelChunk, calls: &Calls, work: Work) {
        if self.needs.projection {
            self.place(c, calls, &work, true);
        }
    }
}
