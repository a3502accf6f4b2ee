//! The in-memory models every input becomes, side by side: [`trace`] for GPU work (an Nsight
//! Systems export, a Kineto trace and `collect`'s own trace all load into one [`Trace`]) and
//! [`snapshot`] for allocations (a PyTorch memory snapshot becomes a [`Snapshot`]).
//!
//! The readers and writers in [`crate::formats`] fill and write these types; the analyses read
//! them and never look at the file they came from. Nothing here does I/O or computes a figure;
//! [`bounds`] holds the limits every loaded trace keeps so that its arithmetic cannot overflow.
//! The two share no names, so both are also reachable here directly (`model::Trace`,
//! `model::Snapshot`).

pub mod bounds;
pub mod snapshot;
pub mod snapshot_trace;
pub mod trace;

pub use snapshot::*;
pub use trace::*;
