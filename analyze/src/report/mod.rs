//! `report`: the sections of a profiling write-up over a whole sweep of runs.
//!
//! A sweep is many files: Nsight Systems exports or Kineto traces (GPU work), PyTorch memory
//! snapshots, and `collect bench` results. [`inputs::load`] finds and reads them (the only part
//! that touches files), runs the single-file analyses on each ([`crate::profile::profile`] on a
//! trace, [`crate::memory::summary::analyze`] on a snapshot) and labels every run
//! ([`labels`]). [`build`] then lays the results out as sections of tables and charts (pure, in
//! [`sections`] and [`charts`]), and [`output`] writes `report.md`, `report.json` (the same tables,
//! full precision) and the plots.
//!
//! The report does not re-derive any figure: every number is one that `analyze profile` or
//! `analyze memory` prints for the same file, arranged across runs (per-step times, top kernels,
//! GEMM fraction of inference against training, softmax against matmul, peak memory forward
//! against training and fp32 against autocast).

pub mod bench;
pub mod charts;
pub mod inputs;
pub mod labels;
pub mod output;
pub mod sections;

use std::cmp::Ordering;

use serde::Serialize;

use crate::memory::summary::{MemoryReport, RunName};
use crate::model::trace::SourceFormat;
use crate::profile::Profile;
use crate::render::plot::TimelineChart;
use crate::render::Table;

use self::bench::BenchResults;
use self::charts::ChartData;
use self::labels::{model_rank, LabelSource};

/// One GPU trace and its profile.
#[derive(Clone, Debug, Serialize)]
pub struct TraceRun {
    pub label: String,
    pub file: String,
    pub format: SourceFormat,
    pub run: RunName,
    pub label_source: LabelSource,
    /// Fields of `run` guessed from the file name (see [`labels::Labelled::guessed`]).
    pub label_guessed: Vec<&'static str>,
    /// Attention head dimension used for the FLOP ratio (`None`: unknown).
    pub head_dim: Option<u32>,
    pub kernels: usize,
    pub profile: Profile,
}

/// One memory snapshot and its analysis.
#[derive(Clone, Debug, Serialize)]
pub struct SnapshotRun {
    pub label: String,
    pub file: String,
    pub run: RunName,
    pub label_source: LabelSource,
    /// Fields of `run` guessed from the file name (see [`labels::Labelled::guessed`]).
    pub label_guessed: Vec<&'static str>,
    pub memory: MemoryReport,
    /// The allocated-memory timeline, for its plot.
    #[serde(skip)]
    pub timeline: Option<TimelineChart>,
}

/// One `collect bench` results file.
#[derive(Clone, Debug, Serialize)]
pub struct BenchRun {
    pub label: String,
    pub file: String,
    pub results: BenchResults,
}

/// A file that was found in a folder but is not used, and why.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Skipped {
    pub file: String,
    pub reason: String,
}

/// Everything read for a report.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Inputs {
    pub traces: Vec<TraceRun>,
    pub snapshots: Vec<SnapshotRun>,
    pub benches: Vec<BenchRun>,
    pub skipped: Vec<Skipped>,
}

impl Inputs {
    pub fn is_empty(&self) -> bool {
        self.traces.is_empty() && self.snapshots.is_empty() && self.benches.is_empty()
    }
}

/// A piece of a section, in the order it is shown.
#[derive(Clone, Debug)]
pub enum Block {
    /// A paragraph of Markdown text.
    Text(String),
    /// A table with an optional heading and notes below it; a folded one is shown collapsed
    /// (long listings that a write-up rarely needs in full).
    Table {
        title: Option<String>,
        table: Table,
        notes: Vec<String>,
        folded: bool,
    },
    /// A plot written beside the report: its file name and a caption.
    Plot { file: String, caption: String },
    /// Links to plots that are not shown inline.
    Links {
        title: String,
        links: Vec<(String, String)>,
    },
}

/// One section of the report.
#[derive(Clone, Debug)]
pub struct ReportSection {
    /// A stable key for JSON (`time_per_step`).
    pub id: &'static str,
    pub title: String,
    pub blocks: Vec<Block>,
}

/// A chart and the file it is written to (without extension).
#[derive(Clone, Debug)]
pub struct NamedChart {
    pub stem: String,
    pub chart: ChartData,
}

/// The laid-out report: sections and the charts they link.
#[derive(Clone, Debug)]
pub struct Report {
    pub sections: Vec<ReportSection>,
    pub charts: Vec<NamedChart>,
}

/// Lay out a report over `inputs`.
pub fn build(inputs: &Inputs) -> Report {
    sections::build(inputs)
}

/// The order runs are listed in: model size, context length, mode (forward first), precision,
/// then label.
pub fn run_order(a: &RunName, la: &str, b: &RunName, lb: &str) -> Ordering {
    let mode_rank = |m: &Option<String>| match m.as_deref() {
        Some("forward") => 0,
        Some("forward-backward") => 1,
        Some("train") => 2,
        Some(_) => 3,
        None => 4,
    };
    let model = |r: &RunName| {
        (
            r.model.as_deref().map_or(usize::MAX, model_rank),
            r.model.clone(),
        )
    };
    model(a)
        .cmp(&model(b))
        .then_with(|| a.ctx.unwrap_or(u32::MAX).cmp(&b.ctx.unwrap_or(u32::MAX)))
        .then_with(|| mode_rank(&a.mode).cmp(&mode_rank(&b.mode)))
        .then_with(|| a.precision.cmp(&b.precision))
        .then_with(|| la.cmp(lb))
}
