//! `analyze`: the command line. Parses arguments into the library's option structs, runs the
//! library and maps the result to an exit code: 0 on success, 1 for a failed check
//! (`compare --fail-if-slower`), 2 for bad input or usage.

mod compare;
mod export;
mod memory;
mod output;
mod profile;
mod progress;
mod report;
mod stats;
// One `error:` line for arguments clap refuses, shared with `collect`.
#[path = "../../collect/cli/usage.rs"]
mod usage;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

/// Exact tables, plots and reports from Nsight Systems exports, PyTorch memory snapshots and
/// PyTorch profiler (Kineto) traces.
#[derive(Parser)]
// The doc comment above is this binary's `about`: a bare `about` would print the package's
// description, which is the same for both binaries.
#[command(name = "analyze", version, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print `nsys stats` reports (same rows, columns and numbers as Nsight Systems 2025.3).
    #[command(allow_negative_numbers = true)]
    Stats(stats::Args),
    /// Compare two GPU traces (per-kernel, class and phase deltas; --fail-if-slower for CI) or two
    /// memory snapshots (peak and category deltas).
    #[command(allow_negative_numbers = true)]
    Compare(compare::Args),
    /// Per-phase kernel time, GEMM fraction, top kernels and softmax vs matmul inside attention.
    #[command(allow_negative_numbers = true)]
    Profile(profile::Args),
    /// Peaks, timelines, top allocations, categories and plots from PyTorch memory snapshots.
    #[command(allow_negative_numbers = true)]
    Memory(memory::Args),
    /// Report sections over a whole sweep: times, top kernels, GEMM fraction, softmax vs matmul,
    /// peak memory, plots; into DIR/report.md and DIR/report.json.
    #[command(allow_negative_numbers = true)]
    Report(report::Args),
    /// Every GPU op (with its rank, step, phase and class), range and rank × step of a run as a
    /// Parquet dataset partitioned by rank, for DuckDB, Spark or pandas.
    #[command(allow_negative_numbers = true)]
    Export(export::Args),
}

impl Command {
    /// Whether `-q/--quiet` was given: no progress bars, no notes.
    fn quiet(&self) -> bool {
        match self {
            Command::Stats(a) => a.output.quiet,
            Command::Compare(a) => a.output.quiet,
            Command::Profile(a) => a.output.quiet,
            Command::Memory(a) => a.output.quiet,
            Command::Report(a) => a.quiet,
            Command::Export(a) => a.quiet,
        }
    }
}

/// What a subcommand asks `main` to do once it has finished.
pub enum Outcome {
    Success,
    /// A check the user asked for failed (exit 1).
    CheckFailed,
}

fn main() -> ExitCode {
    analyze::formats::limits::return_freed_memory();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage::exit_on_parse_error(e, &Cli::command()),
    };
    progress::exit_cleanly_on_signals();
    if !cli.command.quiet() {
        progress::install();
    }
    let result = match cli.command {
        Command::Stats(args) => stats::run(args),
        Command::Compare(args) => compare::run(args),
        Command::Profile(args) => profile::run(args),
        Command::Memory(args) => memory::run(args),
        Command::Report(args) => report::run(args),
        Command::Export(args) => export::run(args),
    };
    progress::clear();
    match result {
        Ok(Outcome::Success) => ExitCode::SUCCESS,
        Ok(Outcome::CheckFailed) => ExitCode::from(1),
        Err(e) => analyze::cli::exit_on_error(&*e),
    }
}
