//! Memory by module: the bytes live at the peak and the allocations made over the recorded
//! window, grouped by the module or model function that each allocation's stack names.
//!
//! The rule, one name per stack, innermost frame first:
//!
//! 1. **A module frame** of `collect` ([`MODULE_FRAME_FILE`]) names its module path as recorded
//!    (`layers.3.attn.scores`).
//! 2. **A frame of the model's code** names `file.py:line function` ([`Frame::short`]): the
//!    user's own code, or an installed package that is neither PyTorch nor one of the libraries
//!    that wrap or implement layers ([`LAYER_LIBRARIES`]: accelerate's hooks, peft's adapters,
//!    bitsandbytes' quantised matmuls, einops, Triton, FlashAttention...). So a Hugging Face
//!    model's row is the line of `modeling_llama.py` that called the projection, whether the
//!    projection is `nn.Linear`, a LoRA layer or a 4-bit one, and a CS336 model's rows are the
//!    lines of its own `Linear.forward`, `softmax` and `scaled_dot_product_attention`. The line
//!    is part of the name because every module's method is called `forward`: the line tells the
//!    modules of one file apart, and the calls within one forward.
//! 3. Otherwise a fixed row: [`BEFORE_RECORDING`] for an allocation made before recording began
//!    whose stack is unknown (parameters and optimizer state, usually), [`NO_STACK`] for one
//!    made in the window without a stack, and [`NO_MODULE_FRAME`] for a stack none of whose
//!    frames names a module or the model's code: in PyTorch's snapshots the autograd engine's
//!    backward (C++ frames only), and stacks of library code alone.
//!
//! PyTorch's own frames (`torch/nn/modules/linear.py:125 forward`, `torch/functional.py einsum`,
//! `torch/optim/`) and the standard library's are passed over, so a row is never "every
//! `nn.Linear`": the name is where the model called it. Every allocation gets exactly one row,
//! so the bytes at the peak of all rows add up to the peak allocated bytes, to the byte.
//!
//! What frames cannot tell stays untold: the layers of a loop share their lines (PyTorch's
//! frames name a code location, not a module instance), and a model built only from PyTorch's
//! own modules shows as the line that called it. Categories ([`super::categories`]) tell what a
//! block is; this tells where in the model it was made.

use std::collections::HashMap;

use serde::Serialize;

use super::timeline::Timeline;
use crate::formats::torch_snapshot::MODULE_FRAME_FILE;
use crate::model::snapshot::{Frame, Frames, StackId};

/// The row of allocations made before recording began whose stack is unknown.
pub const BEFORE_RECORDING: &str = super::peak::ALLOCATED_BEFORE_RECORDING;
/// The row of allocations of the window recorded without a stack.
pub const NO_STACK: &str = super::peak::NO_STACK;
/// The row of stacks that name no module and none of the model's code.
pub const NO_MODULE_FRAME: &str = "(no module frame)";

/// Whether a row is one of the fixed rows, which name no module.
pub fn is_fixed_row(name: &str) -> bool {
    [BEFORE_RECORDING, NO_STACK, NO_MODULE_FRAME].contains(&name)
}

/// Installed libraries whose Python frames are a layer's machinery, not the model's structure:
/// wrappers of a module's call (accelerate's hooks, peft's adapters, type-checking decorators)
/// and kernels or tensor helpers called from a model's forward. Matched as a folder of the
/// frame's path.
pub const LAYER_LIBRARIES: [&str; 17] = [
    "accelerate",
    "apex",
    "beartype",
    "bitsandbytes",
    "deepspeed",
    "einops",
    "fairscale",
    "flash_attn",
    "jaxtyping",
    "liger_kernel",
    "opt_einsum",
    "peft",
    "torchao",
    "transformer_engine",
    "triton",
    "typeguard",
    "xformers",
];

/// One row of memory by module.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ModuleShare {
    /// The module path, `file.py:line function`, or a fixed row in parentheses.
    pub name: String,
    /// Bytes the allocator counts for this module's blocks live at the peak.
    pub bytes_at_peak: u64,
    /// How many of its blocks are live at the peak.
    pub blocks_at_peak: usize,
    /// Allocations made over the recorded window.
    pub allocations: usize,
    /// Bytes of those allocations, as the allocator counts them.
    pub bytes_allocated: u64,
}

/// Whether a Python frame is the model's code: the user's, or an installed package's that is
/// neither PyTorch, the standard library nor a [`LAYER_LIBRARIES`] one.
fn is_model_code(f: &Frame) -> bool {
    if !f.is_python() {
        return false;
    }
    let path = f.filename.replace('\\', "/").to_ascii_lowercase();
    if path
        .split('/')
        .any(|folder| LAYER_LIBRARIES.contains(&folder))
    {
        return false;
    }
    f.is_user_code()
        || ((path.contains("/site-packages/") || path.contains("/dist-packages/"))
            && !path.contains("/torch/"))
}

/// The module a frame names, if it names one.
pub fn module_of_frame(f: &Frame) -> Option<String> {
    if f.filename == MODULE_FRAME_FILE {
        Some(f.name.clone())
    } else if is_model_code(f) {
        Some(f.short())
    } else {
        None
    }
}

/// The row of a stack (see the module's rule).
pub fn module_of_stack(frames: &Frames, stack: StackId, before_recording: bool) -> String {
    let s = frames.stack(stack);
    if s.is_empty() {
        return if before_recording {
            BEFORE_RECORDING
        } else {
            NO_STACK
        }
        .to_owned();
    }
    s.iter()
        .find_map(|&f| module_of_frame(frames.frame(f)))
        .unwrap_or_else(|| NO_MODULE_FRAME.to_owned())
}

/// Memory by module of `timeline`: bytes live just after trace entry `peak` (`None`: the start,
/// or the end state when there is no trace) and the allocations of the window, one row per
/// module, largest at the peak first (then most allocated, then by name). Every allocation is in
/// one row, so the rows' `bytes_at_peak` sum to the allocated bytes at `peak`.
pub fn by_module(frames: &Frames, timeline: &Timeline, peak: Option<usize>) -> Vec<ModuleShare> {
    let mut rows: Vec<ModuleShare> = Vec::new();
    let mut row_of_name: HashMap<String, usize> = HashMap::new();
    // Per stack and origin: a stack is named once however many allocations share it.
    let mut row_of_stack: HashMap<(StackId, bool), usize> = HashMap::new();
    for a in &timeline.allocations {
        let before = a.before_recording();
        let row = *row_of_stack.entry((a.stack, before)).or_insert_with(|| {
            let name = module_of_stack(frames, a.stack, before);
            *row_of_name.entry(name.clone()).or_insert_with(|| {
                rows.push(ModuleShare {
                    name,
                    bytes_at_peak: 0,
                    blocks_at_peak: 0,
                    allocations: 0,
                    bytes_allocated: 0,
                });
                rows.len() - 1
            })
        });
        let r = &mut rows[row];
        if a.live_after(peak) {
            r.bytes_at_peak = r.bytes_at_peak.saturating_add(a.size);
            r.blocks_at_peak += 1;
        }
        if !before {
            r.allocations += 1;
            r.bytes_allocated = r.bytes_allocated.saturating_add(a.size);
        }
    }
    rows.sort_by(|a, b| {
        b.bytes_at_peak
            .cmp(&a.bytes_at_peak)
            .then(b.bytes_allocated.cmp(&a.bytes_allocated))
            .then_with(|| a.name.cmp(&b.name))
    });
    rows
}

/// The first `top` rows, and the others summed into one row named for how many they are
/// (`None` when there are no others): what tables and charts show, adding up to the same total.
pub fn top_and_rest(rows: &[ModuleShare], top: usize) -> (&[ModuleShare], Option<ModuleShare>) {
    let (shown, rest) = rows.split_at(top.min(rows.len()));
    let sum = (!rest.is_empty()).then(|| {
        rest.iter().fold(
            ModuleShare {
                name: format!("({} more modules)", rest.len()),
                bytes_at_peak: 0,
                blocks_at_peak: 0,
                allocations: 0,
                bytes_allocated: 0,
            },
            |mut sum, m| {
                sum.bytes_at_peak = sum.bytes_at_peak.saturating_add(m.bytes_at_peak);
                sum.blocks_at_peak += m.blocks_at_peak;
                sum.allocations += m.allocations;
                sum.bytes_allocated = sum.bytes_allocated.saturating_add(m.bytes_allocated);
                sum
            },
        )
    });
    (shown, sum)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::timeline::Allocation;

    fn frame(name: &str, filename: &str, line: i64) -> Frame {
        Frame {
            name: name.into(),
            filename: filename.into(),
            line,
        }
    }

    fn stack(frames: &mut Frames, fs: Vec<Frame>) -> StackId {
        let mut ids = Vec::new();
        for f in fs {
            ids.push(frames.frames.len() as u32);
            frames.frames.push(f);
        }
        frames.stacks.push(ids);
        StackId(frames.stacks.len() as u32 - 1)
    }

    const SITE: &str = "/venv/lib/python3.12/site-packages";

    fn call_impl() -> Frame {
        frame(
            "_call_impl",
            &format!("{SITE}/torch/nn/modules/module.py"),
            1790,
        )
    }

    #[test]
    fn the_innermost_frame_of_the_model_names_the_row() {
        let mut f = Frames::default();
        // CS336: an einsum in the model's own Linear.forward.
        let cs336 = stack(
            &mut f,
            vec![
                frame("at::_ops::bmm::call(x)", "??", 0),
                frame("einsum", &format!("{SITE}/torch/functional.py"), 373),
                frame("forward", "/home/me/cs336/model.py", 19),
                call_impl(),
                frame("forward", "/home/me/cs336/model.py", 58),
            ],
        );
        // Hugging Face through accelerate's hook and a 4-bit layer: the line of the model that
        // called the projection.
        let hf = stack(
            &mut f,
            vec![
                frame(
                    "forward",
                    &format!("{SITE}/bitsandbytes/autograd/_functions.py"),
                    509,
                ),
                frame("apply", &format!("{SITE}/torch/autograd/function.py"), 539),
                frame(
                    "forward",
                    &format!("{SITE}/bitsandbytes/nn/modules.py"),
                    468,
                ),
                frame("new_forward", &format!("{SITE}/accelerate/hooks.py"), 166),
                call_impl(),
                frame(
                    "forward",
                    &format!("{SITE}/transformers/models/llama/modeling_llama.py"),
                    216,
                ),
                frame("<module>", "/tmp/ipykernel_1/311.py", 21),
            ],
        );
        // `nn.Linear` called from a Windows user's model.
        let win = stack(
            &mut f,
            vec![
                frame(
                    "forward",
                    r"C:\Python312\Lib\site-packages\torch\nn\modules\linear.py",
                    125,
                ),
                frame("forward", r"C:\work\model.py", 30),
            ],
        );
        // collect's module path.
        let collect = stack(
            &mut f,
            vec![
                frame("layers.3.attn.scores", MODULE_FRAME_FILE, 0),
                frame("layers.3", MODULE_FRAME_FILE, 0),
                frame("forward", "collect/phase", 0),
            ],
        );
        // The autograd engine's thread: C++ frames only.
        let backward = stack(
            &mut f,
            vec![
                frame(
                    "torch::autograd::generated::MulBackward0::apply(x)",
                    "??",
                    0,
                ),
                frame("torch::autograd::Engine::thread_main(x)", "??", 0),
            ],
        );
        assert_eq!(module_of_stack(&f, cs336, false), "model.py:19 forward");
        assert_eq!(
            module_of_stack(&f, hf, false),
            "modeling_llama.py:216 forward"
        );
        assert_eq!(module_of_stack(&f, win, false), "model.py:30 forward");
        assert_eq!(module_of_stack(&f, collect, false), "layers.3.attn.scores");
        assert_eq!(module_of_stack(&f, backward, false), NO_MODULE_FRAME);
        assert_eq!(module_of_stack(&f, StackId::EMPTY, true), BEFORE_RECORDING);
        assert_eq!(module_of_stack(&f, StackId::EMPTY, false), NO_STACK);
    }

    #[test]
    fn rows_add_up_to_the_bytes_live_at_the_moment() {
        let mut f = Frames::default();
        let model = stack(&mut f, vec![frame("forward", "/home/me/model.py", 5)]);
        let alloc = |size: u64, stack: StackId, alloc_entry: Option<usize>, free_entry| {
            Allocation::new(size, size, 0, stack, alloc_entry, free_entry)
        };
        let tl = Timeline {
            allocations: vec![
                alloc(1000, StackId::EMPTY, None, None),
                alloc(512, model, Some(0), Some(2)),
                alloc(2048, model, Some(1), None),
                alloc(4096, StackId::EMPTY, Some(3), None),
            ],
            ..Timeline::default()
        };
        let rows = by_module(&f, &tl, Some(1));
        let at = |name: &str| rows.iter().find(|r| r.name == name).unwrap();
        assert_eq!(rows[0].name, "model.py:5 forward");
        assert_eq!(at("model.py:5 forward").bytes_at_peak, 2560);
        assert_eq!(at("model.py:5 forward").allocations, 2);
        assert_eq!(at(BEFORE_RECORDING).bytes_at_peak, 1000);
        assert_eq!(at(BEFORE_RECORDING).allocations, 0);
        assert_eq!(at(NO_STACK).bytes_at_peak, 0);
        assert_eq!(at(NO_STACK).bytes_allocated, 4096);
        let sum: u64 = rows.iter().map(|r| r.bytes_at_peak).sum();
        assert_eq!(sum, 3560);
    }
}
