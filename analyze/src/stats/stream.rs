//! The reports of a file, streaming an nsys export's kernel and API tables instead of loading
//! them: the small tables (NVTX, memory operations) load as a [`Trace`] without kernels or API
//! calls, the large ones are read in chunks side by side straight into what [`super::gather`]
//! keeps (only the columns the reports named need), and the reports are computed from that as
//! [`super::reports`] computes them from a whole trace. Other inputs (Kineto traces) load whole.

use std::path::Path;

use crate::error::{Error, Result};
use crate::formats::limits::Limits;
use crate::formats::nsys_sqlite::read::{Export, RawName};
use crate::formats::nsys_sqlite::split_global_tid;
use crate::formats::nsys_sqlite::table::{DRIVER, RUNTIME};
use crate::model::trace::StrId;
use crate::render::Document;

use super::attribution::{all_ranges, Labels};
use super::gather::{ApiChunk, Bounds, Enclosure, Gathered, Gatherer, KernelChunk, Names};
use super::{assemble, needs, reads_ranges, tables, Missing, Report};

/// Bytes kept per kernel and per API call while streaming (durations as `u32`, and the index of
/// correlation ids), with room for the reports' copies.
const PER_KERNEL: u64 = 16;
const PER_CALL: u64 = 8;

/// [`super::document`] of the file at `path`, streaming it when it is an nsys export.
pub fn document_file(path: &Path, named: &[(String, Report)]) -> Result<(Document, Vec<Missing>)> {
    let limits = Limits::from_env()?;
    let Some(mut export) = Export::open(path, &limits, PER_KERNEL, PER_CALL)? else {
        let trace = crate::formats::load_trace(path)?;
        return Ok(super::document(&trace, named));
    };
    let kinds: Vec<Report> = named.iter().map(|r| r.1).collect();
    let needs = needs(&kinds);
    let (nvtx, mem_ops) = reads_ranges(&kinds);
    let mut trace = export.trace_without_work(nvtx, mem_ops || needs.projection)?;
    let ranges = all_ranges(&trace).into_owned();
    let labels = Labels::new(&trace, &ranges);
    let enclosure = Enclosure::new(
        if needs.attribution { &ranges } else { &[] },
        &labels.of_range,
    );
    let rows = [RUNTIME, DRIVER]
        .iter()
        .map(|t| export.rows(t))
        .sum::<u64>();
    let g = Gatherer::new(needs, &enclosure, rows);
    let api = if needs.api_sum || needs.attribution {
        export.scan_api(needs.api_sum, ApiChunk::default, |c, r| {
            let (pid, tid) = split_global_tid(r.global_tid);
            g.api_call(
                c,
                r.start,
                r.end,
                pid,
                tid,
                r.correlation_id as u64,
                r.name as u64,
            );
            Ok(())
        })?
    } else {
        Vec::new()
    };
    let mut api_bounds = Bounds::default();
    for c in &api {
        api_bounds.add(&c.bounds);
    }
    let calls = g.finish_calls(api);
    let mut kernels = if needs.kernels {
        export.scan_kernels(needs.mangled, false, KernelChunk::default, |c, k| {
            g.kernel(
                c,
                &calls,
                k.start,
                k.end,
                split_global_tid(k.global_pid).0,
                k.correlation_id as u64,
                &k.names,
            );
            Ok(())
        })?
    } else {
        Vec::new()
    };
    let mut kernel_bounds = Bounds::default();
    for c in &kernels {
        kernel_bounds.add(&c.bounds);
    }
    // The times of the trace's own spans are checked as it loaded; the streamed ones here, in
    // the order a loaded trace checks them.
    for (bounds, what) in [(kernel_bounds, "kernels"), (api_bounds, "CUDA API calls")] {
        if let Some(message) = bounds.error(what) {
            return Err(Error::Malformed {
                path: path.to_owned(),
                message,
            });
        }
    }
    let mut ops = KernelChunk::default();
    for m in &trace.mem_ops {
        g.mem_op(
            &mut ops,
            &calls,
            m.start.0,
            m.end.0,
            m.pid,
            m.correlation_id,
        );
    }
    kernels.push(ops);
    let gathered = export.with_names(&mut trace, |export| {
        Gathered::finish(calls, kernels, &mut ExportNames(export))
    });
    Ok(assemble(
        named,
        tables(&trace, &ranges, &labels, gathered, &kinds),
    ))
}

/// The names of an export's rows.
struct ExportNames<'a>(&'a mut Export);

impl Names for ExportNames<'_> {
    fn function(&mut self, key: u64) -> StrId {
        self.0.name(key as i64)
    }
    fn name(&mut self, raw: &RawName) -> Option<StrId> {
        self.0.raw_name(raw)
    }
    fn unnamed(&mut self) -> StrId {
        self.0.intern("<unnamed kernel>")
    }
}
