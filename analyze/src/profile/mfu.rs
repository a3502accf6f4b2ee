//! The model FLOP utilisation of the measured steps ([`crate::roofline::mfu`]): the FLOPs a step
//! needs, from `--model-flops-per-step`, else the run metadata `collect` writes (it knows its
//! parameters and tokens), else the operator view's count from the recorded shapes; the FLOPs
//! the GPU did, from the run metadata or the operator view; the step's time, the mean wall time
//! of the measured step ranges; the roof, the peak of the trace's GPU for the run's matrix
//! products (`--peak-tflops` over it).

use serde::Serialize;

use crate::formats::run_metadata::keys;
use crate::model::trace::Trace;
use crate::roofline::{mfu, peaks, Dtype};

use super::operators::OperatorView;
use super::{PhaseProfile, ProfileOptions};

/// MFU and HFU of one measured step (on one GPU).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Mfu {
    /// FLOPs one step needs by the model's arithmetic.
    pub model_flops_per_step: Option<f64>,
    /// `option`, `run metadata` or `operators`.
    pub model_flops_from: Option<&'static str>,
    /// FLOPs one step did, recomputation included.
    pub hardware_flops_per_step: Option<f64>,
    pub hardware_flops_from: Option<&'static str>,
    /// The mean wall time of a measured step.
    pub step_ns: f64,
    pub achieved_tflops: Option<f64>,
    /// The roof: its TFLOP/s and what it is (`NVIDIA H200 SXM, bf16 tensor`, `given`).
    pub peak_tflops: Option<f64>,
    pub peak: Option<String>,
    pub mfu: Option<f64>,
    pub hfu: Option<f64>,
}

/// A number of FLOPs the run metadata gives under `key`.
fn recorded(trace: &Trace, key: &str) -> Option<f64> {
    let v: f64 = trace.source.run.get(key)?.trim().parse().ok()?;
    (v.is_finite() && v > 0.0).then_some(v)
}

/// The MFU of the measured steps `step`; `None` without steps, or where no count of FLOPs is
/// known.
pub(super) fn of_steps(
    trace: &Trace,
    opts: &ProfileOptions,
    step: &PhaseProfile,
    view: Option<&OperatorView>,
    dtype: Dtype,
) -> Option<Mfu> {
    let step_ns = step.wall_ns_per_step.filter(|&t| t > 0.0)?;
    // The operator view counts what ran: FLOPs per measured step (per process).
    let counted = view.and_then(|v| {
        let flops: u64 = v.operators.iter().filter_map(|o| o.flops).sum();
        (flops > 0 && step.steps > 0).then(|| flops as f64 / step.steps as f64)
    });
    let model = match (
        opts.model_flops_per_step,
        recorded(trace, keys::MODEL_FLOPS_PER_STEP),
    ) {
        (Some(f), _) => Some((f, "option")),
        (None, Some(f)) => Some((f, "run metadata")),
        (None, None) => counted.map(|f| (f, "operators")),
    };
    let hardware = match recorded(trace, keys::HARDWARE_FLOPS_PER_STEP) {
        Some(f) => Some((f, "run metadata")),
        None => counted.map(|f| (f, "operators")),
    };
    if model.is_none() && hardware.is_none() {
        return None;
    }
    let tf32 = trace
        .source
        .run
        .get(keys::TF32)
        .is_some_and(|v| v == "true");
    let gpu = trace
        .gpus
        .iter()
        .map(|g| g.name.trim())
        .find(|n| !n.is_empty());
    let roof = match (opts.peak_tflops, gpu.and_then(peaks::for_gpu)) {
        (Some(f), _) => Some((f, "given".to_owned())),
        (None, Some(e)) => {
            let (unit, f) = mfu::roof(&e.peaks, dtype, tf32);
            Some((f, format!("{}, {}", e.name, unit.label())))
        }
        (None, None) => None,
    };
    let peak_tflops = roof.as_ref().map(|r| r.0);
    let rate = |f: Option<(f64, &str)>| {
        f.zip(peak_tflops)
            .and_then(|((f, _), p)| mfu::utilisation(f, step_ns, p))
    };
    Some(Mfu {
        model_flops_per_step: model.map(|m| m.0),
        model_flops_from: model.map(|m| m.1),
        hardware_flops_per_step: hardware.map(|h| h.0),
        hardware_flops_from: hardware.map(|h| h.1),
        step_ns,
        achieved_tflops: model.or(hardware).and_then(|f| mfu::tflops(f.0, step_ns)),
        peak_tflops,
        peak: roof.map(|r| r.1),
        mfu: rate(model),
        hfu: rate(hardware),
    })
}
