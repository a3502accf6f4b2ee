//! Many files, one run: the per-rank captures of a distributed job (one nsys export or Kineto
//! trace per rank) read as one [`TraceSource`] on one timeline, which the profile engine reads
//! as it reads one file that holds every rank.
//!
//! - **Ranks.** From the files' own records (Kineto's `distributedInfo.rank`, the `RANK` of the
//!   environment nsys recorded) when every file has a distinct one; else from the file names
//!   (`rank3`, `rank_3`, `rank-3`, or a last `_3.`) when every name gives a distinct one; else the
//!   order of the files by name. One rule for the whole run, and [`RankFile::rank_from`] says which
//!   (`ranks.rs`).
//! - **Clocks.** Each file counts from its own zero; where the file records that zero as Unix time
//!   (nsys's session start, Kineto's `baseTimeNanoseconds`) the difference puts the file on the
//!   lowest rank's timeline. The collectives check it: the k-th communication kernel of every rank
//!   ends when the last rank arrives, within microseconds on every rank. Where the ends still
//!   differ by more than [`CLOCK_TOLERANCE_NS`] in the median (files from hosts whose clocks
//!   disagree), or a file records no zero, the median difference of the ends is the offset used.
//! - **Ids.** Processes and devices keep their ids unless an earlier file uses the same one (ranks
//!   on other hosts, each with its device 0): then they take the next free id, and a note says so.
//!   A file's processes are those of its GPU work, ranges and operator calls; the API calls of a
//!   process that did none of these launch nothing to attribute and are left out.
//!
//! Nothing that streams is loaded whole. Each file is opened as its own source (an nsys export
//! streamed, anything else loaded), its small tables read and one pass made over its kernels for
//! what the rules need first: the ends of its communication kernels, the processes and devices
//! that ran kernels, and the kernels' names. The small tables are then merged on the run's
//! timeline (`timeline.rs`), and the scans of API calls and kernels read the files side by side
//! (each export in one chunk when there are as many files as cores, so that the chunks to merge
//! are as many as one export's), each file's rows moved onto the run's clock and ids as they pass,
//! their states handed back in rank order: memory holds the small tables of every file, not their
//! kernels and calls. Kernel names are ids of the run's strings,
//! as a loaded trace's are; mangled names are not handed over. [`load_trace_or_run`] gives the
//! run as one trace in memory, for `compare`, which reads kernels beyond their rows.

mod ranks;
mod timeline;

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rayon::prelude::*;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::fast_hash::FastMap;
use crate::kernels::class::{Classifier, KernelClass};
use crate::model::trace::{Source, StrId, Trace};

use self::timeline::{align, append, common_parent, processes, Clock, Remap, Taken};
use super::export::ExportSource;
use super::loaded::{Interned, LoadedSource, TraceTexts};
use super::UNNAMED_KERNEL;
use super::{ApiRow, KernelRow, KernelTexts, NameResolver, Opened, RawName, TraceSource};

pub use self::ranks::{expand, rank_in_name, rank_runs, RankFrom};
pub use self::timeline::{ClockFrom, CLOCK_TOLERANCE_NS};

/// One file of a run.
#[derive(Clone, Debug, Serialize)]
pub struct RankFile {
    pub rank: u32,
    pub rank_from: RankFrom,
    pub path: PathBuf,
    /// Added to the file's times to put them on the run's timeline.
    pub offset_ns: i64,
    pub clock_from: ClockFrom,
    /// After the offset: the median of (the reference's k-th collective end − this file's), over
    /// the collectives both have; `None` when the counts differ or there are none.
    pub collective_skew_ns: Option<i64>,
    /// Its processes and devices, as ids of the run.
    pub processes: Vec<u32>,
    pub devices: Vec<u32>,
}

/// The files of a run, read as one source.
pub struct Run {
    /// The small tables of every file on the run's timeline, with every kernel name.
    trace: Trace,
    /// In rank order; each behind a lock of its own, so that the files are read side by side
    /// (an export's connection is used by one thread at a time).
    sources: Vec<Mutex<RankSource>>,
    files: Vec<RankFile>,
    notes: Vec<String>,
}

/// A file's own source: its export streamed, or its trace loaded whole.
enum FileSource {
    Export(Box<ExportSource>),
    Loaded(Box<Trace>),
}

/// `$body` with `$s` bound to the file's source, whichever kind it is.
macro_rules! with_source {
    ($file:expr, $s:ident => $body:expr) => {
        match &$file.source {
            FileSource::Export(e) => {
                let $s = &**e;
                $body
            }
            FileSource::Loaded(t) => {
                let $s = &LoadedSource::new(t);
                $body
            }
        }
    };
}

/// One file of the run as it is read.
struct RankSource {
    source: FileSource,
    remap: Remap,
    /// The file's own strings (its small tables, emptied into the run's), in which its source
    /// names its rows.
    own: Trace,
    names: KernelNames,
}

/// A file's kernel names, as ids of the run's strings, by the names its rows carry.
struct KernelNames {
    by_ids: FastMap<(i64, i64), (StrId, StrId)>,
    by_text: FastMap<[RawName; 2], (StrId, StrId)>,
    unnamed: StrId,
}

impl KernelNames {
    fn get(&self, raw: &[RawName; 3]) -> (StrId, StrId) {
        let found = match raw {
            [RawName::Id(a), RawName::Id(b), _] => self.by_ids.get(&(*a, *b)),
            [a, b, _] => self.by_text.get(&[a.clone(), b.clone()]),
        };
        found.copied().unwrap_or((self.unnamed, self.unnamed))
    }
}

/// What the rules need of a file before its rows are read.
struct Look {
    small: Trace,
    /// The ends of its communication kernels, in order.
    ends: Vec<i64>,
    /// (device, process) of its kernels.
    pairs: BTreeSet<(u32, u32)>,
    /// Each kernel name as its rows carry it, with its text and short text.
    kernel_names: Vec<([RawName; 2], String, String)>,
}

/// A chunk of the pass over a file's kernels.
struct LookChunk<N> {
    communication: FastMap<N, bool>,
    ends: Vec<i64>,
    pairs: BTreeSet<(u32, u32)>,
    last: Option<(u32, u32)>,
}

/// The small tables of `source` and one pass over its kernels.
fn look<S: TraceSource>(source: &mut S, classifier: &Classifier) -> Result<Look> {
    let mut small = source.small_tables(true, true)?;
    let texts = source.texts();
    let chunks = source.scan_kernels(
        false,
        false,
        || LookChunk {
            communication: FastMap::default(),
            ends: Vec::new(),
            pairs: BTreeSet::new(),
            last: None,
        },
        |c, k| {
            let communication = match c.communication.get(k.names) {
                Some(&yes) => yes,
                None => {
                    let class = classifier.classify(&texts.text(k.names));
                    let yes = class == KernelClass::Communication;
                    c.communication.insert(k.names.clone(), yes);
                    yes
                }
            };
            if communication {
                c.ends.push(k.end);
            }
            if c.last != Some((k.device, k.pid)) {
                c.last = Some((k.device, k.pid));
                c.pairs.insert((k.device, k.pid));
            }
        },
    )?;
    drop(texts);
    source.check_bounds()?;
    let mut names: Vec<S::Names> = Vec::new();
    let mut seen: FastMap<S::Names, ()> = FastMap::default();
    let mut ends = Vec::new();
    let mut pairs = BTreeSet::new();
    for c in chunks {
        for n in c.communication.into_keys() {
            if seen.insert(n.clone(), ()).is_none() {
                names.push(n);
            }
        }
        ends.extend(c.ends);
        pairs.extend(c.pairs);
    }
    ends.sort_unstable();
    let ids = source.intern_kernels(&mut small, &names);
    let kernel_names = names
        .iter()
        .zip(ids)
        .map(|(n, (a, b))| {
            let raw = S::with_raw_names(n, |r| [r[0].clone(), r[1].clone()]);
            (raw, small.name(a).to_owned(), small.name(b).to_owned())
        })
        .collect();
    Ok(Look {
        small,
        ends,
        pairs,
        kernel_names,
    })
}

/// Open the file at `path` (loaded whole when `whole`) and look at it; an export read in one
/// chunk when `serially`.
fn open_file(
    path: &Path,
    classifier: &Classifier,
    how: &Reading,
    serially: bool,
) -> Result<(FileSource, Look)> {
    let mut source = match how {
        Reading::Whole => FileSource::Loaded(Box::new(crate::formats::load_trace(path)?)),
        Reading::Streamed {
            per_kernel,
            per_call,
        } => match super::open(path, *per_kernel, *per_call)? {
            Opened::Export(mut e) => {
                if serially {
                    e.read_serially();
                }
                FileSource::Export(e)
            }
            Opened::Loaded(t) => FileSource::Loaded(t),
        },
    };
    let look = match &mut source {
        FileSource::Export(e) => look(&mut **e, classifier)?,
        FileSource::Loaded(t) => look(&mut LoadedSource::new(t), classifier)?,
    };
    Ok((source, look))
}

/// How the files of a run are read.
enum Reading {
    /// nsys exports streamed; the bytes kept per kernel and API call, for the memory check.
    Streamed { per_kernel: u64, per_call: u64 },
    /// Every file loaded whole.
    Whole,
}

/// A trace with `trace`'s source and strings and no records.
fn shell(trace: &Trace) -> Trace {
    Trace {
        strings: trace.strings.clone(),
        ..Trace::empty(trace.source.clone())
    }
}

impl Run {
    /// Open `paths` as one run: nsys exports streamed, anything else loaded. `per_kernel` and
    /// `per_call` are the bytes the caller keeps per streamed kernel and API call, for each
    /// file's memory check.
    pub fn open(
        paths: &[PathBuf],
        classifier: &Classifier,
        per_kernel: u64,
        per_call: u64,
    ) -> Result<Run> {
        let how = Reading::Streamed {
            per_kernel,
            per_call,
        };
        Run::read(paths, classifier, &how)
    }

    fn read(paths: &[PathBuf], classifier: &Classifier, how: &Reading) -> Result<Run> {
        if paths.is_empty() {
            return Err(Error::Malformed {
                path: PathBuf::new(),
                message: "no files to read".into(),
            });
        }
        // As many files as cores or more: each read in one chunk, the files side by side.
        let serially = paths.len() >= rayon::current_num_threads();
        let opened: Vec<(FileSource, Look)> = paths
            .par_iter()
            .map(|p| open_file(p, classifier, how, serially))
            .collect::<Result<_>>()?;
        let recorded: Vec<Option<u32>> = opened.iter().map(|o| o.1.small.source.rank).collect();
        let (ranks, rank_from) = ranks::ranks(paths, &recorded);
        let mut order: Vec<usize> = (0..paths.len()).collect();
        order.sort_by_key(|&i| (ranks[i], i));
        let mut slots: Vec<Option<(FileSource, Look)>> = opened.into_iter().map(Some).collect();
        let mut notes = Vec::new();
        let mut files = Vec::new();
        let mut sources = Vec::new();
        let mut merged: Option<Trace> = None;
        let mut reference: Option<Clock> = None;
        let mut taken = Taken::default();
        for &i in &order {
            let (source, mut look) = slots[i].take().expect("each file once");
            let clock = Clock {
                origin_ns: look.small.source.clock_origin_ns,
                ends: std::mem::take(&mut look.ends),
            };
            let (offset_ns, clock_from, skew) = match &reference {
                None => (0, ClockFrom::Reference, None),
                Some(r) => align(r, &clock),
            };
            if clock_from == ClockFrom::Collectives {
                notes.push(format!(
                    "rank {}: clocks disagree with rank {}'s, aligned by the ends of {} collectives (offset {offset_ns} ns)",
                    ranks[i],
                    ranks[order[0]],
                    clock.ends.len()
                ));
            } else if clock_from == ClockFrom::Unaligned && reference.is_some() {
                notes.push(format!(
                    "rank {}: no clock origin and no collectives to match: times taken as they are",
                    ranks[i]
                ));
            }
            reference.get_or_insert(clock);
            let pids = processes(&look.small, look.pairs.iter().map(|p| p.1));
            let devices: BTreeSet<u32> = (look.small.gpu_spans().map(|s| s.device))
                .chain(look.pairs.iter().map(|p| p.0))
                .collect();
            let (pid_map, device_map) = taken.claim(&pids, &devices, ranks[i], &mut notes);
            files.push(RankFile {
                rank: ranks[i],
                rank_from,
                path: paths[i].clone(),
                offset_ns,
                clock_from,
                collective_skew_ns: skew,
                processes: pids.iter().map(|p| pid_map[p]).collect(),
                devices: devices.iter().map(|d| device_map[d]).collect(),
            });
            let remap = Remap {
                offset: offset_ns,
                pids: pid_map,
                devices: device_map,
            };
            remap.apply(&mut look.small);
            let merged = merged.get_or_insert_with(|| shell(&look.small));
            append(merged, &mut look.small);
            let mut names = KernelNames {
                by_ids: FastMap::default(),
                by_text: FastMap::default(),
                unnamed: merged.strings.intern(UNNAMED_KERNEL),
            };
            for (raw, name, short) in look.kernel_names {
                let ids = (merged.strings.intern(&name), merged.strings.intern(&short));
                match raw {
                    [RawName::Id(a), RawName::Id(b)] => names.by_ids.insert((a, b), ids),
                    raw => names.by_text.insert(raw, ids),
                };
            }
            sources.push(Mutex::new(RankSource {
                source,
                remap,
                own: look.small,
                names,
            }));
        }
        let mut trace = merged.expect("at least one file");
        trace.sort();
        trace.gpus.sort_by_key(|g| g.id);
        trace.source.path = common_parent(paths);
        trace.source.rank = None;
        Ok(Run {
            trace,
            sources,
            files,
            notes,
        })
    }

    /// The files, in rank order.
    pub fn files(&self) -> &[RankFile] {
        &self.files
    }

    /// Ids moved to keep ranks apart, clocks that disagreed: one line each.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// What the run's files record about it (the lowest rank's metadata), the folder of the files
    /// as its path.
    pub fn source(&self) -> &Source {
        &self.trace.source
    }

    /// The run as one trace in memory, every file loaded whole.
    fn into_trace(self) -> Trace {
        let mut trace = self.trace;
        for s in self.sources {
            let s = s.into_inner().unwrap_or_else(|e| e.into_inner());
            let FileSource::Loaded(mut t) = s.source else {
                unreachable!("a run read whole holds loaded traces");
            };
            // The rest is in the run's small tables already.
            let mut work = shell(&t);
            work.kernels = std::mem::take(&mut t.kernels);
            work.api_calls = std::mem::take(&mut t.api_calls);
            s.remap.apply(&mut work);
            append(&mut trace, &mut work);
        }
        trace.sort();
        trace
    }
}

/// The trace of `path`: a file's own, or, for a folder of per-rank files, the run they make as
/// one trace in memory (a folder of one file is that file).
pub fn load_trace_or_run(path: &Path, classifier: &Classifier) -> Result<Trace> {
    if !path.is_dir() {
        return crate::formats::load_trace(path);
    }
    match &expand(&[path.to_owned()])?[..] {
        [one] => crate::formats::load_trace(one),
        files => Ok(Run::read(files, classifier, &Reading::Whole)?.into_trace()),
    }
}

/// Function keys of a run: the file's index above these bits, the file's own key below.
const FILE_SHIFT: u32 = 40;

/// The names of a run's rows, resolved into the run's strings.
struct RunNames<'a> {
    sources: &'a mut [Mutex<RankSource>],
    trace: &'a mut Trace,
}

impl NameResolver for RunNames<'_> {
    fn function(&mut self, key: u64) -> StrId {
        let (file, own) = ((key >> FILE_SHIFT) as usize, key & ((1 << FILE_SHIFT) - 1));
        let Some(s) = self.sources.get_mut(file) else {
            return self.unnamed();
        };
        let s = s.get_mut().unwrap_or_else(|e| e.into_inner());
        let text = match &mut s.source {
            FileSource::Export(e) => {
                let id = e.resolve(&mut s.own, |names| names.function(own));
                s.own.name(id).to_owned()
            }
            FileSource::Loaded(t) => t.name(StrId(own as u32)).to_owned(),
        };
        self.trace.strings.intern(&text)
    }
    fn name(&mut self, raw: &RawName) -> Option<StrId> {
        Interned(&mut *self.trace).name(raw)
    }
    fn unnamed(&mut self) -> StrId {
        Interned(&mut *self.trace).unnamed()
    }
}

impl TraceSource for Run {
    type Names = (StrId, StrId, Option<StrId>);

    fn path(&self) -> &Path {
        &self.trace.source.path
    }

    fn small_tables(&mut self, nvtx: bool, mem_ops: bool) -> Result<Trace> {
        LoadedSource::new(&self.trace).small_tables(nvtx, mem_ops)
    }

    fn name_key(names: &Self::Names) -> Option<(i64, i64)> {
        LoadedSource::name_key(names)
    }

    fn api_rows(&self) -> u64 {
        (self.sources.iter())
            .map(|s| with_source!(lock(s), src => src.api_rows()))
            .sum()
    }

    fn scan_api<S: Send>(
        &self,
        names: bool,
        init: impl Fn() -> S + Sync,
        row: impl Fn(&mut S, &ApiRow) + Sync,
    ) -> Result<Vec<S>> {
        let per_file = (self.sources.par_iter().enumerate())
            .map(|(i, s)| {
                let s = &*lock(s);
                let remap = &s.remap;
                let key = |own: u64| {
                    if names {
                        (i as u64) << FILE_SHIFT | own
                    } else {
                        0
                    }
                };
                let on_run = |state: &mut S, r: &ApiRow| {
                    if let Some(r) = remap.api(r, key(r.name)) {
                        row(state, &r);
                    }
                };
                with_source!(s, src => src.scan_api(names, &init, on_run))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(per_file.into_iter().flatten().collect())
    }

    fn scan_kernels<S: Send>(
        &self,
        _mangled: bool,
        graph_node: bool,
        init: impl Fn() -> S + Sync,
        row: impl Fn(&mut S, &KernelRow<'_, Self::Names>) + Sync,
    ) -> Result<Vec<S>> {
        let per_file = (self.sources.par_iter())
            .map(|s| {
                let s = &*lock(s);
                with_source!(s, src => kernels_on_run(src, s, graph_node, &init, &row))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(per_file.into_iter().flatten().collect())
    }

    fn check_bounds(&self) -> Result<()> {
        for s in &self.sources {
            with_source!(lock(s), src => src.check_bounds())?;
        }
        Ok(())
    }

    fn has_kernel_table(&self) -> bool {
        (self.sources.iter()).any(|s| with_source!(lock(s), src => src.has_kernel_table()))
    }

    type Texts<'t> = TraceTexts<'t>;

    fn texts(&self) -> TraceTexts<'_> {
        TraceTexts::new(&self.trace)
    }

    fn intern_kernels(&mut self, _trace: &mut Trace, names: &[Self::Names]) -> Vec<(StrId, StrId)> {
        // The small tables carry the run's strings, kernel names included: its ids stand.
        names.iter().map(|n| (n.0, n.1)).collect()
    }

    fn with_raw_names<R>(names: &Self::Names, f: impl FnOnce(&[RawName; 3]) -> R) -> R {
        LoadedSource::with_raw_names(names, f)
    }

    fn resolve<R>(&mut self, trace: &mut Trace, f: impl FnOnce(&mut dyn NameResolver) -> R) -> R {
        f(&mut RunNames {
            sources: &mut self.sources,
            trace,
        })
    }

    fn calls_at(&self, queries: &[(u32, i64)]) -> Result<HashMap<(u32, i64), Option<String>>> {
        let mut out = HashMap::new();
        for s in &self.sources {
            let s = &*lock(s);
            let own: HashMap<u32, u32> = s.remap.pids.iter().map(|(&o, &r)| (r, o)).collect();
            // Each file's queries on its own clock and ids, and the query each answers.
            let asked: HashMap<(u32, i64), (u32, i64)> = queries
                .iter()
                .filter_map(|&(p, t)| Some(((*own.get(&p)?, t - s.remap.offset), (p, t))))
                .collect();
            if asked.is_empty() {
                continue;
            }
            let mine: Vec<(u32, i64)> = asked.keys().copied().collect();
            for (q, call) in with_source!(s, src => src.calls_at(&mine))? {
                if let Some(&q) = asked.get(&q) {
                    out.insert(q, call);
                }
            }
        }
        Ok(out)
    }
}

/// A file of the run, locked for reading.
fn lock(s: &Mutex<RankSource>) -> std::sync::MutexGuard<'_, RankSource> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

/// The kernels of one file's `source`, on the run's timeline and named by the run's strings.
fn kernels_on_run<F: TraceSource, S: Send>(
    source: &F,
    file: &RankSource,
    graph_node: bool,
    init: &(impl Fn() -> S + Sync),
    row: &(impl Fn(&mut S, &KernelRow<'_, (StrId, StrId, Option<StrId>)>) + Sync),
) -> Result<Vec<S>> {
    let (remap, names) = (&file.remap, &file.names);
    source.scan_kernels(false, graph_node, init, |state, k| {
        let (name, short) = F::with_raw_names(k.names, |raw| names.get(raw));
        row(state, &remap.kernel(k, &(name, short, None)));
    })
}
