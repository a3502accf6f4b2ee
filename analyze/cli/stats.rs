//! `analyze stats`: `nsys stats` reports of one export.
//!
//! `--report` takes one name, several separated by commas, or `all`; one export is loaded once
//! for all of them. The trace reports (a row per kernel or call) are printed as their rows come. Exit status: 0 when the reports were printed, and also when the export lacks
//! the data a report needs (one `skipped: FILE does not contain ...` line on stderr for that
//! report and nothing on stdout for it, as nsys prints `SKIPPED: ...` and goes on); 2 for an
//! unknown report name or a file that cannot be read.

use std::io::{BufWriter, Write};
use std::path::PathBuf;

use analyze::render::{Format, DEFAULT_WIDTH};
use analyze::stats::{self, Report};

use crate::output::{OutputArgs, OutputFormat};
use crate::Outcome;

#[derive(clap::Args)]
pub struct Args {
    /// Report name: cuda_gpu_kern_sum, cuda_gpu_kern_sum:base, nvtx_sum, nvtx_kern_sum,
    /// nvtx_gpu_proj_sum, cuda_api_sum, cuda_gpu_mem_time_sum, cuda_gpu_mem_size_sum; the trace
    /// reports cuda_gpu_trace, cuda_kern_exec_trace (both also :base and :mangled) and
    /// cuda_api_trace, a row per kernel, memory operation or API call; several separated by
    /// commas, or `all` (the summaries, as in nsys).
    #[arg(long, short = 'r', default_value = "cuda_gpu_kern_sum")]
    pub report: String,
    /// Output format: table, csv (the same header and numbers as `nsys stats --format csv`),
    /// json or markdown; parquet writes the files of --output as Parquet (stdout gets text
    /// tables; the trace reports, streamed, are CSV or JSON only).
    #[arg(long, short = 'f', default_value = "table")]
    pub format: OutputFormat,
    #[command(flatten)]
    pub output: OutputArgs,
    /// An Nsight Systems export (.sqlite, .sqlite.gz) or report (.nsys-rep).
    pub file: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<Outcome> {
    // The names are checked before the file is read, so a typo costs nothing.
    let reports = Report::parse_list(&args.report).map_err(anyhow::Error::msg)?;
    let trace = reports.iter().any(|r| stats::trace::is_trace(r.1));
    if trace && args.format == OutputFormat::Parquet {
        anyhow::bail!(
            "--format parquet: the trace reports stream their rows as CSV or JSON; `analyze export` writes every GPU op as Parquet"
        );
    }
    args.output.check(args.format)?;
    if trace {
        return print(&args, &reports);
    }
    let (doc, skipped) = stats::document_file(&args.file, &reports)?;
    for missing in skipped {
        args.output
            .note(&format!("skipped: {} {missing}", args.file.display()));
    }
    if doc.sections.is_empty() {
        return Ok(Outcome::Success);
    }
    // Files are named after their report, the lone one included.
    let mut whole = doc.clone();
    if let ([section], [(name, _)]) = (whole.sections.as_mut_slice(), reports.as_slice()) {
        section.title.get_or_insert_with(|| name.clone());
    }
    args.output.emit(args.format, &doc, &whole)?;
    several_csv_tables(&args, doc.sections.len());
    Ok(Outcome::Success)
}

/// Reports among which a trace report is: printed as their rows come, never held.
fn print(args: &Args, reports: &[(String, Report)]) -> anyhow::Result<Outcome> {
    let print = stats::Print {
        format: args.format.stdout(),
        width: (!args.output.wide).then_some(DEFAULT_WIDTH),
        dir: args.output.output.as_deref(),
    };
    let mut out = BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    let printed = stats::print_file(&args.file, reports, &print, &mut out)?;
    out.flush()?;
    for missing in &printed.skipped {
        args.output
            .note(&format!("skipped: {} {missing}", args.file.display()));
    }
    if let Some(dir) = &args.output.output {
        args.output.note_written(printed.files.len(), dir);
    }
    several_csv_tables(args, reports.len() - printed.skipped.len());
    Ok(Outcome::Success)
}

/// The note that several CSV tables went to stdout.
fn several_csv_tables(args: &Args, tables: usize) {
    if args.format == OutputFormat::Print(Format::Csv) && tables > 1 && args.output.output.is_none()
    {
        // nsys's own layout, kept byte for byte; a reader that wants one table per file asks.
        args.output.note(&format!(
            "note: {tables} CSV tables on stdout, separated by blank lines; --output DIR writes \
             each to a file of its own"
        ));
    }
}
