//! `nsys stats` parity: for real exports, every report we compute, printed as CSV, equals what
//! Nsight Systems 2025.3 printed (`nsys stats --format csv`) for the same file, byte for byte.
//! That covers rows, order, header names, totals, counts, minima and maxima exactly, and means,
//! medians, standard deviations and percentages to the printed precision.
//!
//! The five small exports and their CSVs are in `fixtures/nsys/`; the 137k-kernel export is read
//! from the shared fixtures beside the checkout when they are there. The captures of
//! `fixtures/captures/` (CUDA graphs traced both ways, two processes on two GPUs, PyTorch's own
//! per-operator NVTX ranges) are checked for the four reports their CSVs hold, plain or
//! gzip-compressed.

use crate::common;

use std::io::Read;
use std::path::Path;

use analyze::render::{render_to_string, Document, Format};
use analyze::stats::{self, Report};

/// The report names nsys was run with, and the suffix of their CSV files.
const REPORTS: &[(&str, &str)] = &[
    ("cuda_gpu_kern_sum", "cuda_gpu_kern_sum"),
    ("cuda_gpu_kern_sum:base", "cuda_gpu_kern_sum_base"),
    ("cuda_api_sum", "cuda_api_sum"),
    ("cuda_gpu_mem_time_sum", "cuda_gpu_mem_time_sum"),
    ("cuda_gpu_mem_size_sum", "cuda_gpu_mem_size_sum"),
    ("nvtx_sum", "nvtx_sum"),
    ("nvtx_kern_sum", "nvtx_kern_sum"),
    ("nvtx_gpu_proj_sum", "nvtx_gpu_proj_sum"),
];

/// The reports kept for the captures.
const CAPTURE_REPORTS: &[(&str, &str)] = &[
    ("cuda_gpu_kern_sum", "cuda_gpu_kern_sum"),
    ("cuda_api_sum", "cuda_api_sum"),
    ("nvtx_sum", "nvtx_sum"),
    ("nvtx_kern_sum", "nvtx_kern_sum"),
];

/// Compute every report for `export` and compare each with `<stats_dir>/<stem>_<report>.csv`.
fn check(export: &Path, stats_dir: &Path, stem: &str) {
    check_reports(export, stats_dir, stem, REPORTS);
}

fn check_reports(export: &Path, stats_dir: &Path, stem: &str, reports: &[(&str, &str)]) {
    let trace = analyze::formats::load_trace(export).unwrap();
    let mut failures = Vec::new();
    for (name, suffix) in reports {
        let golden = golden(&stats_dir.join(format!("{stem}_{suffix}.csv")));
        let report: Report = name.parse().unwrap();
        let table = stats::report(&trace, report).unwrap();
        let ours = render_to_string(Format::Csv, &Document::single(table));
        if ours != golden {
            failures.push(first_difference(name, &ours, &golden));
        }
    }
    assert!(
        failures.is_empty(),
        "{}: {} of {} reports differ from nsys:\n{}",
        export.display(),
        failures.len(),
        reports.len(),
        failures.join("\n")
    );
}

/// The CSV at `path`, or gzip-compressed beside it (`.csv.gz`).
pub fn golden(path: &Path) -> String {
    let mut text = String::new();
    let read = match std::fs::File::open(path) {
        Ok(mut f) => f.read_to_string(&mut text),
        Err(_) => {
            let gz = path.with_extension("csv.gz");
            let f = std::fs::File::open(&gz).unwrap_or_else(|e| panic!("{}: {e}", gz.display()));
            flate2::read::GzDecoder::new(f).read_to_string(&mut text)
        }
    };
    read.unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text
}

/// Where `ours` and `golden` first differ, for a test's message about `report`.
pub fn first_difference(report: &str, ours: &str, golden: &str) -> String {
    let (a, b): (Vec<&str>, Vec<&str>) = (ours.lines().collect(), golden.lines().collect());
    for i in 0..a.len().max(b.len()) {
        let (x, y) = (a.get(i), b.get(i));
        if x != y {
            return format!(
                "  {report}, line {}:\n    ours: {}\n    nsys: {}",
                i + 1,
                x.unwrap_or(&"<none>"),
                y.unwrap_or(&"<none>")
            );
        }
    }
    format!("  {report}: line endings differ")
}

fn check_fixture(stem: &str) {
    check(
        &common::fixture(&format!("nsys/{stem}.sqlite.gz")),
        &common::fixture("nsys/stats"),
        stem,
    );
}

#[test]
fn torch_small_ctx128_fwd_fp32() {
    check_fixture("torch_small_ctx128_fwd_fp32");
}

#[test]
fn torch_small_ctx128_train_fp32() {
    check_fixture("torch_small_ctx128_train_fp32");
}

#[test]
fn torch_small_ctx256_train_bf16() {
    check_fixture("torch_small_ctx256_train_bf16");
}

#[test]
fn torch_medium_ctx256_fwd_fp32() {
    check_fixture("torch_medium_ctx256_fwd_fp32");
}

#[test]
fn torch_large_ctx512_train_fp32() {
    check_fixture("torch_large_ctx512_train_fp32");
}

/// 60 training steps, 136,995 kernels.
#[test]
#[cfg_attr(
    no_shared_ours,
    ignore = "needs ../shared/fixtures/ours beside the checkout"
)]
fn torch_small_ctx128_train_fp32_60steps() {
    let Some(dir) = common::shared("ours/large") else {
        return;
    };
    let stem = "torch_small_ctx128_train_fp32_60steps";
    check(&dir.join(format!("{stem}.sqlite.gz")), &dir, stem);
}

fn check_capture(stem: &str) {
    check_reports(
        &common::fixture(&format!("captures/{stem}.sqlite.gz")),
        &common::fixture("captures/stats"),
        stem,
        CAPTURE_REPORTS,
    );
}

/// Default graph tracing: graph executions are not kernels to nsys's reports either.
#[test]
fn torch_graphs_graph_small_l4_ctx128_train_fp32() {
    check_capture("torch_graphs_graph_small_l4_ctx128_train_fp32");
}

/// Node tracing: the kernels inside graphs, launched by `cudaGraphLaunch`.
#[test]
fn torch_graphs_node_small_l4_ctx128_train_fp32() {
    check_capture("torch_graphs_node_small_l4_ctx128_train_fp32");
}

/// Two processes on two GPUs in one export.
#[test]
fn torch_ddp2_small_l4_ctx128_train_fp32() {
    check_capture("torch_ddp2_small_l4_ctx128_train_fp32");
}

/// PyTorch's `emit_nvtx`: 31,340 ranges named by operator, sequence number and input shapes
/// (`aten::bmm, seq = 16, op_id = 34, sizes = [[...]]`), nearly every name its own row of
/// `nvtx_sum` (31,319 rows).
#[test]
fn torch_emit_nvtx_small_l4_ctx128_train_fp32() {
    check_capture("torch_emit_nvtx_small_l4_ctx128_train_fp32");
}
