//! One traced run: CUPTI activity tracing ([`crate::trace::cupti::CuptiTracer`]) from
//! [`TraceSession::start`] to [`TraceSession::finish`], with the NVTX ranges `collect` opens in
//! between recorded on CUPTI's clock and under the thread ids CUPTI reports, assembled into the
//! [`TraceRecords`] that [`analyze::formats::nsys_sqlite::write`] writes in the nsys export schema.
//!
//! The ranges come through [`crate::nvtx`]: install [`TraceSession::range_listener`] (alone or
//! in a [`crate::nvtx::Fanout`]) for the span to trace. The caller describes the run
//! ([`RunMetadata`]); this module adds the device, the process and CUPTI's own counts (records it
//! dropped). It does not write files.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use analyze::formats::nsys_sqlite::write::{GpuInfo, ProcessInfo, TraceRecords};
use analyze::formats::run_metadata::RunMetadata;

use crate::error::{Error, Result};
use crate::gpu::device::Gpu;
use crate::nvtx::RangeListener;
use crate::trace::cupti::{CuptiTracer, RecordConverter};
use crate::trace::ranges::{current_tid, RangeLog};

/// Run-metadata keys this module adds.
pub mod keys {
    /// Activity records CUPTI dropped for lack of buffer space (0 in a complete trace).
    pub const CUPTI_DROPPED_RECORDS: &str = "cupti_dropped_records";
}

/// A trace in progress.
pub struct TraceSession {
    tracer: CuptiTracer,
    ranges: Rc<RefCell<RangeLog>>,
    start_utc_ns: i64,
}

/// Feeds [`crate::nvtx`]'s pushes and pops into the session's range list, stamped with
/// [`CuptiTracer::timestamp`] and the calling thread's system id.
struct TraceRanges(Rc<RefCell<RangeLog>>);

impl RangeListener for TraceRanges {
    fn push(&mut self, name: &str, _at: Instant) {
        // The tracer is running, so its clock answers; 0 would only misplace one range.
        let t = CuptiTracer::timestamp().unwrap_or(0);
        self.0.borrow_mut().push(name, t, current_tid());
    }

    fn pop(&mut self, _at: Instant) {
        let t = CuptiTracer::timestamp().unwrap_or(0);
        self.0.borrow_mut().pop(t, current_tid());
    }
}

impl TraceSession {
    /// Start tracing kernels, API calls, memcpys and memsets of this process. The GPU must be
    /// open (CUPTI is loaded from the CUDA installation).
    pub fn start() -> Result<TraceSession> {
        // SAFETY: only probes whether the library can be loaded.
        if !unsafe { cudarc::cupti::sys::is_culib_present() } {
            return Err(Error::MissingLibrary {
                library: "libcupti",
            });
        }
        let start_utc_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i64);
        let tracer = CuptiTracer::start().map_err(|e| Error::Trace(e.to_string()))?;
        Ok(TraceSession {
            tracer,
            ranges: Rc::new(RefCell::new(RangeLog::new(std::process::id()))),
            start_utc_ns,
        })
    }

    /// A listener that logs this session's ranges, for [`crate::nvtx::set_listener`].
    pub fn range_listener(&self) -> Box<dyn RangeListener> {
        Box::new(TraceRanges(self.ranges.clone()))
    }

    /// Synchronize, stop tracing and assemble the records, with `run` as their run metadata.
    pub fn finish(self, gpu: &Gpu, mut run: RunMetadata) -> Result<TraceRecords> {
        gpu.synchronize()?;
        let collected = self
            .tracer
            .stop()
            .map_err(|e| Error::Trace(format!("CUPTI: {e:?}")))?;
        if collected.errors > 0 {
            return Err(Error::Trace(format!(
                "CUPTI could not hand over {} activity buffers",
                collected.errors
            )));
        }
        let pid = std::process::id();
        let tid = current_tid();
        run.set(keys::CUPTI_DROPPED_RECORDS, collected.dropped);
        let info = &gpu.info;
        let mut out = TraceRecords {
            process: ProcessInfo {
                pid,
                name: "collect".to_owned(),
                threads: vec![(tid, "collect".to_owned())],
            },
            gpus: vec![GpuInfo {
                id: 0,
                name: info.name.clone(),
                total_memory: Some(info.total_memory),
                sm_count: Some(info.multiprocessors.max(0) as u32),
                compute_major: Some(info.compute_capability.0.max(0) as u32),
                compute_minor: Some(info.compute_capability.1.max(0) as u32),
                ..GpuInfo::default()
            }],
            run,
            session_start_utc_ns: Some(self.start_utc_ns),
            ..TraceRecords::default()
        };
        let mut converter = RecordConverter::new(pid, CuptiTracer::api_name);
        converter.convert(&collected.activities, &mut out);
        out.kernels
            .sort_by_key(|k| (k.span.start, k.span.correlation_id));
        out.api_calls.sort_by_key(|a| (a.start, a.correlation_id));
        out.memcpys.sort_by_key(|m| m.span.start);
        out.memsets.sort_by_key(|m| m.span.start);
        let ranges = std::mem::take(&mut *self.ranges.borrow_mut());
        out.ranges = ranges.finish();
        Ok(out)
    }
}
