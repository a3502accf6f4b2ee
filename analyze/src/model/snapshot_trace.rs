//! One device's allocator trace in a snapshot: its entries ([`TraceEntry`], one allocator event
//! each) and [`DeviceTrace`], which keeps millions of them compactly: each distinct entry without
//! its time once, and per entry 8 bytes. Re-exported by [`super::snapshot`], whose vocabulary
//! (actions, stacks) the entries use.

use std::sync::Arc;

use super::snapshot::{Action, StackId};
use crate::fast_hash::FastMap;

/// A free-text label of a trace entry (`compile_context`, `user_metadata`): a few distinct texts
/// repeated over many entries, each stored once and shared.
pub type Label = Arc<str>;

/// One allocator event of the recorded window.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceEntry {
    pub action: Action,
    pub addr: u64,
    /// The size the caller asked for (allocations and frees) or the segment's size.
    pub size: u64,
    pub stream: u64,
    /// Wall-clock microseconds (absent before PyTorch 2.2).
    pub time_us: Option<i64>,
    pub stack: StackId,
    /// `torch.compile` context, when one was recorded (not `N/A`).
    pub compile_context: Option<Label>,
    /// `torch.cuda.memory._set_memory_metadata` text, when set.
    pub user_metadata: Option<Label>,
}

/// A trace entry without its time: what repeats from step to step, since the caching allocator
/// hands the same blocks to the same calls.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Shape {
    action: Action,
    stack: StackId,
    addr: u64,
    size: u64,
    stream: u64,
    compile_context: Option<Label>,
    user_metadata: Option<Label>,
}

/// Entries per block of [`Times`]: each block keeps one full time, its entries an offset.
const TIME_BLOCK: usize = 1024;
/// An offset that stands for no time.
const NO_TIME: u32 = u32::MAX;
/// An offset that says the time is kept whole, in [`Times::wide`].
const WIDE_TIME: u32 = u32::MAX - 1;

/// The entries' times: per block of [`TIME_BLOCK`] entries, the first time met, and per entry
/// its distance from it in 32 bits (times that do not fit are kept whole aside).
#[derive(Clone, Debug, Default)]
struct Times {
    bases: Vec<Option<i64>>,
    offsets: Vec<u32>,
    wide: FastMap<u32, i64>,
}

impl Times {
    fn push(&mut self, t: Option<i64>) {
        let i = self.offsets.len();
        if i.is_multiple_of(TIME_BLOCK) {
            self.bases.push(None);
        }
        let Some(t) = t else {
            self.offsets.push(NO_TIME);
            return;
        };
        let base = self.bases.last_mut().map(|b| *b.get_or_insert(t));
        let offset = base
            .and_then(|b| t.checked_sub(b))
            .and_then(|d| u32::try_from(d).ok())
            .filter(|&d| d < WIDE_TIME);
        match offset {
            Some(d) => self.offsets.push(d),
            None => {
                self.wide.insert(i as u32, t);
                self.offsets.push(WIDE_TIME);
            }
        }
    }

    fn get(&self, i: usize) -> Option<i64> {
        match *self.offsets.get(i)? {
            NO_TIME => None,
            WIDE_TIME => self.wide.get(&(i as u32)).copied(),
            d => Some(self.bases[i / TIME_BLOCK]? + i64::from(d)),
        }
    }
}

/// One device's trace, in order. Each distinct entry without its time (its shape) is stored
/// once, so an entry costs 8 bytes (a shape's number and its time's offset) plus its shape the
/// first time that shape is met: a training loop repeats its steps' shapes, so a long trace
/// costs little more than its length. Entries are handed out by value. A clone shares the
/// columns (an analysis keeps the trace it replayed without copying it).
#[derive(Clone, Debug, Default)]
pub struct DeviceTrace {
    columns: Arc<Columns>,
}

#[derive(Clone, Debug, Default)]
struct Columns {
    shapes: Vec<Shape>,
    shape_ids: FastMap<Shape, u32>,
    /// The number of each shape's address among the distinct addresses.
    shape_address: Vec<u32>,
    addresses: Vec<u64>,
    address_ids: FastMap<u64, u32>,
    entries: Vec<u32>,
    times: Times,
    /// The entry each shape was last pushed at ([`NEVER`] while it is being added).
    last_at: Vec<u32>,
    /// The earlier entry the next one is expected to repeat ([`NOT_FOLLOWING`] for none): a
    /// training loop repeats its steps, so once an entry repeats the one after an earlier
    /// occurrence of its shape, the entries go on repeating those after it, each found by one
    /// comparison instead of a lookup in `shape_ids`.
    following: usize,
}

/// What [`Columns::following`] holds when no earlier entry is being followed.
const NOT_FOLLOWING: usize = usize::MAX;
/// An entry number that stands for none.
const NEVER: u32 = u32::MAX;

impl DeviceTrace {
    pub fn len(&self) -> usize {
        self.columns.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.columns.entries.is_empty()
    }

    /// Add an entry at the end.
    pub fn push(&mut self, e: TraceEntry) {
        let shape = Shape {
            action: e.action,
            stack: e.stack,
            addr: e.addr,
            size: e.size,
            stream: e.stream,
            compile_context: e.compile_context,
            user_metadata: e.user_metadata,
        };
        let c = Arc::make_mut(&mut self.columns);
        let guess = c.entries.get(c.following).copied();
        let repeats = guess.is_some_and(|g| c.shapes[g as usize] == shape);
        let known = match guess {
            Some(g) if repeats => Some(g),
            _ => c.shape_ids.get(&shape).copied(),
        };
        let id = match known {
            Some(id) => id,
            None => {
                let id = c.shapes.len() as u32;
                let next = c.addresses.len() as u32;
                let address = *c.address_ids.entry(shape.addr).or_insert(next);
                if address == next {
                    c.addresses.push(shape.addr);
                }
                c.shape_address.push(address);
                c.shapes.push(shape.clone());
                c.shape_ids.insert(shape, id);
                c.last_at.push(NEVER);
                id
            }
        };
        let at = c.entries.len();
        c.following = if repeats {
            c.following + 1
        } else {
            match c.last_at[id as usize] {
                NEVER => NOT_FOLLOWING,
                earlier => earlier as usize + 1,
            }
        };
        c.last_at[id as usize] = at as u32;
        c.entries.push(id);
        c.times.push(e.time_us);
    }

    /// Entry `i`, if there is one.
    pub fn get(&self, i: usize) -> Option<TraceEntry> {
        let c = &*self.columns;
        let s = &c.shapes[*c.entries.get(i)? as usize];
        Some(TraceEntry {
            action: s.action,
            addr: s.addr,
            size: s.size,
            stream: s.stream,
            time_us: c.times.get(i),
            stack: s.stack,
            compile_context: s.compile_context.clone(),
            user_metadata: s.user_metadata.clone(),
        })
    }

    /// Entry `i`'s time (`None` when it has none or there is no entry `i`).
    pub fn time_us(&self, i: usize) -> Option<i64> {
        self.columns.times.get(i)
    }

    /// Entry `i`'s stack ([`StackId::EMPTY`] when there is no entry `i`).
    pub fn stack(&self, i: usize) -> StackId {
        let c = &*self.columns;
        c.entries
            .get(i)
            .map_or(StackId::EMPTY, |&s| c.shapes[s as usize].stack)
    }

    /// How many distinct addresses the entries name.
    pub fn address_count(&self) -> usize {
        self.columns.address_ids.len()
    }

    /// The number of `addr` among the distinct addresses (below [`DeviceTrace::address_count`]),
    /// if an entry names it.
    pub fn address_id(&self, addr: u64) -> Option<usize> {
        self.columns.address_ids.get(&addr).map(|&a| a as usize)
    }

    /// The address numbered `id` ([`DeviceTrace::address_id`]).
    pub fn address(&self, id: usize) -> u64 {
        self.columns.addresses[id]
    }

    /// The number of entry `i`'s address among the distinct addresses: what an analysis that
    /// follows each address indexes by, instead of hashing the address at every entry.
    pub fn address_of(&self, i: usize) -> usize {
        let c = &*self.columns;
        c.shape_address[c.entries[i] as usize] as usize
    }

    pub fn last(&self) -> Option<TraceEntry> {
        self.len().checked_sub(1).and_then(|i| self.get(i))
    }

    /// The entries in order.
    pub fn iter(&self) -> Entries<'_> {
        Entries {
            trace: self,
            front: 0,
            back: self.len(),
        }
    }

    /// The stacks of the entries in order, without building the entries.
    pub fn stacks(&self) -> impl Iterator<Item = StackId> + '_ {
        let c = &*self.columns;
        c.entries.iter().map(|&s| c.shapes[s as usize].stack)
    }
}

impl PartialEq for DeviceTrace {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl FromIterator<TraceEntry> for DeviceTrace {
    fn from_iter<I: IntoIterator<Item = TraceEntry>>(iter: I) -> Self {
        let mut t = DeviceTrace::default();
        for e in iter {
            t.push(e);
        }
        t
    }
}

impl From<Vec<TraceEntry>> for DeviceTrace {
    fn from(entries: Vec<TraceEntry>) -> Self {
        entries.into_iter().collect()
    }
}

impl<'a> IntoIterator for &'a DeviceTrace {
    type Item = TraceEntry;
    type IntoIter = Entries<'a>;
    fn into_iter(self) -> Entries<'a> {
        self.iter()
    }
}

/// The entries of a [`DeviceTrace`], by value, from either end.
#[derive(Clone)]
pub struct Entries<'a> {
    trace: &'a DeviceTrace,
    front: usize,
    back: usize,
}

impl Iterator for Entries<'_> {
    type Item = TraceEntry;

    fn next(&mut self) -> Option<TraceEntry> {
        if self.front >= self.back {
            return None;
        }
        self.front += 1;
        self.trace.get(self.front - 1)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.back - self.front;
        (n, Some(n))
    }
}

impl DoubleEndedIterator for Entries<'_> {
    fn next_back(&mut self) -> Option<TraceEntry> {
        if self.front >= self.back {
            return None;
        }
        self.back -= 1;
        self.trace.get(self.back)
    }
}

impl ExactSizeIterator for Entries<'_> {}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(action: Action, addr: u64, size: u64, time_us: i64) -> TraceEntry {
        TraceEntry {
            action,
            addr,
            size,
            stream: 0,
            time_us: Some(time_us),
            stack: StackId::EMPTY,
            compile_context: None,
            user_metadata: None,
        }
    }

    /// Steps that repeat, with one address reused by different calls inside a step and a step
    /// that breaks the pattern: every entry reads back as pushed, each shape stored once.
    #[test]
    fn repeated_steps_read_back_as_pushed_and_store_each_shape_once() {
        let step = |s: i64, odd: bool| {
            let t = s * 100;
            let mut v = vec![
                entry(Action::Alloc, 4096, 512, t),
                entry(Action::Alloc, 8192, 1024, t + 1),
                entry(Action::FreeRequested, 4096, 512, t + 2),
                entry(Action::Alloc, 4096, 512, t + 3),
                entry(Action::FreeRequested, 8192, 1024, t + 4),
                entry(Action::FreeRequested, 4096, 512, t + 5),
            ];
            if odd {
                v.insert(3, entry(Action::Oom, 0, 1 << 30, t + 2));
            }
            v
        };
        let pushed: Vec<TraceEntry> = (0..50).flat_map(|s| step(s, s == 20)).collect();
        let trace = DeviceTrace::from(pushed.clone());
        assert_eq!(trace.len(), pushed.len());
        assert!(trace.iter().eq(pushed.iter().cloned()));
        assert_eq!(trace.columns.shapes.len(), 5);
        assert_eq!(trace.address_count(), 3);
    }
}
