//! Finding and reading a report's inputs: files named on the command line and every file under
//! the folders named there, each recognised by its content ([`crate::formats::detect`]), never by
//! its name.
//!
//! A file named directly must be readable and of a supported kind, or the report fails with the
//! loader's error. A file found by walking a folder that is not a profile (a CSV, a README, a
//! `peaks.jsonl`) or that cannot be read is skipped and listed in the report with the reason, so
//! one bad file does not sink a whole sweep. A `.nsys-rep` beside its `.sqlite` export is skipped
//! in favour of the export. The per-rank files of one run found in a folder (names that differ
//! only in the number after `rank`, or the ranks 0 to n − 1 the files record: [`many::rank_runs`])
//! are one run, read as `profile` reads them. Each file is analysed as soon as it is read and then dropped, so a
//! sweep of many large traces never sits in memory at once.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::formats::limits::Limits;
use crate::formats::{self, kineto, torch_snapshot, Kind};
use crate::kernels::class::Classifier;
use crate::memory::categories::Rules;
use crate::memory::charts::timeline_chart;
use crate::memory::summary::{analyze, MemoryOptions};
use crate::model::trace::{SourceFormat, Trace};
use crate::profile::{profile_run, profile_source, Profile, ProfileOptions, PER_CALL, PER_KERNEL};
use crate::source::export::ExportSource;
use crate::source::loaded::LoadedSource;
use crate::source::many;
use crate::source::TraceSource;

use super::bench::{looks_like_bench, parse as parse_bench};
use super::labels::{label_run, Labelled};
use super::{BenchRun, Inputs, Skipped, SnapshotRun, TraceRun};

/// The reason given for a file found in a folder that is not a profiler file of any kind.
pub const NOT_RECOGNISED: &str = "not a recognised input";

/// How to read and analyse the inputs.
pub struct LoadOptions<'a> {
    pub classifier: &'a Classifier,
    /// Options of every profile; `head_dim` left `None` is taken per run from its label.
    pub profile: ProfileOptions,
    /// The memory category rules, built-in ones made on first use when none are set.
    pub rules: std::cell::OnceCell<Rules>,
    /// Allocations listed at each snapshot's peak.
    pub memory_top: usize,
    /// `--label FILE=LABEL` pairs.
    pub labels: Vec<(PathBuf, String)>,
}

/// A file to read, and whether it was named directly (errors are fatal) or found in a folder;
/// or the per-rank files of one run found in a folder (`path` the first of them).
struct Candidate {
    path: PathBuf,
    named: bool,
    ranks: Vec<PathBuf>,
}

/// Every file under `dir`, sorted by path, hidden files and folders left out.
fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(Error::io(dir))?
        .map(|e| e.map(|e| e.path()).map_err(Error::io(dir)))
        .collect::<Result<_>>()?;
    entries.sort();
    for p in entries {
        let hidden = p
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with('.'));
        if hidden {
            continue;
        }
        if p.is_dir() {
            walk(&p, out)?;
        } else {
            out.push(p);
        }
    }
    Ok(())
}

fn candidates(paths: &[PathBuf]) -> Result<Vec<Candidate>> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut files = Vec::new();
            walk(p, &mut files)?;
            let runs = many::rank_runs(files, crate::formats::recorded_rank);
            out.extend(runs.into_iter().map(|mut run| {
                let path = run[0].clone();
                if run.len() == 1 {
                    run.clear();
                }
                Candidate {
                    path,
                    named: false,
                    ranks: run,
                }
            }));
        } else {
            formats::check_file(p)?;
            out.push(Candidate {
                path: p.clone(),
                named: true,
                ranks: Vec::new(),
            });
        }
    }
    Ok(out)
}

/// What one file turned out to hold.
enum Loaded {
    Trace(Box<TraceRun>),
    Snapshot(Box<SnapshotRun>),
    Bench(BenchRun),
}

/// The user's label for `path`, matched by the path as given, by the same file, or by file name.
fn user_label<'a>(labels: &'a [(PathBuf, String)], path: &Path) -> Option<&'a str> {
    let same_file = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    };
    labels
        .iter()
        .find(|(f, _)| f == path || same_file(f, path))
        .or_else(|| {
            labels.iter().find(|(f, _)| {
                f.components().count() == 1 && path.file_name() == Some(f.as_os_str())
            })
        })
        .map(|(_, l)| l.as_str())
}

/// The profile of one trace's `source`, whose small tables are `trace`.
fn trace_run<S: TraceSource>(
    source: &mut S,
    trace: Trace,
    labelled: Labelled,
    opts: &LoadOptions<'_>,
) -> Result<TraceRun> {
    let file = trace.source.path.display().to_string();
    let format = trace.source.format;
    finish_trace_run(file, format, labelled, opts, |popts| {
        profile_source(source, trace, opts.classifier, popts)
    })
}

/// The per-rank files of one run, profiled as one run, labelled by its first file.
fn rank_run(files: &[PathBuf], opts: &LoadOptions<'_>) -> Result<TraceRun> {
    let mut run = many::Run::open(files, opts.classifier, PER_KERNEL, PER_CALL)?;
    let first = &files[0];
    let labelled = label_run(
        &first.display().to_string(),
        Some(&run.source().run),
        user_label(&opts.labels, first),
    );
    let more = files.len() - 1;
    let file = format!(
        "{} and {more} more rank file{}",
        first.display(),
        if more == 1 { "" } else { "s" }
    );
    let format = run.source().format;
    finish_trace_run(file, format, labelled, opts, |popts| {
        let trace = run.small_tables(true, true)?;
        profile_run(&mut run, trace, opts.classifier, popts, None)
    })
}

/// A trace run from its profile, which `profile` makes with the run's options.
fn finish_trace_run(
    file: String,
    format: SourceFormat,
    labelled: Labelled,
    opts: &LoadOptions<'_>,
    profile: impl FnOnce(&ProfileOptions) -> Result<(Profile, usize)>,
) -> Result<TraceRun> {
    let mut popts = opts.profile.clone();
    if popts.head_dim.is_none() {
        popts.head_dim = labelled.head_dim;
    }
    let (profile, kernels) = profile(&popts)?;
    Ok(TraceRun {
        label: labelled.label,
        file,
        format,
        run: labelled.run,
        label_source: labelled.source,
        label_guessed: labelled.guessed,
        head_dim: popts.head_dim,
        kernels,
        profile,
    })
}

fn load_one(path: &Path, opts: &LoadOptions<'_>) -> Result<Loaded> {
    let name = path.display().to_string();
    let label = user_label(&opts.labels, path);
    let kind = formats::detect(path)?;
    let limits = Limits::from_env()?;
    let trace = match kind {
        Kind::NsysSqlite | Kind::NsysSqliteGz | Kind::NsysRep => {
            // An export streams: its kernels and API calls are never held.
            let Some(mut export) = ExportSource::open(path, &limits, PER_KERNEL, PER_CALL)? else {
                return Err(Error::Malformed {
                    path: path.to_owned(),
                    message: "is not an Nsight Systems export".into(),
                });
            };
            let trace = export.small_tables(true, true)?;
            let labelled = label_run(&name, Some(&trace.source.run), label);
            let run = trace_run(&mut export, trace, labelled, opts)?;
            return Ok(Loaded::Trace(Box::new(run)));
        }
        Kind::Kineto => match kineto::load_with(path, &limits) {
            Ok(trace) => trace,
            // JSON that is not a trace may be a bench results file, or JSON Lines: both are
            // small, and only now read whole to tell which.
            Err(e @ Error::Malformed { .. }) => {
                let Ok(bytes) = formats::read_maybe_gzip_with(path, &limits) else {
                    return Err(e);
                };
                if looks_like_bench(&bytes) {
                    let results = parse_bench(path, &bytes)?;
                    let labelled = label_run(&name, None, label);
                    return Ok(Loaded::Bench(BenchRun {
                        label: labelled.label,
                        file: name,
                        results,
                    }));
                }
                if is_json_lines(&bytes) {
                    return Err(Error::UnknownFormat {
                        path: path.to_owned(),
                    });
                }
                return Err(e);
            }
            Err(e) => return Err(e),
        },
        Kind::TorchSnapshot => {
            let snap = torch_snapshot::read::load_with(path, &limits)?;
            let labelled = label_run(&name, None, label);
            let mopts = MemoryOptions {
                top: opts.memory_top,
                device: None,
                label: labelled.label.clone(),
            };
            let mut analysis = analyze(&snap, opts.rules.get_or_init(Rules::builtin), &mopts);
            analysis.report.run = labelled.run.clone();
            let timeline = Some(timeline_chart(&analysis));
            return Ok(Loaded::Snapshot(Box::new(SnapshotRun {
                label: labelled.label,
                file: name,
                run: labelled.run,
                label_source: labelled.source,
                label_guessed: labelled.guessed,
                memory: analysis.report,
                timeline,
            })));
        }
    };
    let labelled = label_run(&name, Some(&trace.source.run), label);
    let mut source = LoadedSource::new(&trace);
    let small = source.small_tables(true, true)?;
    trace_run(&mut source, small, labelled, opts).map(|t| Loaded::Trace(Box::new(t)))
}

/// Whether `bytes` are JSON Lines (`peaks.jsonl`): a first line that is a whole JSON value and
/// more after it. Such a file is not a broken trace but another kind of file.
fn is_json_lines(bytes: &[u8]) -> bool {
    let mut lines = bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.iter().all(u8::is_ascii_whitespace));
    let first_is_json = lines
        .next()
        .is_some_and(|l| serde_json::from_slice::<serde::de::IgnoredAny>(l).is_ok());
    first_is_json && lines.next().is_some()
}

/// One line saying what a loaded file is.
fn describe(l: &Loaded) -> String {
    match l {
        Loaded::Trace(t) => format!(
            "{}: {} kernels, {} measured steps",
            t.label, t.kernels, t.profile.measured_steps
        ),
        Loaded::Snapshot(s) => format!(
            "{}: memory snapshot, {} trace entries",
            s.label, s.memory.trace_entries
        ),
        Loaded::Bench(b) => format!(
            "{}: bench results, {} configurations",
            b.label,
            b.results.rows.len()
        ),
    }
}

/// Give runs that share a label a `#2`, `#3` suffix, in input order.
fn disambiguate(labels: Vec<&mut String>) {
    let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for l in labels {
        let n = seen.entry(l.clone()).or_default();
        *n += 1;
        if *n > 1 {
            l.push_str(&format!(" #{n}"));
        }
    }
}

/// Give the memory the last file's analysis freed back to the system. glibc keeps freed blocks
/// in its heaps, where the next file's differently sized buffers fit them badly: a report over
/// twenty exports grew a third past one `profile` of them that way.
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: asks the C allocator to return free pages; it touches no block in use.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Read every input under `paths`. `progress` gets one line per file read; skipped files are
/// only listed in the result, for the caller to summarise.
pub fn load(
    paths: &[PathBuf],
    opts: &LoadOptions<'_>,
    progress: &mut dyn FnMut(&str),
) -> Result<Inputs> {
    let all = candidates(paths)?;
    let mut inputs = Inputs::default();
    let total = all.len();
    let _task = crate::progress::begin(
        || "reading the inputs".to_owned(),
        Some(total as u64),
        crate::progress::Unit::Files,
    );
    for (i, c) in all.iter().enumerate() {
        if i > 0 {
            // The file before is done: read, skipped or refused.
            crate::progress::advance(1);
            release_freed_memory();
        }
        let shown = c.path.display().to_string();
        let is_rep = c
            .path
            .extension()
            .is_some_and(|e| e == "nsys-rep" || e == "qdrep");
        if is_rep && !c.named {
            let sqlite = c.path.with_extension("sqlite");
            if all.iter().any(|o| o.path == sqlite) {
                inputs.skipped.push(Skipped {
                    file: shown,
                    reason: format!("its export {} is read instead", sqlite.display()),
                });
                continue;
            }
        }
        let loaded = if c.ranks.is_empty() {
            load_one(&c.path, opts)
        } else {
            rank_run(&c.ranks, opts).map(|t| Loaded::Trace(Box::new(t)))
        };
        match loaded {
            Ok(loaded) => {
                progress(&format!(
                    "[{}/{total}] {shown}: {}",
                    i + 1,
                    describe(&loaded)
                ));
                match loaded {
                    Loaded::Trace(t) => inputs.traces.push(*t),
                    Loaded::Snapshot(s) => inputs.snapshots.push(*s),
                    Loaded::Bench(b) => inputs.benches.push(b),
                }
            }
            Err(e) if !c.named => {
                let reason = match e {
                    Error::UnknownFormat { .. } => NOT_RECOGNISED.to_owned(),
                    other => {
                        // The error names the file; the table already does.
                        let text = other.to_string();
                        text.strip_prefix(&format!("{shown}: "))
                            .map_or(text.clone(), str::to_owned)
                    }
                };
                inputs.skipped.push(Skipped {
                    file: shown,
                    reason,
                });
            }
            Err(e) => return Err(e),
        }
    }
    for (file, label) in &opts.labels {
        let used = all.iter().any(|c| {
            user_label(
                std::slice::from_ref(&(file.clone(), label.clone())),
                &c.path,
            )
            .is_some()
        });
        if !used {
            return Err(Error::UnmatchedLabel { path: file.clone() });
        }
    }
    disambiguate(inputs.traces.iter_mut().map(|t| &mut t.label).collect());
    disambiguate(inputs.snapshots.iter_mut().map(|s| &mut s.label).collect());
    for s in &mut inputs.snapshots {
        s.memory.label.clone_from(&s.label);
    }
    disambiguate(inputs.benches.iter_mut().map(|b| &mut b.label).collect());
    Ok(inputs)
}
