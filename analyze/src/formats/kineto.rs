//! PyTorch profiler (Kineto) Chrome traces, `.json` or `.json.gz`, into the model.
//!
//! Met so far: `schemaVersion` 1 traces from PyTorch 2.x on CUDA (CUPTI) and ROCm (roctracer:
//! `hip*` calls under the `cuda_runtime` category), with and without the `M` metadata events and
//! the top-level `deviceProperties`/`baseTimeNanoseconds` keys; a bare JSON array of events is
//! read too. Read: `kernel`, `gpu_memcpy`, `gpu_memset`, `cuda_runtime` and `cuda_driver` events
//! (older traces' `Kernel`, `Memcpy`, `Memset`, `Runtime`, `Driver` spellings as well),
//! `user_annotation` ranges (CPU, default domain) and `gpu_user_annotation` ranges (GPU, domain
//! `gpu_user_annotation`), `cpu_op` operator calls (with `Input Dims`, `Input type`, `Concrete
//! Inputs` and `flops` where `record_shapes` and `with_flops` kept them), thread names, GPUs, and
//! the top-level keys as metadata. Not read: `python_function`, flow events, memory instants
//! (CPU-side detail the model has no place for).
//!
//! Times: `ts` and `dur` are microseconds written with three decimals; they are parsed from their
//! decimal text (never through a float) into exact nanoseconds, rounding half away from zero when
//! a file has more decimals. Times stay on the trace's own clock; `baseTimeNanoseconds`, when
//! present, is kept in [`Source::metadata`] (add it to get Unix time). GPU events carry the device
//! as `pid` and the stream as `tid`; their process is the one that made the launching call (same
//! correlation id), and a GPU annotation's process is that of the CPU annotation with the same
//! `External id`. Kineto names kernels as the GNU demangler does; the short name is derived from
//! that by nsys's rule ([`super::nsys_sqlite::short_name`]). Kineto records only the sum of
//! static and dynamic shared memory; it is stored as static shared memory.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::formats::nsys_sqlite::short_name;
use crate::model::trace::{
    ApiCall, ApiKind, Bytes, Gpu, Kernel, MemOp, MemOpKind, Nanos, OpCall, Range, RangeStyle,
    Source, SourceFormat, Span, StrId, Strings, Trace,
};

/// Domain given to `gpu_user_annotation` ranges, so they are told apart from the CPU ranges of
/// the same name.
pub const GPU_ANNOTATION_DOMAIN: &str = "gpu_user_annotation";

/// Categories whose absence is listed in [`Source::missing`].
const ANALYSED_CATEGORIES: &[&str] = &[
    "kernel",
    "cuda_runtime",
    "gpu_memcpy",
    "gpu_memset",
    "user_annotation",
];

/// Load a Kineto trace (plain or gzip-compressed).
pub fn load(path: &Path) -> Result<Trace> {
    let bytes = crate::formats::read_maybe_gzip(path)?;
    parse(path, &bytes)
}

/// Parse the bytes of a Kineto trace; `path` is only used to name the file in errors.
pub fn parse(path: &Path, bytes: &[u8]) -> Result<Trace> {
    let malformed = |message: String| Error::Malformed {
        path: path.to_owned(),
        message,
    };
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace()).copied();
    // Events are read one at a time, each handed to the reader as it is parsed, never held.
    let mut reader = Reader::default();
    let top: BTreeMap<String, &RawValue> = match first {
        Some(b'[') => {
            let mut de = serde_json::Deserializer::from_slice(bytes);
            serde::de::DeserializeSeed::deserialize(Events(&mut reader), &mut de)
                .and_then(|_| de.end())
                .map_err(|e| malformed(format!("not a valid Kineto trace: {e}")))?;
            BTreeMap::new()
        }
        Some(b'{') => {
            let top: BTreeMap<String, &RawValue> = serde_json::from_slice(bytes)
                .map_err(|e| malformed(format!("not valid JSON: {e}")))?;
            let Some(raw) = top.get("traceEvents") else {
                return Err(malformed(
                    "JSON without a `traceEvents` array: not a Kineto/Chrome trace".into(),
                ));
            };
            let mut de = serde_json::Deserializer::from_str(raw.get());
            serde::de::DeserializeSeed::deserialize(Events(&mut reader), &mut de)
                .and_then(|_| de.end())
                .map_err(|e| malformed(format!("`traceEvents` is not a list of events: {e}")))?;
            top
        }
        _ => return Err(malformed("not a JSON object or array".into())),
    };
    let mut trace = reader.finish(path, &top);
    crate::model::bounds::check(&mut trace).map_err(malformed)?;
    Ok(trace)
}

/// A list of trace events, each handed to the reader as soon as it is parsed.
struct Events<'r>(&'r mut Reader);

impl<'de> serde::de::DeserializeSeed<'de> for Events<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Events<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a sequence")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(
        self,
        mut seq: A,
    ) -> std::result::Result<(), A::Error> {
        while let Some(event) = seq.next_element::<RawEvent<'de>>()? {
            self.0.event(&event);
        }
        Ok(())
    }
}

/// One trace event, with the fields that need exact handling kept as raw JSON text.
#[derive(Deserialize)]
struct RawEvent<'a> {
    #[serde(default)]
    ph: Option<String>,
    #[serde(default)]
    cat: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(borrow, default)]
    pid: Option<&'a RawValue>,
    #[serde(borrow, default)]
    tid: Option<&'a RawValue>,
    #[serde(borrow, default)]
    ts: Option<&'a RawValue>,
    #[serde(borrow, default)]
    dur: Option<&'a RawValue>,
    #[serde(borrow, default)]
    args: Option<&'a RawValue>,
}

/// The `args` fields the model keeps.
#[derive(Deserialize, Default)]
struct Args {
    correlation: Option<Value>,
    device: Option<Value>,
    stream: Option<Value>,
    bytes: Option<Value>,
    grid: Option<Value>,
    block: Option<Value>,
    #[serde(rename = "registers per thread")]
    registers: Option<Value>,
    #[serde(rename = "shared memory")]
    shared_memory: Option<Value>,
    #[serde(rename = "External id")]
    external_id: Option<Value>,
    name: Option<Value>,
    #[serde(rename = "Input Dims")]
    input_dims: Option<Value>,
    #[serde(rename = "Input type")]
    input_type: Option<Value>,
    #[serde(rename = "Concrete Inputs")]
    concrete_inputs: Option<Value>,
    flops: Option<Value>,
}

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
    match cat.to_ascii_lowercase().as_str() {
        "kernel" => Some(Category::Kernel),
        "gpu_memcpy" | "memcpy" => Some(Category::Memcpy),
        "gpu_memset" | "memset" => Some(Category::Memset),
        "cuda_runtime" | "runtime" => Some(Category::Runtime),
        "cuda_driver" | "driver" => Some(Category::Driver),
        "user_annotation" => Some(Category::Annotation),
        "gpu_user_annotation" => Some(Category::GpuAnnotation),
        "cpu_op" | "operator" => Some(Category::CpuOp),
        _ => None,
    }
}

/// A GPU annotation before its process is known.
struct GpuRange {
    range: Range,
    external_id: Option<u64>,
}

#[derive(Default)]
struct Reader {
    strings: Strings,
    kernels: Vec<Kernel>,
    api_calls: Vec<ApiCall>,
    ranges: Vec<Range>,
    gpu_ranges: Vec<GpuRange>,
    mem_ops: Vec<MemOp>,
    /// Operator calls, their texts in `op_strings` until the other events' names are interned
    /// (so that those keep the ids they have without operators).
    ops: Vec<OpCall>,
    op_strings: Strings,
    thread_names: HashMap<(u32, u32), crate::model::trace::StrId>,
    /// External id of each CPU annotation -> its process.
    annotation_pids: HashMap<u64, u32>,
    /// Ids given to non-numeric `pid`/`tid` strings.
    synthetic_ids: HashMap<String, u32>,
    seen: Vec<&'static str>,
}

impl Reader {
    fn event(&mut self, e: &RawEvent<'_>) {
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
        let args: Args = e
            .args
            .and_then(|a| serde_json::from_str(a.get()).ok())
            .unwrap_or_default();
        let name = e.name.as_deref().unwrap_or("");
        let pid = self.id(e.pid);
        let tid = self.id(e.tid);
        let correlation_id = args.correlation.as_ref().and_then(as_u64).unwrap_or(0);
        let device = args
            .device
            .as_ref()
            .and_then(as_u64)
            .map_or(pid, |d| d as u32);
        let stream = args
            .stream
            .as_ref()
            .and_then(as_u64)
            .map_or(tid, |s| s as u32);
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
                let short = self.strings.intern(&short_name(name));
                let shared = args.shared_memory.as_ref().and_then(as_u64).unwrap_or(0);
                self.kernels.push(Kernel {
                    span,
                    name: name_id,
                    short_name: short,
                    mangled_name: None,
                    grid: dims(args.grid.as_ref()),
                    block: dims(args.block.as_ref()),
                    registers_per_thread: args.registers.as_ref().and_then(as_u64).unwrap_or(0)
                        as u32,
                    static_shared_memory: shared as u32,
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
                    bytes: Bytes(args.bytes.as_ref().and_then(as_u64).unwrap_or(0)),
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
                if let Some(ext) = args.external_id.as_ref().and_then(as_u64) {
                    self.annotation_pids.insert(ext, pid);
                }
                let name = self.strings.intern(name);
                self.ranges
                    .push(Range::push_pop(name, pid, tid, start, end));
            }
            Category::CpuOp => {
                let mut text = |v: &Option<Value>| match v {
                    Some(v @ Value::Array(_)) => Some(self.op_strings.intern(&v.to_string())),
                    _ => None,
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
                    flops: args.flops.as_ref().and_then(as_u64).filter(|&f| f > 0),
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
                    external_id: args.external_id.as_ref().and_then(as_u64),
                });
            }
        }
    }

    fn note(&mut self, cat: &'static str) {
        if !self.seen.contains(&cat) {
            self.seen.push(cat);
        }
    }

    fn metadata_event(&mut self, e: &RawEvent<'_>) {
        if e.name.as_deref() != Some("thread_name") {
            return;
        }
        let args: Args = e
            .args
            .and_then(|a| serde_json::from_str(a.get()).ok())
            .unwrap_or_default();
        if let Some(Value::String(name)) = args.name {
            let key = (self.id(e.pid), self.id(e.tid));
            let name = self.strings.intern(name.trim());
            self.thread_names.insert(key, name);
        }
    }

    /// A `pid` or `tid`: a number, a numeric string, a string ending in a number (`stream 7`), or
    /// else a stable made-up id counting down from `u32::MAX`.
    fn id(&mut self, raw: Option<&RawValue>) -> u32 {
        let Some(raw) = raw else { return 0 };
        let text = raw.get().trim();
        if let Ok(n) = text.parse::<i64>() {
            return n as u32;
        }
        let Ok(s) = serde_json::from_str::<Cow<'_, str>>(text) else {
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

    fn finish(mut self, path: &Path, top: &BTreeMap<String, &RawValue>) -> Trace {
        // GPU work belongs to the process that launched it.
        let launcher: HashMap<u64, u32> = self
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
            if key == "traceEvents" || key == "deviceProperties" {
                continue;
            }
            metadata.insert(key.clone(), value_text(raw));
        }
        let schema_version = top.get("schemaVersion").map(|v| value_text(v));
        let missing = ANALYSED_CATEGORIES
            .iter()
            .filter(|c| !self.seen.contains(c))
            .map(|c| c.to_string())
            .collect();
        let rank = top
            .get("distributedInfo")
            .and_then(|raw| serde_json::from_str::<Value>(raw.get()).ok())
            .and_then(|info| info.get("rank").and_then(as_u64))
            .and_then(|r| u32::try_from(r).ok());
        let clock_origin_ns = top
            .get("baseTimeNanoseconds")
            .and_then(|raw| serde_json::from_str::<Value>(raw.get()).ok())
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
            .and_then(|raw| serde_json::from_str::<Vec<DeviceProperties>>(raw.get()).ok())
            .unwrap_or_default()
            .into_iter()
            .map(DeviceProperties::into_gpu)
            .collect();
        let ids: Vec<StrId> = (0..self.op_strings.len())
            .map(|i| self.strings.intern(self.op_strings.get(StrId(i as u32))))
            .collect();
        let id = |s: StrId| ids[s.0 as usize];
        trace.ops = (self.ops.into_iter())
            .map(|mut o| {
                o.name = id(o.name);
                o.shapes = o.shapes.map(id);
                o.types = o.types.map(id);
                o.concrete = o.concrete.map(id);
                o
            })
            .collect();
        trace.strings = self.strings;
        trace.kernels = self.kernels;
        trace.api_calls = self.api_calls;
        trace.ranges = self.ranges;
        trace.mem_ops = self.mem_ops;
        trace.thread_names = self.thread_names;
        trace.sort();
        trace
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
fn value_text(raw: &RawValue) -> String {
    match serde_json::from_str::<Value>(raw.get()) {
        Ok(Value::String(s)) => s,
        Ok(v) => v.to_string(),
        Err(_) => raw.get().to_owned(),
    }
}

/// A non-negative integer from a JSON number or numeric string.
fn as_u64(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n
            .as_u64()
            .or_else(|| n.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64)),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// `[x, y, z]` grid or block dimensions.
fn dims(v: Option<&Value>) -> [u32; 3] {
    let mut out = [0; 3];
    if let Some(Value::Array(items)) = v {
        for (o, item) in out.iter_mut().zip(items) {
            *o = as_u64(item).unwrap_or(0) as u32;
        }
    }
    out
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

/// Microseconds written as JSON (a number or a numeric string) to nanoseconds, exactly.
fn micros(raw: &RawValue) -> Option<i64> {
    let text = raw.get().trim();
    let text = text
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(text);
    micros_text_to_nanos(text.trim())
}

/// Parse a decimal number of microseconds (`4457142100982.187`, `12`, `1.5e3`) into nanoseconds,
/// rounding half away from zero, without going through a float.
pub fn micros_text_to_nanos(text: &str) -> Option<i64> {
    let (negative, rest) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let (mantissa_text, exponent) = match rest.find(['e', 'E']) {
        Some(i) => (&rest[..i], rest[i + 1..].parse::<i32>().ok()?),
        None => (rest, 0),
    };
    let (int_part, frac_part) = match mantissa_text.find('.') {
        Some(i) => (&mantissa_text[..i], &mantissa_text[i + 1..]),
        None => (mantissa_text, ""),
    };
    if int_part.is_empty() && frac_part.is_empty() {
        return None;
    }
    if !int_part.bytes().all(|b| b.is_ascii_digit())
        || !frac_part.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    // Digits past the 18th decimal cannot change a nanosecond; dropping them keeps the mantissa
    // inside an i128.
    let frac_part = &frac_part[..frac_part.len().min(18)];
    let int_part = int_part.trim_start_matches('0');
    if int_part.len() > 20 {
        return None;
    }
    let mut mantissa: i128 = 0;
    for b in int_part.bytes().chain(frac_part.bytes()) {
        mantissa = mantissa * 10 + i128::from(b - b'0');
    }
    // value = mantissa * 10^(exponent - frac digits) µs = mantissa * 10^power ns.
    let power = exponent - frac_part.len() as i32 + 3;
    let nanos = if power >= 0 {
        let scale = 10i128.checked_pow(power as u32)?;
        mantissa.checked_mul(scale)?
    } else if -power > 38 {
        0
    } else {
        let scale = 10i128.pow((-power) as u32);
        (mantissa + scale / 2) / scale
    };
    let nanos = if negative { -nanos } else { nanos };
    i64::try_from(nanos).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn microseconds_become_exact_nanoseconds() {
        // As f64, 4457142100982.187 µs * 1000 is 4457142100982186.5: a float path is off by one.
        assert_eq!(
            micros_text_to_nanos("4457142100982.187"),
            Some(4_457_142_100_982_187)
        );
        assert_eq!(micros_text_to_nanos("2.464"), Some(2464));
        assert_eq!(micros_text_to_nanos("12"), Some(12_000));
        assert_eq!(micros_text_to_nanos("0.0005"), Some(1));
        assert_eq!(micros_text_to_nanos("0.0004999"), Some(0));
        assert_eq!(micros_text_to_nanos("-1.5"), Some(-1500));
        assert_eq!(micros_text_to_nanos("1.5e3"), Some(1_500_000));
        assert_eq!(micros_text_to_nanos("2E-3"), Some(2));
        assert_eq!(micros_text_to_nanos("abc"), None);
        assert_eq!(micros_text_to_nanos("."), None);
        assert_eq!(micros_text_to_nanos("1e40"), None);
    }

    #[test]
    fn minimal_traces_parse_with_string_ids_and_without_metadata() {
        let json = br#"[
          {"ph": "X", "cat": "cuda_runtime", "name": "hipLaunchKernel", "pid": "7", "tid": 9,
           "ts": 10.5, "dur": 1, "args": {"correlation": 3}},
          {"ph": "X", "cat": "Kernel", "name": "void foo<int>(int)", "pid": 0, "tid": "stream 4",
           "ts": 11, "dur": 2.25, "args": {"correlation": 3, "grid": [2, 1, 1]}},
          {"ph": "X", "cat": "Memcpy", "name": "CopyHostToDevice", "pid": 0, "tid": 4,
           "ts": 14, "dur": 1, "args": {"bytes": "64"}},
          {"ph": "X", "cat": "Trace", "name": "x", "pid": "Spans", "tid": "PyTorch Profiler",
           "ts": 0, "dur": 100}
        ]"#;
        let t = parse(Path::new("t.json"), json).unwrap();
        assert_eq!(t.kernels.len(), 1);
        let k = &t.kernels[0];
        assert_eq!((k.span.start, k.span.end), (Nanos(11_000), Nanos(13_250)));
        assert_eq!((k.span.device, k.span.stream, k.span.pid), (0, 4, 7));
        assert_eq!(t.name(k.short_name), "foo");
        assert_eq!(k.grid, [2, 1, 1]);
        assert_eq!(t.api_calls[0].kind, ApiKind::Runtime);
        assert_eq!(t.mem_ops[0].kind, MemOpKind::HostToDevice);
        assert_eq!(t.mem_ops[0].bytes, Bytes(64));
        assert_eq!(
            t.mem_ops[0].span.pid, 7,
            "no launching call: the main process"
        );
        assert!(t.source.missing.contains(&"user_annotation".to_owned()));
    }

    #[test]
    fn cpu_ops_keep_their_shapes_and_leave_other_names_their_ids() {
        let json = br#"[
          {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 9, "ts": 1, "dur": 4,
           "args": {"External id": 3, "Input Dims": [[4, 8], [8, 2]],
                    "Input type": ["float", "float"], "Concrete Inputs": ["", ""], "flops": 128}},
          {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 7, "tid": 9,
           "ts": 2, "dur": 1, "args": {"correlation": 5, "External id": 3}},
          {"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": 7, "tid": 9, "ts": 6,
           "dur": 1, "args": {"External id": 4}}
        ]"#;
        let t = parse(Path::new("t.json"), json).unwrap();
        assert_eq!(t.ops.len(), 2);
        let mm = &t.ops[0];
        assert_eq!(t.name(mm.name), "aten::mm");
        assert_eq!(
            (mm.start, mm.end, mm.pid, mm.tid),
            (Nanos(1000), Nanos(5000), 7, 9)
        );
        assert_eq!(mm.shapes.map(|s| t.name(s)), Some("[[4,8],[8,2]]"));
        assert_eq!(mm.types.map(|s| t.name(s)), Some(r#"["float","float"]"#));
        assert_eq!(mm.flops, Some(128));
        assert_eq!(t.ops[1].shapes, None);
        // The operators' names come after every other name: the others keep their ids.
        assert_eq!(t.api_calls[0].name, StrId(0));
        assert!(!t.source.missing.contains(&"cpu_op".to_owned()));
    }

    #[test]
    fn json_that_is_not_a_trace_is_refused() {
        let err = parse(Path::new("x.json"), br#"{"a": 1}"#).unwrap_err();
        assert!(err.to_string().contains("traceEvents"), "{err}");
        let err = parse(Path::new("x.json"), b"{\"traceEvents\": 3}").unwrap_err();
        assert!(err.to_string().contains("x.json"), "{err}");
    }
}
