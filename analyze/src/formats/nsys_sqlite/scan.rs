//! Scans of an export's tables, row by row: from the file's pages ([`sqlite_pages`]) when it
//! allows, in chunks of leaf pages read side by side on every core, else through SQL on one
//! thread. Either way a row reads the same, and a value of the wrong type is the same error
//! rusqlite gives, so the readers built on this ([`super::read`], and the streaming readers of
//! the analyses) do not know which way their rows came. A scan reads a table whole
//! ([`Tables::scan`]); a [`Cursor`] reads it in order a window at a time, for readers that
//! write rows as they come.

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
        let sql = format!("SELECT {} FROM [{table}]", select_list(columns));
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

/// `columns` as the list of a `SELECT`: names other than plain words bracketed, `NULL` as is.
fn select_list(columns: &[&str]) -> String {
    columns
        .iter()
        .map(|c| {
            if *c == "NULL" || c.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '_') {
                c.to_string()
            } else {
                format!("[{c}]")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
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

/// Leaf pages in one piece of a [`Cursor`]'s window, pieces in a window per thread, and rows in
/// one piece of its SQL reading.
const PIECE_LEAVES: usize = 32;
const WINDOW_PIECES: usize = 4;
const PIECE_ROWS: i64 = 4096;

/// A table's rows in table order, a window of pieces at a time ([`Tables::next`]): for readers
/// that write rows as they come, or merge several tables, holding one window and never the
/// table. The pieces of a window read from the file's pages are read side by side; SQL reads
/// one piece, by rowid from where the last one ended.
pub struct Cursor {
    table: String,
    columns: Vec<String>,
    way: Way,
}

enum Way {
    Pages {
        leaves: Vec<u32>,
        fields: Vec<sqlite_pages::Field>,
        next: usize,
    },
    Sql {
        after: Option<i64>,
        done: bool,
    },
}

impl Tables<'_> {
    /// A cursor at the first row of `table`, for `columns` (a column named `NULL` reads as
    /// NULL).
    pub fn cursor(&self, table: &str, columns: &[&str]) -> rusqlite::Result<Cursor> {
        let way = match self.pages {
            Some(pages) => match pages.table(self.conn, table, columns).map_err(damaged)? {
                Some((t, fields)) => Way::Pages {
                    leaves: t.leaves,
                    fields,
                    next: 0,
                },
                None => Way::Sql {
                    after: None,
                    done: false,
                },
            },
            None => Way::Sql {
                after: None,
                done: false,
            },
        };
        Ok(Cursor {
            table: table.to_owned(),
            columns: columns.iter().map(|c| c.to_string()).collect(),
            way,
        })
    }

    /// The next window of `cursor`'s rows: each piece starts from `init` and goes through
    /// `row`, and the pieces come back in table order; none once every row has been read. Rows
    /// are counted for progress.
    pub fn next<S: Send>(
        &self,
        cursor: &mut Cursor,
        init: impl Fn() -> S + Sync,
        row: impl Fn(&mut S, &ScanRow<'_, '_>) -> rusqlite::Result<()> + Sync,
    ) -> rusqlite::Result<Vec<S>> {
        let names: Vec<&str> = cursor.columns.iter().map(String::as_str).collect();
        match &mut cursor.way {
            Way::Pages {
                leaves,
                fields,
                next,
            } => {
                let pages = self.pages.expect("a cursor over pages has them");
                let window = (rayon::current_num_threads() * WINDOW_PIECES).max(1) * PIECE_LEAVES;
                let end = (*next + window).min(leaves.len());
                let part = &leaves[*next..end];
                *next = end;
                let fields = &*fields;
                let names = &names;
                part.par_chunks(PIECE_LEAVES)
                    .map(|leaves| {
                        let mut state = init();
                        let mut counted = progress::Counter::new();
                        pages
                            .scan(leaves, fields, |r| {
                                counted.add(1);
                                row(&mut state, &ScanRow::Page(r, names)).map_err(ScanError)
                            })
                            .map_err(|e: ScanError| e.0)?;
                        Ok(state)
                    })
                    .collect()
            }
            Way::Sql { after, done } => {
                if *done {
                    return Ok(Vec::new());
                }
                // The rowid last, after the columns asked for, to say where the piece ended.
                let sql = format!(
                    "SELECT {}, rowid FROM [{}] WHERE rowid > ?1 ORDER BY rowid LIMIT {PIECE_ROWS}",
                    select_list(&names),
                    cursor.table
                );
                let mut stmt = self.conn.prepare(&sql)?;
                let mut rows = stmt.query([after.unwrap_or(i64::MIN)])?;
                let mut state = init();
                let mut n = 0;
                let mut counted = progress::Counter::new();
                while let Some(r) = rows.next()? {
                    counted.add(1);
                    n += 1;
                    *after = Some(r.get(names.len())?);
                    row(&mut state, &ScanRow::Sql(r))?;
                }
                if n < PIECE_ROWS {
                    *done = true;
                }
                Ok(if n == 0 { Vec::new() } else { vec![state] })
            }
        }
    }
}
