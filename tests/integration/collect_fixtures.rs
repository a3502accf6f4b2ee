//! What `collect` recorded itself on the H200 (`fixtures/collect/`, see `fixtures/README.md`),
//! read by the `analyze` binary: the `--trace` file gives the reports `nsys stats` printed for
//! it, our kernels as often per step as the model launches them, and the same kernels, counts and
//! phases as an Nsight Systems capture of the same run; the `--memory-snapshot` file gives the
//! peak the caching allocator counted (its `RUN_METADATA` and results JSON) and a timeline with
//! the three phases.

use crate::common;

use std::collections::BTreeMap;
use std::io::Read;
use std::process::Command;

use serde_json::Value;

const TRACE: &str = "collect/collect_small_ctx128_train_fp32.sqlite.gz";
const NSYS: &str = "collect/nsys_collect_small_ctx128_train_fp32.sqlite.gz";
const SNAPSHOT: &str = "collect/collect_small_ctx128_train_fp32.pickle.gz";
const RESULTS: &str = "collect/collect_small_ctx128_train_fp32.json.gz";
/// The small model's blocks.
const LAYERS: u64 = 12;
/// Steps in the trace: 2 warm-up and 2 timed.
const STEPS: u64 = 4;

fn analyze(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_analyze"))
        .args(args)
        .output()
        .expect("analyze runs");
    assert!(
        out.status.success(),
        "analyze {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

fn json(args: &[&str]) -> Value {
    serde_json::from_str(&analyze(args)).expect("JSON output")
}

fn path(rel: &str) -> String {
    common::fixture(rel).display().to_string()
}

/// Our kernels per training step and the phase that launches them, from `Model::step` (GEMMs
/// are cuBLAS's, and how many kernels each takes is its heuristics' choice).
fn our_kernels() -> Vec<(&'static str, &'static str, u64)> {
    let l = LAYERS;
    vec![
        ("forward", "embedding_fwd", 1),
        ("forward", "rmsnorm_fwd_f32", 2 * l + 1),
        ("forward", "rope_fwd_f32", l),
        ("forward", "softmax_causal_fwd_f32", l),
        ("forward", "heads_to_tokens_f32", l),
        ("forward", "swiglu_fwd_f32", l),
        ("backward", "cross_entropy_f32", 1),
        ("backward", "mean_f32", 1),
        ("backward", "rmsnorm_bwd", 2 * l + 1),
        ("backward", "rmsnorm_dw", 2 * l + 1),
        ("backward", "swiglu_bwd_f32", l),
        ("backward", "tokens_to_heads_f32", l),
        ("backward", "softmax_causal_bwd_f32", l),
        ("backward", "rope_bwd_f32", l),
        ("backward", "embedding_bwd", 1),
        ("optimizer", "adamw_x4", 1),
    ]
}

/// `cuda_gpu_kern_sum` as name -> (instances, total ns).
fn kernel_sum(file: &str) -> BTreeMap<String, (u64, u64)> {
    let v = json(&["stats", "-r", "cuda_gpu_kern_sum", "-f", "json", file]);
    v.as_array()
        .expect("rows")
        .iter()
        .map(|r| {
            (
                r["Name"].as_str().expect("name").to_owned(),
                (
                    r["Instances"].as_u64().expect("instances"),
                    r["Total Time (ns)"].as_u64().expect("total"),
                ),
            )
        })
        .collect()
}

#[test]
fn stats_reports_are_what_nsys_stats_printed_for_the_trace() {
    for report in ["cuda_gpu_kern_sum", "nvtx_sum", "nvtx_kern_sum"] {
        let got = analyze(&["stats", "-r", report, "-f", "csv", &path(TRACE)]);
        let want = std::fs::read_to_string(common::fixture(&format!(
            "collect/stats/collect_small_ctx128_train_fp32_{report}.csv"
        )))
        .expect("golden CSV");
        assert_eq!(got, want, "{report}");
    }
}

#[test]
fn our_kernels_run_as_often_as_the_model_launches_them() {
    let sum = kernel_sum(&path(TRACE));
    for (_, name, per_step) in our_kernels() {
        assert_eq!(sum.get(name).map(|s| s.0), Some(per_step * STEPS), "{name}");
    }
    // Every phase of both timed steps, with our kernels per step as the model launches them.
    let p = json(&["profile", "-f", "json", "--top", "100", &path(TRACE)]);
    let phases = p["phases"].as_array().expect("phases");
    let names: Vec<&str> = phases.iter().map(|x| x["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["forward", "backward", "optimizer"]);
    for phase in phases {
        let pname = phase["name"].as_str().unwrap();
        assert_eq!(phase["steps"], 2, "{pname}");
        let listed: BTreeMap<&str, f64> = phase["top_non_gemm"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| {
                (
                    k["name"].as_str().unwrap(),
                    k["instances_per_step"].as_f64().unwrap(),
                )
            })
            .collect();
        let ours: Vec<(&str, u64)> = our_kernels()
            .into_iter()
            .filter(|(ph, _, _)| *ph == pname)
            .map(|(_, n, c)| (n, c))
            .collect();
        for (name, per_step) in &ours {
            assert_eq!(
                listed.get(name),
                Some(&(*per_step as f64)),
                "{pname}: {name}"
            );
        }
        // Nothing else but GEMMs (cuBLAS) in the phase.
        assert_eq!(listed.len(), ours.len(), "{pname}: {listed:?}");
    }
    assert_eq!(phases[2]["kernels"], 2, "one AdamW kernel per step");
}

#[test]
fn the_trace_and_an_nsys_capture_of_the_same_run_agree() {
    let ours = kernel_sum(&path(TRACE));
    let nsys = kernel_sum(&path(NSYS));
    let counts = |m: &BTreeMap<String, (u64, u64)>| -> BTreeMap<String, u64> {
        m.iter().map(|(k, v)| (k.clone(), v.0)).collect()
    };
    assert_eq!(counts(&ours), counts(&nsys), "kernel names and instances");
    let total = |m: &BTreeMap<String, (u64, u64)>| m.values().map(|v| v.1).sum::<u64>() as f64;
    let ratio = total(&ours) / total(&nsys);
    assert!(
        (ratio - 1.0).abs() < 0.05,
        "total kernel time ratio {ratio}"
    );

    let po = json(&["profile", "-f", "json", &path(TRACE)]);
    let pn = json(&["profile", "-f", "json", &path(NSYS)]);
    for (a, b) in po["phases"]
        .as_array()
        .unwrap()
        .iter()
        .zip(pn["phases"].as_array().unwrap())
    {
        for k in ["name", "steps", "ranges", "kernels", "all_ranges"] {
            assert_eq!(a[k], b[k], "{} {k}", a["name"]);
        }
        assert_eq!(a["top_kernel"]["name"], b["top_kernel"]["name"]);
        assert_eq!(a["top_kernel"]["instances"], b["top_kernel"]["instances"]);
    }
    assert_eq!(
        po["phases"].as_array().unwrap().len(),
        pn["phases"].as_array().unwrap().len()
    );
    assert_eq!(po["attention"]["ranges"], pn["attention"]["ranges"]);
}

#[test]
fn the_snapshot_peak_is_the_allocators() {
    let m = json(&["memory", "-f", "json", &path(SNAPSHOT)]);
    let peak = m["peak_allocated_bytes"].as_u64().expect("peak");
    // The same run's trace carries the allocator's counter in RUN_METADATA...
    let trace = analyze::formats::load_trace(&common::fixture(TRACE)).expect("trace loads");
    let meta: u64 = trace.source.run["peak_allocated_bytes"]
        .parse()
        .expect("a number");
    assert_eq!(peak, meta);
    // ...and its results file beside it.
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(common::fixture(RESULTS)).unwrap())
        .read_to_string(&mut text)
        .unwrap();
    let results: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(results["results"][0]["memory"]["peak_bytes"], peak);
    assert_eq!(
        results["results"][0]["memory"]["allocator"]["max_allocated_bytes"],
        peak
    );
    // One training step, phases from collect's frames.
    let phases: Vec<&str> = m["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["phase"].as_str().unwrap())
        .collect();
    assert_eq!(phases, ["forward", "backward"]);
    assert_eq!(m["checks"]["unmatched_frees"], 0);
    assert_eq!(m["checks"]["end_mismatch_bytes"], 0);

    // The timeline shades all three phases: the optimizer, which allocates nothing, from its
    // annotations.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    analyze(&["memory", "--plot", &d, "--svg", &path(SNAPSHOT)]);
    let svg = std::fs::read_to_string(
        dir.path()
            .join("collect_small_ctx128_train_fp32.timeline.svg"),
    )
    .expect("timeline SVG");
    // Each shaded phase is labelled, and listed in the legend.
    for phase in ["forward", "backward", "optimizer"] {
        let labels = svg.lines().filter(|l| l.trim() == phase).count();
        assert!(labels >= 1, "{phase} in the timeline");
    }
}
