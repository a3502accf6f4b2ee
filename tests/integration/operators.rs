//! `analyze profile --by op` on the two operator captures: the `emit_nvtx` nsys export and the
//! Kineto trace with `record_shapes`. Every kernel of the measured steps is tied to an operator
//! or counted unattributed, the operators' times add up to the steps' kernel time exactly, one
//! operator's time is recomputed by plain SQL over the export (and every operator's from the
//! Kineto JSON, through its runtime calls' `External id`), and the matrix products' FLOPs are
//! worked out by hand from the recorded sizes.

use std::collections::BTreeMap;
use std::io::Read;

use analyze::kernels::class::Classifier;
use analyze::profile::operators::{OperatorRow, OperatorView};
use analyze::profile::{profile_file, Profile, ProfileOptions};
use rusqlite::Connection;
use serde_json::Value;

use crate::common;

const EMIT_NVTX: &str = "captures/torch_emit_nvtx_small_l4_ctx128_train_fp32.sqlite.gz";
const KINETO: &str = "kineto/kineto_ops_small_l4_ctx128_train_fp32.pt.trace.json.gz";

fn by_op(rel: &str) -> Profile {
    let opts = ProfileOptions {
        operators: true,
        ..ProfileOptions::default()
    };
    profile_file(&common::fixture(rel), &Classifier::builtin(), &opts).unwrap()
}

fn view(p: &Profile) -> &OperatorView {
    p.by_operator.as_ref().expect("--by op")
}

/// The operators' times and the unattributed time add up to the measured steps' kernel time,
/// and each phase's operators to the phase's.
fn check_sums(p: &Profile) {
    let v = view(p);
    let step = p.step.as_ref().expect("measured steps");
    let ns: i64 = v.operators.iter().map(|o| o.gpu_ns).sum::<i64>() + v.unattributed_ns;
    let kernels: usize =
        v.operators.iter().map(|o| o.kernels).sum::<usize>() + v.unattributed_kernels;
    assert_eq!(ns, step.kernel_ns);
    assert_eq!(kernels, step.kernels);
    for (i, phase) in p.phases.iter().enumerate() {
        let ns: i64 = v.operators.iter().map(|o| o.phases[i].gpu_ns).sum();
        assert_eq!(phase.name, v.operators[0].phases[i].phase);
        assert_eq!(ns, phase.kernel_ns, "{}", phase.name);
    }
}

#[test]
fn emit_nvtx_ties_every_kernel_of_the_steps_to_an_operator() {
    let p = by_op(EMIT_NVTX);
    let v = view(&p);
    assert_eq!(p.measured_steps, 3);
    assert_eq!(v.unattributed_kernels, 0);
    assert_eq!(v.unattributed_ns, 0);
    check_sums(&p);
    let step = p.step.as_ref().unwrap();
    assert_eq!((step.kernels, step.kernel_ns), (2298, 21_234_633));
    let bmm = &v.operators[0];
    assert_eq!(bmm.name, "aten::bmm");
    assert!(
        bmm.share > 0.5,
        "the products are most of the time: {}",
        bmm.share
    );
    assert_eq!(
        v.top_level_operators[0].name,
        "autograd::engine::evaluate_function: BmmBackward0"
    );
    assert_eq!(v.device_peak.as_ref().unwrap().name, "NVIDIA H200 SXM");
    // fp32 products ran cuBLAS's FFMA kernels: the FP32 vector peak is their roof.
    assert_eq!(bmm.roof, Some("fp32 vector"));
}

/// One operator's kernel time by plain SQL over the export: the kernels whose launch call (same
/// correlation id and process) starts inside a `step_N` range of its process, and whose innermost
/// `emit_nvtx` range on the call's own thread is an `aten::bmm` call.
#[test]
fn one_operators_kernel_time_is_what_plain_sql_gives() {
    let dir = tempfile::tempdir().unwrap();
    let path = common::unpacked(EMIT_NVTX, dir.path(), "emit.sqlite");
    let db = Connection::open(&path).unwrap();
    // Each launch call in a step, with the label of the innermost operator range around it.
    db.execute_batch(
        "CREATE TEMP TABLE r AS
           SELECT n.start, n.end, n.globalTid AS tid, COALESCE(n.text, s.value) AS label
           FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
           WHERE n.eventType = 59 AND n.end IS NOT NULL;
         CREATE TEMP TABLE ops AS SELECT * FROM r WHERE label LIKE '%, op_id = %';
         CREATE INDEX temp.ops_at ON ops (tid, start);
         CREATE TEMP TABLE steps AS SELECT * FROM r WHERE label GLOB 'step_[0-9]*';
         CREATE TEMP TABLE calls AS
           SELECT c.correlationId AS corr, (c.globalTid >> 24) & 16777215 AS pid,
             (SELECT o.label FROM ops o WHERE o.tid = c.globalTid AND o.start <= c.start
                AND c.start <= o.end ORDER BY o.start DESC LIMIT 1) AS op
           FROM CUPTI_ACTIVITY_KIND_RUNTIME c
           WHERE EXISTS (SELECT 1 FROM steps s WHERE c.start BETWEEN s.start AND s.end
                         AND (s.tid >> 24) & 16777215 = (c.globalTid >> 24) & 16777215);
         CREATE INDEX temp.calls_by_corr ON calls (corr, pid);",
    )
    .unwrap();
    let (ns, n): (i64, i64) = db
        .query_row(
            "SELECT SUM(k.end - k.start), COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k
             JOIN calls c ON c.corr = k.correlationId AND c.pid = (k.globalPid >> 24) & 16777215
             WHERE c.op LIKE 'aten::bmm, %'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    let p = by_op(EMIT_NVTX);
    let bmm = operator(&p, "aten::bmm");
    assert_eq!((bmm.gpu_ns, bmm.kernels as i64), (ns, n));
    assert_eq!((ns, n), (12_525_486, 516));
}

/// The operator row called `name`.
fn operator<'p>(p: &'p Profile, name: &str) -> &'p OperatorRow {
    view(p)
        .operators
        .iter()
        .find(|o| o.name == name)
        .unwrap_or_else(|| panic!("{name} launched kernels"))
}

/// 2·B·M·N·K for `bmm([B, M, K], [B, K, N])`.
fn bmm_flops(sizes: &str) -> u64 {
    let dims: Vec<Vec<u64>> = serde_json::from_str(sizes).unwrap();
    let (a, b) = (&dims[0], &dims[1]);
    assert_eq!(a[2], b[1], "inner dimensions agree: {sizes}");
    2 * a[0] * a[1] * b[2] * a[2]
}

#[test]
fn matmul_flops_come_from_the_recorded_sizes() {
    let p = by_op(EMIT_NVTX);
    let bmm = operator(&p, "aten::bmm");
    // 4·128 tokens times a 768 × 3072 matrix: the feed-forward's two up-projections forward and
    // its down-projection's input gradient backward, in each of 4 layers and 3 steps.
    let up = bmm
        .shapes
        .iter()
        .find(|s| s.sizes == "[[1, 512, 768], [1, 768, 3072]]")
        .unwrap();
    assert_eq!(up.calls, 3 * 4 * 3);
    assert_eq!(bmm_flops(&up.sizes), 2 * 512 * 3072 * 768);
    assert_eq!(bmm_flops(&up.sizes), 2_415_919_104);
    let by_hand: u64 = bmm
        .shapes
        .iter()
        .map(|s| bmm_flops(&s.sizes) * s.calls as u64)
        .sum();
    assert_eq!(bmm.flops, Some(by_hand));
    let tflops = by_hand as f64 / (bmm.gpu_ns as f64 * 1e-9) / 1e12;
    assert!((bmm.placement.achieved_tflops.unwrap() - tflops).abs() < 1e-9);
    assert_eq!(bmm.calls, bmm.shapes.iter().map(|s| s.calls).sum::<usize>());
}

/// The Kineto trace's events, from its JSON.
fn kineto_events() -> Vec<Value> {
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(common::fixture(KINETO)).unwrap())
        .read_to_string(&mut text)
        .unwrap();
    let mut v: Value = serde_json::from_str(&text).unwrap();
    match v["traceEvents"].take() {
        Value::Array(events) => events,
        _ => panic!("no traceEvents"),
    }
}

/// Microseconds with three decimals as nanoseconds.
fn ns(v: &Value) -> i64 {
    (v.as_f64().unwrap() * 1000.0).round() as i64
}

#[test]
fn kineto_operators_add_up_to_the_steps_kernel_time() {
    let p = by_op(KINETO);
    let v = view(&p);
    assert_eq!(p.step_pattern, r"^ProfilerStep#\d+$");
    assert_eq!(p.measured_steps, 2);
    assert_eq!((v.unattributed_kernels, v.unattributed_ns), (0, 0));
    check_sums(&p);
    let step = p.step.as_ref().unwrap();
    assert_eq!((step.kernels, step.kernel_ns), (1532, 14_119_608));
    assert_eq!(v.operators[0].name, "aten::bmm");
}

/// Each kernel's operator by hand from the JSON: kernel → runtime call by `args.correlation`,
/// runtime call → the `cpu_op` whose `External id` it carries. For every kernel of the two
/// profiled steps that `cpu_op` is also the innermost one holding the call's start on its thread
/// (what `analyze` goes by), and per operator the kernels and their time are the profile's.
#[test]
fn kineto_kernels_tie_to_the_cpu_op_of_their_runtime_call() {
    let events = kineto_events();
    let cat = |e: &Value| e["cat"].as_str().unwrap_or("").to_owned();
    let ops: Vec<&Value> = events.iter().filter(|e| cat(e) == "cpu_op").collect();
    let by_ext: BTreeMap<i64, &Value> = ops
        .iter()
        .map(|o| (o["args"]["External id"].as_i64().unwrap(), *o))
        .collect();
    let calls: BTreeMap<i64, &Value> = events
        .iter()
        .filter(|e| cat(e) == "cuda_runtime" || cat(e) == "cuda_driver")
        .map(|c| (c["args"]["correlation"].as_i64().unwrap(), c))
        .collect();
    let steps: Vec<(i64, i64)> = events
        .iter()
        .filter(|e| {
            cat(e) == "user_annotation" && e["name"].as_str().unwrap().starts_with("ProfilerStep#")
        })
        .map(|s| (ns(&s["ts"]), ns(&s["ts"]) + ns(&s["dur"])))
        .collect();
    assert_eq!(steps.len(), 2);
    // Each thread's operator calls: start, end, External id.
    type Calls = Vec<(i64, i64, i64)>;
    let thread = |e: &Value| (e["pid"].as_i64().unwrap(), e["tid"].as_i64().unwrap());
    let mut by_thread: BTreeMap<(i64, i64), Calls> = BTreeMap::new();
    for o in &ops {
        let (start, ext) = (ns(&o["ts"]), o["args"]["External id"].as_i64().unwrap());
        by_thread
            .entry(thread(o))
            .or_default()
            .push((start, start + ns(&o["dur"]), ext));
    }
    // The innermost: the latest start holding the call's, the shortest among equals.
    let innermost = |call: &Value| -> Option<i64> {
        let t = ns(&call["ts"]);
        by_thread
            .get(&thread(call))?
            .iter()
            .filter(|&&(s, e, _)| s <= t && t <= e)
            .max_by_key(|&&(s, e, _)| (s, -e))
            .map(|o| o.2)
    };
    let mut by_name: BTreeMap<String, (usize, i64)> = BTreeMap::new();
    let mut first_bmm = None;
    let mut kernels: Vec<&Value> = events.iter().filter(|e| cat(e) == "kernel").collect();
    kernels.sort_by_key(|k| ns(&k["ts"]));
    for k in kernels {
        let call = calls[&k["args"]["correlation"].as_i64().unwrap()];
        let at = ns(&call["ts"]);
        if !steps.iter().any(|&(s, e)| s <= at && at <= e) {
            continue;
        }
        let ext = call["args"]["External id"].as_i64().unwrap();
        assert_eq!(k["args"]["External id"].as_i64(), Some(ext));
        let op = by_ext[&ext];
        let by_time = innermost(call).expect("an operator holds every launch");
        assert_eq!(by_time, ext, "{}", k["name"]);
        let name = op["name"].as_str().unwrap().to_owned();
        if name == "aten::bmm" && first_bmm.is_none() {
            first_bmm = Some((k, call, op));
        }
        let e = by_name.entry(name).or_default();
        e.0 += 1;
        e.1 += ns(&k["dur"]);
    }
    // One by hand: the first product of the steps, its kernel, runtime call and operator.
    let (kernel, call, op) = first_bmm.unwrap();
    assert_eq!(call["args"]["correlation"], kernel["args"]["correlation"]);
    assert_eq!(call["args"]["External id"], op["args"]["External id"]);
    assert_eq!(call["name"], "cudaLaunchKernelExC");
    assert_eq!(
        (call["tid"].as_i64(), op["tid"].as_i64()),
        (Some(711), Some(711))
    );
    assert!(kernel["name"]
        .as_str()
        .unwrap()
        .starts_with("sm80_xmma_gemm_f32f32"));
    assert_eq!(
        op["args"]["Input type"],
        serde_json::json!(["float", "float"])
    );
    let sizes = op["args"]["Input Dims"].to_string().replace(',', ", ");
    assert_eq!(sizes, "[[1, 512, 768], [1, 768, 768]]");

    let p = by_op(KINETO);
    let profiled: BTreeMap<String, (usize, i64)> = view(&p)
        .operators
        .iter()
        .map(|o| (o.name.clone(), (o.kernels, o.gpu_ns)))
        .collect();
    assert_eq!(profiled, by_name);
    let bmm = operator(&p, "aten::bmm");
    assert!(bmm.shapes.iter().any(|s| s.sizes == sizes), "{sizes}");
}

#[test]
fn by_op_json_has_the_operator_keys_and_the_roofs_can_be_given() {
    let path = common::fixture(KINETO).display().to_string();
    let v = common::json_stdout(&common::analyze(&[
        "profile", &path, "--by", "op", "-f", "json",
    ]));
    for key in [
        "operators",
        "unattributed_ns",
        "device_peak",
        "top_level_operators",
    ] {
        assert!(v.get(key).is_some(), "{key}");
    }
    let bmm = &v["operators"][0];
    for key in [
        "name",
        "calls",
        "kernels",
        "gpu_ns",
        "flops",
        "bytes",
        "achieved_tflops",
        "achieved_tbps",
        "intensity",
        "bound",
        "roof_fraction",
    ] {
        assert!(bmm.get(key).is_some(), "{key}");
    }
    assert_eq!(bmm["bound"], "compute");
    assert_eq!(v["device_peak"]["tflops"]["bf16"], 989.5);
    assert_eq!(v["device_peak"]["tbps"], 4.8);
    let given = common::json_stdout(&common::analyze(&[
        "profile",
        &path,
        "--by",
        "op",
        "--peak-tflops",
        "100",
        "--peak-tbps",
        "2",
        "-f",
        "json",
    ]));
    assert_eq!(given["device_peak"]["from"], "table and options");
    assert_eq!(given["device_peak"]["tflops"]["fp32"], 100.0);
    let plain = common::json_stdout(&common::analyze(&["profile", &path, "-f", "json"]));
    assert!(
        plain.get("operators").is_none(),
        "without --by op the JSON is as it was"
    );
}

#[test]
fn by_op_plots_the_roofline() {
    let dir = tempfile::tempdir().unwrap();
    let path = common::fixture(KINETO).display().to_string();
    let plots = dir.path().join("plots");
    let out = common::analyze(&[
        "profile",
        &path,
        "--by",
        "op",
        "--plot",
        plots.to_str().unwrap(),
    ]);
    common::assert_success(&out);
    let stdout = common::text(&out.stdout);
    assert!(stdout.contains("Roofline by operator"), "{stdout}");
    for ext in ["png", "svg"] {
        let f = plots.join(format!(
            "kineto_ops_small_l4_ctx128_train_fp32.roofline.{ext}"
        ));
        assert!(f.metadata().unwrap().len() > 1000, "{}", f.display());
    }
    let svg =
        std::fs::read_to_string(plots.join("kineto_ops_small_l4_ctx128_train_fp32.roofline.svg"))
            .unwrap();
    assert!(svg.contains("aten::bmm"));
}

/// The matrix products' FLOPs of a Kineto capture equal PyTorch's own count of the same steps
/// (`prof.key_averages()`, written beside the trace by `torch_captures.py kineto-ops`, since the
/// trace's events carry none) to 0.1%.
#[test]
fn kineto_matrix_flops_match_pytorchs_own_count() {
    const NAME: &str = "kineto_flops_h100_small_l4_ctx128_train_fp32";
    let p = by_op(&format!("kineto/{NAME}.pt.trace.json.gz"));
    let (bmm, counts) = (operator(&p, "aten::bmm"), pytorch_counts(NAME));
    let theirs = counts["aten::bmm"]["flops"].as_f64().unwrap();
    let ours = bmm.flops.unwrap() as f64;
    assert!((ours - theirs).abs() <= theirs * 1e-3, "{ours} vs {theirs}");
    assert_eq!(
        bmm.calls as u64,
        counts["aten::bmm"]["calls"].as_u64().unwrap()
    );
}

/// PyTorch's own FLOP counts of the capture `name` (its `.flops.json` under `fixtures/kineto`).
fn pytorch_counts(name: &str) -> Value {
    let path = common::fixture(&format!("kineto/{name}.flops.json"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The capture parameters of `torch_captures.py kineto-ops` (the small model's heads and width,
/// 4 layers, batch 4, ctx 128, two recorded steps): what the attention FLOPs are counted from.
const CAPTURE: (u64, u64, u64, u64, u64) = (4, 12, 128, 64, 4 * 2);

/// Causal `scaled_dot_product_attention` on each of PyTorch's three CUDA backends, forced (bf16,
/// H200, PyTorch 2.11): the operators that launch the kernels (`_flash_attention_forward` and
/// `_efficient_attention_forward` take `[B, L, H, E]`, `_cudnn_attention_forward` takes
/// `[B, H, L, E]`, and each says causal its own way) cost 4·B·H·L²·E/2 FLOPs forward and 2.5
/// times that backward, counted by hand from the capture's shapes; their GPU time and the bf16
/// roof come with them, and every kernel of the steps has its operator.
#[test]
fn sdpa_flops_follow_the_shapes_on_every_backend() {
    let (b, h, l, e, calls) = CAPTURE;
    let forward = 4 * b * h * l * l * e / 2;
    for backend in ["flash", "efficient", "cudnn"] {
        let p = by_op(&format!(
            "kineto/kineto_ops_small_l4_ctx128_train_bf16_sdpa_{backend}.pt.trace.json.gz"
        ));
        check_sums(&p);
        let v = view(&p);
        assert_eq!(v.unattributed_kernels, 0, "{backend}");
        for (suffix, flops) in [("forward", forward), ("backward", forward * 5 / 2)] {
            let name = format!("aten::_{backend}_attention_{suffix}");
            let op = operator(&p, &name);
            assert_eq!(op.calls as u64, calls, "{name}");
            assert_eq!(op.flops, Some(flops * calls), "{name}");
            assert!(op.gpu_ns > 0, "{name}");
            assert_eq!(op.roof, Some("bf16 tensor"), "{name}");
        }
    }
}

/// The batched products of bf16 (autocast) and TF32 captures: FLOPs and calls equal PyTorch's
/// own count (`prof.key_averages()`), and each is held to its type's tensor roof.
#[test]
fn bf16_and_tf32_products_match_pytorchs_count_and_roof() {
    for (name, roof) in [
        (
            "kineto_ops_small_l4_ctx128_train_bf16_sdpa_cudnn",
            "bf16 tensor",
        ),
        ("kineto_ops_small_l4_ctx128_train_fp32_tf32", "tf32 tensor"),
    ] {
        let p = by_op(&format!("kineto/{name}.pt.trace.json.gz"));
        let (bmm, counts) = (operator(&p, "aten::bmm"), pytorch_counts(name));
        assert_eq!(bmm.flops, counts["aten::bmm"]["flops"].as_u64(), "{name}");
        assert_eq!(
            bmm.calls as u64,
            counts["aten::bmm"]["calls"].as_u64().unwrap()
        );
        assert_eq!(bmm.roof, Some(roof), "{name}");
    }
}
