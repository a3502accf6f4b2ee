//! `collect`: runs the CS336 transformer on an NVIDIA GPU and records what a profile needs.

pub mod caching_allocator;
pub mod cupti;
pub mod memory_history;
pub mod pickle_writer;
pub mod run_metadata;
pub mod snapshot_writer;
pub mod trace_db;
