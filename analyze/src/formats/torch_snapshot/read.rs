//! PyTorch CUDA memory snapshots: the pickles `torch.cuda.memory._dump_snapshot` writes (plain
//! or gzip-compressed), and [`super::write`] writes for `collect`, read with the plain-data
//! [`crate::formats::pickle`] reader into a [`Snapshot`].
//!
//! The file streams through the pickle reader and is never held whole. Trace entries, nearly all
//! of a large snapshot, are converted as they are appended to their device's trace (a
//! `Streamer`), so the pickle's dict of each is freed at once; the rest (segments, settings,
//! annotations) is converted from the pickle's values once it is read, by the same rules. A gzip
//! file is inflated on a thread of its own, a few chunks ahead of the pickle reader.
//!
//! Layouts met so far:
//! - PyTorch 2.0/2.1: a dict with `segments` and `device_traces`; trace entries without
//!   `time_us`; blocks may carry their stack in `history[0].frames` and no `requested_size`.
//! - PyTorch 2.2-2.4: trace entries with `time_us`; blocks with `frames` and `requested_size`.
//! - PyTorch 2.5-2.11: adds `allocator_settings` and `external_annotations`; trace entries may
//!   carry `compile_context` and `user_metadata`; `oom` entries carry `device_free`.
//! - The oldest, `torch.cuda.memory_snapshot()` pickled as is: a bare list of segments (no trace).
//!
//! Keys this reader does not use are ignored (their names are kept in
//! [`SnapshotFormat::other_keys`]). Sizes and addresses must be non-negative ints of up to 64
//! bits; fields that only describe (a frame's `line`, a `stream`, a `time_us`) never refuse a
//! file: a value of up to 64 unsigned bits keeps its bits (PyTorch 2.6 writes some frames of
//! `torch.compile`'s code with line 2^64 − 1, its `-1` cast to unsigned), anything else is left
//! empty. Frames are interned: PyTorch shares frame lists through the
//! pickle memo, and the reader keeps that sharing, so a snapshot with 20,000 entries of 60-frame
//! stacks holds each distinct frame and stack once. Work is bounded by the input's size, so a
//! hostile pickle that references one huge list many times is refused, not walked for hours.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::Read;
use std::path::Path;

use super::ahead::read_ahead;
use super::key;
use crate::error::{Error, Result};
use crate::fast_hash::FastMap;
use crate::formats::gzip;
use crate::formats::limits::Limits;
use crate::formats::pickle::read::{self as pickle, Pickle, PickleError, Value};
use crate::model::snapshot::{
    Action, AllocatorSettings, Annotation, Block, BlockState, DeviceTrace, Frame, FrameId, Frames,
    Label, Segment, SegmentKind, Snapshot, SnapshotFormat, StackId, TraceEntry,
};
use crate::progress;

/// Read a snapshot file (plain pickle or gzip), within the limits of the environment.
pub fn load(path: &Path) -> Result<Snapshot> {
    load_with(path, &Limits::from_env()?)
}

/// Read a snapshot file as a stream (through the gzip decoder when compressed, within the gzip
/// limit of `limits`): the file's bytes are never held whole.
pub fn load_with(path: &Path, limits: &Limits) -> Result<Snapshot> {
    crate::formats::check_file(path)?;
    if gzip::is_gzip(path)? {
        let mut stream = gzip::inflate_stream(path, limits)?;
        // Inflating takes as long as parsing: the two side by side.
        let read = read_ahead(&mut stream, |bytes| from_reader(path, bytes));
        return read.map_err(|e| stream.error_after(e));
    }
    let file = File::open(path).map_err(Error::io(path))?;
    let size = file.metadata().map(|m| m.len()).ok();
    let _task = progress::begin(
        || format!("reading {}", path.display()),
        size,
        progress::Unit::Bytes,
    );
    from_reader(path, file)
}

/// Read a snapshot from the decompressed pickle bytes; `path` only names the input in errors.
pub fn from_bytes(path: &Path, data: &[u8]) -> Result<Snapshot> {
    from_reader(path, data)
}

/// Read a snapshot as its pickle's bytes come from `input`: the trace entries are converted as
/// they are appended to their device's trace (`Streamer`), everything else once the pickle
/// is read. `path` only names the input in errors.
pub fn from_reader(path: &Path, input: impl Read) -> Result<Snapshot> {
    let mut streamer = Streamer {
        path,
        st: Interner::new(4096),
        taken: Taken::default(),
        error: None,
    };
    let p = match pickle::parse_stream(input, &mut streamer) {
        Ok(p) => p,
        Err(e) => {
            return Err(streamer
                .error
                .take()
                .unwrap_or_else(|| pickle_error(path, e)))
        }
    };
    streamer.st.allow(p.size);
    Converter {
        p: &p,
        path,
        st: &mut streamer.st,
        taken: &mut streamer.taken,
    }
    .snapshot()
}

/// The trace entries taken over while the pickle streams, and the lists they went to.
#[derive(Default)]
struct Taken {
    /// Every entry taken, by its [`Value::Taken`] id.
    entries: DeviceTrace,
    /// The device traces being filled, by list handle.
    lists: FastMap<u32, TakenList>,
}

/// A device trace filled as the pickle streams.
struct TakenList {
    device: usize,
    /// The ids of its entries, as runs of consecutive ids `(first, count)`.
    runs: Vec<(u32, u32)>,
    len: usize,
}

/// Converts each trace entry as it is appended to its device's trace, so that the pickle's
/// dicts of entries are freed as they come and only the model's entries are held. A list is a
/// device trace when it is being built under the root dict's `device_traces` key: on the stack,
/// the root dict at the bottom, then the key, the list of traces and the traces still pending.
/// Any other list keeps its items, and is converted once the pickle is read.
struct Streamer<'a> {
    path: &'a Path,
    st: Interner,
    taken: Taken,
    /// Why an entry was refused.
    error: Option<Error>,
}

impl Streamer<'_> {
    /// The device whose trace `stack`'s top list is, if it is one being built.
    fn device_of(p: &Pickle, stack: &[Value]) -> Option<usize> {
        let top = stack.len().checked_sub(1)?;
        let mut outer = top;
        while outer > 0 && matches!(stack[outer - 1], Value::List(_)) {
            outer -= 1;
        }
        if outer == top || outer < 2 || !matches!(stack[0], Value::Dict(_)) {
            return None;
        }
        if p.str(stack[outer - 1]) != Some(key::DEVICE_TRACES) {
            return None;
        }
        Some(p.seq(stack[outer])?.len() + (top - outer - 1))
    }
}

impl pickle::Appender for Streamer<'_> {
    fn append(
        &mut self,
        p: &Pickle,
        stack: &[Value],
        list: u32,
        items: &[Value],
        taken: &mut Vec<u32>,
        at: u64,
    ) -> std::result::Result<bool, pickle::Refused> {
        if let std::collections::hash_map::Entry::Vacant(slot) = self.taken.lists.entry(list) {
            let fresh = p.seq(Value::List(list)).is_some_and(<[Value]>::is_empty);
            let Some(device) = fresh.then(|| Self::device_of(p, stack)).flatten() else {
                return Ok(false);
            };
            let new = TakenList {
                device,
                runs: Vec::new(),
                len: 0,
            };
            slot.insert(new);
        }
        self.st.allow(at);
        let (device, first_index) = self
            .taken
            .lists
            .get(&list)
            .map_or((0, 0), |l| (l.device, l.len));
        // The ids of one call are consecutive: one run.
        let first_id = self.taken.entries.len();
        for (k, &item) in items.iter().enumerate() {
            let mut c = Converter {
                p,
                path: self.path,
                st: &mut self.st,
                taken: &mut self.taken,
            };
            let entry = c
                .spend(1)
                .and_then(|()| c.entry(item, What::Entry(device, first_index + k)));
            let id = match entry.and_then(|e| {
                let id = u32::try_from(self.taken.entries.len()).map_err(|_| Error::Malformed {
                    path: self.path.to_owned(),
                    message: "too many trace entries".into(),
                })?;
                self.taken.entries.push(e);
                Ok(id)
            }) {
                Ok(id) => id,
                Err(e) => {
                    self.error = Some(e);
                    return Err(pickle::Refused);
                }
            };
            taken.push(id);
        }
        if let (Some(l), false) = (self.taken.lists.get_mut(&list), items.is_empty()) {
            let (first, count) = (first_id as u32, items.len() as u32);
            l.len += items.len();
            match l.runs.last_mut() {
                Some((f, c)) if *f + *c == first => *c += count,
                _ => l.runs.push((first, count)),
            }
        }
        Ok(true)
    }
}

fn pickle_error(path: &Path, e: PickleError) -> Error {
    let path = path.to_owned();
    match e {
        PickleError::UnknownOpcode { opcode, offset } => Error::UnsupportedPickleOpcode {
            path,
            opcode,
            offset,
        },
        PickleError::Code { name, offset } => Error::PickleCode { path, name, offset },
        other => Error::Malformed {
            path,
            message: other.to_string(),
        },
    }
}

/// Where in the snapshot a value sits, for error messages (formatted only when one is raised).
#[derive(Clone, Copy, Debug)]
enum What {
    Segments,
    Segment(usize),
    Block(usize, usize),
    Traces,
    Trace(usize),
    Entry(usize, usize),
}

impl std::fmt::Display for What {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            What::Segments => write!(f, "`segments`"),
            What::Segment(i) => write!(f, "segment {i}"),
            What::Block(i, j) => write!(f, "segment {i} block {j}"),
            What::Traces => write!(f, "`device_traces`"),
            What::Trace(d) => write!(f, "`device_traces[{d}]`"),
            What::Entry(d, i) => write!(f, "trace entry {i} of device {d}"),
        }
    }
}

/// `what` and, when given, the field: "segment 3 `total_size`".
fn field(what: What, key: Option<&str>) -> String {
    match key {
        Some(k) => format!("{what} `{}`", crate::error::quote(k)),
        None => what.to_string(),
    }
}

/// The keys of a trace entry the reader uses.
const ENTRY_KEYS: [&str; 9] = [
    key::ACTION,
    key::ADDR,
    key::DEVICE_FREE,
    key::SIZE,
    key::STREAM,
    key::TIME_US,
    key::FRAMES,
    key::COMPILE_CONTEXT,
    key::USER_METADATA,
];
const F_ACTION: usize = 0;
const F_ADDR: usize = 1;
const F_DEVICE_FREE: usize = 2;
const F_SIZE: usize = 3;
const F_STREAM: usize = 4;
const F_TIME_US: usize = 5;
const F_FRAMES: usize = 6;
const F_COMPILE_CONTEXT: usize = 7;
const F_USER_METADATA: usize = 8;
/// What [`Interner::entry_keys`] holds for a string not looked at yet, and for one that is not
/// an entry's key.
const UNSEEN_KEY: u8 = u8::MAX;
const NOT_AN_ENTRY_KEY: u8 = u8::MAX - 1;
/// What the tables of [`Interner`] kept by a value's number hold for a value not looked at yet.
const UNSEEN: u32 = u32::MAX;
/// What [`Interner::label_of`] holds for a string that reads as no label.
const NO_LABEL: u32 = u32::MAX - 1;

/// How errors name the requested size of a PyTorch 2.0 block.
const HISTORY_REAL_SIZE: &str = "history[0].real_size";

/// What a read keeps between the values it converts: the frames and stacks met so far, each
/// interned once, and the work still allowed.
struct Interner {
    /// Container items visited so far.
    spent: u64,
    /// Container items allowed: twice the bytes read, and a little.
    allowed: u64,
    frames: Frames,
    /// FrameId of each pickled frame dict, by [`Pickle::dict_key`].
    frame_by_value: FastMap<u64, FrameId>,
    frame_by_content: HashMap<Frame, FrameId>,
    /// StackId of each pickled frame list, by arena handle ([`UNSEEN`] for none yet).
    stack_by_value: Vec<u32>,
    stack_by_content: FastMap<Vec<FrameId>, StackId>,
    /// The label each string of the pickle reads as, by its number: an index into
    /// `label_texts`, [`NO_LABEL`] for a placeholder, [`UNSEEN`] when not looked at yet.
    label_of: Vec<u32>,
    label_texts: Vec<Label>,
    /// Every label text met, once: the same text pickled twice is still one label.
    labels: HashSet<Label>,
    /// Which of [`ENTRY_KEYS`] each string of the pickle is, by its number.
    entry_keys: Vec<u8>,
}

impl Interner {
    fn new(allowed: u64) -> Self {
        let mut stack_by_content = FastMap::default();
        stack_by_content.insert(Vec::new(), StackId::EMPTY);
        Interner {
            spent: 0,
            allowed,
            frames: Frames::default(),
            frame_by_value: FastMap::default(),
            frame_by_content: HashMap::new(),
            stack_by_value: Vec::new(),
            stack_by_content,
            label_of: Vec::new(),
            label_texts: Vec::new(),
            labels: HashSet::new(),
            entry_keys: Vec::new(),
        }
    }

    /// Allow the work of `read` bytes of pickle: work is bounded by the input's size, so a
    /// hostile pickle that references one huge list many times is refused, not walked for hours.
    fn allow(&mut self, read: u64) {
        self.allowed = read.saturating_mul(2).saturating_add(4096);
    }
}

/// Converts pickled values into the model, along the snapshot's schema.
struct Converter<'a> {
    p: &'a Pickle,
    path: &'a Path,
    st: &'a mut Interner,
    /// Trace entries the [`Streamer`] took over.
    taken: &'a mut Taken,
}

impl<'a> Converter<'a> {
    fn err(&self, message: impl Into<String>) -> Error {
        Error::Malformed {
            path: self.path.to_owned(),
            message: message.into(),
        }
    }

    /// Charge `n` visited items against the budget.
    fn spend(&mut self, n: usize) -> Result<()> {
        match self.st.spent.checked_add(n as u64) {
            Some(spent) if spent <= self.st.allowed => {
                self.st.spent = spent;
                Ok(())
            }
            _ => {
                Err(self
                    .err("snapshot refers to the same data too many times to be a real snapshot"))
            }
        }
    }

    fn seq(&mut self, v: Value, what: What, key: Option<&str>) -> Result<&'a [Value]> {
        let p = self.p;
        let items = p.seq(v).ok_or_else(|| {
            self.err(format!(
                "{} is {}, expected a list",
                field(what, key),
                p.describe(v)
            ))
        })?;
        self.spend(items.len())?;
        Ok(items)
    }

    fn int(&self, v: Value, what: What, key: &str) -> Result<i64> {
        match v {
            Value::Int(i) => Ok(i),
            Value::Bool(b) => Ok(i64::from(b)),
            Value::Float(f) if f.is_finite() && f.fract() == 0.0 => Ok(f as i64),
            Value::BigInt(_) => Err(self.err(format!(
                "{} does not fit in 64 bits",
                field(what, Some(key))
            ))),
            other => Err(self.err(format!(
                "{} is {}, expected an int",
                field(what, Some(key)),
                self.p.describe(other)
            ))),
        }
    }

    /// A size or address: a non-negative int of up to 64 unsigned bits (values from 2^63 on
    /// arrive as Python ints wider than `i64`).
    fn uint(&self, v: Value, what: What, key: &str) -> Result<u64> {
        if let Some(u) = self.p.big_u64(v) {
            return Ok(u);
        }
        let i = self.int(v, what, key)?;
        u64::try_from(i)
            .map_err(|_| self.err(format!("{} is negative ({i})", field(what, Some(key)))))
    }

    /// A field that only describes (a frame's line, a stream, a time): its 64 bits when it is
    /// an int that fits them, `None` for anything else, never an error. PyTorch writes some
    /// `-1`s cast to unsigned (a frame of `torch.compile`'s generated code has line
    /// 2^64 − 1 in PyTorch 2.6): such a value keeps its 64 bits, so it reads as the `-1` other
    /// versions write.
    fn descriptive_int(&self, v: Value) -> Option<i64> {
        match v {
            Value::Int(i) => Some(i),
            Value::Bool(b) => Some(i64::from(b)),
            Value::Float(f) if f.is_finite() && f.fract() == 0.0 && f.abs() < 9.2e18 => {
                Some(f as i64)
            }
            other => self.p.big_u64(other).map(|u| u as i64),
        }
    }

    /// `dict[key]` as an int, or `default` when absent.
    fn int_or(&self, dict: Value, key: &str, what: What, default: i64) -> Result<i64> {
        match self.p.get(dict, key) {
            Some(v) => self.int(v, what, key),
            None => Ok(default),
        }
    }

    /// `dict[key]` as a non-negative int, which must be there.
    fn req_uint(&self, dict: Value, key: &str, what: What) -> Result<u64> {
        match self.p.get(dict, key) {
            Some(v) => self.uint(v, what, key),
            None => Err(self.err(format!("{what} has no `{key}`"))),
        }
    }

    /// Check that `v` is a dict and charge its size: every field lookup scans it, so a hostile
    /// pickle that shares one enormous dict among many entries runs out of budget instead of time.
    fn dict(&mut self, v: Value, what: What) -> Result<()> {
        let p = self.p;
        match p.dict(v) {
            Some(d) => self.spend(d.len()),
            None => Err(self.err(format!("{what} is {}, expected a dict", p.describe(v)))),
        }
    }

    fn opt_str(&self, dict: Value, key: &str) -> Option<&'a str> {
        let p = self.p;
        p.get(dict, key).and_then(|v| p.str(v))
    }

    /// A segment's or an entry's stream: a `cudaStream_t`, so its bits; 0 (the default stream)
    /// when absent or not an int.
    fn stream(&self, dict: Value) -> u64 {
        self.stream_of(self.p.get(dict, key::STREAM))
    }

    fn stream_of(&self, v: Option<Value>) -> u64 {
        v.and_then(|v| self.descriptive_int(v))
            .map_or(0, |s| s as u64)
    }

    /// Which of [`ENTRY_KEYS`] a dict key is, if any: found once per string of the pickle.
    fn entry_key(&mut self, k: Value) -> Option<usize> {
        let Value::Str(id) = k else { return None };
        let i = id as usize;
        if i >= self.st.entry_keys.len() {
            self.st.entry_keys.resize(i + 1, UNSEEN_KEY);
        }
        if self.st.entry_keys[i] == UNSEEN_KEY {
            let name = self.p.str(k).unwrap_or_default();
            self.st.entry_keys[i] = ENTRY_KEYS
                .iter()
                .position(|&key| key == name)
                .map_or(NOT_AN_ENTRY_KEY, |f| f as u8);
        }
        match self.st.entry_keys[i] {
            NOT_AN_ENTRY_KEY => None,
            f => Some(usize::from(f)),
        }
    }

    fn snapshot(mut self) -> Result<Snapshot> {
        let p = self.p;
        let root = p.root();
        let mut format = SnapshotFormat::default();
        let mut snap = Snapshot::default();
        let segments = match root {
            Value::Dict(_) => {
                let keys: Vec<String> = p
                    .dict(root)
                    .unwrap_or_default()
                    .iter()
                    .map(|(k, _)| p.str(*k).map_or_else(|| "?".to_owned(), str::to_owned))
                    .collect();
                let Some(segments) = p.get(root, key::SEGMENTS) else {
                    return Err(self.err(format!(
                        "not a PyTorch memory snapshot: a dict without `segments` (keys: {})",
                        describe_keys(&keys)
                    )));
                };
                format.layout = "dict".into();
                const KNOWN: [&str; 4] = [
                    key::SEGMENTS,
                    key::DEVICE_TRACES,
                    key::ALLOCATOR_SETTINGS,
                    key::EXTERNAL_ANNOTATIONS,
                ];
                format.other_keys = keys
                    .into_iter()
                    .filter(|k| !KNOWN.contains(&k.as_str()))
                    .collect();
                format.other_keys.dedup();
                if let Some(traces) = p.get(root, key::DEVICE_TRACES) {
                    snap.traces = self.traces(traces)?;
                }
                if let Some(s) = p.get(root, key::ALLOCATOR_SETTINGS) {
                    format.has_allocator_settings = true;
                    snap.settings = self.settings(s)?;
                }
                if let Some(a) = p.get(root, key::EXTERNAL_ANNOTATIONS) {
                    format.has_annotations = true;
                    snap.annotations = self.annotations(a)?;
                }
                segments
            }
            Value::List(_) | Value::Tuple(_) => {
                format.layout = "segments list".into();
                root
            }
            other => {
                return Err(self.err(format!(
                    "not a PyTorch memory snapshot: the pickle holds {}, expected a dict with `segments` or a list of segments",
                    p.describe(other)
                )))
            }
        };
        snap.segments = self.segments(segments)?;
        format.has_trace = snap.traces.iter().any(|t| !t.is_empty());
        format.has_time = snap.traces.iter().flatten().any(|e| e.time_us.is_some());
        snap.format = format;
        snap.frames = std::mem::take(&mut self.st.frames);
        Ok(snap)
    }

    fn segments(&mut self, v: Value) -> Result<Vec<Segment>> {
        let items = self.seq(v, What::Segments, None)?;
        let mut out = Vec::with_capacity(items.len());
        for (i, &s) in items.iter().enumerate() {
            out.push(self.segment(s, i)?);
        }
        // A segment's own stack (that of the allocation that made it) is read after every
        // block's and entry's, so that adding it to the tables leaves the ids of the stacks the
        // analyses use as they are with or without it.
        for (i, (&s, seg)) in items.iter().zip(&mut out).enumerate() {
            if let Some(f) = self.p.get(s, key::FRAMES) {
                seg.stack = self.stack(f, What::Segment(i))?;
            }
        }
        Ok(out)
    }

    fn segment(&mut self, s: Value, i: usize) -> Result<Segment> {
        let p = self.p;
        let what = What::Segment(i);
        self.dict(s, what)?;
        let address = self.req_uint(s, key::ADDRESS, what)?;
        let total_size = self.req_uint(s, key::TOTAL_SIZE, what)?;
        let device = self.int_or(s, key::DEVICE, what, 0)?;
        // Streams are pointers; keep their bits.
        let stream = self.stream(s);
        let kind = self
            .opt_str(s, key::SEGMENT_TYPE)
            .map_or(SegmentKind::Unknown, SegmentKind::from_name);
        let is_expandable = matches!(p.get(s, key::IS_EXPANDABLE), Some(Value::Bool(true)));
        let Some(blocks_v) = p.get(s, key::BLOCKS) else {
            return Err(self.err(format!("{what} has no `blocks`")));
        };
        let items = self.seq(blocks_v, what, Some(key::BLOCKS))?;
        let mut blocks = Vec::with_capacity(items.len());
        let mut next_address = address;
        for (j, &b) in items.iter().enumerate() {
            let block = self.block(b, next_address, What::Block(i, j))?;
            next_address = block.address.saturating_add(block.size);
            blocks.push(block);
        }
        Ok(Segment {
            device,
            address,
            total_size,
            stream,
            kind,
            is_expandable,
            stack: StackId::EMPTY,
            blocks,
        })
    }

    fn block(&mut self, b: Value, default_address: u64, what: What) -> Result<Block> {
        let p = self.p;
        self.dict(b, what)?;
        let size = self.req_uint(b, key::SIZE, what)?;
        let address = match p.get(b, key::ADDRESS) {
            Some(a) => self.uint(a, what, key::ADDRESS)?,
            None => default_address,
        };
        let state = match self.opt_str(b, key::STATE) {
            Some(name) => BlockState::from_name(name).ok_or_else(|| {
                self.err(format!(
                    "{what} has an unknown state `{}`",
                    crate::error::quote(name)
                ))
            })?,
            None => return Err(self.err(format!("{what} has no `state`"))),
        };
        // PyTorch 2.0 kept the stack and requested size in `history[0]`.
        let history0 = p
            .get(b, key::HISTORY)
            .and_then(|h| p.seq(h))
            .and_then(|h| h.first().copied());
        let requested_size = match p.get(b, key::REQUESTED_SIZE) {
            Some(r) => self.uint(r, what, key::REQUESTED_SIZE)?,
            None => match history0.and_then(|h| p.get(h, key::REAL_SIZE)) {
                Some(r) => self.uint(r, what, HISTORY_REAL_SIZE)?,
                None => size,
            },
        };
        let frames_v = p
            .get(b, key::FRAMES)
            .or_else(|| history0.and_then(|h| p.get(h, key::FRAMES)));
        let stack = match frames_v {
            Some(f) => self.stack(f, what)?,
            None => StackId::EMPTY,
        };
        Ok(Block {
            address,
            size,
            requested_size,
            state,
            stack,
        })
    }

    fn traces(&mut self, v: Value) -> Result<Vec<DeviceTrace>> {
        let devices = self.seq(v, What::Traces, None)?;
        let mut out = Vec::with_capacity(devices.len());
        for (d, &t) in devices.iter().enumerate() {
            if let Some(list) = self.taken_trace(t) {
                out.push(list);
                continue;
            }
            let entries = self.seq(t, What::Trace(d), None)?;
            let mut trace = DeviceTrace::default();
            for (i, &e) in entries.iter().enumerate() {
                trace.push(self.entry(e, What::Entry(d, i))?);
            }
            out.push(trace);
        }
        Ok(out)
    }

    /// A device trace whose entries were converted as the pickle streamed (its list in the
    /// pickle holds nothing): moved out whole when it holds every entry taken, as a snapshot of
    /// one device does, copied otherwise.
    fn taken_trace(&mut self, t: Value) -> Option<DeviceTrace> {
        let Value::List(id) = t else { return None };
        let list = self.taken.lists.remove(&id)?;
        let all = &mut self.taken.entries;
        if list.runs.len() == 1 && list.runs[0] == (0, all.len() as u32) {
            return Some(std::mem::take(all));
        }
        let mut trace = DeviceTrace::default();
        for &(first, count) in &list.runs {
            let (first, count) = (first as usize, count as usize);
            for e in (first..first + count).filter_map(|i| all.get(i)) {
                trace.push(e);
            }
        }
        Some(trace)
    }

    fn entry(&mut self, e: Value, what: What) -> Result<TraceEntry> {
        let p = self.p;
        // The same entry dict fetched again from the memo after it was taken over.
        if let Value::Taken(id) = e {
            return match self.taken.entries.get(id as usize) {
                Some(entry) => Ok(entry),
                None => Err(self.err(format!("{what} is an entry read before"))),
            };
        }
        self.dict(e, what)?;
        // Every field in one pass over the dict, each key told by its string's number (the
        // last of a key wins, as in Python).
        let mut fields = [None; ENTRY_KEYS.len()];
        for &(k, v) in p.dict(e).unwrap_or_default() {
            if let Some(f) = self.entry_key(k) {
                fields[f] = Some(v);
            }
        }
        let field = |f: usize| fields[f];
        let Some(action_v) = field(F_ACTION) else {
            return Err(self.err(format!("{what} has no `action`")));
        };
        let action = match p.str(action_v) {
            Some(name) => Action::from_name(name),
            None => {
                return Err(self.err(format!(
                    "{what} `action` is {}, expected a str",
                    p.describe(action_v)
                )))
            }
        };
        let (addr_key, addr_field) = if action == Action::Oom && field(F_ADDR).is_none() {
            (key::DEVICE_FREE, F_DEVICE_FREE)
        } else {
            (key::ADDR, F_ADDR)
        };
        let addr = match field(addr_field) {
            Some(a) => self.uint(a, what, addr_key)?,
            None => 0,
        };
        let size = match field(F_SIZE) {
            Some(s) => self.uint(s, what, key::SIZE)?,
            None if matches!(action, Action::Snapshot | Action::Other) => 0,
            None => return Err(self.err(format!("{what} has no `size`"))),
        };
        let stream = self.stream_of(field(F_STREAM));
        let time_us = field(F_TIME_US).and_then(|t| self.descriptive_int(t));
        let stack = match field(F_FRAMES) {
            Some(f) => self.stack(f, what)?,
            None => StackId::EMPTY,
        };
        let compile_context = self.label(field(F_COMPILE_CONTEXT));
        let user_metadata = self.label(field(F_USER_METADATA));
        Ok(TraceEntry {
            action,
            addr,
            size,
            stream,
            time_us,
            stack,
            compile_context,
            user_metadata,
        })
    }

    /// An optional free-text field, with PyTorch's placeholders (`N/A`, empty) read as absent.
    fn label(&mut self, v: Option<Value>) -> Option<Label> {
        let v = v?;
        let Value::Str(id) = v else { return None };
        let i = id as usize;
        if i >= self.st.label_of.len() {
            self.st.label_of.resize(i + 1, UNSEEN);
        }
        if self.st.label_of[i] == UNSEEN {
            let s = self.p.str(v).unwrap_or_default();
            self.st.label_of[i] = if s.is_empty() || s == "N/A" {
                NO_LABEL
            } else {
                let l = match self.st.labels.get(s) {
                    Some(l) => l.clone(),
                    None => {
                        let l = Label::from(s);
                        self.st.labels.insert(l.clone());
                        l
                    }
                };
                self.st.label_texts.push(l);
                (self.st.label_texts.len() - 1) as u32
            };
        }
        match self.st.label_of[i] {
            NO_LABEL => None,
            l => Some(self.st.label_texts[l as usize].clone()),
        }
    }

    fn stack(&mut self, v: Value, what: What) -> Result<StackId> {
        let p = self.p;
        let list_id = match v {
            Value::List(i) | Value::Tuple(i) => i,
            Value::None => return Ok(StackId::EMPTY),
            other => {
                return Err(self.err(format!(
                    "{what} `frames` is {}, expected a list",
                    p.describe(other)
                )))
            }
        };
        let cached = self.st.stack_by_value.get(list_id as usize).copied();
        if let Some(s) = cached.filter(|&s| s != UNSEEN) {
            return Ok(StackId(s));
        }
        let items = self.seq(v, what, Some(key::FRAMES))?;
        let mut ids = Vec::with_capacity(items.len());
        for &f in items {
            ids.push(self.frame(f, what)?);
        }
        let next = StackId(self.st.frames.stacks.len() as u32);
        let id = match self.st.stack_by_content.get(&ids) {
            Some(&id) => id,
            None => {
                self.st.stack_by_content.insert(ids.clone(), next);
                self.st.frames.stacks.push(ids);
                next
            }
        };
        let i = list_id as usize;
        if i >= self.st.stack_by_value.len() {
            self.st.stack_by_value.resize(i + 1, UNSEEN);
        }
        self.st.stack_by_value[i] = id.0;
        Ok(id)
    }

    fn frame(&mut self, v: Value, what: What) -> Result<FrameId> {
        let p = self.p;
        let Value::Dict(dict_id) = v else {
            return Err(self.err(format!(
                "{what}: a frame is {}, expected a dict",
                p.describe(v)
            )));
        };
        let dict_key = Pickle::dict_key(dict_id);
        if let Some(&f) = self.st.frame_by_value.get(&dict_key) {
            return Ok(f);
        }
        self.spend(p.dict(v).map_or(0, <[_]>::len))?;
        let name = self.opt_str(v, key::NAME).unwrap_or("??").to_owned();
        let filename = self.opt_str(v, key::FILENAME).unwrap_or("??").to_owned();
        // A line that is not a 64-bit int is left empty (0, as a C++ frame has).
        let line = p
            .get(v, key::LINE)
            .and_then(|l| self.descriptive_int(l))
            .unwrap_or(0);
        let frame = Frame {
            name,
            filename,
            line,
        };
        let next = self.st.frames.frames.len() as FrameId;
        let id = *self
            .st
            .frame_by_content
            .entry(frame.clone())
            .or_insert(next);
        if id == next {
            self.st.frames.frames.push(frame);
        }
        self.st.frame_by_value.insert(dict_key, id);
        Ok(id)
    }

    fn settings(&mut self, v: Value) -> Result<AllocatorSettings> {
        let p = self.p;
        if p.dict(v).is_none() {
            return Ok(AllocatorSettings::default());
        }
        let mut s = AllocatorSettings {
            alloc_conf: self
                .opt_str(v, key::ALLOC_CONF)
                .filter(|c| !c.is_empty())
                .map(str::to_owned),
            ..AllocatorSettings::default()
        };
        // PyTorch writes SIZE_MAX (no limit) as -1 through its int64 cast.
        if let Some(Value::Int(m)) = p.get(v, key::MAX_SPLIT_SIZE) {
            s.max_split_size = u64::try_from(m).ok().filter(|&m| m < u64::MAX / 2);
        }
        s.expandable_segments =
            matches!(p.get(v, key::EXPANDABLE_SEGMENTS), Some(Value::Bool(true)));
        if let Some(r) = p.get(v, key::ROUNDUP_POWER2_DIVISIONS) {
            let mut pairs: Vec<(u64, u64)> = Vec::new();
            if let Some(entries) = p.dict(r) {
                self.spend(entries.len())?;
                for &(k, d) in entries {
                    let key = p.str(k).and_then(|k| k.parse::<u64>().ok());
                    if let (Some(key), Some(Value::Int(d))) = (key, Some(d)) {
                        pairs.push((key, u64::try_from(d).unwrap_or(0)));
                    }
                }
            } else if let Some(list) = p.seq(r) {
                self.spend(list.len())?;
                for (i, &d) in list.iter().enumerate() {
                    if let Value::Int(d) = d {
                        pairs.push((1u64 << i.min(62), u64::try_from(d).unwrap_or(0)));
                    }
                }
            }
            pairs.sort_unstable();
            // Keys are 1, 2, 4, … (MiB): the n-th power of two is interval n.
            s.roundup_power2_divisions = pairs
                .iter()
                .filter(|(k, _)| k.is_power_of_two())
                .map(|&(_, d)| d)
                .take(64)
                .collect();
        }
        Ok(s)
    }

    fn annotations(&mut self, v: Value) -> Result<Vec<Annotation>> {
        let p = self.p;
        let Some(items) = p.seq(v) else {
            return Ok(Vec::new());
        };
        self.spend(items.len())?;
        let mut out = Vec::with_capacity(items.len());
        for &a in items {
            if p.dict(a).is_none() {
                continue;
            }
            out.push(Annotation {
                device: p.get(a, key::DEVICE).and_then(|d| p.int(d)),
                stage: self.opt_str(a, key::STAGE).unwrap_or_default().to_owned(),
                name: self.opt_str(a, key::NAME).unwrap_or_default().to_owned(),
                time_us: p.get(a, key::TIME_US).and_then(|t| p.int(t)),
            });
        }
        Ok(out)
    }
}

fn describe_keys(keys: &[String]) -> String {
    if keys.is_empty() {
        return "none".into();
    }
    // Keys are the file's text: each quoted on one line, cut.
    let shown: Vec<String> = keys
        .iter()
        .take(6)
        .map(|k| crate::error::quote(k))
        .collect();
    if keys.len() > 6 {
        format!("{}, … ({} keys)", shown.join(", "), keys.len())
    } else {
        shown.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::pickle::write::PickleWriter;

    fn load_bytes(data: &[u8]) -> Result<Snapshot> {
        from_bytes(Path::new("t.pickle"), data)
    }

    #[test]
    fn bare_list_of_segments_is_the_oldest_layout() {
        // pickle.dumps([{'device': 0, 'address': 4096, 'total_size': 2097152, 'stream': 0,
        //   'segment_type': 'small', 'blocks': [{'size': 1024, 'state': 'active_allocated',
        //   'history': [{'addr': 4096, 'real_size': 1000}]},
        //   {'size': 2096128, 'state': 'inactive'}]}], protocol=2)
        let data = b"\x80\x02]q\x00}q\x01(X\x06\x00\x00\x00deviceq\x02K\x00X\x07\x00\x00\x00addressq\x03M\x00\x10X\n\x00\x00\x00total_sizeq\x04J\x00\x00 \x00X\x06\x00\x00\x00streamq\x05K\x00X\x0c\x00\x00\x00segment_typeq\x06X\x05\x00\x00\x00smallq\x07X\x06\x00\x00\x00blocksq\x08]q\t(}q\n(X\x04\x00\x00\x00sizeq\x0bM\x00\x04X\x05\x00\x00\x00stateq\x0cX\x10\x00\x00\x00active_allocatedq\rX\x07\x00\x00\x00historyq\x0e]q\x0f}q\x10(X\x04\x00\x00\x00addrq\x11M\x00\x10X\t\x00\x00\x00real_sizeq\x12M\xe8\x03uau}q\x13(h\x0bJ\x00\xfc\x1f\x00h\x0cX\x08\x00\x00\x00inactiveq\x14ueua.";
        let s = load_bytes(data).unwrap();
        assert_eq!(s.format.layout, "segments list");
        assert!(!s.format.has_trace);
        assert_eq!(s.segments.len(), 1);
        let seg = &s.segments[0];
        assert_eq!(seg.kind, SegmentKind::Small);
        assert_eq!(seg.blocks[0].requested_size, 1000);
        assert_eq!(seg.blocks[1].address, 4096 + 1024);
        assert_eq!(seg.blocks[1].state, BlockState::Inactive);
    }

    #[test]
    fn unknown_top_level_shapes_are_refused() {
        // pickle.dumps({'hello': 1}, protocol=4) and pickle.dumps(3, protocol=4)
        let e = load_bytes(
            b"\x80\x04\x95\x0e\x00\x00\x00\x00\x00\x00\x00}\x94\x8c\x05hello\x94K\x01s.",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("without `segments`") && e.contains("hello"),
            "{e}"
        );
        let e = load_bytes(b"\x80\x04K\x03.").unwrap_err().to_string();
        assert!(e.contains("holds an int"), "{e}");
    }

    /// `{'segments': [], 'device_traces': [[D, D, ...]]}` with D a 5,000-key dict referenced
    /// 20,000 times through the memo: 85 kB of pickle, 10^8 key comparisons if each reference
    /// were walked.
    fn one_huge_dict_shared_by_many_entries(tail: &[u8]) -> Vec<u8> {
        let mut d = b"\x80\x04}(\x8c\x08segments]\x8c\x0ddevice_traces](](".to_vec();
        d.extend_from_slice(b"}\x94(\x8c\x06action\x8c\x05alloc\x8c\x04sizeK\x01");
        for i in 0..5000 {
            let k = format!("k{i}");
            d.push(0x8c);
            d.push(k.len() as u8);
            d.extend_from_slice(k.as_bytes());
            d.extend_from_slice(b"K\x00");
        }
        d.push(b'u');
        for _ in 0..20_000 {
            d.extend_from_slice(tail);
        }
        d.extend_from_slice(b"eeu.");
        d
    }

    #[test]
    fn one_huge_dict_shared_by_many_entries_exhausts_the_budget() {
        // Through the memo (BINGET) or duplicated on the stack (DUP): the work is bounded by the
        // input's size either way, and the file refused.
        for tail in [&b"h\x00"[..], b"2"] {
            let e = load_bytes(&one_huge_dict_shared_by_many_entries(tail))
                .unwrap_err()
                .to_string();
            assert!(e.contains("too many times"), "{e}");
        }
    }

    /// A snapshot of one trace entry whose frame line, stream and time are written by `value`.
    fn entry_with(value: &dyn Fn(&mut PickleWriter)) -> Vec<u8> {
        let mut w = PickleWriter::new();
        w.begin_dict();
        w.key(key::SEGMENTS);
        w.begin_list();
        w.end_list();
        w.key(key::DEVICE_TRACES);
        w.begin_list();
        w.begin_list();
        w.begin_dict();
        w.key(key::ACTION);
        w.string("alloc");
        w.key(key::ADDR);
        w.uint(u64::MAX - 4095);
        w.key(key::SIZE);
        w.uint(512);
        w.key(key::STREAM);
        value(&mut w);
        w.key(key::TIME_US);
        value(&mut w);
        w.key(key::FRAMES);
        w.begin_list();
        w.begin_dict();
        w.key(key::NAME);
        w.string("forward");
        w.key(key::FILENAME);
        w.string("<eval_with_key>.3.py");
        w.key(key::LINE);
        value(&mut w);
        w.end_dict();
        w.end_list();
        w.end_dict();
        w.end_list();
        w.end_list();
        w.end_dict();
        w.finish()
    }

    #[test]
    fn descriptive_fields_out_of_range_are_kept_or_left_empty() {
        // 2^64 − 1, as PyTorch 2.6 writes the line of some `torch.compile` frames: kept as -1.
        let s = load_bytes(&entry_with(&|w| w.uint(u64::MAX))).unwrap();
        let e = s.traces[0].get(0).unwrap();
        assert_eq!(s.frames.frame(s.frames.stack(e.stack)[0]).line, -1);
        assert_eq!((e.stream, e.time_us), (u64::MAX, Some(-1)));
        assert_eq!(e.addr, u64::MAX - 4095, "addresses use all 64 bits");
        // A string, a float with a fraction, None: left empty.
        for odd in [
            &(|w: &mut PickleWriter| w.string("n/a")) as &dyn Fn(&mut PickleWriter),
            &|w: &mut PickleWriter| w.float(1.5),
            &|w: &mut PickleWriter| w.none(),
        ] {
            let s = load_bytes(&entry_with(odd)).unwrap();
            let e = s.traces[0].get(0).unwrap();
            assert_eq!(s.frames.frame(s.frames.stack(e.stack)[0]).line, 0);
            assert_eq!((e.stream, e.time_us), (0, None));
        }
        // A size is not descriptive: a negative one is still refused.
        let mut w = PickleWriter::new();
        w.begin_dict();
        w.key(key::SEGMENTS);
        w.begin_list();
        w.begin_dict();
        w.key(key::ADDRESS);
        w.uint(0);
        w.key(key::TOTAL_SIZE);
        w.int(-5);
        w.key(key::BLOCKS);
        w.begin_list();
        w.end_list();
        w.end_dict();
        w.end_list();
        w.end_dict();
        let e = load_bytes(&w.finish()).unwrap_err().to_string();
        assert!(e.contains("`total_size` is negative"), "{e}");
    }

    #[test]
    fn pickle_errors_keep_their_kind() {
        let e = load_bytes(b"\x80\x02cos\nsystem\n.").unwrap_err();
        assert!(matches!(e, Error::PickleCode { ref name, .. } if name == "os.system"));
        let e = load_bytes(b"\x80\x04\xfe").unwrap_err();
        assert!(matches!(
            e,
            Error::UnsupportedPickleOpcode { opcode: 0xfe, .. }
        ));
    }
}
