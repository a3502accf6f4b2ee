//! The snapshot model: what a PyTorch CUDA memory snapshot holds, in plain Rust.
//!
//! A [`Snapshot`] is what `torch.cuda.memory._dump_snapshot` saved: the allocator's segments and
//! blocks at the moment of the dump (the *end state*), the per-device trace of allocator events
//! recorded since `_record_memory_history` was switched on (the *window*), and the interned stack
//! frames both refer to. [`crate::formats::torch_snapshot`] reads a file into these types and
//! writes them back for `collect`; their enums are the snapshot's vocabulary, each with its
//! spelling in the file (`as_str`). Nothing here reads files or analyses anything: the analyses
//! over snapshots are in `crate::memory`. The trace model of GPU work is the sibling
//! [`super::trace`].

use std::sync::LazyLock;

use serde::Serialize;

pub use super::snapshot_trace::{DeviceTrace, Entries, Label, TraceEntry};

/// Index of a frame in [`Frames::frames`].
pub type FrameId = u32;

/// Index of a stack in the stack table it belongs to: in a snapshot's [`Frames::stacks`], where
/// stack 0 is always the empty stack, or in the table of the recorder that made it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct StackId(pub u32);

impl StackId {
    pub const EMPTY: StackId = StackId(0);
}

/// One frame of a recorded stack: a Python function (with a `.py` file and a line) or a C++
/// function (line 0, file often `??`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Frame {
    pub name: String,
    pub filename: String,
    pub line: i64,
}

impl Frame {
    pub fn is_python(&self) -> bool {
        let f = self.filename.to_ascii_lowercase();
        f.ends_with(".py") || f.ends_with(".pyx") || f.starts_with("<ipython") || f == "<string>"
    }

    /// A Python frame of the user's own code: not the standard library, not an installed
    /// package, not PyTorch itself.
    pub fn is_user_code(&self) -> bool {
        if !self.is_python() {
            return false;
        }
        let f = self.filename.replace('\\', "/").to_ascii_lowercase();
        !(f.contains("/site-packages/")
            || f.contains("/dist-packages/")
            || f.contains("/lib/python3")
            || f.contains("/torch/")
            || f.starts_with("<frozen"))
    }

    /// `nn.Module.__call__` (`_call_impl`), the boundary of a module call.
    pub fn is_module_call(&self) -> bool {
        self.is_python()
            && (self.name == "_call_impl" || self.name == "_wrapped_call_impl")
            && self
                .filename
                .replace('\\', "/")
                .ends_with("torch/nn/modules/module.py")
    }

    /// The ATen operator of a dispatcher frame: `mul_Tensor` for
    /// `at::_ops::mul_Tensor::call(...)`.
    pub fn aten_op(&self) -> Option<&str> {
        let i = self.name.find("at::_ops::")?;
        let rest = &self.name[i + "at::_ops::".len()..];
        let end = rest.find("::")?;
        Some(&rest[..end])
    }

    /// The autograd node of a backward frame: `MulBackward0` for
    /// `torch::autograd::generated::MulBackward0::apply(...)`.
    pub fn autograd_node(&self) -> Option<&str> {
        let name = self.name.split('(').next()?;
        let node = name.strip_suffix("::apply")?;
        let node = node.rsplit("::").next()?;
        (node.contains("Backward") || node == "AccumulateGrad").then_some(node)
    }

    /// `file.py:12 name` with the file's last path component (Windows or POSIX separators).
    pub fn short(&self) -> String {
        let base = self
            .filename
            .rsplit(['/', '\\'])
            .next()
            .unwrap_or(&self.filename);
        if self.line > 0 {
            format!("{base}:{} {}", self.line, self.name)
        } else if base.is_empty() || base == "??" {
            self.name.clone()
        } else {
            format!("{base} {}", self.name)
        }
    }
}

/// All frames and stacks of a snapshot, each stored once. Stacks list frames innermost first, as
/// PyTorch records them.
#[derive(Clone, Debug, PartialEq)]
pub struct Frames {
    pub frames: Vec<Frame>,
    pub stacks: Vec<Vec<FrameId>>,
}

impl Default for Frames {
    fn default() -> Self {
        Frames {
            frames: Vec::new(),
            stacks: vec![Vec::new()],
        }
    }
}

impl Frames {
    pub fn stack(&self, id: StackId) -> &[FrameId] {
        self.stacks.get(id.0 as usize).map_or(&[], |s| &s[..])
    }

    pub fn frame(&self, id: FrameId) -> &Frame {
        &self.frames[id as usize]
    }
}

/// A block's state in the end-state segments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockState {
    /// Held by a tensor.
    ActiveAllocated,
    /// Freed by its tensor but still in use by another stream's pending work (PyTorch's
    /// `record_stream`).
    ActivePendingFree,
    /// Cached, free for reuse.
    Inactive,
}

impl BlockState {
    /// As a snapshot spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            BlockState::ActiveAllocated => "active_allocated",
            BlockState::ActivePendingFree => "active_pending_free",
            BlockState::Inactive => "inactive",
        }
    }

    /// The state a snapshot's spelling names (`active_awaiting_free` is PyTorch 2.0's name for a
    /// pending free); `None` for any other text.
    pub fn from_name(name: &str) -> Option<BlockState> {
        match name {
            "active_allocated" => Some(BlockState::ActiveAllocated),
            "active_pending_free" | "active_awaiting_free" => Some(BlockState::ActivePendingFree),
            "inactive" => Some(BlockState::Inactive),
            _ => None,
        }
    }
}

/// A piece of a segment.
#[derive(Clone, Debug, PartialEq)]
pub struct Block {
    pub address: u64,
    /// The block's size as the allocator counts it (rounded, possibly more than requested).
    pub size: u64,
    /// What the caller asked for.
    pub requested_size: u64,
    pub state: BlockState,
    pub stack: StackId,
}

/// Which pool a segment belongs to: small (blocks of at most 1 MiB, 2 MiB segments) or large.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SegmentKind {
    Small,
    Large,
    Unknown,
}

impl SegmentKind {
    /// As a snapshot's `segment_type` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            SegmentKind::Small => "small",
            SegmentKind::Large => "large",
            SegmentKind::Unknown => "unknown",
        }
    }

    /// The kind a `segment_type` names; [`SegmentKind::Unknown`] for anything else.
    pub fn from_name(name: &str) -> SegmentKind {
        match name {
            "small" => SegmentKind::Small,
            "large" => SegmentKind::Large,
            _ => SegmentKind::Unknown,
        }
    }
}

/// One `cudaMalloc`ed (or, for expandable segments, mapped) range the allocator holds.
#[derive(Clone, Debug, PartialEq)]
pub struct Segment {
    pub device: i64,
    pub address: u64,
    pub total_size: u64,
    pub stream: u64,
    pub kind: SegmentKind,
    pub is_expandable: bool,
    /// Context of the allocation that made the segment.
    pub stack: StackId,
    /// In address order.
    pub blocks: Vec<Block>,
}

impl Segment {
    /// Sum of the active-allocated blocks (`allocated_size`).
    pub fn allocated_size(&self) -> u64 {
        self.sum(|b| b.state == BlockState::ActiveAllocated, |b| b.size)
    }

    /// Sum of the active blocks, pending frees included (`active_size`).
    pub fn active_size(&self) -> u64 {
        self.sum(|b| b.state != BlockState::Inactive, |b| b.size)
    }

    /// Sum of the requested sizes of active-allocated blocks (`requested_size`).
    pub fn requested_size(&self) -> u64 {
        self.sum(
            |b| b.state == BlockState::ActiveAllocated,
            |b| b.requested_size,
        )
    }

    fn sum(&self, keep: impl Fn(&Block) -> bool, size: impl Fn(&Block) -> u64) -> u64 {
        self.blocks.iter().filter(|b| keep(b)).map(size).sum()
    }

    /// For tests: a large segment of `size` bytes whose first `live` bytes are one allocated
    /// block, the rest one inactive block.
    #[cfg(test)]
    pub(crate) fn one_live_block(device: i64, address: u64, size: u64, live: u64) -> Segment {
        let block = |address, size, requested_size, state| Block {
            address,
            size,
            requested_size,
            state,
            stack: StackId::EMPTY,
        };
        Segment {
            device,
            address,
            total_size: size,
            stream: 0,
            kind: SegmentKind::Large,
            is_expandable: false,
            stack: StackId::EMPTY,
            blocks: vec![
                block(address, live, live, BlockState::ActiveAllocated),
                block(address + live, size - live, 0, BlockState::Inactive),
            ],
        }
    }
}

/// What a trace entry records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Alloc,
    FreeRequested,
    FreeCompleted,
    SegmentAlloc,
    SegmentFree,
    SegmentMap,
    SegmentUnmap,
    /// The moment a snapshot was taken.
    Snapshot,
    /// An out-of-memory error; `addr` holds the device's free bytes.
    Oom,
    /// An action this reader does not know; kept for counting, ignored by the analyses.
    Other,
}

impl Action {
    /// As a snapshot spells it (`other` for an action that had another name).
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Alloc => "alloc",
            Action::FreeRequested => "free_requested",
            Action::FreeCompleted => "free_completed",
            Action::SegmentAlloc => "segment_alloc",
            Action::SegmentFree => "segment_free",
            Action::SegmentMap => "segment_map",
            Action::SegmentUnmap => "segment_unmap",
            Action::Snapshot => "snapshot",
            Action::Oom => "oom",
            Action::Other => "other",
        }
    }

    /// The action a snapshot's spelling names; [`Action::Other`] for one this reader does not
    /// know.
    pub fn from_name(name: &str) -> Action {
        match name {
            "alloc" => Action::Alloc,
            "free_requested" => Action::FreeRequested,
            "free_completed" => Action::FreeCompleted,
            "segment_alloc" => Action::SegmentAlloc,
            "segment_free" => Action::SegmentFree,
            "segment_map" => Action::SegmentMap,
            "segment_unmap" => Action::SegmentUnmap,
            "snapshot" => Action::Snapshot,
            "oom" => Action::Oom,
            _ => Action::Other,
        }
    }
}

/// A `START`/`END` mark PyTorch adds around `Optimizer.step` and friends
/// (`external_annotations`, PyTorch 2.5+).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Annotation {
    pub device: Option<i64>,
    /// [`Stage`]'s spelling, or whatever else the file wrote.
    pub stage: String,
    pub name: String,
    pub time_us: Option<i64>,
}

/// Whether an [`Annotation`] opens or closes its span.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    Start,
    End,
}

impl Stage {
    /// As a snapshot spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Start => "START",
            Stage::End => "END",
        }
    }
}

/// The allocator settings saved with the snapshot (PyTorch 2.5+), as far as sizes depend on them.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct AllocatorSettings {
    /// `PYTORCH_CUDA_ALLOC_CONF` as it was.
    pub alloc_conf: Option<String>,
    /// Blocks at least this large are never split (`None`: no limit).
    pub max_split_size: Option<u64>,
    pub expandable_segments: bool,
    /// `roundup_power2_divisions` per size interval: index 0 is [1 MiB, 2 MiB), 1 is
    /// [2 MiB, 4 MiB), and so on; 0 means plain 512-byte rounding.
    pub roundup_power2_divisions: Vec<u64>,
}

/// How the file was laid out, for reporting which PyTorch generation wrote it.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SnapshotFormat {
    /// `dict` (PyTorch 2.x) or `segments list` (the oldest, `torch.cuda.memory_snapshot()`).
    pub layout: String,
    pub has_trace: bool,
    pub has_time: bool,
    pub has_allocator_settings: bool,
    pub has_annotations: bool,
    /// Top-level keys that were present but are not used (host allocator fields and the like).
    pub other_keys: Vec<String>,
}

/// A loaded `torch.cuda.memory._dump_snapshot` file.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    pub segments: Vec<Segment>,
    /// One trace per device, indexed by device number.
    pub traces: Vec<DeviceTrace>,
    pub annotations: Vec<Annotation>,
    pub settings: AllocatorSettings,
    pub frames: Frames,
    pub format: SnapshotFormat,
}

impl Snapshot {
    /// Devices that have segments or trace entries, in order.
    pub fn devices(&self) -> Vec<i64> {
        let mut d: Vec<i64> = self.segments.iter().map(|s| s.device).collect();
        d.extend(
            self.traces
                .iter()
                .enumerate()
                .filter(|(_, t)| !t.is_empty())
                .map(|(i, _)| i as i64),
        );
        d.sort_unstable();
        d.dedup();
        d
    }

    /// The trace of one device (empty when it has none).
    pub fn trace(&self, device: i64) -> &DeviceTrace {
        static NONE: LazyLock<DeviceTrace> = LazyLock::new(DeviceTrace::default);
        usize::try_from(device)
            .ok()
            .and_then(|d| self.traces.get(d))
            .unwrap_or(&NONE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_short_handles_windows_paths_and_cpp_frames() {
        let f = Frame {
            name: "forward".into(),
            filename: r"C:\Users\me\proj\model.py".into(),
            line: 42,
        };
        assert_eq!(f.short(), "model.py:42 forward");
        assert!(f.is_python());
        let c = Frame {
            name: "at::native::empty_cuda".into(),
            filename: "??".into(),
            line: 0,
        };
        assert_eq!(c.short(), "at::native::empty_cuda");
        assert!(!c.is_python());
    }
}
