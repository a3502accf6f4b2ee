//! `analyze export`: the attributed view of a run (every GPU op with its rank, step, phase and
//! class; ranges; rank × step figures) as a Parquet dataset partitioned by rank.

use std::path::PathBuf;

use analyze::export;
use analyze::profile;

use crate::profile::AttributionArgs;
use crate::Outcome;

/// Every GPU op, range and rank × step of a run as Parquet, partitioned by rank, for DuckDB,
/// Spark or pandas.
#[derive(clap::Args)]
#[command(after_long_help = "\
Writes OUT/ops, OUT/ranges and OUT/rank_steps, each a folder of rank=N/part-0.parquet (Hive \
partitioning: the exports of any number of ranks read as one dataset), and OUT/export.json (the \
files read, their ranks and clock offsets, the options, the profile's notes).\n\n\
ops: one row per kernel, memcpy, memset and CUDA graph execution traced as a whole: rank, device, \
process, stream, kind, step, phase, class, name, short_name, start_ns, end_ns, duration_ns, \
correlation. The step, phase and class are the ones `analyze profile` counts the op in, with the \
same options (a step or phase is null where none claims the op; with several phases claiming it, \
the first of --phases).\n\
ranges: one row per NVTX range or Kineto annotation: rank, process, thread, end_thread, domain, \
name, style, gpu (a GPU-side mirror), depth, is_step (a measured step), start_ns, end_ns, \
duration_ns.\n\
rank_steps: one row per measured step on each device it ran work on, as `profile` measures it: \
rank, device, process, step, start_ns, step_ns, kernels, kernel_ns, compute_ns, communication_ns, \
exposed_communication_ns, memcpy_ns, memset_ns, graph_ns, idle_ns.\n\n\
Times are nanoseconds on the run's timeline (per-rank files aligned as `profile` aligns them). \
docs/sql/ holds queries for the headline figures (kernel time and GEMM fraction per phase and \
rank, top non-GEMM kernels, the rank table and the straggler) that run on DuckDB and Spark SQL.\n\n\
OUT is written beside itself and renamed into place once whole; an OUT holding an earlier \
export is replaced, one holding anything else is refused.")]
pub struct Args {
    /// The dataset folder to write.
    pub out: PathBuf,
    /// An Nsight Systems export (.sqlite, .sqlite.gz) or report (.nsys-rep), or a Kineto trace;
    /// several, or a folder, for one file per rank of one run.
    #[arg(required = true, num_args = 1..)]
    pub files: Vec<PathBuf>,
    /// Output format: parquet.
    #[arg(long, short = 'f', default_value = "parquet", value_parser = ["parquet"])]
    pub format: String,
    /// The clock of the times written: `run` (the run's timeline, as `profile` reports times:
    /// the file's own clock, or for per-rank files the lowest rank's) or `unix` (Unix time in
    /// ns, from the clock origin each file records, so that files exported one at a time, as
    /// scripts/scale does on a cluster, line up).
    #[arg(long, value_name = "CLOCK", default_value = "run")]
    pub clock: export::Timeline,
    #[command(flatten)]
    pub attribution: AttributionArgs,
    /// Print nothing on stderr but errors: no progress bars, no notes.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

pub fn run(args: Args) -> anyhow::Result<Outcome> {
    let (opts, classes) = args.attribution.into_options();
    let classifier = profile::classifier(classes.as_deref())?;
    let how = export::ExportOptions {
        timeline: args.clock,
    };
    let exported = export::export_files(&args.files, &args.out, &classifier, &opts, how)?;
    if !args.quiet {
        for note in &exported.notes {
            crate::progress::println(&format!("note: {note}"));
        }
        let tables: Vec<String> = export::TABLES
            .iter()
            .map(|t| {
                let rows: u64 = exported.rows.get(t).map_or(0, |r| r.values().sum());
                format!("{t} {rows} rows")
            })
            .collect();
        let ranks = exported.rows.get("ops").map_or(0, |r| r.len());
        crate::progress::println(&format!(
            "wrote {}: {} ({ranks} rank{})",
            args.out.display(),
            tables.join(", "),
            if ranks == 1 { "" } else { "s" }
        ));
    }
    Ok(Outcome::Success)
}
