//! `analyze stats`: one `nsys stats` report.

use std::path::PathBuf;

use analyze::render::Format;

use crate::Outcome;

#[derive(clap::Args)]
pub struct Args {
    /// Report name: cuda_gpu_kern_sum, cuda_gpu_kern_sum:base, nvtx_sum, nvtx_kern_sum,
    /// nvtx_gpu_proj_sum, cuda_api_sum, cuda_gpu_mem_time_sum, cuda_gpu_mem_size_sum.
    #[arg(long, short = 'r', default_value = "cuda_gpu_kern_sum")]
    pub report: String,
    /// Output format: table, csv, json or markdown.
    #[arg(long, short = 'f', default_value = "table")]
    pub format: Format,
    /// An Nsight Systems export (.sqlite) or report (.nsys-rep), or a Kineto trace.
    pub file: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<Outcome> {
    let _ = (args.report, args.format, args.file);
    anyhow::bail!("not implemented")
}
