//! GPU traces as SQLite in the Nsight Systems export schema (3.20.3, nsys 2025.3), so that
//! `nsys stats` reports on them and `analyze` reads them exactly like an nsys capture.
//!
//! The file gets every table of a real export (`collect/schema/nsys_export_3.20.3.sql`, the
//! `CREATE TABLE` statements copied from one, with the `ENUM_*` rows the stats scripts join) and
//! fills those a CUPTI trace has data for: `StringIds`, `CUPTI_ACTIVITY_KIND_KERNEL`,
//! `CUPTI_ACTIVITY_KIND_RUNTIME` (runtime and driver API calls, told apart by `eventClass` as
//! nsys does), `NVTX_EVENTS` (push/pop ranges, text inline), `CUPTI_ACTIVITY_KIND_MEMCPY`,
//! `CUPTI_ACTIVITY_KIND_MEMSET`, `TARGET_INFO_GPU`, `TARGET_INFO_CUDA_DEVICE`,
//! `TARGET_INFO_CUDA_STREAM`, `PROCESSES`, `ThreadNames`, `ANALYSIS_DETAILS` and
//! `META_DATA_EXPORT`. The version rows of `META_DATA_EXPORT` are those of the export the schema
//! came from, because `nsys stats` checks them; `EXPORT_WRITER` says that `collect` wrote the
//! file. A `RUN_METADATA (name, value)` table carries the run's configuration and step times.
//!
//! Identifiers follow nsys: `globalPid = (1 << 48) | pid << 24` (the 1 is nsys's local VM id)
//! and `globalTid = globalPid | tid`. Times are written as given (nanoseconds, one clock for
//! every record). The file is written to a temporary file beside the target and renamed into
//! place, so a reader never sees half a trace. Records come from [`crate::cupti`] on the GPU or
//! from tests; nothing here touches a device.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rusqlite::{params, Connection};

use crate::run_metadata::RunMetadata;

/// The export schema, embedded.
pub const SCHEMA_SQL: &str = include_str!("../schema/nsys_export_3.20.3.sql");

/// `META_DATA_EXPORT` rows that identify the schema version (from the export it came from).
const EXPORT_VERSION_ROWS: &[(&str, &str)] = &[
    ("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"),
    ("EXPORT_PRODUCT_VERSION", "2025.3.2.0"),
    ("EXPORT_PRODUCT_DATE", "2025.3"),
    ("EXPORT_SCHEMA_VERSION", "3.20.3"),
    ("EXPORT_SCHEMA_VERSION_MAJOR", "3"),
    ("EXPORT_SCHEMA_VERSION_MINOR", "20"),
    ("EXPORT_SCHEMA_VERSION_MICRO", "3"),
    ("EXPORT_SCHEMA_VERSION_CKSUM", "4021079525 170230"),
    ("EXPORT_PLATFORM", "linux-desktop"),
    ("EXPORT_ARCH", "x64"),
];

/// nsys's `ENUM_NSYS_EVENT_CLASS` ids for API calls.
const EVENT_CLASS_RUNTIME: i64 = 0;
const EVENT_CLASS_DRIVER: i64 = 1;
/// `ENUM_NSYS_EVENT_TYPE`: NVTX push/pop range.
const NVTX_PUSH_POP_RANGE: i64 = 59;
/// The VM id nsys puts in the top bits of global ids for the local machine.
const LOCAL_VM: i64 = 1 << 48;

/// What can go wrong writing a trace.
#[derive(Debug, thiserror::Error)]
pub enum TraceDbError {
    #[error("{}: SQLite error: {source}", path.display())]
    Sqlite {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A name shared by many records.
pub type Name = Arc<str>;

/// nsys's `globalPid` for a process.
pub fn global_pid(pid: u32) -> i64 {
    LOCAL_VM | ((pid as i64 & 0xFF_FFFF) << 24)
}

/// nsys's `globalTid` for a thread.
pub fn global_tid(pid: u32, tid: u32) -> i64 {
    global_pid(pid) | (tid as i64 & 0xFF_FFFF)
}

/// A kernel execution (`CUPTI_ACTIVITY_KIND_KERNEL`).
#[derive(Clone, Debug, PartialEq)]
pub struct KernelRecord {
    pub start: i64,
    pub end: i64,
    pub device_id: u32,
    pub context_id: u32,
    pub stream_id: u32,
    pub correlation_id: u32,
    pub pid: u32,
    /// Demangled name with templates and arguments (`demangledName`).
    pub name: Name,
    /// Base function name (`shortName`).
    pub short_name: Name,
    /// Raw (mangled) name as the driver knows it (`mangledName`).
    pub mangled_name: Option<Name>,
    pub grid: [i32; 3],
    pub block: [i32; 3],
    pub registers_per_thread: u32,
    pub static_shared_memory: i32,
    pub dynamic_shared_memory: i32,
    pub local_memory_per_thread: u32,
    pub local_memory_total: u64,
    pub grid_id: i64,
    pub shared_memory_executed: u32,
    /// `ENUM_CUDA_KERNEL_LAUNCH_TYPE` (1: regular).
    pub launch_type: u8,
    /// `ENUM_CUDA_FUNC_CACHE_CONFIG` (executed).
    pub cache_config: u8,
    /// `ENUM_CUDA_SHARED_MEM_LIMIT_CONFIG`.
    pub shared_memory_limit_config: u8,
}

/// Which API a call belongs to (nsys's `eventClass`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ApiClass {
    Runtime,
    Driver,
}

/// A CUDA runtime or driver API call (`CUPTI_ACTIVITY_KIND_RUNTIME`).
#[derive(Clone, Debug, PartialEq)]
pub struct ApiRecord {
    pub start: i64,
    pub end: i64,
    pub pid: u32,
    pub tid: u32,
    pub correlation_id: u32,
    /// As CUPTI names it: `cudaLaunchKernel_v7000`, `cuLaunchKernel`.
    pub name: Name,
    pub class: ApiClass,
    pub return_value: i64,
}

/// An NVTX push/pop range (`NVTX_EVENTS`, default domain).
#[derive(Clone, Debug, PartialEq)]
pub struct RangeRecord {
    pub start: i64,
    /// `None`: still open when the trace ended (nsys writes NULL; `nsys stats` leaves it out).
    pub end: Option<i64>,
    pub name: Name,
    pub pid: u32,
    pub tid: u32,
}

/// A memcpy executed on the GPU (`CUPTI_ACTIVITY_KIND_MEMCPY`).
#[derive(Clone, Debug, PartialEq)]
pub struct MemcpyRecord {
    pub start: i64,
    pub end: i64,
    pub device_id: u32,
    pub context_id: u32,
    pub stream_id: u32,
    pub correlation_id: u32,
    pub pid: u32,
    pub bytes: u64,
    /// `ENUM_CUDA_MEMCPY_OPER` (1: host to device, 2: device to host, 8: device to device).
    pub copy_kind: u8,
    /// `ENUM_CUDA_MEM_KIND` (0: pageable, 1: pinned, 2: device, 7: unknown).
    pub src_kind: u8,
    pub dst_kind: u8,
}

/// A memset executed on the GPU (`CUPTI_ACTIVITY_KIND_MEMSET`).
#[derive(Clone, Debug, PartialEq)]
pub struct MemsetRecord {
    pub start: i64,
    pub end: i64,
    pub device_id: u32,
    pub context_id: u32,
    pub stream_id: u32,
    pub correlation_id: u32,
    pub pid: u32,
    pub value: u32,
    pub bytes: u64,
    /// `ENUM_CUDA_MEM_KIND`.
    pub mem_kind: u8,
}

/// A GPU (`TARGET_INFO_GPU`); unknown fields are written as NULL.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuInfo {
    pub id: u32,
    pub name: String,
    pub bus_location: Option<String>,
    pub uuid: Option<String>,
    pub total_memory: Option<u64>,
    pub sm_count: Option<u32>,
    pub clock_rate_hz: Option<u64>,
    pub l2_cache_size: Option<u64>,
    pub compute_major: Option<u32>,
    pub compute_minor: Option<u32>,
}

/// The traced process.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProcessInfo {
    pub pid: u32,
    pub name: String,
    /// Thread names by thread id (`ThreadNames`).
    pub threads: Vec<(u32, String)>,
}

/// Everything one trace file holds.
#[derive(Clone, Debug, Default)]
pub struct TraceRecords {
    pub process: ProcessInfo,
    pub kernels: Vec<KernelRecord>,
    pub api_calls: Vec<ApiRecord>,
    pub ranges: Vec<RangeRecord>,
    pub memcpys: Vec<MemcpyRecord>,
    pub memsets: Vec<MemsetRecord>,
    pub gpus: Vec<GpuInfo>,
    pub run: RunMetadata,
    /// Wall-clock time of the start of the capture, nanoseconds since the Unix epoch
    /// (`TARGET_INFO_SESSION_START_TIME`).
    pub session_start_utc_ns: Option<i64>,
}

impl TraceRecords {
    /// Earliest start and latest end over all records.
    pub fn time_span(&self) -> Option<(i64, i64)> {
        let spans = self
            .kernels
            .iter()
            .map(|k| (k.start, k.end))
            .chain(self.api_calls.iter().map(|a| (a.start, a.end)))
            .chain(
                self.ranges
                    .iter()
                    .map(|r| (r.start, r.end.unwrap_or(r.start))),
            )
            .chain(self.memcpys.iter().map(|m| (m.start, m.end)))
            .chain(self.memsets.iter().map(|m| (m.start, m.end)));
        spans.fold(None, |acc, (s, e)| match acc {
            None => Some((s, e)),
            Some((a, b)) => Some((a.min(s), b.max(e))),
        })
    }
}

/// Ranges as the model opens and closes them, per thread: push/pop nest on each thread.
#[derive(Clone, Debug, Default)]
pub struct RangeRecorder {
    pid: u32,
    open: HashMap<u32, Vec<(Name, i64)>>,
    done: Vec<RangeRecord>,
    names: HashMap<String, Name>,
}

impl RangeRecorder {
    pub fn new(pid: u32) -> RangeRecorder {
        RangeRecorder {
            pid,
            ..RangeRecorder::default()
        }
    }

    /// Open a range on thread `tid` at `time_ns`.
    pub fn push(&mut self, name: &str, time_ns: i64, tid: u32) {
        let name = match self.names.get(name) {
            Some(n) => n.clone(),
            None => {
                let n: Name = Arc::from(name);
                self.names.insert(name.to_owned(), n.clone());
                n
            }
        };
        self.open.entry(tid).or_default().push((name, time_ns));
    }

    /// Close the innermost open range of thread `tid` at `time_ns`; false when none is open.
    pub fn pop(&mut self, time_ns: i64, tid: u32) -> bool {
        let Some((name, start)) = self.open.get_mut(&tid).and_then(|s| s.pop()) else {
            return false;
        };
        self.done.push(RangeRecord {
            start,
            end: Some(time_ns),
            name,
            pid: self.pid,
            tid,
        });
        true
    }

    /// Every range, those still open with no end, sorted by start.
    pub fn finish(mut self) -> Vec<RangeRecord> {
        for (tid, stack) in self.open {
            for (name, start) in stack {
                self.done.push(RangeRecord {
                    start,
                    end: None,
                    name,
                    pid: self.pid,
                    tid,
                });
            }
        }
        self.done.sort_by_key(|r| r.start);
        self.done
    }
}

/// The calling thread's system id (what `gettid` returns and CUPTI reports with
/// `CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM`); the process id where it cannot be read.
pub fn current_tid() -> u32 {
    thread_local! {
        static TID: u32 = read_tid();
    }
    TID.with(|t| *t)
}

fn read_tid() -> u32 {
    // `/proc/thread-self` links to `<pid>/task/<tid>`.
    std::fs::read_link("/proc/thread-self")
        .ok()
        .and_then(|p| p.file_name()?.to_str()?.parse().ok())
        .unwrap_or_else(std::process::id)
}

/// Interns strings into `StringIds`.
#[derive(Default)]
struct StringIds {
    ids: HashMap<Arc<str>, i64>,
    order: Vec<Arc<str>>,
}

impl StringIds {
    fn id(&mut self, s: &Arc<str>) -> i64 {
        if let Some(&id) = self.ids.get(s) {
            return id;
        }
        let id = self.order.len() as i64;
        self.ids.insert(s.clone(), id);
        self.order.push(s.clone());
        id
    }

    fn id_str(&mut self, s: &str) -> i64 {
        if let Some(&id) = self.ids.get(s) {
            return id;
        }
        self.id(&Arc::from(s))
    }
}

/// Write `records` to `path` as an nsys-schema SQLite file, atomically.
pub fn write(path: &Path, records: &TraceRecords) -> Result<(), TraceDbError> {
    let tmp = analyze::atomic_file::temp_path(path);
    let _ = std::fs::remove_file(&tmp);
    let result = write_db(&tmp, path, records).and_then(|()| {
        std::fs::rename(&tmp, path).map_err(|source| TraceDbError::Io {
            path: path.to_owned(),
            source,
        })
    });
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

fn write_db(tmp: &Path, path: &Path, r: &TraceRecords) -> Result<(), TraceDbError> {
    let err = |source| TraceDbError::Sqlite {
        path: path.to_owned(),
        source,
    };
    let mut conn = Connection::open(tmp).map_err(err)?;
    // One writer, a file nobody reads until the rename: no journal needed.
    conn.execute_batch("PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF;")
        .map_err(err)?;
    let tx = conn.transaction().map_err(err)?;
    tx.execute_batch(SCHEMA_SQL).map_err(err)?;
    tx.execute_batch("CREATE TABLE RUN_METADATA (name TEXT NOT NULL, value TEXT);")
        .map_err(err)?;
    insert_all(&tx, r).map_err(err)?;
    tx.commit().map_err(err)?;
    conn.close().map_err(|(_, e)| err(e))?;
    Ok(())
}

fn insert_all(tx: &rusqlite::Transaction<'_>, r: &TraceRecords) -> rusqlite::Result<()> {
    let mut strings = StringIds::default();
    let gpid = global_pid(r.process.pid);

    {
        let mut st = tx.prepare(
            "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, contextId, \
             greenContextId, streamId, correlationId, globalPid, demangledName, shortName, \
             mangledName, launchType, cacheConfig, registersPerThread, gridX, gridY, gridZ, \
             blockX, blockY, blockZ, staticSharedMemory, dynamicSharedMemory, \
             localMemoryPerThread, localMemoryTotal, gridId, sharedMemoryExecuted, graphNodeId, \
             sharedMemoryLimitConfig) VALUES (?1, ?2, ?3, ?4, 0, ?5, ?6, ?7, ?8, ?9, ?10, ?11, \
             ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, NULL, ?26)",
        )?;
        for k in &r.kernels {
            let name = strings.id(&k.name);
            let short = strings.id(&k.short_name);
            let mangled = k.mangled_name.as_ref().map(|m| strings.id(m));
            st.execute(params![
                k.start,
                k.end,
                k.device_id,
                k.context_id,
                k.stream_id,
                k.correlation_id,
                global_pid(k.pid),
                name,
                short,
                mangled,
                k.launch_type,
                k.cache_config,
                k.registers_per_thread,
                k.grid[0],
                k.grid[1],
                k.grid[2],
                k.block[0],
                k.block[1],
                k.block[2],
                k.static_shared_memory,
                k.dynamic_shared_memory,
                k.local_memory_per_thread,
                k.local_memory_total as i64,
                k.grid_id,
                k.shared_memory_executed,
                k.shared_memory_limit_config,
            ])?;
        }
    }

    {
        let mut st = tx.prepare(
            "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, globalTid, \
             correlationId, nameId, returnValue, callchainId) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL)",
        )?;
        for a in &r.api_calls {
            let class = match a.class {
                ApiClass::Runtime => EVENT_CLASS_RUNTIME,
                ApiClass::Driver => EVENT_CLASS_DRIVER,
            };
            st.execute(params![
                a.start,
                a.end,
                class,
                global_tid(a.pid, a.tid),
                a.correlation_id,
                strings.id(&a.name),
                a.return_value,
            ])?;
        }
    }

    {
        let mut st = tx.prepare(
            "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) \
             VALUES (?1, ?2, ?3, ?4, ?5, 0)",
        )?;
        for n in &r.ranges {
            st.execute(params![
                n.start,
                n.end,
                NVTX_PUSH_POP_RANGE,
                &*n.name,
                global_tid(n.pid, n.tid),
            ])?;
        }
    }

    {
        let mut st = tx.prepare(
            "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, contextId, \
             greenContextId, streamId, correlationId, globalPid, bytes, copyKind, srcKind, \
             dstKind, copyCount) VALUES (?1, ?2, ?3, ?4, 0, ?5, ?6, ?7, ?8, ?9, ?10, ?11, 1)",
        )?;
        for m in &r.memcpys {
            st.execute(params![
                m.start,
                m.end,
                m.device_id,
                m.context_id,
                m.stream_id,
                m.correlation_id,
                global_pid(m.pid),
                m.bytes as i64,
                m.copy_kind,
                m.src_kind,
                m.dst_kind,
            ])?;
        }
    }

    {
        let mut st = tx.prepare(
            "INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET (start, end, deviceId, contextId, \
             greenContextId, streamId, correlationId, globalPid, value, bytes, memKind) \
             VALUES (?1, ?2, ?3, ?4, 0, ?5, ?6, ?7, ?8, ?9, ?10)",
        )?;
        for m in &r.memsets {
            st.execute(params![
                m.start,
                m.end,
                m.device_id,
                m.context_id,
                m.stream_id,
                m.correlation_id,
                global_pid(m.pid),
                m.value,
                m.bytes as i64,
                m.mem_kind,
            ])?;
        }
    }

    for g in &r.gpus {
        tx.execute(
            "INSERT INTO TARGET_INFO_GPU (vmId, id, name, busLocation, isDiscrete, l2CacheSize, \
             totalMemory, clockRate, smCount, uuid, cuDevice, computeMajor, computeMinor, \
             smMajor, smMinor) VALUES (?1, ?2, ?3, ?4, 1, ?5, ?6, ?7, ?8, ?9, ?2, ?10, ?11, \
             ?10, ?11)",
            params![
                LOCAL_VM,
                g.id,
                g.name,
                g.bus_location,
                g.l2_cache_size.map(|v| v as i64),
                g.total_memory.map(|v| v as i64),
                g.clock_rate_hz.map(|v| v as i64),
                g.sm_count,
                g.uuid,
                g.compute_major,
                g.compute_minor,
            ],
        )?;
        tx.execute(
            "INSERT INTO TARGET_INFO_CUDA_DEVICE (gpuId, cudaId, pid) VALUES (?1, ?1, ?2)",
            params![g.id, r.process.pid],
        )?;
    }

    // Streams and contexts seen on the GPU side.
    let streams: BTreeSet<(u32, u32)> = r
        .kernels
        .iter()
        .map(|k| (k.stream_id, k.context_id))
        .chain(r.memcpys.iter().map(|m| (m.stream_id, m.context_id)))
        .chain(r.memsets.iter().map(|m| (m.stream_id, m.context_id)))
        .collect();
    for (stream, context) in streams {
        tx.execute(
            "INSERT INTO TARGET_INFO_CUDA_STREAM (streamId, hwId, vmId, processId, contextId, \
             priority, flag) VALUES (?1, 0, 1, ?2, ?3, 0, 0)",
            params![stream, r.process.pid, context],
        )?;
    }

    tx.execute(
        "INSERT INTO PROCESSES (globalPid, pid, name) VALUES (?1, ?2, ?3)",
        params![gpid, r.process.pid, r.process.name],
    )?;
    for (tid, name) in &r.process.threads {
        let id = strings.id_str(name);
        tx.execute(
            "INSERT INTO ThreadNames (nameId, priority, globalTid) VALUES (?1, NULL, ?2)",
            params![id, global_tid(r.process.pid, *tid)],
        )?;
    }

    if let Some((start, stop)) = r.time_span() {
        tx.execute(
            "INSERT INTO ANALYSIS_DETAILS (globalVid, duration, startTime, stopTime) \
             VALUES (?1, ?2, ?3, ?4)",
            params![LOCAL_VM, stop - start, start, stop],
        )?;
    }
    if let Some(ns) = r.session_start_utc_ns {
        let utc = utc_time(ns);
        tx.execute(
            "INSERT INTO TARGET_INFO_SESSION_START_TIME (utcEpochNs, utcTime, localTime) \
             VALUES (?1, ?2, ?2)",
            params![ns, utc],
        )?;
    }

    {
        let mut st = tx.prepare("INSERT INTO StringIds (id, value) VALUES (?1, ?2)")?;
        for (id, s) in strings.order.iter().enumerate() {
            st.execute(params![id as i64, &**s])?;
        }
    }

    {
        let mut st = tx.prepare("INSERT INTO META_DATA_EXPORT (name, value) VALUES (?1, ?2)")?;
        for (name, value) in EXPORT_VERSION_ROWS {
            st.execute(params![name, value])?;
        }
        st.execute(params![
            "EXPORT_WRITER",
            concat!("collect ", env!("CARGO_PKG_VERSION"))
        ])?;
        let mut capture =
            tx.prepare("INSERT INTO META_DATA_CAPTURE (name, value) VALUES (?1, ?2)")?;
        capture.execute(params!["CAPTURE_EVENT_TYPE", "NvtxEvents"])?;
        capture.execute(params!["CAPTURE_EVENT_TYPE", "Cuda"])?;
    }

    {
        let mut st = tx.prepare("INSERT INTO RUN_METADATA (name, value) VALUES (?1, ?2)")?;
        for (name, value) in r.run.entries() {
            st.execute(params![name, value])?;
        }
    }
    Ok(())
}

/// `YYYY-MM-DDTHH:MM:SS` (UTC) for nanoseconds since the Unix epoch.
fn utc_time(ns: i64) -> String {
    let secs = ns.div_euclid(1_000_000_000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn global_ids_match_nsys() {
        // From torch_small_ctx128_train_fp32.sqlite: pid 549, its main thread 549.
        assert_eq!(global_pid(549), 281_484_187_402_240);
        assert_eq!(global_tid(549, 549), 281_484_187_402_789);
    }

    #[test]
    fn utc_time_formats_like_nsys() {
        // TARGET_INFO_SESSION_START_TIME of the same export.
        assert_eq!(utc_time(1_795_314_601_687_569_420), "2026-11-22T02:30:01");
        assert_eq!(utc_time(0), "1970-01-01T00:00:00");
    }

    #[test]
    fn ranges_nest_per_thread() {
        let mut r = RangeRecorder::new(7);
        r.push("step_0", 0, 1);
        r.push("forward", 1, 1);
        r.push("other", 2, 2);
        assert!(r.pop(5, 1));
        r.push("backward", 6, 1);
        assert!(r.pop(9, 1));
        assert!(r.pop(10, 1));
        assert!(!r.pop(11, 1));
        let done = r.finish();
        let got: Vec<_> = done
            .iter()
            .map(|r| (&*r.name, r.start, r.end, r.tid))
            .collect();
        assert_eq!(
            got,
            [
                ("step_0", 0, Some(10), 1),
                ("forward", 1, Some(5), 1),
                ("other", 2, None, 2),
                ("backward", 6, Some(9), 1),
            ]
        );
    }

    #[test]
    fn current_tid_is_stable_per_thread() {
        let main = current_tid();
        assert_eq!(main, current_tid());
        let other = std::thread::spawn(current_tid).join().unwrap();
        assert_ne!(main, other);
    }

    #[test]
    fn the_schema_creates_every_table_analyze_reads() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(SCHEMA_SQL).unwrap();
        for t in [
            "StringIds",
            "CUPTI_ACTIVITY_KIND_KERNEL",
            "CUPTI_ACTIVITY_KIND_RUNTIME",
            "NVTX_EVENTS",
            "CUPTI_ACTIVITY_KIND_MEMCPY",
            "CUPTI_ACTIVITY_KIND_MEMSET",
            "TARGET_INFO_GPU",
            "META_DATA_EXPORT",
            "ENUM_CUDA_MEMCPY_OPER",
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
}
