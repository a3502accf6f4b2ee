//! The allocations live at a moment of the timeline (the peak, usually), largest first, each
//! with where it came from: its top user frame and a short stack.
//!
//! "Top user frame" is the innermost frame of the user's own Python code; when the allocation has
//! none (the autograd engine's thread, a C++-only stack) it is the autograd node (`MulBackward0`)
//! or the ATen operator (`aten::bmm`) that allocated, and for allocations made before recording
//! began it says so.

use serde::Serialize;

use super::inference::Categories;
use super::phases::{phase_of_stack, Phase};
use super::timeline::Timeline;
use crate::model::snapshot::{Frames, StackId};

/// One allocation live at the peak.
#[derive(Clone, Debug, Serialize)]
pub struct TopAllocation {
    /// Bytes the allocator counts for it.
    pub size: u64,
    /// Bytes the caller asked for.
    pub requested_size: u64,
    pub stream: u64,
    pub category: String,
    /// Where it came from, in one line.
    pub frame: String,
    /// A few frames, innermost first: the operator, then the user's Python frames.
    pub stack: Vec<String>,
    pub phase: Option<Phase>,
    /// When it was allocated, in µs since the window began (`None`: before recording, or no
    /// times in the trace).
    pub allocated_at_us: Option<f64>,
    pub before_recording: bool,
}

/// What [`top_frame`] says of an allocation made before recording began, its stack unknown.
pub const ALLOCATED_BEFORE_RECORDING: &str = "(allocated before recording)";
/// What [`top_frame`] says of an allocation of the window recorded without a stack.
pub const NO_STACK: &str = "(no stack recorded)";

/// Text naming a stack's origin in one line.
pub fn top_frame(frames: &Frames, stack: StackId, before_recording: bool) -> String {
    let s = frames.stack(stack);
    if s.is_empty() {
        return if before_recording {
            ALLOCATED_BEFORE_RECORDING
        } else {
            NO_STACK
        }
        .to_owned();
    }
    let frame = |i: &u32| frames.frame(*i);
    if let Some(f) = s.iter().map(frame).find(|f| f.is_user_code()) {
        return f.short();
    }
    if let Some(f) = s
        .iter()
        .map(frame)
        .find(|f| f.is_python() && !f.is_module_call())
    {
        return f.short();
    }
    if let Some(node) = s.iter().find_map(|i| frame(i).autograd_node()) {
        return match outer_op(frames, stack) {
            Some(op) => format!("{node} (aten::{op})"),
            None => node.to_owned(),
        };
    }
    if let Some(op) = outer_op(frames, stack) {
        return format!("aten::{op}");
    }
    s.iter()
        .map(frame)
        .find(|f| !is_allocator_internal(&f.name))
        .map_or_else(|| "(allocator)".to_owned(), |f| f.name.clone())
}

/// The outermost ATen operator before any Python frame: the one user code called.
fn outer_op(frames: &Frames, stack: StackId) -> Option<&str> {
    let s = frames.stack(stack);
    let end = s
        .iter()
        .position(|&i| frames.frame(i).is_python())
        .unwrap_or(s.len());
    s[..end]
        .iter()
        .rev()
        .find_map(|&i| frames.frame(i).aten_op())
}

fn is_allocator_internal(name: &str) -> bool {
    const SKIP: [&str; 8] = [
        "unwind",
        "CapturedTraceback",
        "gather_with_cpp",
        "CUDACachingAllocator",
        "empty_generic",
        "empty_cuda",
        "create_out",
        "??",
    ];
    SKIP.iter().any(|s| name.contains(s))
}

/// Up to `max` lines describing a stack, innermost first: the autograd node and operator, then
/// Python frames other than `nn.Module`'s call plumbing.
pub fn short_stack(frames: &Frames, stack: StackId, max: usize) -> Vec<String> {
    let s = frames.stack(stack);
    let mut out: Vec<String> = Vec::new();
    if let Some(node) = s.iter().find_map(|&i| frames.frame(i).autograd_node()) {
        out.push(node.to_owned());
    }
    if let Some(op) = outer_op(frames, stack) {
        out.push(format!("aten::{op}"));
    }
    for &i in s {
        if out.len() >= max {
            break;
        }
        let f = frames.frame(i);
        if f.is_python() && !f.is_module_call() {
            out.push(f.short());
        }
    }
    out.truncate(max);
    out
}

/// The `n` largest allocations live just after trace entry `entry` (`None`: the start, or the
/// end state when there is no trace), largest first.
pub fn top_allocations(
    frames: &Frames,
    timeline: &Timeline,
    categories: &Categories,
    entry: Option<usize>,
    n: usize,
) -> Vec<TopAllocation> {
    let t0 = timeline.first_time_us();
    let mut live: Vec<usize> = (0..timeline.allocations.len())
        .filter(|&i| timeline.allocations[i].live_after(entry))
        .collect();
    // Largest first; ties in allocation order.
    live.sort_by_key(|&i| (std::cmp::Reverse(timeline.allocations[i].size), i));
    live.truncate(n);
    live.into_iter()
        .map(|i| {
            let a = &timeline.allocations[i];
            let allocated_at_us = match (a.alloc_entry(), t0) {
                (Some(e), Some(t0)) => timeline.time_us(e).map(|t| t as f64 - t0 as f64),
                _ => None,
            };
            TopAllocation {
                size: a.size,
                requested_size: a.requested,
                stream: a.stream,
                category: categories.get(i).unwrap_or_default().to_owned(),
                frame: top_frame(frames, a.stack, a.before_recording()),
                stack: short_stack(frames, a.stack, 6),
                phase: phase_of_stack(frames, a.stack),
                allocated_at_us,
                before_recording: a.before_recording(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::snapshot::Frame;

    fn stack_of(frames: &mut Frames, fs: &[(&str, &str, i64)]) -> StackId {
        let mut ids = Vec::new();
        for (name, file, line) in fs {
            ids.push(frames.frames.len() as u32);
            frames.frames.push(Frame {
                name: (*name).into(),
                filename: (*file).into(),
                line: *line,
            });
        }
        frames.stacks.push(ids);
        StackId(frames.stacks.len() as u32 - 1)
    }

    #[test]
    fn top_frame_prefers_user_code_then_autograd_nodes() {
        let mut f = Frames::default();
        let fwd = stack_of(
            &mut f,
            &[
                ("at::_ops::bmm::redispatch(x)", "??", 0),
                ("at::_ops::bmm::call(x)", "??", 0),
                (
                    "einsum",
                    "/venv/lib/python3.12/site-packages/torch/functional.py",
                    373,
                ),
                ("forward", r"C:\work\model.py", 18),
            ],
        );
        assert_eq!(top_frame(&f, fwd, false), "model.py:18 forward");
        assert_eq!(
            short_stack(&f, fwd, 6),
            vec![
                "aten::bmm",
                "functional.py:373 einsum",
                "model.py:18 forward"
            ]
        );
        let bwd = stack_of(
            &mut f,
            &[
                ("at::_ops::mul_Tensor::redispatch(x)", "??", 0),
                ("at::_ops::mul_Tensor::call(x)", "??", 0),
                (
                    "torch::autograd::generated::MulBackward0::apply(std::vector<at::Tensor>&&)",
                    "??",
                    0,
                ),
            ],
        );
        assert_eq!(top_frame(&f, bwd, false), "MulBackward0 (aten::mul_Tensor)");
        assert_eq!(
            top_frame(&f, StackId::EMPTY, true),
            ALLOCATED_BEFORE_RECORDING
        );
    }
}
