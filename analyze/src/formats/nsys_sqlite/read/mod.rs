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
//! side by side ([`super::scan`]). Two readers share what is here: [`load()`] reads a whole
//! export into a [`Trace`], and [`Export`] streams its large tables to the analyses that fold
//! them row by row. Both open a file through one function, the one place that checks that an
//! SQLite file is an nsys export; which input is an export at all is
//! [`crate::formats::detect`]'s call.
//!
//! [`Trace`]: crate::model::trace::Trace
//! [`Trace::open_ranges`]: crate::model::trace::Trace::open_ranges
//! [`Trace::graph_execs`]: crate::model::trace::Trace::graph_execs

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags, Row};

use super::column::*;
use super::table::*;
use crate::error::{Error, Result};
use crate::formats::limits::Limits;
use crate::formats::temp_file::TempFile;
use crate::formats::Kind;
use crate::model::trace::{StrId, Strings};

mod export;
mod load;
mod tables;

pub use export::{ApiRow, Export, KernelRow, StartIndex, StartSamples, Texts};
pub use load::{load, load_gz, load_gz_with, load_kind, load_with};

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

/// The tables the analyses read; absent ones are listed in
/// [`Source::missing`](crate::model::trace::Source::missing).
pub const ANALYSED_TABLES: &[&str] = &[KERNEL, RUNTIME, NVTX_EVENTS, MEMCPY, MEMSET];

/// Open an export read-only, as an immutable file: SQLite never writes to it and creates
/// nothing beside it, neither a journal nor, for a file whose header says WAL, the `-wal` and
/// `-shm` files a plain read-only open makes (an input is never modified and nothing appears
/// next to it). Immutable also means SQLite takes no lock and reads no `-wal` file that is
/// already there: an export that `nsys` or `collect` wrote is complete in the database file
/// (nsys never leaves one in WAL mode with frames pending), and a copy still being written is
/// not an input.
pub fn open(path: &Path) -> Result<Connection> {
    crate::formats::check_file(path)?;
    let conn = Connection::open_with_flags(
        immutable_uri(path),
        OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|source| sqlite_err(path, source))?;
    Ok(conn)
}

/// `file:PATH?mode=ro&immutable=1`, with every byte of the path that a URI could read otherwise
/// (`?`, `#`, `%`, spaces, non-ASCII) percent-encoded; SQLite decodes them back.
fn immutable_uri(path: &Path) -> String {
    let mut uri = String::from("file:");
    // An absolute path gets an empty authority, so that one starting `//` is not read as a host.
    if path.is_absolute() {
        uri.push_str("//");
    }
    for &b in path.as_os_str().as_encoded_bytes() {
        if b.is_ascii_alphanumeric() || b"/._-~".contains(&b) {
            uri.push(b as char);
        } else {
            uri.push_str(&format!("%{b:02X}"));
        }
    }
    uri.push_str("?mode=ro&immutable=1");
    uri
}

/// An SQLite error about `path`, in the user's terms; SQLite's text is quoted on one line (a
/// damaged schema's message can hold a whole `CREATE TABLE`).
fn sqlite_err(path: &Path, source: rusqlite::Error) -> Error {
    use rusqlite::ErrorCode::{DatabaseCorrupt, NotADatabase};
    match source.sqlite_error_code() {
        // Say what it means for the user's file: damaged, usually cut short.
        Some(DatabaseCorrupt | NotADatabase) => Error::Malformed {
            path: path.to_owned(),
            message: format!(
                "the SQLite file is damaged or truncated ({})",
                crate::error::quote(&source.to_string())
            ),
        },
        _ => Error::Sqlite {
            path: path.to_owned(),
            error: source,
        },
    }
}

/// Open the export stored at `db`, read its schema and check that it is an nsys export: the one
/// check both readers make. Errors name `shown`, the file the user gave (`db` may be a temporary
/// copy of it).
fn open_export(db: &Path, shown: &Path) -> Result<(Connection, Schema)> {
    let conn = open(db).map_err(|e| match e {
        Error::Sqlite { error, .. } => sqlite_err(shown, error),
        Error::Malformed { message, .. } => Error::Malformed {
            path: shown.to_owned(),
            message,
        },
        other => other,
    })?;
    let schema = Schema::read(&conn).map_err(|e| sqlite_err(shown, e))?;
    if !NSYS_TABLES.iter().any(|t| schema.has(t)) {
        let mut found_tables: Vec<String> = schema.tables.iter().cloned().collect();
        found_tables.sort();
        return Err(Error::NotAnNsysExport {
            path: shown.to_owned(),
            found_tables,
        });
    }
    Ok((conn, schema))
}

/// The rank (and world size) the uncompressed export at `path` records in the environment nsys
/// saved; `None` where it records none.
pub fn recorded_rank(path: &Path) -> Result<Option<(u32, Option<u32>)>> {
    let (conn, schema) = open_export(path, path)?;
    let origin = tables::Origin::read(&conn, &schema).map_err(|e| sqlite_err(path, e))?;
    Ok(origin.rank.map(|rank| (rank, origin.world_size)))
}

/// The SQLite file that holds an input [`crate::formats::detect`] found to be an nsys export:
/// the file itself, a temporary inflated copy of a compressed one (removed when this is
/// dropped), or the export `nsys export` made of a report.
struct Database {
    path: PathBuf,
    _inflated: Option<TempFile>,
}

impl Database {
    /// The database of `path`, detected as `kind`; `None` when that is not an nsys export.
    fn of(path: &Path, kind: Kind, limits: &Limits) -> Result<Option<Database>> {
        let (path, inflated) = match kind {
            Kind::NsysSqlite => (path.to_owned(), None),
            Kind::NsysSqliteGz => {
                let tmp = crate::formats::gzip::inflate_to_temp(path, limits, "sqlite")?;
                (tmp.path().to_owned(), Some(tmp))
            }
            Kind::NsysRep => (crate::formats::nsys_rep::sqlite_for(path)?, None),
            Kind::Kineto | Kind::TorchSnapshot => return Ok(None),
        };
        Ok(Some(Database {
            path,
            _inflated: inflated,
        }))
    }
}

/// The `(id, value)` rows of `StringIds`, a NULL value read as empty.
fn string_ids(conn: &Connection, schema: &Schema) -> rusqlite::Result<Vec<(i64, String)>> {
    if !schema.has(STRING_IDS) {
        return Ok(Vec::new());
    }
    let mut stmt = conn.prepare(&format!("SELECT {ID}, {VALUE} FROM {STRING_IDS}"))?;
    let rows = stmt.query_map([], |r| {
        Ok((r.get::<_, i64>(0)?, r.get::<_, Option<String>>(1)?))
    })?;
    rows.map(|r| r.map(|(id, v)| (id, v.unwrap_or_default())))
        .collect()
}

/// The export's metadata (`META_DATA_EXPORT`, or `EXPORT_META_DATA` before schema 3.20) and the
/// run metadata `collect` adds (`RUN_METADATA`), each empty when absent.
type Metadata = (BTreeMap<String, String>, BTreeMap<String, String>);

fn metadata(conn: &Connection, schema: &Schema) -> rusqlite::Result<Metadata> {
    let export = if schema.has(META_DATA_EXPORT) {
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
    Ok((export, run))
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

/// An integer column that may be NULL (read as 0).
fn int(r: &Row<'_>, i: usize) -> rusqlite::Result<i64> {
    Ok(r.get::<_, Option<i64>>(i)?.unwrap_or(0))
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

fn value_to_string(v: ValueRef<'_>) -> String {
    match v {
        ValueRef::Null => String::new(),
        ValueRef::Integer(i) => i.to_string(),
        ValueRef::Real(f) => f.to_string(),
        ValueRef::Text(t) | ValueRef::Blob(t) => String::from_utf8_lossy(t).into_owned(),
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
