//! The reports of a file, streaming an nsys export ([`ExportSource`]): the small tables (NVTX,
//! memory operations) load as a trace without kernels or API calls, the large ones are read in
//! chunks side by side straight into what [`super::gather`] keeps (only the columns the reports
//! named need), and the reports are computed from that as [`super::reports`] computes them from
//! a whole trace. Other inputs (Kineto traces) load whole.

use std::path::Path;

use crate::attribution::ranges::Enclosure;
use crate::error::Result;
use crate::formats::limits::Limits;
use crate::formats::nsys_sqlite::read::{Export, RawName};
use crate::model::trace::StrId;
use crate::render::Document;
use crate::source::export::ExportSource;
use crate::source::TraceSource;

use super::attribution::{all_ranges, Labels};
use super::gather::{ApiChunk, Gathered, Gatherer, KernelChunk, Names};
use super::{assemble, needs, reads_ranges, tables, Missing, Report};

/// Bytes kept per kernel and per API call while streaming (durations as `u32`, and the index of
/// correlation ids), with room for the reports' copies.
const PER_KERNEL: u64 = 16;
const PER_CALL: u64 = 8;

/// [`super::document`] of the file at `path`, streaming it when it is an nsys export.
pub fn document_file(path: &Path, named: &[(String, Report)]) -> Result<(Document, Vec<Missing>)> {
    let limits = Limits::from_env()?;
    let Some(mut source) = ExportSource::open(path, &limits, PER_KERNEL, PER_CALL)? else {
        let trace = crate::formats::load_trace(path)?;
        return Ok(super::document(&trace, named));
    };
    let kinds: Vec<Report> = named.iter().map(|r| r.1).collect();
    let needs = needs(&kinds);
    let (nvtx, mem_ops) = reads_ranges(&kinds);
    let mut trace = source.small_tables(nvtx, mem_ops || needs.projection)?;
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
            g.kernel(c, &calls, k.start, k.end, k.pid, k.correlation_id, k.names);
        })?
    } else {
        Vec::new()
    };
    source.check_bounds()?;
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
    let gathered = source.export().with_names(&mut trace, |export| {
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
