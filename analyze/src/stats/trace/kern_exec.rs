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
//! time, and each batch is encoded on the other threads while the next is joined, the tables'
//! next windows read there too. The count is a pass of its own: each piece's keys counted on
//! its thread, and the counts merged.

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

use rayon::prelude::*;

use super::feed::{ints, windows, Decode, Feed, Queue};
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

    /// Note `n` more kernels of `corr`.
    fn add_n(&mut self, corr: i64, n: u32) {
        let Some((word, mask)) = self.bit(corr) else {
            *self.more.entry(corr).or_insert(0) += n;
            return;
        };
        if self.words.len() <= word {
            self.words.resize(word + 1, 0);
        }
        if self.words[word] & mask != 0 {
            *self.more.entry(corr).or_insert(1) += n;
        } else {
            self.words[word] |= mask;
            if n > 1 {
                self.more.insert(corr, n);
            }
        }
    }

    /// Add the kernels `other` counted: a word at a time where its ids fall in these words
    /// and it counted each once.
    fn merge(&mut self, other: Bits) {
        for (i, &w) in other.words.iter().enumerate() {
            if w == 0 {
                continue;
            }
            // Bases are multiples of 64: a word of `other` is a word here, or out of reach.
            let first = other.base + 64 * i as i64;
            match self.bit(first) {
                Some((word, _)) if other.more.is_empty() => {
                    if self.words.len() <= word {
                        self.words.resize(word + 1, 0);
                    }
                    let both = self.words[word] & w;
                    self.words[word] |= w;
                    for b in ones(both) {
                        self.add_n(first + b, 1);
                    }
                }
                _ => {
                    for b in ones(w) {
                        let corr = first + b;
                        self.add_n(corr, other.more(corr, 1));
                    }
                }
            }
        }
        for (&corr, &n) in &other.more {
            if other.bit(corr).is_none() {
                self.add_n(corr, n);
            }
        }
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

/// The places of the bits set in `w`, lowest first.
fn ones(mut w: u64) -> impl Iterator<Item = i64> {
    std::iter::from_fn(move || {
        (w != 0).then(|| {
            let b = w.trailing_zeros();
            w &= w - 1;
            i64::from(b)
        })
    })
}

impl Counts {
    /// The kernels of `keys`, each process's bits starting at its lowest id.
    fn of(keys: &[Key]) -> Counts {
        let mut counts = Counts::default();
        for &(process, corr) in keys {
            match counts.processes.binary_search_by_key(&process, |p| p.0) {
                Ok(i) => {
                    let bits = &mut counts.processes[i].1;
                    bits.base = bits.base.min(corr & !63);
                }
                Err(i) => {
                    let bits = Bits {
                        base: corr & !63,
                        ..Bits::default()
                    };
                    counts.processes.insert(i, (process, bits));
                }
            }
        }
        for &key in keys {
            counts.add(key);
        }
        counts
    }

    /// Add the kernels `other` counted.
    fn merge(&mut self, other: Counts) {
        for (process, bits) in other.processes {
            match self.processes.binary_search_by_key(&process, |p| p.0) {
                Ok(i) => self.processes[i].1.merge(bits),
                Err(i) => self.processes.insert(i, (process, bits)),
            }
        }
    }

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
        self.processes[i].1.add_n(corr, 1);
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

/// The kernels of each key of an export, from a pass over two columns of the kernel table:
/// each piece's keys counted on its thread, the counts merged a word of bits at a time.
fn count_export(export: &Export) -> Result<Counts> {
    let mut counts = Counts::default();
    let key = |v: &mut Vec<Key>, r: &ScanRow<'_, '_>| {
        let [process, corr] = ints(r, 0)?;
        v.extend(process.zip(corr));
        Ok(())
    };
    windows(
        export,
        KERNEL,
        &[GLOBAL_PID, CORRELATION_ID],
        Vec::new,
        key,
        |pieces| {
            let window = pieces.par_iter().map(|keys| Counts::of(keys)).reduce(
                Counts::default,
                |mut a, b| {
                    a.merge(b);
                    a
                },
            );
            counts.merge(window);
        },
    )?;
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
    let (mut calls, mut kernels, counts) = match input {
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
        counts,
        early: FastMap::default(),
        pending: None,
    };
    let text = input.text();
    let encoder = out.sink.encoder();
    let (mut ready, mut next) = (Vec::with_capacity(BATCH), Vec::with_capacity(BATCH));
    let mut parts = Vec::new();
    // Whether every call has been read, and every kernel.
    let (mut calls_done, mut kernels_done) = (false, false);
    loop {
        if calls_done && ready.is_empty() {
            return Ok(());
        }
        // While the rows joined last are encoded on the pool, the next are joined there from
        // the windows read, and the tables' next windows are read here (an export is read
        // from one thread).
        let mut encoded = 0;
        let mut dry = None;
        rayon::in_place_scope(|s| {
            s.spawn(|_| {
                let done = encode_rows(&encoder, &ready, &mut parts, |(call, k), c| {
                    row(&text, call, k, c)
                });
                encoded = done.len();
            });
            if calls_done {
                return;
            }
            let (call_reader, call_queue) = calls.parts();
            let (kernel_reader, kernel_queue) = kernels.parts();
            let (join, next, dry) = (&mut join, &mut next, &mut dry);
            s.spawn(move |_| {
                *dry = Some(join.batch(call_queue, kernel_queue, !kernels_done, next))
            });
            call_reader.read_ahead();
            kernel_reader.read_ahead();
        });
        out.write_parts(&mut parts[..encoded])?;
        match dry {
            Some(Dry::Calls) => calls_done = !calls.refill()?,
            Some(Dry::Kernels) => kernels_done = !kernels.refill()?,
            _ => {}
        }
        std::mem::swap(&mut ready, &mut next);
        next.clear();
    }
}

/// Which records a batch ran out of.
enum Dry {
    /// Neither: the batch is full.
    No,
    Calls,
    Kernels,
}

/// What joins the calls and kernels of an input in the report's order.
struct Join {
    /// The kernels of each key not yet taken by a call.
    counts: Counts,
    /// Kernels read before their call, by key.
    early: FastMap<Key, Vec<Launched>>,
    /// The call whose kernels were being taken when the kernels read ran out: the call, how
    /// many it has, how many it has taken.
    pending: Option<(Call, usize, usize)>,
}

impl Join {
    /// The next rows into `rows`, until there are [`BATCH`] or the calls or kernels read run
    /// out; `more_kernels` says whether the kernel table has any left to read.
    fn batch(
        &mut self,
        calls: &mut Queue<Call>,
        kernels: &mut Queue<Launched>,
        more_kernels: bool,
        rows: &mut Vec<(Call, Launched)>,
    ) -> Dry {
        while rows.len() < BATCH {
            let (call, n, mut taken) = match self.pending.take() {
                Some(pending) => pending,
                None => {
                    let Some(call) = calls.pop() else {
                        return Dry::Calls;
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
                    (call, n, taken)
                }
            };
            while taken < n {
                let Some(k) = kernels.pop() else {
                    if !more_kernels {
                        break;
                    }
                    self.pending = Some((call, n, taken));
                    return Dry::Kernels;
                };
                if k.key == call.key {
                    rows.push((call, k));
                    taken += 1;
                } else {
                    self.early.entry(k.key).or_default().push(k);
                }
            }
        }
        Dry::No
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
    fn counts_of_pieces_merge_into_the_counts_of_all() {
        let p = 0x0100_0000_0a00_0000; // a global pid
        let q = p + (1 << 24);
        let keys: Vec<Key> = [
            (p, 700),
            (p, 5),
            (p, 6),
            (q, 5),
            (p, 6),
            (p, 1 << 40),
            (p, 3),
            (p, 700),
            (q, 5),
            (p, 64),
            (p, 63),
            (p, 6),
            (p, -2),
        ]
        .to_vec();
        let mut whole = Counts::default();
        for &k in &keys {
            whole.add(k);
        }
        let mut probes: Vec<Key> = keys.clone();
        probes.extend([(p, 4), (p, 62), (p, 128), (q, 6), (q + (1 << 24), 5)]);
        for size in 1..=keys.len() {
            let mut merged = Counts::default();
            for piece in keys.chunks(size) {
                merged.merge(Counts::of(piece));
            }
            for &k in &probes {
                assert_eq!(merged.count(k), whole.count(k), "{k:?} in pieces of {size}");
            }
            assert_eq!(merged.take((p, 6)), 3);
            assert_eq!(merged.take((p, 6)), 0);
            assert_eq!(merged.take((p, 700)), 2);
        }
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
