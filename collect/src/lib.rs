//! `collect`: the CS336 `BasicsTransformerLM` on an NVIDIA GPU through cudarc (forward, backward,
//! AdamW; fp32 or autocast-style bf16), the benchmark harness that times it with NVTX ranges, a
//! GPU-free plan of its parameters, FLOPs and memory, and the recorders that write what a profile
//! needs: a PyTorch-format memory snapshot from its own caching allocator and an nsys-schema
//! SQLite trace from CUPTI.

pub mod bench;
pub mod blas;
pub mod caching_allocator;
pub mod caching_device;
pub mod config;
pub mod cupti;
pub mod demangle;
pub mod device;
pub mod error;
pub mod kernels;
pub mod memory_frames;
pub mod memory_history;
pub mod memory_snapshot;
pub mod model;
pub mod numerics;
pub mod ops;
pub mod params;
pub mod plan;
pub mod ranges;
pub mod reference;
pub mod safetensors;
pub mod trace_ranges;
pub mod trace_session;

pub use error::{Error, Result};
