//! The rows of one table as a feed the trace reports pull from: records decoded a window at a
//! time (the window's pieces side by side), so that a report merges tables or joins them while
//! holding a window of each, never a table. A feed over an export reads it in table order, which
//! is the order of start: nsys writes every event table so, as does `collect`, and a feed that
//! needs the order checks it as the rows pass, a row out of it stopping the report with an
//! error rather than printing rows out of order. A loaded trace's rows, sorted, feed the same
//! way from memory.

use std::collections::VecDeque;

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::formats::nsys_sqlite::read::Export;
use crate::formats::nsys_sqlite::scan::{Cursor, ScanRow};

/// Decodes a row of a scan into a record, `None` to leave it out.
pub(super) type Decode<'a, R> =
    &'a (dyn Fn(&ScanRow<'_, '_>) -> rusqlite::Result<Option<R>> + Sync);

/// Where a feed's records come from.
enum From<'a, R> {
    Export {
        export: &'a Export,
        cursor: Cursor,
        decode: Decode<'a, R>,
    },
    Records(Box<dyn Iterator<Item = R> + 'a>),
}

/// Records in order, pulled one at a time, read a window at a time.
pub(super) struct Feed<'a, R> {
    from: From<'a, R>,
    buf: VecDeque<R>,
    done: bool,
    /// The order of start the rows must keep, where it is checked.
    order: Option<Order<R>>,
}

/// The order of start a feed's rows must keep: their file and table, how a record's start is
/// read, and the start of the last row read.
struct Order<R> {
    path: std::path::PathBuf,
    table: String,
    start: fn(&R) -> i64,
    last: i64,
}

/// Records taken from an iterator at each refill.
const WINDOW: usize = 8192;
/// Records a piece of a table is made ready for.
const PIECE: usize = 2048;

impl<'a, R: Send> Feed<'a, R> {
    /// The rows of `table` in table order, as `decode` makes them.
    pub(super) fn export(
        export: &'a Export,
        table: &str,
        columns: &[&str],
        decode: Decode<'a, R>,
    ) -> Result<Feed<'a, R>> {
        Ok(Feed {
            from: From::Export {
                export,
                cursor: export.cursor(table, columns)?,
                decode,
            },
            buf: VecDeque::new(),
            done: false,
            order: None,
        })
    }

    /// The rows of `table`, which must come in order of start (`start` reads it): a row that
    /// starts before the one above it is an error about `path`.
    pub(super) fn by_start(
        export: &'a Export,
        path: &std::path::Path,
        table: &str,
        columns: &[&str],
        decode: Decode<'a, R>,
        start: fn(&R) -> i64,
    ) -> Result<Feed<'a, R>> {
        let mut feed = Feed::export(export, table, columns, decode)?;
        feed.order = Some(Order {
            path: path.to_owned(),
            table: table.to_owned(),
            start,
            last: i64::MIN,
        });
        Ok(feed)
    }

    /// Records already in memory (a loaded trace's), in the order given.
    pub(super) fn records(records: impl Iterator<Item = R> + 'a) -> Feed<'a, R> {
        Feed {
            from: From::Records(Box::new(records)),
            buf: VecDeque::new(),
            done: false,
            order: None,
        }
    }

    /// The next window of records, in pieces (each read on a thread of its own); none at the
    /// end. Records already pulled into the buffer by [`Feed::pop`] come first.
    pub(super) fn window(&mut self) -> Result<Vec<Vec<R>>> {
        if !self.buf.is_empty() {
            return Ok(vec![self.buf.drain(..).collect()]);
        }
        if self.done {
            return Ok(Vec::new());
        }
        let pieces = match &mut self.from {
            From::Export {
                export,
                cursor,
                decode,
            } => export.next(
                cursor,
                || Vec::with_capacity(PIECE),
                |v: &mut Vec<R>, r| {
                    if let Some(rec) = decode(r)? {
                        v.push(rec);
                    }
                    Ok(())
                },
            )?,
            From::Records(it) => {
                let piece: Vec<R> = it.by_ref().take(WINDOW).collect();
                if piece.is_empty() {
                    Vec::new()
                } else {
                    vec![piece]
                }
            }
        };
        self.done = pieces.is_empty();
        if let Some(order) = &mut self.order {
            for r in pieces.iter().flatten() {
                let start = (order.start)(r);
                if start < order.last {
                    return Err(out_of_order(&order.path, &order.table));
                }
                order.last = start;
            }
        }
        Ok(pieces)
    }

    /// The next window of records, each handed to `each` with the state of its piece (made by
    /// `init`), pieces side by side; the states in order, none at the end. The records are not
    /// kept.
    pub(super) fn window_each<S: Send>(
        &mut self,
        init: impl Fn() -> S + Sync,
        each: impl Fn(&mut S, &R) + Sync,
    ) -> Result<Vec<S>>
    where
        R: Sync,
    {
        match &mut self.from {
            From::Export {
                export,
                cursor,
                decode,
            } if self.buf.is_empty() => export.next(cursor, init, |s, r| {
                if let Some(rec) = decode(r)? {
                    each(s, &rec);
                }
                Ok(())
            }),
            _ => {
                let pieces = self.window()?;
                Ok(pieces
                    .par_iter()
                    .flat_map(|p| p.par_chunks(PIECE))
                    .map(|chunk| {
                        let mut s = init();
                        for r in chunk {
                            each(&mut s, r);
                        }
                        s
                    })
                    .collect())
            }
        }
    }

    /// Read the next window into the buffer, if there is one.
    fn refill(&mut self) -> Result<()> {
        while self.buf.is_empty() && !self.done {
            let pieces = self.window()?;
            self.buf.extend(pieces.into_iter().flatten());
        }
        Ok(())
    }

    /// The next record.
    pub(super) fn pop(&mut self) -> Result<Option<R>> {
        self.refill()?;
        Ok(self.buf.pop_front())
    }
}

/// Every row of `table` of `export` that `row` makes a record of, in table order: for the
/// tables a report holds (labels, thread names, memory operations).
pub(super) fn read_all<R: Send>(
    export: &Export,
    table: &str,
    columns: &[&str],
    row: impl Fn(&ScanRow<'_, '_>) -> rusqlite::Result<Option<R>> + Sync,
) -> Result<Vec<R>> {
    let mut out = Vec::new();
    fold_all(export, table, columns, row, |r| out.push(r))?;
    Ok(out)
}

/// Every row of `table` of `export` that `row` makes a record of, handed to `fold` in table
/// order, a window at a time.
pub(super) fn fold_all<R: Send>(
    export: &Export,
    table: &str,
    columns: &[&str],
    row: impl Fn(&ScanRow<'_, '_>) -> rusqlite::Result<Option<R>> + Sync,
    mut fold: impl FnMut(R),
) -> Result<()> {
    let mut cursor = export.cursor(table, columns)?;
    loop {
        let pieces = export.next(&mut cursor, Vec::new, |v: &mut Vec<R>, r| {
            v.extend(row(r)?);
            Ok(())
        })?;
        if pieces.is_empty() {
            return Ok(());
        }
        pieces.into_iter().flatten().for_each(&mut fold);
    }
}

/// The error of a table whose rows are not in order of start.
pub(super) fn out_of_order(path: &std::path::Path, table: &str) -> Error {
    Error::Malformed {
        path: path.to_owned(),
        message: format!(
            "the rows of {table} are not in order of start, the order nsys writes them in and \
             the trace reports read them in"
        ),
    }
}
