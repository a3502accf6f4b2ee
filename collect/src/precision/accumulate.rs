//! The accumulation experiment (`mixed_precision_accumulation`): 0.01 added to an accumulator
//! 1000 times, for each pairing of accumulator format and value format, as the assignment's
//! PyTorch loop does (`s += x`). PyTorch adds two half-precision tensors in fp32 and rounds the
//! sum to the accumulator's format; an fp32 accumulator with an fp16 or bf16 value promotes the
//! value inside the add, and casting the value to fp32 first changes nothing: the cases differ
//! only where the rounding happens. The kernel (`accumulate_sums`) and [`emulate`] do exactly
//! that, one sequential sum per case.

use super::rounding::{round, In};
use crate::autocast::Float;
use crate::error::Result;
use crate::gpu::device_memory::DType;
use crate::gpu::ops::Runtime;

/// The value added.
pub const VALUE: f32 = 0.01;
/// How many times.
pub const STEPS: usize = 1000;
/// What the sum would be in exact arithmetic.
pub const EXACT: f64 = 10.0;

/// PyTorch's seven sums as the assignment prints them (`f"{s:.8f}"`), in [`CASES`]' order: the
/// values of `fixtures/collect/torch_precision_h200.json` with 8 decimals.
pub const PRINTED_BY_PYTORCH: [&str; 7] = [
    "10.00013351",
    "9.95312500",
    "10.00213623",
    "10.00213623",
    "4.00000000",
    "10.00976562",
    "10.00976562",
];

/// One pairing: `accumulator += value`, the value optionally cast to another format first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Case {
    /// As PyTorch's reference script names it (`fp32 += fp16 as fp32`).
    pub name: &'static str,
    pub accumulator: Float,
    pub value: Float,
    /// The format the value tensor is cast to before the loop (`x.type(torch.float32)`).
    pub cast: Option<Float>,
}

const fn case(name: &'static str, accumulator: Float, value: Float, cast: Option<Float>) -> Case {
    Case {
        name,
        accumulator,
        value,
        cast,
    }
}

/// The assignment's four cases and their bf16 counterparts, in the reference script's order.
pub const CASES: [Case; 7] = [
    case("fp32 += fp32", Float::F32, Float::F32, None),
    case("fp16 += fp16", Float::F16, Float::F16, None),
    case("fp32 += fp16", Float::F32, Float::F16, None),
    case(
        "fp32 += fp16 as fp32",
        Float::F32,
        Float::F16,
        Some(Float::F32),
    ),
    case("bf16 += bf16", Float::Bf16, Float::Bf16, None),
    case("fp32 += bf16", Float::F32, Float::Bf16, None),
    case(
        "fp32 += bf16 as fp32",
        Float::F32,
        Float::Bf16,
        Some(Float::F32),
    ),
];

/// The sum one case reached.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sum {
    pub case: Case,
    /// The accumulator at the end (a value of its format).
    pub value: f32,
}

impl Sum {
    /// With 8 decimals, as the assignment prints it (`f"{s:.8f}"`; Rust and Python both round
    /// the exact binary value half to even).
    pub fn printed(&self) -> String {
        format!("{:.8}", self.value as f64)
    }

    /// The sum minus 10.
    pub fn error(&self) -> f64 {
        self.value as f64 - EXACT
    }
}

/// The value as the case holds it in its loop: rounded to its format, then cast.
fn value_held(c: &Case) -> f32 {
    let x = round(c.value, VALUE);
    c.cast.map_or(x, |f| round(f, x))
}

/// The seven sums on the CPU, operation for operation as the kernel does them.
pub fn emulate() -> Vec<Sum> {
    CASES
        .iter()
        .map(|c| {
            let x = value_held(c);
            let acc_in = In(c.accumulator);
            let value = (0..STEPS).fold(0.0f32, |acc, _| acc_in.add(acc, x));
            Sum { case: *c, value }
        })
        .collect()
}

/// The kernel's format codes: accumulator, value, cast (`-1` for none), per case.
fn kernel_formats() -> Vec<i32> {
    CASES
        .iter()
        .flat_map(|c| {
            [
                c.accumulator.kernel_code(),
                c.value.kernel_code(),
                c.cast.map_or(-1, Float::kernel_code),
            ]
        })
        .collect()
}

/// The seven sums computed by `accumulate_sums` on the GPU, one thread.
pub fn on_gpu(rt: &Runtime) -> Result<Vec<Sum>> {
    let formats = rt.gpu.upload(DType::I32, &kernel_formats())?;
    let out = rt.gpu.memory.alloc(DType::F32, CASES.len())?;
    rt.accumulate_sums(VALUE, STEPS, formats.ptr(), CASES.len(), out.ptr())?;
    let sums: Vec<f32> = rt.gpu.download(out.ptr(), CASES.len())?;
    Ok(CASES
        .iter()
        .zip(sums)
        .map(|(c, value)| Sum { case: *c, value })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::precision::pytorch;

    #[test]
    fn the_emulation_prints_pytorchs_seven_values() {
        let printed: Vec<String> = emulate().iter().map(Sum::printed).collect();
        assert_eq!(printed, PRINTED_BY_PYTORCH);
    }

    #[test]
    fn the_emulation_equals_the_committed_pytorch_values_exactly() {
        let torch = pytorch::reference();
        for s in emulate() {
            let t = torch
                .accumulate(s.case.name)
                .unwrap_or_else(|| panic!("{} missing from the PyTorch fixture", s.case.name));
            assert_eq!(s.value as f64, t, "{}", s.case.name);
        }
    }

    #[test]
    fn cases_and_kernel_codes_line_up() {
        let codes = kernel_formats();
        assert_eq!(codes.len(), 3 * CASES.len());
        assert_eq!(&codes[9..12], &[0, 1, 0]); // fp32 += fp16 as fp32
        assert_eq!(&codes[12..15], &[2, 2, -1]); // bf16 += bf16
    }

    #[test]
    fn errors_are_against_ten() {
        let s = emulate();
        assert_eq!(s[4].error(), -6.0);
        assert!((s[0].error() - 1.3351440429688e-4).abs() < 1e-12);
    }
}
