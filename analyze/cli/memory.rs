//! `analyze memory`: peaks, top allocations, categories and plots from PyTorch memory snapshots.

use std::path::{Path, PathBuf};

use analyze::memory::categories::{breakdown, Rules};
use analyze::memory::charts::{categories_chart, timeline_chart};
use analyze::memory::mib;
use analyze::memory::summary::{analyze, Analysis, MemoryOptions, MemoryReport};
use analyze::memory::tables::{peak_table, precision_pairs, precision_table, report_document};
use analyze::plot::{write_chart, ImageFormat};
use analyze::render::{self, Cell, Document, Format, Section, Table};
use anyhow::bail;

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
    /// How many allocations to list at the peak.
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub top: usize,
    /// Compare the files in pairs: BASELINE OTHER [BASELINE OTHER ...].
    #[arg(long)]
    pub compare: bool,
    /// CUDA device to analyse (default: the one with the highest peak).
    #[arg(long, value_name = "N")]
    pub device: Option<i64>,
    /// Output format: table, csv, json or markdown.
    #[arg(long, short = 'f', default_value = "table")]
    pub format: Format,
}

fn default_label(path: &Path) -> String {
    let name = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    name.trim_end_matches(".gz")
        .trim_end_matches(".pickle")
        .trim_end_matches(".pkl")
        .to_owned()
}

/// A label made safe for a file name.
fn file_stem(label: &str) -> String {
    let s: String = label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() {
        "snapshot".into()
    } else {
        s
    }
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
    let rules = match &args.categories {
        Some(p) => Rules::with_user_file(p)?,
        None => Rules::builtin(),
    };

    let mut analyses: Vec<Analysis> = Vec::with_capacity(args.files.len());
    for (i, path) in args.files.iter().enumerate() {
        let snap = analyze::formats::load_snapshot(path)?;
        let opts = MemoryOptions {
            top: args.top,
            device: args.device,
            label: args
                .label
                .get(i)
                .cloned()
                .unwrap_or_else(|| default_label(path)),
        };
        analyses.push(analyze(&snap, &rules, &opts));
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
    if let Some(dir) = &plot_dir {
        write_plots(dir, &analyses, &formats)?;
    }

    let reports: Vec<MemoryReport> = analyses.into_iter().map(|a| a.report).collect();
    let doc = if reports.len() == 1 && !args.compare {
        let mut doc = report_document(&reports[0]);
        doc.json = Some(serde_json::to_value(&reports[0])?);
        doc
    } else {
        many_document(&reports, args.compare)?
    };
    analyze::cli::print(&render::render_to_string(args.format, &doc))?;
    Ok(Outcome::Success)
}

fn write_plots(dir: &Path, analyses: &[Analysis], formats: &[ImageFormat]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)
        .map_err(|e| anyhow::anyhow!("{}: cannot create the plot folder: {e}", dir.display()))?;
    let mut written = Vec::new();
    for a in analyses {
        let stem = file_stem(&a.report.label);
        let timeline = timeline_chart(a);
        let cats = categories_chart(&[&a.report]);
        for &f in formats {
            let p = dir.join(format!("{stem}.timeline.{}", f.extension()));
            write_chart(&timeline, &p, f)?;
            written.push(p);
            let p = dir.join(format!("{stem}.categories.{}", f.extension()));
            write_chart(&cats, &p, f)?;
            written.push(p);
        }
    }
    if analyses.len() > 1 {
        let reports: Vec<&MemoryReport> = analyses.iter().map(|a| &a.report).collect();
        let chart = categories_chart(&reports);
        for &f in formats {
            let p = dir.join(format!("categories.{}", f.extension()));
            write_chart(&chart, &p, f)?;
            written.push(p);
        }
    }
    for p in written {
        eprintln!("wrote {}", p.display());
    }
    Ok(())
}

/// Categories at the peak, one row per snapshot, one column per category (MiB).
fn categories_table(reports: &[MemoryReport]) -> Table {
    // Columns in the categories' display order: the order of a breakdown of all of them.
    let names: Vec<String> = breakdown(reports.iter().flat_map(|r| {
        r.categories_at_peak
            .iter()
            .map(|c| (c.bytes, c.category.as_str()))
    }))
    .into_iter()
    .map(|c| c.category)
    .collect();
    let mut columns = vec!["run".to_owned()];
    columns.extend(names.iter().map(|n| format!("{n} MiB")));
    let mut t = Table::new(columns);
    for r in reports {
        let mut row = vec![Cell::text(&r.label)];
        for n in &names {
            row.push(
                r.categories_at_peak
                    .iter()
                    .find(|c| &c.category == n)
                    .map_or(Cell::Float(0.0, 2), |c| Cell::Float(mib(c.bytes), 2)),
            );
        }
        t.push(row);
    }
    t
}

fn many_document(reports: &[MemoryReport], compare: bool) -> anyhow::Result<Document> {
    let pairs: Vec<(usize, usize)> = if compare {
        (0..reports.len() / 2).map(|i| (2 * i, 2 * i + 1)).collect()
    } else {
        precision_pairs(reports)
    };
    let mut sections = vec![
        Section {
            title: Some("Peak memory per snapshot".into()),
            table: peak_table(reports),
            notes: vec![
                "forward peak: highest allocated bytes in forward phases; step peak: the whole recorded step (train runs)".into(),
            ],
        },
        Section {
            title: Some("Categories at the peak".into()),
            table: categories_table(reports),
            notes: Vec::new(),
        },
    ];
    let comparison = precision_table(reports, &pairs);
    if !pairs.is_empty() {
        sections.push(Section {
            title: Some(if compare {
                "Baseline against compared run".into()
            } else {
                "Baseline (fp32) against autocast".into()
            }),
            table: comparison.clone(),
            notes: vec![
                "Δ = compared - baseline; negative means the compared run needs less memory".into(),
            ],
        });
    }
    let json = serde_json::json!({
        "snapshots": reports,
        "peak_table": peak_table(reports).to_json(),
        "categories_table": categories_table(reports).to_json(),
        "comparisons": comparison.to_json(),
    });
    Ok(Document {
        sections,
        json: Some(json),
    })
}
