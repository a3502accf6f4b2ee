//! The roofline: where a piece of work stands beside what the GPU could do. Its arithmetic
//! intensity (FLOPs per byte moved) against the ridge point (peak FLOP/s over peak bytes/s) says
//! which roof bounds it, compute or memory; its achieved FLOP/s over that roof
//! (min(peak FLOP/s, intensity × bandwidth)) says how near it came.
//!
//! - [`flops`]: what an operator call costs, from its recorded shapes and types;
//! - [`peaks`]: the GPUs' peak rates and bandwidths, from their spec sheets;
//! - [`mfu`]: model and hardware FLOP utilisation of a step, for `analyze` and `collect` alike;
//! - `chart`: the log-log roofline chart (with the `analysis` feature).
//!
//! Which roof a piece of work is held to: matrix products and attention, the tensor peak of
//! their element type (BF16, FP16; for FP32, TF32 where their kernels ran TF32, the FP32 matrix
//! peak on GPUs that have one, else the FP32 vector peak, as cuBLAS's FFMA kernels run);
//! anything else, the FP32 vector peak. `--peak-tflops` and `--peak-tbps` replace the table's
//! figures.

#[cfg(feature = "analysis")]
pub mod chart;
pub mod flops;
pub mod mfu;
pub mod peaks;

use serde::Serialize;

use self::peaks::Peaks;

/// An element type, as PyTorch names it in recorded types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Dtype {
    F64,
    F32,
    Bf16,
    F16,
    F8,
    I64,
    I32,
    I16,
    I8,
    U8,
    Bool,
    C64,
    C128,
}

impl Dtype {
    /// A type as Kineto records it (`float`, `c10::BFloat16`, `long int`); `None` for a
    /// non-tensor (`Scalar`, `TensorList`, empty).
    pub fn of_torch(name: &str) -> Option<Dtype> {
        let d = match name.trim() {
            "float" => Dtype::F32,
            "double" => Dtype::F64,
            "c10::BFloat16" => Dtype::Bf16,
            "c10::Half" => Dtype::F16,
            "long int" | "long" | "int64_t" => Dtype::I64,
            "int" => Dtype::I32,
            "short int" | "short" => Dtype::I16,
            "signed char" => Dtype::I8,
            "unsigned char" => Dtype::U8,
            "bool" => Dtype::Bool,
            "c10::complex<float>" => Dtype::C64,
            "c10::complex<double>" => Dtype::C128,
            n if n.starts_with("c10::Float8") => Dtype::F8,
            _ => return None,
        };
        Some(d)
    }

    /// The element type a run's precision word names (`fp32`, `bf16`, ...); autocast's `bf16`
    /// is the type its matrix products run in.
    pub fn of_precision(word: &str) -> Option<Dtype> {
        match word {
            "fp32" | "tf32" => Some(Dtype::F32),
            "bf16" => Some(Dtype::Bf16),
            "fp16" => Some(Dtype::F16),
            _ => None,
        }
    }

    pub fn bytes(self) -> u64 {
        match self {
            Dtype::F64 | Dtype::I64 | Dtype::C64 => 8,
            Dtype::C128 => 16,
            Dtype::F32 | Dtype::I32 => 4,
            Dtype::Bf16 | Dtype::F16 | Dtype::I16 => 2,
            Dtype::F8 | Dtype::I8 | Dtype::U8 | Dtype::Bool => 1,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(
            self,
            Dtype::F64 | Dtype::F32 | Dtype::Bf16 | Dtype::F16 | Dtype::F8
        )
    }

    pub fn label(self) -> &'static str {
        match self {
            Dtype::F64 => "fp64",
            Dtype::F32 => "fp32",
            Dtype::Bf16 => "bf16",
            Dtype::F16 => "fp16",
            Dtype::F8 => "fp8",
            Dtype::I64 => "int64",
            Dtype::I32 => "int32",
            Dtype::I16 => "int16",
            Dtype::I8 => "int8",
            Dtype::U8 => "uint8",
            Dtype::Bool => "bool",
            Dtype::C64 => "complex64",
            Dtype::C128 => "complex128",
        }
    }
}

/// Which peak rate is a piece of work's compute roof.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    Bf16,
    Fp16,
    Tf32,
    Fp32Matrix,
    Fp32,
}

impl Unit {
    /// The roof of work of type `dtype`: on tensor cores when `matrix` (a product), in TF32
    /// when its FP32 kernels ran TF32.
    pub fn of(dtype: Dtype, matrix: bool, tf32: bool, peaks: &Peaks) -> Unit {
        match (dtype, matrix) {
            (Dtype::Bf16, true) => Unit::Bf16,
            (Dtype::F16, true) => Unit::Fp16,
            (Dtype::F32, true) if tf32 && peaks.tf32.is_some() => Unit::Tf32,
            (Dtype::F32, true) if peaks.fp32_matrix.is_some() => Unit::Fp32Matrix,
            _ => Unit::Fp32,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Unit::Bf16 => "bf16 tensor",
            Unit::Fp16 => "fp16 tensor",
            Unit::Tf32 => "tf32 tensor",
            Unit::Fp32Matrix => "fp32 matrix",
            Unit::Fp32 => "fp32 vector",
        }
    }

    /// The peak of this unit, TFLOP/s.
    pub fn peak(self, peaks: &Peaks) -> f64 {
        match self {
            Unit::Bf16 => peaks.bf16,
            Unit::Fp16 => peaks.fp16,
            Unit::Tf32 => peaks.tf32.unwrap_or(peaks.fp32),
            Unit::Fp32Matrix => peaks.fp32_matrix.unwrap_or(peaks.fp32),
            Unit::Fp32 => peaks.fp32,
        }
    }
}

/// Which roof bounds a piece of work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    Compute,
    Memory,
}

/// A piece of work under the roofs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Placement {
    pub achieved_tflops: Option<f64>,
    pub achieved_tbps: Option<f64>,
    /// FLOPs per byte moved.
    pub intensity: Option<f64>,
    pub bound: Option<Bound>,
    /// Achieved FLOP/s over the roof at its intensity (achieved bandwidth over the peak for work
    /// without FLOPs).
    pub roof_fraction: Option<f64>,
}

/// Where `flops` and `bytes` done in `ns` stand beside a compute roof of `tflops` and a memory
/// roof of `tbps`; what cannot be known (no cost, no time, no roofs) is `None`.
pub fn place(
    flops: Option<u64>,
    bytes: Option<u64>,
    ns: i64,
    tflops: Option<f64>,
    tbps: Option<f64>,
) -> Placement {
    if ns <= 0 {
        return Placement::default();
    }
    let secs = ns as f64 * 1e-9;
    let achieved_tflops = flops.map(|f| f as f64 / secs / 1e12);
    let achieved_tbps = bytes.map(|b| b as f64 / secs / 1e12);
    let intensity = match (flops, bytes) {
        (Some(f), Some(b)) if b > 0 => Some(f as f64 / b as f64),
        _ => None,
    };
    let (bound, roof_fraction) = match (intensity, tflops, tbps) {
        (Some(i), Some(peak), Some(bw)) if peak > 0.0 && bw > 0.0 => {
            if i >= peak / bw {
                (Some(Bound::Compute), achieved_tflops.map(|a| a / peak))
            } else {
                (Some(Bound::Memory), achieved_tbps.map(|a| a / bw))
            }
        }
        _ => (None, None),
    };
    Placement {
        achieved_tflops,
        achieved_tbps,
        intensity,
        bound,
        roof_fraction,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ridge_point_splits_compute_from_memory() {
        // 1 TFLOP and 1 GB in 10 ms: 100 TFLOP/s, 0.1 TB/s, 1000 FLOP/B.
        let p = place(
            Some(1_000_000_000_000),
            Some(1_000_000_000),
            10_000_000,
            Some(200.0),
            Some(4.0),
        );
        assert_eq!(p.intensity, Some(1000.0));
        assert_eq!(p.bound, Some(Bound::Compute));
        assert!((p.roof_fraction.unwrap() - 0.5).abs() < 1e-12);
        // 1 GFLOP and 1 GB in 1 ms: 1 TB/s of a 4 TB/s roof.
        let m = place(
            Some(1_000_000_000),
            Some(1_000_000_000),
            1_000_000,
            Some(200.0),
            Some(4.0),
        );
        assert_eq!(m.bound, Some(Bound::Memory));
        assert!((m.roof_fraction.unwrap() - 0.25).abs() < 1e-12);
        assert!((m.achieved_tbps.unwrap() - 1.0).abs() < 1e-12);
        let copy = place(
            Some(0),
            Some(1_000_000_000),
            1_000_000,
            Some(200.0),
            Some(4.0),
        );
        assert_eq!(copy.bound, Some(Bound::Memory));
        let unknown = place(Some(1), Some(1), 1, None, Some(4.0));
        assert_eq!((unknown.bound, unknown.roof_fraction), (None, None));
    }

    #[test]
    fn the_roof_follows_the_element_type_and_the_kernels() {
        let h200 = peaks::for_gpu("NVIDIA H200").unwrap().peaks;
        let mi300 = peaks::for_gpu("AMD Instinct MI300X").unwrap().peaks;
        assert_eq!(Unit::of(Dtype::Bf16, true, false, &h200), Unit::Bf16);
        assert_eq!(Unit::of(Dtype::F32, true, false, &h200), Unit::Fp32);
        assert_eq!(Unit::of(Dtype::F32, true, true, &h200), Unit::Tf32);
        assert_eq!(Unit::of(Dtype::F32, true, false, &mi300), Unit::Fp32Matrix);
        assert_eq!(Unit::of(Dtype::Bf16, false, false, &h200), Unit::Fp32);
        assert_eq!(Unit::Fp32.peak(&h200), 67.0);
    }
}
