//! The caching allocator ([`crate::caching_allocator`]) as the source of [`DeviceMemory`]'s
//! buffers: every request goes to one shared [`CachingAllocator`] over the CUDA driver, tagged
//! with our stream, so blocks are rounded, split, cached and reused as PyTorch's allocator does
//! them and the peaks are the ones PyTorch would report.
//!
//! The allocator is shared between this adapter (which `DeviceMemory` owns) and the benchmark,
//! which resets its peak, switches history recording on and off and takes the snapshot
//! ([`SharedCaching`]). Everything runs on one thread and one stream, so a `RefCell` is all the
//! locking needed and a block freed in stream order can be handed out again at once. The
//! allocator's own segments are freed with `cuMemFree` when it is emptied or dropped; nothing
//! here launches work.
//!
//! [`DeviceMemory`]: crate::device::DeviceMemory

use std::cell::RefCell;
use std::rc::Rc;

use cudarc::driver::sys;

use crate::caching_allocator::{CachingAllocator, CudaBackend, StreamId};
use crate::device::Allocator;
use crate::error::{Error, Result};

/// The one caching allocator of a [`crate::device::Gpu`].
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
