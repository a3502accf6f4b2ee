//! `cuda_api_trace`: every CUDA API call (runtime and driver alike, as nsys's API table holds
//! them), by start.
//!
//! As in nsys: equal starts keep table order; the function name loses a `_vNNNN` suffix as in
//! `cuda_api_sum`; the thread's priority and name come from `ThreadNames` (a call on a thread it
//! does not name has them empty); process and thread ids are read out of the global thread id.

use crate::error::Result;
use crate::fast_hash::FastMap;
use crate::formats::nsys_sqlite::column::*;
use crate::formats::nsys_sqlite::read::{Export, RawName};
use crate::formats::nsys_sqlite::scan::ScanRow;
use crate::formats::nsys_sqlite::table::{RUNTIME, THREAD_NAMES};
use crate::model::trace::Trace;
use crate::render::stream::CellSink;

use super::feed::{ints, read_all, Feed};
use super::{pid_tid, Columns, Input, Out, Piece, Pieces, Text};

pub(super) const COLUMNS: Columns = Columns {
    names: &[
        "Start (ns)",
        "Duration (ns)",
        "Name",
        "Result",
        "CorrID",
        "Pid",
        "Tid",
        "T-Pri",
        "Thread Name",
    ],
    numeric: &[true, true, false, true, true, true, true, true, false],
};

/// An API call, as this report prints it.
struct Call {
    start: i64,
    end: i64,
    /// The function's name: a string id of the export, an interned id of a loaded trace.
    name: Option<i64>,
    result: Option<i64>,
    correlation_id: Option<i64>,
    pid: Option<i64>,
    tid: Option<i64>,
    /// The thread, as [`Threads`] is keyed: the export's global thread id, a loaded trace's
    /// (pid, tid) in one number.
    thread: Option<i64>,
}

/// The (priority, name) of each thread nsys names, every one where a thread has several.
type Threads = FastMap<i64, Vec<(Option<i64>, Option<String>)>>;

fn threads_of_export(export: &Export) -> Result<Threads> {
    let mut out = Threads::default();
    if !export.has(THREAD_NAMES) {
        return Ok(out);
    }
    let texts = export.texts();
    let rows = read_all(
        export,
        THREAD_NAMES,
        &[GLOBAL_TID, PRIORITY, NAME_ID],
        |r| {
            let name = r
                .opt_int(2)?
                .and_then(|id| texts.text(&RawName::Id(id)).map(|t| t.into_owned()));
            let priority = r.opt_int(1)?;
            Ok(r.opt_int(0)?.map(|thread| (thread, (priority, name))))
        },
    )?;
    for (thread, named) in rows {
        out.entry(thread).or_default().push(named);
    }
    Ok(out)
}

/// A loaded trace's (pid, tid) as one key.
fn thread_key(pid: u32, tid: u32) -> i64 {
    (i64::from(pid) << 32) | i64::from(tid)
}

fn threads_of_trace(trace: &Trace) -> Threads {
    trace
        .thread_names
        .iter()
        .map(|(&(pid, tid), &name)| {
            (
                thread_key(pid, tid),
                vec![(None, Some(trace.name(name).to_owned()))],
            )
        })
        .collect()
}

fn call_row(r: &ScanRow<'_, '_>) -> rusqlite::Result<Option<Call>> {
    let [start, end, name, result, thread, correlation_id] = ints(r, 0)?;
    let (pid, tid) = thread.map(pid_tid).unzip();
    Ok(Some(Call {
        start: start.unwrap_or(0),
        end: end.unwrap_or(0),
        name,
        result,
        correlation_id,
        pid,
        tid,
        thread,
    }))
}

fn row(text: &Text<'_>, threads: &Threads, call: &Call, which: usize, c: &mut dyn CellSink) {
    const NONE: i64 = i64::MIN;
    c.int(call.start);
    c.int(call.end - call.start);
    // The function and its result, then the thread: each made once for all its calls (the
    // first number of a key says which).
    let key = [0, call.name.unwrap_or(NONE), call.result.unwrap_or(NONE)];
    c.group(&key, &mut |c| {
        text.function_cell(&call.name.map_or(RawName::None, RawName::Id), c);
        c.opt_int(call.result);
    });
    c.opt_int(call.correlation_id);
    let key = [1, call.thread.unwrap_or(NONE), which as i64];
    c.group(&key, &mut |c| {
        c.opt_int(call.pid);
        c.opt_int(call.tid);
        let named = call
            .thread
            .and_then(|t| threads.get(&t))
            .and_then(|list| list.get(which));
        c.opt_int(named.and_then(|n| n.0));
        c.opt_text(named.and_then(|n| n.1.as_deref()));
    });
}

pub(super) fn write(input: &Input<'_>, out: &mut Out<'_>) -> Result<()> {
    let (mut calls, threads) = match input {
        Input::Export(export, _) => {
            let columns = [
                START,
                END,
                NAME_ID,
                RETURN_VALUE,
                GLOBAL_TID,
                CORRELATION_ID,
            ];
            (
                Feed::export(export, RUNTIME, &columns, call_row)?,
                threads_of_export(export)?,
            )
        }
        Input::Loaded(trace) => {
            let calls = trace.api_calls.iter().map(|c| Call {
                start: c.start.0,
                end: c.end.0,
                name: Some(i64::from(c.name.0)),
                result: None,
                correlation_id: Some(c.correlation_id as i64),
                pid: Some(i64::from(c.pid)),
                tid: Some(i64::from(c.tid)),
                thread: Some(thread_key(c.pid, c.tid)),
            });
            (Feed::records(calls), threads_of_trace(trace))
        }
    };
    let text = input.text();
    let repeats = threads.values().any(|l| l.len() > 1);
    let encoder = out.sink.encoder();
    let mut last = i64::MIN;
    let spare = Pieces::default();
    loop {
        // Each call encoded as it is read: one row per name of its thread (nsys joins the
        // thread names).
        let pieces = calls.window_each(
            || spare.take(),
            |p: &mut Piece, call: &Call| {
                p.start(call.start);
                let names = match call.thread.and_then(|t| threads.get(&t)) {
                    Some(list) if repeats => list.len().max(1),
                    _ => 1,
                };
                for which in 0..names {
                    encoder.row(&mut p.rows, |c| row(&text, &threads, call, which, c));
                }
            },
        )?;
        if pieces.is_empty() {
            return Ok(());
        }
        for mut p in pieces {
            p.follows(&mut last, RUNTIME, input.path())?;
            let n = p.rows.len();
            out.write(&mut p.rows, 0..n)?;
            spare.give(p);
        }
    }
}
