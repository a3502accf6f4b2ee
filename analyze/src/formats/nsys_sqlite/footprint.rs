//! The memory reading an export will take, estimated from its row counts before a row is read,
//! so that an export too large for the machine is refused with one line instead of ending in an
//! out-of-memory kill halfway through.
//!
//! A table's row count is first bounded by its largest rowid (one B-tree descent; nsys writes
//! rows with consecutive rowids, so it is the count); only when that bound says the load would
//! not fit are the rows counted exactly, so a file with a stray large rowid is not refused on
//! its word. Each row costs what the model keeps of it ([`Kernel`], [`ApiCall`], ...) times
//! [`WORKING_FACTOR`], which covers the growth of vectors while reading, the sort, and the
//! analyses' own copies; it was measured on the 60-step export replicated 50 times (6.85 M
//! kernels, 12.5 M API calls), where `stats --report all` peaked at 1.6 GB.

use std::collections::HashSet;
use std::path::Path;

use rusqlite::Connection;

use super::table::*;
use crate::error::Result;
use crate::formats::limits::Limits;
use crate::model::trace::{ApiCall, Kernel, MemOp, Range};

/// Peak memory of a load and its analyses, as a multiple of the bytes the model holds.
pub const WORKING_FACTOR: u64 = 2;

/// Bytes of the model per row of each table the reader reads, with what a row is called.
fn per_row(table: &str) -> Option<(u64, &'static str)> {
    let size = |n: usize| n as u64;
    Some(match table {
        KERNEL => (size(std::mem::size_of::<Kernel>()), "kernels"),
        RUNTIME | DRIVER => (size(std::mem::size_of::<ApiCall>()), "CUDA API calls"),
        // The row as read, then the range made from it.
        NVTX_EVENTS => (size(std::mem::size_of::<Range>()) * 3, "NVTX events"),
        MEMCPY | MEMSET => (size(std::mem::size_of::<MemOp>()), "memory operations"),
        // A name, typically tens of bytes, stored twice while being interned.
        STRING_IDS => (160, "strings"),
        _ => return None,
    })
}

fn rows(conn: &Connection, table: &str, exact: bool) -> u64 {
    let sql = if exact {
        format!("SELECT count(*) FROM \"{table}\"")
    } else {
        format!("SELECT max(rowid) FROM \"{table}\"")
    };
    conn.query_row(&sql, [], |r| r.get::<_, Option<i64>>(0))
        .ok()
        .flatten()
        .map_or(0, |n| n.max(0) as u64)
}

/// Rows of the tables read, and the bytes of the model they make.
struct Estimate {
    /// Rows of the kernel and API tables, the bulk of any export, which the reader counts.
    rows: u64,
    bytes: u64,
    what: Vec<(u64, &'static str)>,
}

fn estimate(
    conn: &Connection,
    tables: &HashSet<String>,
    exact: bool,
    streamed: Option<(u64, u64)>,
) -> Estimate {
    let mut e = Estimate {
        rows: 0,
        bytes: 0,
        what: Vec::new(),
    };
    for table in [
        KERNEL,
        RUNTIME,
        DRIVER,
        NVTX_EVENTS,
        MEMCPY,
        MEMSET,
        STRING_IDS,
    ] {
        let Some((mut bytes, noun)) = per_row(table).filter(|_| tables.contains(table)) else {
            continue;
        };
        // A streaming reader keeps a few bytes of each kernel and API call, not the row.
        match (table, streamed) {
            (KERNEL, Some((kernel, _))) => bytes = kernel,
            (RUNTIME | DRIVER, Some((_, call))) => bytes = call,
            _ => {}
        }
        let n = rows(conn, table, exact);
        if matches!(table, KERNEL | RUNTIME | DRIVER) {
            e.rows = e.rows.saturating_add(n);
        }
        e.bytes = e
            .bytes
            .saturating_add(n.saturating_mul(bytes).saturating_mul(WORKING_FACTOR));
        match e.what.iter_mut().find(|(_, w)| *w == noun) {
            Some(w) => w.0 += n,
            None => e.what.push((n, noun)),
        }
    }
    e
}

/// Refuse the export when reading it would not fit in the memory `limits` allow; else return
/// about how many kernel and API rows the load will read (for progress).
pub(super) fn check(
    conn: &Connection,
    tables: &HashSet<String>,
    path: &Path,
    limits: &Limits,
) -> Result<u64> {
    check_with(conn, tables, path, limits, None)
}

/// [`check`] for a reader that streams the kernel and API tables, keeping `per_kernel` and
/// `per_call` bytes of each row.
pub(super) fn check_streaming(
    conn: &Connection,
    tables: &HashSet<String>,
    path: &Path,
    limits: &Limits,
    per_kernel: u64,
    per_call: u64,
) -> Result<u64> {
    check_with(conn, tables, path, limits, Some((per_kernel, per_call)))
}

fn check_with(
    conn: &Connection,
    tables: &HashSet<String>,
    path: &Path,
    limits: &Limits,
    streamed: Option<(u64, u64)>,
) -> Result<u64> {
    let quick = estimate(conn, tables, false, streamed);
    let Some((budget, _)) = limits.memory_budget() else {
        return Ok(quick.rows);
    };
    if quick.bytes <= budget {
        return Ok(quick.rows);
    }
    let exact = estimate(conn, tables, true, streamed);
    let what = exact
        .what
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, noun)| format!("{} {noun}", thousands(*n)))
        .collect::<Vec<_>>()
        .join(", ");
    limits.check_memory(path, exact.bytes, &what)?;
    Ok(exact.rows)
}

/// `12500000` as `12,500,000`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_read_with_thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(12_500_000), "12,500,000");
    }
}
