//! Range geometry: which NVTX ranges hold a time. Each thread's (or process's) ranges are cut at
//! their boundaries into pieces (a boundary itself, or the open stretch between two), every
//! piece knowing the set of ranges that contain it, so that a call's enclosing ranges are found
//! by a lookup of its start (and end) without sorting the calls: [`Pieces`] for one list of
//! ranges, [`Enclosure`] for every thread's attributable ranges (the `nsys stats` rule).

use std::collections::HashMap;

use crate::model::trace::{Range, RangeStyle};
use crate::stats::attribution::{is_attributable, FastMap};

/// A thread's key: process and thread id.
pub(crate) fn thread_key(pid: u32, tid: u32) -> u64 {
    ((pid as u64) << 32) | tid as u64
}

/// Lists of range indices, each stored once; list 0 is the empty one.
#[derive(Default)]
pub struct Sets {
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
pub struct Pieces {
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
    pub(crate) threads: FastMap<u64, usize>,
    pub(crate) pieces: Vec<Pieces>,
    pub(crate) sets: Sets,
    /// The pieces of a thread without ranges.
    pub(crate) none: Pieces,
    /// Each range's label id and style.
    pub(crate) labels: Vec<(u32, RangeStyle)>,
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
