//! The GPU: finding it, its context and the one stream all work runs on, and device memory.
//!
//! Every device allocation `collect` makes (weights, activations, gradients, cuBLAS's workspace)
//! goes through one [`DeviceMemory`], which counts bytes in use and the peak (the numbers
//! `torch.cuda.memory_allocated` and `max_memory_allocated` give) and hands the raw requests to an
//! [`Allocator`]. The default allocator is the driver's stream-ordered pool
//! ([`StreamOrderedAllocator`]); [`AllocatorKind::Caching`] puts PyTorch-like caching allocator
//! ([`crate::caching_device`]), which can record memory history, in its place. All work runs on
//! one stream, so a buffer freed in stream order is never in use by a later kernel. This module
//! launches no kernels.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

use cudarc::driver::result as cu;
use cudarc::driver::sys;
use cudarc::driver::{CudaContext, CudaStream};

use crate::caching_allocator::{AllocatorConfig, CachingAllocator, CudaBackend, StreamId};
use crate::caching_device::{CachingDeviceAllocator, SharedCaching};
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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
    fn new(ctx: &CudaContext, stream: &CudaStream) -> Result<StreamOrderedAllocator> {
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
pub struct MemoryStats {
    pub in_use: u64,
    pub peak: u64,
    pub allocations: u64,
}

struct MemoryInner {
    allocator: Box<dyn Allocator>,
    stats: Cell<MemoryStats>,
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
                stats: Cell::new(MemoryStats::default()),
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

    pub fn stats(&self) -> MemoryStats {
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

/// What is known about the device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    pub name: String,
    /// `(major, minor)`, e.g. `(9, 0)` on Hopper.
    pub compute_capability: (i32, i32),
    /// The kernel driver's version as `nvidia-smi` prints it, when readable, else the CUDA
    /// version the driver supports.
    pub driver: String,
    pub total_memory: u64,
    pub multiprocessors: i32,
}

/// The GPU: context, stream and memory. Fields drop in declaration order: memory before the
/// stream it frees on, the stream before the context.
pub struct Gpu {
    pub memory: DeviceMemory,
    /// The caching allocator behind `memory`, when it is the one in use.
    pub caching: Option<SharedCaching>,
    pub stream: Arc<CudaStream>,
    pub ctx: Arc<CudaContext>,
    pub info: DeviceInfo,
}

/// The number of CUDA devices, or why there are none (no driver library, a driver that does not
/// start, zero devices). Creates no context.
pub fn probe() -> Result<usize> {
    // SAFETY: only probes whether the driver library can be loaded.
    if !unsafe { sys::is_culib_present() } {
        return Err(Error::NoDevice {
            reason: "the CUDA driver library libcuda.so was not found".to_owned(),
        });
    }
    cu::init().map_err(|e| Error::NoDevice {
        reason: format!("cuInit failed: {e}"),
    })?;
    let count = cu::device::get_count().map_err(|e| Error::NoDevice {
        reason: format!("cuDeviceGetCount failed: {e}"),
    })?;
    if count < 1 {
        return Err(Error::NoDevice {
            reason: "the driver reports no devices".to_owned(),
        });
    }
    Ok(count as usize)
}

impl Gpu {
    /// Open device 0 with the stream-ordered pool, or say plainly why there is none.
    pub fn open() -> Result<Gpu> {
        Gpu::open_with(AllocatorKind::Pool)
    }

    /// Open device 0, taking device memory from `allocator`.
    pub fn open_with(allocator: AllocatorKind) -> Result<Gpu> {
        probe()?;
        let ctx = CudaContext::new(0).during("cuDevicePrimaryCtxRetain")?;
        // All work is on one stream and our buffers are raw pointers: cudarc's per-slice event
        // tracking would only add calls.
        // SAFETY: no cudarc CudaSlice is shared between streams in this program.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream().during("cuStreamCreate")?;
        let (memory, caching) = match allocator {
            AllocatorKind::Pool => (
                DeviceMemory::with_allocator(Box::new(StreamOrderedAllocator::new(&ctx, &stream)?)),
                None,
            ),
            AllocatorKind::Caching => {
                let shared: SharedCaching = Rc::new(RefCell::new(CachingAllocator::new(
                    CudaBackend::new(ctx.clone()),
                    AllocatorConfig::default(),
                )));
                let adapter = CachingDeviceAllocator::new(
                    shared.clone(),
                    StreamId(stream.cu_stream() as u64),
                );
                (
                    DeviceMemory::with_allocator(Box::new(adapter)),
                    Some(shared),
                )
            }
        };
        let info = DeviceInfo {
            name: ctx.name().during("cuDeviceGetName")?,
            compute_capability: ctx.compute_capability().during("cuDeviceGetAttribute")?,
            driver: driver_version(),
            total_memory: ctx.total_mem().during("cuDeviceTotalMem")? as u64,
            multiprocessors: ctx
                .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
                .during("cuDeviceGetAttribute")?,
        };
        Ok(Gpu {
            memory,
            caching,
            stream,
            ctx,
            info,
        })
    }

    pub fn synchronize(&self) -> Result<()> {
        self.stream.synchronize().during("cuStreamSynchronize")
    }

    /// Device memory in use by every process, as `nvidia-smi` counts it (total minus free).
    pub fn device_memory_used(&self) -> Result<u64> {
        let (free, total) = self.ctx.mem_get_info().during("cuMemGetInfo")?;
        Ok((total - free) as u64)
    }

    /// Copy `src` to a new device buffer.
    pub fn upload<T: Copy>(&self, dtype: DType, src: &[T]) -> Result<Buffer> {
        assert_eq!(std::mem::size_of::<T>(), dtype.bytes());
        let buf = self.memory.alloc(dtype, src.len())?;
        // SAFETY: `buf` holds exactly `src.len()` elements; we synchronise before `src` can go.
        unsafe { cu::memcpy_htod_async(buf.ptr(), src, self.stream.cu_stream()) }
            .during("cuMemcpyHtoDAsync")?;
        self.synchronize()?;
        Ok(buf)
    }

    /// Copy `len` elements from device address `ptr` into a new host vector.
    pub fn download<T: Copy + Default>(&self, ptr: u64, len: usize) -> Result<Vec<T>> {
        let mut out = vec![T::default(); len];
        self.synchronize()?;
        // SAFETY: the caller names a live device range of `len` elements of T.
        unsafe { cu::memcpy_dtoh_async(&mut out, ptr, self.stream.cu_stream()) }
            .during("cuMemcpyDtoHAsync")?;
        self.synchronize()?;
        Ok(out)
    }

    /// `bytes` zero bytes at `ptr`, in stream order.
    pub fn memset_zero(&self, ptr: u64, bytes: usize) -> Result<()> {
        // SAFETY: the caller names a live device range.
        unsafe { cu::memset_d8_async(ptr, 0, bytes, self.stream.cu_stream()) }
            .during("cuMemsetD8Async")
    }

    /// Copy `bytes` from `src` to `dst` on the device, in stream order.
    pub fn copy(&self, dst: u64, src: u64, bytes: usize) -> Result<()> {
        // SAFETY: the caller names live, non-overlapping device ranges.
        unsafe { cu::memcpy_dtod_async(dst, src, bytes, self.stream.cu_stream()) }
            .during("cuMemcpyDtoDAsync")
    }
}

/// `580.159.04` from `/proc/driver/nvidia/version` where readable, else `CUDA 13.0` from the
/// driver API.
fn driver_version() -> String {
    if let Ok(text) = std::fs::read_to_string("/proc/driver/nvidia/version") {
        // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu ..."
        if let Some(v) = text.lines().next().and_then(|l| {
            l.split_whitespace().find(|w| {
                w.chars().filter(|c| *c == '.').count() >= 1
                    && w.chars().all(|c| c.is_ascii_digit() || c == '.')
            })
        }) {
            return v.to_owned();
        }
    }
    let mut v = 0i32;
    // SAFETY: writes one int.
    match unsafe { sys::cuDriverGetVersion(&mut v) }.result() {
        Ok(()) => format!("CUDA {}.{}", v / 1000, (v % 1000) / 10),
        Err(_) => "unknown".to_owned(),
    }
}
