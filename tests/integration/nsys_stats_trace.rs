//! The trace reports (`cuda_gpu_trace`, `cuda_kern_exec_trace`, `cuda_api_trace`): printed as
//! CSV, they equal what Nsight Systems 2025.3 printed (`nsys stats --format csv`) for the same
//! exports, byte for byte; their JSON and Markdown are what the renderers print of the same
//! rows; a table they stream out of order of start stops them with an error; a loaded trace
//! gives the columns the model keeps; and an export without the data says so in nsys's words.
//!
//! The golden CSVs are gzip-compressed in `fixtures/trace_reports/`.

use crate::common;
use crate::nsys_stats_golden::{self, first_difference};

use std::path::{Path, PathBuf};

use analyze::render::{render_to_string, Cell, Format, Table};
use analyze::stats::{self, Print, Report};
use rusqlite::Connection;

const REPORTS: &[&str] = &["cuda_gpu_trace", "cuda_kern_exec_trace", "cuda_api_trace"];

/// The exports whose trace reports nsys printed, with the folder of their CSVs.
const EXPORTS: &[(&str, &str)] = &[
    ("collect", "collect_small_ctx128_train_fp32"),
    ("collect", "nsys_collect_small_ctx128_train_fp32"),
    ("nsys", "torch_small_ctx128_fwd_fp32"),
    ("nsys", "torch_medium_ctx256_fwd_fp32"),
    ("captures", "torch_graphs_node_small_l4_ctx128_train_fp32"),
    ("captures", "torch_ddp2_small_l4_ctx128_train_fp32"),
    ("captures", "torch_emit_nvtx_small_l4_ctx128_train_fp32"),
];

fn export(dir: &str, stem: &str) -> PathBuf {
    common::fixture(&format!("{dir}/{stem}.sqlite.gz"))
}

/// What nsys printed for `report` of the export `stem`.
fn golden(stem: &str, report: &str) -> String {
    nsys_stats_golden::golden(&common::fixture(&format!(
        "trace_reports/{stem}_{report}.csv"
    )))
}

/// `reports` of the file at `path` printed in `format`, as `analyze stats` prints them.
fn print(path: &Path, reports: &str, format: Format) -> (String, stats::Printed) {
    let named = Report::parse_list(reports).unwrap();
    let mut out = Vec::new();
    let print = Print {
        format,
        width: None,
        dir: None,
    };
    let printed = stats::print_file(path, &named, &print, &mut out).unwrap();
    (String::from_utf8(out).unwrap(), printed)
}

fn check(dir: &str, stem: &str) {
    let path = export(dir, stem);
    let mut failures = Vec::new();
    for report in REPORTS {
        let (ours, printed) = print(&path, report, Format::Csv);
        assert!(printed.skipped.is_empty(), "{stem} {report}");
        let nsys = golden(stem, report);
        if ours != nsys {
            failures.push(first_difference(report, &ours, &nsys));
        }
    }
    assert!(
        failures.is_empty(),
        "{stem}: trace reports differ from nsys:\n{}",
        failures.join("\n")
    );
}

/// `collect --trace`'s own export: API calls on a thread without a priority.
#[test]
fn collect_small_ctx128_train_fp32() {
    check("collect", "collect_small_ctx128_train_fp32");
}

#[test]
fn nsys_collect_small_ctx128_train_fp32() {
    check("collect", "nsys_collect_small_ctx128_train_fp32");
}

#[test]
fn torch_small_ctx128_fwd_fp32() {
    check("nsys", "torch_small_ctx128_fwd_fp32");
}

#[test]
fn torch_medium_ctx256_fwd_fp32() {
    check("nsys", "torch_medium_ctx256_fwd_fp32");
}

/// Kernels of CUDA graphs: hundreds of kernels to one `cudaGraphLaunch`, in kernel order.
#[test]
fn torch_graphs_node_small_l4_ctx128_train_fp32() {
    check("captures", "torch_graphs_node_small_l4_ctx128_train_fp32");
}

/// Two processes on two GPUs: their kernels interleave in another order than their calls.
#[test]
fn torch_ddp2_small_l4_ctx128_train_fp32() {
    check("captures", "torch_ddp2_small_l4_ctx128_train_fp32");
}

/// 31,340 NVTX ranges with long names beside 4,878 kernels.
#[test]
fn torch_emit_nvtx_small_l4_ctx128_train_fp32() {
    check("captures", "torch_emit_nvtx_small_l4_ctx128_train_fp32");
}

#[test]
fn the_command_line_prints_nsys_csv() {
    let (dir, stem) = EXPORTS[5];
    let out = common::analyze(&[
        "stats",
        "--report",
        "cuda_kern_exec_trace",
        "--format",
        "csv",
        export(dir, stem).to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", common::text(&out.stderr));
    assert_eq!(
        common::text(&out.stdout),
        golden(stem, "cuda_kern_exec_trace")
    );
}

/// Markdown without its alignment rows: a streamed table aligns a column by what it holds in
/// nsys's definition, a held one by what its cells turned out to be (a column of the memory
/// kinds, all empty where no copy ran, counts as numbers there).
fn unaligned(markdown: &str) -> String {
    markdown
        .lines()
        .filter(|l| !l.starts_with("| ---"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// JSON, Markdown and CSV of the rows as they stream are what the renderers print of the same
/// rows held in a document, for one report and for several.
#[test]
fn streamed_formats_equal_the_rendered_document() {
    let path = export("captures", "torch_graphs_node_small_l4_ctx128_train_fp32");
    for reports in [
        "cuda_gpu_trace",
        "cuda_api_trace,cuda_api_sum,cuda_kern_exec_trace:base",
    ] {
        let named = Report::parse_list(reports).unwrap();
        let (doc, skipped) = stats::document_file(&path, &named).unwrap();
        assert!(skipped.is_empty());
        for format in [Format::Json, Format::Markdown, Format::Csv] {
            let (mut streamed, _) = print(&path, reports, format);
            let mut rendered = render_to_string(format, &doc);
            if format == Format::Markdown {
                (streamed, rendered) = (unaligned(&streamed), unaligned(&rendered));
            }
            assert!(
                streamed == rendered,
                "{format:?}: {}",
                first_difference(reports, &streamed, &rendered)
            );
        }
    }
    let (markdown, _) = print(&path, "cuda_gpu_trace", Format::Markdown);
    assert_eq!(
        markdown.lines().nth(1).unwrap(),
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: \
         | ---: | ---: | --- | --- | --- | ---: | ---: | ---: | --- |"
    );
    let (json, _) = print(&path, "cuda_api_trace", Format::Json);
    let rows: serde_json::Value = serde_json::from_str(&json).unwrap();
    let csv = golden(
        "torch_graphs_node_small_l4_ctx128_train_fp32",
        "cuda_api_trace",
    );
    assert_eq!(rows.as_array().unwrap().len(), csv.lines().count() - 1);
    // nsys: 5092473649,1389,cuModuleGetLoadingMode,0,1,1140,1140,20,python3
    assert_eq!(rows[0]["Start (ns)"], 5092473649i64);
    assert_eq!(rows[0]["Name"], "cuModuleGetLoadingMode");
    assert_eq!(rows[0]["T-Pri"], 20);
    assert_eq!(rows[0]["Thread Name"], "python3");
}

/// The text table: nsys's columns, one line per row under a header and its rule.
#[test]
fn text_prints_a_line_per_row() {
    let (dir, stem) = EXPORTS[2];
    let named = Report::parse_list("cuda_api_trace").unwrap();
    let mut out = Vec::new();
    let print = Print {
        format: Format::Table,
        width: Some(120),
        dir: None,
    };
    stats::print_file(&export(dir, stem), &named, &print, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let csv = golden(stem, "cuda_api_trace");
    assert_eq!(lines.len(), csv.lines().count() + 1);
    assert!(
        lines[0].starts_with(" Start (ns)  Duration (ns)  Name"),
        "{}",
        lines[0]
    );
    assert!(lines[1].starts_with("-----------  -------------  ----"));
    // nsys: 7366128397,1289,cuModuleGetLoadingMode,0,1,429,429,20,python3
    assert!(lines[2].starts_with(" 7366128397           1289  cuModuleGetLoadingMode"));
    assert!(lines[2].ends_with("python3"), "{}", lines[2]);
}

/// `--output DIR` writes each table to a file, a trace report's as it prints on stdout.
#[test]
fn a_folder_gets_each_table_as_a_file() {
    let (dir, stem) = EXPORTS[0];
    let folder = tempfile::tempdir().unwrap();
    let named = Report::parse_list("cuda_gpu_trace,cuda_gpu_kern_sum").unwrap();
    let mut out = Vec::new();
    let print = Print {
        format: Format::Csv,
        width: None,
        dir: Some(folder.path()),
    };
    let printed = stats::print_file(&export(dir, stem), &named, &print, &mut out).unwrap();
    let names: Vec<String> = printed
        .files
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["cuda_gpu_trace.csv", "cuda_gpu_kern_sum.csv"]);
    let file = std::fs::read_to_string(&printed.files[0]).unwrap();
    assert_eq!(file, golden(stem, "cuda_gpu_trace"));
    let stdout = String::from_utf8(out).unwrap();
    assert!(stdout.starts_with(&file));
    assert!(stdout.ends_with(&std::fs::read_to_string(&printed.files[1]).unwrap()));
}

/// `all` is nsys's default set: the summaries, not the traces.
#[test]
fn all_leaves_the_traces_out() {
    let all = Report::parse_list("all").unwrap();
    assert!(all.iter().all(|(_, r)| !stats::trace::is_trace(*r)));
    for name in Report::TRACES {
        let report: Report = name.parse().unwrap();
        assert!(stats::trace::is_trace(report), "{name}");
    }
    let err = "cuda_api_trace:base".parse::<Report>().unwrap_err();
    assert!(err.contains("cuda_gpu_trace:mangled"), "{err}");
}

/// A copy of the export `stem` unpacked into `dir`, changed by `sql`.
fn changed(dir: &Path, from: &str, stem: &str, sql: &str) -> PathBuf {
    let path = common::unpacked(
        &format!("{from}/{stem}.sqlite.gz"),
        dir,
        &format!("{stem}.sqlite"),
    );
    Connection::open(&path).unwrap().execute_batch(sql).unwrap();
    path
}

/// Rewrite `table` with its rows in a shuffled order (new rowids).
fn shuffle(table: &str) -> String {
    format!(
        "CREATE TEMP TABLE t AS SELECT * FROM {table} ORDER BY (rowid * 7919) % 1009, rowid;
         DELETE FROM {table}; INSERT INTO {table} SELECT * FROM t; DROP TABLE t;"
    )
}

/// The rows of the tables a report follows must come in order of start, as nsys and `collect`
/// write them: out of order, the report stops with an error instead of printing rows out of
/// order. The tables it holds (memory operations) or joins (the kernels of
/// `cuda_kern_exec_trace`) may come in any order.
#[test]
fn rows_out_of_order_stop_the_tables_that_stream() {
    let (dir, stem) = EXPORTS[2];
    let tmp = tempfile::tempdir().unwrap();
    let shuffled = |table| changed(tmp.path(), dir, stem, &shuffle(table));
    let named = |report| Report::parse_list(report).unwrap();
    let csv = Print {
        format: Format::Csv,
        width: None,
        dir: None,
    };
    let path = shuffled("CUPTI_ACTIVITY_KIND_MEMCPY");
    let (ours, _) = print(&path, "cuda_gpu_trace", Format::Csv);
    assert_eq!(ours, golden(stem, "cuda_gpu_trace"));
    let path = shuffled("CUPTI_ACTIVITY_KIND_KERNEL");
    let (ours, _) = print(&path, "cuda_kern_exec_trace", Format::Csv);
    assert_eq!(ours, golden(stem, "cuda_kern_exec_trace"));
    let err = stats::print_file(&path, &named("cuda_gpu_trace"), &csv, &mut Vec::new());
    let err = err.unwrap_err().to_string();
    assert!(
        err.contains("the rows of CUPTI_ACTIVITY_KIND_KERNEL are not in order of start"),
        "{err}"
    );
    let path = shuffled("CUPTI_ACTIVITY_KIND_RUNTIME");
    for report in ["cuda_api_trace", "cuda_kern_exec_trace"] {
        let err = stats::print_file(&path, &named(report), &csv, &mut Vec::new());
        let err = err.unwrap_err().to_string();
        assert!(
            err.contains("CUPTI_ACTIVITY_KIND_RUNTIME are not in order"),
            "{err}"
        );
    }
}

/// Tables the page reader leaves to SQL (here, indexed ones) read a piece at a time through
/// SQL, with the same rows.
#[test]
fn tables_read_through_sql_give_the_same_rows() {
    // 5,697 kernels and 12,834 calls: several pieces each.
    let (dir, stem) = EXPORTS[3];
    let tmp = tempfile::tempdir().unwrap();
    let path = changed(
        tmp.path(),
        dir,
        stem,
        "CREATE INDEX k ON CUPTI_ACTIVITY_KIND_KERNEL (correlationId);
         CREATE INDEX r ON CUPTI_ACTIVITY_KIND_RUNTIME (correlationId);
         CREATE INDEX m ON CUPTI_ACTIVITY_KIND_MEMCPY (start);",
    );
    for report in REPORTS {
        let (ours, _) = print(&path, report, Format::Csv);
        let nsys = golden(stem, report);
        assert!(ours == nsys, "{}", first_difference(report, &ours, &nsys));
    }
}

/// Without the tables a report reads, it is skipped with nsys's words.
#[test]
fn an_export_without_the_data_says_what_it_lacks() {
    let (dir, stem) = EXPORTS[2];
    let tmp = tempfile::tempdir().unwrap();
    let path = changed(
        tmp.path(),
        dir,
        stem,
        "DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL; DROP TABLE CUPTI_ACTIVITY_KIND_MEMCPY;",
    );
    let (out, printed) = print(
        &path,
        "cuda_gpu_trace,cuda_kern_exec_trace,cuda_api_trace",
        Format::Csv,
    );
    let said: Vec<String> = printed.skipped.iter().map(|m| m.to_string()).collect();
    assert_eq!(said.len(), 2, "{said:?}");
    assert!(said[0].starts_with("does not contain GPU trace data (no CUPTI_ACTIVITY_KIND_KERNEL or CUPTI_ACTIVITY_KIND_MEMCPY or CUPTI_ACTIVITY_KIND_MEMSET table"), "{}", said[0]);
    assert!(
        said[1].starts_with("does not contain CUDA kernel data"),
        "{}",
        said[1]
    );
    // The API calls are still there, and print alone, untitled, as nsys printed them.
    assert_eq!(out, golden(stem, "cuda_api_trace"));

    let path = changed(
        tmp.path(),
        dir,
        stem,
        "DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME;",
    );
    let (_, printed) = print(&path, "cuda_api_trace,cuda_kern_exec_trace", Format::Csv);
    let said: Vec<String> = printed.skipped.iter().map(|m| m.to_string()).collect();
    assert!(
        said[0].starts_with("does not contain CUDA trace data"),
        "{}",
        said[0]
    );
    assert!(
        said[1].starts_with("does not contain CUDA API data"),
        "{}",
        said[1]
    );
}

/// `table` without the columns named.
fn without(table: &Table, columns: &[&str]) -> Vec<Vec<Cell>> {
    let keep: Vec<usize> = (0..table.columns.len())
        .filter(|&i| !columns.contains(&table.columns[i].as_str()))
        .collect();
    table
        .rows
        .iter()
        .map(|row| keep.iter().map(|&i| row[i].clone()).collect())
        .collect()
}

/// A trace loaded whole gives the trace reports from the model: every row and every column it
/// keeps as the stream of the export gives them (which equals nsys); what it does not keep is
/// empty.
#[test]
fn a_loaded_trace_gives_the_columns_the_model_keeps() {
    let unknown: &[(&str, &[&str])] = &[
        (
            "cuda_gpu_trace",
            &["Ctx", "GreenCtx", "SrcMemKd", "DstMemKd"],
        ),
        ("cuda_kern_exec_trace", &[]),
        ("cuda_api_trace", &["Result", "T-Pri"]),
    ];
    for &(dir, stem) in &EXPORTS[2..] {
        let path = export(dir, stem);
        let trace = analyze::formats::load_trace(&path).unwrap();
        for (report, columns) in unknown {
            let named = Report::parse_list(report).unwrap();
            let loaded = stats::report(&trace, named[0].1).unwrap();
            let (doc, _) = stats::document_file(&path, &named).unwrap();
            let streamed = &doc.sections[0].table;
            assert_eq!(loaded.columns, streamed.columns);
            assert!(
                without(&loaded, columns) == without(streamed, columns),
                "{stem} {report}"
            );
            for column in *columns {
                let at = loaded.columns.iter().position(|c| c == column).unwrap();
                assert!(loaded.rows.iter().all(|r| r[at] == Cell::Missing));
            }
        }
    }
}
