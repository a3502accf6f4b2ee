//! `analyze`: Nsight Systems exports, PyTorch CUDA memory snapshots and Kineto traces, read into
//! one model and turned into exact tables, plots and report sections.
//!
//! Inputs are read by [`formats`] into a [`model::Trace`] (GPU work) or a
//! [`memory::Snapshot`] (allocations). Analyses are pure functions over those; [`render`] shows
//! their tables as text, CSV, JSON or Markdown.

pub mod atomic_file;
pub mod cli;
pub mod compare;
pub mod error;
pub mod formats;
pub mod kernel_class;
pub mod kernel_label;
pub mod kernel_name;
pub mod memory;
pub mod model;
pub mod phases;
pub mod plot;
pub mod profile;
pub mod render;
pub mod report;
pub mod stats;

pub use error::{Error, Result};
pub use model::Trace;
