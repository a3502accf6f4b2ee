//! Scans of an export's tables, row by row: from the file's pages ([`sqlite_pages`]) when it
//! allows, in chunks of leaf pages read side by side on every core, else through SQL on one
//! thread. Either way a row reads the same, and a value of the wrong type is the same error
//! rusqlite gives, so the readers built on this ([`super::read`], and the streaming readers of
//! the analyses) do not know which way their rows came.

use std::path::Path;

use rayon::prelude::*;
use rusqlite::types::ValueRef;
use rusqlite::Connection;

use crate::formats::sqlite_pages::{self, Damaged, PageFile};
use crate::progress;

/// Where an export's rows are read from.
pub struct Tables<'a> {
    pub conn: &'a Connection,
    /// The file's pages, when this reader handles the file.
    pub pages: Option<&'a PageFile>,
}

/// One row of a scan; [`ScanRow::get`]`(i)` reads the `i`-th column asked for.
pub enum ScanRow<'r, 'a> {
    Page(&'r sqlite_pages::Row<'a>, &'r [&'r str]),
    Sql(&'r rusqlite::Row<'a>),
}

impl ScanRow<'_, '_> {
    #[inline]
    pub fn get(&self, i: usize) -> rusqlite::Result<ValueRef<'_>> {
        match self {
            ScanRow::Page(r, _) => Ok(r.get(i)),
            ScanRow::Sql(r) => r.get_ref(i),
        }
    }

    /// An integer column that may be NULL; any other type is rusqlite's error.
    #[inline]
    pub fn opt_int(&self, i: usize) -> rusqlite::Result<Option<i64>> {
        if let ScanRow::Page(r, _) = self {
            if let Some(v) = r.integer(i) {
                return Ok(v);
            }
        }
        match self.get(i)? {
            ValueRef::Integer(v) => Ok(Some(v)),
            ValueRef::Null => Ok(None),
            other => Err(rusqlite::Error::InvalidColumnType(
                i,
                self.name(i),
                other.data_type(),
            )),
        }
    }

    /// An integer column, NULL read as 0.
    #[inline]
    pub fn int(&self, i: usize) -> rusqlite::Result<i64> {
        Ok(self.opt_int(i)?.unwrap_or(0))
    }

    fn name(&self, i: usize) -> String {
        match self {
            ScanRow::Page(_, names) => names.get(i).copied().unwrap_or("").to_owned(),
            ScanRow::Sql(r) => r
                .as_ref()
                .column_name(i)
                .map(str::to_owned)
                .unwrap_or_default(),
        }
    }
}

/// The error rusqlite gives for a damaged database, with what was found damaged.
pub fn damaged(d: Damaged) -> rusqlite::Error {
    rusqlite::Error::SqliteFailure(
        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CORRUPT),
        Some(d.0),
    )
}

impl Tables<'_> {
    /// Open the page reader of the export at `db`, when it handles the file.
    pub fn pages(db: &Path) -> rusqlite::Result<Option<PageFile>> {
        PageFile::open(db).map_err(damaged)
    }

    /// Scan `table` for `columns` (a column named `NULL` reads as NULL): every chunk of its rows
    /// starts from `init` and goes through `row`, chunks side by side when `parallel`; the
    /// chunks' states come back in the table's order. Rows are counted for progress.
    pub fn scan<S: Send>(
        &self,
        table: &str,
        columns: &[&str],
        parallel: bool,
        init: impl Fn() -> S + Sync,
        row: impl Fn(&mut S, &ScanRow<'_, '_>) -> rusqlite::Result<()> + Sync,
    ) -> rusqlite::Result<Vec<S>> {
        if let Some(pages) = self.pages {
            if let Some((t, fields)) = pages.table(self.conn, table, columns).map_err(damaged)? {
                let chunks = if parallel {
                    (rayon::current_num_threads() * 4).max(1)
                } else {
                    1
                };
                let size = t.leaves.len().div_ceil(chunks).max(1);
                return t
                    .leaves
                    .par_chunks(size)
                    .map(|leaves| {
                        let mut state = init();
                        let mut counted = progress::Counter::new();
                        pages
                            .scan(leaves, &fields, |r| {
                                counted.add(1);
                                row(&mut state, &ScanRow::Page(r, columns)).map_err(ScanError)
                            })
                            .map_err(|e: ScanError| e.0)?;
                        Ok(state)
                    })
                    .collect();
            }
        }
        let list = columns
            .iter()
            .map(|c| {
                if *c == "NULL" || c.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '_') {
                    c.to_string()
                } else {
                    format!("[{c}]")
                }
            })
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!("SELECT {list} FROM [{table}]");
        let mut stmt = self.conn.prepare(&sql)?;
        let mut rows = stmt.query([])?;
        let mut state = init();
        let mut counted = progress::Counter::new();
        while let Some(r) = rows.next()? {
            counted.add(1);
            row(&mut state, &ScanRow::Sql(r))?;
        }
        Ok(vec![state])
    }
}

/// A scan's error: the row function's, or damage found in the pages.
struct ScanError(rusqlite::Error);

impl From<Damaged> for ScanError {
    fn from(d: Damaged) -> ScanError {
        ScanError(damaged(d))
    }
}

impl From<rusqlite::Error> for ScanError {
    fn from(e: rusqlite::Error) -> ScanError {
        ScanError(e)
    }
}
