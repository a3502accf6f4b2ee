//! `cuda_kern_exec_trace` (and `:base`, `:mangled`): each kernel beside the CUDA API call that
//! launched it, by the call's start.
//!
//! As in nsys: a kernel is paired with the rows of the API table (`CUPTI_ACTIVITY_KIND_RUNTIME`,
//! which holds runtime and driver calls alike) of its process and correlation id, and a kernel
//! without one is left out; rows come by the call's start (equal starts in table order), a
//! call's kernels in kernel-table order. The queue is the time from the call's end to the
//! kernel's start, empty when the kernel started first; the total runs from the call's start to
//! whichever of the call and the kernel ended last; the function name loses a `_vNNNN` suffix
//! as in `cuda_api_sum`; grid and block are printed `%4d %4d %4d`.
//!
//! The kernels of each (process, correlation id) are counted first (a bit each, and a count
//! where a call launched several, as a graph launch does), so that the API table can stream in
//! order and each call take exactly its kernels from the kernel table as that streams beside
//! it; kernels met before their call are held until it comes. Rows are joined a batch at a
//! time, and each batch is encoded on the other threads while the next is joined.

use crate::error::Result;
use crate::fast_hash::FastMap;
use crate::formats::nsys_sqlite::column::*;
use crate::formats::nsys_sqlite::read::{Export, RawName};
use crate::formats::nsys_sqlite::scan::ScanRow;
use crate::formats::nsys_sqlite::table::{KERNEL, RUNTIME};
use crate::model::trace::Trace;
use crate::render::csv::decimal;
use crate::render::stream::{encode_rows, CellSink};
use crate::stats::KernelName;

use super::feed::{fold_all, ints, Decode, Feed};
use super::{name_columns, pid_tid, read_kernel_name, Columns, Input, Out, Text, BATCH, LAUNCH};

pub(super) const COLUMNS: Columns = Columns {
    names: &[
        "API Start (ns)",
        "API Dur (ns)",
        "Queue Start (ns)",
        "Queue Dur (ns)",
        "Kernel Start (ns)",
        "Kernel Dur (ns)",
        "Total Dur (ns)",
        "PID",
        "TID",
        "DevId",
        "API Function",
        "GridXYZ",
        "BlockXYZ",
        "Kernel Name",
    ],
    numeric: &[
        true, true, true, true, true, true, true, true, true, true, false, false, false, false,
    ],
};

/// The bits of a global thread id that name its process: what a kernel's `globalPid` holds.
const PROCESS_BITS: i64 = 0xFFFF_FFFF_FF00_0000_u64 as i64;

/// What joins a kernel to its call: the process (as the export's global id, or a loaded
/// trace's pid) and the correlation id.
type Key = (i64, i64);

/// A kernel, as this report prints it.
struct Launched {
    key: Key,
    start: i64,
    end: i64,
    device: i64,
    grid: [i64; 3],
    block: [i64; 3],
    name: RawName,
}

/// An API call, as this report prints it.
#[derive(Clone, Copy)]
struct Call {
    key: Key,
    start: i64,
    end: i64,
    pid: i64,
    tid: i64,
    /// The function's name: a string id of the export, an interned id of a loaded trace.
    name: i64,
}

/// How many kernels each key has: a bit per correlation id of a process, and a count where
/// there are several; ids far from the process's first go to the map alone.
#[derive(Clone, Default)]
struct Counts {
    /// Each process's bits, in order of process: an export has a few processes and millions of
    /// calls, each looked up without hashing.
    processes: Vec<(i64, Bits)>,
}

#[derive(Clone, Default)]
struct Bits {
    base: i64,
    words: Vec<u64>,
    /// Counts of ids seen more than once, and of ids outside the words.
    more: FastMap<i64, u32>,
}

/// The most correlation ids one process's bits span (a bit each, 16 MB at most): ids are
/// numbered from 1 per process, one per API call, so beyond this they are sparse and the map
/// holds them.
const MAX_BITS: i64 = 1 << 27;

impl Bits {
    /// The bit of `corr` (word, mask), where it has one.
    fn bit(&self, corr: i64) -> Option<(usize, u64)> {
        let bit = corr.wrapping_sub(self.base);
        (0..MAX_BITS)
            .contains(&bit)
            .then(|| ((bit / 64) as usize, 1u64 << (bit % 64)))
    }

    /// The count `more` keeps of `corr`, `or` where it keeps none.
    fn more(&self, corr: i64, or: u32) -> u32 {
        if self.more.is_empty() {
            return or;
        }
        self.more.get(&corr).copied().unwrap_or(or)
    }

    fn count(&self, corr: i64) -> u32 {
        match self.bit(corr) {
            None => self.more(corr, 0),
            Some((word, mask)) => match self.words.get(word) {
                Some(w) if w & mask != 0 => self.more(corr, 1),
                _ => 0,
            },
        }
    }
}

impl Counts {
    fn bits(&self, process: i64) -> Option<&Bits> {
        let i = self
            .processes
            .binary_search_by_key(&process, |p| p.0)
            .ok()?;
        Some(&self.processes[i].1)
    }

    fn add(&mut self, (process, corr): Key) {
        let i = match self.processes.binary_search_by_key(&process, |p| p.0) {
            Ok(i) => i,
            Err(i) => {
                let bits = Bits {
                    base: corr & !63,
                    ..Bits::default()
                };
                self.processes.insert(i, (process, bits));
                i
            }
        };
        let b = &mut self.processes[i].1;
        let Some((word, mask)) = b.bit(corr) else {
            *b.more.entry(corr).or_insert(0) += 1;
            return;
        };
        if b.words.len() <= word {
            b.words.resize(word + 1, 0);
        }
        if b.words[word] & mask != 0 {
            *b.more.entry(corr).or_insert(1) += 1;
        } else {
            b.words[word] |= mask;
        }
    }

    /// The kernels of `key`.
    fn count(&self, (process, corr): Key) -> u32 {
        self.bits(process).map_or(0, |b| b.count(corr))
    }

    /// The kernels of `key`, counted once: a later call with the same key finds none.
    fn take(&mut self, (process, corr): Key) -> u32 {
        let Ok(i) = self.processes.binary_search_by_key(&process, |p| p.0) else {
            return 0;
        };
        let b = &mut self.processes[i].1;
        let n = b.count(corr);
        if n > 0 {
            if let Some((word, mask)) = b.bit(corr) {
                b.words[word] &= !mask;
            }
            if !b.more.is_empty() {
                b.more.remove(&corr);
            }
        }
        n
    }
}

fn row(text: &Text<'_>, call: &Call, k: &Launched, c: &mut dyn CellSink) {
    let queued = k.start - call.end >= 0;
    c.ints(&[
        Some(call.start),
        Some(call.end - call.start),
        queued.then_some(call.end),
        queued.then_some(k.start - call.end),
        Some(k.start),
        Some(k.end - k.start),
        Some(call.end.max(k.end) - call.start),
    ]);
    // The rest is the same for every launch of a kernel from one thread with one
    // configuration: made once for each.
    let name = match k.name {
        RawName::Id(id) => id,
        _ => i64::MIN,
    };
    let [gx, gy, gz] = k.grid;
    let [bx, by, bz] = k.block;
    let key = [
        call.pid, call.tid, k.device, call.name, gx, gy, gz, bx, by, bz, name,
    ];
    let mut rest = |c: &mut dyn CellSink| {
        c.int(call.pid);
        c.int(call.tid);
        c.int(k.device);
        text.function_cell(&RawName::Id(call.name), c);
        let mut buf = [b' '; 80];
        c.text(dims(&mut buf, k.grid));
        c.text(dims(&mut buf, k.block));
        text.kernel_cell(&k.name, c);
    };
    if name == i64::MIN {
        rest(c);
    } else {
        c.group(&key, &mut rest);
    }
}

/// `printf('%4d %4d %4d', x, y, z)`, in `buf` (which it fills with spaces first).
fn dims(buf: &mut [u8; 80], xyz: [i64; 3]) -> &str {
    buf.fill(b' ');
    let mut at = 0;
    for (i, v) in xyz.into_iter().enumerate() {
        let mut digits = [0u8; 24];
        let d = decimal(v, &mut digits);
        // Right-aligned in four, a space between.
        at += i.min(1) + 4usize.saturating_sub(d.len());
        buf[at..at + d.len()].copy_from_slice(d);
        at += d.len();
    }
    std::str::from_utf8(&buf[..at]).unwrap_or_default()
}

/// The kernels of each key of an export, from a pass over two columns of the kernel table.
fn count_export(export: &Export) -> Result<Counts> {
    let mut counts = Counts::default();
    let key = |r: &ScanRow<'_, '_>| {
        let [process, corr] = ints(r, 0)?;
        Ok(process.zip(corr))
    };
    fold_all(export, KERNEL, &[GLOBAL_PID, CORRELATION_ID], key, |k| {
        counts.add(k)
    })?;
    Ok(counts)
}

fn kernel_row(r: &ScanRow<'_, '_>, names: KernelName) -> rusqlite::Result<Option<Launched>> {
    let [process, corr, start, end, device, gx, gy, gz, bx, by, bz] = ints(r, 0)?;
    let (Some(process), Some(corr)) = (process, corr) else {
        return Ok(None);
    };
    let name = read_kernel_name(r, names, 11)?;
    let v = |v: Option<i64>| v.unwrap_or(0);
    Ok(Some(Launched {
        key: (process, corr),
        start: v(start),
        end: v(end),
        device: v(device),
        grid: [v(gx), v(gy), v(gz)],
        block: [v(bx), v(by), v(bz)],
        name,
    }))
}

fn call_row(r: &ScanRow<'_, '_>) -> rusqlite::Result<Option<Call>> {
    let [start, end, global_tid, corr, name] = ints(r, 0)?;
    let (Some(global_tid), Some(corr)) = (global_tid, corr) else {
        return Ok(None);
    };
    let (pid, tid) = pid_tid(global_tid);
    Ok(Some(Call {
        key: (global_tid & PROCESS_BITS, corr),
        start: start.unwrap_or(0),
        end: end.unwrap_or(0),
        pid,
        tid,
        name: name.unwrap_or(0),
    }))
}

fn call_start(c: &Call) -> i64 {
    c.start
}

/// A loaded trace's calls and kernels as feeds, and the kernels of each key.
fn loaded<'a, C: Decode<Call>, K: Decode<Launched>>(
    trace: &'a Trace,
    names: KernelName,
) -> (Feed<'a, Call, C>, Feed<'a, Launched, K>, Counts) {
    let mut counts = Counts::default();
    for k in &trace.kernels {
        counts.add((i64::from(k.span.pid), k.span.correlation_id as i64));
    }
    let calls = trace.api_calls.iter().map(|c| Call {
        key: (i64::from(c.pid), c.correlation_id as i64),
        start: c.start.0,
        end: c.end.0,
        pid: i64::from(c.pid),
        tid: i64::from(c.tid),
        name: i64::from(c.name.0),
    });
    let kernels = trace.kernels.iter().map(move |k| Launched {
        key: (i64::from(k.span.pid), k.span.correlation_id as i64),
        start: k.span.start.0,
        end: k.span.end.0,
        device: i64::from(k.span.device),
        grid: k.grid.map(i64::from),
        block: k.block.map(i64::from),
        name: RawName::Id(i64::from(names.of(k).0)),
    });
    (Feed::records(calls), Feed::records(kernels), counts)
}

pub(super) fn write(input: &Input<'_>, names: KernelName, out: &mut Out<'_>) -> Result<()> {
    let kernel = move |r: &ScanRow<'_, '_>| kernel_row(r, names);
    let counted = match input {
        Input::Export(export, _) => count_export(export)?,
        Input::Loaded(_) => Counts::default(),
    };
    // Calls that launched no kernel are left as they are read; `counted` is taken from as
    // calls claim their kernels.
    let launched = counted.clone();
    let call = |r: &ScanRow<'_, '_>| Ok(call_row(r)?.filter(|c| launched.count(c.key) > 0));
    let (calls, kernels, counts) = match input {
        Input::Export(export, _) => {
            let kernel_columns: Vec<&str> = [GLOBAL_PID, CORRELATION_ID, START, END, DEVICE_ID]
                .iter()
                .chain(&LAUNCH)
                .chain(&name_columns(names))
                .copied()
                .collect();
            let call_columns = [START, END, GLOBAL_TID, CORRELATION_ID, NAME_ID];
            (
                Feed::by_start(
                    export,
                    input.path(),
                    RUNTIME,
                    &call_columns,
                    call,
                    call_start,
                )?,
                Feed::export(export, KERNEL, &kernel_columns, kernel)?,
                counted,
            )
        }
        Input::Loaded(trace) => loaded(trace, names),
    };
    let mut join = Join {
        calls,
        kernels,
        counts,
        early: FastMap::default(),
    };
    let text = input.text();
    let encoder = out.sink.encoder();
    let (mut ready, mut next) = (Vec::with_capacity(BATCH), Vec::with_capacity(BATCH));
    let mut parts = Vec::new();
    loop {
        // While the rows joined last are encoded on the pool, the next are joined here.
        let mut encoded = 0;
        let joined = rayon::in_place_scope(|s| {
            s.spawn(|_| {
                let done = encode_rows(&encoder, &ready, &mut parts, |(call, k), c| {
                    row(&text, call, k, c)
                });
                encoded = done.len();
            });
            join.batch(&mut next)
        });
        out.write_parts(&mut parts[..encoded])?;
        joined?;
        if next.is_empty() {
            return Ok(());
        }
        std::mem::swap(&mut ready, &mut next);
        next.clear();
    }
}

/// The calls and kernels of an input joined in the report's order.
struct Join<'a, C, K> {
    calls: Feed<'a, Call, C>,
    kernels: Feed<'a, Launched, K>,
    /// The kernels of each key not yet taken by a call.
    counts: Counts,
    /// Kernels read before their call, by key.
    early: FastMap<Key, Vec<Launched>>,
}

impl<C: Decode<Call>, K: Decode<Launched>> Join<'_, C, K> {
    /// The next rows, [`BATCH`] or a few more (a call's kernels stay together), into `rows`;
    /// none once every call has been read.
    fn batch(&mut self, rows: &mut Vec<(Call, Launched)>) -> Result<()> {
        while rows.len() < BATCH {
            let Some(call) = self.calls.pop()? else {
                return Ok(());
            };
            let n = self.counts.take(call.key) as usize;
            if n == 0 {
                continue;
            }
            let mut taken = 0;
            // Hashed only while kernels wait: most come right after their call's kernels.
            if !self.early.is_empty() {
                if let Some(met) = self.early.remove(&call.key) {
                    taken = met.len();
                    rows.extend(met.into_iter().map(|k| (call, k)));
                }
            }
            while taken < n {
                let Some(k) = self.kernels.pop()? else { break };
                if k.key == call.key {
                    rows.push((call, k));
                    taken += 1;
                } else {
                    self.early.entry(k.key).or_default().push(k);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_are_counted_per_call_and_taken_once() {
        let mut counts = Counts::default();
        let p = 0x0100_0000_0a00_0000; // a global pid
        for corr in [5, 6, 6, 6, 200, 1 << 40] {
            counts.add((p, corr));
        }
        counts.add((p + (1 << 24), 5));
        assert_eq!(counts.take((p, 5)), 1);
        assert_eq!(counts.take((p, 5)), 0);
        assert_eq!(counts.take((p, 6)), 3);
        assert_eq!(counts.take((p, 7)), 0);
        assert_eq!(counts.take((p, 200)), 1);
        assert_eq!(counts.take((p, 1 << 40)), 1);
        assert_eq!(counts.take((p, 1 << 40)), 0);
        assert_eq!(counts.take((p + (1 << 24), 5)), 1);
        // Below the first id seen.
        counts.add((p, 1));
        assert_eq!(counts.take((p, 1)), 1);
    }

    #[test]
    fn dimensions_print_as_printf_pads_them() {
        let mut buf = [b' '; 80];
        assert_eq!(dims(&mut buf, [1056, 1, 1]), "1056    1    1");
        assert_eq!(dims(&mut buf, [12, 345, 67890]), "  12  345 67890");
        assert_eq!(
            dims(&mut buf, [-1, 0, i64::MAX]),
            "  -1    0 9223372036854775807"
        );
    }

    #[test]
    fn a_call_and_its_kernel_pair_by_the_process_bits() {
        // pid 645, tid 679: torch_ddp2's autograd thread; the kernel's globalPid keeps the bits
        // above the thread.
        let global_tid: i64 = (1 << 48) | (645 << 24) | 679;
        assert_eq!(pid_tid(global_tid), (645, 679));
        assert_eq!(global_tid & PROCESS_BITS, (1 << 48) | (645 << 24));
    }
}
