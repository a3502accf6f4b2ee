//! Kernel, API and memory-operation tracing through CUPTI's activity API (cudarc's `cupti`
//! bindings, CUDA 13.0 record layouts), turned into the records
//! [`analyze::formats::nsys_sqlite::write`] writes.
//!
//! Three layers, so that all but the first run on a machine without a GPU:
//! - [`CuptiTracer`]: the GPU-facing part. It enables the activity kinds `CONCURRENT_KERNEL`,
//!   `RUNTIME`, `DRIVER`, `MEMCPY` and `MEMSET` (thread ids as the system's, so they match the
//!   ids of our NVTX ranges), hands CUPTI 8 MiB buffers, and on each completed buffer copies the
//!   records out as [`Activity`] values. `flush` forces pending buffers out; `stop` flushes,
//!   disables the kinds and returns what was collected. One tracer at a time; the buffer
//!   callbacks are registered once, so a sweep starts a new tracer per configuration.
//! - [`activity_from_record`]: reads one raw CUPTI record (kernel record version 10, API,
//!   memcpy version 6, memset version 4; newer CUPTI releases only append fields) into an
//!   [`Activity`], copying the kernel name. Unknown kinds are skipped.
//! - [`RecordConverter`]: [`Activity`] values into [`TraceRecords`]: kernel names demangled
//!   (`demangledName`) and reduced to their base name (`shortName`, by nsys's rule,
//!   [`short_name`]), API names from their
//!   callback ids, CUPTI's memory kinds mapped to nsys's, and driver calls that share a
//!   correlation id with a runtime call (the driver call the runtime made) dropped, as nsys
//!   drops them, so that every kernel joins exactly one API call (checked on the H200: cuBLAS's
//!   1,112 `cudaLaunchKernelExC` of a small training run come without their inner
//!   `cuLaunchKernel`, and the launch, memcpy and memset calls count as in an nsys capture),
//!   and the query calls nsys does not record ([`CALLS_NSYS_LEAVES_OUT`]) dropped too.
//!
//! NVTX ranges are not CUPTI's business here: `collect` records its own with
//! [`crate::trace_ranges::RangeRecorder`], stamped with [`CuptiTracer::timestamp`] so that they
//! share the activity records' clock.

use std::collections::{HashMap, HashSet};
use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::cupti::result as cupti;
use cudarc::cupti::result::activity;
use cudarc::cupti::sys;

pub use cudarc::cupti::result::CuptiError;

use analyze::formats::nsys_sqlite::write::{
    ApiClass, ApiRecord, KernelRecord, MemcpyRecord, MemsetRecord, Name, TraceRecords,
};
use analyze::formats::nsys_sqlite::{mem_kind, short_name};

/// The API a call record belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ApiDomain {
    Driver,
    Runtime,
}

/// A kernel execution, copied out of a CUPTI record.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelActivity {
    pub start: u64,
    pub end: u64,
    pub device_id: u32,
    pub context_id: u32,
    pub stream_id: u32,
    pub correlation_id: u32,
    pub grid: [i32; 3],
    pub block: [i32; 3],
    pub registers_per_thread: u16,
    pub static_shared_memory: i32,
    pub dynamic_shared_memory: i32,
    pub local_memory_per_thread: u32,
    pub local_memory_total: u64,
    pub grid_id: i64,
    pub shared_memory_executed: u32,
    pub launch_type: u8,
    /// The executed cache configuration (high nibble of CUPTI's `cacheConfig`).
    pub cache_config: u8,
    pub shared_memory_limit_config: u32,
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
    pub start: u64,
    pub end: u64,
    pub device_id: u32,
    pub context_id: u32,
    pub stream_id: u32,
    pub correlation_id: u32,
}

/// A memset on the GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemsetActivity {
    pub value: u32,
    pub bytes: u64,
    pub start: u64,
    pub end: u64,
    pub device_id: u32,
    pub context_id: u32,
    pub stream_id: u32,
    pub correlation_id: u32,
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
                start: r.start,
                end: r.end,
                device_id: r.deviceId,
                context_id: r.contextId,
                stream_id: r.streamId,
                correlation_id: r.correlationId,
                grid: [r.gridX, r.gridY, r.gridZ],
                block: [r.blockX, r.blockY, r.blockZ],
                registers_per_thread: r.registersPerThread,
                static_shared_memory: r.staticSharedMemory,
                dynamic_shared_memory: r.dynamicSharedMemory,
                local_memory_per_thread: r.localMemoryPerThread,
                local_memory_total: r.localMemoryTotal_v2,
                grid_id: r.gridId,
                shared_memory_executed: r.sharedMemoryExecuted,
                launch_type: r.launchType,
                cache_config: cache >> 4,
                shared_memory_limit_config: r.shmemLimitConfig as u32,
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
                start: r.start,
                end: r.end,
                device_id: r.deviceId,
                context_id: r.contextId,
                stream_id: r.streamId,
                correlation_id: r.correlationId,
            }))
        }
        kind::MEMSET => {
            // SAFETY: a memset record (version 4 in CUDA 13).
            let r =
                unsafe { std::ptr::read_unaligned(record as *const sys::CUpti_ActivityMemset4) };
            Some(Activity::Memset(MemsetActivity {
                value: r.value,
                bytes: r.bytes,
                start: r.start,
                end: r.end,
                device_id: r.deviceId,
                context_id: r.contextId,
                stream_id: r.streamId,
                correlation_id: r.correlationId,
                memory_kind: r.memoryKind,
            }))
        }
        _ => None,
    }
}

/// A kernel's names as nsys stores them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelNames {
    /// `demangledName`: the full demangled signature, or the raw name for `extern "C"` kernels.
    pub demangled: String,
    /// `shortName`: the function's own name, without scope, template arguments or parameters.
    pub short: String,
}

/// Demangle a kernel name (Itanium C++ ABI) and take its base name. Names that are not mangled
/// (`extern "C"` kernels, cuBLAS's `sm90_xmma_gemm_...`) are kept as they are.
///
/// Names are spelled as nsys spells them (NVIDIA's `cu++filt`, see [`crate::demangle`]); a name
/// that module cannot read (expressions in template arguments) falls back to `cpp_demangle`'s
/// spelling, whose base name still agrees.
pub fn kernel_names(raw: &str) -> KernelNames {
    let demangled = if raw.starts_with("_Z") {
        crate::demangle::demangle(raw)
            .or_else(|| {
                cpp_demangle::Symbol::new(raw)
                    .ok()
                    .and_then(|s| s.demangle().ok())
            })
            .unwrap_or_else(|| raw.to_owned())
    } else {
        raw.to_owned()
    };
    let short = short_name(&demangled);
    KernelNames { demangled, short }
}

/// CUPTI's `CUpti_ActivityMemoryKind` to nsys's `ENUM_CUDA_MEM_KIND` (CUPTI counts from
/// "unknown" = 0, nsys from "pageable" = 0 with "unknown" = 7).
pub fn nsys_memory_kind(cupti_kind: u16) -> u8 {
    match cupti_kind {
        1..=7 => (cupti_kind - 1) as u8,
        _ => mem_kind::UNKNOWN,
    }
}

/// Turns [`Activity`] values into [`TraceRecords`].
pub struct RecordConverter {
    pid: u32,
    api_name: Box<dyn FnMut(ApiDomain, u32) -> String + Send>,
    api_names: HashMap<(ApiDomain, u32), Name>,
    kernel_names: HashMap<Name, (Name, Name)>,
}

impl RecordConverter {
    /// `api_name` names a callback id (on the GPU, [`CuptiTracer::api_name`]).
    pub fn new(pid: u32, api_name: impl FnMut(ApiDomain, u32) -> String + Send + 'static) -> Self {
        RecordConverter {
            pid,
            api_name: Box::new(api_name),
            api_names: HashMap::new(),
            kernel_names: HashMap::new(),
        }
    }

    /// Add one activity to `out`.
    pub fn add(&mut self, a: &Activity, out: &mut TraceRecords) {
        match a {
            Activity::Kernel(k) => {
                let (name, short) = match self.kernel_names.get(&k.name) {
                    Some(n) => n.clone(),
                    None => {
                        let n = kernel_names(&k.name);
                        let pair: (Name, Name) = (Arc::from(n.demangled), Arc::from(n.short));
                        self.kernel_names.insert(k.name.clone(), pair.clone());
                        pair
                    }
                };
                out.kernels.push(KernelRecord {
                    start: k.start as i64,
                    end: k.end as i64,
                    device_id: k.device_id,
                    context_id: k.context_id,
                    stream_id: k.stream_id,
                    correlation_id: k.correlation_id,
                    pid: self.pid,
                    name,
                    short_name: short,
                    mangled_name: Some(k.name.clone()),
                    grid: k.grid,
                    block: k.block,
                    registers_per_thread: k.registers_per_thread as u32,
                    static_shared_memory: k.static_shared_memory,
                    dynamic_shared_memory: k.dynamic_shared_memory,
                    local_memory_per_thread: k.local_memory_per_thread,
                    local_memory_total: k.local_memory_total,
                    grid_id: k.grid_id,
                    shared_memory_executed: k.shared_memory_executed,
                    launch_type: k.launch_type,
                    cache_config: k.cache_config,
                    shared_memory_limit_config: k.shared_memory_limit_config.min(255) as u8,
                });
            }
            Activity::Api(c) => {
                let key = (c.domain, c.cbid);
                let name = match self.api_names.get(&key) {
                    Some(n) => n.clone(),
                    None => {
                        let n: Name = Arc::from((self.api_name)(c.domain, c.cbid));
                        self.api_names.insert(key, n.clone());
                        n
                    }
                };
                out.api_calls.push(ApiRecord {
                    start: c.start as i64,
                    end: c.end as i64,
                    pid: c.process_id,
                    tid: c.thread_id,
                    correlation_id: c.correlation_id,
                    name,
                    class: match c.domain {
                        ApiDomain::Driver => ApiClass::Driver,
                        ApiDomain::Runtime => ApiClass::Runtime,
                    },
                    return_value: c.return_value as i64,
                });
            }
            Activity::Memcpy(m) => out.memcpys.push(MemcpyRecord {
                start: m.start as i64,
                end: m.end as i64,
                device_id: m.device_id,
                context_id: m.context_id,
                stream_id: m.stream_id,
                correlation_id: m.correlation_id,
                pid: self.pid,
                bytes: m.bytes,
                // CUPTI's and nsys's copy kinds share their numbering.
                copy_kind: m.copy_kind,
                src_kind: nsys_memory_kind(m.src_kind as u16),
                dst_kind: nsys_memory_kind(m.dst_kind as u16),
            }),
            Activity::Memset(m) => out.memsets.push(MemsetRecord {
                start: m.start as i64,
                end: m.end as i64,
                device_id: m.device_id,
                context_id: m.context_id,
                stream_id: m.stream_id,
                correlation_id: m.correlation_id,
                pid: self.pid,
                value: m.value,
                bytes: m.bytes,
                mem_kind: nsys_memory_kind(m.memory_kind),
            }),
        }
    }

    /// Add many activities, then drop the driver calls made on behalf of a runtime call and the
    /// calls Nsight Systems does not record.
    pub fn convert(&mut self, activities: &[Activity], out: &mut TraceRecords) {
        for a in activities {
            self.add(a, out);
        }
        drop_nested_driver_calls(out);
        drop_calls_nsys_leaves_out(out);
    }
}

/// API calls Nsight Systems 2025.3 does not record with `--trace=cuda`: queries that cuBLAS and
/// cudarc make around every launch. Found by tracing the same `collect bench` run both ways on
/// the H200 (driver 580, CUDA 13.0): each of these was called in both runs and appears only in
/// CUPTI's records. None of them launches GPU work.
pub const CALLS_NSYS_LEAVES_OUT: [&str; 14] = [
    "cuCtxGetCurrent",
    "cuCtxGetDevice",
    "cuCtxGetLimit",
    "cuDeviceGetAttribute",
    "cuDriverGetVersion",
    "cuEventElapsedTime_v2",
    "cuFuncGetAttribute",
    "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags",
    "cudaDeviceGetAttribute_v5000",
    "cudaFuncGetAttributes_v3020",
    "cudaFuncSetAttribute_v9000",
    "cudaGetDevice_v3020",
    "cudaGetLastError_v3020",
    "cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags_v7000",
];

/// Remove the calls of [`CALLS_NSYS_LEAVES_OUT`], so that `cuda_api_sum` counts what it counts on
/// an nsys capture.
pub fn drop_calls_nsys_leaves_out(out: &mut TraceRecords) {
    out.api_calls
        .retain(|a| !CALLS_NSYS_LEAVES_OUT.contains(&&*a.name));
}

/// Remove driver API calls whose correlation id a runtime call also has: CUPTI gives the driver
/// call a runtime call makes the runtime call's id, and two API rows for one kernel would make
/// `nsys stats` count its time twice.
pub fn drop_nested_driver_calls(out: &mut TraceRecords) {
    let runtime: HashSet<u32> = out
        .api_calls
        .iter()
        .filter(|a| a.class == ApiClass::Runtime && a.correlation_id != 0)
        .map(|a| a.correlation_id)
        .collect();
    out.api_calls
        .retain(|a| a.class == ApiClass::Runtime || !runtime.contains(&a.correlation_id));
}

// ---------------------------------------------------------------------------------------------
// The GPU-facing part.

/// CUPTI's buffer size and alignment (as in its samples).
const BUFFER_SIZE: usize = 8 * 1024 * 1024;
const BUFFER_ALIGN: usize = 8;
/// `CUPTI_ACTIVITY_FLAG_FLUSH_FORCED`.
const FLUSH_FORCED: u32 = 1;

const KINDS: [sys::CUpti_ActivityKind; 5] = [
    sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
    sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_RUNTIME,
    sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_DRIVER,
    sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMCPY,
    sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMSET,
];

/// What the buffer callbacks collect.
#[derive(Default)]
struct Collected {
    activities: Vec<Activity>,
    names: NameCache,
    /// Records CUPTI reported as dropped (a buffer was full).
    dropped: usize,
    /// A record CUPTI could not hand over (an error other than "end of buffer").
    errors: usize,
}

static COLLECTED: Mutex<Option<Collected>> = Mutex::new(None);
static ACTIVE: AtomicBool = AtomicBool::new(false);
/// The buffer callbacks are registered once per process and stay; a later tracer (the next
/// configuration of a sweep) only enables the kinds again.
static REGISTERED: AtomicBool = AtomicBool::new(false);

fn buffer_layout() -> std::alloc::Layout {
    // Constant, valid size and alignment.
    std::alloc::Layout::from_size_align(BUFFER_SIZE, BUFFER_ALIGN).expect("valid layout")
}

unsafe extern "C" fn buffer_requested(
    buffer: *mut *mut u8,
    size: *mut usize,
    max_num_records: *mut usize,
) {
    // SAFETY: a non-zero-sized layout; freed in `buffer_completed`, which CUPTI calls for every
    // buffer it was given.
    let p = unsafe { std::alloc::alloc(buffer_layout()) };
    // SAFETY: CUPTI passes valid out-pointers.
    unsafe {
        *buffer = p;
        *size = if p.is_null() { 0 } else { BUFFER_SIZE };
        *max_num_records = 0;
    }
}

unsafe extern "C" fn buffer_completed(
    _ctx: cudarc::driver::sys::CUcontext,
    _stream_id: u32,
    buffer: *mut u8,
    _size: usize,
    valid_size: usize,
) {
    if buffer.is_null() {
        return;
    }
    {
        let mut guard = COLLECTED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = guard.as_mut() {
            let mut record: *mut sys::CUpti_Activity = std::ptr::null_mut();
            loop {
                // SAFETY: `buffer` holds `valid_size` bytes of records written by CUPTI.
                match unsafe { activity::get_next_record(buffer, valid_size, &mut record) } {
                    Ok(()) => {
                        // SAFETY: CUPTI returned a complete record.
                        if let Some(a) = unsafe { activity_from_record(record, &mut c.names) } {
                            c.activities.push(a);
                        }
                    }
                    Err(CuptiError(sys::CUptiResult::CUPTI_ERROR_MAX_LIMIT_REACHED)) => break,
                    Err(_) => {
                        c.errors += 1;
                        break;
                    }
                }
            }
            let mut dropped = 0usize;
            // SAFETY: null context and stream 0 ask for the global count.
            if unsafe { activity::get_num_dropped_records(std::ptr::null_mut(), 0, &mut dropped) }
                .is_ok()
            {
                c.dropped += dropped;
            }
        }
    }
    // SAFETY: allocated in `buffer_requested` with the same layout.
    unsafe { std::alloc::dealloc(buffer, buffer_layout()) };
}

/// What a finished trace returns.
#[derive(Debug, Default)]
pub struct CollectedActivities {
    pub activities: Vec<Activity>,
    /// Records CUPTI dropped for lack of buffer space (0 for a complete trace).
    pub dropped: usize,
    /// Buffers that ended in an error rather than at their last record.
    pub errors: usize,
}

/// CUPTI activity tracing for this process, from [`CuptiTracer::start`] to
/// [`CuptiTracer::stop`].
pub struct CuptiTracer {
    _not_send: std::marker::PhantomData<*const ()>,
}

/// Why tracing could not start.
#[derive(Debug, thiserror::Error)]
pub enum TracerError {
    #[error("a CUPTI trace is already running in this process")]
    AlreadyRunning,
    #[error("CUPTI: {0:?}")]
    Cupti(CuptiError),
}

impl From<CuptiError> for TracerError {
    fn from(e: CuptiError) -> Self {
        TracerError::Cupti(e)
    }
}

impl CuptiTracer {
    /// Enable kernel, runtime/driver API, memcpy and memset activity records. Call before the
    /// work to trace (kernels launched earlier are not seen).
    pub fn start() -> Result<CuptiTracer, TracerError> {
        if ACTIVE.swap(true, Ordering::SeqCst) {
            return Err(TracerError::AlreadyRunning);
        }
        *COLLECTED.lock().unwrap_or_else(|e| e.into_inner()) = Some(Collected::default());
        let enable = || -> Result<(), CuptiError> {
            // System thread ids, so API calls carry the ids our NVTX ranges are recorded with.
            cupti::set_thread_id_type(
                sys::CUpti_ActivityThreadIdType::CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM,
            )?;
            if !REGISTERED.load(Ordering::SeqCst) {
                activity::register_callbacks(Some(buffer_requested), Some(buffer_completed))?;
                REGISTERED.store(true, Ordering::SeqCst);
            }
            for k in KINDS {
                activity::enable(k)?;
            }
            Ok(())
        };
        if let Err(e) = enable() {
            for k in KINDS {
                let _ = activity::disable(k);
            }
            ACTIVE.store(false, Ordering::SeqCst);
            return Err(e.into());
        }
        Ok(CuptiTracer {
            _not_send: std::marker::PhantomData,
        })
    }

    /// Deliver every record completed so far (including partly filled buffers). Synchronize the
    /// device first: a kernel still running is delivered by a later flush.
    pub fn flush(&self) -> Result<(), CuptiError> {
        activity::flush_all(FLUSH_FORCED)
    }

    /// Now on CUPTI's clock (nanoseconds), the clock of every activity record.
    pub fn timestamp() -> Result<i64, CuptiError> {
        let mut t = 0u64;
        // SAFETY: a valid out-pointer.
        unsafe { cupti::get_timestamp(&mut t) }?;
        Ok(t as i64)
    }

    /// The name CUPTI gives a callback id (`cudaLaunchKernel_v7000`, `cuLaunchKernel`).
    pub fn api_name(domain: ApiDomain, cbid: u32) -> String {
        let d = match domain {
            ApiDomain::Driver => sys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_DRIVER_API,
            ApiDomain::Runtime => sys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RUNTIME_API,
        };
        let mut p: *const std::ffi::c_char = std::ptr::null();
        // SAFETY: a valid out-pointer; CUPTI returns a static string.
        match unsafe { cupti::get_callback_name(d, cbid, &mut p) } {
            // SAFETY: CUPTI returned a C string.
            Ok(()) if !p.is_null() => unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned(),
            _ => format!("<cbid {cbid}>"),
        }
    }

    /// Flush, stop tracing and hand over what was collected (synchronize the device first).
    /// Turn the activities into records with [`RecordConverter::convert`], naming API calls with
    /// [`CuptiTracer::api_name`].
    pub fn stop(self) -> Result<CollectedActivities, CuptiError> {
        let flushed = self.flush();
        let c = shut_down();
        std::mem::forget(self);
        flushed?;
        Ok(CollectedActivities {
            activities: c.activities,
            dropped: c.dropped,
            errors: c.errors,
        })
    }
}

impl Drop for CuptiTracer {
    /// A tracer dropped without [`CuptiTracer::stop`] stops tracing and discards its records.
    fn drop(&mut self) {
        let _ = self.flush();
        shut_down();
    }
}

/// Disable the traced kinds and take what the callbacks collected.
fn shut_down() -> Collected {
    for k in KINDS {
        let _ = activity::disable(k);
    }
    let c = COLLECTED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
        .unwrap_or_default();
    ACTIVE.store(false, Ordering::SeqCst);
    c
}
