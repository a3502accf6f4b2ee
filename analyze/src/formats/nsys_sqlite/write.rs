//! GPU traces written as SQLite in the Nsight Systems export schema ([`super::SCHEMA_SQL`],
//! 3.20.3, nsys 2025.3), so that `nsys stats` reports on them and [`super::read`] reads them
//! exactly like an nsys capture. `collect` fills [`TraceRecords`] from CUPTI; tests fill them by
//! hand. Nothing here touches a device.
//!
//! The file gets every table of a real export (the `CREATE TABLE` statements copied from one,
//! with the `ENUM_*` rows the stats scripts join) and fills those a CUPTI trace has data for:
//! `StringIds`, `CUPTI_ACTIVITY_KIND_KERNEL`, `CUPTI_ACTIVITY_KIND_RUNTIME` (runtime and driver
//! API calls, told apart by `eventClass` as nsys does), `NVTX_EVENTS` (push/pop ranges, text
//! inline), `CUPTI_ACTIVITY_KIND_MEMCPY`, `CUPTI_ACTIVITY_KIND_MEMSET`, `TARGET_INFO_GPU`,
//! `TARGET_INFO_CUDA_DEVICE`, `TARGET_INFO_CUDA_STREAM`, `PROCESSES`, `ThreadNames`,
//! `ANALYSIS_DETAILS` and `META_DATA_EXPORT`. The version rows of `META_DATA_EXPORT` are those of
//! the export the schema came from, because `nsys stats` checks them; `EXPORT_WRITER` says that
//! `collect` wrote the file (the workspace gives both crates one version). A
//! `RUN_METADATA (name, value)` table carries the run's configuration and step times.
//!
//! Identifiers follow nsys ([`super::global_pid`], [`super::global_tid`]). Times are written as
//! given (nanoseconds, one clock for every record). The file is written to a temporary file
//! beside the target and renamed into place, so a reader never sees half a trace.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;

use rusqlite::types::ToSql;
use rusqlite::{params, params_from_iter, Connection, Statement, Transaction};

use super::column::*;
use super::table::*;
use super::{event_class, event_type, global_pid, global_tid, metadata, LOCAL_VM, SCHEMA_SQL};
use crate::error::{Error, Result};
use crate::formats::run_metadata::RunMetadata;

/// `META_DATA_EXPORT` rows that identify the schema version (from the export it came from).
const EXPORT_VERSION_ROWS: &[(&str, &str)] = &[
    ("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"),
    (metadata::EXPORT_PRODUCT_VERSION, "2025.3.2.0"),
    ("EXPORT_PRODUCT_DATE", "2025.3"),
    (metadata::EXPORT_SCHEMA_VERSION, "3.20.3"),
    ("EXPORT_SCHEMA_VERSION_MAJOR", "3"),
    ("EXPORT_SCHEMA_VERSION_MINOR", "20"),
    ("EXPORT_SCHEMA_VERSION_MICRO", "3"),
    ("EXPORT_SCHEMA_VERSION_CKSUM", "4021079525 170230"),
    ("EXPORT_PLATFORM", "linux-desktop"),
    ("EXPORT_ARCH", "x64"),
];

/// A name shared by many records.
pub type Name = Arc<str>;

/// When and where an operation ran on the GPU, and the API call that launched it: the columns
/// every GPU record (kernel, memcpy, memset) has, as CUPTI gives them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuSpan {
    pub start: i64,
    pub end: i64,
    pub device_id: u32,
    pub context_id: u32,
    pub stream_id: u32,
    pub correlation_id: u32,
}

/// How a kernel was launched and what it used, as CUPTI's kernel record gives it: the columns of
/// `CUPTI_ACTIVITY_KIND_KERNEL` besides its span and names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelLaunch {
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
    /// `ENUM_CUDA_FUNC_CACHE_CONFIG`: the executed configuration.
    pub cache_config: u8,
    /// `ENUM_CUDA_SHARED_MEM_LIMIT_CONFIG`.
    pub shared_memory_limit_config: u8,
}

/// A kernel execution (`CUPTI_ACTIVITY_KIND_KERNEL`).
#[derive(Clone, Debug, PartialEq)]
pub struct KernelRecord {
    pub span: GpuSpan,
    pub pid: u32,
    /// Demangled name with templates and arguments (`demangledName`).
    pub name: Name,
    /// Base function name (`shortName`).
    pub short_name: Name,
    /// Raw (mangled) name as the driver knows it (`mangledName`).
    pub mangled_name: Option<Name>,
    pub launch: KernelLaunch,
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
    pub span: GpuSpan,
    pub pid: u32,
    pub bytes: u64,
    /// `ENUM_CUDA_MEMCPY_OPER` ([`super::copy_kind`]).
    pub copy_kind: u8,
    /// `ENUM_CUDA_MEM_KIND` ([`super::mem_kind`]).
    pub src_kind: u8,
    pub dst_kind: u8,
}

/// A memset executed on the GPU (`CUPTI_ACTIVITY_KIND_MEMSET`).
#[derive(Clone, Debug, PartialEq)]
pub struct MemsetRecord {
    pub span: GpuSpan,
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
            .map(|k| (k.span.start, k.span.end))
            .chain(self.api_calls.iter().map(|a| (a.start, a.end)))
            .chain(
                self.ranges
                    .iter()
                    .map(|r| (r.start, r.end.unwrap_or(r.start))),
            )
            .chain(self.memcpys.iter().map(|m| (m.span.start, m.span.end)))
            .chain(self.memsets.iter().map(|m| (m.span.start, m.span.end)));
        spans.fold(None, |acc, (s, e)| match acc {
            None => Some((s, e)),
            Some((a, b)) => Some((a.min(s), b.max(e))),
        })
    }
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
pub fn to_file(path: &Path, records: &TraceRecords) -> Result<()> {
    let tmp = crate::atomic_file::temp_path(path);
    let _ = std::fs::remove_file(&tmp);
    let result = write_db(&tmp, path, records)
        .and_then(|()| std::fs::rename(&tmp, path).map_err(Error::io(path)));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

fn write_db(tmp: &Path, path: &Path, r: &TraceRecords) -> Result<()> {
    let err = |error| Error::Sqlite {
        path: path.to_owned(),
        error,
    };
    let mut conn = Connection::open(tmp).map_err(err)?;
    // One writer, a file nobody reads until the rename: no journal needed.
    conn.execute_batch("PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF;")
        .map_err(err)?;
    let tx = conn.transaction().map_err(err)?;
    tx.execute_batch(SCHEMA_SQL).map_err(err)?;
    tx.execute_batch(&format!(
        "CREATE TABLE {RUN_METADATA} ({NAME} TEXT NOT NULL, {VALUE} TEXT);"
    ))
    .map_err(err)?;
    insert_all(&tx, r).map_err(err)?;
    tx.commit().map_err(err)?;
    conn.close().map_err(|(_, e)| err(e))?;
    Ok(())
}

fn insert_all(tx: &Transaction<'_>, r: &TraceRecords) -> rusqlite::Result<()> {
    let mut strings = StringIds::default();
    let gpid = global_pid(r.process.pid);

    insert_each(
        tx,
        &gpu_insert(
            KERNEL,
            &format!(
                "{DEMANGLED_NAME}, {SHORT_NAME}, {MANGLED_NAME}, {LAUNCH_TYPE}, {CACHE_CONFIG}, \
                 {REGISTERS_PER_THREAD}, {GRID_X}, {GRID_Y}, {GRID_Z}, {BLOCK_X}, {BLOCK_Y}, \
                 {BLOCK_Z}, {STATIC_SHARED_MEMORY}, {DYNAMIC_SHARED_MEMORY}, \
                 {LOCAL_MEMORY_PER_THREAD}, {LOCAL_MEMORY_TOTAL}, {GRID_ID}, \
                 {SHARED_MEMORY_EXECUTED}, {GRAPH_NODE_ID}, {SHARED_MEMORY_LIMIT_CONFIG}"
            ),
            "?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, \
             ?25, NULL, ?26",
        ),
        &r.kernels,
        |st, k| {
            let name = strings.id(&k.name);
            let short = strings.id(&k.short_name);
            let mangled = k.mangled_name.as_ref().map(|m| strings.id(m));
            let l = &k.launch;
            let [gx, gy, gz] = &l.grid;
            let [bx, by, bz] = &l.block;
            execute_gpu(
                st,
                &k.span,
                k.pid,
                params![
                    name,
                    short,
                    mangled,
                    l.launch_type,
                    l.cache_config,
                    l.registers_per_thread,
                    gx,
                    gy,
                    gz,
                    bx,
                    by,
                    bz,
                    l.static_shared_memory,
                    l.dynamic_shared_memory,
                    l.local_memory_per_thread,
                    l.local_memory_total as i64,
                    l.grid_id,
                    l.shared_memory_executed,
                    l.shared_memory_limit_config,
                ],
            )
        },
    )?;

    insert_each(
        tx,
        &format!(
            "INSERT INTO {RUNTIME} ({START}, {END}, {EVENT_CLASS}, {GLOBAL_TID}, \
             {CORRELATION_ID}, {NAME_ID}, {RETURN_VALUE}, {CALLCHAIN_ID}) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL)"
        ),
        &r.api_calls,
        |st, a| {
            let class = match a.class {
                ApiClass::Runtime => event_class::CUDA_RUNTIME,
                ApiClass::Driver => event_class::CUDA_DRIVER,
            };
            st.execute(params![
                a.start,
                a.end,
                class,
                global_tid(a.pid, a.tid),
                a.correlation_id,
                strings.id(&a.name),
                a.return_value,
            ])
        },
    )?;

    insert_each(
        tx,
        &format!(
            "INSERT INTO {NVTX_EVENTS} ({START}, {END}, {EVENT_TYPE}, {TEXT}, {GLOBAL_TID}, \
             {DOMAIN_ID}) VALUES (?1, ?2, ?3, ?4, ?5, 0)"
        ),
        &r.ranges,
        |st, n| {
            st.execute(params![
                n.start,
                n.end,
                event_type::NVTX_PUSH_POP_RANGE,
                &*n.name,
                global_tid(n.pid, n.tid),
            ])
        },
    )?;

    insert_each(
        tx,
        &gpu_insert(
            MEMCPY,
            &format!("{BYTES}, {COPY_KIND}, {SRC_KIND}, {DST_KIND}, {COPY_COUNT}"),
            "?8, ?9, ?10, ?11, 1",
        ),
        &r.memcpys,
        |st, m| {
            execute_gpu(
                st,
                &m.span,
                m.pid,
                params![m.bytes as i64, m.copy_kind, m.src_kind, m.dst_kind],
            )
        },
    )?;

    insert_each(
        tx,
        &gpu_insert(
            MEMSET,
            &format!("{VALUE}, {BYTES}, {MEM_KIND}"),
            "?8, ?9, ?10",
        ),
        &r.memsets,
        |st, m| {
            execute_gpu(
                st,
                &m.span,
                m.pid,
                params![m.value, m.bytes as i64, m.mem_kind],
            )
        },
    )?;

    for g in &r.gpus {
        tx.execute(
            &format!(
                "INSERT INTO {TARGET_INFO_GPU} ({VM_ID}, {ID}, {NAME}, {BUS_LOCATION}, \
                 {IS_DISCRETE}, {L2_CACHE_SIZE}, {TOTAL_MEMORY}, {CLOCK_RATE}, {SM_COUNT}, \
                 {UUID}, {CU_DEVICE}, {COMPUTE_MAJOR}, {COMPUTE_MINOR}, {SM_MAJOR}, {SM_MINOR}) \
                 VALUES (?1, ?2, ?3, ?4, 1, ?5, ?6, ?7, ?8, ?9, ?2, ?10, ?11, ?10, ?11)"
            ),
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
            &format!(
                "INSERT INTO {TARGET_INFO_CUDA_DEVICE} ({GPU_ID}, {CUDA_ID}, {PID}) \
                 VALUES (?1, ?1, ?2)"
            ),
            params![g.id, r.process.pid],
        )?;
    }

    // Streams and contexts seen on the GPU side.
    let streams: BTreeSet<(u32, u32)> = r
        .kernels
        .iter()
        .map(|k| &k.span)
        .chain(r.memcpys.iter().map(|m| &m.span))
        .chain(r.memsets.iter().map(|m| &m.span))
        .map(|s| (s.stream_id, s.context_id))
        .collect();
    for (stream, context) in streams {
        tx.execute(
            &format!(
                "INSERT INTO {TARGET_INFO_CUDA_STREAM} ({STREAM_ID}, {HW_ID}, {VM_ID}, \
                 {PROCESS_ID}, {CONTEXT_ID}, {PRIORITY}, {FLAG}) VALUES (?1, 0, 1, ?2, ?3, 0, 0)"
            ),
            params![stream, r.process.pid, context],
        )?;
    }

    tx.execute(
        &format!("INSERT INTO {PROCESSES} ({GLOBAL_PID}, {PID}, {NAME}) VALUES (?1, ?2, ?3)"),
        params![gpid, r.process.pid, r.process.name],
    )?;
    for (tid, name) in &r.process.threads {
        let id = strings.id_str(name);
        tx.execute(
            &format!(
                "INSERT INTO {THREAD_NAMES} ({NAME_ID}, {PRIORITY}, {GLOBAL_TID}) \
                 VALUES (?1, NULL, ?2)"
            ),
            params![id, global_tid(r.process.pid, *tid)],
        )?;
    }

    if let Some((start, stop)) = r.time_span() {
        tx.execute(
            &format!(
                "INSERT INTO {ANALYSIS_DETAILS} ({GLOBAL_VID}, {DURATION}, {START_TIME}, \
                 {STOP_TIME}) VALUES (?1, ?2, ?3, ?4)"
            ),
            params![LOCAL_VM, stop - start, start, stop],
        )?;
    }
    if let Some(ns) = r.session_start_utc_ns {
        let utc = utc_time(ns);
        tx.execute(
            &format!(
                "INSERT INTO {TARGET_INFO_SESSION_START_TIME} ({UTC_EPOCH_NS}, {UTC_TIME}, \
                 {LOCAL_TIME}) VALUES (?1, ?2, ?2)"
            ),
            params![ns, utc],
        )?;
    }

    insert_each(
        tx,
        &format!("INSERT INTO {STRING_IDS} ({ID}, {VALUE}) VALUES (?1, ?2)"),
        strings.order.iter().enumerate(),
        |st, (id, s)| st.execute(params![id as i64, &**s]),
    )?;
    let writer = (
        metadata::EXPORT_WRITER,
        concat!("collect ", env!("CARGO_PKG_VERSION")),
    );
    let captured = ["NvtxEvents", "Cuda"].map(|v| (metadata::CAPTURE_EVENT_TYPE, v));
    for (table, pairs) in [
        (META_DATA_EXPORT, [EXPORT_VERSION_ROWS, &[writer]].concat()),
        (META_DATA_CAPTURE, captured.to_vec()),
        (RUN_METADATA, r.run.entries().collect()),
    ] {
        insert_each(
            tx,
            &format!("INSERT INTO {table} ({NAME}, {VALUE}) VALUES (?1, ?2)"),
            pairs,
            |st, (name, value)| st.execute(params![name, value]),
        )?;
    }
    Ok(())
}

/// Prepare `sql` once and run `insert` with it for each of `rows`.
fn insert_each<T>(
    tx: &Transaction<'_>,
    sql: &str,
    rows: impl IntoIterator<Item = T>,
    mut insert: impl FnMut(&mut Statement<'_>, T) -> rusqlite::Result<usize>,
) -> rusqlite::Result<()> {
    let mut st = tx.prepare(sql)?;
    for row in rows {
        insert(&mut st, row)?;
    }
    Ok(())
}

/// An insert into the GPU table `table`: the [`GpuSpan`] and the process as `?1` to `?7` (see
/// [`execute_gpu`]), `GREEN_CONTEXT_ID` 0, then the table's own `columns` with their `values`.
fn gpu_insert(table: &str, columns: &str, values: &str) -> String {
    format!(
        "INSERT INTO {table} ({START}, {END}, {DEVICE_ID}, {CONTEXT_ID}, {GREEN_CONTEXT_ID}, \
         {STREAM_ID}, {CORRELATION_ID}, {GLOBAL_PID}, {columns}) \
         VALUES (?1, ?2, ?3, ?4, 0, ?5, ?6, ?7, {values})"
    )
}

/// Run a [`gpu_insert`] for an operation of process `pid` during `span`, with the table's own
/// values `rest` (`?8` on).
fn execute_gpu(
    st: &mut Statement<'_>,
    span: &GpuSpan,
    pid: u32,
    rest: &[&dyn ToSql],
) -> rusqlite::Result<usize> {
    let gpid = global_pid(pid);
    let shared: [&dyn ToSql; 7] = [
        &span.start,
        &span.end,
        &span.device_id,
        &span.context_id,
        &span.stream_id,
        &span.correlation_id,
        &gpid,
    ];
    st.execute(params_from_iter(shared.iter().chain(rest)))
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
    use crate::model::trace::{ApiKind, MemOpKind};

    #[test]
    fn utc_time_formats_like_nsys() {
        // TARGET_INFO_SESSION_START_TIME of the same export.
        assert_eq!(utc_time(1_795_314_601_687_569_420), "2026-11-22T02:30:01");
        assert_eq!(utc_time(0), "1970-01-01T00:00:00");
    }

    /// One record of each kind, written and read back by [`super::super::read`].
    #[test]
    fn what_the_writer_writes_the_reader_reads() {
        let name = |s: &str| -> Name { Arc::from(s) };
        let kernel = GpuSpan {
            start: 2_000,
            end: 2_500,
            device_id: 0,
            context_id: 1,
            stream_id: 7,
            correlation_id: 3,
        };
        let mut run = RunMetadata::new();
        run.set("model", "small").set("ctx", 128);
        let records = TraceRecords {
            process: ProcessInfo {
                pid: 7,
                name: "collect".into(),
                threads: vec![(8, "collect".into())],
            },
            kernels: vec![KernelRecord {
                span: kernel,
                pid: 7,
                name: name("void f<(int)4>(float *)"),
                short_name: name("f"),
                mangled_name: Some(name("_Z1fILi4EEvPf")),
                launch: KernelLaunch {
                    grid: [80, 1, 1],
                    block: [128, 1, 1],
                    registers_per_thread: 40,
                    static_shared_memory: 512,
                    dynamic_shared_memory: 8192,
                    local_memory_per_thread: 0,
                    local_memory_total: 0,
                    grid_id: 1,
                    shared_memory_executed: 0,
                    launch_type: 1,
                    cache_config: 1,
                    shared_memory_limit_config: 0,
                },
            }],
            api_calls: vec![ApiRecord {
                start: 1_000,
                end: 1_200,
                pid: 7,
                tid: 8,
                correlation_id: 3,
                name: name("cudaLaunchKernel_v7000"),
                class: ApiClass::Runtime,
                return_value: 0,
            }],
            ranges: vec![RangeRecord {
                start: 900,
                end: Some(3_000),
                name: name("forward"),
                pid: 7,
                tid: 8,
            }],
            memcpys: vec![MemcpyRecord {
                span: GpuSpan {
                    start: 3_100,
                    end: 3_200,
                    correlation_id: 4,
                    ..kernel
                },
                pid: 7,
                bytes: 4096,
                copy_kind: 2,
                src_kind: super::super::mem_kind::DEVICE,
                dst_kind: super::super::mem_kind::PINNED,
            }],
            memsets: vec![MemsetRecord {
                span: GpuSpan {
                    start: 3_300,
                    end: 3_400,
                    correlation_id: 5,
                    ..kernel
                },
                pid: 7,
                value: 0,
                bytes: 512,
                mem_kind: super::super::mem_kind::DEVICE,
            }],
            gpus: vec![GpuInfo {
                id: 0,
                name: "NVIDIA H200".into(),
                sm_count: Some(132),
                compute_major: Some(9),
                compute_minor: Some(0),
                ..GpuInfo::default()
            }],
            run,
            session_start_utc_ns: Some(0),
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.sqlite");
        to_file(&path, &records).unwrap();
        let t = super::super::read::load(&path).unwrap();
        assert_eq!(t.source.schema_version.as_deref(), Some("3.20.3"));
        assert_eq!(t.source.run["model"], "small");
        assert_eq!(t.source.run["ctx"], "128");
        let k = &t.kernels[0];
        assert_eq!(
            (t.name(k.name), t.name(k.short_name)),
            ("void f<(int)4>(float *)", "f")
        );
        assert_eq!(k.mangled_name.map(|m| t.name(m)), Some("_Z1fILi4EEvPf"));
        assert_eq!(
            (
                k.span.start.0,
                k.span.end.0,
                k.span.correlation_id,
                k.span.pid
            ),
            (2_000, 2_500, 3, 7)
        );
        assert_eq!((k.grid, k.block), ([80, 1, 1], [128, 1, 1]));
        let a = &t.api_calls[0];
        assert_eq!(
            (t.name(a.name), a.kind),
            ("cudaLaunchKernel_v7000", ApiKind::Runtime)
        );
        assert_eq!((a.pid, a.tid), (7, 8));
        let r = &t.ranges[0];
        assert_eq!(
            (t.name(r.name), r.start.0, r.end.0),
            ("forward", 900, 3_000)
        );
        let ops: Vec<(MemOpKind, u64)> = t.mem_ops.iter().map(|m| (m.kind, m.bytes.0)).collect();
        assert_eq!(
            ops,
            [(MemOpKind::DeviceToHost, 4096), (MemOpKind::Memset, 512)]
        );
        assert_eq!(t.gpus[0].compute_capability, Some((9, 0)));
        assert_eq!(t.name(t.thread_names[&(7, 8)]), "collect");
    }
}
