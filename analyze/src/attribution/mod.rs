//! Attribution: which NVTX range, step, phase and PyTorch operator claims a piece of GPU work. A
//! range (or an operator call) claims the work whose launch call starts inside it; what that
//! takes is written once here, for every analysis and exporter that attributes work:
//!
//! - [`ranges`]: range geometry, the ranges that hold a time ([`ranges::Pieces`]), and the
//!   attributable ranges enclosing a call on its thread ([`ranges::Enclosure`], `nsys stats`'s
//!   rule);
//! - [`launches`]: the correlation index, the launch call of a kernel by (process,
//!   correlation id), and through it the launch context the caller stored for the call;
//! - [`operators`]: the PyTorch operator call (Kineto's `cpu_op`, `emit_nvtx`'s ranges) that
//!   launched a call, the innermost on its thread, and the top-level call of its chain;
//! - [`bounds`]: times out of the bounds a loaded trace keeps, found as rows stream by.
//!
//! Which ranges are steps and phases, and the instance of each that claims a context, is the
//! profile's plan ([`crate::profile`]); the `nsys stats` attribution of kernels to range labels
//! is [`crate::stats::attribution`].

pub mod bounds;
pub mod launches;
pub mod operators;
pub mod ranges;
