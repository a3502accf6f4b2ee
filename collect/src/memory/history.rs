//! What the caching allocator records while memory history is on: the "current context" (a stack
//! of our own frames: phases such as `forward` and module paths such as `layers.3.attn.scores`),
//! trace entries (`alloc`, `free_requested`, `free_completed`, `segment_alloc`, `segment_free`,
//! `oom`) stamped with a microsecond clock, and phase annotations.
//!
//! This is the counterpart of PyTorch's `_record_memory_history`: the entries have the fields of
//! `torch.cuda.memory._snapshot()["device_traces"]`, and frames are interned once, so a stack
//! pushed a million times is stored once. Frames are what the caller pushes, never a native
//! backtrace. The words are the snapshot format's ([`Action`], [`Stage`], [`Frame`],
//! [`StackId`]); the allocator decides when to record; this module does no allocation accounting
//! and no file output (see [`crate::memory::snapshot`]).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use analyze::formats::torch_snapshot::{MODULE_FRAME_FILE, PHASE_FRAME_FILE};
use analyze::model::snapshot::{Action, Frame, StackId, Stage};

/// A clock in microseconds, the unit of `time_us` in PyTorch's snapshots.
#[derive(Clone)]
pub struct Clock(Arc<dyn Fn() -> i64 + Send + Sync>);

impl Clock {
    /// Microseconds since the Unix epoch (PyTorch's snapshots use the same epoch).
    pub fn system() -> Clock {
        Clock(Arc::new(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_micros() as i64)
        }))
    }

    /// A clock of the caller's: tests use a counter so that times are reproducible.
    pub fn from_fn(f: impl Fn() -> i64 + Send + Sync + 'static) -> Clock {
        Clock(Arc::new(f))
    }

    pub fn now_us(&self) -> i64 {
        (self.0)()
    }
}

impl Default for Clock {
    fn default() -> Clock {
        Clock::system()
    }
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Clock")
    }
}

/// What a frame stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FrameKind {
    /// A phase of the step: `forward`, `backward`, `optimizer`, `step_3`.
    Phase,
    /// A module path: `layers.3.attn.scores`.
    Module,
}

impl FrameKind {
    /// The `filename` a frame of this kind gets in the snapshot; a reader tells the kinds apart
    /// by this field ([`PHASE_FRAME_FILE`], [`MODULE_FRAME_FILE`]).
    pub fn filename(self) -> &'static str {
        match self {
            FrameKind::Phase => PHASE_FRAME_FILE,
            FrameKind::Module => MODULE_FRAME_FILE,
        }
    }
}

/// An interned [`Frame`]: an index into the frames of [`MemoryContext::tables`] (the snapshot
/// keeps the same numbers: [`crate::memory::snapshot`] copies the table as it is).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HistoryFrameId(pub u32);

/// One event of the allocator's history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistoryEntry {
    pub action: Action,
    /// Block or segment address; 0 for `oom`.
    pub addr: u64,
    /// Bytes. For block events this is the block's size as the allocator counts it (rounded and,
    /// when a block is not split, the whole block), so that summing `alloc` minus
    /// `free_completed` replays `max_memory_allocated` exactly; PyTorch writes the requested
    /// size here, which replays up to a few percent under its own counter. For `oom`, the
    /// request (rounded).
    pub size: u64,
    pub stream: u64,
    pub time_us: i64,
    /// The context when the event happened, an index into the stacks of
    /// [`MemoryContext::tables`]; `None` when no frame was pushed.
    pub stack: Option<StackId>,
    /// Free device memory reported when an allocation failed (`oom` only).
    pub device_free: u64,
}

/// A phase boundary, written to the snapshot's `external_annotations` (where PyTorch writes its
/// `record_function` ranges) so that a reader can place the phases on the timeline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PhaseAnnotation {
    pub stage: Stage,
    pub name: String,
    pub device: u32,
    pub time_us: i64,
}

/// Interns values, handing out dense ids.
#[derive(Debug)]
struct Interner<T> {
    values: Vec<T>,
    index: HashMap<T, u32>,
}

impl<T> Default for Interner<T> {
    fn default() -> Self {
        Interner {
            values: Vec::new(),
            index: HashMap::new(),
        }
    }
}

impl<T: Clone + Eq + std::hash::Hash> Interner<T> {
    fn intern(&mut self, v: &T) -> u32 {
        if let Some(&id) = self.index.get(v) {
            return id;
        }
        let id = self.values.len() as u32;
        self.values.push(v.clone());
        self.index.insert(v.clone(), id);
        id
    }
}

/// A pushed frame.
#[derive(Clone, Debug)]
struct Pushed {
    kind: FrameKind,
    frame: HistoryFrameId,
    /// The module path this frame stands for (its full dotted path); empty for phases.
    path: String,
}

#[derive(Debug)]
struct ContextState {
    /// Outermost first.
    stack: Vec<Pushed>,
    frames: Interner<Frame>,
    stacks: Interner<Vec<HistoryFrameId>>,
    /// The interned id of `stack`, computed on first use after a push or pop.
    current: Option<Option<StackId>>,
    /// Phase annotations, collected only while recording.
    annotations: Option<Vec<PhaseAnnotation>>,
    clock: Clock,
    device: u32,
}

impl ContextState {
    fn current_stack(&mut self) -> Option<StackId> {
        if let Some(s) = self.current {
            return s;
        }
        let s = if self.stack.is_empty() {
            None
        } else {
            let frames: Vec<HistoryFrameId> = self.stack.iter().rev().map(|p| p.frame).collect();
            Some(StackId(self.stacks.intern(&frames)))
        };
        self.current = Some(s);
        s
    }
}

/// The "current context" of memory events: a stack of frames that the model pushes as it runs
/// (phase, then module path) and that the allocator reads when it records an event.
///
/// Cloning gives another handle on the same stack, so a [`FrameGuard`] can be held while the
/// allocator is borrowed mutably.
#[derive(Clone, Debug)]
pub struct MemoryContext {
    inner: Arc<Mutex<ContextState>>,
}

impl MemoryContext {
    pub fn new(clock: Clock, device: u32) -> MemoryContext {
        MemoryContext {
            inner: Arc::new(Mutex::new(ContextState {
                stack: Vec::new(),
                frames: Interner::default(),
                stacks: Interner::default(),
                current: Some(None),
                annotations: None,
                clock,
                device,
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, ContextState> {
        // A panic while the lock was held leaves the stack as it was; keep using it.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Push a module frame. A name that does not already start with the enclosing module's path
    /// is joined to it with `.`, so pushing `layers.3` then `attn` (or `layers.3.attn`) gives
    /// the frame `layers.3.attn`.
    pub fn push_module(&self, name: &str) {
        let mut s = self.lock();
        let parent = s
            .stack
            .iter()
            .rev()
            .find(|p| p.kind == FrameKind::Module)
            .map(|p| p.path.clone());
        let path = match parent {
            Some(parent) if !parent.is_empty() => {
                if name.starts_with(&parent) && name[parent.len()..].starts_with('.') {
                    name.to_owned()
                } else {
                    format!("{parent}.{name}")
                }
            }
            _ => name.to_owned(),
        };
        let frame = Frame {
            name: path.clone(),
            filename: FrameKind::Module.filename().to_owned(),
            line: 0,
        };
        let id = HistoryFrameId(s.frames.intern(&frame));
        s.stack.push(Pushed {
            kind: FrameKind::Module,
            frame: id,
            path,
        });
        s.current = None;
    }

    /// Push a phase frame (`forward`, `backward`, `optimizer`, `step_N`). While recording, this
    /// also writes a `START` annotation.
    pub fn push_phase(&self, name: &str) {
        let mut s = self.lock();
        let frame = Frame {
            name: name.to_owned(),
            filename: FrameKind::Phase.filename().to_owned(),
            line: 0,
        };
        let id = HistoryFrameId(s.frames.intern(&frame));
        s.stack.push(Pushed {
            kind: FrameKind::Phase,
            frame: id,
            path: String::new(),
        });
        s.current = None;
        if s.annotations.is_some() {
            let a = PhaseAnnotation {
                stage: Stage::Start,
                name: name.to_owned(),
                device: s.device,
                time_us: s.clock.now_us(),
            };
            if let Some(list) = s.annotations.as_mut() {
                list.push(a);
            }
        }
    }

    /// Pop the innermost frame (an `END` annotation for a phase while recording). Popping an
    /// empty stack does nothing.
    pub fn pop(&self) {
        let mut s = self.lock();
        let Some(p) = s.stack.pop() else { return };
        s.current = None;
        if p.kind == FrameKind::Phase && s.annotations.is_some() {
            let name = s.frames.values[p.frame.0 as usize].name.clone();
            let a = PhaseAnnotation {
                stage: Stage::End,
                name,
                device: s.device,
                time_us: s.clock.now_us(),
            };
            if let Some(list) = s.annotations.as_mut() {
                list.push(a);
            }
        }
    }

    /// Push a module frame, popped when the guard drops.
    pub fn module(&self, name: &str) -> FrameGuard {
        self.push_module(name);
        self.guard()
    }

    /// Push a phase frame, popped when the guard drops.
    pub fn phase(&self, name: &str) -> FrameGuard {
        self.push_phase(name);
        self.guard()
    }

    fn guard(&self) -> FrameGuard {
        let depth = self.lock().stack.len();
        FrameGuard {
            context: self.clone(),
            depth,
        }
    }

    /// How many frames are pushed.
    pub fn depth(&self) -> usize {
        self.lock().stack.len()
    }

    /// The current stack's id, or `None` when nothing is pushed.
    pub fn current_stack(&self) -> Option<StackId> {
        self.lock().current_stack()
    }

    /// The current stack as frames, innermost first.
    pub fn current_frames(&self) -> Vec<Frame> {
        let s = self.lock();
        s.stack
            .iter()
            .rev()
            .map(|p| s.frames.values[p.frame.0 as usize].clone())
            .collect()
    }

    /// The clock events are stamped with.
    pub fn now_us(&self) -> i64 {
        self.lock().clock.now_us()
    }

    pub fn device(&self) -> u32 {
        self.lock().device
    }

    /// Start or stop collecting phase annotations (the allocator does this when recording is
    /// switched). Stopping drops what was collected.
    pub(crate) fn set_annotating(&self, on: bool) {
        let mut s = self.lock();
        if on {
            if s.annotations.is_none() {
                s.annotations = Some(Vec::new());
            }
        } else {
            s.annotations = None;
        }
    }

    /// Interned frames and stacks, for the snapshot: `frames[id]`, `stacks[id]` (innermost
    /// first). No stack stands for the empty one: an event outside any frame has none.
    pub fn tables(&self) -> (Vec<Frame>, Vec<Vec<HistoryFrameId>>) {
        let s = self.lock();
        (s.frames.values.clone(), s.stacks.values.clone())
    }

    /// Annotations collected so far.
    pub fn annotations(&self) -> Vec<PhaseAnnotation> {
        self.lock().annotations.clone().unwrap_or_default()
    }
}

/// Pops the frame it was made for (and any left above it) when dropped.
#[must_use = "the frame is popped when the guard drops"]
pub struct FrameGuard {
    context: MemoryContext,
    depth: usize,
}

impl Drop for FrameGuard {
    fn drop(&mut self) {
        // Frames pushed inside the guard and never popped are popped too, so one forgotten pop
        // cannot shift every later stack.
        while self.context.depth() >= self.depth && self.context.depth() > 0 {
            self.context.pop();
        }
    }
}

/// The recorded entries, oldest first, with PyTorch's `max_entries` ring-buffer behaviour: when
/// full, the oldest entry is dropped.
#[derive(Clone, Debug)]
pub struct HistoryBuffer {
    entries: VecDeque<HistoryEntry>,
    max_entries: usize,
    dropped: u64,
}

impl HistoryBuffer {
    pub fn new(max_entries: usize) -> HistoryBuffer {
        HistoryBuffer {
            entries: VecDeque::new(),
            max_entries: max_entries.max(1),
            dropped: 0,
        }
    }

    pub fn push(&mut self, e: HistoryEntry) {
        if self.entries.len() == self.max_entries {
            self.entries.pop_front();
            self.dropped += 1;
        }
        self.entries.push_back(e);
    }

    pub fn entries(&self) -> impl Iterator<Item = &HistoryEntry> {
        self.entries.iter()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entries lost to the ring buffer; a replay of the trace is only exact when this is 0.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> MemoryContext {
        MemoryContext::new(Clock::from_fn(|| 7), 0)
    }

    #[test]
    fn module_paths_join_to_their_parent() {
        let c = ctx();
        let _p = c.phase("forward");
        let _l = c.module("layers.3");
        let _a = c.module("attn");
        let _s = c.module("layers.3.attn.scores");
        let names: Vec<String> = c.current_frames().into_iter().map(|f| f.name).collect();
        assert_eq!(
            names,
            [
                "layers.3.attn.scores",
                "layers.3.attn",
                "layers.3",
                "forward"
            ]
        );
        assert_eq!(c.current_frames()[3].filename, "collect/phase");
    }

    #[test]
    fn stacks_are_interned_and_guards_pop() {
        let c = ctx();
        assert_eq!(c.current_stack(), None);
        let first = {
            let _g = c.module("embed");
            c.current_stack()
        };
        assert_eq!(c.depth(), 0);
        let again = {
            let _g = c.module("embed");
            c.current_stack()
        };
        assert!(first.is_some());
        assert_eq!(first, again);
        let (frames, stacks) = c.tables();
        assert_eq!(frames.len(), 1);
        assert_eq!(stacks.len(), 1);
    }

    #[test]
    fn a_guard_pops_frames_left_above_it() {
        let c = ctx();
        {
            let _g = c.phase("backward");
            c.push_module("lm_head");
            assert_eq!(c.depth(), 2);
        }
        assert_eq!(c.depth(), 0);
    }

    #[test]
    fn phases_annotate_only_while_recording() {
        let c = ctx();
        c.push_phase("forward");
        c.pop();
        assert!(c.annotations().is_empty());
        c.set_annotating(true);
        {
            let _g = c.phase("backward");
        }
        let a = c.annotations();
        assert_eq!(a.len(), 2);
        assert_eq!((a[0].stage, a[0].name.as_str()), (Stage::Start, "backward"));
        assert_eq!((a[1].stage, a[1].time_us), (Stage::End, 7));
    }

    #[test]
    fn ring_buffer_drops_oldest() {
        let mut b = HistoryBuffer::new(2);
        for i in 0..3 {
            b.push(HistoryEntry {
                action: Action::Alloc,
                addr: i,
                size: 512,
                stream: 0,
                time_us: 0,
                stack: None,
                device_free: 0,
            });
        }
        assert_eq!(b.dropped(), 1);
        assert_eq!(b.entries().map(|e| e.addr).collect::<Vec<_>>(), [1, 2]);
    }
}
