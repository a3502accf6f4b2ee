//! Loading PyTorch profiler (Kineto) traces into the model, checked against the same workload
//! under Nsight Systems and against counts taken from the JSON files themselves.

use crate::common;

use std::collections::{BTreeMap, HashMap};
use std::sync::OnceLock;

use analyze::formats;
use analyze::kernels::name::{self as kernel_name, canonical_names, short_name};
use analyze::model::trace::{ApiKind, Bytes, MemOpKind, Nanos, SourceFormat, Trace};

const KINETO: &str = "kineto/kineto_small_ctx128_train_fp32.pt.trace.json.gz";
const NSYS: &str = "nsys/torch_small_ctx128_train_fp32.sqlite.gz";

/// Each fixture is read once and shared by the tests that need it.
fn kineto() -> &'static Trace {
    static T: OnceLock<Trace> = OnceLock::new();
    T.get_or_init(|| formats::load_trace(&common::fixture(KINETO)).unwrap())
}

fn nsys() -> &'static Trace {
    static T: OnceLock<Trace> = OnceLock::new();
    T.get_or_init(|| formats::load_trace(&common::fixture(NSYS)).unwrap())
}

fn counts<'a>(names: impl Iterator<Item = &'a str>) -> BTreeMap<&'a str, usize> {
    let mut out = BTreeMap::new();
    for n in names {
        *out.entry(n).or_default() += 1;
    }
    out
}

/// Indices of the kernels whose launching API call (same correlation id, same process) starts
/// inside the range named `range`, on any thread of that range's process.
fn launched_inside(t: &Trace, range: &str) -> Vec<usize> {
    let ranges: Vec<_> = t
        .ranges
        .iter()
        .filter(|r| t.name(r.name) == range)
        .collect();
    assert_eq!(ranges.len(), 1, "one `{range}` range");
    let r = ranges[0];
    let launch: HashMap<u64, Nanos> = t
        .api_calls
        .iter()
        .filter(|c| c.pid == r.pid && c.correlation_id != 0)
        .map(|c| (c.correlation_id, c.start))
        .collect();
    t.kernels
        .iter()
        .enumerate()
        .filter(|(_, k)| k.span.pid == r.pid)
        .filter(|(_, k)| {
            launch
                .get(&k.span.correlation_id)
                .is_some_and(|&s| r.start <= s && s <= r.end)
        })
        .map(|(i, _)| i)
        .collect()
}

#[test]
fn kineto_small_ctx128_train_fp32_has_the_kernels_of_step_0_under_nsys() {
    if !kernel_name::gnu_demangler_available() {
        // Linux always has libstdc++.so.6; elsewhere the check is skipped.
        if cfg!(target_os = "linux") {
            panic!("libstdc++'s demangler should load on Linux");
        }
        eprintln!("skipped: no C++ runtime demangler on this machine");
        return;
    }
    let (kineto, nsys) = (kineto(), nsys());

    let in_step = launched_inside(nsys, "step_0");
    assert_eq!(in_step.len(), 2206);
    assert_eq!(kineto.kernels.len(), 2206);

    // nsys and Kineto spell demangled names differently; nsys keeps the mangled name, which
    // demangles (GNU style) to exactly what Kineto wrote.
    let names = canonical_names(nsys);
    let nsys_names = counts(in_step.iter().map(|&i| names.of(i)));
    let kineto_names = counts(kineto.kernels.iter().map(|k| kineto.name(k.name)));
    assert_eq!(nsys_names.len(), 60);
    assert_eq!(nsys_names, kineto_names);

    // Short names derived from Kineto's names are nsys's own `shortName`s.
    let nsys_short = counts(
        in_step
            .iter()
            .map(|&i| nsys.name(nsys.kernels[i].short_name)),
    );
    let kineto_short = counts(kineto.kernels.iter().map(|k| kineto.name(k.short_name)));
    assert_eq!(nsys_short, kineto_short);
    assert_eq!(kineto_short["elementwise_kernel"], 690);
}

#[test]
fn short_names_are_derived_as_nsys_derives_them() {
    // Every kernel of two exports: nsys's shortName from its own demangled name and from the
    // GNU demangling of the mangled name.
    let bf16 = formats::load_trace(&common::fixture(
        "nsys/torch_small_ctx256_train_bf16.sqlite.gz",
    ))
    .unwrap();
    for (file, t) in [(NSYS, nsys()), ("bf16", &bf16)] {
        let names = canonical_names(t);
        let mut checked = std::collections::HashSet::new();
        for (i, k) in t.kernels.iter().enumerate() {
            if !checked.insert((k.name, k.short_name)) {
                continue;
            }
            let want = t.name(k.short_name);
            assert_eq!(
                short_name(t.name(k.name)),
                want,
                "{file}: {}",
                t.name(k.name)
            );
            assert_eq!(short_name(names.of(i)), want, "{file}: {}", names.of(i));
        }
        assert!(checked.len() > 50, "{file}: {} names", checked.len());
    }
}

#[test]
fn kineto_small_ctx128_train_fp32_loads_every_category() {
    // Expected values are counted from the JSON with Python's json module.
    let t = kineto();
    assert_eq!(t.source.format, SourceFormat::Kineto);
    assert_eq!(t.source.schema_version.as_deref(), Some("1"));
    assert_eq!(
        t.source
            .metadata
            .get("baseTimeNanoseconds")
            .map(String::as_str),
        Some("1790857026000000000")
    );
    assert_eq!(
        t.source.metadata.get("cupti_version").map(String::as_str),
        Some("130001")
    );
    assert!(t.source.missing.is_empty(), "{:?}", t.source.missing);

    let runtime = t
        .api_calls
        .iter()
        .filter(|c| c.kind == ApiKind::Runtime)
        .count();
    assert_eq!((runtime, t.api_calls.len()), (2272, 2272 + 26));
    let memcpy: Vec<_> = t
        .mem_ops
        .iter()
        .filter(|m| m.kind != MemOpKind::Memset)
        .collect();
    assert_eq!(memcpy.len(), 25);
    assert!(memcpy.iter().all(|m| m.kind == MemOpKind::DeviceToDevice));
    assert_eq!(
        memcpy.iter().map(|m| m.bytes).sum::<Bytes>(),
        Bytes(39_321_600)
    );
    let memset: Bytes = t
        .mem_ops
        .iter()
        .filter(|m| m.kind == MemOpKind::Memset)
        .map(|m| m.bytes)
        .sum();
    assert_eq!((t.mem_ops.len(), memset), (25 + 36, Bytes(165_888)));

    // The first kernel: ts 4457142100982.187 µs, dur 2.464 µs.
    let k = &t.kernels[0];
    assert_eq!(k.span.start, Nanos(4_457_142_100_982_187));
    assert_eq!(k.duration(), Nanos(2464));
    assert_eq!(t.name(k.short_name), "vectorized_gather_kernel");
    assert_eq!(
        (k.span.device, k.span.stream, k.span.correlation_id),
        (0, 7, 10)
    );
    assert_eq!(
        (k.grid, k.block, k.registers_per_thread),
        ([512, 1, 1], [192, 1, 1], 32)
    );
    // Every kernel was launched by process 633 (from the main thread or autograd's).
    assert!(t.kernels.iter().all(|k| k.span.pid == 633));
    assert_eq!(
        t.kernels.iter().map(|k| k.duration()).sum::<Nanos>(),
        Nanos(18_912_074)
    );
    assert!(t
        .kernels
        .windows(2)
        .all(|w| w[0].span.start <= w[1].span.start));

    // Two CPU annotations and the GPU copy of one of them, in its own domain.
    let labels: Vec<String> = t.ranges.iter().map(|r| t.range_label(r)).collect();
    assert_eq!(
        labels,
        [
            ":Optimizer.step#AdamW.step",
            "gpu_user_annotation:Optimizer.step#AdamW.step",
            ":Optimizer.zero_grad#AdamW.zero_grad",
        ]
    );
    assert!(t.ranges.iter().all(|r| r.pid == 633));
    assert_eq!(t.ranges[0].duration(), Nanos(4_555_979));

    assert_eq!(t.gpus.len(), 1);
    assert_eq!(t.gpus[0].name, "NVIDIA H200");
    assert_eq!(t.gpus[0].sm_count, Some(132));
    assert_eq!(t.gpus[0].total_memory, Some(Bytes(150_109_880_320)));
    assert_eq!(t.gpus[0].compute_capability, Some((9, 0)));
    assert_eq!(
        t.thread_names.get(&(633, 673)).map(|&s| t.name(s)),
        Some("thread 673 (pt_autograd_0)")
    );
}

/// (file, kernels, memcpy, memset, API calls, ranges, GPU name)
const PUBLIC: &[(&str, usize, usize, usize, usize, usize, &str)] = &[
    (
        "public/kineto/tracelens-kineto__h100__gaunernst_bert-small-uncased__1016001.json.gz",
        60,
        1,
        0,
        110 + 22,
        2,
        "NVIDIA H100 80GB HBM3",
    ),
    (
        "public/kineto/tracelens-kineto__torch_compile_triton__trace.json.gz",
        12,
        0,
        0,
        59,
        2,
        "AMD Instinct MI300X",
    ),
    (
        "public/kineto/hta-kineto__nccl_parser_config__nccl_data.json.gz",
        2700,
        960,
        114,
        8740,
        42 + 30,
        "NVIDIA A100-PG509-200",
    ),
];

#[test]
#[cfg_attr(
    no_shared_public,
    ignore = "needs ../shared/fixtures/public beside the checkout"
)]
fn public_kineto_traces_load() {
    for &(file, kernels, memcpy, memset, calls, ranges, gpu) in PUBLIC {
        let Some(path) = common::shared(file) else {
            continue;
        };
        let t = formats::load_trace(&path).unwrap();
        let sets = t
            .mem_ops
            .iter()
            .filter(|m| m.kind == MemOpKind::Memset)
            .count();
        assert_eq!(t.kernels.len(), kernels, "{file}");
        assert_eq!((t.mem_ops.len() - sets, sets), (memcpy, memset), "{file}");
        assert_eq!(t.api_calls.len(), calls, "{file}");
        assert_eq!(t.ranges.len(), ranges, "{file}");
        assert_eq!(t.gpus[0].name, gpu, "{file}");
        // Every kernel in these files has its launching call in the file.
        let launched: std::collections::HashSet<u64> =
            t.api_calls.iter().map(|c| c.correlation_id).collect();
        assert!(
            t.kernels
                .iter()
                .all(|k| launched.contains(&k.span.correlation_id)),
            "{file}"
        );
    }
}

#[test]
#[cfg_attr(
    no_shared_public,
    ignore = "needs ../shared/fixtures/public beside the checkout"
)]
fn rocm_trace_keeps_hip_calls_and_device_numbers() {
    let Some(path) =
        common::shared("public/kineto/tracelens-kineto__torch_compile_triton__trace.json.gz")
    else {
        return;
    };
    let t = formats::load_trace(&path).unwrap();
    let launches = t
        .api_calls
        .iter()
        .filter(|c| t.name(c.name) == "hipExtModuleLaunchKernel")
        .count();
    assert_eq!(launches, 7);
    assert!(t
        .kernels
        .iter()
        .all(|k| k.span.device == 2 && k.span.pid == 3_182_306));
    assert!(t
        .kernels
        .iter()
        .any(|k| t.name(k.short_name) == "triton_red_fused_add_mean_mul_pow_rsqrt_0"));
    assert_eq!(
        t.source
            .metadata
            .get("roctracer_version")
            .map(String::as_str),
        Some("4.1")
    );
}

#[test]
fn json_that_is_not_a_trace_is_a_one_line_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("settings.json");
    std::fs::write(&path, b"{\"theme\": \"dark\"}").unwrap();
    let err = formats::load_trace(&path).unwrap_err().to_string();
    assert!(
        err.contains("settings.json") && err.contains("traceEvents"),
        "{err}"
    );
    std::fs::write(&path, b"{\"traceEvents\": [ {\"ph\": ").unwrap();
    let err = formats::load_trace(&path).unwrap_err().to_string();
    assert!(
        err.contains("settings.json") && !err.contains('\n'),
        "{err}"
    );
}

/// The hint of range names counts each annotation once: the JSON's `user_annotation` events (on
/// the CPU), not their `gpu_user_annotation` mirrors on the device's timeline.
#[test]
fn range_name_hint_counts_mirrored_annotations_once() {
    let bytes = formats::read_maybe_gzip(&common::fixture(KINETO)).unwrap();
    let json: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    let events = json["traceEvents"].as_array().unwrap();
    let on_cpu = |name: &str| {
        events
            .iter()
            .filter(|e| e["cat"] == "user_annotation" && e["name"] == name)
            .count()
    };
    let mirrored = events
        .iter()
        .filter(|e| e["cat"] == "gpu_user_annotation" && e["name"] == "Optimizer.step#AdamW.step")
        .count();
    assert!(
        mirrored > 0,
        "the fixture mirrors the optimizer's annotation on the GPU"
    );
    let p = analyze::profile::profile(
        kineto(),
        &analyze::kernels::class::Classifier::builtin(),
        &Default::default(),
    );
    let hint = p
        .notes
        .iter()
        .find(|n| n.starts_with("ranges in this trace"))
        .unwrap();
    for name in [
        "Optimizer.step#AdamW.step",
        "Optimizer.zero_grad#AdamW.zero_grad",
    ] {
        let expected = format!("`{name}` x{}", on_cpu(name));
        assert!(hint.contains(&expected), "{expected} in {hint}");
    }
}
