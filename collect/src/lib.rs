//! `collect`: the CS336 `BasicsTransformerLM` on an NVIDIA GPU through cudarc (forward, backward,
//! AdamW; fp32 or autocast-style bf16), the benchmark harness that times it with NVTX ranges, and
//! a GPU-free plan of its parameters, FLOPs and memory.

pub mod config;
pub mod device;
pub mod error;
pub mod kernels;
pub mod params;
pub mod ranges;

pub use error::{Error, Result};
