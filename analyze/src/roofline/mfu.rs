//! Model FLOP utilisation (MFU): the FLOPs one step of the model needs by its arithmetic, done in
//! the step's time, as a fraction of the GPU's peak rate for the step's matrix products; hardware
//! FLOP utilisation (HFU) the same with the FLOPs the GPU did (a forward run again under
//! activation checkpointing included). `collect bench` rates its own steps with it and
//! `analyze profile` a trace's measured steps, so the two agree by construction.

use super::peaks::Peaks;
use super::{Dtype, Unit};

/// The compute roof of a run whose matrix products are of type `dtype` (FP32 ones in TF32 where
/// `tf32` and the GPU has it): which peak, and its TFLOP/s.
pub fn roof(peaks: &Peaks, dtype: Dtype, tf32: bool) -> (Unit, f64) {
    let unit = Unit::of(dtype, true, tf32, peaks);
    (unit, unit.peak(peaks))
}

/// `flops` done in `step_ns` as a fraction of `peak_tflops`; `None` without a time or a peak.
pub fn utilisation(flops: f64, step_ns: f64, peak_tflops: f64) -> Option<f64> {
    (step_ns > 0.0 && peak_tflops > 0.0).then(|| flops / step_ns / (peak_tflops * 1e3))
}

/// The TFLOP/s of `flops` done in `step_ns`.
pub fn tflops(flops: f64, step_ns: f64) -> Option<f64> {
    (step_ns > 0.0).then(|| flops / step_ns / 1e3)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::roofline::peaks::for_gpu;

    #[test]
    fn a_step_at_the_peak_is_one() {
        let h200 = for_gpu("NVIDIA H200").unwrap().peaks;
        let (unit, peak) = roof(&h200, Dtype::Bf16, false);
        assert_eq!((unit, peak), (Unit::Bf16, 989.5));
        // 989.5 TFLOP/s for 10 ms is 9.895e12 FLOPs.
        let u = utilisation(9.895e12, 1e7, peak).unwrap();
        assert!((u - 1.0).abs() < 1e-12, "{u}");
        assert_eq!(utilisation(1.0, 0.0, peak), None);
        assert!((tflops(9.895e12, 1e7).unwrap() - 989.5).abs() < 1e-9);
        assert_eq!(roof(&h200, Dtype::F32, true).0, Unit::Tf32);
        assert_eq!(roof(&h200, Dtype::F32, false).0, Unit::Fp32);
    }
}
