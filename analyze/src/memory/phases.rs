//! Forward, backward and optimizer phases of a training step, found from the stacks PyTorch
//! recorded with each allocator event.
//!
//! A stack is *optimizer* when a Python frame lies under `torch/optim/` or is a `step`/`zero_grad`
//! in a file whose name contains `optim` (hand-written optimizers, as in CS336); *backward* when
//! it passes through the autograd engine (`torch::autograd::Engine`, a `…Backward0::apply` node,
//! `AccumulateGrad`) or a Python `backward`; *forward* when a Python `forward` or a module call
//! (`_call_impl`) is on it. The first that applies, in that order, wins. Entries with none of
//! these (frees from the allocator's own thread, the loss between forward and backward, traces
//! recorded without stacks) take the phase around them.
//!
//! This finds phases only where frames reveal them: a trace recorded with `stacks="python"` has
//! no C++ frames, and the autograd thread has no Python ones, so its backward shows as the gap
//! between forward and optimizer, which is how it is reported. With no frames at all, there are
//! no phases.

use serde::Serialize;

use crate::formats::torch_snapshot::PHASE_FRAME_FILE;
use crate::model::snapshot::{DeviceTrace, Frame, Frames, Snapshot, StackId, Stage};

/// Part of a training step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Forward,
    Backward,
    Optimizer,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Forward => "forward",
            Phase::Backward => "backward",
            Phase::Optimizer => "optimizer",
        }
    }
}

/// What one frame says about the phase.
fn frame_phase(f: &Frame) -> Option<Phase> {
    // `collect`'s snapshots name the phase in a frame of their own.
    if f.filename == PHASE_FRAME_FILE {
        return match f.name.as_str() {
            "forward" => Some(Phase::Forward),
            "backward" => Some(Phase::Backward),
            "optimizer" => Some(Phase::Optimizer),
            _ => None,
        };
    }
    if f.is_python() {
        let file = f.filename.replace('\\', "/");
        let base = file
            .rsplit('/')
            .next()
            .unwrap_or(&file)
            .to_ascii_lowercase();
        if file.contains("/torch/optim/")
            || (base.contains("optim") && (f.name == "step" || f.name == "zero_grad"))
        {
            return Some(Phase::Optimizer);
        }
        if f.name == "backward" {
            return Some(Phase::Backward);
        }
        if f.name == "forward" || f.name == "_call_impl" {
            return Some(Phase::Forward);
        }
        return None;
    }
    let n = &f.name;
    if n.starts_with("torch::autograd::Engine::")
        || n.contains("torch::autograd::AccumulateGrad")
        || n.contains("torch::autograd::python::PythonEngine")
        || is_backward_node(n)
    {
        return Some(Phase::Backward);
    }
    None
}

/// `torch::autograd::generated::MulBackward0::apply(...)` and the like.
fn is_backward_node(name: &str) -> bool {
    name.find("Backward")
        .map(|i| {
            let rest = &name[i + "Backward".len()..];
            let digits = rest.trim_start_matches(|c: char| c.is_ascii_digit());
            digits.starts_with("::apply") || digits.starts_with("_apply")
        })
        .unwrap_or(false)
}

/// The phase of every stack in `frames`, indexed by [`StackId`].
pub fn stack_phases(frames: &Frames) -> Vec<Option<Phase>> {
    let per_frame: Vec<Option<Phase>> = frames.frames.iter().map(frame_phase).collect();
    frames
        .stacks
        .iter()
        .map(|stack| {
            let mut best: Option<Phase> = None;
            for &f in stack {
                if let Some(p) = per_frame[f as usize] {
                    best = Some(best.map_or(p, |b| b.max(p)));
                    if p == Phase::Optimizer {
                        break;
                    }
                }
            }
            best
        })
        .collect()
}

/// A run of consecutive trace entries in one phase.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PhaseSpan {
    pub phase: Phase,
    pub first_entry: usize,
    pub last_entry: usize,
}

/// Phase spans of a trace. Runs shorter than `min_run` entries between two runs of one phase are
/// absorbed into them, so an odd frame does not split a phase.
pub fn spans(trace: &DeviceTrace, phase_of: &[Option<Phase>]) -> Vec<PhaseSpan> {
    let min_run = (trace.len() / 400).max(3);
    let mut spans: Vec<PhaseSpan> = Vec::new();
    for (i, stack) in trace.stacks().enumerate() {
        let p = phase_of.get(stack.0 as usize).copied().flatten();
        match (p, spans.last_mut()) {
            (Some(p), Some(last)) if last.phase == p => last.last_entry = i,
            (Some(p), _) => spans.push(PhaseSpan {
                phase: p,
                first_entry: i,
                last_entry: i,
            }),
            (None, Some(last)) => last.last_entry = i,
            (None, None) => {}
        }
    }
    // Absorb short interruptions (A, short B, A) into A.
    let mut merged: Vec<PhaseSpan> = Vec::with_capacity(spans.len());
    for s in spans {
        let short = s.last_entry + 1 - s.first_entry < min_run;
        match merged.last_mut() {
            Some(last) if last.phase == s.phase => last.last_entry = s.last_entry,
            Some(last) if short => last.last_entry = s.last_entry,
            _ => merged.push(s),
        }
    }
    // A short first span before a long one of another phase belongs to it.
    if merged.len() >= 2 && merged[0].last_entry + 1 - merged[0].first_entry < min_run {
        let first = merged.remove(0);
        merged[0].first_entry = first.first_entry;
    }
    // Entries before the first classified one take its phase.
    if let Some(first) = merged.first_mut() {
        first.first_entry = 0;
    }
    merged
}

/// Phase spans of one device's trace.
pub fn device_spans(snap: &Snapshot, device: i64) -> Vec<PhaseSpan> {
    spans(snap.trace(device), &stack_phases(&snap.frames))
}

/// A phase placed by the snapshot's `START`/`END` annotations rather than by trace entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct AnnotatedPhase {
    pub phase: Phase,
    pub start_us: i64,
    pub end_us: i64,
}

/// The phase an annotation names: `collect` writes `forward`, `backward` and `optimizer`;
/// PyTorch writes `Optimizer.step#AdamW.step` around an optimizer step.
fn annotation_phase(name: &str) -> Option<Phase> {
    match name {
        "forward" => Some(Phase::Forward),
        "backward" => Some(Phase::Backward),
        "optimizer" => Some(Phase::Optimizer),
        n if n.starts_with("Optimizer.step") => Some(Phase::Optimizer),
        _ => None,
    }
}

/// Phases bracketed by `START`/`END` annotations of `device` (or of no device), in time order.
/// They place a phase that made no allocator event (a fused optimizer step allocates nothing),
/// which the trace entries alone cannot show.
pub fn annotated_phases(snap: &Snapshot, device: i64) -> Vec<AnnotatedPhase> {
    let mut open: Vec<(Phase, &str, i64)> = Vec::new();
    let mut out = Vec::new();
    for a in &snap.annotations {
        if a.device.is_some_and(|d| d != device) {
            continue;
        }
        let (Some(phase), Some(t)) = (annotation_phase(&a.name), a.time_us) else {
            continue;
        };
        if a.stage == Stage::Start.as_str() {
            open.push((phase, a.name.as_str(), t));
        } else if a.stage == Stage::End.as_str() {
            if let Some(i) = open.iter().rposition(|(_, n, _)| *n == a.name) {
                let (phase, _, start) = open.remove(i);
                if t >= start {
                    out.push(AnnotatedPhase {
                        phase,
                        start_us: start,
                        end_us: t,
                    });
                }
            }
        }
    }
    out.sort_by_key(|p| p.start_us);
    out
}

/// The phase a single stack reveals (for one-off lookups; use [`stack_phases`] for many).
pub fn phase_of_stack(frames: &Frames, stack: StackId) -> Option<Phase> {
    let mut best: Option<Phase> = None;
    for &f in frames.stack(stack) {
        if let Some(p) = frame_phase(frames.frame(f)) {
            best = Some(best.map_or(p, |b| b.max(p)));
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn py(name: &str, file: &str) -> Frame {
        Frame {
            name: name.into(),
            filename: file.into(),
            line: 1,
        }
    }

    fn cpp(name: &str) -> Frame {
        Frame {
            name: name.into(),
            filename: "??".into(),
            line: 0,
        }
    }

    #[test]
    fn frames_name_their_phase() {
        assert_eq!(
            frame_phase(&py(
                "_multi_tensor_adam",
                "/x/site-packages/torch/optim/adam.py"
            )),
            Some(Phase::Optimizer)
        );
        assert_eq!(
            frame_phase(&py("step", r"C:\cs336\cs336_basics\optimizer.py")),
            Some(Phase::Optimizer)
        );
        assert_eq!(
            frame_phase(&cpp(
                "torch::autograd::generated::MulBackward0::apply(std::vector<at::Tensor>&&)"
            )),
            Some(Phase::Backward)
        );
        assert_eq!(
            frame_phase(&cpp(
                "torch::autograd::generated::SiluBackward0_apply_functional(x)"
            )),
            Some(Phase::Backward)
        );
        assert_eq!(
            frame_phase(&py("forward", "/home/u/model.py")),
            Some(Phase::Forward)
        );
        assert_eq!(frame_phase(&cpp("at::_ops::mul_Tensor::call(x)")), None);
    }
}
