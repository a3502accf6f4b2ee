//! `analyze profile`: per-phase kernel time, GEMM fraction, top kernels and softmax vs matmul.

use analyze::cli::parse_whole;
use std::path::PathBuf;

use analyze::profile::ranges::Attribution;
use analyze::profile::{self, Profile, ProfileOptions, DEFAULT_STEPS};
use analyze::render::plot::{file_stem, ImageFormat};
use analyze::render::{Cell, Document, Format};
use analyze::run_name::run_stem;
use regex::Regex;

use crate::output::{OutputArgs, OutputFormat};
use crate::Outcome;

const ATTRIBUTION_HELP: &str = "\
How kernels are attributed to NVTX ranges. A kernel belongs to a range when the CUDA call that \
launched it (matched by correlation id) starts inside the range.
  process (default): the launch call may be on any thread of the range's process.
  thread: the launch call must be on the range's own thread (Nsight Systems' rule, as in \
nvtx_kern_sum and nvtx_gpu_proj_sum).
Process is the default because PyTorch pushes `backward` on the main thread while autograd \
launches the backward kernels from a thread of its own: under the thread rule `backward` gets \
only the dozen kernels the main thread launched.";

/// Per-phase kernel time, GEMM fraction, top kernels and softmax vs matmul inside attention.
#[derive(clap::Args)]
#[command(
    after_long_help = "Per phase (NVTX ranges `forward`, `backward`, `optimizer` by default) over the \
measured steps (ranges `step_N`): steps, wall time and GPU-projected time per step, kernel time, \
GEMM fraction, the kernel with the most time (share, calls per step) and the top non-GEMM \
kernels, time by kernel class; then the same for the measured steps as a whole and the whole \
trace, and inside attention the kernel time of the QK matmul, softmax and V matmul ranges with \
the softmax/matmul ratio beside the FLOP ratio 5/(4*head_dim).\n\n\
Warm-up iterations whose phase ranges lie outside any step range are left out. Without step \
ranges every phase range counts as one step.\n\n\
Then where GPU time goes (compute, communication, memcpy, memset, CUDA graphs, idle) per phase, \
figures per device and process when the trace holds several (the slowest rank named), and the \
longest idle gaps with the CUDA call the host was in.\n\n\
Several files, or a folder of them, are one run of one file per rank (per-rank nsys exports or \
Kineto traces): ranks from the files' own records, else their names (`rank3`, `_3.`), else their \
order; every rank put on one timeline by the clock origin each file records, checked against the \
ends of the collectives; a rank table and the straggler over all of them."
)]
pub struct Args {
    /// An Nsight Systems export (.sqlite, .sqlite.gz) or report (.nsys-rep), or a Kineto trace;
    /// several, or a folder, for one file per rank of one run.
    #[arg(required = true, num_args = 1..)]
    pub files: Vec<PathBuf>,
    #[command(flatten)]
    pub profile: ProfileArgs,
    /// Only the GPU work of this device (and the host activity of the processes that ran work
    /// on it).
    #[arg(long, value_name = "N", value_parser = parse_whole::<u32>)]
    pub device: Option<u32>,
    /// Only the GPU work and host activity of this process (its pid).
    #[arg(long, value_name = "PID", value_parser = parse_whole::<u32>)]
    pub process: Option<u32>,
    /// Also break the kernel time of the measured steps down by PyTorch operator (`op`): the
    /// innermost operator call that launched each kernel (Kineto's `cpu_op` events, or the NVTX
    /// ranges of `torch.autograd.profiler.emit_nvtx`), with calls, shapes, FLOPs, bytes and
    /// where each operator stands under the GPU's roofs.
    #[arg(long, value_name = "VIEW", value_parser = ["op"])]
    pub by: Option<String>,
    /// The compute roof in TFLOP/s, in place of the table's figures for the trace's GPU (every
    /// element type): for `--by op`'s roofline and the steps' model FLOP utilisation.
    #[arg(long, value_name = "TFLOPS", value_parser = parse_positive)]
    pub peak_tflops: Option<f64>,
    /// The memory roof in TB/s for `--by op`, in place of the table's figure.
    #[arg(long, value_name = "TBPS", requires = "by", value_parser = parse_positive)]
    pub peak_tbps: Option<f64>,
    /// With `--by op`, write the roofline chart (one point per operator, sized by its GPU
    /// time) into this folder as <trace>.roofline.png and .svg.
    #[arg(long, value_name = "DIR", requires = "by")]
    pub plot: Option<PathBuf>,
    /// Output format: table, csv, json or markdown; parquet writes the files of --output as
    /// Parquet (stdout gets text tables).
    #[arg(long, short = 'f', default_value = "table")]
    pub format: OutputFormat,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// How a trace is profiled: the options `profile` and `report` share, which `report` applies to
/// every trace it reads.
#[derive(clap::Args)]
pub struct ProfileArgs {
    #[command(flatten)]
    pub attribution: AttributionArgs,
    /// Names of the QK matmul, softmax and V matmul ranges inside attention, comma-separated.
    #[arg(
        long,
        value_name = "QK,SOFTMAX,V",
        value_delimiter = ',',
        num_args = 1,
        default_value = "attention_matmul_QK,attention_softmax,attention_matmul_V"
    )]
    pub attention_ranges: Vec<String>,
    /// Attention head dimension, for the FLOP ratio 5/(4*head_dim) (default: from the run
    /// metadata, or in `report` from the model size).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub head_dim: Option<u32>,
    /// Non-GEMM kernels to list per phase.
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = parse_whole::<usize>)]
    pub top: usize,
    /// The FLOPs one measured step of the model needs on one GPU (e.g. 6 x parameters x tokens
    /// for training), for its model FLOP utilisation (default: from the run metadata of a
    /// `collect` trace, or with `--by op` the operators' count).
    #[arg(long, value_name = "FLOPS", value_parser = parse_positive)]
    pub model_flops_per_step: Option<f64>,
}

/// Which ranges are the steps and phases, and how work is attributed to them: the options
/// `profile`, `report` and `export` share.
#[derive(clap::Args)]
pub struct AttributionArgs {
    #[arg(long, default_value = "process", value_parser = parse_attribution, long_help = ATTRIBUTION_HELP)]
    pub attribution: Attribution,
    /// Kernel-class rules (TOML or JSON, by extension) tried before the built-in ones.
    #[arg(long, value_name = "FILE")]
    pub classes: Option<PathBuf>,
    /// Regular expression naming the measured step ranges, tried ignoring case when it matches
    /// nothing as written. Left at its default, PyTorch profiler steps (`ProfilerStep#N`) are
    /// used when no range is named `step_N`.
    #[arg(long, value_name = "REGEX", default_value = DEFAULT_STEPS, value_parser = parse_regex)]
    pub steps: Regex,
    /// NVTX range names to report as phases, comma-separated: matched exactly, else ignoring
    /// case; a name that matches nothing is noted with the nearest range name.
    #[arg(
        long,
        value_name = "NAMES",
        value_delimiter = ',',
        default_value = "forward,backward,optimizer"
    )]
    pub phases: Vec<String>,
    /// One more phase, named in full (for names that hold commas); may be repeated.
    #[arg(long, value_name = "NAME")]
    pub phase: Vec<String>,
}

impl AttributionArgs {
    /// The library's profile options (the others at their defaults), and the kernel-class rule
    /// file when one is given.
    pub fn into_options(self) -> (ProfileOptions, Option<PathBuf>) {
        let phases: Vec<String> = self
            .phases
            .into_iter()
            .map(|p| p.trim().to_owned())
            .filter(|p| !p.is_empty())
            .chain(self.phase)
            .collect();
        let opts = ProfileOptions {
            attribution: self.attribution,
            steps: self.steps,
            phases,
            ..ProfileOptions::default()
        };
        (opts, self.classes)
    }
}

impl ProfileArgs {
    /// The library's profile options, and the kernel-class rule file when one is given.
    pub fn into_options(self) -> anyhow::Result<(ProfileOptions, Option<PathBuf>)> {
        let attention: [String; 3] =
            self.attention_ranges.try_into().map_err(|v: Vec<String>| {
                anyhow::anyhow!(
                    "--attention-ranges takes three names (QK,SOFTMAX,V), got {}",
                    v.len()
                )
            })?;
        let (mut opts, classes) = self.attribution.into_options();
        opts.attention = attention;
        opts.head_dim = self.head_dim;
        opts.top = self.top;
        opts.model_flops_per_step = self.model_flops_per_step;
        Ok((opts, classes))
    }
}

fn parse_attribution(s: &str) -> Result<Attribution, String> {
    s.parse()
}

fn parse_positive(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(v),
        _ => Err(format!("`{s}` is not a positive number")),
    }
}

fn parse_regex(s: &str) -> Result<Regex, String> {
    Regex::new(s).map_err(|e| format!("not a regular expression: {e}"))
}

/// `doc` with every readable kernel name (`Top kernel`, `Kernel`) replaced by the demangled name
/// it stands for, matched within its row's phase in order.
fn whole_names(doc: &Document, profile: &Profile) -> Document {
    let mut names: Vec<(&str, &str, &str)> = Vec::new();
    for p in profile
        .phases
        .iter()
        .chain(profile.step.iter())
        .chain(std::iter::once(&profile.whole_trace))
    {
        for k in p.top_kernel.iter().chain(&p.top_non_gemm) {
            names.push((p.name.as_str(), k.display_name.as_str(), k.name.as_str()));
        }
    }
    let mut whole = doc.clone();
    for section in &mut whole.sections {
        let t = &mut section.table;
        let phase = t.columns.iter().position(|c| c == "Phase");
        let kernel = t
            .columns
            .iter()
            .position(|c| c == "Top kernel" || c == "Kernel");
        let (Some(phase), Some(kernel)) = (phase, kernel) else {
            continue;
        };
        let mut unused = names.clone();
        for row in &mut t.rows {
            let (Cell::Text(p), Cell::Text(shown)) = (&row[phase], &row[kernel]) else {
                continue;
            };
            if let Some(i) = unused.iter().position(|(ph, d, _)| ph == p && d == shown) {
                row[kernel] = Cell::text(unused.remove(i).2);
            }
        }
    }
    whole
}

pub fn run(args: Args) -> anyhow::Result<Outcome> {
    let (mut opts, classes) = args.profile.into_options()?;
    opts.device = args.device;
    opts.process = args.process;
    opts.operators = args.by.is_some();
    opts.peak_tflops = args.peak_tflops;
    opts.peak_tbps = args.peak_tbps;
    let classifier = profile::classifier(classes.as_deref())?;
    args.output.check(args.format)?;
    let result = profile::profile_files(&args.files, &classifier, &opts)?;
    if let (Some(dir), Some(view)) = (&args.plot, &result.by_operator) {
        let stem = file_stem(run_stem(&result.file), "trace");
        let formats = [ImageFormat::Png, ImageFormat::Svg];
        let written = view.write_roofline(dir, &stem, &formats)?;
        if written.is_empty() {
            args.output
                .note("no roofline chart: no operator with FLOPs and time under known roofs");
        }
        for p in written {
            args.output.note(&format!("wrote {}", p.display()));
        }
    }
    let doc = result.document();
    // The tables show a readable kernel name cut at 80 characters; files and the formats for
    // programs get the demangled name whole.
    let whole = whole_names(&doc, &result);
    let shown = if args.format.stdout() == Format::Table {
        &doc
    } else {
        &whole
    };
    args.output.emit(args.format, shown, &whole)?;
    Ok(Outcome::Success)
}
