//! Nsight Systems' SQLite export (`nsys export --type sqlite`), defined once for both sides:
//! [`read`] loads any export (nsys's own, of every schema met so far, or `collect`'s) into the
//! model, and [`write`](mod@write) writes `collect`'s traces. This module holds what both name:
//! the tables ([`table`]) and columns ([`column`](mod@column)) they use, the enum ids nsys stores
//! ([`event_class`], [`event_type`], [`copy_kind`], [`mem_kind`]), the metadata keys, nsys's
//! global process and thread ids, and the rule that gives a kernel's `shortName`
//! ([`short_name`]).
//!
//! [`SCHEMA_SQL`] (`schema.sql` beside this file) is the schema a writer creates: the
//! `CREATE TABLE` statements and `ENUM_*` rows of a real 3.20.3 export (nsys 2025.3), copied by
//! `regenerate.py` beside it. The names here are checked against it by the tests below.

mod footprint;
pub mod read;
pub mod scan;
pub mod write;

/// The export schema, embedded.
pub const SCHEMA_SQL: &str = include_str!("schema.sql");

/// Table names.
pub mod table {
    /// Interned strings: `(id, value)`.
    pub const STRING_IDS: &str = "StringIds";
    pub const KERNEL: &str = "CUPTI_ACTIVITY_KIND_KERNEL";
    /// CUDA runtime API calls, and driver calls where nsys files them with the runtime's.
    pub const RUNTIME: &str = "CUPTI_ACTIVITY_KIND_RUNTIME";
    /// CUDA driver API calls (exports that keep them apart from the runtime's).
    pub const DRIVER: &str = "CUPTI_ACTIVITY_KIND_DRIVER";
    pub const NVTX_EVENTS: &str = "NVTX_EVENTS";
    pub const MEMCPY: &str = "CUPTI_ACTIVITY_KIND_MEMCPY";
    pub const MEMSET: &str = "CUPTI_ACTIVITY_KIND_MEMSET";
    /// CUDA graph executions as a whole (nsys's default graph tracing): one row per launch.
    pub const GRAPH_TRACE: &str = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE";
    pub const TARGET_INFO_GPU: &str = "TARGET_INFO_GPU";
    pub const TARGET_INFO_CUDA_DEVICE: &str = "TARGET_INFO_CUDA_DEVICE";
    pub const TARGET_INFO_CUDA_STREAM: &str = "TARGET_INFO_CUDA_STREAM";
    pub const TARGET_INFO_SESSION_START_TIME: &str = "TARGET_INFO_SESSION_START_TIME";
    /// The environment of the profiled program, `;`-separated `KEY=value` in the `value` of the
    /// row named `DeviceEnvironment`.
    pub const TARGET_INFO_SYSTEM_ENV: &str = "TARGET_INFO_SYSTEM_ENV";
    pub const PROCESSES: &str = "PROCESSES";
    pub const THREAD_NAMES: &str = "ThreadNames";
    pub const ANALYSIS_DETAILS: &str = "ANALYSIS_DETAILS";
    /// Export metadata, `(name, value)`: schema 3.20 on (2024-).
    pub const META_DATA_EXPORT: &str = "META_DATA_EXPORT";
    /// Export metadata of schemas 2.9 to 3.17 (2022-2023).
    pub const EXPORT_META_DATA: &str = "EXPORT_META_DATA";
    pub const META_DATA_CAPTURE: &str = "META_DATA_CAPTURE";
    /// Not nsys's: the `(name, value)` pairs of [`super::super::run_metadata`] that `collect`
    /// adds to its traces.
    pub const RUN_METADATA: &str = "RUN_METADATA";
    /// Labels of [`super::copy_kind`].
    pub const ENUM_CUDA_MEMCPY_OPER: &str = "ENUM_CUDA_MEMCPY_OPER";
    /// Labels of [`super::mem_kind`].
    pub const ENUM_CUDA_MEM_KIND: &str = "ENUM_CUDA_MEM_KIND";
}

/// Column names, as nsys spells them. A column is named once here whatever tables have it.
pub mod column {
    pub const ID: &str = "id";
    pub const VALUE: &str = "value";
    pub const NAME: &str = "name";
    /// The text nsys prints for an `ENUM_*` id.
    pub const LABEL: &str = "label";
    pub const START: &str = "start";
    pub const END: &str = "end";
    pub const DEVICE_ID: &str = "deviceId";
    pub const CONTEXT_ID: &str = "contextId";
    pub const GREEN_CONTEXT_ID: &str = "greenContextId";
    pub const STREAM_ID: &str = "streamId";
    pub const CORRELATION_ID: &str = "correlationId";
    pub const GLOBAL_PID: &str = "globalPid";
    pub const GLOBAL_TID: &str = "globalTid";
    pub const DEMANGLED_NAME: &str = "demangledName";
    pub const SHORT_NAME: &str = "shortName";
    /// Absent from the oldest exports.
    pub const MANGLED_NAME: &str = "mangledName";
    pub const LAUNCH_TYPE: &str = "launchType";
    pub const CACHE_CONFIG: &str = "cacheConfig";
    pub const REGISTERS_PER_THREAD: &str = "registersPerThread";
    pub const GRID_X: &str = "gridX";
    pub const GRID_Y: &str = "gridY";
    pub const GRID_Z: &str = "gridZ";
    pub const BLOCK_X: &str = "blockX";
    pub const BLOCK_Y: &str = "blockY";
    pub const BLOCK_Z: &str = "blockZ";
    pub const STATIC_SHARED_MEMORY: &str = "staticSharedMemory";
    pub const DYNAMIC_SHARED_MEMORY: &str = "dynamicSharedMemory";
    pub const LOCAL_MEMORY_PER_THREAD: &str = "localMemoryPerThread";
    pub const LOCAL_MEMORY_TOTAL: &str = "localMemoryTotal";
    pub const GRID_ID: &str = "gridId";
    pub const SHARED_MEMORY_EXECUTED: &str = "sharedMemoryExecuted";
    pub const GRAPH_NODE_ID: &str = "graphNodeId";
    pub const GRAPH_ID: &str = "graphId";
    pub const GRAPH_EXEC_ID: &str = "graphExecId";
    pub const SHARED_MEMORY_LIMIT_CONFIG: &str = "sharedMemoryLimitConfig";
    /// [`super::event_class`].
    pub const EVENT_CLASS: &str = "eventClass";
    /// A `StringIds` id.
    pub const NAME_ID: &str = "nameId";
    pub const RETURN_VALUE: &str = "returnValue";
    pub const CALLCHAIN_ID: &str = "callchainId";
    /// [`super::event_type`].
    pub const EVENT_TYPE: &str = "eventType";
    /// NVTX text written inline.
    pub const TEXT: &str = "text";
    /// NVTX text interned in `StringIds`.
    pub const TEXT_ID: &str = "textId";
    /// The thread that ended a start/end range.
    pub const END_GLOBAL_TID: &str = "endGlobalTid";
    pub const DOMAIN_ID: &str = "domainId";
    pub const BYTES: &str = "bytes";
    /// [`super::copy_kind`].
    pub const COPY_KIND: &str = "copyKind";
    /// [`super::mem_kind`].
    pub const SRC_KIND: &str = "srcKind";
    pub const DST_KIND: &str = "dstKind";
    pub const COPY_COUNT: &str = "copyCount";
    pub const MEM_KIND: &str = "memKind";
    pub const VM_ID: &str = "vmId";
    pub const BUS_LOCATION: &str = "busLocation";
    pub const IS_DISCRETE: &str = "isDiscrete";
    pub const L2_CACHE_SIZE: &str = "l2CacheSize";
    pub const TOTAL_MEMORY: &str = "totalMemory";
    pub const CLOCK_RATE: &str = "clockRate";
    pub const SM_COUNT: &str = "smCount";
    pub const UUID: &str = "uuid";
    pub const CU_DEVICE: &str = "cuDevice";
    pub const COMPUTE_MAJOR: &str = "computeMajor";
    pub const COMPUTE_MINOR: &str = "computeMinor";
    pub const SM_MAJOR: &str = "smMajor";
    pub const SM_MINOR: &str = "smMinor";
    pub const GPU_ID: &str = "gpuId";
    pub const CUDA_ID: &str = "cudaId";
    pub const PID: &str = "pid";
    pub const HW_ID: &str = "hwId";
    pub const PROCESS_ID: &str = "processId";
    pub const PRIORITY: &str = "priority";
    pub const FLAG: &str = "flag";
    pub const GLOBAL_VID: &str = "globalVid";
    pub const DURATION: &str = "duration";
    pub const START_TIME: &str = "startTime";
    pub const STOP_TIME: &str = "stopTime";
    pub const UTC_EPOCH_NS: &str = "utcEpochNs";
    pub const UTC_TIME: &str = "utcTime";
    pub const LOCAL_TIME: &str = "localTime";
}

/// Names in the export metadata tables (`META_DATA_EXPORT` and its predecessor).
pub mod metadata {
    pub const EXPORT_SCHEMA_VERSION: &str = "EXPORT_SCHEMA_VERSION";
    pub const EXPORT_PRODUCT_VERSION: &str = "EXPORT_PRODUCT_VERSION";
    /// Not nsys's: names the program that wrote the file when it is not nsys.
    pub const EXPORT_WRITER: &str = "EXPORT_WRITER";
    /// In `META_DATA_CAPTURE`: one row per kind of event captured.
    pub const CAPTURE_EVENT_TYPE: &str = "CAPTURE_EVENT_TYPE";
}

/// `ENUM_NSYS_EVENT_CLASS`: which API an API call belongs to.
pub mod event_class {
    pub const CUDA_RUNTIME: i64 = 0;
    pub const CUDA_DRIVER: i64 = 1;
}

/// `ENUM_NSYS_EVENT_TYPE` ids of NVTX events. `Nvtxt` events are those nsys records through
/// its own injection of the NVTX text API; they read as the plain ones.
pub mod event_type {
    pub const NVTX_MARK: i64 = 34;
    pub const NVTX_PUSH_POP_RANGE: i64 = 59;
    pub const NVTX_START_END_RANGE: i64 = 60;
    pub const NVTXT_MARK: i64 = 65;
    pub const NVTXT_PUSH_POP_RANGE: i64 = 70;
    pub const NVTXT_START_END_RANGE: i64 = 71;
    pub const NVTX_DOMAIN_CREATE: i64 = 75;
}

/// `ENUM_CUDA_MEMCPY_OPER`: the direction of a copy (the ids the model names).
pub mod copy_kind {
    pub const HOST_TO_DEVICE: i64 = 1;
    pub const DEVICE_TO_HOST: i64 = 2;
    pub const DEVICE_TO_DEVICE: i64 = 8;
    pub const HOST_TO_HOST: i64 = 9;
    pub const PEER_TO_PEER: i64 = 10;
}

/// `ENUM_CUDA_MEM_KIND`: where a copy's or memset's memory lives.
pub mod mem_kind {
    pub const PAGEABLE: u8 = 0;
    pub const PINNED: u8 = 1;
    pub const DEVICE: u8 = 2;
    pub const UNKNOWN: u8 = 7;
}

/// The VM id nsys puts in the top bits of global ids for the local machine.
pub const LOCAL_VM: i64 = 1 << 48;

/// nsys's `globalPid` for a process: `(1 << 48) | pid << 24`.
pub fn global_pid(pid: u32) -> i64 {
    LOCAL_VM | ((pid as i64 & 0xFF_FFFF) << 24)
}

/// nsys's `globalTid` for a thread: its process's `globalPid` with the thread id in the low bits.
pub fn global_tid(pid: u32, tid: u32) -> i64 {
    global_pid(pid) | (tid as i64 & 0xFF_FFFF)
}

/// Split an nsys `globalTid`/`globalPid` into (pid, tid).
pub fn split_global_tid(global: i64) -> (u32, u32) {
    (
        ((global >> 24) & 0xFF_FFFF) as u32,
        (global & 0xFF_FFFF) as u32,
    )
}

/// The function name of a demangled kernel name, without return type, scope, template arguments
/// or parameters, as nsys's `shortName` shows it: `void at::native::elementwise_kernel<128,
/// 2, ...>(int, ...)` → `elementwise_kernel`. Names that are not C++ signatures come back whole.
/// It reads both spellings of a demangled name, nsys's (`cu++filt`: `<unnamed>`, `(int)4`) and
/// the GNU demangler's that Kineto writes (`(anonymous namespace)`, `4`), so `collect` writes
/// and the Kineto reader derives the `shortName` nsys would store.
pub fn short_name(demangled: &str) -> String {
    // Anonymous namespaces contain brackets of their own; give them plain names first.
    let s = demangled
        .trim()
        .replace("(anonymous namespace)", "anonymous_namespace")
        .replace("<unnamed>", "unnamed");
    // Keep only what is outside every bracket: `void at::native::elementwise_kernel` (plus
    // `::name` pieces after a scope's template arguments, and trailing qualifiers).
    let mut outer = String::with_capacity(s.len());
    let mut depth: i32 = 0;
    for c in s.chars() {
        match c {
            '<' | '(' | '[' | '{' => depth += 1,
            '>' | ')' | ']' | '}' => depth = (depth - 1).max(0),
            _ if depth == 0 => outer.push(c),
            _ => {}
        }
    }
    let mut words: Vec<&str> = outer.split_whitespace().collect();
    while let Some(last) = words.last() {
        if matches!(*last, "const" | "volatile" | "&" | "&&" | "noexcept") {
            words.pop();
        } else {
            break;
        }
    }
    let Some(last) = words.last() else {
        return demangled.trim().to_owned();
    };
    let scoped = last.trim_end_matches(':');
    let name = scoped.rsplit("::").next().unwrap_or(scoped);
    if name.is_empty() {
        demangled.trim().to_owned()
    } else {
        name.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::Connection;

    #[test]
    fn global_ids_match_nsys() {
        // From torch_small_ctx128_train_fp32.sqlite: pid 549, its main thread 549.
        assert_eq!(global_pid(549), 281_484_187_402_240);
        assert_eq!(global_tid(549, 549), 281_484_187_402_789);
    }

    #[test]
    fn global_tid_splits_into_pid_and_tid() {
        // From torch_small_ctx128_train_fp32.sqlite: pid 549, its main thread 549.
        assert_eq!(split_global_tid(281_484_187_402_789), (549, 549));
        assert_eq!(split_global_tid(281_484_187_402_240), (549, 0));
    }

    #[test]
    fn short_names_match_nsys_for_both_spellings() {
        // nsys's demangledName and shortName, from torch_small_ctx128_train_fp32.sqlite.
        let nsys = "void at::native::<unnamed>::multi_tensor_apply_kernel<at::native::<unnamed>::TensorListMetadata<(int)1>, at::native::<unnamed>::BinaryOpScalarFunctor<float, (int)1, (int)1, (int)0>, std::plus<float>, float>(T1, T2, T3...)";
        assert_eq!(short_name(nsys), "multi_tensor_apply_kernel");
        // The same kernel as Kineto writes it.
        let kineto = "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<1>, at::native::(anonymous namespace)::BinaryOpScalarFunctor<float, 1, 1, 0>, std::plus<float>, float>(at::native::(anonymous namespace)::TensorListMetadata<1>, at::native::(anonymous namespace)::BinaryOpScalarFunctor<float, 1, 1, 0>, std::plus<float>, float)";
        assert_eq!(short_name(kineto), "multi_tensor_apply_kernel");
        assert_eq!(
            short_name("void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>(cutlass_80_simt_sgemm_256x128_8x4_nn_align1::Params)"),
            "Kernel2"
        );
        let xmma = "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize64x64x8_stage3_warpsize1x4x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas";
        assert_eq!(short_name(xmma), xmma);
        assert_eq!(
            short_name("void (anonymous namespace)::elementwise_kernel_with_index<int, at::native::arange_cuda_out(c10::Scalar const&, c10::Scalar const&, c10::Scalar const&, at::Tensor&)::{lambda()#1}::operator()() const::{lambda()#4}::operator()() const::{lambda(long)#1}>(int, at::native::arange_cuda_out(c10::Scalar const&, c10::Scalar const&, c10::Scalar const&, at::Tensor&)::{lambda()#1}::operator()() const::{lambda()#4}::operator()() const::{lambda(long)#1}, function_traits<at::native::arange_cuda_out(c10::Scalar const&, c10::Scalar const&, c10::Scalar const&, at::Tensor&)::{lambda()#1}::operator()() const::{lambda()#4}::operator()() const::{lambda(long)#1}>::result_type*)"),
            "elementwise_kernel_with_index"
        );
        assert_eq!(short_name("foo::bar<int>::baz(int) const"), "baz");
    }

    #[test]
    fn the_schema_creates_every_table_analyze_reads() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(SCHEMA_SQL).unwrap();
        for t in [
            table::STRING_IDS,
            table::KERNEL,
            table::RUNTIME,
            table::NVTX_EVENTS,
            table::MEMCPY,
            table::MEMSET,
            table::TARGET_INFO_GPU,
            table::META_DATA_EXPORT,
            table::ENUM_CUDA_MEMCPY_OPER,
        ] {
            let n: i64 = conn
                .query_row(
                    "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1",
                    [t],
                    |r| r.get(0),
                )
                .unwrap();
            assert_eq!(n, 1, "{t}");
        }
        let labels: i64 = conn
            .query_row("SELECT count(*) FROM ENUM_CUDA_MEMCPY_OPER", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(labels, 14);
    }

    /// Every table a writer creates has the columns this module names for it, and the enum ids
    /// here carry the labels nsys gives them.
    #[test]
    fn the_names_here_are_the_schemas() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(SCHEMA_SQL).unwrap();
        let columns = |t: &str| -> Vec<String> {
            let mut st = conn
                .prepare(&format!("PRAGMA table_info(\"{t}\")"))
                .unwrap();
            let names = st.query_map([], |r| r.get(1)).unwrap();
            names.map(Result::unwrap).collect()
        };
        use column::*;
        for (t, cols) in [
            (table::STRING_IDS, &[ID, VALUE][..]),
            (
                table::KERNEL,
                &[
                    START,
                    END,
                    DEVICE_ID,
                    CONTEXT_ID,
                    GREEN_CONTEXT_ID,
                    STREAM_ID,
                    CORRELATION_ID,
                    GLOBAL_PID,
                    DEMANGLED_NAME,
                    SHORT_NAME,
                    MANGLED_NAME,
                    LAUNCH_TYPE,
                    CACHE_CONFIG,
                    REGISTERS_PER_THREAD,
                    GRID_X,
                    GRID_Y,
                    GRID_Z,
                    BLOCK_X,
                    BLOCK_Y,
                    BLOCK_Z,
                    STATIC_SHARED_MEMORY,
                    DYNAMIC_SHARED_MEMORY,
                    LOCAL_MEMORY_PER_THREAD,
                    LOCAL_MEMORY_TOTAL,
                    GRID_ID,
                    SHARED_MEMORY_EXECUTED,
                    GRAPH_NODE_ID,
                    SHARED_MEMORY_LIMIT_CONFIG,
                ][..],
            ),
            (
                table::RUNTIME,
                &[
                    START,
                    END,
                    EVENT_CLASS,
                    GLOBAL_TID,
                    CORRELATION_ID,
                    NAME_ID,
                    RETURN_VALUE,
                    CALLCHAIN_ID,
                ][..],
            ),
            (
                table::NVTX_EVENTS,
                &[
                    START,
                    END,
                    EVENT_TYPE,
                    TEXT,
                    TEXT_ID,
                    GLOBAL_TID,
                    END_GLOBAL_TID,
                    DOMAIN_ID,
                ][..],
            ),
            (
                table::MEMCPY,
                &[
                    START,
                    END,
                    DEVICE_ID,
                    CONTEXT_ID,
                    GREEN_CONTEXT_ID,
                    STREAM_ID,
                    CORRELATION_ID,
                    GLOBAL_PID,
                    BYTES,
                    COPY_KIND,
                    SRC_KIND,
                    DST_KIND,
                    COPY_COUNT,
                ][..],
            ),
            (
                table::MEMSET,
                &[
                    START,
                    END,
                    DEVICE_ID,
                    CONTEXT_ID,
                    GREEN_CONTEXT_ID,
                    STREAM_ID,
                    CORRELATION_ID,
                    GLOBAL_PID,
                    VALUE,
                    BYTES,
                    MEM_KIND,
                ][..],
            ),
            (
                table::TARGET_INFO_GPU,
                &[
                    VM_ID,
                    ID,
                    NAME,
                    BUS_LOCATION,
                    IS_DISCRETE,
                    L2_CACHE_SIZE,
                    TOTAL_MEMORY,
                    CLOCK_RATE,
                    SM_COUNT,
                    UUID,
                    CU_DEVICE,
                    COMPUTE_MAJOR,
                    COMPUTE_MINOR,
                    SM_MAJOR,
                    SM_MINOR,
                ][..],
            ),
            (table::TARGET_INFO_CUDA_DEVICE, &[GPU_ID, CUDA_ID, PID][..]),
            (
                table::TARGET_INFO_CUDA_STREAM,
                &[
                    STREAM_ID, HW_ID, VM_ID, PROCESS_ID, CONTEXT_ID, PRIORITY, FLAG,
                ][..],
            ),
            (
                table::TARGET_INFO_SESSION_START_TIME,
                &[UTC_EPOCH_NS, UTC_TIME, LOCAL_TIME][..],
            ),
            (table::PROCESSES, &[GLOBAL_PID, PID, NAME][..]),
            (table::THREAD_NAMES, &[NAME_ID, PRIORITY, GLOBAL_TID][..]),
            (
                table::ANALYSIS_DETAILS,
                &[GLOBAL_VID, DURATION, START_TIME, STOP_TIME][..],
            ),
            (table::META_DATA_EXPORT, &[NAME, VALUE][..]),
            (table::META_DATA_CAPTURE, &[NAME, VALUE][..]),
        ] {
            let have = columns(t);
            for c in cols {
                assert!(have.iter().any(|h| h == c), "{t} has no column {c}");
            }
        }
        let label = |t: &str, id: i64| -> String {
            conn.query_row(&format!("SELECT name FROM {t} WHERE id = ?1"), [id], |r| {
                r.get(0)
            })
            .unwrap()
        };
        let ev = "ENUM_NSYS_EVENT_TYPE";
        assert_eq!(label(ev, event_type::NVTX_MARK), "NvtxMark");
        assert_eq!(
            label(ev, event_type::NVTX_PUSH_POP_RANGE),
            "NvtxPushPopRange"
        );
        assert_eq!(
            label(ev, event_type::NVTX_START_END_RANGE),
            "NvtxStartEndRange"
        );
        assert_eq!(label(ev, event_type::NVTXT_MARK), "NvtxtMark");
        assert_eq!(
            label(ev, event_type::NVTXT_PUSH_POP_RANGE),
            "NvtxtPushPopRange"
        );
        assert_eq!(
            label(ev, event_type::NVTXT_START_END_RANGE),
            "NvtxtStartEndRange"
        );
        assert_eq!(
            label(ev, event_type::NVTX_DOMAIN_CREATE),
            "NvtxDomainCreate"
        );
        let class = "ENUM_NSYS_EVENT_CLASS";
        assert_eq!(
            label(class, event_class::CUDA_RUNTIME),
            "TRACE_PROCESS_EVENT_CUDA_RUNTIME"
        );
        assert_eq!(
            label(class, event_class::CUDA_DRIVER),
            "TRACE_PROCESS_EVENT_CUDA_DRIVER"
        );
        let copy = table::ENUM_CUDA_MEMCPY_OPER;
        assert_eq!(
            label(copy, copy_kind::HOST_TO_DEVICE),
            "CUDA_MEMCPY_KIND_HTOD"
        );
        assert_eq!(
            label(copy, copy_kind::DEVICE_TO_HOST),
            "CUDA_MEMCPY_KIND_DTOH"
        );
        assert_eq!(
            label(copy, copy_kind::DEVICE_TO_DEVICE),
            "CUDA_MEMCPY_KIND_DTOD"
        );
        assert_eq!(
            label(copy, copy_kind::HOST_TO_HOST),
            "CUDA_MEMCPY_KIND_HTOH"
        );
        assert_eq!(
            label(copy, copy_kind::PEER_TO_PEER),
            "CUDA_MEMCPY_KIND_PTOP"
        );
        let mem = table::ENUM_CUDA_MEM_KIND;
        for (id, name) in [
            (mem_kind::PAGEABLE, "PAGEABLE"),
            (mem_kind::PINNED, "PINNED"),
            (mem_kind::DEVICE, "DEVICE"),
            (mem_kind::UNKNOWN, "UNKNOWN"),
        ] {
            assert_eq!(
                label(mem, i64::from(id)),
                format!("CUDA_MEMOPR_MEMORY_KIND_{name}")
            );
        }
    }
}
