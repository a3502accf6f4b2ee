//! `analyze compare`: run the real binary on pairs of traces and check its numbers against the
//! official `nsys stats` CSVs of the same files and against SQL on the exports.

use crate::common;

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

const FP32: &str = "nsys/torch_small_ctx128_train_fp32.sqlite.gz";
const BF16: &str = "nsys/torch_small_ctx256_train_bf16.sqlite.gz";
const KINETO: &str = "kineto/kineto_small_ctx128_train_fp32.pt.trace.json.gz";

fn analyze(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_analyze"))
        .args(args)
        .output()
        .expect("the analyze binary runs")
}

fn path(rel: &str) -> String {
    common::fixture(rel).display().to_string()
}

fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).expect("compare -f json prints JSON")
}

/// The JSON of a run that succeeded (exit status 0).
fn json_of_success(out: &Output) -> Value {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    json_of(out)
}

/// Rows of an `nsys stats --format csv` file as (column -> value) maps.
fn stats_csv(name: &str) -> Vec<std::collections::HashMap<String, String>> {
    let text = std::fs::read_to_string(common::fixture(&format!("nsys/stats/{name}.csv"))).unwrap();
    let mut lines = text.lines().filter(|l| !l.is_empty());
    let header = split_csv(lines.next().unwrap());
    lines
        .map(|l| header.iter().cloned().zip(split_csv(l)).collect())
        .collect()
}

fn split_csv(line: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                chars.next();
                out.last_mut().unwrap().push('"');
            }
            '"' => quoted = !quoted,
            ',' if !quoted => out.push(String::new()),
            c => out.last_mut().unwrap().push(c),
        }
    }
    out
}

fn int(row: &std::collections::HashMap<String, String>, col: &str) -> i64 {
    row[col].parse().unwrap()
}

/// (total time, instances) of the kernel-summary rows whose name satisfies `pick`.
fn kern_sum(file: &str, pick: impl Fn(&str) -> bool) -> (i64, i64) {
    stats_csv(&format!("{file}_cuda_gpu_kern_sum"))
        .iter()
        .filter(|r| pick(&r["Name"]))
        .fold((0, 0), |(t, n), r| {
            (t + int(r, "Total Time (ns)"), n + int(r, "Instances"))
        })
}

fn find<'a>(rows: &'a Value, name: &str) -> &'a Value {
    rows.as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("no row {name}"))
}

#[test]
fn compare_of_an_export_with_itself_reports_no_change() {
    let a = path(FP32);
    let out = analyze(&["compare", &a, &a, "-f", "json", "--fail-if-slower", "0"]);
    let v = json_of_success(&out);
    let (total, instances) = kern_sum("torch_small_ctx128_train_fp32", |_| true);
    assert_eq!(v["a"]["kernel_time"], total);
    assert_eq!(v["b"]["kernel_time"], total);
    assert_eq!(v["a"]["kernel_instances"], instances);
    assert_eq!(v["kernel_time_delta_ns"], 0);
    let kernels = v["kernels"].as_array().unwrap();
    assert_eq!(kernels.len(), 61);
    assert!(kernels
        .iter()
        .all(|k| k["time_delta_ns"] == 0 && k["status"] == "both"));
    assert!(v["phases"]
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p["time_delta_ns"] == 0));
    let passes = v["passes"].as_array().unwrap();
    assert_eq!(
        passes.len(),
        4,
        "forward, backward, optimizer, measured steps"
    );
    assert!(passes
        .iter()
        .all(|p| p["kernel_delta_ns_per_step"] == 0.0 && p["gemm_delta_points"] == 0.0));
    assert_eq!(v["gemm_fraction"]["delta_points"], 0.0);
    let classes = v["classes"].as_array().unwrap();
    assert!(classes.len() > 1, "kernels are classified");
    assert!(classes.iter().all(|c| c["time_delta_ns"] == 0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("check passed"));
}

fn python3() -> bool {
    Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn kernels_scaled_by_1_1_trip_fail_if_slower_5() {
    if !python3() {
        eprintln!(
            "skipped: python3 is not available to run scripts/bench/scale_kernel_durations.py"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let input = common::fixture(FP32);
    let before = std::fs::read(&input).unwrap();
    let scaled = dir.path().join("scaled.sqlite");
    let made = Command::new("python3")
        .arg(common::root().join("scripts/bench/scale_kernel_durations.py"))
        .arg(&input)
        .arg(&scaled)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    assert_eq!(
        std::fs::read(&input).unwrap(),
        before,
        "the input is untouched"
    );

    // Independent figures from the scaled copy.
    let conn = rusqlite::Connection::open(&scaled).unwrap();
    let scaled_total: i64 = conn
        .query_row(
            "SELECT SUM(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let (total, _) = kern_sum("torch_small_ctx128_train_fp32", |_| true);
    let rise = (scaled_total - total) as f64 / total as f64 * 100.0;
    assert!((rise - 10.0).abs() < 0.01, "{rise}");
    // The kernel with the largest total time has the largest rise.
    let top = stats_csv("torch_small_ctx128_train_fp32_cuda_gpu_kern_sum")[0]["Name"].clone();

    let a = input.display().to_string();
    let b = scaled.display().to_string();
    let out = analyze(&["compare", &a, &b, "--fail-if-slower", "5", "-f", "json"]);
    assert_eq!(out.status.code(), Some(1));
    let v = json_of(&out);
    assert_eq!(v["b"]["kernel_time"], scaled_total);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("check failed"), "{stderr}");
    assert!(stderr.contains("rose 10.00%"), "{stderr}");
    let first_named = stderr.lines().nth(2).unwrap();
    assert!(first_named.contains(&top[..90]), "{first_named}\n{top}");

    let loose = analyze(&["compare", &a, &b, "--fail-if-slower", "15"]);
    assert_eq!(loose.status.code(), Some(0));
}

#[test]
fn fp32_vs_bf16_lines_up_families_and_ranges() {
    let out = analyze(&["compare", &path(FP32), &path(BF16), "-f", "json"]);
    assert_eq!(out.status.code(), Some(0));
    let v = json_of(&out);
    let fp32 = "torch_small_ctx128_train_fp32";
    let bf16 = "torch_small_ctx256_train_bf16";

    // Totals are the sums of nsys's own kernel summaries.
    let (ta, na) = kern_sum(fp32, |_| true);
    let (tb, nb) = kern_sum(bf16, |_| true);
    assert_eq!(
        (
            v["a"]["kernel_time"].as_i64(),
            v["b"]["kernel_time"].as_i64()
        ),
        (Some(ta), Some(tb))
    );
    assert_eq!(v["kernel_time_delta_ns"], tb - ta);
    assert_eq!(
        (
            v["a"]["kernel_instances"].as_i64(),
            v["b"]["kernel_instances"].as_i64()
        ),
        (Some(na), Some(nb))
    );
    assert_eq!(v["a"]["distinct_kernels"], 61);
    assert_eq!(v["b"]["distinct_kernels"], 71);

    // Tile-size and split-K variants of one cuBLAS GEMM fold into one family.
    let families = &v["families"];
    let tn = find(families, "sm80_xmma_gemm_tn_n_execute_kernel__5x_cublas");
    let (t, n) = kern_sum(fp32, |name| {
        name.starts_with("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_")
    });
    assert_eq!(
        (tn["a"]["total_ns"].as_i64(), tn["a"]["instances"].as_i64()),
        (Some(t), Some(n))
    );
    assert_eq!(tn["status"], "only_a");
    let nnn = find(families, "nvjet_sm90_tst_NNN");
    let (t, n) = kern_sum(bf16, |name| {
        name.starts_with("nvjet_sm90_tst_") && name.ends_with("_NNN")
    });
    assert_eq!(
        (
            nnn["b"]["total_ns"].as_i64(),
            nnn["b"]["instances"].as_i64()
        ),
        (Some(t), Some(n))
    );
    assert!(n > 288, "several tile sizes folded: {n}");
    let cutlass = find(families, "cutlass_80_gemm_nn");
    let (t, n) = kern_sum(fp32, |name| {
        name.contains("cutlass_80_simt_sgemm_256x128_8x4_nn_align1")
    });
    assert_eq!(
        (
            cutlass["a"]["total_ns"].as_i64(),
            cutlass["a"]["instances"].as_i64()
        ),
        (Some(t), Some(n))
    );

    // Families of ordinary kernels are nsys's short names (`cuda_gpu_kern_sum:base`).
    let base = |file: &str, name: &str| {
        let rows = stats_csv(&format!("{file}_cuda_gpu_kern_sum_base"));
        let r = rows.iter().find(|r| r["Name"] == name).unwrap();
        (int(r, "Total Time (ns)"), int(r, "Instances"))
    };
    let ew = find(families, "elementwise_kernel");
    assert_eq!(ew["status"], "both");
    assert_eq!(
        (
            ew["a"]["total_ns"].as_i64().unwrap(),
            ew["a"]["instances"].as_i64().unwrap()
        ),
        base(fp32, "elementwise_kernel")
    );
    assert_eq!(
        (
            ew["b"]["total_ns"].as_i64().unwrap(),
            ew["b"]["instances"].as_i64().unwrap()
        ),
        base(bf16, "elementwise_kernel")
    );
    // Families are sorted by the size of their change.
    let impact: Vec<i64> = families
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["time_delta_ns"].as_i64().unwrap().abs())
        .collect();
    assert!(impact.windows(2).all(|w| w[0] >= w[1]));

    // Kernel classes: fp32's `sm80_xmma_gemm_*`/CUTLASS and bf16's `nvjet_*` GEMMs are different
    // families but one class. Its totals are nsys's own, summed over the GEMM kernels (named as
    // cuBLAS, cuBLASLt and CUTLASS name them).
    let is_gemm = |name: &str| {
        name.to_ascii_lowercase().contains("gemm")
            || name.starts_with("nvjet_")
            || name.contains("splitKreduce")
    };
    let gemm = find(&v["classes"], "gemm");
    assert_eq!(gemm["status"], "both");
    let (ga, gna) = kern_sum(fp32, is_gemm);
    let (gb, gnb) = kern_sum(bf16, is_gemm);
    assert_eq!(
        (
            gemm["a"]["total_ns"].as_i64(),
            gemm["a"]["instances"].as_i64()
        ),
        (Some(ga), Some(gna))
    );
    assert_eq!(
        (
            gemm["b"]["total_ns"].as_i64(),
            gemm["b"]["instances"].as_i64()
        ),
        (Some(gb), Some(gnb))
    );
    let class_total: i64 = v["classes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["time_delta_ns"].as_i64().unwrap())
        .sum();
    assert_eq!(class_total, tb - ta, "classes partition the kernels");
    // The GEMM fraction is that class's share of all kernel time.
    let g = &v["gemm_fraction"];
    assert!((g["a"].as_f64().unwrap() - ga as f64 / ta as f64).abs() < 1e-12);
    assert!((g["b"].as_f64().unwrap() - gb as f64 / tb as f64).abs() < 1e-12);
    let points = (gb as f64 / tb as f64 - ga as f64 / ta as f64) * 100.0;
    assert!((g["delta_points"].as_f64().unwrap() - points).abs() < 1e-9);

    // Ranges: totals and instances from `nsys stats -r nvtx_sum` of each file.
    let nvtx = |file: &str, range: &str| {
        let rows = stats_csv(&format!("{file}_nvtx_sum"));
        let r = rows.iter().find(|r| r["Range"] == range).unwrap();
        (int(r, "Total Time (ns)"), int(r, "Instances"))
    };
    let phases = &v["phases"];
    for range in [":forward", ":backward", ":optimizer", ":attention_softmax"] {
        let p = phases
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["range"] == range)
            .unwrap();
        let (ta, na) = nvtx(fp32, range);
        let (tb, nb) = nvtx(bf16, range);
        assert_eq!(p["a"]["total_ns"], ta, "{range}");
        assert_eq!(p["a"]["instances"], na, "{range}");
        assert_eq!(p["b"]["total_ns"], tb, "{range}");
        assert_eq!(p["b"]["instances"], nb, "{range}");
        assert_eq!(p["time_delta_ns"], tb - ta, "{range}");
    }
}

#[test]
fn markdown_and_table_outputs_are_readable() {
    let md = analyze(&[
        "compare",
        &path(FP32),
        &path(BF16),
        "-f",
        "markdown",
        "--limit",
        "5",
    ]);
    assert_eq!(md.status.code(), Some(0));
    let text = String::from_utf8(md.stdout).unwrap();
    for heading in [
        "### Summary",
        "### Kernel families",
        "### Kernel classes",
        "### Kernels",
        "### Ranges in both traces",
    ] {
        assert!(text.contains(heading), "{heading} missing");
    }
    assert!(text.contains("more rows not shown"));
    // Names are cut for people, never longer than 100 characters.
    let table = analyze(&["compare", &path(FP32), &path(BF16)]);
    let text = String::from_utf8(table.stdout).unwrap();
    assert!(text.contains("…"));
    let csv = analyze(&["compare", &path(FP32), &path(BF16), "-f", "csv"]);
    let text = String::from_utf8(csv.stdout).unwrap();
    assert!(!text.contains('…'), "CSV keeps whole names");
}

#[test]
fn kineto_and_nsys_traces_of_one_workload_line_up() {
    // Kineto's kernels all exist, under the same name, in the nsys export of the same workload.
    let out = analyze(&["compare", &path(FP32), &path(KINETO), "-f", "json"]);
    let v = json_of_success(&out);
    assert_eq!(v["b"]["format"], "kineto");
    assert_eq!(v["b"]["distinct_kernels"], 60);
    let only_b = v["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|k| k["status"] == "only_b")
        .count();
    assert_eq!(only_b, 0);
}

#[test]
fn a_snapshot_and_a_trace_are_refused_with_the_supported_pairs() {
    let dir = tempfile::tempdir().unwrap();
    let snapshot = dir.path().join("snap.pickle");
    // A pickle's protocol opcode: detected as a memory snapshot before it is read.
    std::fs::write(&snapshot, [0x80, 0x04, 0x4b, 0x01, 0x2e]).unwrap();
    let s = snapshot.display().to_string();
    let out = analyze(&["compare", &s, &path(FP32)]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(
        stderr.contains("memory snapshot") && stderr.contains("two memory snapshots"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(!Path::new(&s).with_extension("sqlite").exists());
}

/// `analyze memory -f json` of one snapshot.
fn memory_json(rel: &str) -> Value {
    let out = analyze(&["memory", &path(rel), "-f", "json"]);
    assert_eq!(out.status.code(), Some(0));
    json_of(&out)
}

#[test]
fn memory_pair_gives_the_difference_of_the_two_peaks() {
    const FP32_SNAP: &str = "memsnap/memsnap_small_ctx128_train_fp32.pickle.gz";
    const BF16_SNAP: &str = "memsnap/memsnap_small_ctx128_train_bf16.pickle.gz";
    let out = analyze(&["compare", &path(FP32_SNAP), &path(BF16_SNAP), "-f", "json"]);
    let v = json_of_success(&out);
    assert_eq!(v["kind"], "memory");
    let ma = memory_json(FP32_SNAP);
    let mb = memory_json(BF16_SNAP);
    let peak = |m: &Value, k: &str| m[k].as_i64().unwrap();
    assert_eq!(
        v["peak_allocated_delta_bytes"].as_i64().unwrap(),
        peak(&mb, "peak_allocated_bytes") - peak(&ma, "peak_allocated_bytes")
    );
    assert_eq!(
        v["peak_reserved_delta_bytes"].as_i64().unwrap(),
        peak(&mb, "peak_reserved_bytes") - peak(&ma, "peak_reserved_bytes")
    );
    assert_eq!(v["a"]["peak_allocated_bytes"], ma["peak_allocated_bytes"]);
    // Categories at the peak are those `analyze memory` lists, side by side.
    for (side, m) in [("a", &ma), ("b", &mb)] {
        for c in m["categories_at_peak"].as_array().unwrap() {
            let row = v["categories"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["category"] == c["category"])
                .unwrap();
            assert_eq!(row[side]["bytes"], c["bytes"], "{}", c["category"]);
        }
    }
    // Sites partition what is live at each peak, and are sorted by the size of the change.
    let sites = v["sites"].as_array().unwrap();
    for (side, m) in [("a", &ma), ("b", &mb)] {
        let held: i64 = sites
            .iter()
            .map(|s| s[side]["bytes"].as_i64().unwrap())
            .sum();
        assert_eq!(held, peak(m, "peak_allocated_bytes"), "{side}");
    }
    let impact: Vec<i64> = sites
        .iter()
        .map(|s| s["delta_bytes"].as_i64().unwrap().abs())
        .collect();
    assert!(impact.windows(2).all(|w| w[0] >= w[1]));

    // Readable: the table names the peak and the categories.
    let table = analyze(&["compare", &path(FP32_SNAP), &path(BF16_SNAP)]);
    let text = String::from_utf8(table.stdout).unwrap();
    assert!(text.contains("peak allocated"), "{text}");
    assert!(text.contains("optimizer state"), "{text}");
    // The kernel-time gate does not apply to snapshots.
    let gated = analyze(&[
        "compare",
        &path(FP32_SNAP),
        &path(BF16_SNAP),
        "--fail-if-slower",
        "5",
    ]);
    assert_eq!(gated.status.code(), Some(2));
}

/// `analyze profile -f json` of one export.
fn profile_json(rel: &str) -> Value {
    let out = analyze(&["profile", &path(rel), "-f", "json"]);
    assert_eq!(out.status.code(), Some(0));
    json_of(&out)
}

#[test]
fn passes_per_step_are_those_of_the_two_profiles() {
    let out = analyze(&["compare", &path(FP32), &path(BF16), "-f", "json"]);
    let v = json_of(&out);
    let (pa, pb) = (profile_json(FP32), profile_json(BF16));
    let passes = v["passes"].as_array().unwrap();
    let names: Vec<&str> = passes.iter().map(|p| p["name"].as_str().unwrap()).collect();
    for name in ["forward", "backward", "optimizer", "measured steps"] {
        assert!(names.contains(&name), "{name} in {names:?}");
    }
    let phase = |p: &Value, name: &str| -> Value {
        if name == "measured steps" {
            return p["step"].clone();
        }
        p["phases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == name)
            .unwrap()
            .clone()
    };
    for row in passes {
        let name = row["name"].as_str().unwrap();
        let (fa, fb) = (phase(&pa, name), phase(&pb, name));
        for key in ["kernel_ns_per_step", "wall_ns_per_step", "gemm_fraction"] {
            assert_eq!(row["a"][key], fa[key], "{name} {key}");
            assert_eq!(row["b"][key], fb[key], "{name} {key}");
        }
        let d =
            fb["kernel_ns_per_step"].as_f64().unwrap() - fa["kernel_ns_per_step"].as_f64().unwrap();
        assert!((row["kernel_delta_ns_per_step"].as_f64().unwrap() - d).abs() < 1e-6);
    }
    // The training step of the small model: 18.983 ms of kernels per step in fp32 (see
    // `analyze profile`), less in bf16.
    let step = passes
        .iter()
        .find(|p| p["name"] == "measured steps")
        .unwrap();
    assert!(step["kernel_delta_ns_per_step"].as_f64().unwrap() < 0.0);

    // Markdown: readable per-class deltas with GEMM lined up, and the passes.
    let md = analyze(&["compare", &path(FP32), &path(BF16), "-f", "markdown"]);
    let text = String::from_utf8(md.stdout).unwrap();
    assert!(text.contains("### Passes per step"), "{text}");
    assert!(text.contains("| GEMM % of kernel time |"), "{text}");
    let classes = text
        .split("### Kernel classes")
        .nth(1)
        .unwrap()
        .split("###")
        .next()
        .unwrap();
    let gemm = classes.lines().find(|l| l.ends_with("| gemm |")).unwrap();
    assert!(gemm.contains("| both |"), "{gemm}");
    // Template arguments survive GitHub's HTML filter: names are code spans, never entities.
    assert!(!text.contains("&lt;"), "no entities");
    assert!(
        text.lines()
            .filter(|l| l.contains("elementwise_kernel<"))
            .all(|l| l.contains("| `")),
        "names in code spans"
    );
}

#[test]
fn bad_threshold_is_a_usage_error() {
    let a = path(FP32);
    let out = analyze(&["compare", &a, &a, "--fail-if-slower", "-3"]);
    assert_eq!(out.status.code(), Some(2));
}
