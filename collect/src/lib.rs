//! `collect`: the CS336 `BasicsTransformerLM` on an NVIDIA GPU through cudarc (forward, backward,
//! AdamW; fp32 or autocast-style bf16), the benchmark harness that times it with NVTX ranges, and
//! a GPU-free plan of its parameters, FLOPs and memory.

pub mod atomic_file;
pub mod bench;
pub mod blas;
pub mod config;
pub mod device;
pub mod error;
pub mod kernels;
pub mod model;
pub mod numerics;
pub mod ops;
pub mod params;
pub mod plan;
pub mod ranges;
pub mod reference;
pub mod safetensors;

pub use error::{Error, Result};
