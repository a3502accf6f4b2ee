//! Sources: where an analysis's records come from. A source hands an analysis a GPU trace in two
//! parts: the small tables (NVTX ranges, memory operations, graph executions, metadata) as a
//! [`Trace`] without kernels or API calls, and the large ones (CUDA API calls, then kernels) as
//! rows pushed into the analysis's per-chunk state, chunks side by side on every core.
//!
//! Three sources implement [`TraceSource`]:
//!
//! - [`export::ExportSource`] streams an Nsight Systems export: its kernel and API tables are read
//!   from the file's pages (or by SQL) without ever being held whole, each row checked against
//!   the bounds a loaded trace keeps ([`crate::model::bounds`]);
//! - [`loaded::LoadedSource`] is a [`Trace`] already in memory (a Kineto trace, or anything
//!   loaded whole), its kernels and API calls handed over as the same rows;
//! - [`many::Run`] is the per-rank files of one run on one timeline, each file one of the above,
//!   its rows moved onto the run's clock and ids as they pass.
//!
//! An analysis written against [`TraceSource`] is written once: the streamed and the loaded
//! input run the same code ([`crate::profile`]). [`open`] picks the source for a file: a stream
//! for an nsys export, a loaded trace for anything else.

pub mod export;
pub mod loaded;
pub mod many;

use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::Hash;
use std::path::Path;

use crate::error::Result;
pub use crate::formats::nsys_sqlite::read::RawName;
use crate::model::trace::{StrId, Trace};

/// A CUDA API call as a source hands it over; its end is never before its start.
#[derive(Clone, Copy, Debug)]
pub struct ApiRow {
    pub start: i64,
    pub end: i64,
    pub pid: u32,
    pub tid: u32,
    /// 0: linked to no GPU work.
    pub correlation_id: u64,
    /// The function's name, as a key the source resolves ([`NameResolver::function`]); 0 when
    /// names were not asked for.
    pub name: u64,
}

/// A kernel as a source hands it over; its end is never before its start.
#[derive(Clone, Debug)]
pub struct KernelRow<'a, N> {
    pub start: i64,
    pub end: i64,
    pub device: u32,
    pub stream: u32,
    pub pid: u32,
    pub correlation_id: u64,
    /// Its names as the source holds them until they are interned.
    pub names: &'a N,
    /// The CUDA graph node that ran it, when asked for and known.
    pub graph_node: Option<i64>,
}

/// The kernel text that names a kernel without a name.
pub const UNNAMED_KERNEL: &str = "<unnamed kernel>";

/// Names of rows as a source hands them over, interned.
pub trait NameResolver {
    /// An API function's key ([`ApiRow::name`]).
    fn function(&mut self, key: u64) -> StrId;
    /// A kernel name as read; `None` for none.
    fn name(&mut self, raw: &RawName) -> Option<StrId>;
    /// The name of a kernel without one ([`UNNAMED_KERNEL`]).
    fn unnamed(&mut self) -> StrId;
}

/// The text of kernel names, without interning them.
pub trait KernelTexts<N> {
    /// The demangled name ([`UNNAMED_KERNEL`] for none).
    fn text<'n>(&'n self, names: &'n N) -> Cow<'n, str>;
    /// The short name, as the source records it (the demangled name where it records none).
    fn short_text<'n>(&'n self, names: &'n N) -> Cow<'n, str>;
}

/// A GPU trace as rows: the one interface every analysis of GPU work reads.
pub trait TraceSource {
    /// A kernel's names (demangled, short, mangled) as the source holds them: cheap to hash and
    /// compare, interned only once per distinct kernel ([`TraceSource::intern_kernels`]).
    type Names: Clone + Eq + Hash + Send + Sync;

    /// The file shown in messages.
    fn path(&self) -> &Path;

    /// Everything but the kernels and API calls: metadata, NVTX ranges and marks and operator
    /// calls (when `nvtx`),
    /// memory operations (when `mem_ops`), graph executions, GPUs.
    fn small_tables(&mut self, nvtx: bool, mem_ops: bool) -> Result<Trace>;

    /// A pair of ids that names a kernel where the source has one: cheaper to hash than its
    /// names.
    fn name_key(_names: &Self::Names) -> Option<(i64, i64)> {
        None
    }

    /// About how many API calls the source holds.
    fn api_rows(&self) -> u64;

    /// Every API call (runtime, then driver), pushed into states made by `init`, one per chunk,
    /// returned in order. Without `names` the rows' names are 0.
    fn scan_api<S: Send>(
        &self,
        names: bool,
        init: impl Fn() -> S + Sync,
        row: impl Fn(&mut S, &ApiRow) + Sync,
    ) -> Result<Vec<S>>;

    /// Every kernel, pushed into states made by `init`, one per chunk, returned in order. The
    /// mangled name and the graph node only when asked for.
    fn scan_kernels<S: Send>(
        &self,
        mangled: bool,
        graph_node: bool,
        init: impl Fn() -> S + Sync,
        row: impl Fn(&mut S, &KernelRow<'_, Self::Names>) + Sync,
    ) -> Result<Vec<S>>;

    /// After the scans: an error when any row was out of the bounds a loaded trace keeps
    /// (kernels first, then API calls).
    fn check_bounds(&self) -> Result<()>;

    /// Whether the source has a kernel table at all (an export of a capture that traced no
    /// CUDA kernels does not).
    fn has_kernel_table(&self) -> bool;

    /// The texts of kernel names, to read from the threads of a scan.
    type Texts<'t>: KernelTexts<Self::Names> + Sync
    where
        Self: 't;

    /// The texts of this source's kernel names.
    fn texts(&self) -> Self::Texts<'_>;

    /// The interned (name, short name) of each kernel, in `trace`'s strings (`trace` being the
    /// one [`TraceSource::small_tables`] made).
    fn intern_kernels(&mut self, trace: &mut Trace, names: &[Self::Names]) -> Vec<(StrId, StrId)>;

    /// A kernel's names as columns of an export: nsys string ids, inline text or none (a
    /// loaded trace's interned ids stand for string ids).
    fn with_raw_names<R>(names: &Self::Names, f: impl FnOnce(&[RawName; 3]) -> R) -> R;

    /// Run `f` with the names of rows (function keys, raw kernel names) resolving into `trace`'s
    /// strings (`trace` being the one [`TraceSource::small_tables`] made).
    fn resolve<R>(&mut self, trace: &mut Trace, f: impl FnOnce(&mut dyn NameResolver) -> R) -> R;

    /// Whether the interned ids of names follow their first occurrence in the file (a loaded
    /// trace's do; an export's follow the order the rows were read).
    fn ids_in_file_order(&self) -> bool {
        false
    }

    /// For each (process, time): the name of the CUDA API call the process was in at that time
    /// (the latest-started one, the last in table order among equals), if any.
    fn calls_at(&self, queries: &[(u32, i64)]) -> Result<HashMap<(u32, i64), Option<String>>>;
}

/// The source of a file: a stream of an nsys export, or the trace loaded whole.
pub enum Opened {
    Export(Box<export::ExportSource>),
    Loaded(Box<Trace>),
}

/// Open `path` as a GPU trace: streamed when it is an nsys export, loaded whole otherwise.
/// `per_kernel` and `per_call` are the bytes the caller keeps per streamed kernel and API call,
/// for the memory check.
pub fn open(path: &Path, per_kernel: u64, per_call: u64) -> Result<Opened> {
    let limits = crate::formats::limits::Limits::from_env()?;
    match export::ExportSource::open(path, &limits, per_kernel, per_call)? {
        Some(e) => Ok(Opened::Export(Box::new(e))),
        None => Ok(Opened::Loaded(Box::new(crate::formats::load_trace(path)?))),
    }
}
