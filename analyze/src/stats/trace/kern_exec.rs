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
//! it; kernels met before their call are held until it comes.

use crate::error::Result;
use crate::fast_hash::FastMap;
use crate::formats::nsys_sqlite::column::*;
use crate::formats::nsys_sqlite::read::{Export, RawName};
use crate::formats::nsys_sqlite::scan::ScanRow;
use crate::formats::nsys_sqlite::table::{KERNEL, RUNTIME};
use crate::model::trace::Trace;
use crate::render::csv::decimal;
use crate::render::stream::CellSink;
use crate::stats::KernelName;

use super::feed::{fold_all, Feed};
use super::{kernel_name, name_columns, pid_tid, Columns, Input, Out, Text, BATCH, LAUNCH};

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
    processes: FastMap<i64, Bits>,
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

impl Counts {
    fn add(&mut self, (process, corr): Key) {
        let b = self.processes.entry(process).or_insert_with(|| Bits {
            base: corr & !63,
            ..Bits::default()
        });
        let bit = corr.wrapping_sub(b.base);
        if !(0..MAX_BITS).contains(&bit) {
            *b.more.entry(corr).or_insert(0) += 1;
            return;
        }
        let (word, mask) = ((bit / 64) as usize, 1u64 << (bit % 64));
        if b.words.len() <= word {
            b.words.resize(word + 1, 0);
        }
        if b.words[word] & mask != 0 {
            *b.more.entry(corr).or_insert(1) += 1;
        } else {
            b.words[word] |= mask;
        }
    }

    /// Where the count of `key` is kept: its process's bits, and its bit there (word, mask)
    /// when it has one.
    fn place(&self, (process, corr): Key) -> Option<(&Bits, Option<(usize, u64)>)> {
        let b = self.processes.get(&process)?;
        let bit = corr.wrapping_sub(b.base);
        Some((
            b,
            (0..MAX_BITS)
                .contains(&bit)
                .then(|| ((bit / 64) as usize, 1u64 << (bit % 64))),
        ))
    }

    /// The kernels of `key`.
    fn count(&self, key: Key) -> u32 {
        match self.place(key) {
            None => 0,
            Some((b, None)) => b.more.get(&key.1).copied().unwrap_or(0),
            Some((b, Some((word, mask)))) => match b.words.get(word) {
                Some(w) if w & mask != 0 => b.more.get(&key.1).copied().unwrap_or(1),
                _ => 0,
            },
        }
    }

    /// The kernels of `key`, counted once: a later call with the same key finds none.
    fn take(&mut self, key: Key) -> u32 {
        let n = self.count(key);
        if n > 0 {
            let bit = self.place(key).and_then(|p| p.1);
            if let Some(b) = self.processes.get_mut(&key.0) {
                if let Some((word, mask)) = bit {
                    b.words[word] &= !mask;
                }
                b.more.remove(&key.1);
            }
        }
        n
    }
}

fn row(text: &Text<'_>, call: &Call, k: &Launched, c: &mut dyn CellSink) {
    let queued = k.start - call.end >= 0;
    c.int(call.start);
    c.int(call.end - call.start);
    c.opt_int(queued.then_some(call.end));
    c.opt_int(queued.then_some(k.start - call.end));
    c.int(k.start);
    c.int(k.end - k.start);
    c.int(call.end.max(k.end) - call.start);
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
        let mut digits = [0u8; 21];
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
    let key = |r: &ScanRow<'_, '_>| Ok(r.opt_int(0)?.zip(r.opt_int(1)?));
    fold_all(export, KERNEL, &[GLOBAL_PID, CORRELATION_ID], key, |k| {
        counts.add(k)
    })?;
    Ok(counts)
}

fn kernel_row(r: &ScanRow<'_, '_>, names: KernelName) -> rusqlite::Result<Option<Launched>> {
    let (Some(process), Some(corr)) = (r.opt_int(0)?, r.opt_int(1)?) else {
        return Ok(None);
    };
    Ok(Some(Launched {
        key: (process, corr),
        start: r.int(2)?,
        end: r.int(3)?,
        device: r.int(4)?,
        grid: [r.int(5)?, r.int(6)?, r.int(7)?],
        block: [r.int(8)?, r.int(9)?, r.int(10)?],
        name: kernel_name(names, RawName::from(r.get(11)?), RawName::from(r.get(12)?)),
    }))
}

fn call_row(r: &ScanRow<'_, '_>) -> rusqlite::Result<Option<Call>> {
    let (Some(global_tid), Some(corr)) = (r.opt_int(2)?, r.opt_int(3)?) else {
        return Ok(None);
    };
    let (pid, tid) = pid_tid(global_tid);
    Ok(Some(Call {
        key: (global_tid & PROCESS_BITS, corr),
        start: r.int(0)?,
        end: r.int(1)?,
        pid,
        tid,
        name: r.int(4)?,
    }))
}

fn call_start(c: &Call) -> i64 {
    c.start
}

/// A loaded trace's calls and kernels as feeds, and the kernels of each key.
fn loaded<'a>(trace: &'a Trace, names: KernelName) -> (Feed<'a, Call>, Feed<'a, Launched>, Counts) {
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
    let (mut calls, mut kernels, mut counts) = match input {
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
                    &call,
                    call_start,
                )?,
                Feed::export(export, KERNEL, &kernel_columns, &kernel)?,
                counted,
            )
        }
        Input::Loaded(trace) => loaded(trace, names),
    };
    let text = input.text();
    // Kernels read before their call, by key.
    let mut early: FastMap<Key, Vec<Launched>> = FastMap::default();
    let mut rows: Vec<(Call, Launched)> = Vec::with_capacity(BATCH);
    loop {
        let window = calls.window()?;
        if window.is_empty() {
            break;
        }
        for &call in window.iter().flatten() {
            let n = counts.take(call.key) as usize;
            if n == 0 {
                continue;
            }
            let mut taken = 0;
            // Hashed only while kernels wait: most come right after their call's kernels.
            if !early.is_empty() {
                if let Some(met) = early.remove(&call.key) {
                    taken = met.len();
                    rows.extend(met.into_iter().map(|k| (call, k)));
                }
            }
            while taken < n {
                let Some(k) = kernels.pop()? else { break };
                if k.key == call.key {
                    rows.push((call, k));
                    taken += 1;
                } else {
                    early.entry(k.key).or_default().push(k);
                }
            }
        }
        if rows.len() >= BATCH {
            out.flush(&mut rows, |(call, k), c| row(&text, call, k, c))?;
        }
    }
    out.flush(&mut rows, |(call, k), c| row(&text, call, k, c))
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
