//! `analyze`: Nsight Systems exports, PyTorch CUDA memory snapshots and Kineto traces, read into
//! one model and turned into exact tables, plots and report sections.
//!
//! The folders follow the pipeline, ingest → one model → analyses → documents → renderers:
//!
//! - [`formats`]: one module per input format, its reader and (for what `collect` writes) its
//!   writer side by side;
//! - [`model`]: what every input becomes, a [`model::Trace`] of GPU work or a
//!   [`model::Snapshot`] of allocations;
//! - `kernels`: kernel names across tools, kernel classes and table labels;
//! - the analyses, pure functions over the model that return data, each with a sibling module
//!   that lays its result out as tables: `stats` (the `nsys stats` reports), `profile` (per-phase
//!   figures of one trace), `memory` (peaks and categories of one snapshot), `compare` (two
//!   traces or two snapshots) and `report` (a write-up over a sweep of runs), with `run_name`
//!   (what a file's name says about its run: model, context length, mode, precision) and
//!   `roofline` (what an operator call costs, the GPUs' peaks, the roofline chart);
//! - `export`: the profile's attributed view of a run (every GPU op with its rank, step, phase
//!   and class; ranges; rank × step figures) as a Parquet dataset partitioned by rank;
//! - [`render`]: the tables as text, CSV, JSON or Markdown, their cell formatters, and the charts.
//!
//! The analyses, reports and plots are the default feature `analysis`. Without it the crate is
//! what `collect` uses to write its files and print its tables: [`formats`] (readers and writers
//! side by side), the models, [`render`], [`atomic_file`] and [`cli`].

pub mod atomic_file;
#[cfg(feature = "analysis")]
pub mod attribution;
pub mod cli;
#[cfg(feature = "analysis")]
pub mod compare;
pub mod error;
#[cfg(feature = "analysis")]
pub mod export;
pub mod fast_hash;
pub mod formats;
#[cfg(feature = "analysis")]
pub mod kernels;
#[cfg(feature = "analysis")]
pub mod memory;
pub mod model;
#[cfg(feature = "analysis")]
pub mod profile;
pub mod progress;
pub mod render;
#[cfg(feature = "analysis")]
pub mod report;
pub mod roofline;
#[cfg(feature = "analysis")]
pub mod run_name;
#[cfg(feature = "analysis")]
pub mod source;
#[cfg(feature = "analysis")]
pub mod stats;

pub use error::{Error, Result};
pub use model::Trace;
