//! An nsys export opened for streaming: its small tables become a [`Trace`] without kernels or
//! API calls, and its two large tables (kernels, CUDA API calls) are handed row by row, in chunks
//! side by side, to the analyses that fold them ([`crate::stats`], [`crate::profile`]), so that
//! an export far larger than memory is read in one pass.

use std::collections::HashMap;
use std::path::Path;

use rusqlite::Connection;

use super::super::column::*;
use super::super::scan::{Cursor, ScanRow, Tables};
use super::super::split_global_tid;
use super::super::table::*;
use super::tables::{build_keeping_names, RawKernels, RawRest};
use super::{int, open_export, sqlite_err, string_ids, Database, Names, RawName, Schema};
use crate::error::{Error, Result};
use crate::formats::limits::Limits;
use crate::formats::Kind;
use crate::model::trace::{StrId, Trace};
use crate::progress;

/// An export opened for the readers that stream its large tables instead of loading them
/// ([`crate::stats`], [`crate::profile`]): the small tables come as a [`Trace`] without kernels
/// or API calls ([`Export::trace_without_work`]), and the kernel and API tables as rows handed
/// to the caller, chunks of them side by side ([`Export::scan_api`], [`Export::scan_kernels`]).
/// Names stay nsys string ids in the rows; [`Export::name`] resolves them, and
/// [`Export::with_names`] resolves them into the trace's own strings.
pub struct Export {
    conn: Connection,
    pages: Option<crate::formats::sqlite_pages::PageFile>,
    schema: Schema,
    names: Names,
    shown: std::path::PathBuf,
    /// Whether the kernel and API tables are read in chunks side by side (unless
    /// [`Export::read_serially`]).
    parallel: bool,
    _task: progress::Task,
    /// Where the rows are read from: an inflated copy of a compressed export is removed when
    /// the export is dropped.
    _db: Database,
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
    pub stream: i64,
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
        Export::open_kind(
            path,
            crate::formats::detect(path)?,
            limits,
            per_kernel,
            per_call,
        )
    }

    /// [`Export::open`] of a file [`crate::formats::detect`] already found to be of `kind`.
    pub fn open_kind(
        path: &Path,
        kind: Kind,
        limits: &Limits,
        per_kernel: u64,
        per_call: u64,
    ) -> Result<Option<Export>> {
        let Some(db) = Database::of(path, kind, limits)? else {
            return Ok(None);
        };
        let err = |e: rusqlite::Error| sqlite_err(path, e);
        let (conn, schema) = open_export(&db.path, path)?;
        let rows = super::super::footprint::check_streaming(
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
        let pages = Tables::pages(&db.path).map_err(err)?;
        let string_ids = string_ids(&conn, &schema).map_err(err)?;
        Ok(Some(Export {
            conn,
            pages,
            schema,
            names: Names::new(string_ids),
            shown: path.to_owned(),
            parallel: true,
            _task: task,
            _db: db,
        }))
    }

    /// Read the kernel and API tables in one chunk on the calling thread: for exports read side
    /// by side, one per core, where chunks of each would only add states to merge.
    pub fn read_serially(&mut self) {
        self.parallel = false;
    }

    fn err(&self) -> impl Fn(rusqlite::Error) -> Error + '_ {
        move |e| sqlite_err(&self.shown, e)
    }

    /// The large tables, read from the file's pages where it can.
    fn tables(&self) -> Tables<'_> {
        Tables {
            conn: &self.conn,
            pages: self.pages.as_ref(),
        }
    }

    pub fn has(&self, table: &str) -> bool {
        self.schema.has(table)
    }

    /// Everything but the kernels and API calls: metadata, NVTX ranges and marks (when
    /// `nvtx`), memory operations (when `mem_ops`), graph executions, GPUs, thread names; in
    /// the bounds of [`crate::model::bounds`].
    pub fn trace_without_work(&mut self, nvtx: bool, mem_ops: bool) -> Result<Trace> {
        // The trace takes the export's string ids for now, and gives them back below.
        let names = std::mem::replace(&mut self.names, Names::new(Vec::new()));
        let rest = RawRest::read(&self.conn, &self.schema, names, Vec::new(), nvtx, mem_ops)
            .map_err(self.err())?;
        let (trace, names) =
            build_keeping_names(&self.shown, &self.schema, RawKernels::default(), rest)?;
        // The export keeps the string ids, to resolve the rows to come into the trace's strings.
        self.names = names;
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
        let tables = self.tables();
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

    /// A cursor at the first row of `table`, for [`Export::next`]: the rows of any table in
    /// table order, a window at a time. A column the table lacks (one that came in a later
    /// schema) reads as NULL.
    pub fn cursor(&self, table: &str, columns: &[&str]) -> Result<Cursor> {
        let have: std::collections::HashSet<String> = {
            let mut stmt = self
                .conn
                .prepare(&format!("PRAGMA table_info(\"{table}\")"))
                .map_err(self.err())?;
            let names = stmt
                .query_map([], |r| r.get::<_, String>(1))
                .map_err(self.err())?;
            names.collect::<rusqlite::Result<_>>().map_err(self.err())?
        };
        let columns: Vec<&str> = columns
            .iter()
            .map(|&c| if have.contains(c) { c } else { "NULL" })
            .collect();
        self.tables().cursor(table, &columns).map_err(self.err())
    }

    /// The next window of `cursor`'s rows, pieces of it read side by side into states from
    /// `init`, in table order; empty once every row has been read.
    pub fn next<S: Send>(
        &self,
        cursor: &mut Cursor,
        init: impl Fn() -> S + Sync,
        row: impl Fn(&mut S, &ScanRow<'_, '_>) -> rusqlite::Result<()> + Sync,
    ) -> Result<Vec<S>> {
        self.tables().next(cursor, init, row).map_err(self.err())
    }

    /// Rows of the CUDA API tables (runtime, then driver): chunks side by side, each from
    /// `init`, their states in table order. Without `names` the name ids read as 0.
    pub fn scan_api<S: Send>(
        &self,
        names: bool,
        init: impl Fn() -> S + Sync,
        row: impl Fn(&mut S, ApiRow) -> rusqlite::Result<()> + Sync,
    ) -> Result<Vec<S>> {
        let tables = self.tables();
        let mut out = Vec::new();
        for table in [RUNTIME, DRIVER] {
            if !self.schema.has(table) {
                continue;
            }
            let name = if names { NAME_ID } else { "NULL" };
            let columns = [START, END, GLOBAL_TID, CORRELATION_ID, name, "rowid"];
            let number = (table == DRIVER) as u8;
            let states = tables
                .scan(table, &columns, self.parallel, &init, |s, r| {
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
        let tables = self.tables();
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
            STREAM_ID,
        ];
        tables
            .scan(KERNEL, &columns, self.parallel, init, |s, r| {
                let k = KernelRow {
                    start: r.int(0)?,
                    end: r.int(1)?,
                    device: r.int(2)?,
                    correlation_id: r.int(3)?,
                    global_pid: r.int(4)?,
                    stream: r.int(9)?,
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
