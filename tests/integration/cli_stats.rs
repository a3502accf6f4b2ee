//! `analyze stats` from the command line: the four formats, several reports at once, and what it
//! prints for a report whose data the export lacks.

use crate::common;

use std::path::Path;
use std::process::{Command, Output};

const TRAIN: &str = "nsys/torch_small_ctx128_train_fp32.sqlite.gz";

fn stats(args: &[&str], file: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_analyze"))
        .arg("stats")
        .args(args)
        .arg(file)
        .output()
        .unwrap()
}

fn stdout_of(out: &Output) -> String {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn golden(report: &str) -> String {
    std::fs::read_to_string(common::fixture(&format!(
        "nsys/stats/torch_small_ctx128_train_fp32_{report}.csv"
    )))
    .unwrap()
}

#[test]
fn csv_is_nsys_csv() {
    let out = stats(
        &["--report", "nvtx_gpu_proj_sum", "--format", "csv"],
        &common::fixture(TRAIN),
    );
    assert_eq!(stdout_of(&out), golden("nvtx_gpu_proj_sum"));
}

#[test]
fn table_is_the_default_format() {
    let out = stats(&["--report", "nvtx_sum"], &common::fixture(TRAIN));
    let text = stdout_of(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("Time (%)  Total Time (ns)  Instances"));
    assert!(lines[1].starts_with("--------  ---------------"));
    // nsys: 34.7,614541563,4,153635390.8,... :forward
    assert!(lines[2].contains("614541563"), "{}", lines[2]);
    assert!(lines[2].ends_with(":forward"), "{}", lines[2]);
    assert_eq!(lines.len(), 2 + golden("nvtx_sum").lines().count() - 1);
}

#[test]
fn json_keeps_full_precision() {
    let out = stats(
        &["--report", "cuda_gpu_kern_sum", "--format", "json"],
        &common::fixture(TRAIN),
    );
    let v: serde_json::Value = serde_json::from_str(&stdout_of(&out)).unwrap();
    let first = &v[0];
    // nsys prints 37268.7 for 10882460 ns over 292 instances.
    assert_eq!(first["Total Time (ns)"], 10882460);
    assert_eq!(first["Instances"], 292);
    assert_eq!(first["Avg (ns)"].as_f64().unwrap(), 10882460.0 / 292.0);
    assert!(first["Name"]
        .as_str()
        .unwrap()
        .starts_with("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n"));
}

#[test]
fn markdown_table() {
    let out = stats(
        &["--report", "cuda_gpu_mem_size_sum", "--format", "markdown"],
        &common::fixture(TRAIN),
    );
    let md = stdout_of(&out);
    let lines: Vec<&str> = md.lines().collect();
    assert_eq!(
        lines[0],
        "| Total (MB) | Count | Avg (MB) | Med (MB) | Min (MB) | Max (MB) | StdDev (MB) | Operation |"
    );
    assert_eq!(
        lines[1],
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
    );
    // nsys: 514.895,135,3.814,2.359,0.003,30.720,5.035,[CUDA memcpy Host-to-Device]
    assert_eq!(
        lines[2],
        "| 514.895 | 135 | 3.814 | 2.359 | 0.003 | 30.720 | 5.035 | [CUDA memcpy Host-to-Device] |"
    );
}

#[test]
fn several_reports_share_one_load() {
    let out = stats(
        &["--report", "cuda_api_sum,nvtx_sum", "--format", "csv"],
        &common::fixture(TRAIN),
    );
    assert_eq!(
        stdout_of(&out),
        format!("{}\n{}", golden("cuda_api_sum"), golden("nvtx_sum"))
    );
    let all = stats(
        &["--report", "all", "--format", "markdown"],
        &common::fixture(TRAIN),
    );
    let md = stdout_of(&all);
    for name in analyze::stats::Report::ALL {
        assert!(md.contains(&format!("### {name}\n")), "{name}");
    }
}

/// A minimal export with NVTX ranges (one still open at the end) and no CUDA tables: NVTX reports
/// work, the others say in one line what is missing and exit 0.
#[test]
fn report_whose_table_is_missing_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nvtx_only.sqlite");
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(
        "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
         CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL,
             rangeId INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid INTEGER,
             endGlobalTid INTEGER, textId INTEGER, domainId INTEGER);
         INSERT INTO StringIds VALUES (1, 'step');
         INSERT INTO NVTX_EVENTS (start, end, eventType, textId, globalTid, domainId)
             VALUES (100, 400, 59, 1, 281474993487880, 0), (500, 700, 59, 1, 281474993487880, 0);
         -- Still open when the capture ended: nsys ends it at the last NVTX timestamp, 700.
         INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId)
             VALUES (600, NULL, 59, 'tail', 281474993487880, 0);",
    )
    .unwrap();
    drop(conn);

    let out = stats(&["--report", "nvtx_sum", "--format", "csv"], &path);
    assert_eq!(
        stdout_of(&out),
        "Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Style,Range\n\
         83.3,500,2,250.0,250.0,200,300,70.7,PushPop,:step\n\
         16.7,100,1,100.0,100.0,100,100,0.0,PushPop,:tail\n"
    );

    for (report, lack) in [
        (
            "cuda_gpu_kern_sum",
            "CUDA kernel data (no CUPTI_ACTIVITY_KIND_KERNEL table",
        ),
        (
            "cuda_api_sum",
            "CUDA trace data (no CUPTI_ACTIVITY_KIND_RUNTIME table",
        ),
        (
            "nvtx_kern_sum",
            "CUDA kernel data (no CUPTI_ACTIVITY_KIND_KERNEL table",
        ),
        (
            "nvtx_gpu_proj_sum",
            "CUDA API data (no CUPTI_ACTIVITY_KIND_RUNTIME table",
        ),
        (
            "cuda_gpu_mem_time_sum",
            "GPU memory data (no CUPTI_ACTIVITY_KIND_MEMCPY or CUPTI_ACTIVITY_KIND_MEMSET table",
        ),
    ] {
        let out = stats(&["--report", report], &path);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{report}: {stderr}");
        assert!(out.stdout.is_empty(), "{report}");
        assert_eq!(stderr.lines().count(), 1, "{report}: {stderr}");
        let expected = format!("skipped: {} does not contain {lack}", path.display());
        assert!(stderr.starts_with(&expected), "{report}: {stderr}");
    }

    // With several reports, those that can run still print.
    let out = stats(
        &["--report", "cuda_gpu_kern_sum,nvtx_sum", "--format", "csv"],
        &path,
    );
    assert!(stdout_of(&out).contains(":step"));
    assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1);
}
