//! The caching allocator ([`crate::memory::caching_allocator`]) on the GPU: [`CudaBackend`] gives
//! it segments from the CUDA driver, and [`CachingDeviceAllocator`] makes it the source of
//! [`DeviceMemory`]'s buffers: every request goes to one shared [`CachingAllocator`], tagged with
//! our stream, so blocks are rounded, split, cached and reused as PyTorch's allocator does them
//! and the peaks are the ones PyTorch would report.
//!
//! The allocator is shared between this adapter (which `DeviceMemory` owns) and the benchmark,
//! which resets its peak, switches history recording on and off and takes the snapshot
//! ([`SharedCaching`]). Everything runs on one thread, and every buffer is allocated, used and
//! freed on the main stream (the optimizer's stream only updates the persistent parameter
//! buffers), so a `RefCell` is all the locking needed and a block freed in stream order can be
//! handed out again at once. The
//! allocator's own segments are freed with `cuMemFree` when it is emptied or dropped; nothing
//! here launches work. This module depends on [`crate::gpu::device_memory`] (it implements its
//! [`Allocator`]) and on the allocator, never the other way.
//!
//! [`DeviceMemory`]: crate::gpu::device_memory::DeviceMemory

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use cudarc::driver::{result as cu, sys, CudaContext};

use crate::error::{Error, Result};
use crate::gpu::device_memory::Allocator;
use crate::memory::caching_allocator::{Backend, CachingAllocator, Oom, StreamId};

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
            message: if e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
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

/// The one caching allocator of a [`crate::gpu::device::Gpu`].
pub type SharedCaching = Rc<RefCell<CachingAllocator<CudaBackend>>>;

/// [`Allocator`] over a [`SharedCaching`], allocating for one stream.
pub struct CachingDeviceAllocator {
    inner: SharedCaching,
    stream: StreamId,
}

impl CachingDeviceAllocator {
    pub fn new(inner: SharedCaching, stream: StreamId) -> CachingDeviceAllocator {
        CachingDeviceAllocator { inner, stream }
    }
}

impl Allocator for CachingDeviceAllocator {
    fn allocate(&self, bytes: usize) -> Result<sys::CUdeviceptr> {
        self.inner
            .borrow_mut()
            .malloc(bytes as u64, self.stream)
            .map_err(|e| Error::OutOfMemory {
                what: e.to_string(),
            })
    }

    fn free(&self, ptr: sys::CUdeviceptr, _bytes: usize) {
        // Only addresses `allocate` returned reach here, once each (`Buffer::drop`), so the
        // allocator always knows them.
        let _ = self.inner.borrow_mut().free(ptr);
    }

    fn release_cached(&self) -> Result<()> {
        self.inner.borrow_mut().empty_cache();
        Ok(())
    }
}
