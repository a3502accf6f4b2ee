//! The attention core on the GPU, both implementations, against the f64 CPU reference
//! (`collect::transformer::reference::attention`) and against each other: outputs and the
//! gradients of `q`, `k`, `v`, as max |Δ| over max |reference|; fp32 within 1e-5 (output) and
//! 1e-4 (gradients), bf16 within 2e-2; causal and not (naive is causal only); sequence lengths
//! 1, 17, 127 and 1000; every kernel head width, and 80 (padded to 128). Then `collect
//! attention`'s rows on a small grid, whose memory before the backward is known to the byte.

use collect::bench::attention::{self as bench, AttentionBenchOptions, AttentionOutcome};
use collect::gpu::device_memory::{Buffer, DType};
use collect::gpu::ops::{AttnShape, Runtime};
use collect::transformer::attention::{AttentionCore, Input};
use collect::transformer::config::{Attention, Precision};
use collect::transformer::reference::{self, AttentionShape};

use crate::{download, from_bf16, max_diff_and_max, runtime, splitmix_values, to_bf16};

/// Host values in `act`, uploaded; returns the buffer and the values as the device holds them.
fn upload(rt: &Runtime, act: DType, values: &[f32]) -> (Buffer, Vec<f64>) {
    match act {
        DType::Bf16 => {
            let bits: Vec<u16> = values.iter().map(|&x| to_bf16(x)).collect();
            let exact = bits.iter().map(|&b| from_bf16(b) as f64).collect();
            (rt.gpu.upload(DType::Bf16, &bits).unwrap(), exact)
        }
        _ => (
            rt.gpu.upload(DType::F32, values).unwrap(),
            values.iter().map(|&x| x as f64).collect(),
        ),
    }
}

/// max |a - b| / max |b|, or max |a - b| where b vanishes.
fn rel(a: &[f32], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    let (num, den) = max_diff_and_max(a, b);
    // A gradient that is zero in exact arithmetic (seq 1: one visible key, so dS = 0 and dq = dk
    // = 0) leaves only f64 rounding residue in the reference: compare it in absolute terms.
    if den < 1e-9 {
        num
    } else {
        num / den
    }
}

/// Output, dq, dk, dv of one implementation.
struct Result4([Vec<f32>; 4]);

fn run_core(
    rt: &Runtime,
    attention: Attention,
    act: DType,
    shape: AttnShape,
    causal: bool,
    inputs: &[Buffer; 4],
) -> Result4 {
    let core = AttentionCore {
        rt,
        attention,
        act,
        shape,
        causal,
    };
    let [q, k, v, d_out] = inputs;
    let f = core.forward(q, k, v).unwrap();
    let o = download(rt, &f.output);
    let (_output, saved) = f.split();
    let (dq, dk, dv) = core
        .backward(
            Input::Borrowed(d_out),
            Input::Borrowed(q),
            Input::Borrowed(k),
            Input::Borrowed(v),
            saved,
        )
        .unwrap();
    Result4([o, download(rt, &dq), download(rt, &dk), download(rt, &dv)])
}

const NAMES: [&str; 4] = ["output", "dq", "dk", "dv"];

#[test]
#[cfg_attr(
    no_gpu,
    ignore = "needs an NVIDIA GPU: run with --include-ignored there, or build with GPU_TESTS=1"
)]
fn both_implementations_match_the_f64_reference_and_each_other() {
    let Some(rt) = runtime() else { return };
    check_against_the_reference(&rt);
}

/// On Hopper the flash path runs the `*_sm90` kernels where it has them: the portable kernels
/// they replace are checked too.
#[test]
#[cfg_attr(
    no_gpu,
    ignore = "needs an NVIDIA GPU: run with --include-ignored there, or build with GPU_TESTS=1"
)]
fn the_portable_flash_kernels_match_the_reference_on_hopper_too() {
    let Some(mut rt) = runtime() else { return };
    if rt.kernels.drop_hopper_kernels() == 0 {
        eprintln!("skipped: this device runs the portable FlashAttention kernels already");
        return;
    }
    check_against_the_reference(&rt);
}

fn check_against_the_reference(rt: &Runtime) {
    let (batch, heads) = (1, 2);
    let mut worst = Vec::new();
    for precision in [Precision::Fp32, Precision::Bf16] {
        let act = match precision {
            Precision::Fp32 => DType::F32,
            Precision::Bf16 => DType::Bf16,
        };
        for d in [16, 32, 64, 128, 80] {
            for seq in [1, 17, 127, 1000] {
                if d == 80 && seq == 1000 {
                    continue; // the padded path: the short rows suffice
                }
                for causal in [true, false] {
                    let shape = AttnShape {
                        batch,
                        ctx: seq,
                        heads,
                        d_head: d,
                    };
                    let n = shape.elements();
                    let seed = (d * 7919 + seq) as u64;
                    let mut inputs = Vec::new();
                    let mut exact = Vec::new();
                    for i in 0..4 {
                        let (b, e) = upload(rt, act, &splitmix_values(n, seed * 4 + i));
                        inputs.push(b);
                        exact.push(e);
                    }
                    let inputs: [Buffer; 4] = inputs.try_into().ok().unwrap();
                    let rs = AttentionShape {
                        heads: batch * heads,
                        t: seq,
                        d,
                        causal,
                    };
                    let (o, _) = reference::attention(rs, &exact[0], &exact[1], &exact[2]);
                    let (dq, dk, dv) = reference::attention_backward(
                        rs, &exact[0], &exact[1], &exact[2], &exact[3],
                    );
                    let expected = [o, dq, dk, dv];
                    let (out_tol, grad_tol) = match precision {
                        Precision::Fp32 => (1e-5, 1e-4),
                        Precision::Bf16 => (2e-2, 2e-2),
                    };
                    let mut results = Vec::new();
                    for attention in [Attention::Flash, Attention::Naive] {
                        if attention == Attention::Naive && !causal {
                            continue;
                        }
                        let got = run_core(rt, attention, act, shape, causal, &inputs);
                        for (i, name) in NAMES.iter().enumerate() {
                            let err = rel(&got.0[i], &expected[i]);
                            let tol = if i == 0 { out_tol } else { grad_tol };
                            worst.push((err / tol, format!("{attention} {precision} d{d} seq{seq} causal {causal} {name}: {err:e}")));
                            assert!(
                                err <= tol,
                                "{attention} {precision} d {d} seq {seq} causal {causal}: {name} off by {err:e} (tolerance {tol:e})"
                            );
                        }
                        results.push(got);
                    }
                    if let [flash, naive] = &results[..] {
                        for (i, name) in NAMES.iter().enumerate() {
                            let n64: Vec<f64> = naive.0[i].iter().map(|&x| x as f64).collect();
                            let err = rel(&flash.0[i], &n64);
                            let tol = if i == 0 { out_tol } else { grad_tol };
                            assert!(
                                err <= tol,
                                "flash against naive, {precision} d {d} seq {seq}: {name} off by {err:e}"
                            );
                        }
                    }
                }
            }
        }
    }
    worst.sort_by(|a, b| b.0.total_cmp(&a.0));
    for (_, line) in worst.iter().take(5) {
        eprintln!("closest to its tolerance: {line}");
    }
}

#[test]
#[cfg_attr(
    no_gpu,
    ignore = "needs an NVIDIA GPU: run with --include-ignored there, or build with GPU_TESTS=1"
)]
fn the_benchmark_counts_what_each_forward_leaves_to_the_byte() {
    let Some(rt) = runtime() else { return };
    let opts = AttentionBenchOptions {
        batch: 2,
        heads: 3,
        ds: vec![64],
        seqs: vec![300],
        precisions: vec![Precision::Fp32, Precision::Bf16],
        passes: 3,
        warmup: 1,
        ..AttentionBenchOptions::default()
    };
    let mut names = Vec::new();
    let rows = bench::run(&rt, &opts, |line| names.push(line.to_owned())).unwrap();
    assert_eq!(rows.len(), 4);
    for r in &rows {
        let AttentionOutcome::Ran(m) = &r.outcome else {
            panic!("{:?} did not run: {:?}", r.config, r.outcome)
        };
        let c = &r.config;
        let a = c.precision.activation_bytes() as u64;
        let n = (c.batch * c.heads * c.seq * c.d) as u64;
        let positions = (c.batch * c.heads * c.seq) as u64;
        // Q, K, V and the output, and P (naive) or L (flash).
        let kept = match c.attention {
            Attention::Naive => positions * c.seq as u64 * a,
            Attention::Flash => positions * 4,
        };
        assert_eq!(m.mem_before_bwd, 4 * n * a + kept, "{c:?}");
        assert!(m.peak > m.mem_before_bwd);
        assert_eq!((m.fwd_passes, m.bwd_passes), (3, 3));
        assert!(m.fwd_ms > 0.0 && m.bwd_ms > 0.0);
    }
    let v = bench::report::rows_json(&rows);
    assert_eq!(v.as_array().unwrap().len(), 4);
    assert!(v.as_array().unwrap().iter().all(|r| r["status"] == "OK"));
}
