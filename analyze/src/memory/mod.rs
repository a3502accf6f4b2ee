//! Analyses of PyTorch CUDA memory snapshots, pure functions over the snapshot model
//! ([`crate::model::snapshot`]), which [`crate::formats::torch_snapshot`] reads:
//!
//! - [`timeline`] replays the trace into allocated and reserved bytes over time, counted as the
//!   caching allocator counts them, including what was allocated before recording began;
//! - [`phases`] finds forward, backward and optimizer spans from the frames;
//! - [`categories`] sorts allocations into kinds (parameters, gradients, activations…) by rules,
//!   and [`inference`] adds what the trace's lifetimes and sizes tell ([`autocast`]: weight
//!   copies in stacks without C++ frames);
//! - [`peak`] reports the peak and the allocations live at it;
//! - [`modules`] groups the bytes at the peak and the window's allocations by the module or
//!   model function their stacks name;
//! - [`summary`] gathers one snapshot's results ([`summary::MemoryReport`]); [`tables`] lays them
//!   out as tables, one snapshot or many side by side;
//! - [`charts`] draws the timeline, the category bar and the module bars through
//!   [`crate::render::plot`].
//!
//! Nothing here reads files; [`charts::write_charts`] writes the plot files.

pub(crate) mod address_map;
pub mod autocast;
pub mod categories;
pub mod charts;
pub mod inference;
pub mod modules;
pub mod peak;
pub mod phases;
pub mod summary;
pub mod tables;
pub mod timeline;
