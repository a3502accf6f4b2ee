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
//! The device is behind the [`Backend`] trait: [`CudaBackend`] (cudarc, driver API) on the GPU
//! and any fake in tests. While recording is on, every event goes to a [`TraceBuffer`] with the
//! current [`MemoryContext`] stack; [`CachingAllocator::snapshot`] gives state and history as
//! an [`AllocatorState`], which [`crate::memory_snapshot`] turns into a PyTorch snapshot.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use cudarc::driver::{result as cu, sys as cu_sys, CudaContext};

use analyze::memory::{Action, AllocatorSettings, BlockState, Frame, SegmentKind, StackId};

use crate::memory_history::{
    Annotation, Clock, FrameGuard, FrameId, MemoryContext, TraceBuffer, TraceEntry,
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

/// Segments from the CUDA driver (`cuMemAlloc`/`cuMemFree`) in one context. Built always; it
/// only touches the driver when used, so CPU-only builds and tests never load `libcuda`.
pub struct CudaBackend {
    ctx: Arc<CudaContext>,
}

impl CudaBackend {
    pub fn new(ctx: Arc<CudaContext>) -> CudaBackend {
        CudaBackend { ctx }
    }

    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }
}

impl Backend for CudaBackend {
    fn malloc(&mut self, bytes: u64) -> Result<u64, Oom> {
        let r = self.ctx.bind_to_thread().and_then(|()| {
            // SAFETY: the memory is handed out uninitialised, as PyTorch's allocator does; the
            // caller writes before reading.
            unsafe { cu::malloc_sync(bytes as usize) }
        });
        r.map_err(|e| Oom {
            bytes,
            message: if e.0 == cu_sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
                "CUDA out of memory".to_owned()
            } else {
                format!("cuMemAlloc failed: {e:?}")
            },
        })
    }

    fn free(&mut self, ptr: u64) {
        // Work queued on any stream may still use the segment: wait for it, as PyTorch does
        // before `cudaFree`. A failure here means the context is gone, and the memory with it.
        if self.ctx.synchronize().is_ok() {
            // SAFETY: `ptr` came from `malloc` above and is freed once (the allocator forgets it).
            let _ = unsafe { cu::free_sync(ptr) };
        }
    }

    fn device_free(&self) -> Option<u64> {
        self.ctx.bind_to_thread().ok()?;
        cu::mem_get_info().ok().map(|(free, _)| free as u64)
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
    pub trace: Vec<TraceEntry>,
    /// `frames[id]`.
    pub frames: Vec<Frame>,
    /// `stacks[id]`, innermost frame first.
    pub stacks: Vec<Vec<FrameId>>,
    pub settings: AllocatorSettings,
    pub annotations: Vec<Annotation>,
}

/// A counter with its peak since the last reset.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stat {
    pub current: u64,
    pub peak: u64,
}

impl Stat {
    fn add(&mut self, n: u64) {
        self.current += n;
        self.peak = self.peak.max(self.current);
    }

    fn sub(&mut self, n: u64) {
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

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Pool {
    Small,
    Large,
}

type BlockId = usize;

#[derive(Clone, Debug)]
struct Block {
    ptr: u64,
    size: u64,
    /// What the caller asked for when the block was last allocated.
    requested: u64,
    stream: StreamId,
    pool: Pool,
    allocated: bool,
    prev: Option<BlockId>,
    next: Option<BlockId>,
    stack: Option<StackId>,
}

impl Block {
    fn is_split(&self) -> bool {
        self.prev.is_some() || self.next.is_some()
    }

    fn key(&self) -> FreeKey {
        (self.stream, self.size, self.ptr)
    }
}

/// Free blocks are ordered as PyTorch's `BlockComparatorSize`: stream, size, address.
type FreeKey = (StreamId, u64, u64);

#[derive(Clone, Debug)]
struct Segment {
    size: u64,
    stream: StreamId,
    pool: Pool,
    stack: Option<StackId>,
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
    history: Option<TraceBuffer>,
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
        self.history = Some(TraceBuffer::new(max_entries));
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
    pub fn history(&self) -> Option<&TraceBuffer> {
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
        history.push(TraceEntry {
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

    fn block(&self, id: BlockId) -> &Block {
        self.blocks[id].as_ref().expect("live block id")
    }

    fn block_mut(&mut self, id: BlockId) -> &mut Block {
        self.blocks[id].as_mut().expect("live block id")
    }

    fn new_block(&mut self, b: Block) -> BlockId {
        match self.vacant.pop() {
            Some(id) => {
                self.blocks[id] = Some(b);
                id
            }
            None => {
                self.blocks.push(Some(b));
                self.blocks.len() - 1
            }
        }
    }

    fn delete_block(&mut self, id: BlockId) {
        self.blocks[id] = None;
        self.vacant.push(id);
    }

    fn free_set(&mut self, pool: Pool) -> &mut BTreeSet<FreeKey> {
        match pool {
            Pool::Small => &mut self.free_small,
            Pool::Large => &mut self.free_large,
        }
    }

    fn max_split(&self) -> u64 {
        self.config.max_split_size.unwrap_or(u64::MAX)
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

    /// A device segment for a request no cached block could serve, trying harder on failure as
    /// PyTorch does: release oversize cached blocks, then every unused segment.
    fn new_segment(
        &mut self,
        pool: Pool,
        rounded: u64,
        alloc_size: u64,
        stream: StreamId,
    ) -> Result<BlockId, String> {
        match self.alloc_segment(pool, alloc_size, stream) {
            Ok(id) => return Ok(id),
            Err(_) if self.release_oversize_blocks(pool, rounded, stream) => {
                if let Ok(id) = self.alloc_segment(pool, alloc_size, stream) {
                    return Ok(id);
                }
            }
            Err(_) => {}
        }
        self.release_cached_blocks();
        self.stats.alloc_retries += 1;
        self.alloc_segment(pool, alloc_size, stream)
    }

    fn out_of_memory(
        &mut self,
        requested: u64,
        rounded: u64,
        stream: StreamId,
        reason: String,
    ) -> OutOfMemory {
        self.stats.ooms += 1;
        let device_free = self.backend.device_free();
        if let Some(h) = self.history.as_mut() {
            let stack = self.context.current_stack();
            h.push(TraceEntry {
                action: Action::Oom,
                addr: 0,
                size: rounded,
                stream: stream.0,
                time_us: self.context.now_us(),
                stack,
                device_free: device_free.unwrap_or(0),
            });
        }
        OutOfMemory {
            requested,
            rounded,
            device: self.config.device,
            allocated: self.stats.allocated_bytes.current,
            reserved: self.stats.reserved_bytes.current,
            device_free,
            reason,
        }
    }

    /// Best fit among the free blocks of `stream` in `pool` (`get_free_block`).
    fn get_free_block(&mut self, pool: Pool, rounded: u64, stream: StreamId) -> Option<BlockId> {
        let max_split = self.max_split();
        let key = *self
            .free_set(pool)
            .range((stream, rounded, 0)..)
            .next()
            .filter(|k| k.0 == stream)?;
        let size = key.1;
        // An oversize block is kept for requests that are oversize too, and not given to one
        // that would leave 20 MiB or more of it unused.
        if rounded < max_split && size >= max_split {
            return None;
        }
        if rounded >= max_split && size >= rounded.saturating_add(LARGE_BUFFER) {
            return None;
        }
        self.free_set(pool).remove(&key);
        self.by_ptr.get(&key.2).copied()
    }

    /// Allocate a segment from the backend (`alloc_block`), as one free-standing block.
    fn alloc_segment(
        &mut self,
        pool: Pool,
        size: u64,
        stream: StreamId,
    ) -> Result<BlockId, String> {
        if let Some(limit) = self.config.memory_limit {
            if self.stats.reserved_bytes.current + size > limit {
                return Err(format!(
                    "the allocator's limit of {limit} bytes would be exceeded"
                ));
            }
        }
        let ptr = self.backend.malloc(size).map_err(|e| e.message)?;
        self.stats.device_allocs += 1;
        self.stats.reserved_bytes.add(size);
        self.stats.segments.add(1);
        let stack = self.record(Action::SegmentAlloc, ptr, size, stream);
        self.segments.insert(
            ptr,
            Segment {
                size,
                stream,
                pool,
                stack,
            },
        );
        let id = self.new_block(Block {
            ptr,
            size,
            requested: 0,
            stream,
            pool,
            allocated: false,
            prev: None,
            next: None,
            stack: None,
        });
        self.by_ptr.insert(ptr, id);
        Ok(id)
    }

    /// Should a free block of `block_size` be split to serve `rounded` (`should_split`)?
    fn should_split(&self, pool: Pool, block_size: u64, rounded: u64) -> bool {
        let remaining = block_size - rounded;
        match pool {
            Pool::Small => remaining >= MIN_BLOCK_SIZE,
            Pool::Large => rounded < self.max_split() && remaining > SMALL_SIZE,
        }
    }

    /// Hand out block `id` (already out of the free set), split off the remainder if worth it
    /// (`alloc_found_block`).
    fn alloc_found_block(&mut self, id: BlockId, rounded: u64, requested: u64) -> u64 {
        let (pool, size, ptr, stream) = {
            let b = self.block(id);
            (b.pool, b.size, b.ptr, b.stream)
        };
        let id = if self.should_split(pool, size, rounded) {
            // The new block takes the front; the old one becomes the remainder behind it.
            let prev = self.block(id).prev;
            let new = self.new_block(Block {
                ptr,
                size: rounded,
                requested: 0,
                stream,
                pool,
                allocated: false,
                prev,
                next: Some(id),
                stack: None,
            });
            if let Some(p) = prev {
                self.block_mut(p).next = Some(new);
            }
            let rest = self.block_mut(id);
            rest.prev = Some(new);
            rest.ptr += rounded;
            rest.size -= rounded;
            let (rest_ptr, rest_key) = (rest.ptr, rest.key());
            self.by_ptr.insert(ptr, new);
            self.by_ptr.insert(rest_ptr, id);
            self.free_set(pool).insert(rest_key);
            new
        } else {
            id
        };
        let stack = self.context_if_recording();
        let b = self.block_mut(id);
        b.allocated = true;
        b.requested = requested;
        b.stack = stack;
        let (size, ptr, stream) = (b.size, b.ptr, b.stream);
        self.stats.allocated_bytes.add(size);
        self.stats.requested_bytes.add(requested);
        self.stats.allocations.add(1);
        self.record(Action::Alloc, ptr, size, stream);
        ptr
    }

    fn context_if_recording(&self) -> Option<StackId> {
        if self.history.is_some() {
            self.context.current_stack()
        } else {
            None
        }
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

    /// Merge a newly free block with free neighbours and put it in its pool.
    fn free_block(&mut self, id: BlockId) {
        let (prev, next) = {
            let b = self.block(id);
            (b.prev, b.next)
        };
        for other in [prev, next].into_iter().flatten() {
            self.try_merge(id, other);
        }
        let b = self.block_mut(id);
        b.stack = None;
        let (pool, key) = (b.pool, b.key());
        self.free_set(pool).insert(key);
    }

    /// Absorb `src` (a neighbour of `dst`) into `dst` if it is free (`try_merge_blocks`).
    fn try_merge(&mut self, dst: BlockId, src: BlockId) {
        let s = self.block(src).clone();
        if s.allocated {
            return;
        }
        let pool = s.pool;
        self.free_set(pool).remove(&s.key());
        self.by_ptr.remove(&s.ptr);
        let d_prev = self.block(dst).prev;
        if d_prev == Some(src) {
            let old_ptr = self.block(dst).ptr;
            self.by_ptr.remove(&old_ptr);
            let d = self.block_mut(dst);
            d.ptr = s.ptr;
            d.prev = s.prev;
            d.size += s.size;
            if let Some(p) = s.prev {
                self.block_mut(p).next = Some(dst);
            }
            self.by_ptr.insert(s.ptr, dst);
        } else {
            let d = self.block_mut(dst);
            d.next = s.next;
            d.size += s.size;
            if let Some(n) = s.next {
                self.block_mut(n).prev = Some(dst);
            }
        }
        self.delete_block(src);
    }

    /// Release a whole free segment to the device (`release_block`).
    fn release_block(&mut self, id: BlockId) {
        let b = self.block(id).clone();
        debug_assert!(!b.allocated && !b.is_split());
        self.free_set(b.pool).remove(&b.key());
        self.by_ptr.remove(&b.ptr);
        self.delete_block(id);
        self.segments.remove(&b.ptr);
        self.backend.free(b.ptr);
        self.stats.device_frees += 1;
        self.stats.reserved_bytes.sub(b.size);
        self.stats.segments.sub(1);
        self.record(Action::SegmentFree, b.ptr, b.size, b.stream);
    }

    /// Free oversize cached blocks of `stream` until a request of `rounded` bytes could fit
    /// (`release_available_cached_blocks`); false when there is nothing to release.
    fn release_oversize_blocks(&mut self, pool: Pool, rounded: u64, stream: StreamId) -> bool {
        let max_split = self.max_split();
        if max_split == u64::MAX || pool == Pool::Small {
            return false;
        }
        let want = rounded.max(max_split);
        let single = self
            .free_large
            .range((stream, want, 0)..)
            .next()
            .filter(|k| k.0 == stream)
            .copied();
        if let Some(k) = single {
            if let Some(&id) = self.by_ptr.get(&k.2) {
                self.release_block(id);
                return true;
            }
        }
        // No single block is large enough: free oversize blocks, largest first.
        let candidates: Vec<FreeKey> = self
            .free_large
            .range((stream, max_split, 0)..(stream, want, 0))
            .rev()
            .copied()
            .collect();
        let mut released = 0;
        for k in candidates {
            if released >= want {
                break;
            }
            if let Some(&id) = self.by_ptr.get(&k.2) {
                if !self.block(id).is_split() {
                    self.release_block(id);
                    released += k.1;
                }
            }
        }
        released >= want
    }

    /// Release every cached segment with no block in use (`release_cached_blocks`).
    fn release_cached_blocks(&mut self) {
        let whole: Vec<BlockId> = self
            .free_large
            .iter()
            .chain(self.free_small.iter())
            .filter_map(|k| self.by_ptr.get(&k.2).copied())
            .filter(|&id| !self.block(id).is_split())
            .collect();
        for id in whole {
            self.release_block(id);
        }
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

impl<B: Backend> Drop for CachingAllocator<B> {
    fn drop(&mut self) {
        // Device memory outlives the process otherwise only until the context goes; give it back
        // now so that an allocator can be replaced within one run.
        for &ptr in self.segments.keys() {
            self.backend.free(ptr);
        }
    }
}
