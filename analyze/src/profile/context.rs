//! Where a call was made, as the profile's plan attributes work by it: the host ranges of each
//! process cut into pieces ([`Ranges`]), a call's launch context (its process, thread, the set of
//! ranges its start falls in, and with `--by op` its operator call), the API calls of a chunk of
//! rows indexed by context, and kernel classes by a chunk's kernel id.

use crate::attribution::launches::CorrRuns;
use crate::attribution::ranges::{Pieces, Sets};
use crate::kernels::class::{Classifier, KernelClass};
use crate::model::trace::Trace;
use crate::source::KernelTexts;
use crate::stats::attribution::FastMap;

use super::ranges::is_host_range;

/// The host ranges of each process, cut into pieces: the context of a call is its process,
/// thread and the piece its start falls in.
pub(super) struct Ranges {
    pub(super) pieces: FastMap<u32, Pieces>,
    pub(super) sets: Sets,
    pub(super) none: Pieces,
}

impl Ranges {
    pub(super) fn new(trace: &Trace) -> Ranges {
        let mut members: FastMap<u32, Vec<u32>> = FastMap::default();
        for (i, r) in trace.ranges.iter().enumerate() {
            if is_host_range(trace, r) {
                members.entry(r.pid).or_default().push(i as u32);
            }
        }
        let mut sets = Sets::new();
        let mut keys: Vec<u32> = members.keys().copied().collect();
        keys.sort_unstable();
        let pieces = keys
            .into_iter()
            .map(|pid| (pid, Pieces::new(&trace.ranges, &members[&pid], &mut sets)))
            .collect();
        Ranges {
            pieces,
            sets,
            none: Pieces::new(&trace.ranges, &[], &mut Sets::new()),
        }
    }

    /// The chunk's id of the context of a call made inside operator call `op` (or none,
    /// [`crate::attribution::operators::NONE`]).
    #[inline]
    pub(super) fn context(&self, c: &mut ApiChunk, pid: u32, tid: u32, start: i64, op: u32) -> u32 {
        let hint = match c.last {
            Some((p, h)) if p == pid => h,
            _ => 0,
        };
        let pieces = self.pieces.get(&pid).unwrap_or(&self.none);
        let piece = pieces.piece(start, hint);
        c.last = Some((pid, piece));
        let key = Context {
            pid,
            tid,
            set: pieces.sets[piece],
            op,
        };
        if let Some((k, id)) = c.last_ctx {
            if k == key {
                return id;
            }
        }
        let next = c.ctxs.len() as u32;
        let id = *c.ctx_index.entry(key).or_insert(next);
        if id == next {
            c.ctxs.push(key);
        }
        c.last_ctx = Some((key, id));
        id
    }
}

/// Where a call was made: what the work it launched is attributed by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct Context {
    pub(super) pid: u32,
    pub(super) tid: u32,
    /// The set of ranges containing the call's start.
    pub(super) set: u32,
    /// The operator call it was made in, or [`crate::attribution::operators::NONE`] (always,
    /// without `--by op`).
    pub(super) op: u32,
}

/// The API calls of one chunk of rows.
#[derive(Default)]
pub(super) struct ApiChunk {
    pub(super) ctx_index: FastMap<Context, u32>,
    pub(super) ctxs: Vec<Context>,
    pub(super) corr: FastMap<u32, CorrRuns>,
    pub(super) last: Option<(u32, usize)>,
    pub(super) last_ctx: Option<(Context, u32)>,
}

/// Kernel classes by the chunk's kernel id, from the texts of the kernels' names.
pub(super) struct Classes<'a, T> {
    pub(super) texts: T,
    pub(super) classifier: &'a Classifier,
}

impl<T> Classes<'_, T> {
    pub(super) fn class<N>(
        &self,
        classes: &mut Vec<KernelClass>,
        kid: u32,
        kids: &[N],
    ) -> KernelClass
    where
        T: KernelTexts<N>,
    {
        while classes.len() <= kid as usize {
            let text = self.texts.text(&kids[classes.len()]);
            classes.push(self.classifier.classify(&text));
        }
        classes[kid as usize]
    }
}
