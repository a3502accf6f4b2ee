//! What the caching allocator reports: its segments and blocks at one moment with its history
//! ([`AllocatorState`], in the allocator's own terms), its counters ([`MemoryStats`]) and its
//! errors. Plain data and the one method that fills it; no conversion to a file format here.

use analyze::model::snapshot::{AllocatorSettings, BlockState, Frame, SegmentKind, StackId};

use super::{Backend, CachingAllocator, Pool};
use crate::memory::history::{HistoryEntry, HistoryFrameId, PhaseAnnotation};

/// The allocation was refused: the device is out of memory, even after the cache was emptied.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "out of memory: tried to allocate {requested} bytes ({rounded} rounded) on device {device}; \
     {allocated} bytes allocated, {reserved} reserved by the caching allocator{}: {reason}",
    device_free.map(|f| format!(", {f} free on the device")).unwrap_or_default()
)]
pub struct OutOfMemory {
    pub requested: u64,
    pub rounded: u64,
    pub device: u32,
    pub allocated: u64,
    pub reserved: u64,
    pub device_free: Option<u64>,
    pub reason: String,
}

/// `free` got an address the allocator did not hand out (or already took back).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("free of 0x{ptr:x}, which is not an allocated block")]
pub struct UnknownPointer {
    pub ptr: u64,
}

/// One block of a segment, in address order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockInfo {
    pub address: u64,
    pub size: u64,
    pub requested_size: u64,
    pub state: BlockState,
    /// Context of the allocation that made the block active; `None` for free blocks or blocks
    /// allocated before recording started.
    pub stack: Option<StackId>,
}

/// One device allocation (`cudaMalloc`) of the allocator, with its blocks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentInfo {
    pub device: u32,
    pub address: u64,
    pub total_size: u64,
    pub stream: u64,
    /// The pool: [`SegmentKind::Small`] or [`SegmentKind::Large`].
    pub segment_type: SegmentKind,
    /// Context of the allocation that made the segment.
    pub stack: Option<StackId>,
    pub blocks: Vec<BlockInfo>,
}

/// The allocator's segments and blocks at one moment, and its history up to it: what
/// PyTorch's `torch.cuda.memory._snapshot()` reports, in the allocator's own terms (stacks are
/// indices into `stacks`, which has no empty stack; `None` stands for it).
#[derive(Clone, Debug)]
pub struct AllocatorState {
    /// Sorted by address.
    pub segments: Vec<SegmentInfo>,
    /// Device index of the trace.
    pub device: u32,
    /// Oldest first.
    pub trace: Vec<HistoryEntry>,
    /// `frames[id]`.
    pub frames: Vec<Frame>,
    /// `stacks[id]`, innermost frame first.
    pub stacks: Vec<Vec<HistoryFrameId>>,
    pub settings: AllocatorSettings,
    pub annotations: Vec<PhaseAnnotation>,
}

/// A counter with its peak since the last reset.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stat {
    pub current: u64,
    pub peak: u64,
}

impl Stat {
    pub(super) fn add(&mut self, n: u64) {
        self.current += n;
        self.peak = self.peak.max(self.current);
    }

    pub(super) fn sub(&mut self, n: u64) {
        self.current -= n;
    }
}

/// The allocator's counters (a subset of `torch.cuda.memory_stats()`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Bytes in blocks handed out: `memory_allocated()`, peak `max_memory_allocated()`.
    pub allocated_bytes: Stat,
    /// Bytes of all segments: `memory_reserved()`, peak `max_memory_reserved()`.
    pub reserved_bytes: Stat,
    /// Bytes the callers asked for (before rounding).
    pub requested_bytes: Stat,
    /// Blocks handed out.
    pub allocations: Stat,
    /// Segments held.
    pub segments: Stat,
    /// Allocations that needed the cache emptied first (`num_alloc_retries`).
    pub alloc_retries: u64,
    /// Allocations that failed (`num_ooms`).
    pub ooms: u64,
    /// Device allocations made (`num_device_alloc`).
    pub device_allocs: u64,
    /// Device frees made (`num_device_free`).
    pub device_frees: u64,
}

impl<B: Backend> CachingAllocator<B> {
    /// The allocator's state (segments and blocks) and, when recording, its history.
    pub fn snapshot(&self) -> AllocatorState {
        let mut segments = Vec::with_capacity(self.segments.len());
        for (&base, seg) in &self.segments {
            let mut blocks = Vec::new();
            let mut cursor = self.by_ptr.get(&base).copied();
            while let Some(id) = cursor {
                let b = self.block(id);
                blocks.push(BlockInfo {
                    address: b.ptr,
                    size: b.size,
                    requested_size: b.requested,
                    state: if b.allocated {
                        BlockState::ActiveAllocated
                    } else {
                        BlockState::Inactive
                    },
                    stack: if b.allocated { b.stack } else { None },
                });
                cursor = b.next;
            }
            segments.push(SegmentInfo {
                device: self.config.device,
                address: base,
                total_size: seg.size,
                stream: seg.stream.0,
                segment_type: match seg.pool {
                    Pool::Small => SegmentKind::Small,
                    Pool::Large => SegmentKind::Large,
                },
                stack: seg.stack,
                blocks,
            });
        }
        let (frames, stacks) = self.context.tables();
        AllocatorState {
            segments,
            device: self.config.device,
            trace: self
                .history
                .as_ref()
                .map(|h| h.entries().cloned().collect())
                .unwrap_or_default(),
            frames,
            stacks,
            settings: AllocatorSettings {
                // The equivalent `PYTORCH_CUDA_ALLOC_CONF`.
                alloc_conf: self
                    .config
                    .max_split_size
                    .map(|b| format!("max_split_size_mb:{}", b >> 20)),
                max_split_size: self.config.max_split_size,
                expandable_segments: false,
                roundup_power2_divisions: Vec::new(),
            },
            annotations: self.context.annotations(),
        }
    }
}
