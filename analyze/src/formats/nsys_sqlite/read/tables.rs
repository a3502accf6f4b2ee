//! The small tables of an nsys export (metadata, NVTX events, memory operations, graph
//! executions, GPUs, thread names) read as stored, and the rows of every table turned into the
//! model in one pass ([`build`]), for the loader and the streaming reader alike.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use rusqlite::types::ValueRef;
use rusqlite::Connection;

use super::super::column::*;
use super::super::event_type::*;
use super::super::metadata::{EXPORT_PRODUCT_VERSION, EXPORT_SCHEMA_VERSION};
use super::super::table::*;
use super::super::{copy_kind, split_global_tid};
use super::{int, metadata, value_to_string, Names, RawName, Schema, ANALYSED_TABLES};
use crate::error::{Error, Result};
use crate::model::trace::{
    ApiCall, Bytes, Gpu, GraphExec, Kernel, Mark, MemOp, MemOpKind, Nanos, Range, RangeStyle,
    Source, SourceFormat, Span, StrId, Trace,
};

/// Kernels as read, their names still nsys string ids: each name field holds the id as a
/// [`StrId`] until [`RawKernels::resolve`] maps it. Names that are not small ids (inline text,
/// NULL, ids beyond `u32`) are kept aside in `odd`. Building the model's kernels directly, rather
/// than a raw copy first, halves the memory the largest table needs while it is read.
#[derive(Default)]
pub(super) struct RawKernels {
    pub(super) kernels: Vec<Kernel>,
    /// (kernel index, field: 0 name, 1 short name, 2 mangled name, value).
    pub(super) odd: Vec<(usize, u8, RawName)>,
}

impl RawKernels {
    /// The value to store in a name field now: a small id as a placeholder, or `None` with the
    /// name set aside.
    pub(super) fn placeholder(&mut self, index: usize, field: u8, raw: RawName) -> Option<StrId> {
        match raw {
            RawName::Id(id) if (0..=u32::MAX as i64).contains(&id) => Some(StrId(id as u32)),
            // A missing mangled name is the common case and needs nothing set aside.
            RawName::None if field == 2 => None,
            other => {
                self.odd.push((index, field, other));
                None
            }
        }
    }

    /// Map every name to the interned string.
    fn resolve(self, names: &mut Names) -> Vec<Kernel> {
        let mut kernels = self.kernels;
        let mut odd = self.odd.into_iter().peekable();
        for (i, k) in kernels.iter_mut().enumerate() {
            let raw = [Some(k.name), Some(k.short_name), k.mangled_name];
            let mut set_aside: [Option<Option<StrId>>; 3] = [None; 3];
            while let Some((_, field, value)) = odd.next_if(|o| o.0 == i) {
                set_aside[field as usize] = Some(names.name(&value));
            }
            let mut fields = [None; 3];
            for f in 0..3 {
                fields[f] = match set_aside[f] {
                    Some(v) => v,
                    None => raw[f].map(|id| names.id(id.0 as i64)),
                };
            }
            let name = fields[0].unwrap_or_else(|| names.strings.intern("<unnamed kernel>"));
            k.name = name;
            k.short_name = fields[1].unwrap_or(name);
            k.mangled_name = fields[2];
        }
        kernels
    }
}

struct RawNvtx {
    start: i64,
    end: Option<i64>,
    event_type: i64,
    text: Option<String>,
    text_id: Option<i64>,
    global_tid: i64,
    end_global_tid: Option<i64>,
    domain: i64,
}

/// Where a capture stands among others: its session's start as Unix time, and the rank the
/// profiled program was given and the number of ranks (`RANK` and `WORLD_SIZE` in the environment
/// nsys recorded: torchrun's and most launchers' variables), where the export has them.
#[derive(Default)]
pub(super) struct Origin {
    clock_ns: Option<i64>,
    pub(super) rank: Option<u32>,
    pub(super) world_size: Option<u32>,
}

impl Origin {
    pub(super) fn read(conn: &Connection, schema: &Schema) -> rusqlite::Result<Origin> {
        let mut origin = Origin::default();
        if schema.has(TARGET_INFO_SESSION_START_TIME) {
            let sql = format!("SELECT {UTC_EPOCH_NS} FROM {TARGET_INFO_SESSION_START_TIME}");
            let mut stmt = conn.prepare(&sql)?;
            let mut rows = stmt.query([])?;
            if let Some(r) = rows.next()? {
                origin.clock_ns = r.get::<_, Option<i64>>(0).ok().flatten();
            }
        }
        if schema.has(TARGET_INFO_SYSTEM_ENV) {
            let sql = format!(
                "SELECT {VALUE} FROM {TARGET_INFO_SYSTEM_ENV} WHERE {NAME} = 'DeviceEnvironment'"
            );
            let mut stmt = conn.prepare(&sql)?;
            let mut rows = stmt.query([])?;
            while let Some(r) = rows.next()? {
                let Ok(Some(env)) = r.get::<_, Option<String>>(0) else {
                    continue;
                };
                let var = |name: &str| {
                    (env.split(';'))
                        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                        .and_then(|v| v.trim().parse().ok())
                };
                origin.rank = var("RANK");
                origin.world_size = var("WORLD_SIZE");
                if origin.rank.is_some() {
                    break;
                }
            }
        }
        Ok(origin)
    }
}

/// Everything but the kernels; API calls already resolved against the string table.
pub(super) struct RawRest {
    names: Names,
    metadata: BTreeMap<String, String>,
    run: BTreeMap<String, String>,
    origin: Origin,
    api: Vec<ApiCall>,
    nvtx: Vec<RawNvtx>,
    mem_ops: Vec<MemOp>,
    graph_execs: Vec<GraphExec>,
    gpus: Vec<Gpu>,
    thread_names: Vec<(i64, i64)>,
}

impl RawRest {
    /// Everything but the kernels around `names` and the API calls `api`: the metadata, the
    /// NVTX events (when `nvtx`), memory operations (when `mem_ops`), graph executions, GPUs
    /// and thread names.
    pub(super) fn read(
        conn: &Connection,
        schema: &Schema,
        names: Names,
        api: Vec<ApiCall>,
        nvtx: bool,
        mem_ops: bool,
    ) -> rusqlite::Result<RawRest> {
        let (metadata, run) = metadata(conn, schema)?;
        Ok(RawRest {
            names,
            metadata,
            run,
            origin: Origin::read(conn, schema)?,
            api,
            nvtx: if nvtx {
                read_nvtx(conn, schema)?
            } else {
                Vec::new()
            },
            mem_ops: if mem_ops {
                read_mem_ops(conn, schema)?
            } else {
                Vec::new()
            },
            graph_execs: read_graph_execs(conn, schema)?,
            gpus: read_gpus(conn, schema)?,
            thread_names: read_thread_names(conn, schema)?,
        })
    }
}

fn read_nvtx(conn: &Connection, schema: &Schema) -> rusqlite::Result<Vec<RawNvtx>> {
    if !schema.has(NVTX_EVENTS) {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT {START}, {END}, {EVENT_TYPE}, {}, {}, {GLOBAL_TID}, {}, {} FROM {NVTX_EVENTS} \
         WHERE {EVENT_TYPE} IN ({NVTX_MARK}, {NVTX_PUSH_POP_RANGE}, {NVTX_START_END_RANGE}, \
         {NVTXT_MARK}, {NVTXT_PUSH_POP_RANGE}, {NVTXT_START_END_RANGE}, {NVTX_DOMAIN_CREATE})",
        schema.opt(NVTX_EVENTS, TEXT),
        schema.opt(NVTX_EVENTS, TEXT_ID),
        schema.opt(NVTX_EVENTS, END_GLOBAL_TID),
        schema.opt(NVTX_EVENTS, DOMAIN_ID),
    );
    let mut stmt = conn.prepare(&sql)?;
    let mut rows = stmt.query([])?;
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        let text = match r.get_ref(3)? {
            ValueRef::Text(t) => Some(String::from_utf8_lossy(t).into_owned()),
            _ => None,
        };
        out.push(RawNvtx {
            start: int(r, 0)?,
            end: r.get(1)?,
            event_type: int(r, 2)?,
            text,
            text_id: r.get(4)?,
            global_tid: int(r, 5)?,
            end_global_tid: r.get(6)?,
            domain: int(r, 7)?,
        });
    }
    Ok(out)
}

fn read_mem_ops(conn: &Connection, schema: &Schema) -> rusqlite::Result<Vec<MemOp>> {
    let tables = [(MEMCPY, COPY_KIND), (MEMSET, "NULL")];
    // Counted first (SQLite counts a table's rows from its pages' headers), so that the list is
    // the size of the rows, not up to twice that.
    let mut rows = 0;
    for (table, _) in tables.iter().filter(|t| schema.has(t.0)) {
        let n: i64 = conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))?;
        rows += n.max(0) as usize;
    }
    let mut out = Vec::with_capacity(rows);
    for (table, kind_col) in tables {
        if !schema.has(table) {
            continue;
        }
        let sql = format!(
            "SELECT {span}, {BYTES}, {kind_col} FROM {table}",
            span = span_columns()
        );
        let mut stmt = conn.prepare(&sql)?;
        let rows = stmt.query_map([], |r| {
            let kind = match r.get::<_, Option<i64>>(7)? {
                None => MemOpKind::Memset,
                Some(k) => mem_op_kind(k),
            };
            Ok(MemOp {
                span: span(r)?,
                kind,
                bytes: Bytes(int(r, 6)?.max(0) as u64),
            })
        })?;
        for op in rows {
            out.push(op?);
        }
    }
    Ok(out)
}

/// The columns of a GPU record's [`Span`], first in a SELECT that [`span`] reads.
fn span_columns() -> String {
    [START, END, DEVICE_ID, STREAM_ID, CORRELATION_ID, GLOBAL_PID].join(", ")
}

/// The span of a row whose first columns are [`span_columns`].
fn span(r: &rusqlite::Row<'_>) -> rusqlite::Result<Span> {
    Ok(Span {
        start: Nanos(int(r, 0)?),
        end: Nanos(int(r, 1)?),
        device: int(r, 2)? as u32,
        stream: int(r, 3)? as u32,
        correlation_id: int(r, 4)? as u64,
        pid: split_global_tid(int(r, 5)?).0,
    })
}

/// Graph executions traced as a whole, when the export has them (default graph tracing).
fn read_graph_execs(conn: &Connection, schema: &Schema) -> rusqlite::Result<Vec<GraphExec>> {
    if !schema.has(GRAPH_TRACE) {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT {span}, {GRAPH_ID}, {GRAPH_EXEC_ID} FROM {GRAPH_TRACE}",
        span = span_columns()
    );
    let mut stmt = conn.prepare(&sql)?;
    let rows = stmt.query_map([], |r| {
        Ok(GraphExec {
            span: span(r)?,
            graph_id: int(r, 6)? as u64,
            graph_exec_id: int(r, 7)? as u64,
        })
    })?;
    rows.collect()
}

fn read_gpus(conn: &Connection, schema: &Schema) -> rusqlite::Result<Vec<Gpu>> {
    const T: &str = TARGET_INFO_GPU;
    if !schema.has(T) {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT {}, {}, {}, {}, {}, {} FROM {T}",
        schema.pick(T, &[ID, DEVICE_ID]),
        schema.pick(T, &[NAME]),
        schema.pick(T, &[TOTAL_MEMORY]),
        schema.pick(T, &[SM_COUNT]),
        schema.pick(T, &[COMPUTE_MAJOR]),
        schema.pick(T, &[COMPUTE_MINOR]),
    );
    let mut stmt = conn.prepare(&sql)?;
    let gpus = stmt.query_map([], |r| {
        let major = r.get::<_, Option<i64>>(4)?;
        let minor = r.get::<_, Option<i64>>(5)?;
        Ok(Gpu {
            id: r.get::<_, Option<i64>>(0)?.unwrap_or(0) as u32,
            name: value_to_string(r.get_ref(1)?),
            total_memory: r.get::<_, Option<i64>>(2)?.map(|b| Bytes(b.max(0) as u64)),
            sm_count: r.get::<_, Option<i64>>(3)?.map(|n| n as u32),
            compute_capability: major.zip(minor).map(|(a, b)| (a as u32, b as u32)),
        })
    })?;
    gpus.collect()
}

fn read_thread_names(conn: &Connection, schema: &Schema) -> rusqlite::Result<Vec<(i64, i64)>> {
    if !schema.has(THREAD_NAMES) {
        return Ok(Vec::new());
    }
    let mut stmt = conn.prepare(&format!(
        "SELECT {NAME_ID}, {GLOBAL_TID} FROM {THREAD_NAMES}"
    ))?;
    let rows = stmt.query_map([], |r| Ok((int(r, 0)?, int(r, 1)?)))?;
    rows.collect()
}

/// `ENUM_CUDA_MEMCPY_OPER`.
fn mem_op_kind(k: i64) -> MemOpKind {
    match k {
        copy_kind::HOST_TO_DEVICE => MemOpKind::HostToDevice,
        copy_kind::DEVICE_TO_HOST => MemOpKind::DeviceToHost,
        copy_kind::DEVICE_TO_DEVICE => MemOpKind::DeviceToDevice,
        copy_kind::HOST_TO_HOST => MemOpKind::HostToHost,
        copy_kind::PEER_TO_PEER => MemOpKind::PeerToPeer,
        other => MemOpKind::OtherCopy(other.clamp(0, 255) as u8),
    }
}

/// Turn the rows as read into the model, within the bounds of [`crate::model::bounds`].
pub(super) fn build(
    path: &Path,
    schema: &Schema,
    kernels: RawKernels,
    rest: RawRest,
) -> Result<Trace> {
    build_keeping_names(path, schema, kernels, rest).map(|(trace, _)| trace)
}

/// [`build`], and the string table of the export, its interned strings now the trace's.
pub(super) fn build_keeping_names(
    path: &Path,
    schema: &Schema,
    kernels: RawKernels,
    rest: RawRest,
) -> Result<(Trace, Names)> {
    let missing = ANALYSED_TABLES
        .iter()
        .filter(|t| !schema.has(t))
        .map(|t| t.to_string())
        .collect();
    let metadata = rest.metadata;
    let source = Source {
        path: path.to_owned(),
        format: SourceFormat::NsysSqlite,
        schema_version: metadata.get(EXPORT_SCHEMA_VERSION).cloned(),
        product_version: metadata.get(EXPORT_PRODUCT_VERSION).cloned(),
        metadata,
        run: rest.run,
        missing,
        rank: rest.origin.rank,
        clock_origin_ns: rest.origin.clock_ns,
    };
    let mut trace = Trace::empty(source);
    let mut names = rest.names;
    trace.kernels = kernels.resolve(&mut names);
    trace.api_calls = rest.api;
    let (ranges, open_ranges, marks) = nvtx(&mut names, rest.nvtx);
    trace.ranges = ranges;
    trace.open_ranges = open_ranges;
    trace.marks = marks;
    trace.mem_ops = rest.mem_ops;
    trace.graph_execs = rest.graph_execs;
    trace.gpus = rest.gpus;
    trace.thread_names = rest
        .thread_names
        .into_iter()
        .map(|(name, gtid)| (split_global_tid(gtid), names.id(name)))
        .collect();
    trace.strings = std::mem::take(&mut names.strings);
    trace.sort();
    crate::model::bounds::check(&mut trace).map_err(|message| Error::Malformed {
        path: path.to_owned(),
        message,
    })?;
    Ok((trace, names))
}

/// NVTX ranges (closed, then still open) and marks. Text is `coalesce(StringIds.value, text, '')`
/// as in nsys's reports; domains are looked up by (process, domain id).
fn nvtx(names: &mut Names, raw: Vec<RawNvtx>) -> (Vec<Range>, Vec<Range>, Vec<Mark>) {
    fn text_of(names: &mut Names, r: &RawNvtx) -> StrId {
        match r.text_id {
            Some(id) if names.text(id).is_some() => names.id(id),
            _ => names.strings.intern(r.text.as_deref().unwrap_or("")),
        }
    }
    // The first domain-create event of each (process, domain) names the domain.
    let mut domains: HashMap<(u32, i64), (i64, StrId)> = HashMap::new();
    for r in raw.iter().filter(|r| r.event_type == NVTX_DOMAIN_CREATE) {
        let name = text_of(names, r);
        let key = (split_global_tid(r.global_tid).0, r.domain);
        let e = domains.entry(key).or_insert((r.start, name));
        if r.start < e.0 {
            *e = (r.start, name);
        }
    }
    let is_range = |t: i64| {
        matches!(
            t,
            NVTX_PUSH_POP_RANGE
                | NVTX_START_END_RANGE
                | NVTXT_PUSH_POP_RANGE
                | NVTXT_START_END_RANGE
        )
    };
    // Where a range never ended, nsys's reports end it at the last range timestamp.
    let last = raw
        .iter()
        .filter(|r| is_range(r.event_type))
        .map(|r| r.end.unwrap_or(r.start).max(r.start))
        .max()
        .unwrap_or(0);

    let mut ranges = Vec::new();
    let mut open_ranges = Vec::new();
    let mut marks = Vec::new();
    for r in &raw {
        let (pid, tid) = split_global_tid(r.global_tid);
        let domain = if r.domain == 0 {
            None
        } else {
            domains.get(&(pid, r.domain)).map(|d| d.1)
        };
        let style = match r.event_type {
            NVTX_PUSH_POP_RANGE | NVTXT_PUSH_POP_RANGE => RangeStyle::PushPop,
            NVTX_START_END_RANGE | NVTXT_START_END_RANGE => RangeStyle::StartEnd,
            NVTX_MARK | NVTXT_MARK => {
                marks.push(Mark {
                    time: Nanos(r.start),
                    name: text_of(names, r),
                    domain,
                    pid,
                    tid,
                });
                continue;
            }
            _ => continue,
        };
        let range = Range {
            start: Nanos(r.start),
            end: Nanos(r.end.unwrap_or(last)),
            style,
            name: text_of(names, r),
            domain,
            pid,
            tid,
            end_tid: r.end_global_tid.map(|g| split_global_tid(g).1),
        };
        if r.end.is_some() {
            ranges.push(range);
        } else {
            open_ranges.push(range);
        }
    }
    (ranges, open_ranges, marks)
}
