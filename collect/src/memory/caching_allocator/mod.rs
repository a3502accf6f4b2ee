//! Device memory through a caching allocator that behaves like PyTorch's
//! `CUDACachingAllocator` (c10/cuda/CUDACachingAllocator.cpp, native backend, no expandable
//! segments), so that the peaks `collect` reports are the peaks PyTorch would report for the same
//! sequence of tensor allocations.
//!
//! What it copies: requests rounded up to 512-byte multiples; a small pool (requests up to
//! 1 MiB, carved from 2 MiB segments) and a large pool (1-10 MiB requests get 20 MiB segments,
//! larger ones their size rounded up to 2 MiB); best fit by (stream, size, address) among free
//! blocks of the request's stream; splitting a block when the remainder is at least 512 bytes
//! (small pool) or more than 1 MiB (large pool); with `max_split_size` set, no splitting of
//! blocks at or above it and no handing out of such oversize blocks for smaller requests (or for
//! larger ones that would waste 20 MiB or more); merging a freed block with free neighbours of
//! its segment; on a failed device allocation, releasing oversize cached blocks, then every
//! unused segment, and trying again; `empty_cache`; `allocated`/`reserved`/`requested` byte
//! counters with peaks (`max_memory_allocated` is the peak of the allocated bytes, block sizes
//! counted as PyTorch counts them).
//!
//! What it leaves out: cross-stream use (`record_stream`, events), CUDA graphs, expandable
//! segments, garbage-collection thresholds, `roundup_power2_divisions` and thread safety (wrap it
//! in a `Mutex` to share it). A free is complete at once, so `free_requested` and
//! `free_completed` are recorded together.
//!
//! The device is behind the [`Backend`] trait: [`crate::gpu::caching::CudaBackend`] (cudarc,
//! driver API) on the GPU and any fake in tests, so this module never touches a device. While
//! recording is on, every event goes to a [`HistoryBuffer`] with the current [`MemoryContext`]
//! stack; [`CachingAllocator::snapshot`] gives state and history as an [`AllocatorState`], in the
//! allocator's own terms, which [`crate::memory::snapshot`] turns into a PyTorch snapshot.
//!
//! The block bookkeeping (finding, splitting, merging and releasing blocks) is in `blocks`; what
//! the allocator reports (state, counters, errors) in `state`.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use analyze::model::snapshot::{Action, StackId};

use crate::memory::history::{Clock, FrameGuard, HistoryBuffer, HistoryEntry, MemoryContext};

mod blocks;
mod state;

use blocks::{Block, BlockId, FreeKey, Pool, Segment};
pub use state::{
    AllocatorState, BlockInfo, MemoryStats, OutOfMemory, SegmentInfo, Stat, UnknownPointer,
};

/// Requests are rounded up to multiples of this (`kMinBlockSize`).
pub const MIN_BLOCK_SIZE: u64 = 512;
/// Largest request served from the small pool (`kSmallSize`).
pub const SMALL_SIZE: u64 = 1 << 20;
/// Segment size of the small pool (`kSmallBuffer`).
pub const SMALL_BUFFER: u64 = 2 << 20;
/// Segment size for large-pool requests under [`MIN_LARGE_ALLOC`] (`kLargeBuffer`).
pub const LARGE_BUFFER: u64 = 20 << 20;
/// Requests from this size on get a segment of their own size (`kMinLargeAlloc`).
pub const MIN_LARGE_ALLOC: u64 = 10 << 20;
/// Such segments are rounded up to multiples of this (`kRoundLarge`).
pub const ROUND_LARGE: u64 = 2 << 20;

/// The size of the block a request of `size` bytes gets (`round_size`).
pub fn round_size(size: u64) -> u64 {
    if size < MIN_BLOCK_SIZE {
        MIN_BLOCK_SIZE
    } else {
        size.div_ceil(MIN_BLOCK_SIZE) * MIN_BLOCK_SIZE
    }
}

/// The size of the segment allocated from the device for a rounded request that found no cached
/// block (`get_allocation_size`).
pub fn segment_size(rounded: u64) -> u64 {
    if rounded <= SMALL_SIZE {
        SMALL_BUFFER
    } else if rounded < MIN_LARGE_ALLOC {
        LARGE_BUFFER
    } else {
        rounded.div_ceil(ROUND_LARGE) * ROUND_LARGE
    }
}

/// A device allocation failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("device allocation of {bytes} bytes failed: {message}")]
pub struct Oom {
    pub bytes: u64,
    pub message: String,
}

/// Where segments come from: `cuMemAlloc`/`cuMemFree` on the GPU, a fake in tests.
pub trait Backend {
    /// Allocate `bytes` of device memory; the address on success.
    fn malloc(&mut self, bytes: u64) -> Result<u64, Oom>;
    /// Give back an allocation made by [`Backend::malloc`].
    fn free(&mut self, ptr: u64);
    /// Free device memory as the device reports it, for the `oom` trace entry.
    fn device_free(&self) -> Option<u64> {
        None
    }
}

/// A CUDA stream, identified as the snapshot identifies it (the `CUstream` handle as an
/// integer; 0 is the default stream).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamId(pub u64);

/// Settings that change what the allocator does. The default is PyTorch's: device 0, no
/// `max_split_size`, no limit, the system clock.
#[derive(Clone, Debug, Default)]
pub struct AllocatorConfig {
    /// Device index, as the snapshot records it.
    pub device: u32,
    /// PyTorch's `max_split_size_mb` in bytes; `None` is PyTorch's default (unlimited).
    pub max_split_size: Option<u64>,
    /// Cap on reserved bytes, as `torch.cuda.set_per_process_memory_fraction` sets one; `None`:
    /// whatever the device gives.
    pub memory_limit: Option<u64>,
    /// Source of `time_us`.
    pub clock: Clock,
}

/// The caching allocator. See the module documentation for what it does.
pub struct CachingAllocator<B: Backend> {
    backend: B,
    config: AllocatorConfig,
    blocks: Vec<Option<Block>>,
    vacant: Vec<BlockId>,
    /// Every block (free or allocated) by address.
    by_ptr: HashMap<u64, BlockId>,
    free_small: BTreeSet<FreeKey>,
    free_large: BTreeSet<FreeKey>,
    /// Segments by base address.
    segments: BTreeMap<u64, Segment>,
    stats: MemoryStats,
    context: MemoryContext,
    history: Option<HistoryBuffer>,
}

impl<B: Backend> CachingAllocator<B> {
    pub fn new(backend: B, config: AllocatorConfig) -> CachingAllocator<B> {
        let context = MemoryContext::new(config.clock.clone(), config.device);
        CachingAllocator {
            backend,
            config,
            blocks: Vec::new(),
            vacant: Vec::new(),
            by_ptr: HashMap::new(),
            free_small: BTreeSet::new(),
            free_large: BTreeSet::new(),
            segments: BTreeMap::new(),
            stats: MemoryStats::default(),
            context,
            history: None,
        }
    }

    pub fn backend(&self) -> &B {
        &self.backend
    }

    pub fn config(&self) -> &AllocatorConfig {
        &self.config
    }

    pub fn stats(&self) -> &MemoryStats {
        &self.stats
    }

    /// `torch.cuda.memory_allocated()`.
    pub fn memory_allocated(&self) -> u64 {
        self.stats.allocated_bytes.current
    }

    /// `torch.cuda.max_memory_allocated()`.
    pub fn max_memory_allocated(&self) -> u64 {
        self.stats.allocated_bytes.peak
    }

    /// `torch.cuda.memory_reserved()`.
    pub fn memory_reserved(&self) -> u64 {
        self.stats.reserved_bytes.current
    }

    /// `torch.cuda.max_memory_reserved()`.
    pub fn max_memory_reserved(&self) -> u64 {
        self.stats.reserved_bytes.peak
    }

    /// `torch.cuda.reset_peak_memory_stats()`: peaks restart from the current values.
    pub fn reset_peak_stats(&mut self) {
        let s = &mut self.stats;
        for stat in [
            &mut s.allocated_bytes,
            &mut s.reserved_bytes,
            &mut s.requested_bytes,
            &mut s.allocations,
            &mut s.segments,
        ] {
            stat.peak = stat.current;
        }
    }

    /// The current-context handle: clone it into the code that pushes frames.
    pub fn context(&self) -> &MemoryContext {
        &self.context
    }

    /// Push a module frame (`layers.3.attn`) onto the current context.
    pub fn push_frame(&self, name: &str) {
        self.context.push_module(name);
    }

    /// Push a phase frame (`forward`) onto the current context.
    pub fn push_phase(&self, name: &str) {
        self.context.push_phase(name);
    }

    /// Pop the innermost frame of the current context.
    pub fn pop_frame(&self) {
        self.context.pop();
    }

    /// A module frame popped when the guard drops.
    pub fn frame(&self, name: &str) -> FrameGuard {
        self.context.module(name)
    }

    /// A phase frame popped when the guard drops.
    pub fn phase(&self, name: &str) -> FrameGuard {
        self.context.phase(name)
    }

    /// Start recording history (`_record_memory_history(max_entries=...)`): every later event
    /// is kept, up to `max_entries` (the oldest are dropped beyond). Starting again clears what
    /// was recorded.
    pub fn start_recording(&mut self, max_entries: usize) {
        self.history = Some(HistoryBuffer::new(max_entries));
        self.context.set_annotating(false);
        self.context.set_annotating(true);
    }

    /// Stop recording and drop the history (`_record_memory_history(enabled=None)`).
    pub fn stop_recording(&mut self) {
        self.history = None;
        self.context.set_annotating(false);
    }

    pub fn is_recording(&self) -> bool {
        self.history.is_some()
    }

    /// The recorded history, when recording.
    pub fn history(&self) -> Option<&HistoryBuffer> {
        self.history.as_ref()
    }

    fn record(
        &mut self,
        action: Action,
        addr: u64,
        size: u64,
        stream: StreamId,
    ) -> Option<StackId> {
        let history = self.history.as_mut()?;
        let stack = self.context.current_stack();
        history.push(HistoryEntry {
            action,
            addr,
            size,
            stream: stream.0,
            time_us: self.context.now_us(),
            stack,
            device_free: 0,
        });
        stack
    }

    /// Allocate `size` bytes for use on `stream`; the device address.
    pub fn malloc(&mut self, size: u64, stream: StreamId) -> Result<u64, OutOfMemory> {
        let rounded = round_size(size);
        let pool = if rounded <= SMALL_SIZE {
            Pool::Small
        } else {
            Pool::Large
        };
        let alloc_size = segment_size(rounded);

        let found = match self.get_free_block(pool, rounded, stream) {
            Some(id) => Ok(id),
            None => self.new_segment(pool, rounded, alloc_size, stream),
        };
        let id = match found {
            Ok(id) => id,
            Err(reason) => return Err(self.out_of_memory(size, rounded, stream, reason)),
        };
        Ok(self.alloc_found_block(id, rounded, size))
    }

    /// Give back a block from [`CachingAllocator::malloc`]. The memory stays cached for later
    /// requests on the same stream.
    pub fn free(&mut self, ptr: u64) -> Result<(), UnknownPointer> {
        let id = match self.by_ptr.get(&ptr) {
            Some(&id) if self.block(id).allocated => id,
            _ => return Err(UnknownPointer { ptr }),
        };
        let (size, requested, stream) = {
            let b = self.block_mut(id);
            b.allocated = false;
            (b.size, b.requested, b.stream)
        };
        self.stats.allocated_bytes.sub(size);
        self.stats.requested_bytes.sub(requested);
        self.stats.allocations.sub(1);
        self.record(Action::FreeRequested, ptr, size, stream);
        // No stream uses are tracked, so the free completes at once (`free_block`).
        self.record(Action::FreeCompleted, ptr, size, stream);
        self.free_block(id);
        Ok(())
    }

    /// `torch.cuda.empty_cache()`: give every unused segment back to the device.
    pub fn empty_cache(&mut self) {
        self.release_cached_blocks();
    }

    /// Give every segment back to the device, blocks in use included: for tearing down. Every
    /// address handed out before is invalid afterwards.
    pub fn release_all(&mut self) {
        let segments = std::mem::take(&mut self.segments);
        for (ptr, seg) in segments {
            self.backend.free(ptr);
            self.stats.device_frees += 1;
            self.stats.reserved_bytes.sub(seg.size);
            self.stats.segments.sub(1);
            self.record(Action::SegmentFree, ptr, seg.size, seg.stream);
        }
        self.blocks.clear();
        self.vacant.clear();
        self.by_ptr.clear();
        self.free_small.clear();
        self.free_large.clear();
        self.stats.allocated_bytes.current = 0;
        self.stats.requested_bytes.current = 0;
        self.stats.allocations.current = 0;
    }
}

impl<B: Backend> Drop for CachingAllocator<B> {
    fn drop(&mut self) {
        // Device memory outlives the process otherwise only until the context goes; give it back
        // now so that an allocator can be replaced within one run.
        for &ptr in self.segments.keys() {
            self.backend.free(ptr);
        }
    }
}
