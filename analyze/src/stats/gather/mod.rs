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
//! A call [start, end] is enclosed by the ranges that contain both its start's piece and its
//! end's ([`crate::attribution::ranges`]); calls are then indexed by (process, correlation id)
//! ([`crate::attribution::launches`]), which a kernel looks up in constant time. Durations are
//! kept as their distinct values with counts ([`Samples`]), not one per row.
//!
//! Rows come in chunks, each gathered on its own ([`ApiChunk`], [`KernelChunk`]) and merged in
//! table order, so the chunks of an export's pages can be read side by side. Any source feeds
//! it the same way ([`crate::source::TraceSource`]: an export streamed, or a loaded trace).

mod finish;
mod kernels;

use std::collections::HashMap;

use crate::attribution::launches::{max_bits, CorrRuns, LaunchIndex};
use crate::attribution::ranges::{thread_key, Enclosure};
use crate::model::trace::RangeStyle;

use super::attribution::FastMap;
pub use super::samples::Samples;

pub use self::finish::{Gathered, KernelNames, Slot};
pub use self::kernels::{KernelChunk, Projection, Work};

/// The context a chunk gives a call: its thread and the sets containing its start and end.
type LocalCtx = (u64, u32, u32);

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
