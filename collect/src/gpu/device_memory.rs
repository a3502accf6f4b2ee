//! Device memory: every device allocation `collect` makes (weights, activations, gradients,
//! cuBLAS's workspace) goes through one [`DeviceMemory`], which counts bytes in use and the peak
//! (the numbers `torch.cuda.memory_allocated` and `max_memory_allocated` give) and hands the raw
//! requests to an [`Allocator`]. The default allocator is the driver's stream-ordered pool
//! ([`StreamOrderedAllocator`]); [`AllocatorKind::Caching`] puts the PyTorch-like caching
//! allocator in its place through its adapter ([`crate::gpu::caching`]), which depends on this
//! module and never the other way. Every buffer is allocated, used and freed on the main stream
//! (the optimizer's stream touches only the parameters, gradients and moments, which live as long
//! as the model), so a buffer freed in stream order is never in use by a later kernel. This module launches no kernels and opens no device.

use std::cell::Cell;
use std::rc::Rc;

use cudarc::driver::result as cu;
use cudarc::driver::sys;
use cudarc::driver::{CudaContext, CudaStream};

use crate::error::{CudaContext as _, Error, Result};

/// Where [`DeviceMemory`] takes device memory from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AllocatorKind {
    /// The driver's stream-ordered pool (`cuMemAllocAsync`), the fastest to set up.
    #[default]
    Pool,
    /// The PyTorch-like caching allocator over `cuMemAlloc`: realistic peaks, memory history.
    Caching,
}

impl AllocatorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            AllocatorKind::Pool => "pool",
            AllocatorKind::Caching => "caching",
        }
    }
}

impl std::fmt::Display for AllocatorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for AllocatorKind {
    type Err = Error;

    fn from_str(s: &str) -> Result<AllocatorKind> {
        match s {
            "pool" => Ok(AllocatorKind::Pool),
            "caching" => Ok(AllocatorKind::Caching),
            other => Err(Error::InvalidConfig(format!(
                "unknown allocator `{other}` (pool or caching)"
            ))),
        }
    }
}

/// Element type of a device buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    Bf16,
    I32,
}

impl DType {
    pub fn bytes(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::Bf16 => 2,
        }
    }
}

/// Raw device memory: what a caching allocator sits on, or replaces.
pub trait Allocator {
    /// `bytes` of device memory, usable in stream order from now on.
    fn allocate(&self, bytes: usize) -> Result<sys::CUdeviceptr>;
    /// Give back what [`Allocator::allocate`] returned; `bytes` is the size asked for.
    fn free(&self, ptr: sys::CUdeviceptr, bytes: usize);
    /// Return cached memory to the driver (after running out, before the next configuration).
    fn release_cached(&self) -> Result<()>;
}

/// The driver's default memory pool through `cuMemAllocAsync`/`cuMemFreeAsync` on our stream,
/// told to keep freed memory cached (release threshold at the maximum) so that the per-step
/// allocations of activations are cheap after the first step.
pub struct StreamOrderedAllocator {
    stream: sys::CUstream,
    pool: sys::CUmemoryPool,
}

impl StreamOrderedAllocator {
    pub(crate) fn new(ctx: &CudaContext, stream: &CudaStream) -> Result<StreamOrderedAllocator> {
        // SAFETY: the device handle comes from a live context.
        let pool = unsafe { cu::device::get_default_mem_pool(ctx.cu_device()) }
            .during("cuDeviceGetDefaultMemPool")?;
        let mut threshold = u64::MAX;
        // SAFETY: the attribute takes a u64 and `threshold` is one.
        unsafe {
            cu::mem_pool::set_attribute(
                pool,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                (&mut threshold as *mut u64).cast(),
            )
        }
        .during("cuMemPoolSetAttribute")?;
        Ok(StreamOrderedAllocator {
            stream: stream.cu_stream(),
            pool,
        })
    }
}

impl Allocator for StreamOrderedAllocator {
    fn allocate(&self, bytes: usize) -> Result<sys::CUdeviceptr> {
        // SAFETY: our stream is alive as long as the Gpu that owns this allocator.
        unsafe { cu::malloc_async(self.stream, bytes.max(1)) }.map_err(|e| {
            match Error::cuda("cuMemAllocAsync", e) {
                Error::OutOfMemory { .. } => Error::OutOfMemory {
                    what: format!("allocating {bytes} bytes"),
                },
                other => other,
            }
        })
    }

    fn free(&self, ptr: sys::CUdeviceptr, _bytes: usize) {
        // SAFETY: `ptr` came from `allocate` on the same stream and is freed once (Buffer::drop).
        // A failure here can only follow an earlier sticky error, which the next call reports.
        let _ = unsafe { cu::free_async(ptr, self.stream) };
    }

    fn release_cached(&self) -> Result<()> {
        // SAFETY: synchronising our own stream, then trimming the pool it allocates from.
        unsafe {
            cu::stream::synchronize(self.stream).during("cuStreamSynchronize")?;
            cu::mem_pool::trim_to(self.pool, 0).during("cuMemPoolTrimTo")
        }
    }
}

/// Bytes in use and the most in use since the last reset, counted over our own allocations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceMemoryStats {
    pub in_use: u64,
    pub peak: u64,
    pub allocations: u64,
}

struct MemoryInner {
    allocator: Box<dyn Allocator>,
    stats: Cell<DeviceMemoryStats>,
}

/// The one place device memory comes from. Cheap to clone (a shared handle).
#[derive(Clone)]
pub struct DeviceMemory {
    inner: Rc<MemoryInner>,
}

impl DeviceMemory {
    pub fn with_allocator(allocator: Box<dyn Allocator>) -> DeviceMemory {
        DeviceMemory {
            inner: Rc::new(MemoryInner {
                allocator,
                stats: Cell::new(DeviceMemoryStats::default()),
            }),
        }
    }

    /// An uninitialised buffer of `len` elements of `dtype`.
    pub fn alloc(&self, dtype: DType, len: usize) -> Result<Buffer> {
        let bytes = len * dtype.bytes();
        let ptr = self.inner.allocator.allocate(bytes)?;
        let mut s = self.inner.stats.get();
        s.in_use += bytes as u64;
        s.peak = s.peak.max(s.in_use);
        s.allocations += 1;
        self.inner.stats.set(s);
        Ok(Buffer {
            ptr,
            len,
            dtype,
            memory: self.clone(),
        })
    }

    pub fn stats(&self) -> DeviceMemoryStats {
        self.inner.stats.get()
    }

    /// Start counting the peak again from what is in use now.
    pub fn reset_peak(&self) {
        let mut s = self.inner.stats.get();
        s.peak = s.in_use;
        self.inner.stats.set(s);
    }

    pub fn release_cached(&self) -> Result<()> {
        self.inner.allocator.release_cached()
    }
}

/// A device allocation; freed (in stream order) when dropped.
pub struct Buffer {
    ptr: sys::CUdeviceptr,
    len: usize,
    dtype: DType,
    memory: DeviceMemory,
}

impl Buffer {
    /// Device address of the first element.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// Device address of element `i`.
    pub fn at(&self, i: usize) -> u64 {
        debug_assert!(i <= self.len);
        self.ptr + (i * self.dtype.bytes()) as u64
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn bytes(&self) -> usize {
        self.len * self.dtype.bytes()
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        let bytes = self.bytes();
        self.memory.inner.allocator.free(self.ptr, bytes);
        let mut s = self.memory.inner.stats.get();
        s.in_use -= bytes as u64;
        self.memory.inner.stats.set(s);
    }
}
