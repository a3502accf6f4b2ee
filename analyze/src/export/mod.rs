//! `analyze export`: the profile's attributed view of a run as a Parquet dataset, partitioned by
//! rank so that the exports of any number of ranks read as one dataset (DuckDB, Spark, pandas):
//!
//! ```text
//! OUT/ops/rank=N/part-0.parquet         one row per GPU op: kernel, memcpy, memset, graph
//! OUT/ranges/rank=N/part-0.parquet      one row per NVTX range or Kineto annotation
//! OUT/rank_steps/rank=N/part-0.parquet  one row per measured step on each device it ran work on
//! OUT/export.json                       files, ranks, clock offsets, options, notes
//! ```
//!
//! Nothing here attributes work: the profile engine runs once over the input, as `analyze
//! profile` runs it, and hands every op to the ops sink ([`ops`]) with the step and phase that
//! claimed it and its kernel class ([`crate::profile::claims`]); the rank × step rows are the
//! profile's own step breakdown. So the dataset's sums are the profile's figures, and
//! `docs/sql/` holds the queries that give them back.
//!
//! Inputs are read as `profile` reads them: one file (an nsys export streams; with several
//! processes in it, a first pass over the kernels finds which devices each ran on, for their
//! ranks), or several per-rank files read as one source on one timeline ([`crate::source::many`]). The
//! dataset is written into a folder beside `OUT` and renamed into place once whole.

pub mod documents;
pub mod ops;
pub mod parquet;
pub mod tables;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Serialize;

use self::ops::{OpsSink, Ranks};
use self::tables::{range_ranks, range_rows, write_ranges, write_rank_steps};
use crate::atomic_file;
use crate::error::{Error, Result};
use crate::formats::temp_file::TempDir;
use crate::kernels::class::Classifier;
use crate::model::trace::Trace;
use crate::profile::ranks::ranks_in_one_file;
use crate::profile::{self, Profile, ProfileOptions, PER_CALL, PER_KERNEL};
use crate::progress::{self, Unit};
use crate::source::loaded::LoadedSource;
use crate::source::many::{self, RankFile};
use crate::source::{self, Opened, TraceSource};

/// The tables of a dataset, as folders of `OUT`.
pub const TABLES: [&str; 3] = ["ops", "ranges", "rank_steps"];

/// The clock of the times written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Timeline {
    /// The run's timeline, as `profile` reports times: the file's own clock, or for per-rank
    /// files the lowest rank's.
    #[default]
    Run,
    /// Unix time in nanoseconds, from the clock origin the file records (nsys's session start,
    /// Kineto's `baseTimeNanoseconds`): exports of separate files line up, as far as their
    /// hosts' clocks agree.
    Unix,
}

impl std::str::FromStr for Timeline {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Timeline, String> {
        match s {
            "run" => Ok(Timeline::Run),
            "unix" => Ok(Timeline::Unix),
            other => Err(format!("unknown clock `{other}` (expected run or unix)")),
        }
    }
}

/// How to export, beyond the profile's options.
#[derive(Clone, Copy, Debug, Default)]
pub struct ExportOptions {
    pub timeline: Timeline,
}

/// What an export wrote.
#[derive(Clone, Debug, Serialize)]
pub struct Exported {
    /// Rows per table and rank.
    pub rows: BTreeMap<&'static str, BTreeMap<u32, u64>>,
    /// The files read, one per rank (empty for one file).
    pub files: Vec<RankFile>,
    /// The profile's notes about the same pass.
    pub notes: Vec<String>,
}

/// The file `OUT/export.json`.
#[derive(Serialize)]
struct Manifest<'a> {
    tool: String,
    inputs: Vec<String>,
    step_pattern: &'a str,
    phases: &'a [String],
    attribution: &'static str,
    timeline: Timeline,
    /// Added to the run's times (0 on the run's timeline).
    shift_ns: i64,
    #[serde(flatten)]
    exported: &'a Exported,
}

/// Export the run in `paths` (one file, several per-rank files, or folders of them) into the
/// dataset folder `out`, attributing as `analyze profile` does with `opts`. `out` is replaced
/// when it holds an earlier export, and refused when it holds anything else; it is checked
/// before any input is read.
pub fn export_files(
    paths: &[PathBuf],
    out: &Path,
    classifier: &Classifier,
    opts: &ProfileOptions,
    how: ExportOptions,
) -> Result<Exported> {
    let staging = staging(out)?;
    let files = many::expand(paths)?;
    let task = progress::begin(
        || format!("exporting to {}", out.display()),
        None,
        Unit::Rows,
    );
    let (exported, shift_ns) = match &files[..] {
        [one] => match source::open(one, PER_KERNEL, PER_CALL)? {
            Opened::Export(mut export) => {
                let trace = export.small_tables(true, true)?;
                let shift = shift(&trace, how.timeline)?;
                let dir = staging.path();
                (
                    one_file(&mut *export, trace, one, dir, classifier, opts, shift)?,
                    shift,
                )
            }
            Opened::Loaded(trace) => {
                let mut loaded = LoadedSource::new(&trace);
                let small = loaded.small_tables(true, true)?;
                let shift = shift(&small, how.timeline)?;
                let dir = staging.path();
                (
                    one_file(&mut loaded, small, one, dir, classifier, opts, shift)?,
                    shift,
                )
            }
        },
        _ => {
            let mut run = many::Run::open(&files, classifier, PER_KERNEL, PER_CALL)?;
            let ranks = Ranks {
                of_process: (run.files().iter())
                    .flat_map(|f| f.processes.iter().map(move |&p| (p, f.rank)))
                    .collect(),
                default: run.files()[0].rank,
            };
            let trace = run.small_tables(true, true)?;
            let shift = shift(&trace, how.timeline)?;
            let rows = range_rows(&trace, shift);
            let sink = OpsSink::new(&staging.path().join("ops"), ranks.clone(), shift);
            let profile = profile::profile_run(&mut run, trace, classifier, opts, Some(&sink))?.0;
            let mut exported = tables(staging.path(), sink, &profile, &rows, &ranks, shift)?;
            exported.files = run.files().to_vec();
            (exported, shift)
        }
    };
    drop(task);
    let manifest = Manifest {
        tool: format!("analyze {}", env!("CARGO_PKG_VERSION")),
        inputs: files.iter().map(|f| f.display().to_string()).collect(),
        step_pattern: opts.steps.as_str(),
        phases: &opts.phases,
        attribution: opts.attribution.as_str(),
        timeline: how.timeline,
        shift_ns,
        exported: &exported,
    };
    let json = serde_json::to_vec_pretty(&manifest).map_err(std::io::Error::from);
    let manifest_path = staging.path().join("export.json");
    atomic_file::write_file(&manifest_path, &json.map_err(Error::io(&manifest_path))?)?;
    commit(staging, out)?;
    Ok(exported)
}

/// What puts the times of `trace` on `timeline`.
fn shift(trace: &Trace, timeline: Timeline) -> Result<i64> {
    match timeline {
        Timeline::Run => Ok(0),
        Timeline::Unix => trace.source.clock_origin_ns.ok_or_else(|| Error::Malformed {
            path: trace.source.path.clone(),
            message: "records no clock origin (nsys's TARGET_INFO_SESSION_START_TIME, Kineto's baseTimeNanoseconds): its times cannot be given as Unix time".into(),
        }),
    }
}

/// Export one file: its processes' ranks by the devices each ran on when it holds several (the
/// rank table's rule), else the rank the file records or its name gives.
fn one_file<S: TraceSource>(
    source: &mut S,
    trace: Trace,
    path: &Path,
    dir: &Path,
    classifier: &Classifier,
    opts: &ProfileOptions,
    shift: i64,
) -> Result<Exported> {
    let chunks = source.scan_kernels(false, false, BTreeSet::new, |pairs, k| {
        pairs.insert((k.device, k.pid));
    })?;
    let mut pairs: BTreeSet<(u32, u32)> = chunks.into_iter().flatten().collect();
    let spans =
        (trace.mem_ops.iter().map(|m| &m.span)).chain(trace.graph_execs.iter().map(|g| &g.span));
    pairs.extend(spans.map(|s| (s.device, s.pid)));
    let ranks = Ranks {
        of_process: ranks_in_one_file(pairs.into_iter().collect())
            .into_iter()
            .collect(),
        default: (trace.source.rank)
            .or_else(|| many::rank_in_name(path))
            .unwrap_or(0),
    };
    let rows = range_rows(&trace, shift);
    let sink = OpsSink::new(&dir.join("ops"), ranks.clone(), shift);
    let profile = profile::profile_source_into(source, trace, classifier, opts, Some(&sink))?.0;
    tables(dir, sink, &profile, &rows, &ranks, shift)
}

/// Close the ops table and write the ranges and rank × step tables beside it.
fn tables(
    dir: &Path,
    sink: OpsSink,
    profile: &Profile,
    ranges: &[tables::RangeRow],
    ranks: &Ranks,
    shift: i64,
) -> Result<Exported> {
    let steps = sink.step_ranges();
    // Every rank gets each table, empty where it has no rows.
    let mut all: BTreeSet<u32> = range_ranks(ranges, ranks).collect();
    all.extend(profile.step_breakdown.iter().map(|s| ranks.rank(s.process)));
    let ops = sink.finish(&all)?;
    all.extend(ops.keys());
    let mut rows = BTreeMap::new();
    rows.insert("ops", ops);
    let ranges = write_ranges(&dir.join("ranges"), ranges, &steps, ranks, &all)?;
    rows.insert("ranges", ranges);
    let breakdown = &profile.step_breakdown;
    let steps = write_rank_steps(&dir.join("rank_steps"), breakdown, ranks, shift, &all)?;
    rows.insert("rank_steps", steps);
    Ok(Exported {
        rows,
        files: Vec::new(),
        notes: profile.notes.clone(),
    })
}

/// Where the dataset is written before it is renamed to `out`: a new folder beside it. `out`
/// itself must be absent, empty, or an earlier export.
fn staging(out: &Path) -> Result<TempDir> {
    if out.exists() {
        let earlier = out.join("export.json").is_file();
        let empty = std::fs::read_dir(out)
            .map_err(Error::io(out))?
            .next()
            .is_none();
        if !earlier && !empty {
            return Err(Error::io(out)(std::io::Error::other(
                "exists and is not an export of analyze (no export.json): not replaced",
            )));
        }
    }
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent).map_err(Error::io(&parent))?;
    let name = out
        .file_name()
        .map_or_else(|| "export".into(), |n| n.to_string_lossy().into_owned());
    let tmp = parent.join(format!(".{name}.tmp-{}", std::process::id()));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(Error::io(&tmp))?;
    }
    TempDir::create(&tmp)
}

/// Put the finished dataset in place of `out`.
fn commit(staging: TempDir, out: &Path) -> Result<()> {
    if !out.exists() {
        return staging.persist(out);
    }
    let name = out
        .file_name()
        .map_or_else(|| "export".into(), |n| n.to_string_lossy());
    let old = out.with_file_name(format!(".{name}.old-{}", std::process::id()));
    std::fs::rename(out, &old).map_err(Error::io(out))?;
    let placed = staging.persist(out);
    if placed.is_err() {
        let _ = std::fs::rename(&old, out);
    } else {
        let _ = std::fs::remove_dir_all(&old);
    }
    placed
}
