//! Model FLOP utilisation of a `collect` capture: `analyze profile` reads the FLOPs per step
//! from the trace's run metadata and rates the measured steps against the GPU's bf16 peak; the
//! same run's results file holds `collect bench`'s own count and MFU, from its host-timed steps.

use analyze::formats::bench_results::ResultsFile;
use serde_json::Value;

use crate::common;

const TRACE: &str = "collect/collect_small_ctx128_train_bf16.sqlite.gz";
const RESULTS: &str = "collect/collect_small_ctx128_train_bf16.json";

fn mfu(extra: &[&str]) -> Value {
    let path = common::fixture(TRACE).display().to_string();
    let mut args = vec!["profile", &path, "-f", "json"];
    args.extend(extra);
    let mut v = common::json_stdout(&common::analyze(&args));
    v["mfu"].take()
}

#[test]
fn mfu_of_a_collect_capture_is_collects_own() {
    let text = std::fs::read_to_string(common::fixture(RESULTS)).unwrap();
    let results: ResultsFile = serde_json::from_str(&text).unwrap();
    let run = &results.results[0];
    let m = mfu(&[]);
    assert_eq!(m["model_flops_from"], "run metadata");
    assert_eq!(
        m["model_flops_per_step"].as_f64(),
        run.flops_per_step.map(|f| f as f64)
    );
    // Both from the same steps: collect times them on the host, the profile by their ranges.
    let (ours, theirs) = (m["mfu"].as_f64().unwrap(), run.mfu.unwrap());
    assert!((ours - theirs).abs() <= theirs * 0.01, "{ours} vs {theirs}");
    assert_eq!(m["peak_tflops"], 989.5, "the H100's dense bf16 peak");
    let device = results.device.and_then(|d| d.name).unwrap();
    assert!(device.contains("H100"), "{device}");
}

#[test]
fn mfu_takes_the_models_flops_and_the_peak_from_the_options() {
    let base = mfu(&[]);
    let m = mfu(&["--model-flops-per-step", "1e12", "--peak-tflops", "500"]);
    assert_eq!(m["model_flops_from"], "option");
    assert_eq!(m["peak"], "given");
    let step_ns = base["step_ns"].as_f64().unwrap();
    assert_eq!(m["step_ns"].as_f64().unwrap(), step_ns);
    let expected = 1e12 / (step_ns * 1e-9) / 500e12;
    assert!((m["mfu"].as_f64().unwrap() - expected).abs() < 1e-12);
    // The hardware FLOPs stay the run's.
    assert_eq!(
        m["hardware_flops_per_step"],
        base["hardware_flops_per_step"]
    );
}
