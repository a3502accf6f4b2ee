//! `analyze`: Nsight Systems exports, PyTorch CUDA memory snapshots and Kineto traces, read into
//! one model and turned into exact tables, plots and report sections.
//!
//! Inputs are read by [`formats`] into a [`model::Trace`] (GPU work) or a
//! [`memory::Snapshot`] (allocations). Analyses are pure functions over those; [`render`] shows
//! their tables as text, CSV, JSON or Markdown.
//!
//! The analyses, reports and plots are the default feature `analysis`. Without it the crate is
//! what `collect` uses to write its files and print its tables: [`formats`] (readers and writers
//! side by side), the models, [`render`], [`atomic_file`] and [`cli`].

pub mod atomic_file;
pub mod cli;
#[cfg(feature = "analysis")]
pub mod compare;
pub mod error;
pub mod formats;
#[cfg(feature = "analysis")]
pub mod kernel_class;
#[cfg(feature = "analysis")]
pub mod kernel_label;
#[cfg(feature = "analysis")]
pub mod kernel_name;
pub mod memory;
pub mod model;
#[cfg(feature = "analysis")]
pub mod phases;
#[cfg(feature = "analysis")]
pub mod plot;
#[cfg(feature = "analysis")]
pub mod profile;
pub mod render;
#[cfg(feature = "analysis")]
pub mod report;
#[cfg(feature = "analysis")]
pub mod stats;

pub use error::{Error, Result};
pub use model::Trace;
