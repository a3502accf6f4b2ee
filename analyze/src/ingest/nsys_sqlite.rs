//! Nsight Systems SQLite exports (`nsys export --type sqlite`), read-only, into the model.
//!
//! Met so far: export schemas from the 2021 ones without any metadata table, through 2.9.1 and
//! 3.0-3.17 (`EXPORT_META_DATA`, 2022-2023), to 3.20.3 (`META_DATA_EXPORT`, 2024 on). Every table
//! is optional: a capture without CUDA tracing has no kernel table, one without NVTX has no
//! `NVTX_EVENTS`, and columns come and go between versions (`mangledName`, `greenContextId`), so
//! columns are looked up by name. NVTX text is either inline (`text`) or interned (`textId` into
//! `StringIds`); both occur in one file. `collect`'s own traces use this schema plus a
//! `RUN_METADATA (name, value)` table.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags, Row};

use crate::error::{Error, Result};
use crate::model::{
    split_global_tid, ApiCall, ApiKind, Bytes, Gpu, Kernel, Mark, MemOp, MemOpKind, Nanos, Range,
    RangeStyle, Source, SourceFormat, StrId, Strings, Trace,
};

/// Tables whose presence marks a file as an nsys export.
const NSYS_TABLES: &[&str] = &[
    "StringIds",
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "NVTX_EVENTS",
    "TARGET_INFO_GPU",
    "META_DATA_EXPORT",
    "EXPORT_META_DATA",
];

/// The tables the analyses read; absent ones are listed in [`Source::missing`].
pub const ANALYSED_TABLES: &[&str] = &[
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "NVTX_EVENTS",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
];

/// NVTX event types (`ENUM_NSYS_EVENT_TYPE`).
const NVTX_MARK: i64 = 34;
const NVTX_PUSH_POP: i64 = 59;
const NVTX_START_END: i64 = 60;
const NVTXT_MARK: i64 = 65;
const NVTXT_PUSH_POP: i64 = 70;
const NVTXT_START_END: i64 = 71;
const NVTX_DOMAIN_CREATE: i64 = 75;

/// Open an export read-only: SQLite never writes to it, not even a journal.
pub fn open(path: &Path) -> Result<Connection> {
    crate::ingest::check_file(path)?;
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|source| sqlite_err(path, source))?;
    Ok(conn)
}

fn sqlite_err(path: &Path, source: rusqlite::Error) -> Error {
    Error::Sqlite {
        path: path.to_owned(),
        source,
    }
}

/// Load an export into a [`Trace`].
pub fn load(path: &Path) -> Result<Trace> {
    let conn = open(path)?;
    let mut reader = Reader::new(path, &conn)?;
    reader.read()
}

/// Load a gzip-compressed export: it is unpacked into a temporary file (SQLite needs a file),
/// read, and the temporary file removed.
pub fn load_gz(path: &Path) -> Result<Trace> {
    let mut input = crate::ingest::open_maybe_gzip(path)?;
    let tmp = TempFile::new()?;
    let mut out = std::fs::File::create(&tmp.0).map_err(|source| Error::Io {
        path: tmp.0.clone(),
        source,
    })?;
    std::io::copy(&mut input, &mut out).map_err(|e| Error::Malformed {
        path: path.to_owned(),
        message: format!("gzip data could not be decompressed: {e}"),
    })?;
    drop(out);
    let conn = open(&tmp.0)?;
    let mut reader = Reader::new(path, &conn)?;
    let mut trace = reader.read()?;
    trace.source.path = path.to_owned();
    Ok(trace)
}

/// A file in the temporary directory, removed on drop.
struct TempFile(std::path::PathBuf);

impl TempFile {
    fn new() -> Result<TempFile> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "analyze-{}-{}.sqlite",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        Ok(TempFile(std::env::temp_dir().join(name)))
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

struct Reader<'a> {
    path: &'a Path,
    conn: &'a Connection,
    tables: HashSet<String>,
    /// `StringIds` as read from the file.
    string_ids: HashMap<i64, String>,
    /// nsys string id -> our interned id.
    mapped: HashMap<i64, StrId>,
    strings: Strings,
}

impl<'a> Reader<'a> {
    fn new(path: &'a Path, conn: &'a Connection) -> Result<Reader<'a>> {
        let mut stmt = conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")
            .map_err(|e| sqlite_err(path, e))?;
        let tables: HashSet<String> = stmt
            .query_map([], |r| r.get::<_, String>(0))
            .and_then(|rows| rows.collect())
            .map_err(|e| sqlite_err(path, e))?;
        if !NSYS_TABLES.iter().any(|t| tables.contains(*t)) {
            let mut found_tables: Vec<String> = tables.into_iter().collect();
            found_tables.sort();
            return Err(Error::NotAnNsysExport {
                path: path.to_owned(),
                found_tables,
            });
        }
        Ok(Reader {
            path,
            conn,
            tables,
            string_ids: HashMap::new(),
            mapped: HashMap::new(),
            strings: Strings::default(),
        })
    }

    fn err(&self, e: rusqlite::Error) -> Error {
        sqlite_err(self.path, e)
    }

    fn has(&self, table: &str) -> bool {
        self.tables.contains(table)
    }

    fn columns(&self, table: &str) -> Result<HashSet<String>> {
        let mut stmt = self
            .conn
            .prepare(&format!("PRAGMA table_info(\"{table}\")"))
            .map_err(|e| self.err(e))?;
        let cols = stmt
            .query_map([], |r| r.get::<_, String>(1))
            .and_then(|rows| rows.collect())
            .map_err(|e| self.err(e))?;
        Ok(cols)
    }

    /// Intern the string an nsys string id points at.
    fn string_id(&mut self, id: i64) -> StrId {
        if let Some(&s) = self.mapped.get(&id) {
            return s;
        }
        let s = match self.string_ids.get(&id) {
            Some(v) => self.strings.intern(v),
            None => self.strings.intern(&format!("<unknown string {id}>")),
        };
        self.mapped.insert(id, s);
        s
    }

    /// A name column that holds either a `StringIds` id or inline text.
    fn name_value(&mut self, v: ValueRef<'_>) -> Option<StrId> {
        match v {
            ValueRef::Integer(id) => Some(self.string_id(id)),
            ValueRef::Text(t) => Some(self.strings.intern(&String::from_utf8_lossy(t))),
            _ => None,
        }
    }

    fn read(&mut self) -> Result<Trace> {
        if self.has("StringIds") {
            let mut stmt = self
                .conn
                .prepare("SELECT id, value FROM StringIds")
                .map_err(|e| sqlite_err(self.path, e))?;
            let rows = stmt
                .query_map([], |r| {
                    Ok((r.get::<_, i64>(0)?, r.get::<_, Option<String>>(1)?))
                })
                .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
                .map_err(|e| sqlite_err(self.path, e))?;
            self.string_ids = rows
                .into_iter()
                .map(|(id, v)| (id, v.unwrap_or_default()))
                .collect();
        }
        let metadata = self.metadata()?;
        let run = self.key_values("RUN_METADATA")?;
        let missing = ANALYSED_TABLES
            .iter()
            .filter(|t| !self.has(t))
            .map(|t| t.to_string())
            .collect();
        let source = Source {
            path: self.path.to_owned(),
            format: SourceFormat::NsysSqlite,
            schema_version: metadata.get("EXPORT_SCHEMA_VERSION").cloned(),
            product_version: metadata.get("EXPORT_PRODUCT_VERSION").cloned(),
            metadata,
            run,
            missing,
        };
        let mut trace = Trace::empty(source);
        trace.kernels = self.kernels()?;
        trace.api_calls = self.api_calls()?;
        let (ranges, marks) = self.nvtx()?;
        trace.ranges = ranges;
        trace.marks = marks;
        trace.mem_ops = self.mem_ops()?;
        trace.gpus = self.gpus()?;
        trace.thread_names = self.thread_names()?;
        trace.strings = std::mem::take(&mut self.strings);
        trace.sort();
        Ok(trace)
    }

    fn key_values(&self, table: &str) -> Result<BTreeMap<String, String>> {
        if !self.has(table) {
            return Ok(BTreeMap::new());
        }
        let mut stmt = self
            .conn
            .prepare(&format!("SELECT name, value FROM \"{table}\""))
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], |r| {
                Ok((r.get::<_, String>(0)?, value_to_string(r.get_ref(1)?)))
            })
            .and_then(|rows| rows.collect())
            .map_err(|e| self.err(e))?;
        Ok(rows)
    }

    fn metadata(&self) -> Result<BTreeMap<String, String>> {
        if self.has("META_DATA_EXPORT") {
            self.key_values("META_DATA_EXPORT")
        } else {
            self.key_values("EXPORT_META_DATA")
        }
    }

    fn kernels(&mut self) -> Result<Vec<Kernel>> {
        const T: &str = "CUPTI_ACTIVITY_KIND_KERNEL";
        if !self.has(T) {
            return Ok(Vec::new());
        }
        let cols = self.columns(T)?;
        let opt = |c: &str| {
            if cols.contains(c) {
                c.to_owned()
            } else {
                "NULL".to_owned()
            }
        };
        let sql = format!(
            "SELECT start, end, deviceId, streamId, correlationId, globalPid, demangledName, \
             shortName, {}, gridX, gridY, gridZ, blockX, blockY, blockZ, {}, {}, {} FROM {T}",
            opt("mangledName"),
            opt("registersPerThread"),
            opt("staticSharedMemory"),
            opt("dynamicSharedMemory"),
        );
        let conn = self.conn;
        let mut stmt = conn.prepare(&sql).map_err(|e| self.err(e))?;
        let mut rows = stmt.query([]).map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        while let Some(r) = rows.next().map_err(|e| self.err(e))? {
            let names =
                (|| -> rusqlite::Result<_> { Ok((r.get_ref(6)?, r.get_ref(7)?, r.get_ref(8)?)) })()
                    .map_err(|e| self.err(e))?;
            let name = self.name_value(names.0);
            let short = self.name_value(names.1);
            let mangled = self.name_value(names.2);
            let k = (|| -> rusqlite::Result<Kernel> {
                let name = name.unwrap_or_else(|| self.strings.intern("<unnamed kernel>"));
                Ok(Kernel {
                    start: Nanos(r.get(0)?),
                    end: Nanos(r.get(1)?),
                    device: int(r, 2)? as u32,
                    stream: int(r, 3)? as u32,
                    correlation_id: int(r, 4)? as u64,
                    pid: split_global_tid(int(r, 5)?).0,
                    name,
                    short_name: short.unwrap_or(name),
                    mangled_name: mangled,
                    grid: [int(r, 9)? as u32, int(r, 10)? as u32, int(r, 11)? as u32],
                    block: [int(r, 12)? as u32, int(r, 13)? as u32, int(r, 14)? as u32],
                    registers_per_thread: int(r, 15)? as u32,
                    static_shared_memory: int(r, 16)? as u32,
                    dynamic_shared_memory: int(r, 17)? as u32,
                })
            })()
            .map_err(|e| self.err(e))?;
            out.push(k);
        }
        Ok(out)
    }

    fn api_calls(&mut self) -> Result<Vec<ApiCall>> {
        let mut out = Vec::new();
        for table in ["CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER"] {
            if !self.has(table) {
                continue;
            }
            let sql = format!("SELECT start, end, globalTid, correlationId, nameId FROM {table}");
            let conn = self.conn;
            let mut stmt = conn.prepare(&sql).map_err(|e| self.err(e))?;
            let mut rows = stmt.query([]).map_err(|e| self.err(e))?;
            while let Some(r) = rows.next().map_err(|e| self.err(e))? {
                let (start, end, gtid, corr, name_id) = (|| -> rusqlite::Result<_> {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, i64>(1)?,
                        int(r, 2)?,
                        int(r, 3)?,
                        int(r, 4)?,
                    ))
                })()
                .map_err(|e| self.err(e))?;
                let name = self.string_id(name_id);
                let kind = if self.strings.get(name).starts_with("cuda") {
                    ApiKind::Runtime
                } else {
                    ApiKind::Driver
                };
                let (pid, tid) = split_global_tid(gtid);
                out.push(ApiCall {
                    start: Nanos(start),
                    end: Nanos(end),
                    pid,
                    tid,
                    correlation_id: corr as u64,
                    name,
                    kind,
                });
            }
        }
        Ok(out)
    }

    fn nvtx(&mut self) -> Result<(Vec<Range>, Vec<Mark>)> {
        const T: &str = "NVTX_EVENTS";
        if !self.has(T) {
            return Ok((Vec::new(), Vec::new()));
        }
        let cols = self.columns(T)?;
        let opt = |c: &str| {
            if cols.contains(c) {
                c.to_owned()
            } else {
                "NULL".to_owned()
            }
        };
        let sql = format!(
            "SELECT start, end, eventType, text, {}, globalTid, {}, {} FROM {T} \
             WHERE eventType IN ({NVTX_MARK}, {NVTX_PUSH_POP}, {NVTX_START_END}, {NVTXT_MARK}, \
             {NVTXT_PUSH_POP}, {NVTXT_START_END}, {NVTX_DOMAIN_CREATE})",
            opt("textId"),
            opt("endGlobalTid"),
            opt("domainId"),
        );
        let conn = self.conn;
        let mut stmt = conn.prepare(&sql).map_err(|e| self.err(e))?;
        let mut rows = stmt.query([]).map_err(|e| self.err(e))?;
        struct Raw {
            start: i64,
            end: Option<i64>,
            event_type: i64,
            text: Option<StrId>,
            gtid: i64,
            end_gtid: Option<i64>,
            domain: i64,
        }
        let mut raw = Vec::new();
        while let Some(r) = rows.next().map_err(|e| self.err(e))? {
            let (text_v, text_id) =
                (|| -> rusqlite::Result<_> { Ok((r.get_ref(3)?, r.get::<_, Option<i64>>(4)?)) })()
                    .map_err(|e| self.err(e))?;
            let text = match text_v {
                ValueRef::Text(t) => Some(self.strings.intern(&String::from_utf8_lossy(t))),
                _ => text_id.map(|id| self.string_id(id)),
            };
            let row = (|| -> rusqlite::Result<Raw> {
                Ok(Raw {
                    start: r.get(0)?,
                    end: r.get(1)?,
                    event_type: r.get(2)?,
                    text,
                    gtid: r.get::<_, Option<i64>>(5)?.unwrap_or(0),
                    end_gtid: r.get(6)?,
                    domain: r.get::<_, Option<i64>>(7)?.unwrap_or(0),
                })
            })()
            .map_err(|e| self.err(e))?;
            raw.push(row);
        }
        let domains: HashMap<i64, StrId> = raw
            .iter()
            .filter(|r| r.event_type == NVTX_DOMAIN_CREATE)
            .filter_map(|r| Some((r.domain, r.text?)))
            .collect();
        let empty = self.strings.intern("");
        let mut ranges = Vec::new();
        let mut marks = Vec::new();
        for r in raw {
            let (pid, tid) = split_global_tid(r.gtid);
            let name = r.text.unwrap_or(empty);
            let domain = if r.domain == 0 {
                None
            } else {
                domains.get(&r.domain).copied()
            };
            let style = match r.event_type {
                NVTX_PUSH_POP | NVTXT_PUSH_POP => RangeStyle::PushPop,
                NVTX_START_END | NVTXT_START_END => RangeStyle::StartEnd,
                NVTX_MARK | NVTXT_MARK => {
                    marks.push(Mark {
                        time: Nanos(r.start),
                        name,
                        domain,
                        pid,
                        tid,
                    });
                    continue;
                }
                _ => continue,
            };
            // A range still open when the capture ended has no end: nsys stats leaves it out.
            let Some(end) = r.end else { continue };
            ranges.push(Range {
                start: Nanos(r.start),
                end: Nanos(end),
                style,
                name,
                domain,
                pid,
                tid,
                end_tid: r.end_gtid.map(|g| split_global_tid(g).1),
            });
        }
        Ok((ranges, marks))
    }

    fn mem_ops(&mut self) -> Result<Vec<MemOp>> {
        let mut out = Vec::new();
        for (table, kind_col) in [
            ("CUPTI_ACTIVITY_KIND_MEMCPY", "copyKind"),
            ("CUPTI_ACTIVITY_KIND_MEMSET", "NULL"),
        ] {
            if !self.has(table) {
                continue;
            }
            let sql = format!(
                "SELECT start, end, deviceId, streamId, correlationId, globalPid, bytes, {kind_col} FROM {table}"
            );
            let mut stmt = self.conn.prepare(&sql).map_err(|e| self.err(e))?;
            let rows = stmt
                .query_map([], |r| {
                    let kind = match r.get::<_, Option<i64>>(7)? {
                        None => MemOpKind::Memset,
                        Some(k) => copy_kind(k),
                    };
                    Ok(MemOp {
                        start: Nanos(r.get(0)?),
                        end: Nanos(r.get(1)?),
                        device: int(r, 2)? as u32,
                        stream: int(r, 3)? as u32,
                        correlation_id: int(r, 4)? as u64,
                        pid: split_global_tid(int(r, 5)?).0,
                        kind,
                        bytes: Bytes(int(r, 6)? as u64),
                    })
                })
                .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
                .map_err(|e| self.err(e))?;
            out.extend(rows);
        }
        Ok(out)
    }

    fn gpus(&self) -> Result<Vec<Gpu>> {
        const T: &str = "TARGET_INFO_GPU";
        if !self.has(T) {
            return Ok(Vec::new());
        }
        let cols = self.columns(T)?;
        let pick = |names: &[&str]| {
            names
                .iter()
                .find(|n| cols.contains(**n))
                .map_or("NULL".to_owned(), |n| n.to_string())
        };
        let sql = format!(
            "SELECT {}, name, {}, {}, {}, {} FROM {T}",
            pick(&["id", "deviceId"]),
            pick(&["totalMemory"]),
            pick(&["smCount"]),
            pick(&["computeMajor"]),
            pick(&["computeMinor"]),
        );
        let mut stmt = self.conn.prepare(&sql).map_err(|e| self.err(e))?;
        let gpus = stmt
            .query_map([], |r| {
                let major = r.get::<_, Option<i64>>(4)?;
                let minor = r.get::<_, Option<i64>>(5)?;
                Ok(Gpu {
                    id: r.get::<_, Option<i64>>(0)?.unwrap_or(0) as u32,
                    name: value_to_string(r.get_ref(1)?),
                    total_memory: r.get::<_, Option<i64>>(2)?.map(|b| Bytes(b as u64)),
                    sm_count: r.get::<_, Option<i64>>(3)?.map(|n| n as u32),
                    compute_capability: major.zip(minor).map(|(a, b)| (a as u32, b as u32)),
                })
            })
            .and_then(|rows| rows.collect())
            .map_err(|e| self.err(e))?;
        Ok(gpus)
    }

    fn thread_names(&mut self) -> Result<HashMap<(u32, u32), StrId>> {
        if !self.has("ThreadNames") {
            return Ok(HashMap::new());
        }
        let mut stmt = self
            .conn
            .prepare("SELECT nameId, globalTid FROM ThreadNames")
            .map_err(|e| sqlite_err(self.path, e))?;
        let rows: Vec<(i64, i64)> = stmt
            .query_map([], |r| Ok((int(r, 0)?, int(r, 1)?)))
            .and_then(|rows| rows.collect())
            .map_err(|e| sqlite_err(self.path, e))?;
        Ok(rows
            .into_iter()
            .map(|(name, gtid)| (split_global_tid(gtid), self.string_id(name)))
            .collect())
    }
}

/// An integer column that may be NULL (read as 0).
fn int(r: &Row<'_>, i: usize) -> rusqlite::Result<i64> {
    Ok(r.get::<_, Option<i64>>(i)?.unwrap_or(0))
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
fn copy_kind(k: i64) -> MemOpKind {
    match k {
        1 => MemOpKind::HostToDevice,
        2 => MemOpKind::DeviceToHost,
        8 => MemOpKind::DeviceToDevice,
        9 => MemOpKind::HostToHost,
        10 => MemOpKind::PeerToPeer,
        other => MemOpKind::OtherCopy(other.clamp(0, 255) as u8),
    }
}
