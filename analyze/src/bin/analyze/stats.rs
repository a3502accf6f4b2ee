//! `analyze stats`: one `nsys stats` report.
//!
//! Exit status: 0 when the report was printed, and also when the export lacks the data the report
//! needs (one `skipped: FILE does not contain ...` line on stderr, nothing on stdout, as nsys
//! prints `SKIPPED: ...` and goes on); 2 for an unknown report name or a file that cannot be read.

use std::path::PathBuf;

use analyze::render::{render_to_string, Document, Format};
use analyze::stats::{self, Report};

use crate::Outcome;

#[derive(clap::Args)]
pub struct Args {
    /// Report name: cuda_gpu_kern_sum, cuda_gpu_kern_sum:base, nvtx_sum, nvtx_kern_sum,
    /// nvtx_gpu_proj_sum, cuda_api_sum, cuda_gpu_mem_time_sum, cuda_gpu_mem_size_sum.
    #[arg(long, short = 'r', default_value = "cuda_gpu_kern_sum")]
    pub report: String,
    /// Output format: table, csv (the same header and numbers as `nsys stats --format csv`),
    /// json or markdown.
    #[arg(long, short = 'f', default_value = "table")]
    pub format: Format,
    /// An Nsight Systems export (.sqlite, .sqlite.gz) or report (.nsys-rep).
    pub file: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<Outcome> {
    // The name is checked before the file is read, so a typo costs nothing.
    let report: Report = args.report.parse().map_err(anyhow::Error::msg)?;
    let trace = analyze::ingest::load_trace(&args.file)?;
    match stats::report(&trace, report) {
        Ok(table) => crate::print(&render_to_string(args.format, &Document::single(table)))?,
        Err(missing) => eprintln!("skipped: {} {missing}", args.file.display()),
    }
    Ok(Outcome::Success)
}
