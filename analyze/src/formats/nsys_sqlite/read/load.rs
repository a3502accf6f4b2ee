//! The whole-export loader: every table of an nsys export read into one [`Trace`], kernels and
//! API calls included, for the commands that keep the trace in memory. The large tables are read
//! from the file's pages in chunks side by side; memory is checked first against the rows the
//! export holds ([`super::super::footprint`]).

use std::collections::HashMap;
use std::path::Path;

use super::super::column::*;
use super::super::scan::Tables;
use super::super::split_global_tid;
use super::super::table::*;
use super::tables::{build, RawKernels, RawRest};
use super::{open_export, sqlite_err, string_ids, Database, Names, RawName, Schema};
use crate::error::Result;
use crate::formats::limits::Limits;
use crate::formats::Kind;
use crate::model::trace::{ApiCall, ApiKind, Kernel, Nanos, Span, StrId, Trace};
use crate::progress;

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

/// Load `path`, which [`crate::formats::detect`] found to be of `kind`, if that is an nsys
/// export (plain, gzip-compressed, or a report exported first); `None` for other kinds. The
/// errors about a report name the SQLite file exported from it, which is what they are about.
pub fn load_kind(path: &Path, kind: Kind, limits: &Limits) -> Result<Option<Trace>> {
    let Some(db) = Database::of(path, kind, limits)? else {
        return Ok(None);
    };
    let shown = if kind == Kind::NsysRep {
        &db.path
    } else {
        path
    };
    load_from(&db.path, shown, limits).map(Some)
}

/// Read the export stored at `db`; errors name `shown`, the file the user gave.
fn load_from(db: &Path, shown: &Path, limits: &Limits) -> Result<Trace> {
    let err = |e: rusqlite::Error| sqlite_err(shown, e);
    let (conn, schema) = open_export(db, shown)?;
    let rows = super::super::footprint::check(&conn, &schema.tables, shown, limits)?;
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
    build(shown, &schema, kernels, rest)
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
            span: Span {
                start: Nanos(r.int(0)?),
                end: Nanos(r.int(1)?),
                device: r.int(2)? as u32,
                stream: r.int(3)? as u32,
                correlation_id: r.int(4)? as u64,
                pid: split_global_tid(r.int(5)?).0,
            },
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

/// Everything but the kernels, the API calls resolved against the string table.
fn read_rest(tables: &Tables<'_>, schema: &Schema) -> rusqlite::Result<RawRest> {
    let mut names = Names::new(string_ids(tables.conn, schema)?);
    let api = read_api(tables, schema, &mut names)?;
    RawRest::read(tables.conn, schema, names, api, true, true)
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
