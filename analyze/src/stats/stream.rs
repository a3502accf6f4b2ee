//! The reports of a source: its small tables (NVTX, memory operations) as a trace without
//! kernels or API calls, then its API calls and kernels pushed in chunks side by side straight
//! into what [`super::gather`] keeps (only the columns the reports named need), and the summary
//! reports computed from that; each trace report is left as a part to write ([`Part`]). An nsys
//! export streams; other inputs (Kineto traces) load whole and go through the same code as a
//! loaded source.

use std::path::Path;

use crate::attribution::ranges::Enclosure;
use crate::error::Result;
use crate::model::trace::{Range, Trace};
use crate::render::Document;
use crate::render::Table;
use crate::source::loaded::LoadedSource;
use crate::source::{self, Opened, TraceSource};

use super::attribution::{all_ranges, Labels};
use super::gather::{ApiChunk, Gathered, Gatherer, KernelChunk, Work};
use super::{assemble, needs, reads_ranges, tables, trace, Missing, Report};

/// Bytes budgeted per kernel and per API call while streaming, for the memory check: the index
/// of correlation ids, with room to spare (durations are kept per distinct value, not per row).
const PER_KERNEL: u64 = 16;
const PER_CALL: u64 = 8;

/// [`super::document`] of the file at `path`, streaming it when it is an nsys export.
pub fn document_file(path: &Path, named: &[(String, Report)]) -> Result<(Document, Vec<Missing>)> {
    let kinds: Vec<Report> = named.iter().map(|r| r.1).collect();
    with_parts(path, &kinds, |parts, input| {
        let results = parts
            .into_iter()
            .map(|p| p.into_table(input))
            .collect::<Result<Vec<_>>>()?;
        Ok(assemble(named, results))
    })
}

/// One report of a file: a summary computed, a trace report to write, or what the file lacks.
pub(super) enum Part {
    Table(Table),
    Trace(Report),
    Lacks(Missing),
}

impl Part {
    /// The part as a table, a trace report's rows read from `input` into one.
    pub(super) fn into_table(
        self,
        input: &trace::Input<'_>,
    ) -> Result<std::result::Result<Table, Missing>> {
        Ok(match self {
            Part::Table(t) => Ok(t),
            Part::Lacks(m) => Err(m),
            Part::Trace(report) => {
                let mut table = Table::new(trace::columns(report).names.iter().copied());
                let path = input.path().to_owned();
                trace::write(input, report, &mut trace::Out::new(&mut table, &path))?;
                Ok(table)
            }
        })
    }
}

/// Run `f` with the parts of the reports `kinds` of the file at `path`, in order, and the input
/// the trace reports read: the export streamed, or the trace loaded.
pub(super) fn with_parts<R>(
    path: &Path,
    kinds: &[Report],
    f: impl FnOnce(Vec<Part>, &trace::Input<'_>) -> Result<R>,
) -> Result<R> {
    let (nvtx, mem_ops) = tables_read(kinds);
    match source::open(path, PER_KERNEL, PER_CALL)? {
        Opened::Export(mut export) => {
            let mut small = export.small_tables(nvtx, mem_ops)?;
            let parts = parts(&mut *export, &mut small, kinds)?;
            f(parts, &trace::Input::Export(export.export(), &small))
        }
        Opened::Loaded(trace) => {
            let mut source = LoadedSource::new(&trace);
            let mut small = source.small_tables(nvtx, mem_ops)?;
            let parts = parts(&mut source, &mut small, kinds)?;
            f(parts, &trace::Input::Loaded(&trace))
        }
    }
}

/// The parts of the reports `kinds` of `source`, whose small tables are `small`: the summary
/// reports computed together, the trace reports checked for the data they need.
pub(super) fn parts<S: TraceSource>(
    source: &mut S,
    small: &mut Trace,
    kinds: &[Report],
) -> Result<Vec<Part>> {
    let summaries: Vec<Report> = kinds
        .iter()
        .copied()
        .filter(|r| !trace::is_trace(*r))
        .collect();
    let mut tables = if summaries.is_empty() {
        Vec::new()
    } else {
        source_reports(source, small, &summaries)?
    }
    .into_iter();
    Ok(kinds
        .iter()
        .map(|&r| {
            if trace::is_trace(r) {
                return r.lacks(small).map_or(Part::Trace(r), Part::Lacks);
            }
            match tables.next().expect("a table per summary report") {
                Ok(t) => Part::Table(t),
                Err(m) => Part::Lacks(m),
            }
        })
        .collect())
}

/// Whether the reports `kinds` read the NVTX ranges, and the memory operations.
pub(super) fn tables_read(kinds: &[Report]) -> (bool, bool) {
    let (nvtx, mem_ops) = reads_ranges(kinds);
    (nvtx, mem_ops || needs(kinds).projection)
}

/// The reports `kinds` of `source`, whose small tables are `trace`: its API calls and kernels
/// pushed through the gather (only what the reports need), then the tables.
fn source_reports<S: TraceSource>(
    source: &mut S,
    trace: &mut Trace,
    kinds: &[Report],
) -> Result<Vec<std::result::Result<Table, Missing>>> {
    // The ranges are lent out of the trace while its names are resolved, not copied, unless
    // open ones join them.
    let lent = trace.open_ranges.is_empty();
    let ranges = if lent {
        std::mem::take(&mut trace.ranges)
    } else {
        all_ranges(trace).into_owned()
    };
    let labels = Labels::new(trace, &ranges);
    let gathered = gather(source, trace, &ranges, &labels, kinds);
    let mut owned = Some(ranges);
    if lent {
        trace.ranges = owned.take().unwrap_or_default();
    }
    let ranges = owned.as_deref().unwrap_or(&trace.ranges);
    Ok(tables(trace, ranges, &labels, gathered?, kinds))
}

/// The kernels and API calls of `source` gathered for the reports `kinds`; `ranges` are all the
/// ranges of `trace` in start order, `labels` theirs.
fn gather<S: TraceSource>(
    source: &mut S,
    trace: &mut Trace,
    ranges: &[Range],
    labels: &Labels,
    kinds: &[Report],
) -> Result<Gathered> {
    let needs = needs(kinds);
    let enclosure = Enclosure::new(
        if needs.attribution { ranges } else { &[] },
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
            start: m.span.start.0,
            end: m.span.end.0,
            pid: m.span.pid,
            correlation_id: m.span.correlation_id,
        };
        g.mem_op(&mut ops, &calls, work);
    }
    kernels.push(ops);
    let mut gathered = source.resolve(trace, |names| Gathered::finish(calls, kernels, names));
    if source.ids_in_file_order() {
        // Functions in the order the file first names them, as a stream meets them.
        gathered.functions.sort_by_key(|f| f.0);
    }
    Ok(gathered)
}
