//! Model FLOP utilisation and the GEMM roofline of `collect` captures. `analyze profile` reads
//! the FLOPs per step from the trace's run metadata and rates the measured steps against the
//! GPU's bf16 peak; the same run's results file holds `collect bench`'s own count and MFU, from
//! its host-timed steps. With `--operator-ranges`, the GEMMs' operators carry their shapes.

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

/// The GEMM families of a `collect` capture made with `--operator-ranges`: their FLOPs are those
/// of the model's shapes, counted by hand from the run's dimensions, and their achieved TFLOP/s
/// is within 3% of those FLOPs over the GEMM kernels' time in the measured steps, summed with
/// plain SQL (kernels by name, each in the step whose range holds its launch call).
#[test]
fn gemm_roofline_of_a_collect_capture_matches_the_models_shapes() {
    const OPS: &str = "collect/collect_small_ctx128_train_bf16_ops.sqlite.gz";
    let dir = tempfile::tempdir().unwrap();
    let path = common::unpacked(OPS, dir.path(), "ops.sqlite");
    let db = rusqlite::Connection::open(&path).unwrap();
    let meta = |key: &str| -> u64 {
        db.query_row(
            "SELECT value FROM RUN_METADATA WHERE name = ?1",
            [key],
            |r| r.get::<_, String>(0),
        )
        .unwrap()
        .parse()
        .unwrap()
    };
    let (d, ff, layers, heads) = (meta("d_model"), meta("d_ff"), meta("layers"), meta("heads"));
    let (vocab, ctx, batch, steps) = (meta("vocab"), meta("ctx"), meta("batch"), meta("steps"));
    let tokens = batch * ctx;
    // Forward, per step: each block's QKV (d → 3d), output (d → d), W1 and W3 (d → ff) and W2
    // (ff → d), and the LM head (d → vocab), 2 FLOPs per multiply-add; the backward's two
    // products per linear (weight and input gradients) double it.
    let linear = 3 * 2 * tokens * (layers * (4 * d * d + 3 * d * ff) + d * vocab);
    // Attention's batched products, QKᵀ and PV forward and four backward, each 2·B·H·L²·E.
    let attention = 6 * 2 * batch * heads * ctx * ctx * (d / heads) * layers;

    let profile = common::json_stdout(&common::analyze(&[
        "profile",
        path.to_str().unwrap(),
        "--by",
        "op",
        "-f",
        "json",
    ]));
    let op = |name: &str| -> (u64, u64) {
        let o = profile["operators"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["name"] == name)
            .unwrap_or_else(|| panic!("operator {name}"));
        (o["flops"].as_u64().unwrap(), o["gpu_ns"].as_u64().unwrap())
    };
    let (mm, addmm, bmm) = (op("aten::mm"), op("aten::addmm"), op("aten::bmm"));
    assert_eq!(mm.0 + addmm.0, linear * steps);
    assert_eq!(bmm.0, attention * steps);

    let gemm_ns: u64 = db
        .query_row(
            "SELECT sum(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k
               JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId
               JOIN StringIds s ON s.id = k.demangledName
             WHERE (s.value LIKE '%nvjet%' OR s.value LIKE '%gemm%' OR s.value LIKE '%xmma%')
               AND EXISTS (SELECT 1 FROM NVTX_EVENTS n WHERE n.text GLOB 'step_[0-9]*'
                           AND r.start >= n.start AND r.start < n.end)",
            [],
            |r| r.get::<_, i64>(0),
        )
        .unwrap() as u64;
    let by_hand = ((linear + attention) * steps) as f64 / gemm_ns as f64;
    let ours = (mm.0 + addmm.0 + bmm.0) as f64 / (mm.1 + addmm.1 + bmm.1) as f64;
    assert!(
        (ours - by_hand).abs() <= 0.03 * by_hand,
        "{ours} vs {by_hand} FLOP/ns"
    );
}
