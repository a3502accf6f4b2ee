//! An Nsight Systems export as a [`TraceSource`]: the small tables load as a [`Trace`] without
//! kernels or API calls, and the kernel and API tables stream from the file in chunks side by
//! side ([`Export::scan_api`], [`Export::scan_kernels`]), their names nsys string ids until a
//! kernel or function is interned. Every row is checked as it passes against the bounds a loaded
//! trace keeps ([`Bounds`]), and where the API tables' rows start is sampled, so that the calls
//! in flight at a few times are found later by rowid instead of by another scan.
//!
//! A row with a time out of those bounds is counted, and the file refused after the scan
//! ([`TraceSource::check_bounds`]), but the row goes to no sink: a sink is written for the times a
//! loaded trace can hold, and a damaged kernel of 2^63 ns once became 2^31 pieces of the profile's
//! timeline, gigabytes and minutes before the refusal.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::attribution::bounds::Bounds;
use crate::error::{Error, Result};
use crate::formats::limits::Limits;
use crate::formats::nsys_sqlite::read::{Export, RawName, StartIndex, StartSamples, Texts};
use crate::formats::nsys_sqlite::split_global_tid;
use crate::formats::nsys_sqlite::table::{DRIVER, KERNEL, RUNTIME};
use crate::model::bounds::LIMIT;
use crate::model::trace::{StrId, Trace};

use super::{ApiRow, KernelRow, KernelTexts, NameResolver, TraceSource, UNNAMED_KERNEL};

/// An nsys export, streamed.
pub struct ExportSource {
    export: Export,
    path: PathBuf,
    /// Whether the small tables hold graph executions: with them, or a `...GraphLaunch` call
    /// among the strings, the capture launched CUDA graphs, and only then is the graph node
    /// column, far into each kernel row, read.
    graph_execs: bool,
    /// What the scans found: the rows' bounds, the longest API call, where the API tables' rows
    /// start.
    found: Mutex<Found>,
}

#[derive(Default)]
struct Found {
    api_bounds: Bounds,
    kernel_bounds: Bounds,
    longest_call: i64,
    starts: StartIndex,
}

/// The texts of an export's kernel names.
pub struct ExportTexts<'a>(Texts<'a>);

impl KernelTexts<[RawName; 3]> for ExportTexts<'_> {
    fn text<'n>(&'n self, names: &'n [RawName; 3]) -> Cow<'n, str> {
        self.0
            .text(&names[0])
            .unwrap_or(Cow::Borrowed(UNNAMED_KERNEL))
    }
    fn short_text<'n>(&'n self, names: &'n [RawName; 3]) -> Cow<'n, str> {
        match self.0.text(&names[1]) {
            Some(short) => short,
            None => self.text(names),
        }
    }
}

impl ExportSource {
    /// Open `path` for streaming if it is an nsys export; `None` for any other input.
    pub fn open(
        path: &Path,
        limits: &Limits,
        per_kernel: u64,
        per_call: u64,
    ) -> Result<Option<ExportSource>> {
        let Some(export) = Export::open(path, limits, per_kernel, per_call)? else {
            return Ok(None);
        };
        Ok(Some(ExportSource {
            export,
            path: path.to_owned(),
            graph_execs: false,
            found: Mutex::default(),
        }))
    }

    /// Read the kernel and API tables in one chunk on the calling thread
    /// ([`Export::read_serially`]).
    pub fn read_serially(&mut self) {
        self.export.read_serially();
    }

    /// The export itself, for readers of columns the rows above leave out (the trace reports of
    /// [`crate::stats`]).
    pub fn export(&self) -> &Export {
        &self.export
    }
}

/// The names of an export's rows, resolved into the trace's strings.
struct ExportNames<'a>(&'a mut Export);

impl NameResolver for ExportNames<'_> {
    fn function(&mut self, key: u64) -> StrId {
        self.0.name(key as i64)
    }
    fn name(&mut self, raw: &RawName) -> Option<StrId> {
        self.0.raw_name(raw)
    }
    fn unnamed(&mut self) -> StrId {
        self.0.intern(UNNAMED_KERNEL)
    }
}

/// Whether both times of a row lie in the bounds a loaded trace keeps.
fn in_bounds(start: i64, end: i64) -> bool {
    (-LIMIT..=LIMIT).contains(&start) && (-LIMIT..=LIMIT).contains(&end)
}

/// A chunk's state beside the caller's: where its rows start, their bounds, the longest call.
struct Chunk<S> {
    state: S,
    starts: StartSamples,
    bounds: Bounds,
    longest: i64,
}

impl TraceSource for ExportSource {
    type Names = [RawName; 3];

    fn path(&self) -> &Path {
        &self.path
    }

    fn small_tables(&mut self, nvtx: bool, mem_ops: bool) -> Result<Trace> {
        let trace = self.export.trace_without_work(nvtx, mem_ops)?;
        self.graph_execs = !trace.graph_execs.is_empty();
        Ok(trace)
    }

    fn name_key(names: &[RawName; 3]) -> Option<(i64, i64)> {
        match names {
            [RawName::Id(a), RawName::Id(b), RawName::None] => Some((*a, *b)),
            _ => None,
        }
    }

    fn api_rows(&self) -> u64 {
        self.export.rows(RUNTIME) + self.export.rows(DRIVER)
    }

    fn scan_api<S: Send>(
        &self,
        names: bool,
        init: impl Fn() -> S + Sync,
        row: impl Fn(&mut S, &ApiRow) + Sync,
    ) -> Result<Vec<S>> {
        let chunks = self.export.scan_api(
            names,
            || Chunk {
                state: init(),
                starts: StartSamples::default(),
                bounds: Bounds::default(),
                longest: 0,
            },
            |c, r| {
                let end = c.bounds.span(r.start, r.end);
                if !in_bounds(r.start, r.end) {
                    return Ok(());
                }
                c.longest = c.longest.max(end.saturating_sub(r.start));
                c.starts.row(&r);
                let (pid, tid) = split_global_tid(r.global_tid);
                let api = ApiRow {
                    start: r.start,
                    end,
                    pid,
                    tid,
                    correlation_id: r.correlation_id as u64,
                    name: r.name as u64,
                };
                row(&mut c.state, &api);
                Ok(())
            },
        )?;
        let mut found = self.found.lock().unwrap_or_else(|e| e.into_inner());
        let mut starts = Vec::with_capacity(chunks.len());
        let mut out = Vec::with_capacity(chunks.len());
        found.api_bounds = Bounds::default();
        for c in chunks {
            found.api_bounds.add(&c.bounds);
            found.longest_call = found.longest_call.max(c.longest);
            starts.push(c.starts);
            out.push(c.state);
        }
        found.starts = StartIndex::new(starts);
        Ok(out)
    }

    fn scan_kernels<S: Send>(
        &self,
        mangled: bool,
        graph_node: bool,
        init: impl Fn() -> S + Sync,
        row: impl Fn(&mut S, &KernelRow<'_, [RawName; 3]>) + Sync,
    ) -> Result<Vec<S>> {
        let chunks = self.export.scan_kernels(
            mangled,
            // Asked of the strings only by a scan that wants graph nodes.
            graph_node
                && (self.graph_execs || self.export.any_string(|s| s.contains("GraphLaunch"))),
            || (init(), Bounds::default()),
            |(s, bounds), k| {
                let end = bounds.span(k.start, k.end);
                if !in_bounds(k.start, k.end) {
                    return Ok(());
                }
                let kernel = KernelRow {
                    start: k.start,
                    end,
                    device: k.device as u32,
                    stream: k.stream as u32,
                    pid: split_global_tid(k.global_pid).0,
                    correlation_id: k.correlation_id as u64,
                    names: &k.names,
                    graph_node: k.graph_node,
                };
                row(s, &kernel);
                Ok(())
            },
        )?;
        let mut found = self.found.lock().unwrap_or_else(|e| e.into_inner());
        found.kernel_bounds = Bounds::default();
        Ok(chunks
            .into_iter()
            .map(|(s, b)| {
                found.kernel_bounds.add(&b);
                s
            })
            .collect())
    }

    fn check_bounds(&self) -> Result<()> {
        // In the order a loaded trace checks them.
        let found = self.found.lock().unwrap_or_else(|e| e.into_inner());
        for (bounds, what) in [
            (&found.kernel_bounds, "kernels"),
            (&found.api_bounds, "CUDA API calls"),
        ] {
            if let Some(message) = bounds.error(what) {
                return Err(Error::Malformed {
                    path: self.path.clone(),
                    message,
                });
            }
        }
        Ok(())
    }

    fn has_kernel_table(&self) -> bool {
        self.export.has(KERNEL)
    }

    type Texts<'t> = ExportTexts<'t>;

    fn texts(&self) -> ExportTexts<'_> {
        ExportTexts(self.export.texts())
    }

    fn intern_kernels(&mut self, trace: &mut Trace, names: &[[RawName; 3]]) -> Vec<(StrId, StrId)> {
        self.export.with_names(trace, |export| {
            names
                .iter()
                .map(|raw| {
                    let name = match export.raw_name(&raw[0]) {
                        Some(n) => n,
                        None => export.intern(UNNAMED_KERNEL),
                    };
                    (name, export.raw_name(&raw[1]).unwrap_or(name))
                })
                .collect()
        })
    }

    fn with_raw_names<R>(names: &[RawName; 3], f: impl FnOnce(&[RawName; 3]) -> R) -> R {
        f(names)
    }

    fn resolve<R>(&mut self, trace: &mut Trace, f: impl FnOnce(&mut dyn NameResolver) -> R) -> R {
        self.export
            .with_names(trace, |export| f(&mut ExportNames(export)))
    }

    fn calls_at(&self, queries: &[(u32, i64)]) -> Result<HashMap<(u32, i64), Option<String>>> {
        let found = self.found.lock().unwrap_or_else(|e| e.into_inner());
        self.export
            .calls_at(queries, found.longest_call, &found.starts)
    }
}
