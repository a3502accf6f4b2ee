//! `analyze compare` on two traces that ran different amounts of work: a real export against
//! copies of itself with the later half of its measured steps removed, once with every kernel
//! 10% longer and once unchanged. Totals fall in both (less work); per call, the first is 10%
//! slower and the second the same, and that is what the comparison leads with and the gate
//! judges. Every table obeys `--limit`.
//!
//! The copies are made here, with SQLite on an unpacked copy of the fixture: kernels are
//! lengthened in place (each keeps its start), and "the later half of the steps" is everything
//! from the start of the first removed `step_N` range on: the CUDA API calls that start there,
//! the GPU work they launched, and the NVTX ranges that start there (ranges that straddle the
//! cut, such as `measurement`, end at it).

use crate::common;

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::{analyze, text};

const FP32: &str = "nsys/torch_small_ctx128_train_fp32.sqlite.gz";
const BF16: &str = "nsys/torch_small_ctx256_train_bf16.sqlite.gz";

/// The fixture unpacked into `dir` as `name`.
fn unpacked(dir: &Path, name: &str) -> PathBuf {
    common::unpacked(FP32, dir, name)
}

/// Every kernel `factor` times as long, each keeping its start.
fn scale_kernels(db: &rusqlite::Connection, factor: f64) {
    db.execute(
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = start + CAST(ROUND((end - start) * ?1) AS INTEGER)",
        [factor],
    )
    .unwrap();
}

/// Remove the later half of the measured steps (`step_N` ranges): everything that starts at
/// or after the first removed step. Returns (steps before, steps kept).
fn remove_later_half_of_steps(db: &rusqlite::Connection) -> (usize, usize) {
    let name = "COALESCE(text, (SELECT value FROM StringIds WHERE id = textId))";
    let mut q = db
        .prepare(&format!(
            "SELECT start FROM NVTX_EVENTS WHERE {name} GLOB 'step_[0-9]*' ORDER BY start"
        ))
        .unwrap();
    let starts: Vec<i64> = q
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let keep = starts.len().div_ceil(2);
    let cut = starts[keep];
    for table in [
        "CUPTI_ACTIVITY_KIND_KERNEL",
        "CUPTI_ACTIVITY_KIND_MEMCPY",
        "CUPTI_ACTIVITY_KIND_MEMSET",
    ] {
        db.execute(
            &format!(
                "DELETE FROM {table} WHERE correlationId IN \
                 (SELECT correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE start >= ?1)"
            ),
            [cut],
        )
        .unwrap();
    }
    db.execute(
        "DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE start >= ?1",
        [cut],
    )
    .unwrap();
    db.execute("DELETE FROM NVTX_EVENTS WHERE start >= ?1", [cut])
        .unwrap();
    db.execute("UPDATE NVTX_EVENTS SET end = ?1 WHERE end > ?1", [cut])
        .unwrap();
    (starts.len(), keep)
}

/// (kernel instances, kernel time) of an export.
fn kernel_totals(path: &Path) -> (i64, i64) {
    let db = rusqlite::Connection::open(path).unwrap();
    db.query_row(
        "SELECT COUNT(*), SUM(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .unwrap()
}

/// The fixture with the later half of its steps removed, its kernels scaled by `factor`.
fn shortened(dir: &Path, name: &str, factor: Option<f64>) -> PathBuf {
    let p = unpacked(dir, name);
    let db = rusqlite::Connection::open(&p).unwrap();
    if let Some(f) = factor {
        scale_kernels(&db, f);
    }
    assert_eq!(remove_later_half_of_steps(&db), (2, 1));
    p
}

#[test]
fn slower_kernels_in_half_the_steps_fail_the_gate_per_call() {
    let dir = tempfile::tempdir().unwrap();
    let a = unpacked(dir.path(), "a.sqlite");
    let b = shortened(dir.path(), "slower_half.sqlite", Some(1.1));
    let (na, ta) = kernel_totals(&a);
    let (nb, tb) = kernel_totals(&b);
    assert!(nb < na * 9 / 10, "fewer kernels: {na} -> {nb}");
    assert!(tb < ta, "less total kernel time: {ta} -> {tb}");

    let (a, b) = (a.display().to_string(), b.display().to_string());
    let out = analyze(&["compare", &a, &b, "--fail-if-slower", "5", "-f", "json"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    // The gate names the per-call slowdown, not the fall in total time.
    assert!(
        stderr.starts_with("check failed: GPU kernel time per call at A's instance counts rose"),
        "{stderr}"
    );
    assert!(stderr.contains("different amounts of work"), "{stderr}");
    assert!(stderr.contains("kernels slower per call"), "{stderr}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["headline"]["basis"], "per_call");
    assert_eq!(v["work"]["differs"], true);
    assert_eq!(v["a"]["kernel_instances"], na);
    assert_eq!(v["b"]["kernel_instances"], nb);
    assert!(v["kernel_time_delta_pct"].as_f64().unwrap() < 0.0);
    // Each kernel is 10% longer: per call, +10% (give or take how the kept steps' kernels
    // differ from the removed ones').
    let per_call = v["per_call"]["delta_pct"].as_f64().unwrap();
    assert!((per_call - 10.0).abs() < 0.5, "{per_call}");
    assert_eq!(v["headline"]["change_pct"].as_f64(), Some(per_call));
    let first_named = stderr
        .lines()
        .find(|l| l.contains("% per call)"))
        .expect("a slowed kernel is named");
    let top: String = v["per_call"]["kernels"][0]["name"]
        .as_str()
        .unwrap()
        .chars()
        .take(60)
        .collect();
    assert!(first_named.contains(&top), "{first_named}");
    // Largest per-call rise first.
    let rises: Vec<f64> = v["per_call"]["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["per_call_delta_ns"].as_f64().unwrap())
        .collect();
    assert!(rises.windows(2).all(|w| w[0] >= w[1]));
    // A looser gate passes.
    let loose = analyze(&["compare", &a, &b, "--fail-if-slower", "15"]);
    assert_eq!(loose.status.code(), Some(0), "{}", text(&loose.stderr));

    // The table leads with the per-call figures and the warning.
    let md = analyze(&["compare", &a, &b, "-f", "markdown"]);
    let md = text(&md.stdout);
    let first = md.find("### ").unwrap();
    assert!(md[first..].starts_with("### Per call"), "{md}");
    assert!(
        md.find("warning: the two traces ran different amounts of work")
            .unwrap()
            < md.find("### Summary").unwrap()
    );
}

#[test]
fn the_same_kernels_in_half_the_steps_pass_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let a = common::fixture(FP32).display().to_string();
    let b = shortened(dir.path(), "half.sqlite", None)
        .display()
        .to_string();
    let out = analyze(&["compare", &a, &b, "--fail-if-slower", "5", "-f", "json"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.starts_with("check passed: GPU kernel time per call at A's instance counts"),
        "{stderr}"
    );
    assert!(
        stderr.contains("warning: the two traces ran different amounts of work"),
        "{stderr}"
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["headline"]["basis"], "per_call");
    // Total kernel time fell by about a quarter; per call, almost nothing changed.
    assert!(v["kernel_time_delta_pct"].as_f64().unwrap() < -15.0);
    let per_call = v["per_call"]["delta_pct"].as_f64().unwrap();
    assert!(per_call.abs() < 5.0, "{per_call}");
}

#[test]
fn the_same_work_keeps_the_time_per_step_as_the_headline() {
    let a = common::fixture(FP32).display().to_string();
    let out = analyze(&["compare", &a, &a, "-f", "json", "--fail-if-slower", "0"]);
    assert_eq!(out.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["headline"]["basis"], "per_step");
    assert_eq!(v["work"]["differs"], false);
    assert_eq!(v["per_call"]["delta_ns"], 0.0);
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("warning"), "{stderr}");
}

#[test]
fn every_table_obeys_the_limit() {
    let (a, b) = (
        common::fixture(FP32).display().to_string(),
        common::fixture(BF16).display().to_string(),
    );
    let out = analyze(&["compare", &a, &b, "-f", "markdown", "--limit", "5"]);
    assert_eq!(out.status.code(), Some(0));
    let md = text(&out.stdout);
    let mut tables = 0;
    for section in md.split("### ").skip(1) {
        let title = section.lines().next().unwrap();
        let rows = section
            .lines()
            .filter(|l| l.starts_with('|'))
            .count()
            .saturating_sub(2);
        if title != "Summary" && !title.starts_with("Per call") {
            assert!(rows <= 5, "{title}: {rows} rows");
        }
        tables += 1;
    }
    assert!(tables >= 6, "{md}");
    assert!(md.contains("### Ranges in both traces"));
    let ranges = md.split("### Ranges in both traces").nth(1).unwrap();
    assert!(ranges.contains("more rows not shown"), "{ranges}");
}

#[test]
fn counts_that_graphs_hide_do_not_make_time_per_call_lead() {
    // The same step with graphs traced as wholes (one instance per graph execution) and node by
    // node: instance counts differ, but they do not measure the work.
    let graph = common::fixture("captures/torch_graphs_graph_small_l4_ctx128_train_fp32.sqlite.gz");
    let node = common::fixture("captures/torch_graphs_node_small_l4_ctx128_train_fp32.sqlite.gz");
    let (graph, node) = (graph.display().to_string(), node.display().to_string());
    let v = common::json_stdout(&analyze(&["compare", &node, &graph, "-f", "json"]));
    assert_eq!(v["work"]["differs"], true);
    assert_eq!(v["work"]["untraced_graph_executions"], 10);
    assert_eq!(v["headline"]["basis"], "per_step");
    let md = text(&analyze(&["compare", &node, &graph, "-f", "markdown"]).stdout);
    assert!(md.starts_with("### Summary"), "{md}");
    assert!(md.contains("so the counts do not measure the work"), "{md}");
}

#[test]
fn a_graph_capture_is_compared_per_step_with_its_gemm_share_unknown() {
    // The same training step with graphs traced as wholes and node by node: most of the graph
    // capture's step time is graphs whose kernels are unknown. Its GEMM share is n/a, not 0.0,
    // the totals are compared per measured step, and the gate passes on that figure.
    let graph = common::fixture("captures/torch_graphs_graph_small_l4_ctx128_train_fp32.sqlite.gz");
    let node = common::fixture("captures/torch_graphs_node_small_l4_ctx128_train_fp32.sqlite.gz");
    let (graph, node) = (graph.display().to_string(), node.display().to_string());
    for (a, b, graph_side) in [(&node, &graph, "b"), (&graph, &node, "a")] {
        let o = analyze(&["compare", a, b, "--fail-if-slower", "5"]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        assert!(text(&o.stderr).contains("check passed: GPU time per measured step"));
        let v = common::json_stdout(&analyze(&["compare", a, b, "-f", "json"]));
        assert_eq!(v["headline"]["basis"], "per_step");
        assert_eq!(v["unseen"][graph_side], true);
        assert_eq!(v["judgeable"], true);
        assert!(
            v["gemm_fraction"][graph_side].is_null(),
            "{}",
            v["gemm_fraction"]
        );
        let other = if graph_side == "a" { "b" } else { "a" };
        let seen = v["gemm_fraction"][other].as_f64().unwrap();
        assert!(seen > 0.5, "node capture: GEMM {seen}");
        for pass in v["passes"].as_array().unwrap() {
            if pass["name"] == "forward" || pass["name"] == "measured steps" {
                assert!(pass[graph_side]["gemm_fraction"].is_null(), "{pass}");
            }
        }
        let md = text(&analyze(&["compare", a, b, "-f", "markdown"]).stdout);
        let gemm_row = md
            .lines()
            .find(|l| l.starts_with("| GEMM % of kernel time"))
            .unwrap_or_else(|| panic!("{md}"));
        assert!(gemm_row.contains("| n/a |"), "{gemm_row}");
        assert!(
            md.contains("ran 10 CUDA graph executions without per-kernel detail"),
            "{md}"
        );
        assert!(md.contains("Totals are compared per measured step"), "{md}");
    }
}
