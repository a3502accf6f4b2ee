//! CUPTI activity records copied out of CUPTI's buffers into plain values ([`Activity`]):
//! [`activity_from_record`] reads one raw record (kernel record version 10, API, memcpy version 6,
//! memset version 4; newer CUPTI releases only append fields), copying the kernel name once per
//! name ([`NameCache`]). Unknown kinds are skipped. No GPU is needed: tests build records by hand.

use std::collections::HashMap;
use std::ffi::CStr;
use std::sync::Arc;

use cudarc::cupti::sys;

use analyze::formats::nsys_sqlite::write::Name;
// The writer's own types: a record's span and launch are copied into the trace as they are.
pub use analyze::formats::nsys_sqlite::write::{GpuSpan, KernelLaunch};

/// The API a call record belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ApiDomain {
    Driver,
    Runtime,
}

/// The [`GpuSpan`] of a CUPTI GPU record (every kind names these fields alike).
macro_rules! gpu_span {
    ($r:expr) => {
        GpuSpan {
            start: $r.start as i64,
            end: $r.end as i64,
            device_id: $r.deviceId,
            context_id: $r.contextId,
            stream_id: $r.streamId,
            correlation_id: $r.correlationId,
        }
    };
}

/// A kernel execution, copied out of a CUPTI record.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelActivity {
    pub span: GpuSpan,
    pub launch: KernelLaunch,
    /// The name as the driver knows it (mangled for C++ kernels).
    pub name: Name,
}

/// A driver or runtime API call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiActivity {
    pub domain: ApiDomain,
    pub cbid: u32,
    pub start: u64,
    pub end: u64,
    pub process_id: u32,
    pub thread_id: u32,
    pub correlation_id: u32,
    pub return_value: u32,
}

/// A memcpy on the GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemcpyActivity {
    /// `CUpti_ActivityMemcpyKind`.
    pub copy_kind: u8,
    /// `CUpti_ActivityMemoryKind`.
    pub src_kind: u8,
    pub dst_kind: u8,
    pub bytes: u64,
    pub span: GpuSpan,
}

/// A memset on the GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemsetActivity {
    pub value: u32,
    pub bytes: u64,
    pub span: GpuSpan,
    /// `CUpti_ActivityMemoryKind`.
    pub memory_kind: u16,
}

/// One activity record, copied out of CUPTI's buffer.
#[derive(Clone, Debug, PartialEq)]
pub enum Activity {
    Kernel(KernelActivity),
    Api(ApiActivity),
    Memcpy(MemcpyActivity),
    Memset(MemsetActivity),
}

/// `CUpti_ActivityKind` values read here (stable across CUPTI releases).
mod kind {
    pub const MEMCPY: u32 = 1;
    pub const MEMSET: u32 = 2;
    pub const KERNEL: u32 = 3;
    pub const DRIVER: u32 = 4;
    pub const RUNTIME: u32 = 5;
    pub const CONCURRENT_KERNEL: u32 = 10;
}

/// Kernel names already copied, by the address CUPTI gives them at (it shares one string per
/// kernel across records).
#[derive(Default)]
pub struct NameCache {
    by_ptr: HashMap<usize, Name>,
}

impl NameCache {
    /// # Safety
    /// `p` is null or points to a NUL-terminated string.
    unsafe fn get(&mut self, p: *const std::ffi::c_char) -> Name {
        if p.is_null() {
            return Arc::from("<unnamed kernel>");
        }
        // SAFETY: the caller guarantees a C string.
        let bytes = unsafe { CStr::from_ptr(p) }.to_bytes();
        if let Some(n) = self.by_ptr.get(&(p as usize)) {
            // A module unloaded and another loaded may reuse the address: check the text.
            if n.as_bytes() == bytes {
                return n.clone();
            }
        }
        let n: Name = Arc::from(String::from_utf8_lossy(bytes).as_ref());
        self.by_ptr.insert(p as usize, n.clone());
        n
    }
}

/// Copy one CUPTI activity record; `None` for kinds not traced here.
///
/// # Safety
/// `record` points to a complete record of the kind its first field names, as
/// `cuptiActivityGetNextRecord` returns (or a test builds), and a kernel record's `name` is null
/// or a C string.
pub unsafe fn activity_from_record(
    record: *const sys::CUpti_Activity,
    names: &mut NameCache,
) -> Option<Activity> {
    // The kind is read as an integer: a value this build's enum lacks must not become UB.
    // SAFETY: every record starts with its 32-bit kind.
    let k = unsafe { std::ptr::read_unaligned(record as *const u32) };
    match k {
        kind::KERNEL | kind::CONCURRENT_KERNEL => {
            // SAFETY: the caller guarantees a kernel record of at least version 10's size.
            let r =
                unsafe { std::ptr::read_unaligned(record as *const sys::CUpti_ActivityKernel10) };
            // SAFETY: both union members are one byte.
            let cache = unsafe { r.cacheConfig.both };
            Some(Activity::Kernel(KernelActivity {
                span: gpu_span!(r),
                launch: KernelLaunch {
                    grid: [r.gridX, r.gridY, r.gridZ],
                    block: [r.blockX, r.blockY, r.blockZ],
                    registers_per_thread: r.registersPerThread.into(),
                    static_shared_memory: r.staticSharedMemory,
                    dynamic_shared_memory: r.dynamicSharedMemory,
                    local_memory_per_thread: r.localMemoryPerThread,
                    local_memory_total: r.localMemoryTotal_v2,
                    grid_id: r.gridId,
                    shared_memory_executed: r.sharedMemoryExecuted,
                    launch_type: r.launchType,
                    // The executed configuration: the high nibble of CUPTI's.
                    cache_config: cache >> 4,
                    shared_memory_limit_config: (r.shmemLimitConfig as u32).min(255) as u8,
                },
                // SAFETY: the caller guarantees the name.
                name: unsafe { names.get(r.name) },
            }))
        }
        kind::DRIVER | kind::RUNTIME => {
            // SAFETY: an API record.
            let r = unsafe { std::ptr::read_unaligned(record as *const sys::CUpti_ActivityAPI) };
            Some(Activity::Api(ApiActivity {
                domain: if k == kind::DRIVER {
                    ApiDomain::Driver
                } else {
                    ApiDomain::Runtime
                },
                cbid: r.cbid,
                start: r.start,
                end: r.end,
                process_id: r.processId,
                thread_id: r.threadId,
                correlation_id: r.correlationId,
                return_value: r.returnValue,
            }))
        }
        kind::MEMCPY => {
            // SAFETY: a memcpy record (version 6 in CUDA 13).
            let r =
                unsafe { std::ptr::read_unaligned(record as *const sys::CUpti_ActivityMemcpy6) };
            Some(Activity::Memcpy(MemcpyActivity {
                copy_kind: r.copyKind,
                src_kind: r.srcKind,
                dst_kind: r.dstKind,
                bytes: r.bytes,
                span: gpu_span!(r),
            }))
        }
        kind::MEMSET => {
            // SAFETY: a memset record (version 4 in CUDA 13).
            let r =
                unsafe { std::ptr::read_unaligned(record as *const sys::CUpti_ActivityMemset4) };
            Some(Activity::Memset(MemsetActivity {
                value: r.value,
                bytes: r.bytes,
                span: gpu_span!(r),
                memory_kind: r.memoryKind,
            }))
        }
        _ => None,
    }
}
