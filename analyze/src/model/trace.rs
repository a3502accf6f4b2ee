//! The trace model: GPU work, whatever format it came from.
//!
//! An Nsight Systems export, a Kineto trace and `collect`'s own trace all load into a [`Trace`]:
//! GPU kernels, CUDA graph executions, CUDA API calls, NVTX ranges and marks, memcpy/memset
//! operations, GPU info and export metadata. Names are interned once in a [`Strings`] table;
//! times are [`Nanos`] and sizes [`Bytes`], so a time is never added to a size. Analyses are pure
//! functions over this model and never look at the file it came from. Memory snapshots have the
//! sibling model [`super::snapshot`]: they describe allocations, not GPU work.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::ops::{Add, AddAssign, Deref, DerefMut, Sub};
use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;

/// A point in time or a duration, in nanoseconds on the trace's clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Nanos(pub i64);

impl Nanos {
    pub fn as_f64(self) -> f64 {
        self.0 as f64
    }
    pub fn ms(self) -> f64 {
        self.0 as f64 / 1e6
    }
}

/// Arithmetic on times and sizes saturates: a damaged file's extreme values (a time of
/// `i64::MIN`, an end before a start) give extreme results, never an overflow.
impl Sub for Nanos {
    type Output = Nanos;
    fn sub(self, rhs: Nanos) -> Nanos {
        Nanos(self.0.saturating_sub(rhs.0))
    }
}

impl fmt::Display for Nanos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ns", self.0)
    }
}

/// A size in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Bytes(pub u64);

/// `+`, `+=` and `sum()` within one unit: a time adds to a time and a size to a size, never one
/// to the other.
macro_rules! additive {
    ($unit:ident) => {
        impl Add for $unit {
            type Output = $unit;
            fn add(self, rhs: $unit) -> $unit {
                $unit(self.0.saturating_add(rhs.0))
            }
        }

        impl AddAssign for $unit {
            fn add_assign(&mut self, rhs: $unit) {
                self.0 = self.0.saturating_add(rhs.0);
            }
        }

        impl std::iter::Sum for $unit {
            fn sum<I: Iterator<Item = $unit>>(iter: I) -> $unit {
                iter.fold($unit(0), |a, b| a + b)
            }
        }
    };
}

additive!(Nanos);
additive!(Bytes);

/// An interned string: an index into [`Strings`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct StrId(pub u32);

/// Every name in a trace, stored once.
#[derive(Clone, Debug, Default)]
pub struct Strings {
    values: Vec<String>,
    index: HashMap<String, StrId>,
}

impl Strings {
    pub fn intern(&mut self, s: &str) -> StrId {
        if let Some(&id) = self.index.get(s) {
            return id;
        }
        let id = StrId(self.values.len() as u32);
        self.values.push(s.to_owned());
        self.index.insert(s.to_owned(), id);
        id
    }

    pub fn get(&self, id: StrId) -> &str {
        &self.values[id.0 as usize]
    }

    /// The id of `s` if it was interned.
    pub fn lookup(&self, s: &str) -> Option<StrId> {
        self.index.get(s).copied()
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

/// Which input format a trace came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceFormat {
    NsysSqlite,
    Kineto,
}

/// Where a trace came from and what the file says about itself.
#[derive(Clone, Debug, Serialize)]
pub struct Source {
    pub path: PathBuf,
    pub format: SourceFormat,
    /// Export schema version (`EXPORT_SCHEMA_VERSION`), when the file records one.
    pub schema_version: Option<String>,
    /// Version of the tool that wrote the file (`EXPORT_PRODUCT_VERSION`, Kineto's version).
    pub product_version: Option<String>,
    /// Every key/value pair of the export's metadata table, as written.
    pub metadata: BTreeMap<String, String>,
    /// Run metadata (model, ctx, mode, precision, ...) when the file carries it.
    pub run: BTreeMap<String, String>,
    /// Tables or sections that the file lacks (e.g. `CUPTI_ACTIVITY_KIND_KERNEL`).
    pub missing: Vec<String>,
    /// The rank of a distributed job's process that the file holds, as the file records it
    /// (Kineto's `distributedInfo`, the `RANK` of the environment nsys recorded).
    pub rank: Option<u32>,
    /// Unix time (ns) of the file's time zero, where it records one (nsys's session start,
    /// Kineto's `baseTimeNanoseconds`): what puts files made apart on one timeline.
    pub clock_origin_ns: Option<i64>,
}

impl Source {
    /// A source that says nothing about itself beyond its path and format.
    pub fn new(path: impl Into<PathBuf>, format: SourceFormat) -> Source {
        Source {
            path: path.into(),
            format,
            schema_version: None,
            product_version: None,
            metadata: BTreeMap::new(),
            run: BTreeMap::new(),
            missing: Vec::new(),
            rank: None,
            clock_origin_ns: None,
        }
    }
}

/// When and where a piece of GPU work ran, and which process's call launched it: what kernels,
/// memory operations and graph executions share.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Span {
    pub start: Nanos,
    pub end: Nanos,
    pub device: u32,
    pub stream: u32,
    /// Links the work to the API call that launched it (per process).
    pub correlation_id: u64,
    pub pid: u32,
}

impl Span {
    pub fn duration(&self) -> Nanos {
        self.end - self.start
    }
}

/// A GPU kernel execution.
#[derive(Clone, Debug, Serialize)]
pub struct Kernel {
    #[serde(flatten)]
    pub span: Span,
    /// Demangled name (`void at::native::elementwise_kernel<...>(...)`).
    pub name: StrId,
    /// Short name (`elementwise_kernel`).
    pub short_name: StrId,
    /// Mangled name, when the export has it.
    pub mangled_name: Option<StrId>,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub registers_per_thread: u32,
    pub static_shared_memory: u32,
    pub dynamic_shared_memory: u32,
    /// The node of the CUDA graph the kernel ran in, when graphs were traced node by node
    /// (`nsys profile --cuda-graph-trace=node`); its correlation id is then the graph launch's.
    pub graph_node_id: Option<u64>,
}

impl Kernel {
    pub fn duration(&self) -> Nanos {
        self.span.end - self.span.start
    }
}

#[cfg(test)]
impl Kernel {
    /// For tests: a kernel called `name` (its short name too) of one thread, run over `span`.
    pub(crate) fn named(name: StrId, span: Span) -> Kernel {
        Kernel {
            span,
            name,
            short_name: name,
            mangled_name: None,
            grid: [1; 3],
            block: [1; 3],
            registers_per_thread: 0,
            static_shared_memory: 0,
            dynamic_shared_memory: 0,
            graph_node_id: None,
        }
    }
}

/// One execution of a CUDA graph, as a whole: Nsight Systems' default graph tracing records each
/// graph launch's span on the GPU and not the kernels inside it.
#[derive(Clone, Debug, Serialize)]
pub struct GraphExec {
    /// Its correlation id is the launch call's (`cudaGraphLaunch`).
    #[serde(flatten)]
    pub span: Span,
    /// The graph it was instantiated from, and the executable graph.
    pub graph_id: u64,
    pub graph_exec_id: u64,
}

impl GraphExec {
    pub fn duration(&self) -> Nanos {
        self.span.end - self.span.start
    }

    /// How tables name a graph execution: `[CUDA graph 4]`, beside nsys's `[CUDA memcpy ...]`
    /// labels.
    pub fn label(&self) -> String {
        format!("[CUDA graph {}]", self.graph_id)
    }
}

/// Which CUDA API a call belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ApiKind {
    Runtime,
    Driver,
}

/// A host-side CUDA API call (`cudaLaunchKernel`, `cuLaunchKernel`, ...).
#[derive(Clone, Debug, Serialize)]
pub struct ApiCall {
    pub start: Nanos,
    pub end: Nanos,
    pub pid: u32,
    pub tid: u32,
    /// Links the call to the GPU work it launched (kernel or memory op); 0 when none.
    pub correlation_id: u64,
    pub name: StrId,
    pub kind: ApiKind,
}

impl ApiCall {
    pub fn duration(&self) -> Nanos {
        self.end - self.start
    }
}

/// How an NVTX range was opened and closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum RangeStyle {
    /// `nvtxRangePush`/`nvtxRangePop`: nested, on one thread.
    PushPop,
    /// `nvtxRangeStart`/`nvtxRangeEnd`: may end on another thread.
    StartEnd,
}

impl RangeStyle {
    pub fn as_str(self) -> &'static str {
        match self {
            RangeStyle::PushPop => "PushPop",
            RangeStyle::StartEnd => "StartEnd",
        }
    }
}

/// A closed NVTX range (or a profiler annotation range, for Kineto traces).
#[derive(Clone, Debug, Serialize)]
pub struct Range {
    pub start: Nanos,
    pub end: Nanos,
    pub style: RangeStyle,
    pub name: StrId,
    /// Domain name; `None` for the default domain.
    pub domain: Option<StrId>,
    pub pid: u32,
    pub tid: u32,
    /// Thread the range ended on, for start/end ranges that cross threads.
    pub end_tid: Option<u32>,
}

impl Range {
    pub fn duration(&self) -> Nanos {
        self.end - self.start
    }
}

impl Range {
    /// A push/pop range of the default domain on thread `tid` of process `pid`.
    pub fn push_pop(name: StrId, pid: u32, tid: u32, start: Nanos, end: Nanos) -> Range {
        Range {
            start,
            end,
            style: RangeStyle::PushPop,
            name,
            domain: None,
            pid,
            tid,
            end_tid: None,
        }
    }
}

/// An NVTX mark (an instant).
#[derive(Clone, Debug, Serialize)]
pub struct Mark {
    pub time: Nanos,
    pub name: StrId,
    pub domain: Option<StrId>,
    pub pid: u32,
    pub tid: u32,
}

/// The kind of a GPU memory operation, named as `nsys stats` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MemOpKind {
    HostToDevice,
    DeviceToHost,
    HostToHost,
    DeviceToDevice,
    PeerToPeer,
    /// Unified-memory or other copy kinds nsys reports under their own label.
    OtherCopy(u8),
    Memset,
}

impl MemOpKind {
    /// The `Operation` label of `cuda_gpu_mem_*_sum`.
    pub fn label(self) -> String {
        match self {
            MemOpKind::HostToDevice => "[CUDA memcpy Host-to-Device]".into(),
            MemOpKind::DeviceToHost => "[CUDA memcpy Device-to-Host]".into(),
            MemOpKind::HostToHost => "[CUDA memcpy Host-to-Host]".into(),
            MemOpKind::DeviceToDevice => "[CUDA memcpy Device-to-Device]".into(),
            MemOpKind::PeerToPeer => "[CUDA memcpy Peer-to-Peer]".into(),
            MemOpKind::OtherCopy(k) => {
                // Labels of `ENUM_CUDA_MEMCPY_OPER`.
                let label = match k {
                    3 => "Host-to-Array",
                    4 => "Array-to-Host",
                    5 => "Array-to-Array",
                    6 => "Array-to-Device",
                    7 => "Device-to-Array",
                    11 => "Unified Host-to-Device",
                    12 => "Unified Device-to-Host",
                    13 => "Unified Device-to-Device",
                    _ => "Unknown",
                };
                format!("[CUDA memcpy {label}]")
            }
            MemOpKind::Memset => "[CUDA memset]".into(),
        }
    }
}

/// A memcpy or memset executed on the GPU.
#[derive(Clone, Debug, Serialize)]
pub struct MemOp {
    #[serde(flatten)]
    pub span: Span,
    pub kind: MemOpKind,
    pub bytes: Bytes,
}

impl MemOp {
    pub fn duration(&self) -> Nanos {
        self.span.end - self.span.start
    }
}

/// A CPU operator call a profiler recorded (Kineto's `cpu_op` events: ATen operators, autograd
/// nodes, `record_function` blocks), on the thread that ran it. An nsys export has none: there
/// PyTorch's `emit_nvtx` labels the same calls as NVTX ranges.
#[derive(Clone, Debug, Serialize)]
pub struct OpCall {
    pub start: Nanos,
    pub end: Nanos,
    pub pid: u32,
    pub tid: u32,
    pub name: StrId,
    /// The inputs' shapes as recorded (`record_shapes`): `[[4, 768], [768, 768]]`, one list per
    /// input, empty for a non-tensor.
    pub shapes: Option<StrId>,
    /// The inputs' types as recorded: `["float", "c10::BFloat16", "Scalar"]`.
    pub types: Option<StrId>,
    /// The scalar inputs' values as recorded (`["", "True"]`), where the profiler kept them.
    pub concrete: Option<StrId>,
    /// The FLOPs the profiler counted for the call (`with_flops`), where it wrote them.
    pub flops: Option<u64>,
}

/// A trace's operator calls, shared: a loaded trace hands them to an analysis's small tables
/// ([`crate::source::TraceSource::small_tables`]) without a copy, which for a long Kineto trace
/// would be as large as the rest of its model. Read as a `Vec`; a change copies them first while
/// they are shared, and [`OpCalls::retain`] copies only the calls it keeps.
#[derive(Clone, Debug, Default)]
pub struct OpCalls(Arc<Vec<OpCall>>);

impl OpCalls {
    /// Keep the calls `keep` says to keep, each asked once: nothing is copied when it keeps
    /// them all, and only those kept when the calls are shared.
    pub fn retain(&mut self, mut keep: impl FnMut(&OpCall) -> bool) {
        let Some(first) = self.0.iter().position(|o| !keep(o)) else {
            return;
        };
        let mut i = 0;
        let mut kept = |o: &OpCall| {
            let k = i < first || (i > first && keep(o));
            i += 1;
            k
        };
        match Arc::get_mut(&mut self.0) {
            Some(calls) => calls.retain(kept),
            None => self.0 = Arc::new(self.0.iter().filter(|o| kept(o)).cloned().collect()),
        }
    }
}

impl From<Vec<OpCall>> for OpCalls {
    fn from(calls: Vec<OpCall>) -> OpCalls {
        OpCalls(Arc::new(calls))
    }
}

impl Deref for OpCalls {
    type Target = Vec<OpCall>;
    fn deref(&self) -> &Vec<OpCall> {
        &self.0
    }
}

impl DerefMut for OpCalls {
    fn deref_mut(&mut self) -> &mut Vec<OpCall> {
        Arc::make_mut(&mut self.0)
    }
}

impl<'a> IntoIterator for &'a OpCalls {
    type Item = &'a OpCall;
    type IntoIter = std::slice::Iter<'a, OpCall>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl<'a> IntoIterator for &'a mut OpCalls {
    type Item = &'a mut OpCall;
    type IntoIter = std::slice::IterMut<'a, OpCall>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter_mut()
    }
}

/// A GPU the trace ran on.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Gpu {
    pub id: u32,
    pub name: String,
    pub total_memory: Option<Bytes>,
    pub sm_count: Option<u32>,
    pub compute_capability: Option<(u32, u32)>,
}

/// Everything a profile of GPU work holds, whatever format it came from.
#[derive(Clone, Debug)]
pub struct Trace {
    pub source: Source,
    pub strings: Strings,
    /// Sorted by start time.
    pub kernels: Vec<Kernel>,
    /// Sorted by start time.
    pub api_calls: Vec<ApiCall>,
    /// Sorted by start time.
    pub ranges: Vec<Range>,
    /// NVTX ranges still open when the capture ended, sorted by start. Their `end` is the last
    /// range timestamp of the capture, where `nsys stats` ends them; only analyses that follow
    /// nsys in counting them (the `stats` reports) read this.
    pub open_ranges: Vec<Range>,
    pub marks: Vec<Mark>,
    /// Sorted by start time.
    pub mem_ops: Vec<MemOp>,
    /// CPU operator calls (Kineto's `cpu_op`), sorted by start time; empty for other formats.
    pub ops: OpCalls,
    /// Graph executions traced as a whole, sorted by start time; empty when the trace has no
    /// graphs or traced their kernels one by one.
    pub graph_execs: Vec<GraphExec>,
    pub gpus: Vec<Gpu>,
    /// Thread names by (pid, tid), where the file records them.
    pub thread_names: HashMap<(u32, u32), StrId>,
}

impl Trace {
    pub fn empty(source: Source) -> Trace {
        Trace {
            source,
            strings: Strings::default(),
            kernels: Vec::new(),
            api_calls: Vec::new(),
            ranges: Vec::new(),
            open_ranges: Vec::new(),
            marks: Vec::new(),
            mem_ops: Vec::new(),
            ops: OpCalls::default(),
            graph_execs: Vec::new(),
            gpus: Vec::new(),
            thread_names: HashMap::new(),
        }
    }

    pub fn name(&self, id: StrId) -> &str {
        self.strings.get(id)
    }

    /// A range's name as `nsys stats` prints it: `domain:name`, with an empty domain for the
    /// default one (`:forward`).
    pub fn range_label(&self, range: &Range) -> String {
        let domain = range.domain.map(|d| self.name(d)).unwrap_or("");
        format!("{domain}:{}", self.name(range.name))
    }

    /// Sort every event list by start time (stable, so file order breaks ties).
    /// The span of every piece of GPU work: kernels, memory operations, graph executions.
    pub fn gpu_spans(&self) -> impl Iterator<Item = &Span> {
        let kernels = self.kernels.iter().map(|k| &k.span);
        let mem_ops = self.mem_ops.iter().map(|m| &m.span);
        kernels
            .chain(mem_ops)
            .chain(self.graph_execs.iter().map(|g| &g.span))
    }

    /// [`Trace::gpu_spans`], to change.
    pub fn gpu_spans_mut(&mut self) -> impl Iterator<Item = &mut Span> {
        let kernels = self.kernels.iter_mut().map(|k| &mut k.span);
        let mem_ops = self.mem_ops.iter_mut().map(|m| &mut m.span);
        kernels
            .chain(mem_ops)
            .chain(self.graph_execs.iter_mut().map(|g| &mut g.span))
    }

    pub fn sort(&mut self) {
        self.kernels.sort_by_key(|k| k.span.start);
        self.api_calls.sort_by_key(|c| c.start);
        self.ranges.sort_by_key(|r| r.start);
        self.open_ranges.sort_by_key(|r| r.start);
        self.marks.sort_by_key(|m| m.time);
        self.mem_ops.sort_by_key(|m| m.span.start);
        if !self.ops.is_sorted_by_key(|o| o.start) {
            self.ops.sort_by_key(|o| o.start);
        }
        self.graph_execs.sort_by_key(|g| g.span.start);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_interned_once() {
        let mut s = Strings::default();
        let a = s.intern("forward");
        let b = s.intern("backward");
        assert_ne!(a, b);
        assert_eq!(s.intern("forward"), a);
        assert_eq!(s.get(b), "backward");
        assert_eq!(s.len(), 2);
    }
}
