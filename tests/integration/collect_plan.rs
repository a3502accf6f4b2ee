//! `collect plan --format json` on every named size: parameter counts equal PyTorch's
//! (`sum(p.numel() for p in BasicsTransformerLM(...).parameters())`, as the CS336 handout and
//! the reference script give them), and the FLOPs and memory fields follow from the dimensions;
//! `--checkpoint` and what `auto` decides against an H200 or `--device-memory`.

use serde_json::Value;

use crate::run_collect::{collect, configuration, plan};

#[test]
fn parameter_counts_equal_pytorch() {
    for (size, params) in [
        ("small", 128_625_408u64),
        ("medium", 423_183_360),
        ("large", 969_411_840),
        ("xl", 1_998_235_200),
        ("2.7B", 3_406_809_600),
    ] {
        let v = plan(&["--size", size]);
        assert_eq!(v["parameters"].as_u64(), Some(params), "{size}");
    }
}

#[test]
fn flops_and_memory_follow_the_dimensions() {
    // small, ctx 256, batch 4, train, fp32: 6 x (matrix parameters) x tokens + attention.
    let v = plan(&[
        "--size", "small", "--ctx", "256", "--batch", "4", "--mode", "train",
    ]);
    let matrix: u64 = 12 * (4 * 768 * 768 + 3 * 768 * 3072) + 768 * 10_000;
    let attention: u64 = 12 * (2 * 2 * 4 * 256 * 256 * 768);
    assert_eq!(
        v["flops_per_step"].as_u64(),
        Some(3 * (2 * 1024 * matrix + attention))
    );
    let m = &v["memory"];
    assert_eq!(m["residual_stream"].as_u64(), Some(4 * 256 * 768 * 4));
    let p = m["parameters"].as_u64().unwrap();
    // fp32 parameters, plus at most one 64-element alignment pad per tensor (111 tensors).
    assert!((128_625_408 * 4..(128_625_408 + 64 * 111) * 4).contains(&p));
    assert_eq!(m["gradients"].as_u64(), Some(p));
    assert_eq!(m["optimizer_state"].as_u64(), Some(2 * p));
    assert!(m["peak"].as_u64().unwrap() > 4 * p);

    let f = plan(&[
        "--size",
        "small",
        "--mode",
        "forward",
        "--precision",
        "bf16",
    ]);
    assert_eq!(
        f["flops_per_step"].as_u64(),
        Some(2 * 1024 * matrix + attention)
    );
    assert_eq!(f["memory"]["gradients"].as_u64(), Some(0));
    assert_eq!(f["memory"]["bf16_weights"].as_u64(), Some(p / 2));
}

#[test]
fn custom_dimensions_are_counted() {
    // d 64, d_ff 172, 2 layers: emb + head 2 x 10000 x 64, per layer 4 x 64^2 + 3 x 64 x 172
    // + 2 x 64, final norm 64.
    let v = plan(&[
        "--d-model",
        "64",
        "--d-ff",
        "172",
        "--layers",
        "2",
        "--heads",
        "4",
    ]);
    let expected = 2 * 10_000 * 64 + 2 * (4 * 64 * 64 + 3 * 64 * 172 + 2 * 64) + 64;
    assert_eq!(v["parameters"].as_u64(), Some(expected));
    assert_eq!(v["config"]["size"], "custom(d64,ff172,L2,H4)");
}

#[test]
fn planned_peak_equals_the_peak_measured_on_the_h200() {
    use std::io::Read;
    let path = crate::common::fixture("collect/bench_grid_h200.json.gz");
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(&path).expect("fixture present"))
        .read_to_string(&mut text)
        .expect("gzip JSON");
    let grid: Value = serde_json::from_str(&text).expect("results JSON");
    let results = grid["results"].as_array().expect("results");
    assert_eq!(results.len(), 80);
    for r in results {
        let size = r["size"].as_str().unwrap();
        let ctx = r["ctx"].as_u64().unwrap().to_string();
        let mode = r["mode"].as_str().unwrap();
        let precision = r["precision"].as_str().unwrap();
        let v = plan(&[
            "--size",
            size,
            "--ctx",
            &ctx,
            "--mode",
            mode,
            "--precision",
            precision,
        ]);
        assert_eq!(
            v["memory"]["peak"], r["memory"]["peak_bytes"],
            "{size} ctx {ctx} {mode} {precision}"
        );
    }
}

#[test]
fn checkpoint_auto_turns_on_where_the_step_does_not_fit_the_device() {
    let args = [
        &configuration("2.7B", "8192", "4", "train", "bf16")[..],
        &["--attention", "flash"],
    ]
    .concat();
    let with = |extra: &[&str]| plan(&[&args[..], extra].concat());
    let off = with(&["--checkpoint", "off"]);
    let on = with(&["--checkpoint", "on"]);
    let auto = with(&[]);
    let peak = |v: &Value| v["memory"]["peak"].as_u64().unwrap();
    // 177.0 GiB without, 72.2 GiB with: over and under an H200's 139.8 GiB.
    assert_eq!(peak(&off), 190_048_777_220);
    assert_eq!(peak(&on), 77_570_388_996);
    assert_eq!(off["config"]["checkpoint"], false);
    assert_eq!(on["config"]["checkpoint"], true);
    assert_eq!(auto["config"]["checkpoint"], true);
    assert_eq!(peak(&auto), peak(&on));
    assert_eq!(auto["checkpoint_auto"]["device_memory"], 150_109_880_320u64);
    assert_eq!(
        auto["checkpoint_auto"]["peak_without_checkpoint"],
        peak(&off)
    );
    assert_eq!(on["checkpoint_auto"], Value::Null);
    assert_eq!(on["flops_per_step"], off["flops_per_step"]);
    assert!(on["flops"]["recompute"].as_u64().unwrap() > 0);
    // On a device big enough, auto leaves it off.
    let big = with(&["--device-memory", "200GiB"]);
    assert_eq!(big["config"]["checkpoint"], false);
    assert_eq!(peak(&big), peak(&off));

    let text = collect(&[&["plan"], &args[..]].concat());
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains(
            "--checkpoint auto: on (the peak without it, 177.0 GiB, against 139.8 GiB of device \
             memory: does not fit)."
        ),
        "{text}"
    );
}
