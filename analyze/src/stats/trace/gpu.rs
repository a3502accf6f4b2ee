//! `cuda_gpu_trace` (and `:base`, `:mangled`): every kernel, memcpy and memset, by start.
//!
//! As in nsys: the three tables' rows merged by start (equal starts: kernels, then memcpys, then
//! memsets, each in table order); sizes in MB of 10^6 bytes with three decimals; the throughput
//! is nsys's `bytes * (1000000000 / duration)`, the division an integer one, empty for a zero
//! duration; memory kinds and copy directions as the export's `ENUM_*` tables label them; the
//! device as `NAME (ID)` from `TARGET_INFO_GPU`; a green context of 0 printed empty. Nsys's
//! `:nvtx-name` variant is not reproduced.

use std::borrow::Cow;

use crate::error::Result;
use crate::fast_hash::FastMap;
use crate::formats::nsys_sqlite::column::*;
use crate::formats::nsys_sqlite::read::{Export, RawName};
use crate::formats::nsys_sqlite::scan::ScanRow;
use crate::formats::nsys_sqlite::table::{
    ENUM_CUDA_MEMCPY_OPER, ENUM_CUDA_MEM_KIND, KERNEL, MEMCPY, MEMSET,
};
use crate::model::trace::{MemOpKind, Nanos, Trace};
use crate::render::stream::{CellSink, Rows};

use super::feed::{ints, read_all, Decode, Feed};
use super::{name_columns, read_kernel_name, Columns, Input, Out, Piece, Pieces, Text, LAUNCH};
use crate::stats::KernelName;

pub(super) const COLUMNS: Columns = Columns {
    names: &[
        "Start (ns)",
        "Duration (ns)",
        "CorrId",
        "GrdX",
        "GrdY",
        "GrdZ",
        "BlkX",
        "BlkY",
        "BlkZ",
        "Reg/Trd",
        "StcSMem (MB)",
        "DymSMem (MB)",
        "Bytes (MB)",
        "Throughput (MB/s)",
        "SrcMemKd",
        "DstMemKd",
        "Device",
        "Ctx",
        "GreenCtx",
        "Strm",
        "Name",
    ],
    numeric: &[
        true, true, true, true, true, true, true, true, true, true, true, true, true, true, false,
        false, false, true, true, true, false,
    ],
};

/// A kernel, memcpy or memset: what `cuda_gpu_trace` prints of it.
struct Op {
    start: i64,
    end: i64,
    correlation_id: Option<i64>,
    device: i64,
    context: Option<i64>,
    green_context: Option<i64>,
    stream: Option<i64>,
    what: What,
}

enum What {
    Kernel {
        grid: [Option<i64>; 3],
        block: [Option<i64>; 3],
        registers: Option<i64>,
        static_shared: Option<i64>,
        dynamic_shared: Option<i64>,
        name: RawName,
    },
    /// The copy's direction and memory kinds as ids of the `ENUM_*` tables, or as labels (a
    /// loaded trace's).
    Memcpy {
        bytes: Option<i64>,
        copy: Label,
        src: Label,
        dst: Label,
    },
    Memset {
        bytes: Option<i64>,
        kind: Label,
    },
}

/// An `ENUM_*` value: an id to look up, a label already known, or none.
enum Label {
    Id(i64),
    Known(String),
    None,
}

impl Label {
    fn of(id: Option<i64>) -> Label {
        id.map_or(Label::None, Label::Id)
    }
}

/// The labels of an `ENUM_*` table, by id.
type Labels = FastMap<i64, String>;

/// Everything a row needs besides the operation: names, labels, devices.
struct Context<'a> {
    text: Text<'a>,
    /// `[CUDA memcpy LABEL]` by copy direction.
    copy: Labels,
    mem: Labels,
    /// `NAME (ID)` of each row of `TARGET_INFO_GPU` with the device's id.
    devices: FastMap<i64, Vec<String>>,
    /// Whether a device id has several rows there, each printing the operation again.
    repeats: bool,
}

impl Context<'_> {
    fn label<'l>(&'l self, labels: &'l Labels, l: &'l Label) -> Option<&'l str> {
        match l {
            Label::Id(id) => labels.get(id).map(String::as_str),
            Label::Known(s) => Some(s),
            Label::None => None,
        }
    }

    /// How many rows print `op`: one per GPU of its id, one when there is none.
    fn device_rows(&self, op: &Op) -> usize {
        if !self.repeats {
            return 1;
        }
        self.devices.get(&op.device).map_or(1, |d| d.len().max(1))
    }

    fn device(&self, op: &Op, i: usize) -> Cow<'_, str> {
        match self.devices.get(&op.device).and_then(|d| d.get(i)) {
            Some(d) => Cow::Borrowed(d),
            // printf('%s (%d)') of no name.
            None => Cow::Owned(format!(" ({})", op.device)),
        }
    }

    fn row(&self, op: &Op, device: usize, c: &mut dyn CellSink) {
        c.ints(&[Some(op.start), Some(op.end - op.start), op.correlation_id]);
        // Past the correlation id a kernel's cells are those of its launch, the same for
        // every launch of a kernel with the same configuration: made once per configuration.
        if let What::Kernel {
            grid,
            block,
            registers,
            static_shared,
            dynamic_shared,
            name: RawName::Id(name),
        } = &op.what
        {
            let v = |v: &Option<i64>| v.unwrap_or(i64::MIN);
            let key = [
                v(&grid[0]),
                v(&grid[1]),
                v(&grid[2]),
                v(&block[0]),
                v(&block[1]),
                v(&block[2]),
                v(registers),
                v(static_shared),
                v(dynamic_shared),
                op.device,
                device as i64,
                v(&op.context),
                v(&op.green_context),
                v(&op.stream),
                *name,
            ];
            c.group(&key, &mut |c| self.rest(op, device, c));
        } else {
            self.rest(op, device, c);
        }
    }

    /// The cells after the correlation id.
    fn rest(&self, op: &Op, device: usize, c: &mut dyn CellSink) {
        const MB: f64 = 1e6;
        let duration = op.end - op.start;
        let (bytes, src, dst, name) = match &op.what {
            What::Kernel {
                grid,
                block,
                registers,
                static_shared,
                dynamic_shared,
                name,
            } => {
                for v in grid.iter().chain(block) {
                    c.opt_int(*v);
                }
                c.opt_int(*registers);
                c.opt_float(static_shared.map(|b| b as f64 / MB), 3);
                c.opt_float(dynamic_shared.map(|b| b as f64 / MB), 3);
                (None, None, None, Err(name))
            }
            What::Memcpy {
                bytes,
                copy,
                src,
                dst,
            } => {
                blanks(c, 9);
                (
                    *bytes,
                    self.label(&self.mem, src),
                    self.label(&self.mem, dst),
                    Ok(self.label(&self.copy, copy)),
                )
            }
            What::Memset { bytes, kind } => {
                blanks(c, 9);
                (
                    *bytes,
                    self.label(&self.mem, kind),
                    None,
                    Ok(Some("[CUDA memset]")),
                )
            }
        };
        c.opt_float(bytes.map(|b| b as f64 / MB), 3);
        c.opt_float(throughput(bytes, duration).map(|t| t / MB), 3);
        c.opt_text(src);
        c.opt_text(dst);
        c.text(&self.device(op, device));
        c.opt_int(op.context);
        c.opt_int(op.green_context.filter(|&g| g != 0));
        c.opt_int(op.stream);
        // A kernel's name, or the label of a memory operation.
        match name {
            Err(kernel) => self.text.kernel_cell(kernel, c),
            Ok(label) => c.opt_text(label),
        }
    }
}

fn blanks(c: &mut dyn CellSink, n: usize) {
    for _ in 0..n {
        c.missing();
    }
}

/// nsys's `bytes * (1000000000 / duration)` in bytes per second: integer division, none for a
/// zero duration (SQLite's NULL), a product past 64 bits in floating point as SQLite makes it.
fn throughput(bytes: Option<i64>, duration: i64) -> Option<f64> {
    let bytes = bytes?;
    let per_second = 1_000_000_000i64.checked_div(duration)?;
    Some(match bytes.checked_mul(per_second) {
        Some(v) => v as f64,
        None => bytes as f64 * per_second as f64,
    })
}

/// The labels of an `ENUM_*` table of the export; none when it lacks the table.
fn labels(export: &Export, table: &str) -> Result<Labels> {
    if !export.has(table) {
        return Ok(Labels::default());
    }
    let rows = read_all(export, table, &[ID, LABEL], |r| {
        Ok(match (r.opt_int(0)?, r.get(1)?) {
            (Some(id), rusqlite::types::ValueRef::Text(t)) => {
                Some((id, String::from_utf8_lossy(t).into_owned()))
            }
            _ => None,
        })
    })?;
    Ok(rows.into_iter().collect())
}

fn devices(trace: &Trace) -> FastMap<i64, Vec<String>> {
    let mut out: FastMap<i64, Vec<String>> = FastMap::default();
    for g in &trace.gpus {
        out.entry(i64::from(g.id))
            .or_default()
            .push(format!("{} ({})", g.name, g.id));
    }
    out
}

/// The columns every table gives first, then each table's own.
const COMMON: [&str; 7] = [
    START,
    END,
    CORRELATION_ID,
    DEVICE_ID,
    CONTEXT_ID,
    GREEN_CONTEXT_ID,
    STREAM_ID,
];

/// An operation read from a row of its table: the columns every table gives first ([`COMMON`]),
/// then `what` of the table's own. Made in place, where the caller keeps it: there are millions.
#[inline(always)]
fn op(
    r: &ScanRow<'_, '_>,
    what: impl FnOnce(&ScanRow<'_, '_>) -> rusqlite::Result<What>,
) -> rusqlite::Result<Option<Op>> {
    let [start, end, correlation_id, device, context, green_context, stream] = ints(r, 0)?;
    Ok(Some(Op {
        start: start.unwrap_or(0),
        end: end.unwrap_or(0),
        correlation_id,
        device: device.unwrap_or(0),
        context,
        green_context,
        stream,
        what: what(r)?,
    }))
}

#[inline(always)]
fn kernel_row(r: &ScanRow<'_, '_>, names: KernelName) -> rusqlite::Result<Option<Op>> {
    op(r, |r| {
        let [gx, gy, gz, bx, by, bz, registers, static_shared, dynamic_shared] = ints(r, 7)?;
        Ok(What::Kernel {
            grid: [gx, gy, gz],
            block: [bx, by, bz],
            registers,
            static_shared,
            dynamic_shared,
            name: read_kernel_name(r, names, 16)?,
        })
    })
}

fn memcpy_row(r: &ScanRow<'_, '_>) -> rusqlite::Result<Option<Op>> {
    op(r, |r| {
        let [bytes, copy, src, dst] = ints(r, 7)?;
        Ok(What::Memcpy {
            bytes,
            copy: Label::of(copy),
            src: Label::of(src),
            dst: Label::of(dst),
        })
    })
}

fn memset_row(r: &ScanRow<'_, '_>) -> rusqlite::Result<Option<Op>> {
    op(r, |r| {
        let [bytes, kind] = ints(r, 7)?;
        Ok(What::Memset {
            bytes,
            kind: Label::of(kind),
        })
    })
}

/// An export's kernels as a feed, and its memcpys and memsets (a small table, held) by start.
fn export_ops<'a, D: Decode<Op>>(
    export: &'a Export,
    names: KernelName,
    kernel: D,
) -> Result<(Feed<'a, Op, D>, Vec<Op>)> {
    let columns = |own: &[&'a str]| -> Vec<&'a str> { COMMON.iter().chain(own).copied().collect() };
    let kernel_columns: Vec<&str> = LAUNCH
        .iter()
        .chain(&[
            REGISTERS_PER_THREAD,
            STATIC_SHARED_MEMORY,
            DYNAMIC_SHARED_MEMORY,
        ])
        .chain(&name_columns(names))
        .copied()
        .collect();
    let kernels = if export.has(KERNEL) {
        Feed::export(export, KERNEL, &columns(&kernel_columns), kernel)?
    } else {
        Feed::records(std::iter::empty())
    };
    let mut mem_ops = Vec::new();
    type Read = fn(&ScanRow<'_, '_>) -> rusqlite::Result<Option<Op>>;
    let tables: [(&str, &[&str], Read); 2] = [
        (MEMCPY, &[BYTES, COPY_KIND, SRC_KIND, DST_KIND], memcpy_row),
        (MEMSET, &[BYTES, MEM_KIND], memset_row),
    ];
    for (table, own, decode) in tables {
        if export.has(table) {
            mem_ops.extend(read_all(export, table, &columns(own), decode)?);
        }
    }
    // Equal starts keep memcpys before memsets, each table in its order.
    mem_ops.sort_by_key(|op| op.start);
    Ok((kernels, mem_ops))
}

/// A loaded trace's kernels as a feed, and its memory operations by start.
fn loaded_ops<D: Decode<Op>>(trace: &Trace, names: KernelName) -> (Feed<'_, Op, D>, Vec<Op>) {
    // What the model keeps of an operation: no context, no green context.
    let op = |start: Nanos, end: Nanos, corr: u64, device: u32, stream: u32, what| Op {
        start: start.0,
        end: end.0,
        correlation_id: Some(corr as i64),
        device: i64::from(device),
        context: None,
        green_context: None,
        stream: Some(i64::from(stream)),
        what,
    };
    let kernels = trace.kernels.iter().map(move |k| {
        let what = What::Kernel {
            grid: k.grid.map(|v| Some(i64::from(v))),
            block: k.block.map(|v| Some(i64::from(v))),
            registers: Some(i64::from(k.registers_per_thread)),
            static_shared: Some(i64::from(k.static_shared_memory)),
            dynamic_shared: Some(i64::from(k.dynamic_shared_memory)),
            name: RawName::Id(i64::from(names.of(k).0)),
        };
        op(
            k.span.start,
            k.span.end,
            k.span.correlation_id,
            k.span.device,
            k.span.stream,
            what,
        )
    });
    let mut mem_ops: Vec<Op> = trace
        .mem_ops
        .iter()
        .map(|m| {
            let what = match m.kind {
                MemOpKind::Memset => What::Memset {
                    bytes: Some(m.bytes.0 as i64),
                    kind: Label::None,
                },
                kind => What::Memcpy {
                    bytes: Some(m.bytes.0 as i64),
                    copy: Label::Known(kind.label()),
                    src: Label::None,
                    dst: Label::None,
                },
            };
            op(
                m.span.start,
                m.span.end,
                m.span.correlation_id,
                m.span.device,
                m.span.stream,
                what,
            )
        })
        .collect();
    // Memcpys before memsets at equal starts, as the export's tables are merged.
    mem_ops.sort_by_key(|op| (op.start, matches!(op.what, What::Memset { .. })));
    (Feed::records(kernels), mem_ops)
}

pub(super) fn write(input: &Input<'_>, names: KernelName, out: &mut Out<'_>) -> Result<()> {
    let kernel = move |r: &ScanRow<'_, '_>| kernel_row(r, names);
    let ((mut kernels, mem_ops), copy, mem) = match input {
        Input::Export(export, _) => (
            export_ops(export, names, kernel)?,
            labels(export, ENUM_CUDA_MEMCPY_OPER)?
                .into_iter()
                .map(|(id, l)| (id, format!("[CUDA memcpy {l}]")))
                .collect(),
            labels(export, ENUM_CUDA_MEM_KIND)?,
        ),
        Input::Loaded(trace) => (
            loaded_ops(trace, names),
            Labels::default(),
            Labels::default(),
        ),
    };
    let devices = devices(input.trace());
    let cx = Context {
        text: input.text(),
        copy,
        mem,
        repeats: devices.values().any(|d| d.len() > 1),
        devices,
    };
    let encoder = out.sink.encoder();
    // Writes memory operations `range` (few, encoded here).
    let write_mem = |out: &mut Out<'_>, range: std::ops::Range<usize>| -> Result<()> {
        let mut rows = Rows::default();
        for op in &mem_ops[range] {
            for d in 0..cx.device_rows(op) {
                encoder.row(&mut rows, |c| cx.row(op, d, c));
            }
        }
        let n = rows.len();
        out.write(&mut rows, 0..n)
    };
    // The next memory operation to write, and the start of the last kernel written.
    let (mut next, mut last) = (0, i64::MIN);
    // Whether a row has been written.
    let mut started = false;
    let spare = Pieces::default();
    loop {
        // Each kernel encoded as it is read. A memory operation goes before the first kernel
        // that starts after it: inside a piece it is encoded there, in its place; before a
        // piece's first kernel it is written here, once the pieces before are.
        let pieces = kernels.window_each(
            || spare.take(),
            |p: &mut Piece, k: &Op| {
                if p.start(k.start) {
                    p.next_other = mem_ops.partition_point(|m| m.start < k.start);
                }
                while let Some(m) = mem_ops.get(p.next_other).filter(|m| m.start < k.start) {
                    p.first_other.get_or_insert(p.rows.len());
                    for d in 0..cx.device_rows(m) {
                        encoder.row(&mut p.rows, |c| cx.row(m, d, c));
                    }
                    p.next_other += 1;
                }
                for d in 0..cx.device_rows(k) {
                    encoder.row(&mut p.rows, |c| cx.row(k, d, c));
                }
            },
        )?;
        if pieces.is_empty() {
            break;
        }
        for mut p in pieces {
            p.follows(&mut last, KERNEL, input.path())?;
            let Some(first) = p.first else { continue };
            let before = next + mem_ops[next..].partition_point(|m| m.start < first);
            write_mem(out, next..before)?;
            // The first rows written set a text table's column widths: the memory operations
            // before the first kernel, else the kernels before the first memory operation.
            let cut = match (started, p.first_other) {
                (false, Some(row)) if before == next => row,
                _ => 0,
            };
            started = true;
            let n = p.rows.len();
            out.write(&mut p.rows, 0..cut)?;
            out.write(&mut p.rows, cut..n)?;
            next = p.next_other;
            spare.give(p);
        }
    }
    write_mem(out, next..mem_ops.len())
}

#[cfg(test)]
mod tests {
    use super::throughput;

    #[test]
    fn throughput_divides_as_sqlite_does() {
        // torch_small_ctx128_train_fp32: 2359296 bytes in 254976 ns print as 9250.800 MB/s,
        // 2359296 * (1000000000 / 254976 = 3921), not 2359296 / 254976e-9 = 9252.9.
        assert_eq!(throughput(Some(2_359_296), 254_976), Some(9_250_799_616.0));
        assert_eq!(throughput(Some(4608), 832), Some(5_538_461_184.0));
        assert_eq!(throughput(Some(5), 0), None);
        assert_eq!(throughput(None, 10), None);
        // Past 64 bits SQLite goes to floating point.
        let big = throughput(Some(i64::MAX / 2), 1).unwrap();
        assert_eq!(big, (i64::MAX / 2) as f64 * 1e9);
    }
}
