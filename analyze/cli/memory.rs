//! `analyze memory`: peaks, top allocations, categories and plots from PyTorch memory snapshots.

use analyze::cli::parse_whole;
use std::path::PathBuf;

use analyze::memory::categories::Rules;
use analyze::memory::charts::{write_charts, write_module_charts};
use analyze::memory::summary::{self, snapshot_label, Analysis, MemoryOptions, MemoryReport};
use analyze::memory::tables;
use analyze::render::plot::ImageFormat;
use anyhow::bail;

use crate::output::{OutputArgs, OutputFormat};
use crate::Outcome;

const LONG_ABOUT: &str = "\
Read `torch.cuda.memory._dump_snapshot` pickles (plain or .gz, PyTorch 2.1 to 2.11, and the
older bare list of segments) and report memory the way the caching allocator counts it.

One file: the peak report. Peak allocated and reserved bytes and when they happen, the forward
peak, what was allocated before recording began, the largest allocations live at the peak (size,
stream, category, top user frame, short stack), the category breakdown at the peak, and a
memory_viz-like summary of the allocator's segments.

Several files: a peak table, one row per snapshot (model, ctx, mode and precision read from names
like memsnap_medium_ctx256_train_fp32.pickle.gz, or given with --label), the forward peak beside
the full-step peak, a table of categories at the peak, and baseline against autocast (fp32 against
bf16/fp16 runs of the same model, ctx and mode) with deltas. --compare pairs the files explicitly
instead: BASELINE OTHER [BASELINE OTHER ...].

Categories come from rules over the stack frames (parameters, gradients, optimizer state,
attention scores, softmax, FFN, norm, embedding, logits & loss, autocast copies, workspace, ...).
--categories FILE adds rules, tried first, in TOML:

    [[rule]]
    category = \"rope\"              # an existing or a new category
    frame = 'model\\.py:14[78] '    # regex over one frame: \"file:line name\"
    op = \"^(mul_Tensor|cat)$\"      # regex over ATen operators on the stack
    phase = \"forward\"              # forward, backward or optimizer

or JSON ({\"rule\": [{...}]} or a bare list).

--plot DIR writes, per snapshot, <name>.timeline.png/.svg (allocated and reserved bytes over
the window, forward/backward/optimizer phases shaded where frames reveal them, the peak marked)
and <name>.categories.png/.svg (a stacked bar of the categories at the peak), plus
categories.png/.svg over all files when there are several. --png or --svg alone limit the
formats (and write into the current folder when --plot is not given).

--by module groups the memory by where in the model each block was made: per snapshot, the --top
modules by bytes live at the peak (one more row sums the rest), with their allocations over the
recorded window. A block's module is the innermost frame of its stack that names a module path
(collect's snapshots) or the model's code, as file.py:line function: the user's own code or an
installed package other than PyTorch and the libraries that wrap or implement layers (accelerate,
peft, bitsandbytes, einops, triton, flash_attn, ...). Blocks whose stack names neither are in
fixed rows: (allocated before recording), (no stack recorded), (no module frame). Bytes at the
peak add up to the peak allocated bytes exactly. With --plot, <name>.modules.png/.svg draws the
same rows as bars. --format json prints every module: {label, peak_allocated_bytes, modules:
[{name, bytes_at_peak, blocks_at_peak, allocations, bytes_allocated}]}.

--format json prints the full per-snapshot results (peak_allocated_bytes, peak_reserved_bytes,
peak_time_us, top_allocations [{size, frame, category, ...}], ...).";

#[derive(clap::Args)]
#[command(after_long_help = LONG_ABOUT)]
pub struct Args {
    /// Memory snapshot pickles (.pickle or .pickle.gz).
    #[arg(required = true, value_name = "FILES")]
    pub files: Vec<PathBuf>,
    /// Names of the files in tables and plots, one per file in order (default: file names).
    #[arg(long, short = 'l', value_name = "LABEL")]
    pub label: Vec<String>,
    /// Write timeline and category plots into this folder.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
    /// Write PNG plots (only PNG, unless --svg too).
    #[arg(long)]
    pub png: bool,
    /// Write SVG plots (only SVG, unless --png too).
    #[arg(long)]
    pub svg: bool,
    /// Extra category rules (TOML or JSON), tried before the built-in ones.
    #[arg(long, value_name = "FILE")]
    pub categories: Option<PathBuf>,
    /// How many allocations to list at the peak (with --by module: how many modules).
    #[arg(long, default_value_t = 10, value_name = "N", value_parser = parse_whole::<usize>)]
    pub top: usize,
    /// Group the memory by `module`: bytes live at the peak and allocations over the window per
    /// module or model function named by each block's stack.
    #[arg(long, value_name = "VIEW", value_parser = ["module"], conflicts_with = "compare")]
    pub by: Option<String>,
    /// Compare the files in pairs: BASELINE OTHER [BASELINE OTHER ...].
    #[arg(long)]
    pub compare: bool,
    /// CUDA device to analyse (default: the one with the highest peak); a device a snapshot
    /// does not have is an error naming the ones it has.
    #[arg(long, value_name = "N", value_parser = parse_whole::<i64>)]
    pub device: Option<i64>,
    /// Output format: table, csv, json or markdown; parquet writes the files of --output as
    /// Parquet (stdout gets text tables).
    #[arg(long, short = 'f', default_value = "table")]
    pub format: OutputFormat,
    #[command(flatten)]
    pub output: OutputArgs,
}

pub fn run(args: Args) -> anyhow::Result<Outcome> {
    if !args.label.is_empty() && args.label.len() != args.files.len() {
        bail!(
            "{} labels for {} files: give one --label per file, in order",
            args.label.len(),
            args.files.len()
        );
    }
    if args.compare && args.files.len() & 1 == 1 {
        bail!(
            "--compare takes files in pairs (BASELINE OTHER ...), got {}",
            args.files.len()
        );
    }
    let rules = Rules::load(args.categories.as_deref())?;
    args.output.check(args.format)?;
    let mut analyses: Vec<Analysis> = Vec::with_capacity(args.files.len());
    for (i, path) in args.files.iter().enumerate() {
        let snap = analyze::formats::load_snapshot(path)?;
        if let Some(device) = args.device {
            summary::check_device(&snap, device, path)?;
        }
        let opts = MemoryOptions {
            top: args.top,
            device: args.device,
            label: args
                .label
                .get(i)
                .cloned()
                .unwrap_or_else(|| snapshot_label(path)),
        };
        analyses.push(summary::analyze(&snap, &rules, &opts));
    }

    let formats: Vec<ImageFormat> = match (args.png, args.svg) {
        (true, false) => vec![ImageFormat::Png],
        (false, true) => vec![ImageFormat::Svg],
        _ => vec![ImageFormat::Png, ImageFormat::Svg],
    };
    let plot_dir = match (&args.plot, args.png || args.svg) {
        (Some(d), _) => Some(d.clone()),
        (None, true) => Some(PathBuf::from(".")),
        (None, false) => None,
    };
    let by_module = args.by.is_some();
    if let Some(dir) = &plot_dir {
        let mut written = write_charts(dir, &analyses, &formats)?;
        if by_module {
            let reports: Vec<&MemoryReport> = analyses.iter().map(|a| &a.report).collect();
            written.extend(write_module_charts(dir, &reports, args.top, &formats)?);
        }
        for p in written {
            args.output.note(&format!("wrote {}", p.display()));
        }
    }

    let reports: Vec<MemoryReport> = analyses.into_iter().map(|a| a.report).collect();
    let doc = if by_module {
        tables::modules_document(&reports, args.top)
    } else {
        tables::document(&reports, args.compare)
    };
    args.output.emit(args.format, &doc, &doc)?;
    Ok(Outcome::Success)
}
