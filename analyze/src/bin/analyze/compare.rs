//! `analyze compare A B`: what changed between two GPU traces, and a CI gate on GPU kernel time.

use std::path::{Path, PathBuf};

use analyze::compare::{self, DocumentOptions, Grouping};
use analyze::ingest::{self, Kind};
use analyze::render::{render_to_string, Format};

use crate::Outcome;

/// Kernel names are cut to this many characters in tables unless `--full-names` is given.
const NAME_WIDTH: usize = 100;

/// Slowed kernels named when `--fail-if-slower` trips.
const SLOWED_SHOWN: usize = 10;

#[derive(clap::Args)]
#[command(
    after_help = "Supported pairs: two GPU traces, each an Nsight Systems export (.sqlite, \
                  .sqlite.gz, .nsys-rep) or a PyTorch profiler (Kineto) trace (.json, .json.gz), \
                  in any pairing. Memory snapshots cannot be compared yet.\n\n\
                  Exit status: 0 when the comparison was printed (and the --fail-if-slower check \
                  passed), 1 when B's GPU kernel time is more than PCT% above A's, 2 for unreadable \
                  input or bad usage."
)]
pub struct Args {
    /// The baseline trace.
    pub a: PathBuf,
    /// The trace compared against the baseline.
    pub b: PathBuf,
    /// Output format: table, csv, json or markdown.
    #[arg(long, short = 'f', default_value = "table")]
    pub format: Format,
    /// Exit 1 when B's total GPU kernel time is more than PCT percent above A's, naming the
    /// kernels that got slower.
    #[arg(long, value_name = "PCT", value_parser = parse_pct)]
    pub fail_if_slower: Option<f64>,
    /// Rows per kernel, family and class table (0: all). JSON always has every row.
    #[arg(long, default_value_t = 25)]
    pub limit: usize,
    /// Print whole kernel names instead of cutting them at 100 characters.
    #[arg(long)]
    pub full_names: bool,
}

fn parse_pct(s: &str) -> Result<f64, String> {
    match s.trim_end_matches('%').parse::<f64>() {
        Ok(p) if p.is_finite() && p >= 0.0 => Ok(p),
        _ => Err(format!(
            "`{s}` is not a percentage (expected a number ≥ 0, e.g. 5)"
        )),
    }
}

/// Refuse inputs that are not GPU traces before reading them in full.
fn check_pairable(path: &Path) -> anyhow::Result<()> {
    if ingest::detect(path)? == Kind::TorchSnapshot {
        anyhow::bail!(
            "{}: is a PyTorch memory snapshot; `compare` reads two GPU traces (Nsight Systems \
             exports .sqlite/.sqlite.gz/.nsys-rep or Kineto traces .json/.json.gz, in any \
             pairing); comparing memory snapshots is not supported yet",
            path.display()
        );
    }
    Ok(())
}

pub fn run(args: Args) -> anyhow::Result<Outcome> {
    check_pairable(&args.a)?;
    check_pairable(&args.b)?;
    let a = ingest::load_trace(&args.a)?;
    let b = ingest::load_trace(&args.b)?;
    let comparison = compare::compare(&a, &b, &Grouping::default());

    // CSV and JSON are for programs: every row, whole names.
    let for_people = matches!(args.format, Format::Table | Format::Markdown);
    let opts = DocumentOptions {
        limit: (for_people && args.limit > 0).then_some(args.limit),
        name_width: (for_people && !args.full_names).then_some(NAME_WIDTH),
    };
    let doc = compare::document(&comparison, &opts);
    crate::print(&render_to_string(args.format, &doc))?;

    let Some(threshold) = args.fail_if_slower else {
        return Ok(Outcome::Success);
    };
    let Some(regression) = compare::check_slower(&comparison, threshold) else {
        eprintln!(
            "check passed: GPU kernel time {} (allowed: +{threshold}%)",
            describe_change(comparison.kernel_time_delta_pct())
        );
        return Ok(Outcome::Success);
    };
    let mut msg = format!(
        "check failed: GPU kernel time {} ({} ns -> {} ns), more than the allowed +{threshold}%\n",
        describe_change(regression.change_pct),
        comparison.a.kernel_time.0,
        comparison.b.kernel_time.0,
    );
    msg.push_str("slowed kernels, largest rise first:\n");
    for d in regression.slowed.iter().take(SLOWED_SHOWN) {
        let pct = d
            .time_delta_pct()
            .map_or("new".to_owned(), |p| format!("{p:+.1}%"));
        msg.push_str(&format!(
            "  {:+} ns ({pct})  {}\n",
            d.time_delta().0,
            compare::truncate(&d.name, Some(NAME_WIDTH))
        ));
    }
    if regression.slowed.len() > SLOWED_SHOWN {
        msg.push_str(&format!(
            "  ... and {} more\n",
            regression.slowed.len() - SLOWED_SHOWN
        ));
    }
    eprint!("{msg}");
    Ok(Outcome::CheckFailed)
}

fn describe_change(pct: Option<f64>) -> String {
    match pct {
        Some(p) if p >= 0.0 => format!("rose {p:.2}%"),
        Some(p) => format!("fell {:.2}%", -p),
        None => "went from none to some".to_owned(),
    }
}
