//! The rows of one table as a feed the trace reports pull from: records decoded a window at a
//! time (the window's pieces side by side, and the next window, where asked, read ahead while
//! the records of this one are pulled on another thread), so that a report merges tables or
//! joins them while holding a window or two of each, never a table. A feed over an export reads
//! it in table order, which is the order of start: nsys writes every event table so, as does
//! `collect`, and a feed that needs the order checks it as the rows pass, a row out of it
//! stopping the report with an error rather than printing rows out of order. A loaded trace's
//! rows, sorted, feed the same way from memory.

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::formats::nsys_sqlite::read::Export;
use crate::formats::nsys_sqlite::scan::{Cursor, ScanRow};

/// Decodes a row of a scan into a record, `None` to leave it out: a function known where the
/// feed is made, so that it is compiled into the loop over a page's rows.
pub(super) trait Decode<R>:
    Fn(&ScanRow<'_, '_>) -> rusqlite::Result<Option<R>> + Sync
{
}

impl<R, F: Fn(&ScanRow<'_, '_>) -> rusqlite::Result<Option<R>> + Sync> Decode<R> for F {}

/// Where a feed's records come from.
enum From<'a, R, D> {
    Export {
        export: &'a Export,
        cursor: Cursor,
        decode: D,
    },
    Records(Box<dyn Iterator<Item = R> + Send + 'a>),
}

/// Records in order, pulled one at a time, read a window at a time.
pub(super) struct Feed<'a, R, D> {
    reader: Reader<'a, R, D>,
    queue: Queue<R>,
}

/// What reads a feed's windows: apart from the records read, so that the next window may be
/// read while they are pulled on another thread ([`Feed::parts`]).
pub(super) struct Reader<'a, R, D> {
    from: From<'a, R, D>,
    done: bool,
    /// The order of start the rows must keep, where it is checked.
    order: Option<Order<R>>,
    /// The window after the records read, read ahead ([`Reader::read_ahead`]).
    ahead: Option<Result<Vec<Vec<R>>>>,
}

/// Records read and not yet pulled: the rest of the piece pulled from, then the window's pieces
/// after it.
pub(super) struct Queue<R> {
    piece: std::vec::IntoIter<R>,
    pieces: std::vec::IntoIter<Vec<R>>,
}

impl<R> Default for Queue<R> {
    fn default() -> Queue<R> {
        Queue {
            piece: Vec::new().into_iter(),
            pieces: Vec::new().into_iter(),
        }
    }
}

impl<R> Queue<R> {
    /// The next record read, if any is left.
    #[inline]
    pub(super) fn pop(&mut self) -> Option<R> {
        loop {
            if let Some(r) = self.piece.next() {
                return Some(r);
            }
            self.piece = self.pieces.next()?.into_iter();
        }
    }

    fn is_empty(&self) -> bool {
        self.piece.len() == 0 && self.pieces.len() == 0
    }

    /// The records left, in pieces.
    fn take(&mut self) -> Vec<Vec<R>> {
        let piece = std::mem::take(&mut self.piece);
        let pieces = std::mem::take(&mut self.pieces);
        std::iter::once(piece.collect())
            .chain(pieces)
            .filter(|p: &Vec<R>| !p.is_empty())
            .collect()
    }
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

impl<'a, R: Send, D: Decode<R>> Feed<'a, R, D> {
    /// The rows of `table` in table order, as `decode` makes them.
    pub(super) fn export(
        export: &'a Export,
        table: &str,
        columns: &[&str],
        decode: D,
    ) -> Result<Feed<'a, R, D>> {
        Ok(Feed::from(From::Export {
            export,
            cursor: export.cursor(table, columns)?,
            decode,
        }))
    }

    /// The rows of `table`, which must come in order of start (`start` reads it): a row that
    /// starts before the one above it is an error about `path`.
    pub(super) fn by_start(
        export: &'a Export,
        path: &std::path::Path,
        table: &str,
        columns: &[&str],
        decode: D,
        start: fn(&R) -> i64,
    ) -> Result<Feed<'a, R, D>> {
        let mut feed = Feed::export(export, table, columns, decode)?;
        feed.reader.order = Some(Order {
            path: path.to_owned(),
            table: table.to_owned(),
            start,
            last: i64::MIN,
        });
        Ok(feed)
    }

    /// Records already in memory (a loaded trace's), in the order given.
    pub(super) fn records(records: impl Iterator<Item = R> + Send + 'a) -> Feed<'a, R, D> {
        Feed::from(From::Records(Box::new(records)))
    }

    fn from(from: From<'a, R, D>) -> Feed<'a, R, D> {
        Feed {
            reader: Reader {
                from,
                done: false,
                order: None,
                ahead: None,
            },
            queue: Queue::default(),
        }
    }

    /// The feed's reader and its records read, to pull records from the one while the other
    /// reads ahead.
    pub(super) fn parts(&mut self) -> (&mut Reader<'a, R, D>, &mut Queue<R>) {
        (&mut self.reader, &mut self.queue)
    }

    /// The next window (read ahead, or read now) into the records to pull, once those are
    /// pulled; false at the end.
    pub(super) fn refill(&mut self) -> Result<bool> {
        if !self.queue.is_empty() {
            return Ok(true);
        }
        let pieces = self.reader.next()?;
        if pieces.is_empty() {
            return Ok(false);
        }
        self.queue.pieces = pieces.into_iter();
        Ok(true)
    }

    /// The next window of records, in pieces (each read on a thread of its own); none at the
    /// end. Records read and not yet pulled come first.
    pub(super) fn window(&mut self) -> Result<Vec<Vec<R>>> {
        if !self.queue.is_empty() {
            return Ok(self.queue.take());
        }
        self.reader.next()
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
        let direct = self.queue.is_empty() && self.reader.ahead.is_none();
        match &mut self.reader.from {
            From::Export {
                export,
                cursor,
                decode,
            } if direct => export.next(cursor, init, |s, r| {
                // The record is looked at where `decode` made it, never moved.
                if let Some(ref rec) = decode(r)? {
                    each(s, rec);
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
}

impl<R: Send, D: Decode<R>> Reader<'_, R, D> {
    /// Read the next window ahead, unless it is read already or every row has been.
    pub(super) fn read_ahead(&mut self) {
        if self.ahead.is_none() && !self.done {
            self.ahead = Some(self.read());
        }
    }

    /// The next window: the one read ahead, else one read now; none at the end.
    fn next(&mut self) -> Result<Vec<Vec<R>>> {
        match self.ahead.take() {
            Some(window) => window,
            None => self.read(),
        }
    }

    /// Read the next window of records, checking their order where it must hold.
    fn read(&mut self) -> Result<Vec<Vec<R>>> {
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
}

/// The integer columns `first..first + N` of a row, NULL as `None`. A row read from the file's
/// pages has them decoded already and is read in place, with no error to carry per cell (a
/// trace report reads tens of millions of cells); any other row, or a cell of another type,
/// goes through [`ScanRow::opt_int`] and its error.
#[inline(always)]
pub(super) fn ints<const N: usize>(
    r: &ScanRow<'_, '_>,
    first: usize,
) -> rusqlite::Result<[Option<i64>; N]> {
    let mut out = [None; N];
    if let ScanRow::Page(row, _) = r {
        let mut all = true;
        for (i, o) in out.iter_mut().enumerate() {
            match row.integer(first + i) {
                Some(v) => *o = v,
                None => all = false,
            }
        }
        if all {
            return Ok(out);
        }
    }
    for (i, o) in out.iter_mut().enumerate() {
        *o = r.opt_int(first + i)?;
    }
    Ok(out)
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
    windows(
        export,
        table,
        columns,
        Vec::new,
        |v: &mut Vec<R>, r| {
            v.extend(row(r)?);
            Ok(())
        },
        |pieces| pieces.into_iter().flatten().for_each(&mut fold),
    )
}

/// Every row of `table` of `export` through `row`, into the state of its piece (made by
/// `init`, pieces side by side); each window's states handed to `each`, in table order.
pub(super) fn windows<S: Send>(
    export: &Export,
    table: &str,
    columns: &[&str],
    init: impl Fn() -> S + Sync,
    row: impl Fn(&mut S, &ScanRow<'_, '_>) -> rusqlite::Result<()> + Sync,
    mut each: impl FnMut(Vec<S>),
) -> Result<()> {
    let mut cursor = export.cursor(table, columns)?;
    loop {
        let pieces = export.next(&mut cursor, &init, &row)?;
        if pieces.is_empty() {
            return Ok(());
        }
        each(pieces);
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
