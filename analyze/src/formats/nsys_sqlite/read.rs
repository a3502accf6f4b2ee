//! Nsight Systems SQLite exports (`nsys export --type sqlite`), read-only, into the model.
//!
//! Met so far: export schemas from the 2021 ones without any metadata table, through 2.9.1 and
//! 3.0-3.17 (`EXPORT_META_DATA`, 2022-2023), to 3.20.3 (`META_DATA_EXPORT`, 2024 on). Every table
//! is optional: a capture without CUDA tracing has no kernel table, one without NVTX has no
//! `NVTX_EVENTS`, and columns come and go between versions (`mangledName`, `greenContextId`), so
//! columns are looked up by name. NVTX text is either inline (`text`) or interned (`textId` into
//! `StringIds`); both occur in one file, and where a row has both the interned one wins, as in
//! nsys's reports. Domain names come from the domain-create events of the same process. A range
//! still open when the capture ended (no `end`) goes to [`Trace::open_ranges`], ending at the
//! export's last range timestamp, the end nsys's reports give it. CUDA graphs come two ways: with
//! nsys's default graph tracing each graph launch is one row of `CUPTI_ACTIVITY_KIND_GRAPH_TRACE`
//! (read into [`Trace::graph_execs`]) and the kernels inside are not traced; with
//! `--cuda-graph-trace=node` they are, each with its `graphNodeId`. `collect`'s own traces
//! ([`super::write`]) use this schema plus a `RUN_METADATA (name, value)` table.
//!
//! Rows are first read as they are stored (string ids unresolved) and then turned into the model
//! in one pass; the largest tables (kernels, API calls) are read from the file's pages in chunks
//! side by side ([`super::scan`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags, Row};

use super::column::*;
use super::event_type::*;
use super::metadata::{EXPORT_PRODUCT_VERSION, EXPORT_SCHEMA_VERSION};
use super::scan::Tables;
use super::table::*;
use super::{copy_kind, split_global_tid};
use crate::error::{Error, Result};
use crate::formats::limits::Limits;
use crate::model::trace::{
    ApiCall, ApiKind, Bytes, Gpu, GraphExec, Kernel, Mark, MemOp, MemOpKind, Nanos, Range,
    RangeStyle, Source, SourceFormat, StrId, Strings, Trace,
};
use crate::progress;

/// Tables whose presence marks a file as an nsys export.
const NSYS_TABLES: &[&str] = &[
    STRING_IDS,
    KERNEL,
    RUNTIME,
    NVTX_EVENTS,
    TARGET_INFO_GPU,
    META_DATA_EXPORT,
    EXPORT_META_DATA,
];

/// The tables the analyses read; absent ones are listed in [`Source::missing`].
pub const ANALYSED_TABLES: &[&str] = &[KERNEL, RUNTIME, NVTX_EVENTS, MEMCPY, MEMSET];

/// Open an export read-only: SQLite never writes to it, not even a journal.
pub fn open(path: &Path) -> Result<Connection> {
    crate::formats::check_file(path)?;
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|source| sqlite_err(path, source))?;
    Ok(conn)
}

fn sqlite_err(path: &Path, source: rusqlite::Error) -> Error {
    use rusqlite::ErrorCode::{DatabaseCorrupt, NotADatabase};
    match source.sqlite_error_code() {
        // Say what it means for the user's file: damaged, usually cut short.
        Some(DatabaseCorrupt | NotADatabase) => Error::Malformed {
            path: path.to_owned(),
            message: format!("the SQLite file is damaged or truncated ({source})"),
        },
        _ => Error::Sqlite {
            path: path.to_owned(),
            source,
        },
    }
}

/// Load an export into a [`Trace`], within the limits of the environment.
pub fn load(path: &Path) -> Result<Trace> {
    load_with(path, &Limits::from_env()?)
}

/// Load an export into a [`Trace`]; refused when it would not fit in the memory `limits` allow.
pub fn load_with(path: &Path, limits: &Limits) -> Result<Trace> {
    load_from(path, path, limits)
}

/// Load a gzip-compressed export, within the limits of the environment.
pub fn load_gz(path: &Path) -> Result<Trace> {
    load_gz_with(path, &Limits::from_env()?)
}

/// Load a gzip-compressed export: it is inflated into a temporary file (SQLite needs a file)
/// within `limits`, read, and the temporary file removed.
pub fn load_gz_with(path: &Path, limits: &Limits) -> Result<Trace> {
    let tmp = crate::formats::gzip::inflate_to_temp(path, limits, "sqlite")?;
    load_from(tmp.path(), path, limits)
}

/// Read the export stored at `db`; errors name `shown`, the file the user gave.
fn load_from(db: &Path, shown: &Path, limits: &Limits) -> Result<Trace> {
    let err = |e: rusqlite::Error| sqlite_err(shown, e);
    // Errors about a temporary copy name the file the user gave.
    let conn = open(db).map_err(|e| match e {
        Error::Sqlite { source, .. } => sqlite_err(shown, source),
        Error::Malformed { message, .. } => Error::Malformed {
            path: shown.to_owned(),
            message,
        },
        other => other,
    })?;
    let schema = Schema::read(&conn).map_err(err)?;
    if !NSYS_TABLES.iter().any(|t| schema.has(t)) {
        let mut found_tables: Vec<String> = schema.tables.iter().cloned().collect();
        found_tables.sort();
        return Err(Error::NotAnNsysExport {
            path: shown.to_owned(),
            found_tables,
        });
    }
    let rows = super::footprint::check(&conn, &schema.tables, shown, limits)?;
    let _task = progress::begin(
        || format!("reading {}", shown.display()),
        Some(rows),
        progress::Unit::Rows,
    );

    let pages = Tables::pages(db).map_err(err)?;
    let tables = Tables {
        conn: &conn,
        pages: pages.as_ref(),
    };
    let kernels = if schema.has(KERNEL) {
        read_kernels(&tables, &schema).map_err(err)?
    } else {
        RawKernels::default()
    };
    let rest = read_rest(&tables, &schema).map_err(err)?;
    let mut trace = build(shown, &schema, kernels, rest);
    crate::model::bounds::check(&mut trace).map_err(|message| Error::Malformed {
        path: shown.to_owned(),
        message,
    })?;
    Ok(trace)
}

/// The export's table names and, for tables whose columns vary between versions, their columns.
struct Schema {
    tables: HashSet<String>,
    columns: HashMap<&'static str, HashSet<String>>,
}

impl Schema {
    fn read(conn: &Connection) -> rusqlite::Result<Schema> {
        let mut stmt = conn.prepare("SELECT name FROM sqlite_master WHERE type = 'table'")?;
        let tables: HashSet<String> = stmt
            .query_map([], |r| r.get::<_, String>(0))?
            .collect::<rusqlite::Result<_>>()?;
        let mut columns = HashMap::new();
        for t in [KERNEL, NVTX_EVENTS, TARGET_INFO_GPU] {
            if tables.contains(t) {
                let mut stmt = conn.prepare(&format!("PRAGMA table_info(\"{t}\")"))?;
                let cols = stmt
                    .query_map([], |r| r.get::<_, String>(1))?
                    .collect::<rusqlite::Result<_>>()?;
                columns.insert(t, cols);
            }
        }
        Ok(Schema { tables, columns })
    }

    fn has(&self, table: &str) -> bool {
        self.tables.contains(table)
    }

    /// `column` if `table` has it, else `NULL`, for a SELECT list.
    fn opt(&self, table: &str, column: &str) -> String {
        if self.columns.get(table).is_some_and(|c| c.contains(column)) {
            column.to_owned()
        } else {
            "NULL".to_owned()
        }
    }

    /// The first of `names` that `table` has, else `NULL`.
    fn pick(&self, table: &str, names: &[&str]) -> String {
        names
            .iter()
            .find(|n| self.columns.get(table).is_some_and(|c| c.contains(**n)))
            .map_or("NULL".to_owned(), |n| n.to_string())
    }
}

/// A name column: a `StringIds` id, inline text, or nothing.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RawName {
    Id(i64),
    Text(String),
    None,
}

impl RawName {
    pub fn from(v: ValueRef<'_>) -> RawName {
        match v {
            ValueRef::Integer(id) => RawName::Id(id),
            ValueRef::Text(t) => RawName::Text(String::from_utf8_lossy(t).into_owned()),
            _ => RawName::None,
        }
    }
}

/// Kernels as read, their names still nsys string ids: each name field holds the id as a
/// [`StrId`] until [`RawKernels::resolve`] maps it. Names that are not small ids (inline text,
/// NULL, ids beyond `u32`) are kept aside in `odd`. Building the model's kernels directly, rather
/// than a raw copy first, halves the memory the largest table needs while it is read.
#[derive(Default)]
struct RawKernels {
    kernels: Vec<Kernel>,
    /// (kernel index, field: 0 name, 1 short name, 2 mangled name, value).
    odd: Vec<(usize, u8, RawName)>,
}

impl RawKernels {
    /// The value to store in a name field now: a small id as a placeholder, or `None` with the
    /// name set aside.
    fn placeholder(&mut self, index: usize, field: u8, raw: RawName) -> Option<StrId> {
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

/// Everything but the kernels; API calls already resolved against the string table.
struct RawRest {
    names: Names,
    metadata: BTreeMap<String, String>,
    run: BTreeMap<String, String>,
    api: Vec<ApiCall>,
    nvtx: Vec<RawNvtx>,
    mem_ops: Vec<MemOp>,
    graph_execs: Vec<GraphExec>,
    gpus: Vec<Gpu>,
    thread_names: Vec<(i64, i64)>,
}

/// An integer column that may be NULL (read as 0).
fn int(r: &Row<'_>, i: usize) -> rusqlite::Result<i64> {
    Ok(r.get::<_, Option<i64>>(i)?.unwrap_or(0))
}

fn read_kernels(tables: &Tables<'_>, schema: &Schema) -> rusqlite::Result<RawKernels> {
    let mangled = schema.opt(KERNEL, MANGLED_NAME);
    let registers = schema.opt(KERNEL, REGISTERS_PER_THREAD);
    let static_shared = schema.opt(KERNEL, STATIC_SHARED_MEMORY);
    let dynamic_shared = schema.opt(KERNEL, DYNAMIC_SHARED_MEMORY);
    let graph_node = schema.opt(KERNEL, GRAPH_NODE_ID);
    let columns = [
        START,
        END,
        DEVICE_ID,
        STREAM_ID,
        CORRELATION_ID,
        GLOBAL_PID,
        DEMANGLED_NAME,
        SHORT_NAME,
        &mangled,
        GRID_X,
        GRID_Y,
        GRID_Z,
        BLOCK_X,
        BLOCK_Y,
        BLOCK_Z,
        &registers,
        &static_shared,
        &dynamic_shared,
        &graph_node,
    ];
    let chunks = tables.scan(KERNEL, &columns, true, RawKernels::default, |out, r| {
        let i = out.kernels.len();
        let name = out.placeholder(i, 0, RawName::from(r.get(6)?));
        let short_name = out.placeholder(i, 1, RawName::from(r.get(7)?));
        let mangled_name = out.placeholder(i, 2, RawName::from(r.get(8)?));
        out.kernels.push(Kernel {
            start: Nanos(r.int(0)?),
            end: Nanos(r.int(1)?),
            device: r.int(2)? as u32,
            stream: r.int(3)? as u32,
            correlation_id: r.int(4)? as u64,
            pid: split_global_tid(r.int(5)?).0,
            // Placeholders until `resolve`; a set-aside name is filled in there.
            name: name.unwrap_or(StrId(0)),
            short_name: short_name.unwrap_or(StrId(0)),
            mangled_name,
            grid: [r.int(9)? as u32, r.int(10)? as u32, r.int(11)? as u32],
            block: [r.int(12)? as u32, r.int(13)? as u32, r.int(14)? as u32],
            registers_per_thread: r.int(15)? as u32,
            static_shared_memory: r.int(16)? as u32,
            dynamic_shared_memory: r.int(17)? as u32,
            graph_node_id: r.opt_int(18)?.map(|n| n as u64),
        });
        Ok(())
    })?;
    let mut out = RawKernels::default();
    for chunk in chunks {
        let base = out.kernels.len();
        out.kernels.extend(chunk.kernels);
        out.odd
            .extend(chunk.odd.into_iter().map(|(i, f, v)| (i + base, f, v)));
    }
    Ok(out)
}

fn read_rest(tables: &Tables<'_>, schema: &Schema) -> rusqlite::Result<RawRest> {
    let conn = tables.conn;
    let string_ids = if schema.has(STRING_IDS) {
        let mut stmt = conn.prepare(&format!("SELECT {ID}, {VALUE} FROM {STRING_IDS}"))?;
        let rows = stmt.query_map([], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, Option<String>>(1)?))
        })?;
        rows.map(|r| r.map(|(id, v)| (id, v.unwrap_or_default())))
            .collect::<rusqlite::Result<_>>()?
    } else {
        Vec::new()
    };
    let mut names = Names::new(string_ids);
    let metadata = if schema.has(META_DATA_EXPORT) {
        key_values(conn, META_DATA_EXPORT)?
    } else if schema.has(EXPORT_META_DATA) {
        key_values(conn, EXPORT_META_DATA)?
    } else {
        BTreeMap::new()
    };
    let run = if schema.has(RUN_METADATA) {
        key_values(conn, RUN_METADATA)?
    } else {
        BTreeMap::new()
    };
    let api = read_api(tables, schema, &mut names)?;
    Ok(RawRest {
        names,
        metadata,
        run,
        api,
        nvtx: read_nvtx(conn, schema)?,
        mem_ops: read_mem_ops(conn, schema)?,
        graph_execs: read_graph_execs(conn, schema)?,
        gpus: read_gpus(conn, schema)?,
        thread_names: read_thread_names(conn, schema)?,
    })
}

fn key_values(conn: &Connection, table: &str) -> rusqlite::Result<BTreeMap<String, String>> {
    let mut stmt = conn.prepare(&format!("SELECT {NAME}, {VALUE} FROM \"{table}\""))?;
    let rows = stmt.query_map([], |r| {
        Ok((
            value_to_string(r.get_ref(0)?),
            value_to_string(r.get_ref(1)?),
        ))
    })?;
    rows.collect()
}

fn read_api(
    tables: &Tables<'_>,
    schema: &Schema,
    names: &mut Names,
) -> rusqlite::Result<Vec<ApiCall>> {
    // Calls as read, each name still an nsys string id: in place when it fits, else set aside
    // with the call's index.
    #[derive(Default)]
    struct Chunk {
        calls: Vec<ApiCall>,
        odd: Vec<(usize, i64)>,
    }
    let mut out = Vec::new();
    for table in [RUNTIME, DRIVER] {
        if !schema.has(table) {
            continue;
        }
        let columns = [START, END, GLOBAL_TID, CORRELATION_ID, NAME_ID];
        let chunks = tables.scan(table, &columns, true, Chunk::default, |out, r| {
            let id = r.int(4)?;
            let name = match u32::try_from(id) {
                Ok(small) => StrId(small),
                Err(_) => {
                    out.odd.push((out.calls.len(), id));
                    StrId(0)
                }
            };
            let (pid, tid) = split_global_tid(r.int(2)?);
            out.calls.push(ApiCall {
                start: Nanos(r.int(0)?),
                end: Nanos(r.int(1)?),
                pid,
                tid,
                correlation_id: r.int(3)? as u64,
                name,
                kind: ApiKind::Runtime,
            });
            Ok(())
        })?;
        // Names are interned in the order the calls come, as one pass over the table would.
        let mut kinds: HashMap<StrId, ApiKind> = HashMap::new();
        for chunk in chunks {
            let mut odd = chunk.odd.into_iter().peekable();
            for (i, mut call) in chunk.calls.into_iter().enumerate() {
                let raw = match odd.next_if(|o| o.0 == i) {
                    Some((_, id)) => id,
                    None => call.name.0 as i64,
                };
                call.name = names.id(raw);
                call.kind = *kinds.entry(call.name).or_insert_with(|| {
                    if names.strings.get(call.name).starts_with("cuda") {
                        ApiKind::Runtime
                    } else {
                        ApiKind::Driver
                    }
                });
                out.push(call);
            }
        }
    }
    Ok(out)
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
    let mut out = Vec::new();
    for (table, kind_col) in [(MEMCPY, COPY_KIND), (MEMSET, "NULL")] {
        if !schema.has(table) {
            continue;
        }
        let sql = format!(
            "SELECT {START}, {END}, {DEVICE_ID}, {STREAM_ID}, {CORRELATION_ID}, {GLOBAL_PID}, \
             {BYTES}, {kind_col} FROM {table}"
        );
        let mut stmt = conn.prepare(&sql)?;
        let rows = stmt.query_map([], |r| {
            let kind = match r.get::<_, Option<i64>>(7)? {
                None => MemOpKind::Memset,
                Some(k) => mem_op_kind(k),
            };
            Ok(MemOp {
                start: Nanos(int(r, 0)?),
                end: Nanos(int(r, 1)?),
                device: int(r, 2)? as u32,
                stream: int(r, 3)? as u32,
                correlation_id: int(r, 4)? as u64,
                pid: split_global_tid(int(r, 5)?).0,
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

/// Graph executions traced as a whole, when the export has them (default graph tracing).
fn read_graph_execs(conn: &Connection, schema: &Schema) -> rusqlite::Result<Vec<GraphExec>> {
    if !schema.has(GRAPH_TRACE) {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT {START}, {END}, {DEVICE_ID}, {STREAM_ID}, {CORRELATION_ID}, {GLOBAL_PID}, \
         {GRAPH_ID}, {GRAPH_EXEC_ID} FROM {GRAPH_TRACE}"
    );
    let mut stmt = conn.prepare(&sql)?;
    let rows = stmt.query_map([], |r| {
        Ok(GraphExec {
            start: Nanos(int(r, 0)?),
            end: Nanos(int(r, 1)?),
            device: int(r, 2)? as u32,
            stream: int(r, 3)? as u32,
            correlation_id: int(r, 4)? as u64,
            pid: split_global_tid(int(r, 5)?).0,
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

fn value_to_string(v: ValueRef<'_>) -> String {
    match v {
        ValueRef::Null => String::new(),
        ValueRef::Integer(i) => i.to_string(),
        ValueRef::Real(f) => f.to_string(),
        ValueRef::Text(t) | ValueRef::Blob(t) => String::from_utf8_lossy(t).into_owned(),
    }
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

/// nsys string ids resolved to interned strings, each interned once on first use.
struct Names {
    /// `StringIds` values by id, for ids small enough to index a vector (the usual case).
    dense: Vec<Option<String>>,
    sparse: HashMap<i64, String>,
    /// nsys id -> interned id, in the same two shapes.
    dense_ids: Vec<Option<StrId>>,
    sparse_ids: HashMap<i64, StrId>,
    strings: Strings,
}

impl Names {
    fn new(string_ids: Vec<(i64, String)>) -> Names {
        let limit = (string_ids.len() as i64).saturating_mul(4) + 1024;
        let mut dense: Vec<Option<String>> = Vec::new();
        let mut sparse = HashMap::new();
        for (id, value) in string_ids {
            if (0..limit).contains(&id) {
                let i = id as usize;
                if dense.len() <= i {
                    dense.resize(i + 1, None);
                }
                dense[i] = Some(value);
            } else {
                sparse.insert(id, value);
            }
        }
        let dense_ids = vec![None; dense.len()];
        Names {
            dense,
            sparse,
            dense_ids,
            sparse_ids: HashMap::new(),
            strings: Strings::default(),
        }
    }

    /// The text of an nsys string id, if the export has it.
    fn text(&self, id: i64) -> Option<&str> {
        if id >= 0 && (id as usize) < self.dense.len() {
            self.dense[id as usize].as_deref()
        } else {
            self.sparse.get(&id).map(String::as_str)
        }
    }

    /// The interned string an nsys string id points at.
    fn id(&mut self, id: i64) -> StrId {
        let cached = if id >= 0 && (id as usize) < self.dense_ids.len() {
            self.dense_ids[id as usize]
        } else {
            self.sparse_ids.get(&id).copied()
        };
        if let Some(s) = cached {
            return s;
        }
        let s = match self.text(id) {
            Some(v) => {
                let v = v.to_owned();
                self.strings.intern(&v)
            }
            None => self.strings.intern(&format!("<unknown string {id}>")),
        };
        if id >= 0 && (id as usize) < self.dense_ids.len() {
            self.dense_ids[id as usize] = Some(s);
        } else {
            self.sparse_ids.insert(id, s);
        }
        s
    }

    fn name(&mut self, n: &RawName) -> Option<StrId> {
        match n {
            RawName::Id(id) => Some(self.id(*id)),
            RawName::Text(t) => Some(self.strings.intern(t)),
            RawName::None => None,
        }
    }
}

/// Turn the rows as read into the model.
fn build(path: &Path, schema: &Schema, kernels: RawKernels, rest: RawRest) -> Trace {
    build_keeping_names(path, schema, kernels, rest).0
}

/// [`build`], and the string table of the export, its interned strings now the trace's.
fn build_keeping_names(
    path: &Path,
    schema: &Schema,
    kernels: RawKernels,
    rest: RawRest,
) -> (Trace, Names) {
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
    (trace, names)
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

/// An export opened for the readers that stream its large tables instead of loading them
/// ([`crate::stats`], [`crate::profile`]): the small tables come as a [`Trace`] without kernels
/// or API calls ([`Export::trace_without_work`]), and the kernel and API tables as rows handed
/// to the caller, chunks of them side by side ([`Export::scan_api`], [`Export::scan_kernels`]).
/// Names stay nsys string ids in the rows; [`Export::name`] resolves them, and
/// [`Export::finish`] hands the interned strings to the trace.
pub struct Export {
    conn: Connection,
    pages: Option<crate::formats::sqlite_pages::PageFile>,
    schema: Schema,
    names: Names,
    shown: std::path::PathBuf,
    _task: progress::Task,
    /// The inflated copy of a compressed export, removed when the export is dropped.
    _inflated: Option<crate::formats::temp_file::TempFile>,
}

/// The texts of an export's string ids.
pub struct Texts<'a>(&'a Names);

impl<'a> Texts<'a> {
    /// The text of a name as read (without interning it); `None` for none.
    pub fn text<'n>(&self, name: &'n RawName) -> Option<std::borrow::Cow<'n, str>>
    where
        'a: 'n,
    {
        match name {
            RawName::Id(id) => Some(match self.0.text(*id) {
                Some(t) => std::borrow::Cow::Borrowed(t),
                None => std::borrow::Cow::Owned(format!("<unknown string {id}>")),
            }),
            RawName::Text(t) => Some(std::borrow::Cow::Borrowed(t)),
            RawName::None => None,
        }
    }
}

/// A row of the CUDA API tables.
#[derive(Clone, Copy, Debug)]
pub struct ApiRow {
    pub start: i64,
    pub end: i64,
    pub global_tid: i64,
    pub correlation_id: i64,
    /// The `StringIds` id of the function's name.
    pub name: i64,
    /// The table (0: runtime, 1: driver) and the row's rowid.
    pub table: u8,
    pub rowid: i64,
}

/// Where the rows of the API tables start, sampled as they are scanned: when a table's rows come
/// in order of start (as nsys writes them), the rows started within a stretch of time are found
/// by rowid, without another scan.
#[derive(Clone, Debug, Default)]
pub struct StartSamples {
    table: u8,
    rows: u64,
    /// (start, rowid) of every 1024th row, and of the first and last.
    samples: Vec<(i64, i64)>,
    last: Option<(i64, i64)>,
    sorted: bool,
}

impl StartSamples {
    /// Note a row of a chunk.
    #[inline]
    pub fn row(&mut self, r: &ApiRow) {
        if self.rows == 0 {
            self.table = r.table;
            self.sorted = true;
        }
        if self.last.is_some_and(|l| r.start < l.0) || r.table != self.table {
            self.sorted = false;
        }
        if self.rows.is_multiple_of(1024) {
            self.samples.push((r.start, r.rowid));
        }
        self.last = Some((r.start, r.rowid));
        self.rows += 1;
    }
}

/// The samples of every chunk of the API tables, per table: `None` for a table whose rows are
/// not in order of start.
#[derive(Clone, Debug, Default)]
pub struct StartIndex {
    tables: [Option<Vec<(i64, i64)>>; 2],
}

impl StartIndex {
    /// From the chunks' samples, in table order.
    pub fn new(chunks: Vec<StartSamples>) -> StartIndex {
        let mut tables: [Option<Vec<(i64, i64)>>; 2] = [Some(Vec::new()), Some(Vec::new())];
        for c in chunks {
            if c.rows == 0 {
                continue;
            }
            let t = c.table.min(1) as usize;
            let Some(list) = tables[t].as_mut() else {
                continue;
            };
            let in_order = c.sorted && list.last().is_none_or(|l| l.0 <= c.samples[0].0);
            if !in_order {
                tables[t] = None;
                continue;
            }
            list.extend(c.samples);
            list.extend(c.last);
        }
        StartIndex { tables }
    }

    /// The rowids between which lie the rows of `table` that start in `[lo, hi]`, when known.
    fn rowids(&self, table: usize, lo: i64, hi: i64) -> Option<(i64, i64)> {
        let list = self.tables.get(table)?.as_ref()?;
        let (first, last) = (list.first()?, list.last()?);
        let from = list[..list.partition_point(|s| s.0 < lo)]
            .last()
            .unwrap_or(first)
            .1;
        let to = list[list.partition_point(|s| s.0 <= hi)..]
            .first()
            .unwrap_or(last)
            .1;
        Some((from, to))
    }
}

/// A row of the kernel table.
#[derive(Clone, Debug)]
pub struct KernelRow {
    pub start: i64,
    pub end: i64,
    pub device: i64,
    pub correlation_id: i64,
    pub global_pid: i64,
    /// Demangled, short and mangled names (the last NULL unless asked for and present).
    pub names: [RawName; 3],
    /// `graphNodeId`, when asked for and present.
    pub graph_node: Option<i64>,
}

impl Export {
    /// Open `path` for streaming if it is an nsys export (`.sqlite`, `.sqlite.gz`,
    /// `.nsys-rep`); `None` for any other input. `per_kernel` and `per_call` are the bytes the
    /// caller keeps per kernel and per API call, for the memory check.
    pub fn open(
        path: &Path,
        limits: &Limits,
        per_kernel: u64,
        per_call: u64,
    ) -> Result<Option<Export>> {
        use crate::formats::Kind;
        let (db, inflated) = match crate::formats::detect(path)? {
            Kind::NsysSqlite => (path.to_owned(), None),
            Kind::NsysSqliteGz => {
                let tmp = crate::formats::gzip::inflate_to_temp(path, limits, "sqlite")?;
                (tmp.path().to_owned(), Some(tmp))
            }
            Kind::NsysRep => (crate::formats::nsys_rep::sqlite_for(path)?, None),
            Kind::Kineto | Kind::TorchSnapshot => return Ok(None),
        };
        let err = |e: rusqlite::Error| sqlite_err(path, e);
        let conn = open(&db).map_err(|e| match e {
            Error::Sqlite { source, .. } => sqlite_err(path, source),
            Error::Malformed { message, .. } => Error::Malformed {
                path: path.to_owned(),
                message,
            },
            other => other,
        })?;
        let schema = Schema::read(&conn).map_err(err)?;
        if !NSYS_TABLES.iter().any(|t| schema.has(t)) {
            let mut found_tables: Vec<String> = schema.tables.iter().cloned().collect();
            found_tables.sort();
            return Err(Error::NotAnNsysExport {
                path: path.to_owned(),
                found_tables,
            });
        }
        let rows = super::footprint::check_streaming(
            &conn,
            &schema.tables,
            path,
            limits,
            per_kernel,
            per_call,
        )?;
        let task = progress::begin(
            || format!("reading {}", path.display()),
            Some(rows),
            progress::Unit::Rows,
        );
        let pages = Tables::pages(&db).map_err(err)?;
        let string_ids = if schema.has(STRING_IDS) {
            let mut stmt = conn
                .prepare(&format!("SELECT {ID}, {VALUE} FROM {STRING_IDS}"))
                .map_err(err)?;
            let rows = stmt
                .query_map([], |r| {
                    Ok((r.get::<_, i64>(0)?, r.get::<_, Option<String>>(1)?))
                })
                .map_err(err)?;
            rows.map(|r| r.map(|(id, v)| (id, v.unwrap_or_default())))
                .collect::<rusqlite::Result<_>>()
                .map_err(err)?
        } else {
            Vec::new()
        };
        Ok(Some(Export {
            conn,
            pages,
            schema,
            names: Names::new(string_ids),
            shown: path.to_owned(),
            _task: task,
            _inflated: inflated,
        }))
    }

    fn err(&self) -> impl Fn(rusqlite::Error) -> Error + '_ {
        move |e| sqlite_err(&self.shown, e)
    }

    pub fn has(&self, table: &str) -> bool {
        self.schema.has(table)
    }

    /// Everything but the kernels and API calls: metadata, NVTX ranges and marks (when
    /// `nvtx`), memory operations (when `mem_ops`), graph executions, GPUs, thread names; in
    /// the bounds of [`crate::model::bounds`].
    pub fn trace_without_work(&mut self, nvtx: bool, mem_ops: bool) -> Result<Trace> {
        let err = |e| sqlite_err(&self.shown, e);
        let conn = &self.conn;
        let schema = &self.schema;
        let metadata = if schema.has(META_DATA_EXPORT) {
            key_values(conn, META_DATA_EXPORT).map_err(err)?
        } else if schema.has(EXPORT_META_DATA) {
            key_values(conn, EXPORT_META_DATA).map_err(err)?
        } else {
            BTreeMap::new()
        };
        let run = if schema.has(RUN_METADATA) {
            key_values(conn, RUN_METADATA).map_err(err)?
        } else {
            BTreeMap::new()
        };
        let rest = RawRest {
            names: Names::new(Vec::new()),
            metadata,
            run,
            api: Vec::new(),
            nvtx: if nvtx {
                read_nvtx(conn, schema).map_err(err)?
            } else {
                Vec::new()
            },
            mem_ops: if mem_ops {
                read_mem_ops(conn, schema).map_err(err)?
            } else {
                Vec::new()
            },
            graph_execs: read_graph_execs(conn, schema).map_err(err)?,
            gpus: read_gpus(conn, schema).map_err(err)?,
            thread_names: read_thread_names(conn, schema).map_err(err)?,
        };
        let names = std::mem::replace(&mut self.names, Names::new(Vec::new()));
        let rest = RawRest { names, ..rest };
        let (mut trace, names) =
            build_keeping_names(&self.shown, schema, RawKernels::default(), rest);
        // The export keeps the string ids, to resolve the rows to come into the trace's strings.
        self.names = names;
        crate::model::bounds::check(&mut trace).map_err(|message| Error::Malformed {
            path: self.shown.clone(),
            message,
        })?;
        Ok(trace)
    }

    /// About how many rows `table` has (its largest rowid; 0 when it is absent).
    pub fn rows(&self, table: &str) -> u64 {
        if !self.schema.has(table) {
            return 0;
        }
        self.conn
            .query_row(&format!("SELECT max(rowid) FROM [{table}]"), [], |r| {
                r.get::<_, Option<i64>>(0)
            })
            .ok()
            .flatten()
            .map_or(0, |n| n.max(0) as u64)
    }

    /// Intern a string of the analyses' own.
    pub fn intern(&mut self, s: &str) -> StrId {
        self.names.strings.intern(s)
    }

    /// The interned string an nsys string id names (`<unknown string N>` when none).
    pub fn name(&mut self, id: i64) -> StrId {
        self.names.id(id)
    }

    /// The interned string of a kernel name as read.
    pub fn raw_name(&mut self, name: &RawName) -> Option<StrId> {
        self.names.name(name)
    }

    /// Run `f` with the export resolving names into `trace`'s strings (the trace this export
    /// made).
    pub fn with_names<R>(&mut self, trace: &mut Trace, f: impl FnOnce(&mut Export) -> R) -> R {
        std::mem::swap(&mut self.names.strings, &mut trace.strings);
        let out = f(self);
        std::mem::swap(&mut self.names.strings, &mut trace.strings);
        out
    }

    /// Whether any string of the export's `StringIds` satisfies `f`.
    pub fn any_string(&self, f: impl Fn(&str) -> bool) -> bool {
        self.names.dense.iter().flatten().any(|s| f(s)) || self.names.sparse.values().any(|s| f(s))
    }

    /// The texts of the export's string ids, to read from several threads.
    pub fn texts(&self) -> Texts<'_> {
        Texts(&self.names)
    }

    /// For each (process, time): the name of the CUDA API call that process was in at that time
    /// (the latest-started one, the last in table order among equals), if any. `longest` is the
    /// longest call: only calls started that long before a time are looked at.
    pub fn calls_at(
        &self,
        queries: &[(u32, i64)],
        longest: i64,
        starts: &StartIndex,
    ) -> Result<HashMap<(u32, i64), Option<String>>> {
        let mut out = HashMap::new();
        // The calls that may be in flight at a time started at most `longest` before it.
        let windows: Vec<(i64, i64)> = queries
            .iter()
            .map(|q| (q.1.saturating_sub(longest.max(0)), q.1))
            .collect();
        let near_any = |start: i64| windows.iter().any(|w| (w.0..=w.1).contains(&start));
        let tables = Tables {
            conn: &self.conn,
            pages: self.pages.as_ref(),
        };
        // (table, rowid, start, end, pid, name id) of the calls near the times.
        let mut near: Vec<(usize, i64, i64, i64, u32, i64)> = Vec::new();
        for (t, table) in [RUNTIME, DRIVER].into_iter().enumerate() {
            if !self.schema.has(table) || windows.is_empty() {
                continue;
            }
            // The rows near the times: by rowid where the table's rows come in order of start;
            // else a pass that reads the start alone.
            let ranges: Option<Vec<(i64, i64)>> =
                windows.iter().map(|w| starts.rowids(t, w.0, w.1)).collect();
            let rowids: Vec<i64> = match ranges {
                Some(ranges) => {
                    let mut ids = Vec::new();
                    for (from, to) in ranges {
                        let mut stmt = self
                            .conn
                            .prepare(&format!(
                                "SELECT rowid, {START} FROM {table} WHERE rowid BETWEEN ?1 AND ?2"
                            ))
                            .map_err(self.err())?;
                        let rows = stmt
                            .query_map([from, to], |r| Ok((r.get::<_, i64>(0)?, int(r, 1)?)))
                            .map_err(self.err())?;
                        for row in rows {
                            let (rowid, start) = row.map_err(self.err())?;
                            if near_any(start) {
                                ids.push(rowid);
                            }
                        }
                    }
                    ids.sort_unstable();
                    ids.dedup();
                    ids
                }
                None => tables
                    .scan(table, &["rowid", START], true, Vec::new, |v, r| {
                        if near_any(r.int(1)?) {
                            v.push(r.int(0)?);
                        }
                        Ok(())
                    })
                    .map_err(self.err())?
                    .into_iter()
                    .flatten()
                    .collect(),
            };
            for batch in rowids.chunks(500) {
                let list = batch
                    .iter()
                    .map(i64::to_string)
                    .collect::<Vec<_>>()
                    .join(",");
                let mut stmt = self
                    .conn
                    .prepare(&format!(
                        "SELECT rowid, {START}, {END}, {GLOBAL_TID}, {NAME_ID} FROM {table} \
                         WHERE rowid IN ({list})"
                    ))
                    .map_err(self.err())?;
                let rows = stmt
                    .query_map([], |r| {
                        Ok((
                            r.get::<_, i64>(0)?,
                            int(r, 1)?,
                            int(r, 2)?,
                            int(r, 3)?,
                            int(r, 4)?,
                        ))
                    })
                    .map_err(self.err())?;
                for row in rows {
                    let (rowid, start, end, gtid, name) = row.map_err(self.err())?;
                    near.push((
                        t,
                        rowid,
                        start,
                        end.max(start),
                        split_global_tid(gtid).0,
                        name,
                    ));
                }
            }
        }
        for &(pid, t) in queries {
            let call = near
                .iter()
                .filter(|c| c.4 == pid && c.2 <= t && c.3 > t)
                .max_by_key(|c| (c.2, c.0, c.1));
            let name = call.map(|c| match self.names.text(c.5) {
                Some(s) => s.to_owned(),
                None => format!("<unknown string {}>", c.5),
            });
            out.insert((pid, t), name);
        }
        Ok(out)
    }

    /// Rows of the CUDA API tables (runtime, then driver): chunks side by side, each from
    /// `init`, their states in table order. Without `names` the name ids read as 0.
    pub fn scan_api<S: Send>(
        &self,
        names: bool,
        init: impl Fn() -> S + Sync,
        row: impl Fn(&mut S, ApiRow) -> rusqlite::Result<()> + Sync,
    ) -> Result<Vec<S>> {
        let tables = Tables {
            conn: &self.conn,
            pages: self.pages.as_ref(),
        };
        let mut out = Vec::new();
        for table in [RUNTIME, DRIVER] {
            if !self.schema.has(table) {
                continue;
            }
            let name = if names { NAME_ID } else { "NULL" };
            let columns = [START, END, GLOBAL_TID, CORRELATION_ID, name, "rowid"];
            let number = (table == DRIVER) as u8;
            let states = tables
                .scan(table, &columns, true, &init, |s, r| {
                    row(
                        s,
                        ApiRow {
                            start: r.int(0)?,
                            end: r.int(1)?,
                            global_tid: r.int(2)?,
                            correlation_id: r.int(3)?,
                            name: r.int(4)?,
                            table: number,
                            rowid: r.int(5)?,
                        },
                    )
                })
                .map_err(self.err())?;
            out.extend(states);
        }
        Ok(out)
    }

    /// Rows of the kernel table, with the mangled name and the graph node when asked for:
    /// chunks side by side, each from `init`, their states in table order.
    pub fn scan_kernels<S: Send>(
        &self,
        mangled: bool,
        graph_node: bool,
        init: impl Fn() -> S + Sync,
        row: impl Fn(&mut S, &KernelRow) -> rusqlite::Result<()> + Sync,
    ) -> Result<Vec<S>> {
        if !self.schema.has(KERNEL) {
            return Ok(Vec::new());
        }
        let tables = Tables {
            conn: &self.conn,
            pages: self.pages.as_ref(),
        };
        let mangled_col = if mangled {
            self.schema.opt(KERNEL, MANGLED_NAME)
        } else {
            "NULL".to_owned()
        };
        let node_col = if graph_node {
            self.schema.opt(KERNEL, GRAPH_NODE_ID)
        } else {
            "NULL".to_owned()
        };
        let columns = [
            START,
            END,
            DEVICE_ID,
            CORRELATION_ID,
            GLOBAL_PID,
            DEMANGLED_NAME,
            SHORT_NAME,
            &mangled_col,
            &node_col,
        ];
        tables
            .scan(KERNEL, &columns, true, init, |s, r| {
                let k = KernelRow {
                    start: r.int(0)?,
                    end: r.int(1)?,
                    device: r.int(2)?,
                    correlation_id: r.int(3)?,
                    global_pid: r.int(4)?,
                    names: [
                        RawName::from(r.get(5)?),
                        RawName::from(r.get(6)?),
                        RawName::from(r.get(7)?),
                    ],
                    graph_node: r.opt_int(8)?,
                };
                row(s, &k)
            })
            .map_err(self.err())
    }
}
