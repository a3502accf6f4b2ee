//! `collect`: the command line. Parses arguments into the library's option structs, runs the
//! library and maps the result to an exit code: 0 on success, 2 for bad usage, no GPU, or any
//! other error (one `error: ...` line on stderr).

use std::path::PathBuf;
use std::process::ExitCode;

use analyze::cli::print;
use analyze::render::{self, Format};
use clap::{Args, Parser, Subcommand};

use collect::bench::{self, numerics, report, BenchOptions, Recording};
use collect::gpu::device_memory::AllocatorKind;
use collect::gpu::ops::Runtime;
use collect::transformer::config::{Mode, ModelConfig, Precision, RunConfig};
use collect::transformer::plan;

/// The CS336 transformer on an NVIDIA GPU: benchmark it, plan its cost, dump its numerics.
#[derive(Parser)]
#[command(name = "collect", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Time steps of the model over a grid of sizes, contexts, modes and precisions.
    Bench(BenchArgs),
    /// Parameters, FLOPs per step and memory of one configuration (no GPU needed).
    Plan(PlanArgs),
    /// One forward and backward on fixed weights, written as safetensors for a PyTorch check.
    Numerics(NumericsArgs),
}

/// Model dimensions: a named size or all four custom dimensions.
#[derive(Args)]
struct ModelArgs {
    /// Custom width (with --d-ff, --layers, --heads, instead of --size).
    #[arg(long, requires_all = ["d_ff", "layers", "heads"], conflicts_with = "size")]
    d_model: Option<usize>,
    #[arg(long, requires = "d_model")]
    d_ff: Option<usize>,
    #[arg(long, requires = "d_model")]
    layers: Option<usize>,
    #[arg(long, requires = "d_model")]
    heads: Option<usize>,
}

impl ModelArgs {
    fn models(&self, sizes: &[String]) -> anyhow::Result<Vec<ModelConfig>> {
        if let (Some(d), Some(f), Some(l), Some(h)) =
            (self.d_model, self.d_ff, self.layers, self.heads)
        {
            return Ok(vec![ModelConfig::custom(d, f, l, h)?]);
        }
        sizes.iter().map(|s| Ok(ModelConfig::preset(s)?)).collect()
    }
}

#[derive(Args)]
struct BenchArgs {
    /// Model sizes: small, medium, large, xl, 2.7B (comma-separated list).
    #[arg(long, value_delimiter = ',', default_value = "small")]
    size: Vec<String>,
    #[command(flatten)]
    model: ModelArgs,
    /// Context lengths (comma-separated list).
    #[arg(long, value_delimiter = ',', default_value = "256")]
    ctx: Vec<usize>,
    #[arg(long, default_value_t = 4)]
    batch: usize,
    /// forward, forward-backward, train (comma-separated list).
    #[arg(long, value_delimiter = ',', default_value = "forward")]
    mode: Vec<String>,
    /// fp32, bf16 (comma-separated list).
    #[arg(long, value_delimiter = ',', default_value = "fp32")]
    precision: Vec<String>,
    /// Untimed steps before the measurement.
    #[arg(long, default_value_t = 5)]
    warmup: usize,
    /// Timed steps.
    #[arg(long, default_value_t = 10)]
    steps: usize,
    /// Let fp32 GEMMs use TF32 tensor cores.
    #[arg(long)]
    tf32: bool,
    /// Seed of the weights and tokens.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Write the results (all step times, device, memory) as JSON to this file.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Format of the table on stdout: table, markdown, csv, json.
    #[arg(long, default_value = "table")]
    format: Format,
    /// Device memory from the driver's stream-ordered `pool` or the PyTorch-like `caching`
    /// allocator (default: caching with --memory-snapshot, else pool).
    #[arg(long)]
    allocator: Option<String>,
    /// Trace kernels, CUDA API calls, memcpys, memsets (CUPTI) and NVTX ranges into this SQLite
    /// file in the Nsight Systems export schema, with the run's metadata. With several
    /// configurations, each gets its own file (the configuration in the name).
    #[arg(long, value_name = "FILE.sqlite")]
    trace: Option<PathBuf>,
    /// Record the caching allocator's memory history over the last timed step and write it as a
    /// PyTorch memory snapshot (pickle; `.gz` compresses) to this file.
    #[arg(long, value_name = "FILE")]
    memory_snapshot: Option<PathBuf>,
}

#[derive(Args)]
struct PlanArgs {
    /// Model size: small, medium, large, xl, 2.7B.
    #[arg(long, default_value = "small")]
    size: String,
    #[command(flatten)]
    model: ModelArgs,
    #[arg(long, default_value_t = 256)]
    ctx: usize,
    #[arg(long, default_value_t = 4)]
    batch: usize,
    #[arg(long, default_value = "train")]
    mode: String,
    #[arg(long, default_value = "fp32")]
    precision: String,
    /// table, markdown, csv, json.
    #[arg(long, default_value = "table")]
    format: Format,
}

#[derive(Args)]
struct NumericsArgs {
    #[arg(long, default_value = "small")]
    size: String,
    #[command(flatten)]
    model: ModelArgs,
    #[arg(long, default_value_t = 256)]
    ctx: usize,
    #[arg(long, default_value_t = 4)]
    batch: usize,
    #[arg(long, default_value = "fp32")]
    precision: String,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Write every gradient (default: embedding, first and last block, final norm, head).
    #[arg(long)]
    all_grads: bool,
    /// Folder for weights.safetensors and outputs.safetensors.
    #[arg(long)]
    out: PathBuf,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(a) => run_bench(a),
        Command::Plan(a) => run_plan(a),
        Command::Numerics(a) => run_numerics(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => analyze::cli::exit_on_error(&*e),
    }
}

fn parse_all<T: std::str::FromStr<Err = collect::Error>>(
    items: &[String],
) -> anyhow::Result<Vec<T>> {
    items.iter().map(|s| Ok(s.parse::<T>()?)).collect()
}

fn run_plan(a: PlanArgs) -> anyhow::Result<()> {
    let model = a.model.models(std::slice::from_ref(&a.size))?.remove(0);
    let run = RunConfig {
        model,
        ctx: a.ctx,
        batch: a.batch,
        mode: a.mode.parse()?,
        precision: a.precision.parse()?,
        tf32: false,
    };
    run.validate()?;
    let doc = plan::plan(&run).document();
    Ok(print(&render::render_to_string(a.format, &doc))?)
}

fn run_bench(a: BenchArgs) -> anyhow::Result<()> {
    let allocator = match (a.allocator.as_deref(), &a.memory_snapshot) {
        (None, Some(_)) => AllocatorKind::Caching,
        (None, None) => AllocatorKind::Pool,
        (Some(s), snap) => {
            let kind: AllocatorKind = s.parse()?;
            if kind != AllocatorKind::Caching && snap.is_some() {
                anyhow::bail!("--memory-snapshot records the caching allocator: use --allocator caching or leave it out");
            }
            kind
        }
    };
    let opts = BenchOptions {
        models: a.model.models(&a.size)?,
        ctxs: a.ctx,
        modes: parse_all::<Mode>(&a.mode)?,
        precisions: parse_all::<Precision>(&a.precision)?,
        batch: a.batch,
        warmup: a.warmup,
        steps: a.steps,
        tf32: a.tf32,
        seed: a.seed,
        allocator,
        recording: Recording {
            trace: a.trace,
            memory_snapshot: a.memory_snapshot,
        },
    };
    if opts.steps == 0 {
        anyhow::bail!("--steps must be at least 1");
    }
    for run in opts.grid() {
        run.validate()?;
    }
    let rt = Runtime::open_with(opts.allocator)?;
    eprintln!("{}", report::device_line(&rt.gpu.info));
    let rows = bench::run_grid(&rt, &opts, |line| eprintln!("{line}"))?;
    if let Some(path) = &a.out {
        report::write_results_file(path, &rows, &rt.gpu.info, &opts)?;
    }
    let table = report::document(&rows, &rt.gpu.info);
    Ok(print(&render::render_to_string(a.format, &table))?)
}

fn run_numerics(a: NumericsArgs) -> anyhow::Result<()> {
    let model = a.model.models(std::slice::from_ref(&a.size))?.remove(0);
    let run = RunConfig {
        model,
        ctx: a.ctx,
        batch: a.batch,
        mode: Mode::ForwardBackward,
        precision: a.precision.parse()?,
        tf32: false,
    };
    run.validate()?;
    let rt = Runtime::open()?;
    let grads = if a.all_grads {
        numerics::Grads::All
    } else {
        numerics::Grads::FirstLast
    };
    let summary = numerics::dump(&rt, &run, a.seed, &a.out, grads)?;
    Ok(print(&summary.describe(&run, &a.out))?)
}
