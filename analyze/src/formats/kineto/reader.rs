//! Trace events into the model, one at a time as they are read: what each category becomes, and,
//! once every event is in, what needs them all (the launching process of GPU work, the top-level
//! keys as metadata).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use rayon::slice::ParallelSliceMut;
use serde::Deserialize;
use serde_json::Value;

use super::event::{as_u64, Arg, Args, Event};
use super::{micros_text_to_nanos, plain_micros, ANALYSED_CATEGORIES, GPU_ANNOTATION_DOMAIN};
use crate::fast_hash::FastMap;
use crate::formats::json_scan::Cursor;
use crate::formats::nsys_sqlite::short_name;
use crate::model::trace::{
    ApiCall, ApiKind, Bytes, Gpu, Kernel, MemOp, MemOpKind, Nanos, OpCall, Range, RangeStyle,
    Source, SourceFormat, Span, StrId, Strings, Trace,
};

/// What kind of event a category names.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Category {
    Kernel,
    Memcpy,
    Memset,
    Runtime,
    Driver,
    Annotation,
    GpuAnnotation,
    CpuOp,
}

fn category(cat: &str) -> Option<Category> {
    const NAMES: &[(&str, Category)] = &[
        ("kernel", Category::Kernel),
        ("cpu_op", Category::CpuOp),
        ("cuda_runtime", Category::Runtime),
        ("gpu_memcpy", Category::Memcpy),
        ("gpu_memset", Category::Memset),
        ("cuda_driver", Category::Driver),
        ("user_annotation", Category::Annotation),
        ("gpu_user_annotation", Category::GpuAnnotation),
        ("memcpy", Category::Memcpy),
        ("memset", Category::Memset),
        ("runtime", Category::Runtime),
        ("driver", Category::Driver),
        ("operator", Category::CpuOp),
    ];
    NAMES
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(cat))
        .map(|&(_, c)| c)
}

/// Strings interned in the order they are first met, so that [`Interner::into_strings`] gives
/// them the ids they have here.
#[derive(Default)]
struct Interner {
    index: FastMap<Box<str>, StrId>,
    values: Vec<Box<str>>,
    bytes: usize,
}

impl Interner {
    #[inline]
    fn intern(&mut self, s: &str) -> StrId {
        if let Some(&id) = self.index.get(s) {
            return id;
        }
        let id = StrId(self.values.len() as u32);
        self.values.push(s.into());
        self.index.insert(s.into(), id);
        self.bytes += s.len();
        id
    }

    fn len(&self) -> usize {
        self.values.len()
    }

    fn get(&self, id: StrId) -> &str {
        &self.values[id.0 as usize]
    }

    fn into_strings(self) -> Strings {
        let mut strings = Strings::default();
        for v in self.values {
            strings.intern(&v);
        }
        strings
    }
}

/// A GPU annotation before its process is known.
struct GpuRange {
    range: Range,
    external_id: Option<u64>,
}

#[derive(Default)]
pub struct Reader {
    strings: Interner,
    /// The short name of each kernel name met, by the name's id: derived once per name.
    short_names: FastMap<StrId, StrId>,
    kernels: Vec<Kernel>,
    api_calls: Vec<ApiCall>,
    ranges: Vec<Range>,
    gpu_ranges: Vec<GpuRange>,
    mem_ops: Vec<MemOp>,
    /// Operator calls, their texts in `op_strings` until the other events' names are interned
    /// (so that those keep the ids they have without operators).
    ops: Vec<OpCall>,
    op_strings: Interner,
    thread_names: HashMap<(u32, u32), StrId>,
    /// External id of each CPU annotation -> its process.
    annotation_pids: HashMap<u64, u32>,
    /// Ids given to non-numeric `pid`/`tid` strings.
    synthetic_ids: HashMap<String, u32>,
    seen: Vec<&'static str>,
}

impl Reader {
    pub fn event(&mut self, e: &Event<'_>) {
        let ph = e.ph.as_deref().unwrap_or("");
        if ph == "M" {
            self.metadata_event(e);
            return;
        }
        // Complete events only; Kineto writes every GPU op, API call and annotation as one.
        if !(ph == "X" || (ph.is_empty() && e.dur.is_some())) {
            return;
        }
        let Some(cat) = e.cat.as_deref().and_then(category) else {
            return;
        };
        let (Some(start), Some(dur)) = (e.ts.and_then(micros), e.dur.and_then(micros)) else {
            return;
        };
        let start = Nanos(start);
        let end = Nanos(start.0.saturating_add(dur));
        let args = Args::read(e.args);
        let name = e.name.as_deref().unwrap_or("");
        let pid = self.id(e.pid);
        let tid = self.id(e.tid);
        let count = |a: &Option<Arg<'_>>| a.as_ref().and_then(Arg::count);
        let correlation_id = count(&args.correlation).unwrap_or(0);
        let device = count(&args.device).map_or(pid, |d| d as u32);
        let stream = count(&args.stream).map_or(tid, |s| s as u32);
        // The launching process is found once every call is read (`finish`).
        let span = Span {
            start,
            end,
            device,
            stream,
            correlation_id,
            pid: 0,
        };
        match cat {
            Category::Kernel => {
                self.note("kernel");
                let name_id = self.strings.intern(name);
                let short = match self.short_names.get(&name_id) {
                    Some(&short) => short,
                    None => {
                        let short = self.strings.intern(&short_name(name));
                        self.short_names.insert(name_id, short);
                        short
                    }
                };
                let dims = |a: &Option<Arg<'_>>| a.as_ref().map_or([0; 3], Arg::dims);
                self.kernels.push(Kernel {
                    span,
                    name: name_id,
                    short_name: short,
                    mangled_name: None,
                    grid: dims(&args.grid),
                    block: dims(&args.block),
                    registers_per_thread: count(&args.registers).unwrap_or(0) as u32,
                    static_shared_memory: count(&args.shared_memory).unwrap_or(0) as u32,
                    dynamic_shared_memory: 0,
                    graph_node_id: None,
                });
            }
            Category::Memcpy | Category::Memset => {
                let kind = if cat == Category::Memset {
                    self.note("gpu_memset");
                    MemOpKind::Memset
                } else {
                    self.note("gpu_memcpy");
                    copy_kind(name)
                };
                self.mem_ops.push(MemOp {
                    span,
                    kind,
                    bytes: Bytes(count(&args.bytes).unwrap_or(0)),
                });
            }
            Category::Runtime | Category::Driver => {
                let kind = if cat == Category::Runtime {
                    self.note("cuda_runtime");
                    ApiKind::Runtime
                } else {
                    self.note("cuda_driver");
                    ApiKind::Driver
                };
                let name = self.strings.intern(name);
                self.api_calls.push(ApiCall {
                    start,
                    end,
                    pid,
                    tid,
                    correlation_id,
                    name,
                    kind,
                });
            }
            Category::Annotation => {
                self.note("user_annotation");
                if let Some(ext) = count(&args.external_id) {
                    self.annotation_pids.insert(ext, pid);
                }
                let name = self.strings.intern(name);
                self.ranges
                    .push(Range::push_pop(name, pid, tid, start, end));
            }
            Category::CpuOp => {
                let mut text = |a: &Option<Arg<'_>>| {
                    let text = a.as_ref()?.list_text()?;
                    Some(self.op_strings.intern(&text))
                };
                let shapes = text(&args.input_dims);
                let types = text(&args.input_type);
                let concrete = text(&args.concrete_inputs);
                self.ops.push(OpCall {
                    start,
                    end,
                    pid,
                    tid,
                    name: self.op_strings.intern(name),
                    shapes,
                    types,
                    concrete,
                    flops: count(&args.flops).filter(|&f| f > 0),
                });
            }
            Category::GpuAnnotation => {
                self.note("gpu_user_annotation");
                let name = self.strings.intern(name);
                let domain = Some(self.strings.intern(GPU_ANNOTATION_DOMAIN));
                self.gpu_ranges.push(GpuRange {
                    range: Range {
                        start,
                        end,
                        style: RangeStyle::PushPop,
                        name,
                        domain,
                        pid: 0,
                        tid: stream,
                        end_tid: None,
                    },
                    external_id: count(&args.external_id),
                });
            }
        }
    }

    fn note(&mut self, cat: &'static str) {
        if !self.seen.contains(&cat) {
            self.seen.push(cat);
        }
    }

    fn metadata_event(&mut self, e: &Event<'_>) {
        if e.name.as_deref() != Some("thread_name") {
            return;
        }
        let args = Args::read(e.args);
        if let Some(name) = args.name.as_ref().and_then(Arg::string) {
            let key = (self.id(e.pid), self.id(e.tid));
            let name = self.strings.intern(name.trim());
            self.thread_names.insert(key, name);
        }
    }

    /// A `pid` or `tid`: a number, a numeric string, a string ending in a number (`stream 7`), or
    /// else a stable made-up id counting down from `u32::MAX`.
    fn id(&mut self, raw: Option<&[u8]>) -> u32 {
        let Some(raw) = raw else { return 0 };
        if let Some(n) = small_int(raw) {
            return n as u32;
        }
        if let Some(n) = std::str::from_utf8(raw)
            .ok()
            .and_then(|t| t.parse::<i64>().ok())
        {
            return n as u32;
        }
        if raw.first() != Some(&b'"') {
            return 0;
        }
        let Some(s) = Cursor::new(raw, true)
            .string()
            .ok()
            .and_then(|s| s.decode())
        else {
            return 0;
        };
        let s = s.trim();
        if let Ok(n) = s.parse::<i64>() {
            return n as u32;
        }
        let digits = s.rsplit(|c: char| !c.is_ascii_digit()).next().unwrap_or("");
        if !digits.is_empty() && s.ends_with(digits) {
            if let Ok(n) = digits.parse::<u32>() {
                return n;
            }
        }
        let next = u32::MAX - self.synthetic_ids.len() as u32;
        *self.synthetic_ids.entry(s.to_owned()).or_insert(next)
    }

    /// Whether the events read gave a `pid` or `tid` a made-up id: those count from the ids
    /// given before, so such events are read again by the reader of the events before them.
    pub fn made_up_ids(&self) -> bool {
        !self.synthetic_ids.is_empty()
    }

    /// Take in what `later` read from the events that follow this reader's, as though this
    /// reader had read them: its names get the ids they would have had here (each text's first
    /// sight, in order), and a thread or annotation it names again is its. `later` gave no
    /// made-up ids ([`Reader::made_up_ids`]).
    pub fn append(&mut self, later: Reader) {
        debug_assert!(!later.made_up_ids());
        let ids: Vec<StrId> = later
            .strings
            .values
            .iter()
            .map(|s| self.strings.intern(s))
            .collect();
        let id = |s: StrId| ids[s.0 as usize];
        let op_ids: Vec<StrId> = later
            .op_strings
            .values
            .iter()
            .map(|s| self.op_strings.intern(s))
            .collect();
        let op_id = |s: StrId| op_ids[s.0 as usize];
        for (name, short) in later.short_names {
            self.short_names.entry(id(name)).or_insert(id(short));
        }
        self.kernels.extend(later.kernels.into_iter().map(|mut k| {
            k.name = id(k.name);
            k.short_name = id(k.short_name);
            k
        }));
        self.api_calls
            .extend(later.api_calls.into_iter().map(|mut c| {
                c.name = id(c.name);
                c
            }));
        self.ranges.extend(later.ranges.into_iter().map(|mut r| {
            r.name = id(r.name);
            r.domain = r.domain.map(id);
            r
        }));
        self.gpu_ranges
            .extend(later.gpu_ranges.into_iter().map(|mut g| {
                g.range.name = id(g.range.name);
                g.range.domain = g.range.domain.map(id);
                g
            }));
        self.mem_ops.extend(later.mem_ops);
        self.ops.extend(later.ops.into_iter().map(|mut o| {
            o.name = op_id(o.name);
            o.shapes = o.shapes.map(op_id);
            o.types = o.types.map(op_id);
            o.concrete = o.concrete.map(op_id);
            o
        }));
        for (thread, name) in later.thread_names {
            self.thread_names.insert(thread, id(name));
        }
        self.annotation_pids.extend(later.annotation_pids);
        for cat in later.seen {
            self.note(cat);
        }
    }

    /// The bytes the model read so far holds, about.
    pub fn held(&self) -> u64 {
        fn vec<T>(v: &Vec<T>) -> usize {
            v.capacity() * std::mem::size_of::<T>()
        }
        let strings = |s: &Interner| s.bytes * 2 + s.len() * 64;
        let bytes = vec(&self.kernels)
            + vec(&self.api_calls)
            + vec(&self.ranges)
            + vec(&self.gpu_ranges)
            + vec(&self.mem_ops)
            + vec(&self.ops)
            + strings(&self.strings)
            + strings(&self.op_strings)
            + (self.thread_names.len() + self.annotation_pids.len()) * 32;
        bytes as u64
    }

    /// The trace, with `top` the top-level keys (but `traceEvents`) and their values' text.
    pub fn finish(mut self, path: &Path, top: &BTreeMap<String, String>) -> Trace {
        // GPU work belongs to the process that launched it.
        let launcher: FastMap<u64, u32> = self
            .api_calls
            .iter()
            .filter(|c| c.correlation_id != 0)
            .map(|c| (c.correlation_id, c.pid))
            .collect();
        let fallback = main_process(&self.api_calls, &self.ranges);
        for k in &mut self.kernels {
            k.span.pid = launcher
                .get(&k.span.correlation_id)
                .copied()
                .unwrap_or(fallback);
        }
        for m in &mut self.mem_ops {
            m.span.pid = launcher
                .get(&m.span.correlation_id)
                .copied()
                .unwrap_or(fallback);
        }
        drop(launcher);
        for g in self.gpu_ranges.drain(..) {
            let mut r = g.range;
            r.pid = g
                .external_id
                .and_then(|e| self.annotation_pids.get(&e).copied())
                .unwrap_or(fallback);
            self.ranges.push(r);
        }

        let mut metadata = BTreeMap::new();
        for (key, raw) in top {
            if key == "deviceProperties" {
                continue;
            }
            metadata.insert(key.clone(), value_text(raw));
        }
        let json = |key: &str| serde_json::from_str::<Value>(top.get(key)?).ok();
        let schema_version = top.get("schemaVersion").map(|v| value_text(v));
        let missing = ANALYSED_CATEGORIES
            .iter()
            .filter(|c| !self.seen.contains(c))
            .map(|c| c.to_string())
            .collect();
        let rank = json("distributedInfo")
            .and_then(|info| super::head::distributed(&info))
            .map(|(rank, _)| rank);
        let clock_origin_ns = json("baseTimeNanoseconds")
            .and_then(|v| as_u64(&v))
            .and_then(|ns| i64::try_from(ns).ok());
        let source = Source {
            path: path.to_owned(),
            format: SourceFormat::Kineto,
            schema_version,
            product_version: None,
            metadata,
            run: BTreeMap::new(),
            missing,
            rank,
            clock_origin_ns,
        };
        let mut trace = Trace::empty(source);
        trace.gpus = top
            .get("deviceProperties")
            .and_then(|raw| serde_json::from_str::<Vec<DeviceProperties>>(raw).ok())
            .unwrap_or_default()
            .into_iter()
            .map(DeviceProperties::into_gpu)
            .collect();
        let ids: Vec<StrId> = (0..self.op_strings.len())
            .map(|i| self.strings.intern(self.op_strings.get(StrId(i as u32))))
            .collect();
        let id = |s: StrId| ids[s.0 as usize];
        for o in &mut self.ops {
            o.name = id(o.name);
            o.shapes = o.shapes.map(id);
            o.types = o.types.map(id);
            o.concrete = o.concrete.map(id);
        }
        trace.ops = self.ops.into();
        trace.strings = self.strings.into_strings();
        trace.kernels = self.kernels;
        trace.api_calls = self.api_calls;
        trace.ranges = self.ranges;
        trace.mem_ops = self.mem_ops;
        trace.thread_names = self.thread_names;
        sort_by_start(&mut trace.kernels, |k| k.span.start);
        sort_by_start(&mut trace.api_calls, |c| c.start);
        sort_by_start(&mut trace.ranges, |r| r.start);
        sort_by_start(&mut trace.mem_ops, |m| m.span.start);
        sort_by_start(&mut trace.ops, |o| o.start);
        // Sorted already: checked in one pass each, without the scratch copy a sort makes.
        trace.sort();
        trace
    }
}

/// Sort by start time, ties in file order, as [`Trace::sort`] does, with 8 bytes per item
/// instead of the scratch copy of half the items a stable sort makes (a fifth of the model for a
/// large trace's operator calls): each item's start (from the earliest) and position packed in
/// one word, the words sorted side by side on the pool, then the items moved into place.
fn sort_by_start<T: Send>(items: &mut [T], start: impl Fn(&T) -> Nanos + Sync) {
    if items.windows(2).all(|w| start(&w[0]) <= start(&w[1])) {
        return;
    }
    let (Some(first), Some(last)) = (
        items.iter().map(&start).min(),
        items.iter().map(&start).max(),
    ) else {
        return;
    };
    let span = last.0.abs_diff(first.0);
    let bits = usize::BITS - items.len().leading_zeros();
    if bits >= 64 || span >> (64 - bits) != 0 {
        items.sort_by_key(start);
        return;
    }
    let mut order: Vec<u64> = items
        .iter()
        .enumerate()
        .map(|(i, item)| start(item).0.abs_diff(first.0) << bits | i as u64)
        .collect();
    order.par_sort_unstable();
    let mask = (1u64 << bits) - 1;
    for o in &mut order {
        *o &= mask;
    }
    // Position p takes the item at order[p]: each cycle of the permutation is walked once,
    // its positions marked done (order[p] = p) as they are filled.
    for first in 0..items.len() {
        let mut at = first;
        while order[at] as usize != at {
            let from = order[at] as usize;
            order[at] = at as u64;
            if from == first {
                break;
            }
            items.swap(at, from);
            at = from;
        }
    }
}

/// The process that made most API calls (else most annotations): the owner of GPU work whose
/// launching call is not in the trace.
fn main_process(calls: &[ApiCall], ranges: &[Range]) -> u32 {
    let mut counts: HashMap<u32, usize> = HashMap::new();
    for c in calls {
        *counts.entry(c.pid).or_default() += 1;
    }
    if counts.is_empty() {
        for r in ranges {
            *counts.entry(r.pid).or_default() += 1;
        }
    }
    counts
        .into_iter()
        .max_by_key(|&(pid, n)| (n, std::cmp::Reverse(pid)))
        .map_or(0, |(pid, _)| pid)
}

/// `deviceProperties` entries (CUDA and ROCm write the same keys).
#[derive(Deserialize)]
struct DeviceProperties {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default, rename = "totalGlobalMem")]
    total_global_mem: Option<Value>,
    #[serde(default, rename = "numSms")]
    num_sms: Option<Value>,
    #[serde(default, rename = "computeMajor")]
    compute_major: Option<Value>,
    #[serde(default, rename = "computeMinor")]
    compute_minor: Option<Value>,
}

impl DeviceProperties {
    fn into_gpu(self) -> Gpu {
        let major = self.compute_major.as_ref().and_then(as_u64);
        let minor = self.compute_minor.as_ref().and_then(as_u64);
        Gpu {
            id: self.id.as_ref().and_then(as_u64).unwrap_or(0) as u32,
            name: self.name.unwrap_or_default(),
            total_memory: self.total_global_mem.as_ref().and_then(as_u64).map(Bytes),
            sm_count: self.num_sms.as_ref().and_then(as_u64).map(|n| n as u32),
            compute_capability: major.zip(minor).map(|(a, b)| (a as u32, b as u32)),
        }
    }
}

/// A top-level value as text: strings as written, anything else as compact JSON.
fn value_text(raw: &str) -> String {
    match serde_json::from_str::<Value>(raw) {
        Ok(Value::String(s)) => s,
        Ok(v) => v.to_string(),
        Err(_) => raw.to_owned(),
    }
}

/// The copy direction in a memcpy event's name: CUDA's `Memcpy HtoD (Pageable -> Device)`,
/// ROCm's `CopyHostToDevice`.
fn copy_kind(name: &str) -> MemOpKind {
    let n: String = name
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect::<String>()
        .to_ascii_lowercase();
    let has = |a: &str, b: &str| n.contains(a) || n.contains(b);
    if has("htod", "hosttodevice") {
        MemOpKind::HostToDevice
    } else if has("dtoh", "devicetohost") {
        MemOpKind::DeviceToHost
    } else if has("dtod", "devicetodevice") {
        MemOpKind::DeviceToDevice
    } else if has("htoh", "hosttohost") {
        MemOpKind::HostToHost
    } else if has("ptop", "peer") {
        MemOpKind::PeerToPeer
    } else {
        MemOpKind::OtherCopy(0)
    }
}

/// A JSON integer of up to 18 digits, which `i64` holds.
fn small_int(raw: &[u8]) -> Option<i64> {
    let (negative, digits) = match raw.split_first()? {
        (b'-', rest) => (true, rest),
        _ => (false, raw),
    };
    if digits.is_empty() || digits.len() > 18 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = digits
        .iter()
        .fold(0i64, |n, &b| n * 10 + i64::from(b - b'0'));
    Some(if negative { -n } else { n })
}

/// Microseconds written as JSON (a number or a numeric string) to nanoseconds, exactly.
fn micros(raw: &[u8]) -> Option<i64> {
    if let Some(nanos) = plain_micros(raw) {
        return Some(nanos);
    }
    let text = std::str::from_utf8(raw).ok()?;
    let text = text
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(text);
    micros_text_to_nanos(text.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorting_by_start_keeps_ties_in_file_order() {
        let mut seed = 7u64;
        let mut items: Vec<(Nanos, usize)> = (0..5000)
            .map(|i| {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (Nanos((seed >> 33) as i64 % 300), i)
            })
            .collect();
        let mut expected = items.clone();
        expected.sort_by_key(|x| x.0);
        sort_by_start(&mut items, |x| x.0);
        assert_eq!(items, expected);
    }

    #[test]
    fn categories_are_read_in_any_case() {
        assert!(category("Kernel") == Some(Category::Kernel));
        assert!(category("CUDA_RUNTIME") == Some(Category::Runtime));
        assert!(category("python_function").is_none());
    }
}
