//! Other people's real Nsight Systems exports (schemas 2.9.1 to 3.20, 2021 to 2025, some without
//! kernels, NVTX, CUDA API or metadata tables): every file loads, and every report either comes
//! out or says in one line what the export lacks. Never a panic.
//!
//! Report contents are checked against independent SQL over the same file: row counts, totals
//! and instance counts that the report must add up to. The files are read from
//! `../shared/fixtures/public/nsys` and never committed; without that folder the test says it
//! skipped.

use crate::common;

use std::path::Path;

use analyze::render::{Cell, Table};
use analyze::stats::{self, Report};
use rusqlite::{Connection, OpenFlags};

fn sql_i64(conn: &Connection, sql: &str) -> i64 {
    conn.query_row(sql, [], |r| r.get::<_, Option<i64>>(0))
        .unwrap()
        .unwrap_or(0)
}

fn has_table(conn: &Connection, table: &str) -> bool {
    sql_i64(
        conn,
        &format!("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = '{table}'"),
    ) > 0
}

fn column(table: &Table, name: &str) -> Vec<i64> {
    let i = table.columns.iter().position(|c| c == name).unwrap();
    table
        .rows
        .iter()
        .map(|r| match r[i] {
            Cell::Int(v) => v,
            ref other => panic!("{name}: {other:?}"),
        })
        .collect()
}

fn sum(table: &Table, name: &str) -> i64 {
    column(table, name).iter().sum()
}

/// Load one file, run every report, check what can be checked independently. Returns a line
/// per report for the test log.
fn check_file(path: &Path) -> Vec<String> {
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    let trace =
        analyze::formats::load_trace(path).unwrap_or_else(|e| panic!("{name} does not load: {e}"));
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let mut log = Vec::new();
    for report_name in Report::ALL {
        let report: Report = report_name.parse().unwrap();
        let table = match stats::report(&trace, report) {
            Ok(t) => t,
            Err(missing) => {
                let line = missing.to_string();
                assert!(!line.contains('\n'), "{name} {report_name}: {line}");
                // The table it names really is absent.
                for t in missing.tables {
                    assert!(!has_table(&conn, t), "{name} {report_name}: {t} exists");
                }
                log.push(format!("{name} {report_name}: skipped: {line}"));
                continue;
            }
        };
        match *report_name {
            "cuda_gpu_kern_sum" => {
                let k = "CUPTI_ACTIVITY_KIND_KERNEL";
                assert_eq!(
                    sum(&table, "Total Time (ns)"),
                    sql_i64(&conn, &format!("SELECT sum(end - start) FROM {k}")),
                    "{name}"
                );
                assert_eq!(
                    sum(&table, "Instances"),
                    sql_i64(&conn, &format!("SELECT count(*) FROM {k}")),
                    "{name}"
                );
                let names = format!(
                    "SELECT count(DISTINCT s.value) FROM {k} JOIN StringIds s ON s.id = demangledName"
                );
                assert_eq!(table.rows.len() as i64, sql_i64(&conn, &names), "{name}");
            }
            "cuda_api_sum" => {
                let r = "CUPTI_ACTIVITY_KIND_RUNTIME";
                assert_eq!(
                    sum(&table, "Num Calls"),
                    sql_i64(&conn, &format!("SELECT count(*) FROM {r}")),
                    "{name}"
                );
                assert_eq!(
                    sum(&table, "Total Time (ns)"),
                    sql_i64(&conn, &format!("SELECT sum(end - start) FROM {r}")),
                    "{name}"
                );
            }
            "cuda_gpu_mem_time_sum" | "cuda_gpu_mem_size_sum" => {
                let mut count = 0;
                for t in ["CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"] {
                    if has_table(&conn, t) {
                        count += sql_i64(&conn, &format!("SELECT count(*) FROM {t}"));
                    }
                }
                assert_eq!(sum(&table, "Count"), count, "{name} {report_name}");
            }
            "nvtx_sum" => {
                let ranges = "FROM NVTX_EVENTS WHERE eventType IN (59, 60, 70, 71)";
                assert_eq!(
                    sum(&table, "Instances"),
                    sql_i64(&conn, &format!("SELECT count(*) {ranges}")),
                    "{name}"
                );
                // A range still open at the end lasts until the last NVTX timestamp.
                let total = sql_i64(
                    &conn,
                    &format!(
                        "SELECT sum(coalesce(end, (SELECT max(max(start), max(end)) \
                         FROM NVTX_EVENTS)) - start) {ranges}"
                    ),
                );
                assert_eq!(sum(&table, "Total Time (ns)"), total, "{name}");
            }
            "nvtx_kern_sum" => {
                // Every kernel shows up at least once, under a range or under none.
                let kernels = sql_i64(&conn, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL");
                assert!(sum(&table, "Kern Inst") >= kernels, "{name}");
            }
            "nvtx_gpu_proj_sum" => {
                let ranges = sql_i64(
                    &conn,
                    "SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN (59, 60, 70, 71)",
                );
                assert!(sum(&table, "Range Instances") <= ranges, "{name}");
            }
            _ => {}
        }
        log.push(format!("{name} {report_name}: {} rows", table.rows.len()));
    }
    log
}

#[test]
#[cfg_attr(
    no_shared_public,
    ignore = "needs ../shared/fixtures/public beside the checkout"
)]
fn every_public_export_loads_and_reports() {
    let Some(dir) = common::shared("public/nsys") else {
        return;
    };
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sqlite"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{} holds no .sqlite file", dir.display());
    for f in &files {
        for line in check_file(f) {
            eprintln!("{line}");
        }
    }
}

/// The CLI's answer for a report whose table the export lacks: one `skipped:` line on stderr,
/// nothing on stdout, exit status 0 (as `nsys stats` prints `SKIPPED:` and goes on).
#[test]
#[cfg_attr(
    no_shared_public,
    ignore = "needs ../shared/fixtures/public beside the checkout"
)]
fn missing_kernel_table_is_skipped_in_one_line() {
    let Some(dir) = common::shared("public/nsys") else {
        return;
    };
    let path = dir.join("cardiac-2021__report1.sqlite");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_analyze"))
        .args(["stats", "--report", "cuda_gpu_kern_sum"])
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(out.stdout.is_empty());
    assert_eq!(
        stderr,
        format!(
            "skipped: {} does not contain CUDA kernel data (no CUPTI_ACTIVITY_KIND_KERNEL table: \
             the capture traced no CUDA kernels)\n",
            path.display()
        )
    );
}
