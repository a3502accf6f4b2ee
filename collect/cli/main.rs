//! `collect`: the command line. Parses arguments into the library's option structs, runs the
//! library and maps the result to an exit code: 0 on success, 1 for a plan that does not fit
//! the `--device-memory` it was given, 2 for bad usage, no GPU, or any other error (one
//! `error: ...` line on stderr).

mod usage;

use analyze::cli::parse_whole;
use std::path::PathBuf;
use std::process::ExitCode;

use analyze::cli::print;
use analyze::render::cells::format_bytes;
use analyze::render::{self, Format};
use clap::{Args, CommandFactory, Parser, Subcommand};

use collect::bench::attention::{self as attention_bench, AttentionBenchOptions, Preset};
use collect::bench::{self, numerics, report, BenchOptions, Recording};
use collect::gpu::device_memory::AllocatorKind;
use collect::gpu::ops::Runtime;
use collect::transformer::config::{
    Attention, Checkpoint, Mode, ModelConfig, Precision, RunConfig,
};
use collect::transformer::{plan, OptimizerSchedule, StepOptions};

/// The CS336 transformer on an NVIDIA GPU: benchmark it, plan its cost, dump its numerics.
#[derive(Parser)]
// The doc comment above is this binary's `about`: a bare `about` would print the package's
// description, which is the same for both binaries.
#[command(name = "collect", version, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Time steps of the model over a grid of sizes, contexts, modes and precisions.
    #[command(allow_negative_numbers = true)]
    Bench(BenchArgs),
    /// Parameters, FLOPs per step and memory of one configuration (no GPU needed).
    #[command(allow_negative_numbers = true)]
    Plan(PlanArgs),
    /// One forward and backward on fixed weights, written as safetensors for a PyTorch check.
    #[command(allow_negative_numbers = true)]
    Numerics(NumericsArgs),
    /// Time the attention core alone (naive and FlashAttention-2) over head widths, sequence
    /// lengths and precisions: forward, backward, memory before the backward, peak.
    ///
    /// The default grid is the CS336 `pytorch_attention` grid as the PyTorch reference measured
    /// it, so rows compare: batch 8, no head dimension (heads 1), d 16,32,64,128, seq
    /// 256,1024,4096,8192,16384, fp32, with a causal mask, 100 forward then 100 backward passes
    /// after warm-up, each synchronised. A preset sets the whole grid; flags beside it override
    /// it. A phase stops after --max-seconds of passes once 5 have run.
    #[command(allow_negative_numbers = true)]
    Attention(AttentionArgs),
    /// The assignment's mixed-precision experiments: accumulation, the ToyModel under autocast,
    /// LayerNorm in fp16 and bf16.
    #[command(allow_negative_numbers = true)]
    Precision(PrecisionArgs),
}

/// `--format` of the commands that print a table of what they ran.
#[derive(Args)]
struct TableFormatArg {
    /// Format of the table on stdout: table, markdown, csv, json.
    #[arg(long, default_value = "table")]
    format: Format,
}

/// `--checkpoint`, shared by the commands that run or plan a training step.
#[derive(Args)]
struct CheckpointArg {
    /// Activation checkpointing: on (every block keeps only its input, the residual stream, and
    /// runs its forward again just before its backward), off, or auto (on exactly when the plan
    /// without it does not fit the device's memory).
    #[arg(
        long = "checkpoint",
        value_name = "auto|on|off",
        default_value = "auto"
    )]
    value: String,
}

impl CheckpointArg {
    fn choice(&self) -> anyhow::Result<Checkpoint> {
        Ok(self.value.parse()?)
    }
}

/// Model dimensions: a named size or all four custom dimensions.
#[derive(Args)]
struct ModelArgs {
    /// Custom width (with --d-ff, --layers, --heads, instead of --size).
    #[arg(long, requires_all = ["d_ff", "layers", "heads"], conflicts_with = "size", value_parser = parse_whole::<usize>)]
    d_model: Option<usize>,
    #[arg(long, requires = "d_model", value_parser = parse_whole::<usize>)]
    d_ff: Option<usize>,
    #[arg(long, requires = "d_model", value_parser = parse_whole::<usize>)]
    layers: Option<usize>,
    #[arg(long, requires = "d_model", value_parser = parse_whole::<usize>)]
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
    #[arg(long, value_delimiter = ',', default_value = "256", value_parser = parse_whole::<usize>)]
    ctx: Vec<usize>,
    #[arg(long, default_value_t = 4, value_parser = parse_whole::<usize>)]
    batch: usize,
    /// forward, forward-backward, train (comma-separated list).
    #[arg(long, value_delimiter = ',', default_value = "forward")]
    mode: Vec<String>,
    /// fp32, bf16 (comma-separated list).
    #[arg(long, value_delimiter = ',', default_value = "fp32")]
    precision: Vec<String>,
    /// Attention core: naive (scores materialised, the reference's) or flash (FlashAttention-2)
    /// (comma-separated list).
    #[arg(long, value_delimiter = ',', default_value = "naive")]
    attention: Vec<String>,
    /// Untimed steps before the measurement.
    #[arg(long, default_value_t = 5, value_parser = parse_whole::<usize>)]
    warmup: usize,
    /// Timed steps.
    #[arg(long, default_value_t = 10, value_parser = parse_whole::<usize>)]
    steps: usize,
    /// Let fp32 GEMMs use TF32 tensor cores.
    #[arg(long)]
    tf32: bool,
    #[command(flatten)]
    checkpoint: CheckpointArg,
    /// Seed of the weights and tokens.
    #[arg(long, default_value_t = 0, value_parser = parse_whole::<u64>)]
    seed: u64,
    /// Write the results (all step times, device, memory) as JSON to this file.
    #[arg(long)]
    out: Option<PathBuf>,
    #[command(flatten)]
    table: TableFormatArg,
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
    /// Run every GEMM inside an NVTX range labelled as PyTorch's `emit_nvtx(record_shapes=True)`
    /// labels its operator (`aten::mm, sizes = [[m, k], [k, n]]`), for `analyze profile --by op`
    /// and its roofline. Cuts --cuda-graph's graphs at every GEMM.
    #[arg(long)]
    operator_ranges: bool,
    /// When train steps run AdamW: `overlapped` (each block's update on a second stream as soon
    /// as its gradients are final, beside the rest of the backward, writing the bf16 weight copy
    /// too) or `after-backward` (one update over every parameter after the backward, and the
    /// bf16 copy cast at the next forward).
    #[arg(long, default_value = "overlapped")]
    optimizer: String,
    /// With the overlapped optimizer: SMs left to it while the backward's GEMMs run beside its
    /// updates (cuBLAS plans them for the others); 0 lets the GEMMs plan for every SM. Default:
    /// 16 in bf16 runs, 0 in fp32 runs.
    #[arg(long, value_parser = parse_whole::<u32>)]
    optimizer_sms: Option<u32>,
    /// Replay each step from CUDA graphs captured at the second step (the NVTX ranges and the
    /// AdamW updates stay the host's, as in an eager step); uses the caching allocator.
    #[arg(long)]
    cuda_graph: bool,
}

/// One configuration of the model, as `plan` and `numerics` take it.
#[derive(Args)]
struct RunArgs {
    /// Model size: small, medium, large, xl, 2.7B.
    #[arg(long, default_value = "small")]
    size: String,
    #[command(flatten)]
    model: ModelArgs,
    #[arg(long, default_value_t = 256, value_parser = parse_whole::<usize>)]
    ctx: usize,
    #[arg(long, default_value_t = 4, value_parser = parse_whole::<usize>)]
    batch: usize,
    #[arg(long, default_value = "fp32")]
    precision: String,
    /// naive or flash.
    #[arg(long, default_value = "naive")]
    attention: String,
    #[command(flatten)]
    checkpoint: CheckpointArg,
}

impl RunArgs {
    fn model(&self) -> anyhow::Result<ModelConfig> {
        Ok(self
            .model
            .models(std::slice::from_ref(&self.size))?
            .remove(0))
    }

    /// The configuration of `model` (from [`RunArgs::model`]) in `mode`, without checkpointing,
    /// which the caller decides.
    fn config(&self, model: ModelConfig, mode: Mode) -> anyhow::Result<RunConfig> {
        Ok(RunConfig {
            model,
            ctx: self.ctx,
            batch: self.batch,
            mode,
            precision: self.precision.parse()?,
            tf32: false,
            attention: self.attention.parse()?,
            checkpoint: false,
        })
    }
}

#[derive(Args)]
struct PlanArgs {
    #[command(flatten)]
    run: RunArgs,
    #[arg(long, default_value = "train")]
    mode: String,
    /// The device memory `--checkpoint auto` weighs the plan against, and that the plan must
    /// fit: exit status 1 when its peak does not. Bytes, or with a unit (`80GiB`, `141GB`,
    /// `512MiB`) [default: an H200's 139.8 GiB for `auto`, and no check].
    #[arg(long)]
    device_memory: Option<String>,
    /// table, markdown, csv, json.
    #[arg(long, default_value = "table")]
    format: Format,
}

#[derive(Args)]
struct NumericsArgs {
    #[command(flatten)]
    run: RunArgs,
    #[arg(long, default_value_t = 0, value_parser = parse_whole::<u64>)]
    seed: u64,
    /// Write every gradient (default: embedding, first and last block, final norm, head).
    #[arg(long)]
    all_grads: bool,
    /// Folder for weights.safetensors and outputs.safetensors.
    #[arg(long)]
    out: PathBuf,
}

#[derive(Args)]
struct PrecisionArgs {
    #[command(subcommand)]
    experiment: PrecisionExperiment,
    /// table, markdown, csv, json (json: the rows of the results file).
    #[arg(long, default_value = "table", global = true)]
    format: Format,
    /// Compute with the CPU emulation of the kernels instead of the GPU.
    #[arg(long, global = true)]
    cpu: bool,
}

#[derive(Subcommand)]
enum PrecisionExperiment {
    /// 0.01 added 1000 times in fp32, fp16 and bf16 accumulators and values, beside PyTorch.
    Accumulate,
    /// The ToyModel's tensor dtypes under fp16 and bf16 autocast, beside PyTorch's.
    Toy,
    /// LayerNorm's mean, variance and output in fp16, bf16 and fp32, against fp64.
    Layernorm,
    /// All three.
    All,
}

/// The grid and timing of `collect attention` (see its help).
#[derive(Args)]
struct AttentionArgs {
    /// pytorch-attention (the default grid), flash-benchmarking (batch 1, causal, seq 128..65536,
    /// d 16..128, fp32 and bf16) or leaderboard (batch 1, 16 heads, seq 16384, d 64, bf16,
    /// causal).
    #[arg(long)]
    preset: Option<String>,
    /// naive, flash (comma-separated list) [default: naive,flash].
    #[arg(long = "impl", value_delimiter = ',')]
    impls: Option<Vec<String>>,
    /// Head widths (comma-separated list) [default: 16,32,64,128].
    #[arg(long, value_delimiter = ',', value_parser = parse_whole::<usize>)]
    d: Option<Vec<usize>>,
    /// Sequence lengths (comma-separated list) [default: 256,1024,4096,8192,16384].
    #[arg(long, value_delimiter = ',', value_parser = parse_whole::<usize>)]
    seq: Option<Vec<usize>>,
    /// [default: 8]
    #[arg(long, value_parser = parse_whole::<usize>)]
    batch: Option<usize>,
    /// [default: 1, no head dimension]
    #[arg(long, value_parser = parse_whole::<usize>)]
    heads: Option<usize>,
    /// fp32, bf16 (comma-separated list) [default: fp32].
    #[arg(long, value_delimiter = ',')]
    precision: Option<Vec<String>>,
    /// Mask the keys after each query (the default, as the reference rows were measured).
    #[arg(long, overrides_with = "no_causal")]
    causal: bool,
    /// No mask (flash only: the naive softmax kernel is causal).
    #[arg(long)]
    no_causal: bool,
    /// Timed forward passes, then timed backward passes, per configuration [default: 100].
    #[arg(long, value_parser = parse_whole::<usize>)]
    passes: Option<usize>,
    /// Forward and backward passes before the timed ones [default: 5].
    #[arg(long, value_parser = parse_whole::<usize>)]
    warmup: Option<usize>,
    /// Stop a phase after this many seconds of passes, once 5 have run [default: 3].
    #[arg(long)]
    max_seconds: Option<f64>,
    /// Seed of Q, K, V and dO.
    #[arg(long, default_value_t = 0, value_parser = parse_whole::<u64>)]
    seed: u64,
    /// Write the rows as a JSON array to this file.
    #[arg(long)]
    out: Option<PathBuf>,
    #[command(flatten)]
    table: TableFormatArg,
}

impl AttentionArgs {
    fn options(self) -> anyhow::Result<AttentionBenchOptions> {
        let preset = match &self.preset {
            Some(p) => p.parse::<Preset>()?,
            None => Preset::PytorchAttention,
        };
        let mut o = preset.options();
        if let Some(v) = &self.impls {
            o.impls = parse_all::<Attention>(v)?;
        }
        if let Some(v) = &self.precision {
            o.precisions = parse_all::<Precision>(v)?;
        }
        o.ds = self.d.unwrap_or(o.ds);
        o.seqs = self.seq.unwrap_or(o.seqs);
        o.batch = self.batch.unwrap_or(o.batch);
        o.heads = self.heads.unwrap_or(o.heads);
        o.passes = self.passes.unwrap_or(o.passes);
        o.warmup = self.warmup.unwrap_or(o.warmup);
        o.max_seconds = self.max_seconds.unwrap_or(o.max_seconds);
        o.seed = self.seed;
        if self.no_causal {
            o.causal = false;
        }
        o.validate()?;
        Ok(o)
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage::exit_on_parse_error(e, &Cli::command()),
    };
    let done = |r: anyhow::Result<()>| r.map(|()| ExitCode::SUCCESS);
    let result = match cli.command {
        Command::Bench(a) => done(run_bench(a)),
        Command::Plan(a) => run_plan(a),
        Command::Numerics(a) => done(run_numerics(a)),
        Command::Attention(a) => done(run_attention(a)),
        Command::Precision(a) => done(run_precision(a)),
    };
    match result {
        Ok(code) => code,
        Err(e) => analyze::cli::exit_on_error(&*e),
    }
}

fn parse_all<T: std::str::FromStr<Err = collect::Error>>(
    items: &[String],
) -> anyhow::Result<Vec<T>> {
    items.iter().map(|s| Ok(s.parse::<T>()?)).collect()
}

fn run_plan(a: PlanArgs) -> anyhow::Result<ExitCode> {
    // A bad size is the error reported before a bad mode.
    let model = a.run.model()?;
    let run = a.run.config(model, a.mode.parse()?)?;
    run.validate_dimensions()?;
    let named = a
        .device_memory
        .as_deref()
        .map(plan::parse_bytes)
        .transpose()?;
    let capacity = named.unwrap_or(plan::H200_MEMORY);
    let mut p = plan::plan_with(a.run.checkpoint.choice()?, &run, capacity);
    // Only a device the user named is a check: without one, a plan over an H200 is still a plan.
    if let Some(capacity) = named {
        p = p.check_device(capacity);
    }
    print(&render::render_to_string(a.format, &p.document()))?;
    if p.fits_device() == Some(false) {
        eprintln!(
            "does not fit: the peak, {}, is over the {} of --device-memory",
            format_bytes(p.memory.peak),
            format_bytes(capacity)
        );
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

fn run_bench(a: BenchArgs) -> anyhow::Result<()> {
    if a.cuda_graph && a.memory_snapshot.is_some() {
        anyhow::bail!("--memory-snapshot records allocations, which a step replayed from --cuda-graph makes none of: use one of them");
    }
    let allocator = match (a.allocator.as_deref(), &a.memory_snapshot) {
        (None, Some(_)) => AllocatorKind::Caching,
        (None, None) if a.cuda_graph => AllocatorKind::Caching,
        (None, None) => AllocatorKind::Pool,
        (Some(s), snap) => {
            let kind: AllocatorKind = s.parse()?;
            if kind != AllocatorKind::Caching && snap.is_some() {
                anyhow::bail!("--memory-snapshot records the caching allocator: use --allocator caching or leave it out");
            }
            if kind != AllocatorKind::Caching && a.cuda_graph {
                anyhow::bail!("--cuda-graph needs the caching allocator: use --allocator caching or leave it out");
            }
            kind
        }
    };
    let opts = BenchOptions {
        models: a.model.models(&a.size)?,
        ctxs: a.ctx,
        modes: parse_all::<Mode>(&a.mode)?,
        precisions: parse_all::<Precision>(&a.precision)?,
        attentions: parse_all::<Attention>(&a.attention)?,
        batch: a.batch,
        warmup: a.warmup,
        steps: a.steps,
        tf32: a.tf32,
        checkpoint: a.checkpoint.choice()?,
        seed: a.seed,
        allocator,
        recording: Recording {
            trace: a.trace,
            memory_snapshot: a.memory_snapshot,
            operator_ranges: a.operator_ranges,
        },
        step: StepOptions {
            optimizer: a.optimizer.parse::<OptimizerSchedule>()?,
            optimizer_sms: a.optimizer_sms,
            cuda_graph: a.cuda_graph,
        },
    };
    if opts.steps == 0 {
        anyhow::bail!("--steps must be at least 1");
    }
    for run in opts.grid(plan::H200_MEMORY) {
        run.validate_dimensions()?;
    }
    let rt = Runtime::open_with(opts.allocator)?;
    eprintln!("{}", report::device_line(&rt.gpu.info));
    let rows = bench::run_grid(&rt, &opts, |line| eprintln!("{line}"))?;
    if let Some(path) = &a.out {
        report::write_results_file(path, &rows, &rt.gpu.info, &opts)?;
    }
    let table = report::document(&rows, &rt.gpu.info);
    Ok(print(&render::render_to_string(a.table.format, &table))?)
}

fn run_attention(a: AttentionArgs) -> anyhow::Result<()> {
    use std::io::IsTerminal;
    let (out, format) = (a.out.clone(), a.table.format);
    let opts = a.options()?;
    let rt = Runtime::open()?;
    let terminal = std::io::stderr().is_terminal();
    if terminal {
        eprintln!("{}", report::device_line(&rt.gpu.info));
    }
    let rows = attention_bench::run(&rt, &opts, |line| {
        if terminal {
            eprintln!("{line}");
        }
    })?;
    if let Some(path) = &out {
        attention_bench::report::write_rows(path, &rows)?;
    }
    let doc = attention_bench::report::document(&rows, &rt.gpu.info, &opts);
    Ok(print(&render::render_to_string(format, &doc))?)
}

fn run_numerics(a: NumericsArgs) -> anyhow::Result<()> {
    let run = a.run.config(a.run.model()?, Mode::ForwardBackward)?;
    run.validate()?;
    let choice = a.run.checkpoint.choice()?;
    let rt = Runtime::open()?;
    let run = RunConfig {
        checkpoint: plan::checkpoint_on(choice, &run, rt.gpu.info.total_memory),
        ..run
    };
    let grads = if a.all_grads {
        numerics::Grads::All
    } else {
        numerics::Grads::FirstLast
    };
    let summary = numerics::dump(&rt, &run, a.seed, &a.out, grads)?;
    Ok(print(&summary.describe(&run, &a.out))?)
}

fn run_precision(a: PrecisionArgs) -> anyhow::Result<()> {
    use collect::precision::{self as experiments, Engine, Experiment};
    let which = match a.experiment {
        PrecisionExperiment::Accumulate => Experiment::Accumulate,
        PrecisionExperiment::Toy => Experiment::Toy,
        PrecisionExperiment::Layernorm => Experiment::Layernorm,
        PrecisionExperiment::All => Experiment::All,
    };
    let rt = if a.cpu { None } else { Some(Runtime::open()?) };
    let engine = rt.as_ref().map_or(Engine::Cpu, Engine::Gpu);
    let doc = experiments::report::document(&experiments::run(engine, which)?);
    Ok(print(&render::render_to_string(a.format, &doc))?)
}
