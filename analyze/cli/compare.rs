//! `analyze compare A B`: what changed between two GPU traces or two memory snapshots, and a CI
//! gate on GPU kernel time.

use analyze::cli::parse_whole;
use analyze::source::many;
use std::path::{Path, PathBuf};

use analyze::compare::memory::{compare_memory, sites_at_peak};
use analyze::compare::tables::{check_failed, check_passed, memory_document};
use analyze::compare::{self, DocumentOptions};
use analyze::formats::{self, Kind};
use analyze::memory::categories::Rules;
use analyze::memory::summary::{self, MemoryOptions};
use analyze::profile::{self, ProfileOptions};
use analyze::render::Format;

use crate::output::{OutputArgs, OutputFormat};
use crate::Outcome;

#[derive(clap::Args)]
#[command(
    after_help = "Supported pairs: two GPU traces, each an Nsight Systems export (.sqlite, \
                  .sqlite.gz, .nsys-rep) or a PyTorch profiler (Kineto) trace (.json, .json.gz), \
                  in any pairing; or two PyTorch memory snapshots (.pickle, .pickle.gz).\n\n\
                  Traces: summary (kernel time, GEMM %), passes per step (forward, backward, \
                  optimizer, measured steps), kernel families, kernel classes, kernels, ranges. \
                  Snapshots: peak allocated and reserved, categories at the peak, allocations at \
                  the peak by category and frame. Every table is sorted by the size of the \
                  change. When the two traces ran different amounts of work (kernel instance \
                  counts differ by more than 2%), time per call at A's instance counts leads, \
                  with a warning, and its table lists the largest per-call rises first.\n\n\
                  Exit status: 0 when the comparison was printed (and the --fail-if-slower check \
                  passed), 1 when B's headline figure (time per call when the work differs, \
                  else GPU time per measured step, else total GPU kernel time) is more than PCT% \
                  above A's, 2 for unreadable input or bad usage."
)]
pub struct Args {
    /// The baseline trace or snapshot; a folder of per-rank traces is one run.
    pub a: PathBuf,
    /// The trace or snapshot compared against the baseline; a folder of per-rank traces is one
    /// run.
    pub b: PathBuf,
    /// Output format: table, csv, json or markdown; parquet writes the files of --output as
    /// Parquet (stdout gets text tables).
    #[arg(long, short = 'f', default_value = "table")]
    pub format: OutputFormat,
    /// Exit 1 when B is more than PCT percent slower than A, naming the kernels that got
    /// slower (GPU traces only). When the two ran different amounts of work (kernel instance
    /// counts differ by more than 2%, in total or for a kernel both ran), the check judges time
    /// per call: B's average per kernel at A's instance counts; else GPU time per measured step
    /// (kernels and CUDA graphs), or total GPU kernel time when either trace has no measured
    /// steps.
    #[arg(long, value_name = "PCT", value_parser = parse_pct)]
    pub fail_if_slower: Option<f64>,
    /// Rows per table (kernels, families, classes, per-call changes, passes, ranges,
    /// allocations; 0: all). CSV and JSON always have every row.
    #[arg(long, default_value_t = 25, value_parser = parse_whole::<usize>)]
    pub limit: usize,
    /// Print whole kernel names in text tables (the same as --wide).
    #[arg(long)]
    pub full_names: bool,
    /// Kernel-class rules (TOML or JSON) tried before the built-in ones.
    #[arg(long, value_name = "FILE")]
    pub classes: Option<PathBuf>,
    /// Memory category rules (TOML or JSON) tried before the built-in ones (snapshots).
    #[arg(long, value_name = "FILE")]
    pub categories: Option<PathBuf>,
    #[command(flatten)]
    pub output: OutputArgs,
}

fn parse_pct(s: &str) -> Result<f64, String> {
    match s.trim_end_matches('%').parse::<f64>() {
        Ok(p) if p.is_finite() && p >= 0.0 => Ok(p),
        _ => Err(format!(
            "`{s}` is not a percentage (expected a number ≥ 0, e.g. 5)"
        )),
    }
}

/// Whether the pair is two snapshots (`true`) or two traces (`false`); refuses a mixed pair
/// before either is read in full.
fn pair_kind(a: &Path, b: &Path) -> anyhow::Result<bool> {
    // A folder is a run of per-rank traces.
    let snapshot = |p: &Path| -> anyhow::Result<bool> {
        Ok(!p.is_dir() && formats::detect(p)? == Kind::TorchSnapshot)
    };
    let (snapshot_a, snapshot_b) = (snapshot(a)?, snapshot(b)?);
    if snapshot_a != snapshot_b {
        let (snap, trace) = if snapshot_a { (a, b) } else { (b, a) };
        anyhow::bail!(
            "{} is a PyTorch memory snapshot but {} is a GPU trace; `compare` takes two GPU \
             traces (Nsight Systems exports or Kineto traces, in any pairing) or two memory \
             snapshots",
            snap.display(),
            trace.display()
        );
    }
    Ok(snapshot_a)
}

/// Every row, whole names: the tables of `--output`.
const WHOLE: DocumentOptions = DocumentOptions {
    limit: None,
    name_width: None,
};

fn label(path: &Path) -> String {
    path.display().to_string()
}

pub fn run(mut args: Args) -> anyhow::Result<Outcome> {
    // CSV and JSON are for programs: every row. Names are never cut here: text tables fit their
    // width by cutting names in the middle (whole with --wide), the other formats keep them.
    let for_people = matches!(args.format.stdout(), Format::Table | Format::Markdown);
    let opts = DocumentOptions {
        limit: (for_people && args.limit > 0).then_some(args.limit),
        name_width: None,
    };
    args.output.wide |= args.full_names;
    args.output.check(args.format)?;
    if pair_kind(&args.a, &args.b)? {
        if args.fail_if_slower.is_some() {
            anyhow::bail!(
                "--fail-if-slower checks GPU kernel time; it does not apply to memory snapshots"
            );
        }
        return run_memory(&args, &opts);
    }
    let classifier = profile::classifier(args.classes.as_deref())?;
    let a = many::load_trace_or_run(&args.a, &classifier)?;
    let b = many::load_trace_or_run(&args.b, &classifier)?;
    let comparison = compare::compare_traces(&a, &b, &classifier, &ProfileOptions::default());
    let doc = compare::document(&comparison, &opts);
    let whole = compare::document(&comparison, &WHOLE);
    args.output.emit(args.format, &doc, &whole)?;

    let Some(threshold) = args.fail_if_slower else {
        // Tables carry the warning in their notes; CSV and JSON do not.
        if !for_people && comparison.per_call_leads() {
            args.output.note(&compare::tables::work_warning(
                &comparison,
                &comparison.work(),
            ));
        }
        return Ok(Outcome::Success);
    };
    match compare::check_slower(&comparison, threshold) {
        None => {
            eprint!("{}", check_passed(&comparison, threshold));
            Ok(Outcome::Success)
        }
        Some(regression) => {
            eprint!("{}", check_failed(&comparison, &regression));
            Ok(Outcome::CheckFailed)
        }
    }
}

fn run_memory(args: &Args, opts: &DocumentOptions) -> anyhow::Result<Outcome> {
    let rules = Rules::load(args.categories.as_deref())?;
    let mut sides = Vec::with_capacity(2);
    for path in [&args.a, &args.b] {
        let snap = formats::load_snapshot(path)?;
        let mopts = MemoryOptions {
            label: label(path),
            ..MemoryOptions::default()
        };
        let analysis = summary::analyze(&snap, &rules, &mopts);
        let sites = sites_at_peak(&snap, &analysis);
        sides.push((analysis.report, sites));
    }
    let c = compare_memory(&sides[0].0, &sides[0].1, &sides[1].0, &sides[1].1);
    args.output.emit(
        args.format,
        &memory_document(&c, opts),
        &memory_document(&c, &WHOLE),
    )?;
    Ok(Outcome::Success)
}
