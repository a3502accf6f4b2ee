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
//! decimal text (never through a float) into exact nanoseconds, rounding half away from zero when a
//! file has more decimals. Times stay on the trace's own clock; `baseTimeNanoseconds`, when
//! present, is kept in [`crate::model::trace::Source::metadata`] (add it to get Unix time). GPU
//! events carry the device as `pid` and the stream as `tid`; their process is the one that made the
//! launching call (same correlation id), and a GPU annotation's process is that of the CPU
//! annotation with the same `External id`. Kineto names kernels as the GNU demangler does; the
//! short name is derived from that by nsys's rule ([`super::nsys_sqlite::short_name`]). Kineto
//! records only the sum of static and dynamic shared memory; it is stored as static shared memory.
//!
//! Reading: the text is read in blocks of 8 MiB ([`crate::formats::json_scan`]), through the gzip
//! decoder when compressed, the next block read while one is scanned, and never held whole: each
//! event is read from the block into the fields the model keeps (`event.rs`) and handed to a
//! reader (`reader.rs`), which builds the model as they come; a block's events are read in pieces
//! side by side, a reader each, taken in order into the trace's (`pieces.rs`). Memory is the model
//! plus two blocks (more only for one event longer than the gap before a block, up to 64 MiB);
//! the trace is refused once its model would not fit in the memory allowed ([`Limits`]). The
//! whole text is checked as JSON, nesting of any depth is walked without recursion, and anything
//! malformed is one error naming the file. What a field means (which
//! values count, which make the trace malformed) is what it meant to serde_json, which read these
//! traces before: `event.rs` says where.

mod event;
pub mod head;
mod pieces;
mod reader;

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::path::Path;

use crate::error::{Error, Result};
use crate::formats::gzip::{self, InflatedStream};
use crate::formats::json_scan::{Ahead, Cursor, Feed, Scan, Stop, Window};
use crate::formats::limits::Limits;
use crate::model::trace::Trace;
use crate::progress;
use crate::render::cells::format_bytes;
use pieces::Events;
use reader::Reader;

/// Domain given to `gpu_user_annotation` ranges, so they are told apart from the CPU ranges of
/// the same name.
pub const GPU_ANNOTATION_DOMAIN: &str = "gpu_user_annotation";

/// Categories whose absence is listed in [`crate::model::trace::Source::missing`].
const ANALYSED_CATEGORIES: &[&str] = &[
    "kernel",
    "cuda_runtime",
    "gpu_memcpy",
    "gpu_memset",
    "user_annotation",
];

/// The blocks the text is read in (two held: one read while the other is scanned), the room
/// before a block for the end of the last one (the event it cut), and the most the window grows
/// to hold one event (or one top-level value): the memory a trace costs beyond its model.
const BLOCK: usize = 8 << 20;
const GAP: usize = 256 << 10;
const MAX_VALUE: usize = 64 << 20;

/// The memory an analysis of a loaded trace takes, as a multiple of what its model holds.
const ANALYSIS_FACTOR: u64 = 2;

/// Load a Kineto trace (plain or gzip-compressed), within the limits of the environment.
pub fn load(path: &Path) -> Result<Trace> {
    load_with(path, &Limits::from_env()?)
}

/// Load a Kineto trace (plain or gzip-compressed) within `limits`: the file is read a window at a
/// time (through the gzip decoder when compressed, within its inflation limit), and refused once
/// the model it fills would not fit in the memory allowed.
pub fn load_with(path: &Path, limits: &Limits) -> Result<Trace> {
    crate::formats::check_file(path)?;
    let budget = limits.memory_budget();
    if gzip::is_gzip(path)? {
        read(path, gzip::inflate_stream(path, limits)?, budget)
    } else {
        read(path, PlainFile::open(path)?, budget)
    }
}

/// Parse the bytes of a Kineto trace; `path` is only used to name the file in errors.
pub fn parse(path: &Path, bytes: &[u8]) -> Result<Trace> {
    read(path, bytes, None)
}

/// A file read as it is, counted for progress.
struct PlainFile<'p> {
    path: &'p Path,
    file: File,
    counter: progress::Counter,
    _task: progress::Task,
}

impl<'p> PlainFile<'p> {
    fn open(path: &'p Path) -> Result<PlainFile<'p>> {
        let file = File::open(path).map_err(Error::io(path))?;
        let size = file.metadata().map_err(Error::io(path))?.len();
        let task = progress::begin(
            || format!("reading {}", path.display()),
            Some(size),
            progress::Unit::Bytes,
        );
        Ok(PlainFile {
            path,
            file,
            counter: progress::Counter::new(),
            _task: task,
        })
    }
}

impl Feed for PlainFile<'_> {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize> {
        loop {
            match self.file.read(buf) {
                Ok(n) => {
                    self.counter.add(n as u64);
                    return Ok(n);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(Error::Malformed {
                        path: self.path.to_owned(),
                        message: format!("could not be read: {e}"),
                    })
                }
            }
        }
    }
}

impl Feed for InflatedStream {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize> {
        self.read_checked(buf)
    }
}

/// Read a trace from `feed`, refused once its model passes `budget` (bytes, and where that figure
/// comes from). Each block is scanned while the next is read.
fn read<F: Feed + Send>(
    path: &Path,
    mut feed: F,
    budget: Option<(u64, &'static str)>,
) -> Result<Trace> {
    let malformed = |message: String| Error::Malformed {
        path: path.to_owned(),
        message,
    };
    let mut ahead = Ahead::new(BLOCK, GAP);
    let mut window = Window::new(MAX_VALUE);
    window.take(&mut ahead, &mut feed)?;
    let mut doc = Document::default();
    let mut reader = Reader::default();
    loop {
        let (bytes, eof) = window.bytes();
        let mut cursor = Cursor::new(bytes, eof);
        let mut done = 0;
        let (walked, read_ahead) = rayon::join(
            || doc.walk(&mut cursor, &mut reader, &mut done),
            || match eof {
                true => Ok(()),
                false => ahead.read(&mut feed),
            },
        );
        if let Err(Stop::Bad { at, what }) = walked {
            let at = window.offset(at);
            return Err(malformed(format!(
                "not a valid Kineto trace: {what} (byte {at})"
            )));
        }
        read_ahead?;
        window.consume(done);
        check_memory(path, &reader, budget, window.offset(0))?;
        if walked.is_ok() {
            break;
        }
        if !window.take(&mut ahead, &mut feed)? {
            let at = window.offset(0);
            return Err(malformed(format!(
                "not a valid Kineto trace: an event or value longer than {} (byte {at})",
                format_bytes(MAX_VALUE as u64)
            )));
        }
    }
    if !doc.has_events {
        return Err(malformed(
            "JSON without a `traceEvents` array: not a Kineto/Chrome trace".into(),
        ));
    }
    let mut trace = reader.finish(path, &doc.top);
    crate::model::bounds::check(&mut trace).map_err(malformed)?;
    Ok(trace)
}

/// Refuse the trace when what its model holds, with the analysis to come, passes the budget.
fn check_memory(
    path: &Path,
    reader: &Reader,
    budget: Option<(u64, &'static str)>,
    read: u64,
) -> Result<()> {
    let Some((budget, budget_from)) = budget else {
        return Ok(());
    };
    let held = reader.held();
    let needed = held.saturating_mul(ANALYSIS_FACTOR);
    if needed <= budget {
        return Ok(());
    }
    Err(Error::TooLargeForMemory {
        path: path.to_owned(),
        needed: format_bytes(needed),
        what: format!(
            "{} for the events of its first {}, about {ANALYSIS_FACTOR} times that once analysed",
            format_bytes(held),
            format_bytes(read)
        ),
        budget: format_bytes(budget),
        budget_from,
    })
}

/// Where the walk through the document stands, between two values.
#[derive(Clone, Copy, Default)]
enum Part {
    #[default]
    Start,
    /// In the top-level object, before its first member or after one.
    Members { first: bool },
    /// In the list of events, before its first or after one; `in_object`: the list is the value
    /// of the top-level object's `traceEvents`, else the document itself.
    Events { first: bool, in_object: bool },
    /// After the top-level value.
    End,
}

/// The walk through a trace's text: the top-level object's members (kept as their text) and the
/// events of `traceEvents`, handed to the reader one by one.
#[derive(Default)]
struct Document {
    part: Part,
    /// The top-level keys but `traceEvents`, with their values' text.
    top: BTreeMap<String, String>,
    has_events: bool,
}

impl Document {
    /// Walk the window: `Ok` at the end of the text, or where it stopped. `done` is set to the
    /// end of the last value walked, from which the walk goes on.
    fn walk(&mut self, c: &mut Cursor<'_>, reader: &mut Reader, done: &mut usize) -> Scan<()> {
        loop {
            match self.part {
                Part::Start => {
                    c.ws();
                    let part = match c.peek() {
                        Ok(b'{') => Part::Members { first: true },
                        Ok(b'[') => Part::Events {
                            first: true,
                            in_object: false,
                        },
                        Err(Stop::More) => return Err(Stop::More),
                        _ => return c.bad("not a JSON object or array"),
                    };
                    c.set_pos(c.pos() + 1);
                    self.part = part;
                    self.has_events = matches!(part, Part::Events { .. });
                }
                Part::Members { first } => {
                    let more = c.more(first, b'}')?;
                    if !more {
                        self.part = Part::End;
                    } else {
                        let at = c.pos();
                        let Some(key) = c.key()?.decode() else {
                            c.set_pos(at);
                            return c.bad("a key that is half a surrogate pair");
                        };
                        if key == "traceEvents" {
                            if self.has_events {
                                c.set_pos(at);
                                return c.bad("`traceEvents` given twice");
                            }
                            if c.peek()? != b'[' {
                                return c.bad("`traceEvents` is not a list of events");
                            }
                            c.set_pos(c.pos() + 1);
                            self.has_events = true;
                            self.part = Part::Events {
                                first: true,
                                in_object: true,
                            };
                        } else {
                            let value = c.value()?;
                            // Checked as JSON, so UTF-8.
                            let value = String::from_utf8_lossy(value).into_owned();
                            self.top.insert(key.into_owned(), value);
                            self.part = Part::Members { first: false };
                        }
                    }
                }
                Part::Events { first, in_object } => {
                    let base = c.pos();
                    let (events, first) =
                        pieces::read_events(c.rest(), c.ends_text(), first, reader).map_err(
                            |stop| match stop {
                                Stop::Bad { at, what } => Stop::Bad {
                                    at: base + at,
                                    what,
                                },
                                more => more,
                            },
                        )?;
                    match events {
                        Events::More { end } => {
                            *done = base + end;
                            self.part = Part::Events { first, in_object };
                            return Err(Stop::More);
                        }
                        Events::Closed { end } => {
                            c.set_pos(base + end);
                            self.part = if in_object {
                                Part::Members { first: false }
                            } else {
                                Part::End
                            };
                        }
                    }
                }
                Part::End => {
                    if !c.at_end()? {
                        return c.bad("text after the end of the JSON value");
                    }
                    *done = c.pos();
                    return Ok(());
                }
            }
            *done = c.pos();
        }
    }
}

/// Parse a decimal number of microseconds (`4457142100982.187`, `12`, `1.5e3`) into nanoseconds,
/// rounding half away from zero, without going through a float.
pub fn micros_text_to_nanos(text: &str) -> Option<i64> {
    if let Some(nanos) = plain_micros(text.as_bytes()) {
        return Some(nanos);
    }
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

/// [`micros_text_to_nanos`] of the text Kineto writes, quickly: up to 15 digits and at most
/// three decimals, which give whole nanoseconds; `None` for any other text.
pub(super) fn plain_micros(text: &[u8]) -> Option<i64> {
    let (negative, digits) = match text.split_first()? {
        (b'-', rest) => (true, rest),
        _ => (false, text),
    };
    let mut nanos: i64 = 0;
    let mut int_digits = 0;
    let mut decimals = None;
    for &b in digits {
        match (b, &mut decimals) {
            (b'0'..=b'9', None) => int_digits += 1,
            (b'0'..=b'9', Some(n)) => *n += 1,
            (b'.', None) => {
                decimals = Some(0);
                continue;
            }
            _ => return None,
        }
        // At most 15 + 3 digits are taken, so the sum below stays under 10^18.
        if int_digits > 15 || decimals.is_some_and(|n| n > 3) {
            return None;
        }
        nanos = nanos * 10 + i64::from(b - b'0');
    }
    let decimals = decimals.unwrap_or(0);
    if int_digits == 0
        || int_digits > 15
        || decimals > 3
        || (decimals == 0 && digits.ends_with(b"."))
    {
        return None;
    }
    nanos *= [1000, 100, 10, 1][decimals];
    Some(if negative { -nanos } else { nanos })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::trace::{ApiKind, Bytes, MemOpKind, Nanos, StrId};

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
        for text in [
            "1.",
            "-",
            "",
            "1.2345",
            "12345678901234567",
            "007.5",
            "-0.001",
            "1.5e3",
        ] {
            let quick = plain_micros(text.as_bytes());
            assert!(
                quick.is_none() || quick == micros_text_to_nanos(text),
                "{text}"
            );
        }
        assert_eq!(
            plain_micros(b"-4457142100982.18"),
            Some(-4_457_142_100_982_180)
        );
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
