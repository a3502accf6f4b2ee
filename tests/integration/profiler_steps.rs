//! PyTorch profiler schedules: `torch.profiler` with `schedule(wait=1, warmup=1, active=2)` marks
//! each active step as `ProfilerStep#N` twice, a CPU `user_annotation` and a
//! `gpu_user_annotation`. With default options the measured steps are the CPU ones, each counted
//! once, and each holds the kernels launched inside it, counted here straight from the JSON.

use crate::common;

use std::collections::HashMap;

use analyze::formats;
use analyze::kernels::class::Classifier;
use analyze::profile::{self, Profile, ProfileOptions, PROFILER_STEPS};
use regex::Regex;
use serde_json::Value;

const SCHEDULE: &str = "kineto/kineto_schedule_small_l4_ctx128_train_fp32.pt.trace.json.gz";

fn run(opts: &ProfileOptions) -> Profile {
    let trace = formats::load_trace(&common::fixture(SCHEDULE)).unwrap();
    profile::profile(&trace, &Classifier::builtin(), opts)
}

fn ns(v: &Value) -> i64 {
    (v.as_f64().unwrap() * 1000.0).round() as i64
}

/// Per CPU `ProfilerStep#N` range, the kernels whose launching call (same correlation id) starts
/// inside it, read from the JSON with serde_json alone.
fn kernels_per_step() -> Vec<(String, usize)> {
    let bytes = std::fs::read(common::fixture(SCHEDULE)).unwrap();
    let mut json = String::new();
    use std::io::Read;
    flate2::read::GzDecoder::new(&bytes[..])
        .read_to_string(&mut json)
        .unwrap();
    let v: Value = serde_json::from_str(&json).unwrap();
    let events = v["traceEvents"].as_array().unwrap();
    let cat = |e: &Value| e["cat"].as_str().unwrap_or("").to_owned();
    // Launch calls: the runtime's (`cudaLaunchKernel`, `cudaLaunchKernelExC`) and the driver's
    // (`cuLaunchKernel`, which launches some library kernels).
    let launches: HashMap<u64, i64> = events
        .iter()
        .filter(|e| cat(e) == "cuda_runtime" || cat(e) == "cuda_driver")
        .filter_map(|e| Some((e["args"]["correlation"].as_u64()?, ns(&e["ts"]))))
        .collect();
    let mut steps: Vec<(String, i64, i64)> = events
        .iter()
        .filter(|e| cat(e) == "user_annotation")
        .filter(|e| e["name"].as_str().unwrap().starts_with("ProfilerStep#"))
        .map(|e| {
            let start = ns(&e["ts"]);
            (
                e["name"].as_str().unwrap().to_owned(),
                start,
                start + ns(&e["dur"]),
            )
        })
        .collect();
    steps.sort_by_key(|s| s.1);
    steps
        .iter()
        .map(|(name, start, end)| {
            let n = events
                .iter()
                .filter(|e| cat(e) == "kernel")
                .filter_map(|e| launches.get(&e["args"]["correlation"].as_u64()?))
                .filter(|&&t| t >= *start && t <= *end)
                .count();
            (name.clone(), n)
        })
        .collect()
}

#[test]
fn default_options_count_each_profiler_step_once_with_its_kernels() {
    let want = kernels_per_step();
    println!("kernels launched inside each ProfilerStep#N: {want:?}");
    assert_eq!(want.len(), 2, "active=2");
    let p = run(&ProfileOptions::default());
    assert_eq!(p.step_pattern, PROFILER_STEPS);
    assert_eq!(p.measured_steps, want.len());
    let step = p.step.as_ref().unwrap();
    assert_eq!(step.steps, want.len());
    assert_eq!(
        step.ranges,
        want.len(),
        "the GPU-side annotations are not steps"
    );
    let got: Vec<(String, usize)> = p
        .step_breakdown
        .iter()
        .map(|s| (s.step.clone(), s.kernels))
        .collect();
    assert_eq!(got, want);
    let total: usize = want.iter().map(|w| w.1).sum();
    assert_eq!(step.kernels, total);
    assert_eq!(
        step.kernel_ns_per_step.unwrap(),
        step.kernel_ns as f64 / want.len() as f64
    );
}

#[test]
fn an_explicit_profiler_step_pattern_counts_each_step_once_too() {
    let opts = ProfileOptions {
        steps: Regex::new(r"ProfilerStep#\d+").unwrap(),
        ..ProfileOptions::default()
    };
    let p = run(&opts);
    assert_eq!(p.measured_steps, 2);
    let step = p.step.as_ref().unwrap();
    assert_eq!((step.steps, step.ranges), (2, 2));
    // Wall time is the CPU range's, not a mean of the CPU and GPU spans.
    let want = kernels_per_step();
    assert_eq!(step.kernels, want.iter().map(|w| w.1).sum::<usize>());
    let trace = formats::load_trace(&common::fixture(SCHEDULE)).unwrap();
    let cpu_wall: i64 = trace
        .ranges
        .iter()
        .filter(|r| trace.name(r.name).starts_with("ProfilerStep#") && r.domain.is_none())
        .map(|r| r.duration().0)
        .sum();
    assert_eq!(step.wall_ns_per_step, Some(cpu_wall as f64 / 2.0));
}

/// Kernels whose launch call the trace lacks (a flow with only its end, as when the call fell
/// before the profiler's window): the launch calls of the last step's first 40 kernels are cut
/// from the JSON. Each such kernel counts in the step that holds its start in time, a note gives
/// their count and time, and the steps' kernel time is what it was with the calls.
#[test]
fn kernels_without_a_launch_call_count_in_the_step_that_holds_them() {
    let bytes = std::fs::read(common::fixture(SCHEDULE)).unwrap();
    let mut json = String::new();
    use std::io::Read;
    flate2::read::GzDecoder::new(&bytes[..])
        .read_to_string(&mut json)
        .unwrap();
    let mut v: Value = serde_json::from_str(&json).unwrap();
    let events = v["traceEvents"].as_array().unwrap().clone();
    let last_step = events
        .iter()
        .filter(|e| {
            e["cat"] == "user_annotation"
                && e["name"]
                    .as_str()
                    .unwrap_or("")
                    .starts_with("ProfilerStep#")
        })
        .max_by_key(|e| ns(&e["ts"]))
        .unwrap()
        .clone();
    let (from, to) = (
        ns(&last_step["ts"]),
        ns(&last_step["ts"]) + ns(&last_step["dur"]),
    );
    let mut cut: Vec<(u64, i64)> = events
        .iter()
        .filter(|e| e["cat"] == "kernel" && (from..to).contains(&ns(&e["ts"])))
        .map(|e| (e["args"]["correlation"].as_u64().unwrap(), ns(&e["dur"])))
        .collect();
    cut.sort_unstable();
    cut.truncate(40);
    assert_eq!(cut.len(), 40);
    let gone: std::collections::HashSet<u64> = cut.iter().map(|c| c.0).collect();
    let kept: Vec<Value> = events
        .into_iter()
        .filter(|e| {
            let runtime = matches!(e["cat"].as_str(), Some("cuda_runtime" | "cuda_driver"));
            !(runtime
                && e["args"]["correlation"]
                    .as_u64()
                    .is_some_and(|c| gone.contains(&c)))
        })
        .collect();
    v["traceEvents"] = Value::Array(kept);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cut.json");
    std::fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
    let opts = ProfileOptions::default();
    let whole = run(&opts);
    let trace = formats::load_trace(&path).unwrap();
    let p = profile::profile(&trace, &Classifier::builtin(), &opts);
    let ms: i64 = cut.iter().map(|c| c.1).sum();
    let note = format!(
        "40 kernels ({:.3} ms) have no launch call in the trace (a Kineto flow with only its end, a call before the capture began): each counts in the step that holds its start in time",
        ms as f64 / 1e6
    );
    assert!(p.notes.contains(&note), "{:?}", p.notes);
    let (a, b) = (whole.step.as_ref().unwrap(), p.step.as_ref().unwrap());
    assert_eq!((a.kernels, a.kernel_ns), (b.kernels, b.kernel_ns));
    assert!(!whole.notes.iter().any(|n| n.contains("no launch call")));
}
