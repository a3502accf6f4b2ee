//! CUPTI's activities as the records `analyze::formats::nsys_sqlite::write` writes
//! ([`RecordConverter`]): kernel names demangled (`demangledName`) and reduced to their base name
//! (`shortName`, by nsys's rule, [`short_name`]), API names from their callback ids, CUPTI's memory
//! kinds mapped to nsys's, and driver calls that share a correlation id with a runtime call (the
//! driver call the runtime made) dropped, as nsys drops them, so that every kernel joins exactly
//! one API call (checked on the H200: cuBLAS's 1,112 `cudaLaunchKernelExC` of a small training run
//! come without their inner `cuLaunchKernel`, and the launch, memcpy and memset calls count as in
//! an nsys capture), and the query calls nsys does not record ([`CALLS_NSYS_LEAVES_OUT`]) dropped
//! too. Pure: no GPU, no CUPTI calls.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use analyze::formats::nsys_sqlite::write::{
    ApiClass, ApiRecord, KernelRecord, MemcpyRecord, MemsetRecord, Name, TraceRecords,
};
use analyze::formats::nsys_sqlite::{mem_kind, short_name};

use super::activity::{Activity, ApiDomain};

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
/// Names are spelled as nsys spells them (NVIDIA's `cu++filt`, see [`crate::trace::demangle`]); a
/// name that module cannot read (expressions in template arguments) falls back to
/// `cpp_demangle`'s spelling, whose base name still agrees.
pub fn kernel_names(raw: &str) -> KernelNames {
    let demangled = if raw.starts_with("_Z") {
        crate::trace::demangle::demangle(raw)
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
    /// `api_name` names a callback id (on the GPU, [`super::CuptiTracer::api_name`]).
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
                    span: k.span,
                    pid: self.pid,
                    name,
                    short_name: short,
                    mangled_name: Some(k.name.clone()),
                    launch: k.launch,
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
                span: m.span,
                pid: self.pid,
                bytes: m.bytes,
                // CUPTI's and nsys's copy kinds share their numbering.
                copy_kind: m.copy_kind,
                src_kind: nsys_memory_kind(m.src_kind as u16),
                dst_kind: nsys_memory_kind(m.dst_kind as u16),
            }),
            Activity::Memset(m) => out.memsets.push(MemsetRecord {
                span: m.span,
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
