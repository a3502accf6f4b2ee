//! `analyze report PATHS... -o DIR`: the sections of a profiling write-up over a whole sweep.

use std::path::PathBuf;

use analyze::memory::categories::Rules;
use analyze::profile;
use analyze::report::inputs::{self, LoadOptions, NOT_RECOGNISED};
use analyze::report::output::{self, OutputOptions};
use analyze::report::Skipped;

use crate::profile::ProfileArgs;
use crate::Outcome;

const LONG_ABOUT: &str = "\
Read every supported file named, and every file under the folders named: Nsight Systems exports
(.sqlite, .sqlite.gz, .nsys-rep), PyTorch profiler (Kineto) traces (.json, .json.gz), PyTorch
memory snapshots (.pickle, .pickle.gz) and `collect bench` results (.json). Files are recognised
by their content; other files in the folders (CSV, notes, ...) are skipped and listed.

Writes into DIR: report.md (Markdown, plots linked), report.json (the same tables with full
precision, and every run's complete profile or memory report) and the plots as PNG:
kernel_classes.png, kernel_classes_by_pass.png, gemm_fraction.png, memory_categories.png and one
memory_timeline_<run>.png per snapshot.

Sections: runs; forward, backward and step time per run; top kernel per pass; top non-GEMM kernel;
GEMM fraction of inference against training (model x context matrix); softmax against matmul in
attention with the FLOP ratio 5/(4*head_dim); where GPU time goes; peak memory (forward against
training step, fp32 against autocast); benchmark results (OOM where a configuration ran out of
memory); skipped files.

Every trace is profiled as `analyze profile` profiles it, with the same options: --steps,
--phases, --phase, --attention-ranges, --head-dim, --attribution, --classes and --top apply to
every run (a run whose ranges have other names than the defaults needs them, as it would with
`profile`).

Runs are labelled from the run metadata a file carries (the RUN_METADATA table that
`collect --trace` writes: model, ctx, batch, mode, precision), else from the file name:
  ..._{size}_ctx{N}_{fwd|forward|train}_{fp32|bf16}...   e.g. torch_small_ctx128_fwd_fp32.sqlite
Sizes: small, medium, large, xl, and billions as 2.7B, 2_7B, 2p7b; context: ctxN, contextN,
seqN, seq_len_N, or a number right after the size; batch: bsN, batchN. Precision: a data type
(fp32, float32, tf32, bf16, fp16) wins; else amp, mixed or autocast mean bf16 unless negated
(without_mixed, no_amp, noamp, amp_off, full_precision mean fp32). Fields read from a file name
are guesses, and the runs table says so (`label from`). --label FILE=LABEL wins when given
(LABEL is read with the same rules for the fields).";

#[derive(clap::Args)]
#[command(after_long_help = LONG_ABOUT)]
pub struct Args {
    /// Files or folders (searched recursively).
    #[arg(required = true, value_name = "PATHS")]
    pub paths: Vec<PathBuf>,
    /// Folder to write report.md, report.json and the plots into (made if need be).
    #[arg(long, short = 'o', value_name = "DIR")]
    pub out: PathBuf,
    /// Name a run: FILE=LABEL (may be repeated). FILE is the path as given or a file name.
    #[arg(long, short = 'l', value_name = "FILE=LABEL", value_parser = parse_label)]
    pub label: Vec<(PathBuf, String)>,
    /// How every trace is profiled: the options of `analyze profile`.
    #[command(flatten)]
    pub profile: ProfileArgs,
    /// Memory category rules (TOML or JSON) tried before the built-in ones.
    #[arg(long, value_name = "FILE")]
    pub categories: Option<PathBuf>,
    /// Do not write plots.
    #[arg(long)]
    pub no_plots: bool,
    /// Write SVG copies of the plots as well.
    #[arg(long)]
    pub svg: bool,
    /// Print nothing on stderr but errors: no progress, no notes.
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// List every skipped file on stderr, with why (by default one line counts them; the report
    /// lists them all either way).
    #[arg(long, short = 'v')]
    pub verbose: bool,
}

/// What stderr says of the skipped files: each with its reason when `verbose`, else one line
/// that counts them.
fn skipped_lines(skipped: &[Skipped], verbose: bool) -> Vec<String> {
    if skipped.is_empty() {
        return Vec::new();
    }
    if verbose {
        return skipped
            .iter()
            .map(|s| format!("skipped {} ({})", s.file, s.reason))
            .collect();
    }
    let unrecognised = skipped
        .iter()
        .filter(|s| s.reason == NOT_RECOGNISED)
        .count();
    let files = |n: usize| format!("{n} file{}", if n == 1 { "" } else { "s" });
    let what = if unrecognised == skipped.len() {
        format!(
            "{} that {} not profiler output",
            files(unrecognised),
            if unrecognised == 1 { "is" } else { "are" }
        )
    } else if unrecognised == 0 {
        files(skipped.len())
    } else {
        format!(
            "{} ({unrecognised} not profiler output, {} unreadable or read another way)",
            files(skipped.len()),
            skipped.len() - unrecognised
        )
    };
    vec![format!("skipped {what} (--verbose lists them)")]
}

fn parse_label(s: &str) -> Result<(PathBuf, String), String> {
    match s.rsplit_once('=') {
        Some((f, l)) if !f.is_empty() && !l.trim().is_empty() => {
            Ok((PathBuf::from(f), l.trim().to_owned()))
        }
        _ => Err(format!(
            "`{s}` is not FILE=LABEL (e.g. run3.sqlite=small_ctx128_train_fp32)"
        )),
    }
}

pub fn run(args: Args) -> anyhow::Result<Outcome> {
    let (profile_opts, classes) = args.profile.into_options()?;
    let classifier = profile::classifier(classes.as_deref())?;
    // A rule file is read now, so that a bad one is an error before any input is read; the
    // built-in rules are built when the first snapshot comes, if one does.
    let rules = std::cell::OnceCell::new();
    if let Some(path) = args.categories.as_deref() {
        let _ = rules.set(Rules::load(Some(path))?);
    }
    let opts = LoadOptions {
        classifier: &classifier,
        profile: profile_opts,
        rules,
        memory_top: 10,
        labels: args.label,
    };
    let quiet = args.quiet;
    let mut progress = |line: &str| {
        if !quiet {
            crate::progress::println(line);
        }
    };
    let loaded = inputs::load(&args.paths, &opts, &mut progress)?;
    if !quiet {
        for line in skipped_lines(&loaded.skipped, args.verbose) {
            crate::progress::println(&line);
        }
    }
    if loaded.is_empty() {
        anyhow::bail!(
            "no GPU trace, memory snapshot or bench results among the inputs ({} other files skipped)",
            loaded.skipped.len()
        );
    }
    let report = analyze::report::build(&loaded);
    let out_opts = OutputOptions {
        plots: !args.no_plots,
        svg: args.svg,
    };
    let written = output::write(&args.out, &report, &loaded, out_opts, &mut progress)?;
    if !quiet {
        crate::progress::println(&format!(
            "wrote {} files into {}: report.md, report.json{}",
            written.len(),
            args.out.display(),
            if out_opts.plots { " and plots" } else { "" }
        ));
    }
    Ok(Outcome::Success)
}
