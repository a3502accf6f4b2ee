//! The operator view on a trace built by hand: which operator claims each kernel, the
//! unattributed rest, the top-level operators, phases, costs and roofs.

use crate::kernels::class::Classifier;
use crate::model::trace::{
    ApiCall, ApiKind, Gpu, Kernel, Nanos, Range, Source, SourceFormat, Span, Trace,
};
use crate::profile::{profile, ProfileOptions};

/// A trace of one step (0..1000) on thread 1 of process 1 whose `forward` (0..500) runs
/// `aten::linear` > `aten::addmm` (a GEMM and a split-K reduction), then an `aten::mul` on
/// thread 2, and a kernel launched outside any operator; a kernel after the step counts
/// nowhere. `(label, thread, start, end)` ranges, `(name, thread, launch, start, end)`
/// kernels.
fn trace() -> Trace {
    let mut t = Trace::empty(Source::new("run_fp32.sqlite", SourceFormat::NsysSqlite));
    t.gpus.push(Gpu {
        name: "NVIDIA H100 80GB HBM3".into(),
        ..Gpu::default()
    });
    let ranges = [
        ("step_0", 1, 0, 1000),
        ("forward", 1, 0, 500),
        ("aten::linear, seq = 1, op_id = 1, sizes = [[4, 128, 768], [3072, 768], [3072]], input_op_ids = []", 1, 10, 300),
        ("aten::addmm, seq = 1, op_id = 2, sizes = [[3072], [512, 768], [768, 3072]], input_op_ids = []", 1, 20, 200),
        ("aten::mul, seq = 2, op_id = 3, sizes = [[512, 3072], [512, 3072]], input_op_ids = []", 2, 600, 700),
    ];
    for (label, tid, start, end) in ranges {
        let name = t.strings.intern(label);
        t.ranges
            .push(Range::push_pop(name, 1, tid, Nanos(start), Nanos(end)));
    }
    let kernels = [
        ("sm90_xmma_gemm_f32f32_f32f32_f32_tn_n", 1, 30, 2000, 2100),
        ("cublasLt::splitKreduce_kernel", 1, 40, 2100, 2110),
        ("vectorized_elementwise_kernel", 2, 650, 2200, 2230),
        ("vectorized_elementwise_kernel", 1, 800, 2300, 2307),
        ("vectorized_elementwise_kernel", 1, 1500, 2400, 2450),
    ];
    let launch = t.strings.intern("cudaLaunchKernel");
    for (i, (name, tid, at, start, end)) in kernels.into_iter().enumerate() {
        let name = t.strings.intern(name);
        let corr = i as u64 + 1;
        let span = Span {
            start: Nanos(start),
            end: Nanos(end),
            device: 0,
            stream: 7,
            correlation_id: corr,
            pid: 1,
        };
        t.kernels.push(Kernel::named(name, span));
        t.api_calls.push(ApiCall {
            start: Nanos(at),
            end: Nanos(at + 5),
            pid: 1,
            tid,
            correlation_id: corr,
            name: launch,
            kind: ApiKind::Runtime,
        });
    }
    t.sort();
    t
}

#[test]
fn kernels_sum_under_their_innermost_operator_and_the_rest_is_unattributed() {
    let t = trace();
    let opts = ProfileOptions {
        operators: true,
        ..ProfileOptions::default()
    };
    let p = profile(&t, &Classifier::builtin(), &opts);
    let v = p.by_operator.as_ref().unwrap();
    let names: Vec<(&str, usize, usize, i64)> = v
        .operators
        .iter()
        .map(|o| (o.name.as_str(), o.calls, o.kernels, o.gpu_ns))
        .collect();
    assert_eq!(names, [("aten::addmm", 1, 2, 110), ("aten::mul", 1, 1, 30)]);
    assert_eq!((v.unattributed_kernels, v.unattributed_ns), (1, 7));
    let step = p.step.as_ref().unwrap();
    assert_eq!(
        step.kernel_ns,
        110 + 30 + 7,
        "the kernel after the step counts nowhere"
    );
    let top: Vec<(&str, i64)> = v
        .top_level_operators
        .iter()
        .map(|o| (o.name.as_str(), o.gpu_ns))
        .collect();
    assert_eq!(top, [("aten::linear", 110), ("aten::mul", 30)]);
    let addmm = &v.operators[0];
    assert_eq!(addmm.flops, Some(2 * 512 * 3072 * 768));
    assert_eq!(
        addmm.bytes,
        Some((3072 + 512 * 768 + 768 * 3072 + 512 * 3072) * 4)
    );
    assert_eq!(addmm.roof, Some("fp32 vector"));
    assert_eq!(addmm.dtype, Some("fp32"));
    let forward = &addmm.phases[0];
    assert_eq!((forward.phase.as_str(), forward.gpu_ns), ("forward", 110));
    assert_eq!(
        v.operators[1].phases[0].gpu_ns, 0,
        "the mul ran after `forward`"
    );
    assert_eq!(v.device_peak.as_ref().unwrap().name, "NVIDIA H100 SXM5");
    // 2·512·3072·768 FLOPs in 110 ns.
    let tflops = addmm.placement.achieved_tflops.unwrap();
    assert!((tflops - 2.0 * 512.0 * 3072.0 * 768.0 / 110e-9 / 1e12).abs() < 1e-6);
}

#[test]
fn without_by_op_nothing_changes_and_without_operators_all_is_unattributed() {
    let t = trace();
    let plain = profile(&t, &Classifier::builtin(), &ProfileOptions::default());
    assert!(plain.by_operator.is_none());
    let json = serde_json::to_value(&plain).unwrap();
    assert!(json.get("operators").is_none());
    let mut bare = trace();
    bare.ranges
        .retain(|r| !bare.strings.get(r.name).contains("op_id"));
    let opts = ProfileOptions {
        operators: true,
        peak_tflops: Some(100.0),
        ..ProfileOptions::default()
    };
    let p = profile(&bare, &Classifier::builtin(), &opts);
    let v = p.by_operator.unwrap();
    assert!(v.operators.is_empty());
    assert_eq!((v.unattributed_kernels, v.unattributed_ns), (4, 147));
    let peak = v.device_peak.unwrap();
    assert_eq!(
        (peak.from, peak.tflops["fp32"], peak.tbps),
        ("table and options", 100.0, 3.35)
    );
}
