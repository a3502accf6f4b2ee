//! Kernel, API and memory-operation tracing through CUPTI's activity API (cudarc's `cupti`
//! bindings, CUDA 13.0 record layouts), turned into the records
//! [`analyze::formats::nsys_sqlite::write`] writes.
//!
//! Three layers, so that all but the first run on a machine without a GPU:
//! - [`CuptiTracer`] (`tracer`): the GPU-facing part; enables the activity kinds, hands CUPTI its
//!   buffers and copies completed records out;
//! - [`activity_from_record`] (`activity`): one raw CUPTI record into an [`Activity`];
//! - [`RecordConverter`] (`convert`): [`Activity`] values into [`TraceRecords`], named and
//!   filtered as nsys names and filters them.
//!
//! NVTX ranges are not CUPTI's business here: `collect` records its own with
//! [`crate::trace::ranges::RangeLog`], stamped with [`CuptiTracer::timestamp`] so that they
//! share the activity records' clock.
//!
//! [`TraceRecords`]: analyze::formats::nsys_sqlite::write::TraceRecords

mod activity;
mod convert;
mod tracer;

pub use activity::{
    activity_from_record, Activity, ApiActivity, ApiDomain, GpuSpan, KernelActivity,
    MemcpyActivity, MemsetActivity, NameCache,
};
pub use convert::{
    drop_calls_nsys_leaves_out, drop_nested_driver_calls, kernel_names, nsys_memory_kind,
    KernelNames, RecordConverter, CALLS_NSYS_LEAVES_OUT,
};
pub use cudarc::cupti::result::CuptiError;
pub use tracer::{CollectedActivities, CuptiTracer, TracerError};
