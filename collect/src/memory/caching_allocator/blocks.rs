//! The caching allocator's blocks: free blocks ordered as PyTorch orders them, best fit, splitting
//! and merging within a segment, new segments from the [`Backend`] and their release when the
//! device runs out. Private to the allocator; every counter and history entry a change makes is
//! recorded here as it happens.

use std::collections::BTreeSet;

use analyze::model::snapshot::{Action, StackId};

use super::{
    Backend, CachingAllocator, OutOfMemory, StreamId, LARGE_BUFFER, MIN_BLOCK_SIZE, SMALL_SIZE,
};
use crate::memory::history::HistoryEntry;

/// PyTorch's two pools: requests up to [`SMALL_SIZE`] and the rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) enum Pool {
    Small,
    Large,
}

/// Index of a block in the allocator's block arena.
pub(super) type BlockId = usize;

/// A piece of a segment, free or handed out, linked to its neighbours in the segment.
#[derive(Clone, Debug)]
pub(super) struct Block {
    pub(super) ptr: u64,
    pub(super) size: u64,
    /// What the caller asked for when the block was last allocated.
    pub(super) requested: u64,
    pub(super) stream: StreamId,
    pub(super) pool: Pool,
    pub(super) allocated: bool,
    pub(super) prev: Option<BlockId>,
    pub(super) next: Option<BlockId>,
    pub(super) stack: Option<StackId>,
}

impl Block {
    pub(super) fn is_split(&self) -> bool {
        self.prev.is_some() || self.next.is_some()
    }

    pub(super) fn key(&self) -> FreeKey {
        (self.stream, self.size, self.ptr)
    }
}

/// Free blocks are ordered as PyTorch's `BlockComparatorSize`: stream, size, address.
pub(super) type FreeKey = (StreamId, u64, u64);

/// One device allocation, by its base address in the allocator's map.
#[derive(Clone, Debug)]
pub(super) struct Segment {
    pub(super) size: u64,
    pub(super) stream: StreamId,
    pub(super) pool: Pool,
    pub(super) stack: Option<StackId>,
}

impl<B: Backend> CachingAllocator<B> {
    pub(super) fn block(&self, id: BlockId) -> &Block {
        self.blocks[id].as_ref().expect("live block id")
    }

    pub(super) fn block_mut(&mut self, id: BlockId) -> &mut Block {
        self.blocks[id].as_mut().expect("live block id")
    }

    pub(super) fn new_block(&mut self, b: Block) -> BlockId {
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

    pub(super) fn delete_block(&mut self, id: BlockId) {
        self.blocks[id] = None;
        self.vacant.push(id);
    }

    pub(super) fn free_set(&mut self, pool: Pool) -> &mut BTreeSet<FreeKey> {
        match pool {
            Pool::Small => &mut self.free_small,
            Pool::Large => &mut self.free_large,
        }
    }

    pub(super) fn max_split(&self) -> u64 {
        self.config.max_split_size.unwrap_or(u64::MAX)
    }

    /// A device segment for a request no cached block could serve, trying harder on failure as
    /// PyTorch does: release oversize cached blocks, then every unused segment.
    pub(super) fn new_segment(
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

    pub(super) fn out_of_memory(
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
            h.push(HistoryEntry {
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
    pub(super) fn get_free_block(
        &mut self,
        pool: Pool,
        rounded: u64,
        stream: StreamId,
    ) -> Option<BlockId> {
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
    pub(super) fn alloc_segment(
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
    pub(super) fn should_split(&self, pool: Pool, block_size: u64, rounded: u64) -> bool {
        let remaining = block_size - rounded;
        match pool {
            Pool::Small => remaining >= MIN_BLOCK_SIZE,
            Pool::Large => rounded < self.max_split() && remaining > SMALL_SIZE,
        }
    }

    /// Hand out block `id` (already out of the free set), split off the remainder if worth it
    /// (`alloc_found_block`).
    pub(super) fn alloc_found_block(&mut self, id: BlockId, rounded: u64, requested: u64) -> u64 {
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

    pub(super) fn context_if_recording(&self) -> Option<StackId> {
        if self.history.is_some() {
            self.context.current_stack()
        } else {
            None
        }
    }

    /// Merge a newly free block with free neighbours and put it in its pool.
    pub(super) fn free_block(&mut self, id: BlockId) {
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
    pub(super) fn try_merge(&mut self, dst: BlockId, src: BlockId) {
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
    pub(super) fn release_block(&mut self, id: BlockId) {
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
    pub(super) fn release_oversize_blocks(
        &mut self,
        pool: Pool,
        rounded: u64,
        stream: StreamId,
    ) -> bool {
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
    pub(super) fn release_cached_blocks(&mut self) {
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
}
