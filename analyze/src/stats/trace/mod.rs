//! nsys's per-instance reports: `cuda_gpu_trace` (a row per kernel, memcpy and memset, by start),
//! `cuda_kern_exec_trace` (a row per kernel with the API call that launched it, by the call's
//! start) and `cuda_api_trace` (a row per CUDA API call, by start), with the rows, order and
//! columns of Nsight Systems 2025.3.
//!
//! A trace report has a row for every kernel or call, so it is never held: rows are encoded as
//! they come off the export's tables, pieces of a table side by side, and written to
//! a [`RowSink`] in order; nsys writes every event table in order of start, and the reports
//! check that as they read. `cuda_gpu_trace` splices the memory operations (a small table, held)
//! into the kernels as they stream; `cuda_kern_exec_trace` follows the API table and takes each
//! call's kernels from the kernel table as it streams, having counted the kernels of each call
//! first. What is held is a window of each table, the kernels met before their call, and a bit
//! per launch.
//!
//! An export gives every column nsys prints. A loaded trace (a Kineto trace) gives the columns
//! the model keeps; the context, green context, memory kinds, result and thread priority it does
//! not know are empty.

mod api;
mod feed;
mod gpu;
mod kern_exec;

use std::borrow::Cow;

use crate::error::{Error, Result};
use crate::formats::nsys_sqlite::read::{Export, RawName, Texts};
use crate::formats::nsys_sqlite::scan::ScanRow;
use crate::model::trace::{StrId, Trace};
use crate::render::stream::{CellSink, RowSink, Rows};
use crate::source::UNNAMED_KERNEL;

use super::cuda_api_sum::display_name;
use super::{KernelName, Report};

/// Rows joined at a time: few enough that they and their text stay in the caches while they
/// are encoded and written.
const BATCH: usize = 1 << 12;

/// Where a trace report reads its rows.
pub enum Input<'a> {
    /// An export streamed, with the trace of its small tables (GPUs, thread names).
    Export(&'a Export, &'a Trace),
    /// A trace in memory.
    Loaded(&'a Trace),
}

impl Input<'_> {
    /// The file read.
    pub fn path(&self) -> &std::path::Path {
        &self.trace().source.path
    }

    fn trace(&self) -> &Trace {
        match self {
            Input::Export(_, t) | Input::Loaded(t) => t,
        }
    }

    fn text(&self) -> Text<'_> {
        match self {
            Input::Export(e, _) => Text::Export(e.texts()),
            Input::Loaded(t) => Text::Loaded(t),
        }
    }
}

/// Names as rows hold them, read as text: an export's string ids, a loaded trace's interned ids.
enum Text<'a> {
    Export(Texts<'a>),
    Loaded(&'a Trace),
}

impl Text<'_> {
    fn of<'n>(&'n self, raw: &'n RawName) -> Option<Cow<'n, str>> {
        match self {
            Text::Export(t) => t.text(raw),
            Text::Loaded(t) => match raw {
                RawName::Id(id) => Some(Cow::Borrowed(t.name(StrId(*id as u32)))),
                RawName::Text(s) => Some(Cow::Borrowed(s)),
                RawName::None => None,
            },
        }
    }

    /// A kernel's name; a kernel without one is [`UNNAMED_KERNEL`], as in the other reports.
    fn kernel<'n>(&'n self, raw: &'n RawName) -> Cow<'n, str> {
        self.of(raw).unwrap_or(Cow::Borrowed(UNNAMED_KERNEL))
    }

    /// The cell of a kernel's name, keyed by its id where it has one, so that the sink may keep
    /// what it made of it.
    fn kernel_cell(&self, raw: &RawName, c: &mut dyn CellSink) {
        let text = self.kernel(raw);
        match raw {
            RawName::Id(id) => c.named((*id as u64) << 1, &text),
            _ => c.text(&text),
        }
    }

    /// The cell of an API function's name as nsys prints it ([`display_name`]), keyed likewise.
    fn function_cell(&self, raw: &RawName, c: &mut dyn CellSink) {
        match (raw, self.of(raw)) {
            (RawName::Id(id), Some(text)) => c.named((*id as u64) << 1 | 1, display_name(&text)),
            (_, text) => c.opt_text(text.as_deref().map(display_name)),
        }
    }
}

/// A kernel's name among the columns read: the one `names` asks for, or for `:mangled` the
/// demangled one where the mangled one is missing.
fn kernel_name(names: KernelName, first: RawName, second: RawName) -> RawName {
    match (names, first) {
        (KernelName::Mangled, RawName::None) => second,
        (_, first) => first,
    }
}

/// The kernel name of a row whose name columns ([`name_columns`]) start at `at`; the second is
/// read only where `:mangled` falls back to it.
#[inline(always)]
fn read_kernel_name(
    r: &ScanRow<'_, '_>,
    names: KernelName,
    at: usize,
) -> rusqlite::Result<RawName> {
    let first = RawName::from(r.get(at)?);
    Ok(match (names, &first) {
        (KernelName::Mangled, RawName::None) => {
            kernel_name(names, first, RawName::from(r.get(at + 1)?))
        }
        _ => first,
    })
}

/// A kernel's launch configuration: its grid and block.
const LAUNCH: [&str; 6] = {
    use crate::formats::nsys_sqlite::column::{BLOCK_X, BLOCK_Y, BLOCK_Z, GRID_X, GRID_Y, GRID_Z};
    [GRID_X, GRID_Y, GRID_Z, BLOCK_X, BLOCK_Y, BLOCK_Z]
};

/// The kernel table's name columns to read for `names`: the one asked for, and the demangled
/// name where `:mangled` may fall back to it.
fn name_columns(names: KernelName) -> [&'static str; 2] {
    use crate::formats::nsys_sqlite::column::{DEMANGLED_NAME, MANGLED_NAME, SHORT_NAME};
    match names {
        KernelName::Demangled => [DEMANGLED_NAME, "NULL"],
        KernelName::Short => [SHORT_NAME, "NULL"],
        KernelName::Mangled => [MANGLED_NAME, DEMANGLED_NAME],
    }
}

/// The process and thread ids nsys reads out of a global thread id.
fn pid_tid(global_tid: i64) -> (i64, i64) {
    ((global_tid >> 24) & 0xFF_FFFF, global_tid & 0xFF_FFFF)
}

/// A table's column names, and which of them hold numbers.
pub struct Columns {
    pub names: &'static [&'static str],
    pub numeric: &'static [bool],
}

/// Whether `report` is one of the trace reports.
pub fn is_trace(report: Report) -> bool {
    matches!(
        report,
        Report::CudaGpuTrace(_) | Report::CudaKernExecTrace(_) | Report::CudaApiTrace
    )
}

/// The columns of a trace report.
pub fn columns(report: Report) -> Columns {
    match report {
        Report::CudaGpuTrace(_) => gpu::COLUMNS,
        Report::CudaKernExecTrace(_) => kern_exec::COLUMNS,
        _ => api::COLUMNS,
    }
}

/// Where a report's rows go: the sink, and the file it writes (named in a write error).
pub struct Out<'s> {
    sink: &'s mut dyn RowSink,
    path: &'s std::path::Path,
}

impl<'s> Out<'s> {
    pub fn new(sink: &'s mut dyn RowSink, path: &'s std::path::Path) -> Out<'s> {
        Out { sink, path }
    }

    /// Rows `range` of `rows`, encoded already.
    fn write(&mut self, rows: &mut Rows, range: std::ops::Range<usize>) -> Result<()> {
        self.sink.write(rows, range).map_err(Error::io(self.path))
    }

    /// Every row of `parts`, encoded already, in order.
    fn write_parts(&mut self, parts: &mut [Rows]) -> Result<()> {
        for rows in parts {
            let n = rows.len();
            self.write(rows, 0..n)?;
        }
        Ok(())
    }
}

/// The rows of a piece of a table, encoded as it was read, and what the writer checks of it:
/// its first and last start, and whether it was in order.
struct Piece {
    rows: Rows,
    first: Option<i64>,
    last: i64,
    out_of_order: bool,
    /// The row of the first row of the other tables encoded into this piece, if any.
    first_other: Option<usize>,
    /// The next row of the other tables that may go into this piece.
    next_other: usize,
}

impl Default for Piece {
    fn default() -> Piece {
        Piece {
            // A piece of 32 pages holds about a thousand rows, of a few hundred bytes in CSV.
            rows: Rows::with_capacity(1 << 11, 1 << 8),
            first: None,
            last: i64::MIN,
            out_of_order: false,
            first_other: None,
            next_other: 0,
        }
    }
}

/// Pieces written, kept for the next window: their buffers, and what their rows' encoding
/// keeps of names and groups of cells, serve again.
#[derive(Default)]
struct Pieces(std::sync::Mutex<Vec<Piece>>);

impl Pieces {
    /// A piece to fill.
    fn take(&self) -> Piece {
        let spare = self.0.lock().unwrap_or_else(|e| e.into_inner()).pop();
        spare.unwrap_or_default()
    }

    /// `piece`, written, back for another window.
    fn give(&self, mut piece: Piece) {
        piece.rows.clear();
        piece.first = None;
        piece.last = i64::MIN;
        piece.out_of_order = false;
        piece.first_other = None;
        piece.next_other = 0;
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(piece);
    }
}

impl Piece {
    /// Note a row that starts at `start`; true for the piece's first.
    fn start(&mut self, start: i64) -> bool {
        let first = self.first.is_none();
        if first {
            self.first = Some(start);
        } else if start < self.last {
            self.out_of_order = true;
        }
        self.last = start;
        first
    }

    /// Check that the piece follows the rows written before it (the last of which started at
    /// `last`) in order of start, as `table` of `path` must; `last` moves to the piece's end.
    fn follows(&self, last: &mut i64, table: &str, path: &std::path::Path) -> Result<()> {
        let Some(first) = self.first else {
            return Ok(());
        };
        if self.out_of_order || first < *last {
            return Err(feed::out_of_order(path, table));
        }
        *last = self.last;
        Ok(())
    }
}

/// Write the rows of the trace report `report` of `input` to `out`, in nsys's order.
pub fn write(input: &Input<'_>, report: Report, out: &mut Out<'_>) -> Result<()> {
    match report {
        Report::CudaGpuTrace(names) => gpu::write(input, names, out),
        Report::CudaKernExecTrace(names) => kern_exec::write(input, names, out),
        _ => api::write(input, out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mangled_names_fall_back_to_demangled_ones() {
        let (m, d) = (RawName::Id(7), RawName::Id(9));
        assert_eq!(kernel_name(KernelName::Mangled, m.clone(), d.clone()), m);
        assert_eq!(
            kernel_name(KernelName::Mangled, RawName::None, d.clone()),
            d
        );
        assert_eq!(
            kernel_name(KernelName::Demangled, RawName::None, RawName::None),
            RawName::None
        );
    }
}
