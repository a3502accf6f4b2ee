//! `collect`'s trace writers read back by the readers that matter: a synthetic trace written by
//! the nsys-schema writer through `analyze`'s nsys reader (and plain SQL), and raw CUPTI records
//! through the converter. Real files from `../shared/fixtures/ours` give the schema and the
//! kernel names to match; tests that need them say so and skip when they are absent.

use crate::common;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use analyze::formats::nsys_sqlite::write::{
    self as nsys_write, ApiClass, ApiRecord, GpuInfo, GpuSpan, KernelLaunch, KernelRecord,
    MemcpyRecord, MemsetRecord, ProcessInfo, TraceRecords,
};
use analyze::formats::run_metadata::RunMetadata;
use analyze::model::{ApiKind, MemOpKind, RangeStyle};
use collect::bench::report;
use collect::trace::cupti::{self, Activity, ApiDomain, NameCache, RecordConverter};
use collect::trace::ranges::RangeLog;
use collect::transformer::config::{Mode, ModelConfig, RunConfig};

const PID: u32 = 4242;
const TID: u32 = 4242;

fn name(s: &str) -> nsys_write::Name {
    Arc::from(s)
}

/// An operation on device 0, context 1, stream 7.
fn span(start: i64, end: i64, correlation_id: u32) -> GpuSpan {
    GpuSpan {
        start,
        end,
        device_id: 0,
        context_id: 1,
        stream_id: 7,
        correlation_id,
    }
}

/// A kernel launched by `cuLaunchKernel` at `t` (API call 0..3 µs after `t`), running on the GPU
/// from `t + 5 µs` for `dur` ns.
fn launch(out: &mut TraceRecords, t: i64, corr: u32, kernel: &str, dur: i64) {
    out.api_calls.push(ApiRecord {
        start: t,
        end: t + 3_000,
        pid: PID,
        tid: TID,
        correlation_id: corr,
        name: name("cuLaunchKernel"),
        class: ApiClass::Driver,
        return_value: 0,
    });
    out.kernels.push(KernelRecord {
        span: span(t + 5_000, t + 5_000 + dur, corr),
        pid: PID,
        name: name(kernel),
        short_name: name(kernel),
        mangled_name: None,
        launch: KernelLaunch {
            grid: [corr as i32 % 7 + 1, 2, 1],
            block: [256, 1, 1],
            registers_per_thread: 32,
            static_shared_memory: 1024,
            dynamic_shared_memory: 4096,
            local_memory_per_thread: 0,
            local_memory_total: 0,
            grid_id: corr as i64,
            shared_memory_executed: 32768,
            launch_type: 1,
            cache_config: 1,
            shared_memory_limit_config: 0,
        },
    });
}

/// Two training steps: `step_N` ⊃ `forward` (⊃ three attention ranges) / `backward` /
/// `optimizer`, one kernel per leaf range and one per phase, a host-to-device copy before the
/// steps and a memset in each optimizer phase. Times in ns.
fn synthetic_trace() -> TraceRecords {
    let mut out = TraceRecords {
        process: ProcessInfo {
            pid: PID,
            name: "collect".into(),
            threads: vec![(TID, "collect".into())],
        },
        gpus: vec![GpuInfo {
            id: 0,
            name: "NVIDIA H200".into(),
            total_memory: Some(150_109_880_320),
            sm_count: Some(132),
            compute_major: Some(9),
            compute_minor: Some(0),
            ..GpuInfo::default()
        }],
        session_start_utc_ns: Some(1_795_314_601_687_569_420),
        ..TraceRecords::default()
    };
    // As `collect bench` describes the small model at context 128, batch 4, training in fp32.
    let small = ModelConfig::preset("small").unwrap();
    out.run = RunMetadata::describe(&report::run_description(&RunConfig::new(
        small,
        128,
        4,
        Mode::Train,
    )));
    out.run.set_step_times_ms(&[12.5, 12.25]);

    // The initial weight upload.
    out.api_calls.push(ApiRecord {
        start: 1_000,
        end: 9_000,
        pid: PID,
        tid: TID,
        correlation_id: 1,
        name: name("cudaMemcpyAsync_v3020"),
        class: ApiClass::Runtime,
        return_value: 0,
    });
    out.memcpys.push(MemcpyRecord {
        span: span(10_000, 60_000, 1),
        pid: PID,
        bytes: 2_359_296,
        copy_kind: 1,
        src_kind: 0,
        dst_kind: 2,
    });

    let mut ranges = RangeLog::new(PID);
    let mut corr = 10;
    for step in 0..2i64 {
        let t0 = 1_000_000 + step * 1_000_000;
        ranges.push(&format!("step_{step}"), t0, TID);
        ranges.push("forward", t0 + 10_000, TID);
        launch(&mut out, t0 + 20_000, corr, "embedding_fwd", 7_000);
        corr += 1;
        for (i, attn) in [
            "attention_matmul_QK",
            "attention_softmax",
            "attention_matmul_V",
        ]
        .iter()
        .enumerate()
        {
            let t = t0 + 100_000 + i as i64 * 50_000;
            ranges.push(attn, t, TID);
            launch(
                &mut out,
                t + 10_000,
                corr,
                &format!("{attn}_kernel"),
                11_000,
            );
            corr += 1;
            ranges.pop(t + 40_000, TID);
        }
        ranges.pop(t0 + 400_000, TID);
        ranges.push("backward", t0 + 410_000, TID);
        launch(&mut out, t0 + 420_000, corr, "gemm_backward", 20_000 + step);
        corr += 1;
        ranges.pop(t0 + 700_000, TID);
        ranges.push("optimizer", t0 + 710_000, TID);
        launch(&mut out, t0 + 720_000, corr, "adamw_step", 9_000);
        out.api_calls.push(ApiRecord {
            start: t0 + 730_000,
            end: t0 + 732_000,
            pid: PID,
            tid: TID,
            correlation_id: corr + 1,
            name: name("cuMemsetD32Async"),
            class: ApiClass::Driver,
            return_value: 0,
        });
        out.memsets.push(MemsetRecord {
            span: span(t0 + 740_000, t0 + 741_500, corr + 1),
            pid: PID,
            value: 0,
            bytes: 4608,
            mem_kind: 2,
        });
        corr += 2;
        ranges.pop(t0 + 900_000, TID);
        ranges.pop(t0 + 950_000, TID);
    }
    // A range left open when the trace ended.
    ranges.push("measurement_tail", 5_000_000, TID);
    out.ranges = ranges.finish();
    out
}

fn write_trace(dir: &Path, records: &TraceRecords) -> std::path::PathBuf {
    let path = dir.join("trace.sqlite");
    nsys_write::to_file(&path, records).unwrap();
    path
}

#[test]
fn synthetic_trace_reads_back_through_analyze() {
    let records = synthetic_trace();
    let dir = tempfile::tempdir().unwrap();
    let path = write_trace(dir.path(), &records);
    let t = analyze::formats::load_trace(&path).unwrap();

    assert_eq!(t.source.schema_version.as_deref(), Some("3.20.3"));
    assert!(t.source.missing.is_empty(), "{:?}", t.source.missing);
    let run: Vec<(String, String)> = records
        .run
        .entries()
        .map(|(n, v)| (n.to_owned(), v.to_owned()))
        .collect();
    assert_eq!(t.source.run, run.into_iter().collect::<BTreeMap<_, _>>());
    assert_eq!(t.source.run["step_times_ms"], "12.5,12.25");
    assert_eq!(t.source.run["d_model"], "768");

    // Kernels: names, instances, durations, launch geometry, correlation.
    assert_eq!(t.kernels.len(), records.kernels.len());
    let mut expected: Vec<&KernelRecord> = records.kernels.iter().collect();
    expected.sort_by_key(|k| k.span.start);
    for (got, want) in t.kernels.iter().zip(&expected) {
        assert_eq!(t.name(got.name), &*want.name);
        assert_eq!(t.name(got.short_name), &*want.short_name);
        assert_eq!(got.duration().0, want.span.end - want.span.start);
        assert_eq!(got.span.start.0, want.span.start);
        assert_eq!(got.span.correlation_id, want.span.correlation_id as u64);
        assert_eq!(
            (got.span.device, got.span.stream, got.span.pid),
            (0, 7, PID)
        );
        assert_eq!(got.grid, [want.launch.grid[0] as u32, 2, 1]);
        assert_eq!(got.block, [256, 1, 1]);
        assert_eq!(got.registers_per_thread, 32);
        assert_eq!(
            (got.static_shared_memory, got.dynamic_shared_memory),
            (1024, 4096)
        );
    }
    let mut instances: HashMap<&str, usize> = HashMap::new();
    for k in &t.kernels {
        *instances.entry(t.name(k.name)).or_default() += 1;
    }
    assert_eq!(instances["attention_softmax_kernel"], 2);
    assert_eq!(instances.len(), 6);
    let gemm: Vec<i64> = t
        .kernels
        .iter()
        .filter(|k| t.name(k.name) == "gemm_backward")
        .map(|k| k.duration().0)
        .collect();
    assert_eq!(gemm, [20_000, 20_001]);

    // API calls: runtime vs driver, threads.
    assert_eq!(t.api_calls.len(), records.api_calls.len());
    let memcpy_call = t
        .api_calls
        .iter()
        .find(|c| t.name(c.name) == "cudaMemcpyAsync_v3020")
        .unwrap();
    assert_eq!(memcpy_call.kind, ApiKind::Runtime);
    assert!(t
        .api_calls
        .iter()
        .filter(|c| t.name(c.name) == "cuLaunchKernel")
        .all(|c| c.kind == ApiKind::Driver && (c.pid, c.tid) == (PID, TID)));

    // Ranges: the closed ones, with names, times, style and thread; the open one left out.
    assert_eq!(t.ranges.len(), 2 * 7);
    let steps: Vec<(&str, i64, i64)> = t
        .ranges
        .iter()
        .filter(|r| t.name(r.name).starts_with("step_"))
        .map(|r| (t.name(r.name), r.start.0, r.end.0))
        .collect();
    assert_eq!(
        steps,
        [
            ("step_0", 1_000_000, 1_950_000),
            ("step_1", 2_000_000, 2_950_000)
        ]
    );
    assert!(t
        .ranges
        .iter()
        .all(|r| r.style == RangeStyle::PushPop && (r.pid, r.tid) == (PID, TID)));
    assert_eq!(t.range_label(&t.ranges[1]), ":forward");

    // Memory operations.
    let kinds: Vec<(MemOpKind, u64)> = t.mem_ops.iter().map(|m| (m.kind, m.bytes.0)).collect();
    assert_eq!(
        kinds,
        [
            (MemOpKind::HostToDevice, 2_359_296),
            (MemOpKind::Memset, 4608),
            (MemOpKind::Memset, 4608)
        ]
    );

    assert_eq!(t.gpus.len(), 1);
    assert_eq!(t.gpus[0].name, "NVIDIA H200");
    assert_eq!(t.gpus[0].sm_count, Some(132));
    assert_eq!(t.gpus[0].compute_capability, Some((9, 0)));
    assert_eq!(t.name(t.thread_names[&(PID, TID)]), "collect");
}

/// The join `nvtx_kern_sum` makes (kernel → launching API call by correlation id and process →
/// enclosing ranges on the launching thread), written here as plain SQL over the file.
#[test]
fn kernels_attribute_to_ranges_through_their_api_calls() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_trace(dir.path(), &synthetic_trace());
    let conn = rusqlite::Connection::open(&path).unwrap();
    let mut st = conn
        .prepare(
            "SELECT ne.text, count(DISTINCT k.rowid), sum(k.end - k.start)
             FROM CUPTI_ACTIVITY_KIND_KERNEL AS k
             JOIN CUPTI_ACTIVITY_KIND_RUNTIME AS r
               ON r.correlationId = k.correlationId
              AND (r.globalTid & 0xFFFFFFFFFF000000) = k.globalPid
             JOIN NVTX_EVENTS AS ne
               ON ne.globalTid = r.globalTid AND ne.start <= r.start AND ne.end >= r.end
             WHERE ne.eventType = 59
             GROUP BY ne.text ORDER BY ne.text",
        )
        .unwrap();
    let rows: Vec<(String, i64, i64)> = st
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let expect = [
        ("attention_matmul_QK", 2, 22_000),
        ("attention_matmul_V", 2, 22_000),
        ("attention_softmax", 2, 22_000),
        ("backward", 2, 40_001),
        ("forward", 8, 2 * (7_000 + 3 * 11_000)),
        ("optimizer", 2, 18_000),
        ("step_0", 6, 7_000 + 33_000 + 20_000 + 9_000),
        ("step_1", 6, 7_000 + 33_000 + 20_001 + 9_000),
    ];
    let got: Vec<(&str, i64, i64)> = rows.iter().map(|(n, c, s)| (n.as_str(), *c, *s)).collect();
    assert_eq!(got, expect);
    // Every kernel joins exactly one API call.
    let orphans: i64 = conn
        .query_row(
            "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL AS k WHERE (SELECT count(*) FROM \
             CUPTI_ACTIVITY_KIND_RUNTIME AS r WHERE r.correlationId = k.correlationId) != 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(orphans, 0);
}

#[test]
#[cfg_attr(
    no_shared_ours,
    ignore = "needs ../shared/fixtures/ours beside the checkout"
)]
fn trace_tables_are_created_as_nsys_creates_them() {
    let Some(real) = common::shared("ours/nsys/torch_small_ctx128_train_fp32.sqlite") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let ours = write_trace(dir.path(), &synthetic_trace());
    let schema = |p: &Path| -> BTreeMap<String, String> {
        let c =
            rusqlite::Connection::open_with_flags(p, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
                .unwrap();
        let mut st = c
            .prepare("SELECT name, sql FROM sqlite_master WHERE type = 'table'")
            .unwrap();
        let rows = st
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        rows
    };
    let (real, ours) = (schema(&real), schema(&ours));
    for (table, sql) in &real {
        assert_eq!(ours.get(table), Some(sql), "{table}");
    }
    assert_eq!(ours.len(), real.len() + 1, "plus RUN_METADATA");
    let c = rusqlite::Connection::open(dir.path().join("trace.sqlite")).unwrap();
    let version: String = c
        .query_row(
            "SELECT value FROM META_DATA_EXPORT WHERE name = 'EXPORT_SCHEMA_VERSION'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(version, "3.20.3");
}

#[test]
fn writing_over_an_existing_trace_replaces_it_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_trace(dir.path(), &synthetic_trace());
    let small = TraceRecords {
        process: ProcessInfo {
            pid: 1,
            ..ProcessInfo::default()
        },
        ..TraceRecords::default()
    };
    nsys_write::to_file(&path, &small).unwrap();
    let t = analyze::formats::load_trace(&path).unwrap();
    assert!(t.kernels.is_empty());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    let missing = dir.path().join("no/such/dir/trace.sqlite");
    assert!(nsys_write::to_file(&missing, &small).is_err());
}

// ---------------------------------------------------------------------------------------------
// CUPTI records.

use cudarc::cupti::sys;

fn zeroed<T>() -> T {
    // SAFETY: the CUPTI record structs are plain data (integers, raw pointers, unions of
    // integers), for which all-zero bytes are valid.
    unsafe { std::mem::zeroed() }
}

/// A real mangled name from the nsys fixture, with nsys's `shortName` for it.
const MANGLED: &str = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_";

#[test]
fn raw_cupti_records_convert_write_and_read_back() {
    let mangled = std::ffi::CString::new(MANGLED).unwrap();
    let mut k: sys::CUpti_ActivityKernel10 = zeroed();
    k.kind = sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    k.start = 2_000_000;
    k.end = 2_012_345;
    k.deviceId = 0;
    k.contextId = 1;
    k.streamId = 7;
    k.correlationId = 55;
    k.gridX = 80;
    k.gridY = 1;
    k.gridZ = 1;
    k.blockX = 128;
    k.blockY = 1;
    k.blockZ = 1;
    k.registersPerThread = 40;
    k.staticSharedMemory = 512;
    k.dynamicSharedMemory = 8192;
    k.launchType = 1;
    k.cacheConfig.both = 0x10;
    k.name = mangled.as_ptr();

    let mut rt: sys::CUpti_ActivityAPI = zeroed();
    rt.kind = sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_RUNTIME;
    rt.cbid = 211;
    rt.start = 1_990_000;
    rt.end = 1_995_000;
    rt.processId = PID;
    rt.threadId = TID;
    rt.correlationId = 55;
    // The driver call the runtime call made: same correlation id, dropped as nsys drops it.
    let mut drv: sys::CUpti_ActivityAPI = rt;
    drv.kind = sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_DRIVER;
    drv.cbid = 307;
    drv.start = 1_991_000;
    drv.end = 1_994_000;
    // A driver call of its own.
    let mut own: sys::CUpti_ActivityAPI = drv;
    own.correlationId = 56;
    // A query nsys does not record (cuBLAS makes one after every launch).
    let mut query: sys::CUpti_ActivityAPI = rt;
    query.cbid = 10;
    query.correlationId = 59;

    let mut cp: sys::CUpti_ActivityMemcpy6 = zeroed();
    cp.kind = sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMCPY;
    cp.copyKind = 2; // device to host
    cp.srcKind = 3; // CUPTI device
    cp.dstKind = 2; // CUPTI pinned
    cp.bytes = 4096;
    cp.start = 3_000_000;
    cp.end = 3_001_000;
    cp.streamId = 7;
    cp.correlationId = 57;

    let mut ms: sys::CUpti_ActivityMemset4 = zeroed();
    ms.kind = sys::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMSET;
    ms.value = 0;
    ms.bytes = 1 << 20;
    ms.start = 3_100_000;
    ms.end = 3_100_800;
    ms.streamId = 7;
    ms.correlationId = 58;
    ms.memoryKind = 3; // CUPTI device

    let mut other: sys::CUpti_ActivityAPI = zeroed();
    // SAFETY: the kind is read as an integer, so any value is allowed; 23 is a kind not traced.
    unsafe { std::ptr::write(&mut other as *mut _ as *mut u32, 23) };

    let mut names = NameCache::default();
    // SAFETY: each pointer is to a complete record of the kind it names.
    let acts: Vec<Activity> = unsafe {
        [
            &k as *const _ as *const sys::CUpti_Activity,
            &rt as *const _ as *const sys::CUpti_Activity,
            &drv as *const _ as *const sys::CUpti_Activity,
            &own as *const _ as *const sys::CUpti_Activity,
            &query as *const _ as *const sys::CUpti_Activity,
            &cp as *const _ as *const sys::CUpti_Activity,
            &ms as *const _ as *const sys::CUpti_Activity,
            &other as *const _ as *const sys::CUpti_Activity,
        ]
        .into_iter()
        .filter_map(|p| cupti::activity_from_record(p, &mut names))
        .collect()
    };
    assert_eq!(acts.len(), 7, "the unknown kind is skipped");

    let mut conv = RecordConverter::new(PID, |domain, cbid| match (domain, cbid) {
        (ApiDomain::Runtime, 211) => "cudaLaunchKernel_v7000".into(),
        (ApiDomain::Driver, 307) => "cuLaunchKernel".into(),
        (ApiDomain::Runtime, 10) => "cudaGetLastError_v3020".into(),
        _ => format!("<cbid {cbid}>"),
    });
    let mut out = TraceRecords {
        process: ProcessInfo {
            pid: PID,
            name: "collect".into(),
            threads: vec![],
        },
        ..TraceRecords::default()
    };
    conv.convert(&acts, &mut out);
    assert_eq!(
        out.api_calls.len(),
        2,
        "nested driver call and the query nsys leaves out dropped"
    );

    let dir = tempfile::tempdir().unwrap();
    let path = write_trace(dir.path(), &out);
    let t = analyze::formats::load_trace(&path).unwrap();
    assert_eq!(t.kernels.len(), 1);
    let kr = &t.kernels[0];
    assert_eq!(t.name(kr.short_name), "vectorized_elementwise_kernel");
    // As nsys (cu++filt) spells it.
    assert_eq!(
        t.name(kr.name),
        "void at::native::vectorized_elementwise_kernel<(int)4, at::native::FillFunctor<float>, \
         std::array<char *, (unsigned long)1>>(int, T2, T3)"
    );
    assert_eq!(kr.mangled_name.map(|m| t.name(m)), Some(MANGLED));
    assert_eq!(kr.duration().0, 12_345);
    assert_eq!((kr.grid, kr.block), ([80, 1, 1], [128, 1, 1]));
    assert_eq!(kr.registers_per_thread, 40);
    assert_eq!(
        (kr.static_shared_memory, kr.dynamic_shared_memory),
        (512, 8192)
    );
    let calls: Vec<(&str, ApiKind, u64)> = t
        .api_calls
        .iter()
        .map(|c| (t.name(c.name), c.kind, c.correlation_id))
        .collect();
    assert_eq!(
        calls,
        [
            ("cudaLaunchKernel_v7000", ApiKind::Runtime, 55),
            ("cuLaunchKernel", ApiKind::Driver, 56)
        ]
    );
    let ops: Vec<(MemOpKind, u64)> = t.mem_ops.iter().map(|m| (m.kind, m.bytes.0)).collect();
    assert_eq!(
        ops,
        [
            (MemOpKind::DeviceToHost, 4096),
            (MemOpKind::Memset, 1 << 20)
        ]
    );
    // CUPTI's memory kinds become nsys's (device 3 -> 2, pinned 2 -> 1).
    let c = rusqlite::Connection::open(&path).unwrap();
    let kinds: (i64, i64, i64) = c
        .query_row(
            "SELECT m.srcKind, m.dstKind, s.memKind FROM CUPTI_ACTIVITY_KIND_MEMCPY m, \
             CUPTI_ACTIVITY_KIND_MEMSET s",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(kinds, (2, 1, 2));
}

/// nsys's `shortName` for every kernel of a real export, from its `mangledName`.
#[test]
#[cfg_attr(
    no_shared_ours,
    ignore = "needs ../shared/fixtures/ours beside the checkout"
)]
fn kernel_short_names_match_nsys() {
    let Some(real) = common::shared("ours/nsys/torch_small_ctx128_train_fp32.sqlite") else {
        return;
    };
    let pairs = crate::formats::kernel_short_names(&real, "mangledName");
    assert!(pairs.len() > 30, "{}", pairs.len());
    for (mangled, short) in &pairs {
        assert_eq!(&cupti::kernel_names(mangled).short, short, "{mangled}");
    }
}
