//! The reports of a source: its small tables (NVTX, memory operations) as a trace without
//! kernels or API calls, then its API calls and kernels pushed in chunks side by side straight
//! into what [`super::gather`] keeps (only the columns the reports named need), and the reports
//! computed from that. An nsys export streams; other inputs (Kineto traces) load whole and go
//! through the same code as a loaded source.

use std::path::Path;

use crate::attribution::ranges::Enclosure;
use crate::error::Result;
use crate::model::trace::Trace;
use crate::render::Document;
use crate::render::Table;
use crate::source::{self, Opened, TraceSource};

use super::attribution::{all_ranges, Labels};
use super::gather::{ApiChunk, Gathered, Gatherer, KernelChunk, Work};
use super::{assemble, needs, reads_ranges, tables, Missing, Report};

/// Bytes kept per kernel and per API call while streaming (durations as `u32`, and the index of
/// correlation ids), with room for the reports' copies.
const PER_KERNEL: u64 = 16;
const PER_CALL: u64 = 8;

/// [`super::document`] of the file at `path`, streaming it when it is an nsys export.
pub fn document_file(path: &Path, named: &[(String, Report)]) -> Result<(Document, Vec<Missing>)> {
    let kinds: Vec<Report> = named.iter().map(|r| r.1).collect();
    match source::open(path, PER_KERNEL, PER_CALL)? {
        Opened::Export(mut export) => {
            let (nvtx, mem_ops) = tables_read(&kinds);
            let trace = export.small_tables(nvtx, mem_ops)?;
            Ok(assemble(
                named,
                source_reports(&mut *export, trace, &kinds)?,
            ))
        }
        Opened::Loaded(trace) => Ok(super::document(&trace, named)),
    }
}

/// Whether the reports `kinds` read the NVTX ranges, and the memory operations.
pub(super) fn tables_read(kinds: &[Report]) -> (bool, bool) {
    let (nvtx, mem_ops) = reads_ranges(kinds);
    (nvtx, mem_ops || needs(kinds).projection)
}

/// The reports `kinds` of `source`, whose small tables are `trace`: its API calls and kernels
/// pushed through the gather (only what the reports need), then the tables.
pub(super) fn source_reports<S: TraceSource>(
    source: &mut S,
    mut trace: Trace,
    kinds: &[Report],
) -> Result<Vec<std::result::Result<Table, Missing>>> {
    let needs = needs(kinds);
    let ranges = all_ranges(&trace).into_owned();
    let labels = Labels::new(&trace, &ranges);
    let enclosure = Enclosure::new(
        if needs.attribution { &ranges } else { &[] },
        &labels.of_range,
    );
    let g = Gatherer::new(needs, &enclosure, source.api_rows());
    let api = if needs.api_sum || needs.attribution {
        source.scan_api(needs.api_sum, ApiChunk::default, |c, r| {
            g.api_call(c, r.start, r.end, r.pid, r.tid, r.correlation_id, r.name);
        })?
    } else {
        Vec::new()
    };
    let calls = g.finish_calls(api);
    let mut kernels = if needs.kernels {
        source.scan_kernels(needs.mangled, false, KernelChunk::default, |c, k| {
            S::with_raw_names(k.names, |names| {
                let work = Work {
                    start: k.start,
                    end: k.end,
                    pid: k.pid,
                    correlation_id: k.correlation_id,
                };
                g.kernel(c, &calls, work, names)
            });
        })?
    } else {
        Vec::new()
    };
    source.check_bounds()?;
    let mut ops = KernelChunk::default();
    for m in &trace.mem_ops {
        let work = Work {
            start: m.start.0,
            end: m.end.0,
            pid: m.pid,
            correlation_id: m.correlation_id,
        };
        g.mem_op(&mut ops, &calls, work);
    }
    kernels.push(ops);
    let mut gathered = source.resolve(&mut trace, |names| Gathered::finish(calls, kernels, names));
    if source.ids_in_file_order() {
        // Functions in the order the file first names them, as a stream meets them.
        gathered.functions.sort_by_key(|f| f.0);
    }
    Ok(tables(&trace, &ranges, &labels, gathered, kinds))
}
