//! `collect precision` on the GPU: each kernel of `kernels/precision.cu` against its CPU emulation
//! (`collect::precision`), which the unit tests check against PyTorch, and against PyTorch's own
//! numbers where the fixture has them; our fp16 and bf16 conversions against the hardware's
//! `cvt` instructions. Skipped, with a message, where there is no device.

use collect::autocast::Float;
use collect::gpu::device_memory::DType;
use collect::gpu::ops::Runtime;
use collect::precision::{accumulate, layernorm, pytorch, rounding, toy};

use super::runtime;

/// Equal bits, or both NaN (the GPU's NaN and the CPU's differ in sign and payload).
fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

#[test]
#[cfg_attr(
    no_gpu,
    ignore = "needs an NVIDIA GPU: run with --include-ignored there, or build with GPU_TESTS=1"
)]
fn accumulate_equals_the_emulation_and_pytorch_to_every_digit() {
    let Some(rt) = runtime() else { return };
    let gpu = accumulate::on_gpu(&rt).unwrap();
    let cpu = accumulate::emulate();
    let torch = pytorch::reference();
    for (g, c) in gpu.iter().zip(&cpu) {
        assert_eq!(g.value.to_bits(), c.value.to_bits(), "{}", g.case.name);
        assert_eq!(
            Some(g.value as f64),
            torch.accumulate(g.case.name),
            "{}",
            g.case.name
        );
    }
    let printed: Vec<String> = gpu.iter().map(accumulate::Sum::printed).collect();
    assert_eq!(printed, accumulate::PRINTED_BY_PYTORCH);
}

#[test]
#[cfg_attr(
    no_gpu,
    ignore = "needs an NVIDIA GPU: run with --include-ignored there, or build with GPU_TESTS=1"
)]
fn layernorm_statistics_equal_the_emulation_bit_for_bit() {
    let Some(rt) = runtime() else { return };
    let gpu = layernorm::on_gpu(&rt).unwrap();
    let cpu = layernorm::emulate();
    assert_eq!(gpu.len(), cpu.len());
    for (g, c) in gpu.iter().zip(&cpu) {
        let what = format!("{} in {}", g.input.name, g.format);
        let (a, b) = (&g.computed, &c.computed);
        for (name, x, y) in [
            ("mean", a.mean, b.mean),
            ("mean of squares", a.mean_sq, b.mean_sq),
            ("naive variance", a.var_naive, b.var_naive),
            ("two-pass variance", a.var_two_pass, b.var_two_pass),
        ] {
            assert!(
                same(x, y),
                "{what}: {name} {x:e} on the GPU, {y:e} emulated"
            );
        }
        for (x, y) in a
            .y_naive
            .iter()
            .zip(&b.y_naive)
            .chain(a.y_two_pass.iter().zip(&b.y_two_pass))
        {
            assert!(
                same(*x, *y),
                "{what}: output {x:e} on the GPU, {y:e} emulated"
            );
        }
    }
    // The acceptance point: fp16 fails on an input where bf16 does not.
    let find = |format: Float| {
        gpu.iter()
            .find(|r| r.input.name == "N(0,16^2)" && r.format == format)
            .unwrap()
    };
    let (h, b) = (find(Float::F16), find(Float::Bf16));
    assert!(!h.computed.var_two_pass.is_finite());
    assert!(b.output_two_pass_error() < 0.02);
}

#[test]
#[cfg_attr(
    no_gpu,
    ignore = "needs an NVIDIA GPU: run with --include-ignored there, or build with GPU_TESTS=1"
)]
fn the_toy_has_pytorchs_dtypes_and_the_emulations_values() {
    let Some(rt) = runtime() else { return };
    let torch = pytorch::reference();
    for low in toy::AUTOCASTS {
        let gpu = toy::on_gpu(&rt, low).unwrap();
        let cpu = toy::emulate(low);
        for (tensor, dtype) in gpu.dtypes() {
            assert_eq!(
                Some(dtype.torch_name()),
                torch.toy_dtype(low, tensor),
                "{low} {tensor}"
            );
        }
        assert!(gpu.values_fit_their_formats(), "{low}");
        // The forward up to the logits has no exp or log: bit for bit.
        let (g, c) = (&gpu.outputs, &cpu.outputs);
        for (name, a, b) in [
            ("fc1 output", &g.fc1_out, &c.fc1_out),
            ("layer norm output", &g.ln_out, &c.ln_out),
            ("logits", &g.logits, &c.logits),
        ] {
            assert!(
                a.iter().zip(b).all(|(x, y)| same(*x, *y)),
                "{low} {name}: {a:?} on the GPU, {b:?} emulated"
            );
        }
        // The loss and the gradients go through the device's expf and logf (within 2 ulp of the
        // CPU's), and a gradient through one rounding to the low format.
        assert!((g.loss - c.loss).abs() <= 1e-5 * c.loss.abs(), "{low} loss");
        let tol = 2.0 * low.epsilon() as f32;
        for (name, a, b) in [
            ("dw1", &g.dw1, &c.dw1),
            ("dw2", &g.dw2, &c.dw2),
            ("dln_w", &g.dln_w, &c.dln_w),
            ("dln_b", &g.dln_b, &c.dln_b),
        ] {
            let scale = b.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            for (x, y) in a.iter().zip(b) {
                assert!(
                    (x - y).abs() <= tol * scale,
                    "{low} {name}: {x:e} on the GPU, {y:e} emulated"
                );
            }
        }
    }
}

/// fp32 bit patterns that exercise both conversions: a spread over every exponent, and every
/// pattern near fp16's overflow (65504..65536), its smallest normal (2^-14) and the edge of
/// zero (2^-25), and bf16's ties.
fn conversion_inputs() -> Vec<f32> {
    let mut bits: Vec<u32> = (0..4_000_000u32)
        .map(|i| i.wrapping_mul(1_073_741_789))
        .collect();
    for (lo, hi) in [
        (0x477f_e000u32, 0x4780_1000u32),
        (0x387f_c000, 0x3880_4000),
        (0x32ff_f000, 0x3300_1000),
    ] {
        bits.extend(lo..hi);
        bits.extend((lo..hi).map(|b| b | 0x8000_0000));
    }
    bits.extend((0..0x1_0000u32).map(|h| (h << 16) | 0x8000));
    bits.into_iter().map(f32::from_bits).collect()
}

fn conversion_check(rt: &Runtime, input: &[f32]) -> [Vec<u16>; 4] {
    let gpu = &rt.gpu;
    let n = input.len();
    let x = gpu.upload(DType::F32, input).unwrap();
    // 2-byte outputs; DType::Bf16 is only their element size here.
    let outs: Vec<_> = (0..4)
        .map(|_| gpu.memory.alloc(DType::Bf16, n).unwrap())
        .collect();
    let widen_ours = gpu.memory.alloc(DType::F32, 65536).unwrap();
    let widen_hw = gpu.memory.alloc(DType::F32, 65536).unwrap();
    rt.fp_conversion_check(
        x.ptr(),
        n,
        outs[0].ptr(),
        outs[1].ptr(),
        outs[2].ptr(),
        outs[3].ptr(),
        widen_ours.ptr(),
        widen_hw.ptr(),
    )
    .unwrap();
    let widened: [Vec<f32>; 2] =
        [&widen_ours, &widen_hw].map(|b| gpu.download(b.ptr(), 65536).unwrap());
    for (h, (&a, &b)) in widened[0].iter().zip(&widened[1]).enumerate() {
        assert!(same(a, b), "fp16 {h:#06x}: ours {a:e}, cvt {b:e}");
        assert!(same(a, rounding::f16_to_f32(h as u16)), "fp16 {h:#06x}");
    }
    std::array::from_fn(|i| gpu.download(outs[i].ptr(), n).unwrap())
}

#[test]
#[cfg_attr(
    no_gpu,
    ignore = "needs an NVIDIA GPU: run with --include-ignored there, or build with GPU_TESTS=1"
)]
fn our_fp16_and_bf16_conversions_are_the_hardwares() {
    let Some(rt) = runtime() else { return };
    let input = conversion_inputs();
    let [f16_ours, f16_hw, bf16_ours, bf16_hw] = conversion_check(&rt, &input);
    let f16_nan = |h: u16| h & 0x7c00 == 0x7c00 && h & 0x3ff != 0;
    let bf16_nan = |h: u16| h & 0x7f80 == 0x7f80 && h & 0x7f != 0;
    let mut mismatches = Vec::new();
    for (i, &v) in input.iter().enumerate() {
        if v.is_nan() {
            // The hardware writes its canonical NaN, we keep the sign: both are NaN.
            assert!(
                f16_nan(f16_ours[i]) && f16_nan(f16_hw[i]),
                "{:#010x}",
                v.to_bits()
            );
            assert!(
                bf16_nan(bf16_ours[i]) && bf16_nan(bf16_hw[i]),
                "{:#010x}",
                v.to_bits()
            );
            continue;
        }
        if f16_ours[i] != f16_hw[i] || bf16_ours[i] != bf16_hw[i] {
            mismatches.push((
                v.to_bits(),
                f16_ours[i],
                f16_hw[i],
                bf16_ours[i],
                bf16_hw[i],
            ));
        }
        // The GPU's conversion is the CPU emulation's, bit for bit.
        assert_eq!(
            f16_ours[i],
            rounding::f32_to_f16(v),
            "{:#010x}",
            v.to_bits()
        );
        assert_eq!(
            bf16_ours[i],
            rounding::f32_to_bf16(v),
            "{:#010x}",
            v.to_bits()
        );
    }
    assert!(
        mismatches.is_empty(),
        "{} of {} differ from cvt.rn, first (bits, ours f16, cvt f16, ours bf16, cvt bf16): {:x?}",
        mismatches.len(),
        input.len(),
        &mismatches[..mismatches.len().min(8)]
    );
}
