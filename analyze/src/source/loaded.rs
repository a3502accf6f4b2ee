//! A [`Trace`] in memory as a [`TraceSource`]: a Kineto trace, a `.nsys-rep` or export loaded
//! whole, a trace a test built. Its kernels and API calls are handed over as the rows an export
//! streams, in chunks side by side; their names are already interned, so a kernel's names are
//! its (name, short name) ids.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

use rayon::prelude::*;

use crate::error::Result;
use crate::formats::nsys_sqlite::table::KERNEL;
use crate::model::trace::{ApiCall, StrId, Trace};

use super::{ApiRow, KernelRow, KernelTexts, NameResolver, RawName, TraceSource, UNNAMED_KERNEL};

/// Rows handed to one chunk's state.
const CHUNK: usize = 1 << 16;

impl ApiRow {
    /// The row of a loaded call, its name's interned id as the key when `names`.
    fn of_call(c: &ApiCall, names: bool) -> ApiRow {
        ApiRow {
            start: c.start.0,
            end: c.end.0,
            pid: c.pid,
            tid: c.tid,
            correlation_id: c.correlation_id,
            name: if names { c.name.0 as u64 } else { 0 },
        }
    }
}

/// The names of a loaded trace's rows: already interned, their ids given as string ids.
pub(super) struct Interned<'a>(pub(super) &'a mut Trace);

impl NameResolver for Interned<'_> {
    fn function(&mut self, key: u64) -> StrId {
        StrId(key as u32)
    }
    fn name(&mut self, raw: &RawName) -> Option<StrId> {
        match raw {
            RawName::Id(i) => Some(StrId(*i as u32)),
            RawName::Text(t) => Some(self.0.strings.intern(t)),
            RawName::None => None,
        }
    }
    fn unnamed(&mut self) -> StrId {
        self.0.strings.intern(UNNAMED_KERNEL)
    }
}

/// `row` over `items` in chunks side by side, each into a state made by `init`, in order.
fn in_chunks<T: Sync, S: Send>(
    items: &[T],
    init: impl Fn() -> S + Sync,
    row: impl Fn(&mut S, &T) + Sync,
) -> Vec<S> {
    items
        .par_chunks(CHUNK)
        .map(|chunk| {
            let mut s = init();
            for item in chunk {
                row(&mut s, item);
            }
            s
        })
        .collect()
}

/// The texts of a loaded trace's kernel names: its strings.
pub struct TraceTexts<'a>(&'a Trace);

impl<'a> TraceTexts<'a> {
    /// The texts of `trace`'s kernel names.
    pub fn new(trace: &'a Trace) -> TraceTexts<'a> {
        TraceTexts(trace)
    }
}

impl KernelTexts<(StrId, StrId, Option<StrId>)> for TraceTexts<'_> {
    fn text<'n>(&'n self, names: &'n (StrId, StrId, Option<StrId>)) -> Cow<'n, str> {
        Cow::Borrowed(self.0.name(names.0))
    }
    fn short_text<'n>(&'n self, names: &'n (StrId, StrId, Option<StrId>)) -> Cow<'n, str> {
        Cow::Borrowed(self.0.name(names.1))
    }
}

/// A loaded trace.
pub struct LoadedSource<'a> {
    trace: &'a Trace,
}

impl<'a> LoadedSource<'a> {
    pub fn new(trace: &'a Trace) -> LoadedSource<'a> {
        LoadedSource { trace }
    }
}

impl TraceSource for LoadedSource<'_> {
    type Names = (StrId, StrId, Option<StrId>);

    fn path(&self) -> &Path {
        &self.trace.source.path
    }

    fn small_tables(&mut self, nvtx: bool, mem_ops: bool) -> Result<Trace> {
        let t = self.trace;
        let (ranges, open_ranges, marks) = if nvtx {
            (t.ranges.clone(), t.open_ranges.clone(), t.marks.clone())
        } else {
            Default::default()
        };
        Ok(Trace {
            source: t.source.clone(),
            strings: t.strings.clone(),
            kernels: Vec::new(),
            api_calls: Vec::new(),
            ranges,
            open_ranges,
            marks,
            mem_ops: if mem_ops {
                t.mem_ops.clone()
            } else {
                Vec::new()
            },
            // Operator calls, like ranges, are host activity that attribution reads; shared,
            // not copied.
            ops: if nvtx {
                t.ops.clone()
            } else {
                Default::default()
            },
            graph_execs: t.graph_execs.clone(),
            gpus: t.gpus.clone(),
            thread_names: t.thread_names.clone(),
        })
    }

    fn name_key(names: &(StrId, StrId, Option<StrId>)) -> Option<(i64, i64)> {
        match names.2 {
            None => Some((names.0 .0 as i64, names.1 .0 as i64)),
            Some(_) => None,
        }
    }

    fn api_rows(&self) -> u64 {
        self.trace.api_calls.len() as u64
    }

    fn scan_api<S: Send>(
        &self,
        names: bool,
        init: impl Fn() -> S + Sync,
        row: impl Fn(&mut S, &ApiRow) + Sync,
    ) -> Result<Vec<S>> {
        Ok(in_chunks(&self.trace.api_calls, init, |s, c| {
            row(s, &ApiRow::of_call(c, names));
        }))
    }

    fn scan_kernels<S: Send>(
        &self,
        mangled: bool,
        graph_node: bool,
        init: impl Fn() -> S + Sync,
        row: impl Fn(&mut S, &KernelRow<'_, (StrId, StrId, Option<StrId>)>) + Sync,
    ) -> Result<Vec<S>> {
        Ok(in_chunks(&self.trace.kernels, init, |s, k| {
            let names = (k.name, k.short_name, k.mangled_name.filter(|_| mangled));
            let kernel = KernelRow {
                start: k.span.start.0,
                end: k.span.end.0,
                device: k.span.device,
                stream: k.span.stream,
                pid: k.span.pid,
                correlation_id: k.span.correlation_id,
                names: &names,
                graph_node: k.graph_node_id.filter(|_| graph_node).map(|n| n as i64),
            };
            row(s, &kernel);
        }))
    }

    fn check_bounds(&self) -> Result<()> {
        // A loaded trace was checked as it loaded.
        Ok(())
    }

    fn has_kernel_table(&self) -> bool {
        !self.trace.source.missing.iter().any(|t| t == KERNEL)
    }

    type Texts<'t>
        = TraceTexts<'t>
    where
        Self: 't;

    fn texts(&self) -> TraceTexts<'_> {
        TraceTexts(self.trace)
    }

    fn intern_kernels(
        &mut self,
        _trace: &mut Trace,
        names: &[(StrId, StrId, Option<StrId>)],
    ) -> Vec<(StrId, StrId)> {
        // The small tables carry the trace's own strings: its ids stand.
        names.iter().map(|n| (n.0, n.1)).collect()
    }

    fn with_raw_names<R>(
        names: &(StrId, StrId, Option<StrId>),
        f: impl FnOnce(&[RawName; 3]) -> R,
    ) -> R {
        let id = |s: StrId| RawName::Id(s.0 as i64);
        f(&[id(names.0), id(names.1), names.2.map_or(RawName::None, id)])
    }

    fn resolve<R>(&mut self, trace: &mut Trace, f: impl FnOnce(&mut dyn NameResolver) -> R) -> R {
        f(&mut Interned(trace))
    }

    fn ids_in_file_order(&self) -> bool {
        true
    }

    fn calls_at(&self, queries: &[(u32, i64)]) -> Result<HashMap<(u32, i64), Option<String>>> {
        let calls = &self.trace.api_calls;
        let longest = calls.iter().map(|c| c.duration().0).max().unwrap_or(0);
        Ok(queries
            .iter()
            .map(|&(pid, t)| {
                let hi = calls.partition_point(|c| c.start.0 <= t);
                let lo = calls.partition_point(|c| c.start.0 < t.saturating_sub(longest));
                let call = calls[lo..hi]
                    .iter()
                    .rev()
                    .find(|c| c.pid == pid && c.end.0 > t)
                    .map(|c| self.trace.name(c.name).to_owned());
                ((pid, t), call)
            })
            .collect())
    }
}
