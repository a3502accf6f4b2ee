//! The `nsys stats` reports, computed from the model with the same rows, order, columns and
//! numbers as Nsight Systems 2025.3 prints with `--format csv`.
//!
//! One module per report family; each summary report is a pure function of a [`Trace`] returning
//! typed rows and a [`Table`] with nsys's column names. [`summary`] holds the statistics they
//! share (mean, median, sample standard deviation, percentages), usable by any analysis.
//! [`report`] picks a report by name and says, as nsys does, when the export lacks the data a
//! report needs. The trace reports ([`trace`]: `cuda_gpu_trace`, `cuda_kern_exec_trace`,
//! `cuda_api_trace`) have a row per kernel or call and are written as their rows come
//! ([`print_file`]). Reports that nsys has and this module has not (osrt_sum, ...) are not here.

pub mod attribution;
pub mod cuda_api_sum;
pub mod cuda_gpu_kern_sum;
pub mod cuda_gpu_mem_sum;
pub mod gather;
pub mod nvtx_gpu_proj_sum;
pub mod nvtx_kern_sum;
pub mod nvtx_sum;
mod print;
pub mod samples;
mod stream;
pub mod summary;
pub mod trace;

use crate::source::loaded::LoadedSource;
use crate::source::TraceSource;

use std::fmt;

use rayon::prelude::*;

use serde::Serialize;

use crate::model::trace::{Range, Trace};
use crate::render::cells::opt_float;
use crate::render::{Cell, Document, Section, Table};

pub use cuda_gpu_kern_sum::KernelName;
pub use print::{print_file, Print, Printed};
pub use stream::document_file;
pub use summary::Summary;

/// The reports `analyze stats` reproduces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Report {
    CudaGpuKernSum(KernelName),
    CudaApiSum,
    CudaGpuMemTimeSum,
    CudaGpuMemSizeSum,
    NvtxSum,
    NvtxKernSum(KernelName),
    NvtxGpuProjSum,
    CudaGpuTrace(KernelName),
    CudaKernExecTrace(KernelName),
    CudaApiTrace,
}

impl Report {
    /// The reports `analyze stats --report all` prints, by the names nsys gives them.
    pub const ALL: &'static [&'static str] = &[
        "cuda_api_sum",
        "cuda_gpu_kern_sum",
        "cuda_gpu_kern_sum:base",
        "cuda_gpu_mem_time_sum",
        "cuda_gpu_mem_size_sum",
        "nvtx_sum",
        "nvtx_kern_sum",
        "nvtx_gpu_proj_sum",
    ];

    /// Every summary report understood, variants included: the reports of one row per name,
    /// which a loaded trace and a streamed export give alike.
    pub const NAMES: &'static [&'static str] = &[
        "cuda_gpu_kern_sum",
        "cuda_gpu_kern_sum:base",
        "cuda_gpu_kern_sum:mangled",
        "cuda_api_sum",
        "cuda_gpu_mem_time_sum",
        "cuda_gpu_mem_size_sum",
        "nvtx_sum",
        "nvtx_kern_sum",
        "nvtx_kern_sum:base",
        "nvtx_kern_sum:mangled",
        "nvtx_gpu_proj_sum",
    ];

    /// The trace reports understood, variants included: a row per kernel, memory operation or
    /// API call ([`trace`]). Like nsys's default set, `all` leaves them out.
    pub const TRACES: &'static [&'static str] = &[
        "cuda_gpu_trace",
        "cuda_gpu_trace:base",
        "cuda_gpu_trace:mangled",
        "cuda_kern_exec_trace",
        "cuda_kern_exec_trace:base",
        "cuda_kern_exec_trace:mangled",
        "cuda_api_trace",
    ];

    /// The report called `name` (nsys's spelling), if there is one.
    pub fn from_name(name: &str) -> Option<Report> {
        let (base, variant) = match name.split_once(':') {
            Some((b, v)) => (b, Some(v)),
            None => (name, None),
        };
        let kernel_name = match variant {
            None => KernelName::Demangled,
            Some("base") => KernelName::Short,
            Some("mangled") => KernelName::Mangled,
            Some(_) => return None,
        };
        let report = match base {
            "cuda_gpu_kern_sum" => Report::CudaGpuKernSum(kernel_name),
            "nvtx_kern_sum" => Report::NvtxKernSum(kernel_name),
            "cuda_gpu_trace" => Report::CudaGpuTrace(kernel_name),
            "cuda_kern_exec_trace" => Report::CudaKernExecTrace(kernel_name),
            _ if variant.is_some() => return None,
            "cuda_api_sum" => Report::CudaApiSum,
            "cuda_gpu_mem_time_sum" => Report::CudaGpuMemTimeSum,
            "cuda_gpu_mem_size_sum" => Report::CudaGpuMemSizeSum,
            "nvtx_sum" => Report::NvtxSum,
            "nvtx_gpu_proj_sum" => Report::NvtxGpuProjSum,
            "cuda_api_trace" => Report::CudaApiTrace,
            _ => return None,
        };
        Some(report)
    }

    /// The data the report reads; the report needs every entry.
    fn needs(self) -> &'static [Missing] {
        const KERNEL: Missing = Missing::new(
            "CUDA kernel data",
            &["CUPTI_ACTIVITY_KIND_KERNEL"],
            "the capture traced no CUDA kernels",
        );
        const API: Missing = Missing::new(
            "CUDA API data",
            &["CUPTI_ACTIVITY_KIND_RUNTIME"],
            "the capture did not trace CUDA",
        );
        // cuda_api_sum and cuda_api_trace word the same lack differently.
        const API_TRACE: Missing = API.called("CUDA trace data");
        const NVTX: Missing = Missing::new(
            "NV Tools Extension (NVTX) data",
            &["NVTX_EVENTS"],
            "the capture did not trace NVTX, or the program emitted none",
        );
        const MEMORY: Missing = Missing::new(
            "GPU memory data",
            &["CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"],
            "the capture traced no memcpy or memset",
        );
        const GPU_OPS: Missing = Missing::new(
            "GPU operation data",
            &[
                "CUPTI_ACTIVITY_KIND_KERNEL",
                "CUPTI_ACTIVITY_KIND_MEMCPY",
                "CUPTI_ACTIVITY_KIND_MEMSET",
            ],
            "the capture traced no GPU work",
        );
        // cuda_gpu_trace words it as nsys's trace report does.
        const GPU_TRACE: Missing = GPU_OPS.called("GPU trace data");
        match self {
            Report::CudaGpuKernSum(_) => &[KERNEL],
            Report::CudaApiSum | Report::CudaApiTrace => &[API_TRACE],
            Report::CudaGpuMemTimeSum | Report::CudaGpuMemSizeSum => &[MEMORY],
            Report::NvtxSum => &[NVTX],
            Report::NvtxKernSum(_) => &[NVTX, KERNEL, API],
            Report::NvtxGpuProjSum => &[NVTX, API, GPU_OPS],
            Report::CudaGpuTrace(_) => &[GPU_TRACE],
            Report::CudaKernExecTrace(_) => &[KERNEL, API],
        }
    }

    /// What `trace` lacks for this report, if anything.
    fn lacks(self, trace: &Trace) -> Option<Missing> {
        let absent = |t: &&str| trace.source.missing.iter().any(|m| m == t);
        self.needs()
            .iter()
            .find(|need| need.tables.iter().all(absent))
            .copied()
    }
}

impl Report {
    /// The reports a `--report` argument names, each with the name it was given by, in the
    /// order given: one name, several separated by commas, or `all` ([`Report::ALL`]).
    pub fn parse_list(arg: &str) -> Result<Vec<(String, Report)>, String> {
        if arg == "all" {
            return Ok(Report::ALL
                .iter()
                .map(|&name| {
                    (
                        name.to_owned(),
                        Report::from_name(name).expect("known name"),
                    )
                })
                .collect());
        }
        arg.split(',')
            .map(|name| {
                let name = name.trim();
                Ok((name.to_owned(), name.parse::<Report>()?))
            })
            .collect()
    }
}

impl std::str::FromStr for Report {
    type Err = String;
    fn from_str(s: &str) -> Result<Report, String> {
        Report::from_name(s).ok_or_else(|| {
            format!(
                "unknown report `{s}` (expected one of: {}, {})",
                Report::NAMES.join(", "),
                Report::TRACES.join(", ")
            )
        })
    }
}

/// The export lacks the data a report needs: nsys prints `SKIPPED: FILE does not contain ...`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Missing {
    /// What nsys calls the data (`CUDA kernel data`).
    pub data: &'static str,
    /// The tables any of which would hold it.
    pub tables: &'static [&'static str],
    /// Why an export lacks them.
    pub why: &'static str,
}

impl Missing {
    pub const fn new(
        data: &'static str,
        tables: &'static [&'static str],
        why: &'static str,
    ) -> Missing {
        Missing { data, tables, why }
    }

    /// The same lack, the data called otherwise.
    const fn called(self, data: &'static str) -> Missing {
        Missing { data, ..self }
    }
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "does not contain {} (no {} table: {})",
            self.data,
            self.tables.join(" or "),
            self.why
        )
    }
}

impl std::error::Error for Missing {}

/// Compute one report, or say which data the export lacks for it.
pub fn report(trace: &Trace, report: Report) -> Result<Table, Missing> {
    reports(trace, &[report]).remove(0)
}

/// What the kernels and API calls must give the reports `reports`.
fn needs(reports: &[Report]) -> gather::Needs {
    let any = |f: fn(&Report) -> bool| reports.iter().any(f);
    gather::Needs {
        api_sum: any(|r| *r == Report::CudaApiSum),
        kernels: any(|r| {
            matches!(
                r,
                Report::CudaGpuKernSum(_) | Report::NvtxKernSum(_) | Report::NvtxGpuProjSum
            )
        }),
        attribution: any(|r| matches!(r, Report::NvtxKernSum(_) | Report::NvtxGpuProjSum)),
        presence: any(|r| matches!(r, Report::NvtxKernSum(_))),
        projection: any(|r| *r == Report::NvtxGpuProjSum),
        mangled: any(|r| {
            matches!(
                r,
                Report::CudaGpuKernSum(KernelName::Mangled)
                    | Report::NvtxKernSum(KernelName::Mangled)
            )
        }),
    }
}

/// Whether a report reads NVTX ranges, and memory operations.
fn reads_ranges(reports: &[Report]) -> (bool, bool) {
    (
        reports.iter().any(|r| {
            matches!(
                r,
                Report::NvtxSum | Report::NvtxKernSum(_) | Report::NvtxGpuProjSum
            )
        }),
        reports.iter().any(|r| {
            matches!(
                r,
                Report::CudaGpuMemTimeSum | Report::CudaGpuMemSizeSum | Report::NvtxGpuProjSum
            )
        }),
    )
}

/// Compute several reports of one trace, sharing the work they have in common: its kernels and
/// API calls are gathered once ([`gather`]) for all the summary reports, the trace read as a
/// source; a trace report's rows go into a table.
pub fn reports(trace: &Trace, reports: &[Report]) -> Vec<Result<Table, Missing>> {
    let mut source = LoadedSource::new(trace);
    let (nvtx, mem_ops) = stream::tables_read(reports);
    let input = trace::Input::Loaded(trace);
    source
        .small_tables(nvtx, mem_ops)
        .and_then(|mut small| stream::parts(&mut source, &mut small, reports))
        .and_then(|parts| parts.into_iter().map(|p| p.into_table(&input)).collect())
        .expect("a loaded trace reads without error")
}

/// The summary reports of a trace whose kernels and API calls are `gathered` (the trace may
/// hold none of them); `ranges` are all its ranges in start order. Independent reports are
/// computed side by side.
fn tables(
    trace: &Trace,
    ranges: &[Range],
    labels: &attribution::Labels,
    gathered: gather::Gathered,
    reports: &[Report],
) -> Vec<Result<Table, Missing>> {
    let gathered = &gathered;
    reports
        .par_iter()
        .map(|&report| {
            if let Some(need) = report.lacks(trace) {
                return Err(need);
            }
            Ok(match report {
                Report::CudaGpuKernSum(names) => cuda_gpu_kern_sum::table(trace, gathered, names),
                Report::CudaApiSum => cuda_api_sum::table(trace, gathered),
                Report::CudaGpuMemTimeSum => cuda_gpu_mem_sum::time_table(trace),
                Report::CudaGpuMemSizeSum => cuda_gpu_mem_sum::size_table(trace),
                Report::NvtxSum => nvtx_sum::table(trace),
                Report::NvtxKernSum(names) => {
                    nvtx_kern_sum::table(trace, ranges, labels, gathered, names)
                }
                Report::NvtxGpuProjSum => nvtx_gpu_proj_sum::table(ranges, labels, gathered),
                Report::CudaGpuTrace(_) | Report::CudaKernExecTrace(_) | Report::CudaApiTrace => {
                    unreachable!("trace reports are written, not tabled here")
                }
            })
        })
        .collect()
}

/// Several reports of one trace as one document, in the order named: one report prints exactly
/// as nsys prints it, several get their names as titles. A report whose data the export lacks
/// is left out; what it lacks comes back beside the document, in order.
pub fn document(trace: &Trace, named: &[(String, Report)]) -> (Document, Vec<Missing>) {
    let kinds: Vec<Report> = named.iter().map(|r| r.1).collect();
    assemble(named, reports(trace, &kinds))
}

fn assemble(
    named: &[(String, Report)],
    results: Vec<Result<Table, Missing>>,
) -> (Document, Vec<Missing>) {
    let mut doc = Document::default();
    let mut skipped = Vec::new();
    for ((name, _), result) in named.iter().zip(results) {
        match result {
            Ok(table) => doc.sections.push(Section {
                title: (named.len() > 1).then(|| name.clone()),
                table,
                notes: Vec::new(),
            }),
            Err(missing) => skipped.push(missing),
        }
    }
    (doc, skipped)
}

/// A row of the reports that summarise durations by name (`cuda_gpu_kern_sum`, `cuda_api_sum`,
/// `cuda_gpu_mem_time_sum`, `nvtx_sum`): the name's share of the summed time, and the summary
/// of its durations in ns.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TimeRow {
    /// Percentage of the total of every row's time; `None` when that total is 0.
    pub percent: Option<f64>,
    pub summary: Summary,
    pub name: String,
}

impl TimeRow {
    /// One row per (name, durations) group, in no particular order; percentages of the sum of all
    /// groups. Empty groups are dropped.
    pub fn from_groups(groups: impl Iterator<Item = (String, Vec<i64>)>) -> Vec<TimeRow> {
        TimeRow::from_summaries(
            groups.filter_map(|(name, mut d)| Some((name, Summary::of(&mut d)?))),
        )
    }

    /// One row per (name, summary); percentages of the sum of all.
    pub fn from_summaries(groups: impl Iterator<Item = (String, Summary)>) -> Vec<TimeRow> {
        let mut rows: Vec<TimeRow> = groups
            .map(|(name, summary)| TimeRow {
                percent: None,
                summary,
                name,
            })
            .collect();
        // Saturating: only a damaged file's durations come near the limits of i64.
        let grand = rows
            .iter()
            .fold(0i64, |sum, r| sum.saturating_add(r.summary.total));
        for r in &mut rows {
            r.percent = summary::percent(r.summary.total, grand);
        }
        rows
    }
}

/// The cells `Total Time (ns)` to `StdDev (ns)` of a duration summary.
pub fn duration_cells(s: &Summary) -> [Cell; 7] {
    [
        Cell::Int(s.total),
        Cell::Int(s.count as i64),
        Cell::Float(s.mean, 1),
        Cell::Float(s.median, 1),
        Cell::Int(s.min),
        Cell::Int(s.max),
        Cell::Float(s.std_dev, 1),
    ]
}

/// A table of [`TimeRow`]s with nsys's columns: `Time (%)`, `Total Time (ns)`, `count_column`,
/// `Avg (ns)` ... `StdDev (ns)`, `name_column`.
pub fn time_table(rows: &[TimeRow], count_column: &str, name_column: &str) -> Table {
    let mut t = Table::new([
        "Time (%)",
        "Total Time (ns)",
        count_column,
        "Avg (ns)",
        "Med (ns)",
        "Min (ns)",
        "Max (ns)",
        "StdDev (ns)",
        name_column,
    ]);
    for r in rows {
        let mut row = vec![opt_float(r.percent, 1)];
        row.extend(duration_cells(&r.summary));
        row.push(Cell::text(r.name.clone()));
        t.push(row);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_names_round_trip() {
        for name in Report::NAMES.iter().chain(Report::TRACES) {
            assert!(Report::from_name(name).is_some(), "{name}");
        }
        assert_eq!(
            Report::from_name("cuda_kern_exec_trace:mangled"),
            Some(Report::CudaKernExecTrace(KernelName::Mangled))
        );
        assert_eq!(Report::from_name("cuda_api_trace:base"), None);
        assert_eq!(
            Report::from_name("cuda_gpu_kern_sum:base"),
            Some(Report::CudaGpuKernSum(KernelName::Short))
        );
        assert_eq!(Report::from_name("nvtx_sum:base"), None);
        assert_eq!(Report::from_name("cuda_gpu_kern_sum:bogus"), None);
        assert_eq!(Report::from_name("osrt_sum"), None);
        let err = "gpu_sum".parse::<Report>().unwrap_err();
        assert!(err.starts_with("unknown report `gpu_sum`"), "{err}");
    }

    #[test]
    fn missing_data_reads_like_nsys() {
        let m = Report::CudaGpuKernSum(KernelName::Demangled).needs()[0];
        assert_eq!(
            m.to_string(),
            "does not contain CUDA kernel data (no CUPTI_ACTIVITY_KIND_KERNEL table: the capture traced no CUDA kernels)"
        );
        let m = Report::CudaGpuMemSizeSum.needs()[0];
        assert!(m
            .to_string()
            .contains("no CUPTI_ACTIVITY_KIND_MEMCPY or CUPTI_ACTIVITY_KIND_MEMSET table"));
    }
}
