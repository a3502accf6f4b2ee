//! The GPU: finding it, opening its context and its two streams (the main stream all the model's
//! work runs on, and the optimizer's stream beside it), and choosing where device memory comes
//! from ([`crate::gpu::device_memory`]: the driver's pool, or the
//! caching allocator through [`crate::gpu::caching`]). Plain copies and memsets in stream order
//! live here too. This module launches no kernels.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use cudarc::driver::result as cu;
use cudarc::driver::sys;
use cudarc::driver::{CudaContext, CudaStream};

use crate::error::{CudaContext as _, Error, Result};
use crate::gpu::caching::{CachingDeviceAllocator, CudaBackend, SharedCaching};
use crate::gpu::device_memory::{
    AllocatorKind, Buffer, DType, DeviceMemory, StreamOrderedAllocator,
};
use crate::memory::caching_allocator::{AllocatorConfig, CachingAllocator, StreamId};

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

/// The GPU: context, streams and memory. Fields drop in declaration order: memory before the
/// stream it frees on, the streams before the context.
pub struct Gpu {
    pub memory: DeviceMemory,
    /// The caching allocator behind `memory`, when it is the one in use.
    pub caching: Option<SharedCaching>,
    /// The main stream, at the device's highest priority: every allocation, copy, GEMM and kernel
    /// of the model but the overlapped optimizer's.
    pub stream: Arc<CudaStream>,
    /// The optimizer's stream, at the lowest priority: AdamW updates that run beside the
    /// backward, ordered against the main stream by events. It allocates nothing.
    pub side: Arc<CudaStream>,
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
        // Our buffers are raw pointers, ordered between the two streams by our own events:
        // cudarc's per-slice event tracking would only add calls.
        // SAFETY: no cudarc CudaSlice is shared between streams in this program.
        unsafe { ctx.disable_event_tracking() };
        // Numerically lower is higher; the block scheduler starts a waiting block of the main
        // stream before one of the optimizer's.
        ctx.bind_to_thread().during("cuCtxSetCurrent")?;
        let (least, greatest) =
            cu::stream::get_priority_range().during("cuCtxGetStreamPriorityRange")?;
        let stream = ctx
            .new_stream_with_priority(greatest)
            .during("cuStreamCreateWithPriority")?;
        let side = ctx
            .new_stream_with_priority(least)
            .during("cuStreamCreateWithPriority")?;
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
            side,
            ctx,
            info,
        })
    }

    /// Wait for the main stream (which joins the optimizer's stream at the end of every step).
    pub fn synchronize(&self) -> Result<()> {
        self.stream.synchronize().during("cuStreamSynchronize")
    }

    /// Wait for both streams.
    pub fn synchronize_all(&self) -> Result<()> {
        self.side.synchronize().during("cuStreamSynchronize")?;
        self.synchronize()
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

    /// Copy `rows` rows of `width` bytes from `src` (rows `src_pitch` bytes apart) to `dst` (rows
    /// `dst_pitch` bytes apart) on the device, in stream order: a head widened into a padded
    /// one, or cut back.
    pub fn copy_rows(
        &self,
        dst: u64,
        dst_pitch: usize,
        src: u64,
        src_pitch: usize,
        width: usize,
        rows: usize,
    ) -> Result<()> {
        debug_assert!(width <= dst_pitch && width <= src_pitch);
        let copy = sys::CUDA_MEMCPY2D {
            srcXInBytes: 0,
            srcY: 0,
            srcMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
            srcHost: std::ptr::null(),
            srcDevice: src,
            srcArray: std::ptr::null_mut(),
            srcPitch: src_pitch,
            dstXInBytes: 0,
            dstY: 0,
            dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
            dstHost: std::ptr::null_mut(),
            dstDevice: dst,
            dstArray: std::ptr::null_mut(),
            dstPitch: dst_pitch,
            WidthInBytes: width,
            Height: rows,
        };
        // SAFETY: the caller names live device ranges of `rows` rows at the stated pitches; the
        // descriptor is read during the call.
        unsafe { sys::cuMemcpy2DAsync_v2(&copy, self.stream.cu_stream()) }
            .result()
            .during("cuMemcpy2DAsync")
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
