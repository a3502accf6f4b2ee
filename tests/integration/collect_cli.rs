//! The `collect` command line where no GPU is needed: bad arguments; on a machine without a CUDA
//! device, `collect bench` and `collect precision` saying so in one line and exiting 2; and
//! `collect precision --cpu`, which needs none.

use collect::precision::accumulate::PRINTED_BY_PYTORCH;

use crate::common;
use crate::run_collect::collect;

#[test]
#[cfg_attr(not(no_gpu), ignore = "checks the answer of a machine without a GPU")]
fn bench_without_a_device_says_so_and_exits_2() {
    if let Ok(n) = collect::gpu::device::probe() {
        eprintln!("skipped: this machine has {n} CUDA device(s)");
        return;
    }
    let out = collect(&["bench", "--size", "small", "--steps", "1"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("error: no CUDA device found ("),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn bad_values_are_refused_before_any_gpu_work() {
    let out = collect(&["bench", "--mode", "sideways"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("unknown mode `sideways`"), "{stderr}");

    let out = collect(&["bench", "--size", "tiny"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown size `tiny`"));

    // Heads that do not divide d_model.
    let out = collect(&[
        "plan",
        "--d-model",
        "64",
        "--d-ff",
        "128",
        "--layers",
        "1",
        "--heads",
        "5",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a multiple of heads"));

    // A custom width needs all four dimensions (clap's usage error, also exit 2).
    let out = collect(&["plan", "--d-model", "64"]);
    assert_eq!(out.status.code(), Some(2));

    for command in ["bench", "plan"] {
        let out = collect(&[command, "--checkpoint", "sometimes"]);
        assert_eq!(out.status.code(), Some(2), "{command}");
        assert!(
            String::from_utf8_lossy(&out.stderr)
                .contains("unknown checkpoint setting `sometimes` (expected auto, on or off)"),
            "{command}"
        );
    }
    let out = collect(&["plan", "--device-memory", "lots"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("`lots` is not a memory size"));
}

#[test]
#[cfg_attr(not(no_gpu), ignore = "checks the answer of a machine without a GPU")]
fn precision_without_a_device_says_so_and_exits_2() {
    if let Ok(n) = collect::gpu::device::probe() {
        eprintln!("skipped: this machine has {n} CUDA device(s)");
        return;
    }
    for experiment in ["accumulate", "toy", "layernorm", "all"] {
        let out = collect(&["precision", experiment, "--format", "json"]);
        assert_eq!(out.status.code(), Some(2), "{experiment}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.lines().count(), 1, "{experiment}: {stderr}");
        assert!(
            stderr.starts_with("error: no CUDA device found ("),
            "{stderr}"
        );
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn precision_on_the_cpu_prints_pytorchs_sums_and_dtypes() {
    let out = collect(&["precision", "all", "--cpu", "--format", "json"]);
    let doc = common::json_stdout(&out);
    assert_eq!(doc["device"], "CPU emulation");
    let rows = doc["rows"].as_array().expect("rows");
    let printed: Vec<&str> = rows
        .iter()
        .filter(|r| r["experiment"] == "accumulate")
        .map(|r| r["printed"].as_str().expect("printed"))
        .collect();
    assert_eq!(printed, PRINTED_BY_PYTORCH);
    assert!(rows
        .iter()
        .filter(|r| r["experiment"] == "toy")
        .all(|r| r["value"] == r["torch"]));

    let out = collect(&["precision", "layernorm", "--cpu", "--format", "markdown"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("| N(0,16^2) | fp16 |"), "{text}");
    assert!(!text.contains("Accumulation"));
}

/// The experiments as the H200 ran them (`fixtures/collect/precision_h200.json`, the output of
/// `collect precision all --format json` there) are row for row what the CPU emulation of the
/// same kernels gives, PyTorch's column included.
#[test]
fn the_h200s_precision_rows_equal_the_cpu_emulation() {
    let out = collect(&["precision", "all", "--cpu", "--format", "json"]);
    let cpu = common::json_stdout(&out);
    let path = crate::common::fixture("collect/precision_h200.json");
    let gpu: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("the fixture")).expect("JSON");
    assert_eq!(gpu["device"], "NVIDIA H200");
    let (cpu_rows, gpu_rows) = (
        cpu["rows"].as_array().unwrap(),
        gpu["rows"].as_array().unwrap(),
    );
    assert_eq!(gpu_rows.len(), 79);
    assert_eq!(cpu_rows, gpu_rows);
    assert_eq!(gpu["torch_reference"], cpu["torch_reference"]);
}
