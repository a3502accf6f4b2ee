//! The GPU-facing part of CUPTI tracing: [`CuptiTracer`] enables the activity kinds
//! `CONCURRENT_KERNEL`, `RUNTIME`, `DRIVER`, `MEMCPY` and `MEMSET` (thread ids as the system's, so
//! they match the ids of our NVTX ranges), hands CUPTI 8 MiB buffers, and on each completed buffer
//! copies the records out as [`Activity`] values. `flush` forces pending buffers out; `stop`
//! flushes, disables the kinds and returns what was collected. One tracer at a time; the buffer
//! callbacks are registered once, so a sweep starts a new tracer per configuration.

use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use cudarc::cupti::result as cupti;
use cudarc::cupti::result::activity;
use cudarc::cupti::result::CuptiError;
use cudarc::cupti::sys;

use super::activity::{activity_from_record, Activity, ApiDomain, NameCache};

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
    /// Turn the activities into records with [`super::RecordConverter::convert`], naming API
    /// calls with [`CuptiTracer::api_name`].
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
