//! `collect`: the CS336 `BasicsTransformerLM` on an NVIDIA GPU through cudarc (forward, backward,
//! AdamW; fp32 or autocast-style bf16), the benchmark harness that times it with NVTX ranges, a
//! GPU-free plan of its parameters, FLOPs and memory, and the recorders that write what a profile
//! needs: a PyTorch-format memory snapshot from its own caching allocator and an nsys-schema
//! SQLite trace from CUPTI.
//!
//! The folders are layers, each using only those listed before it:
//! - [`autocast`]: the mixed-precision policy, which format each kind of operation runs in
//!   (pure);
//! - [`nvtx`]: the NVTX ranges every layer opens, and the listeners that hear them;
//! - [`memory`]: the caching allocator (pure: no GPU), its history and frames, and their
//!   conversion to a PyTorch snapshot;
//! - [`gpu`]: device, stream and device memory (the caching allocator's adapter among its
//!   sources), cuBLAS, our NVRTC kernels and their typed launches;
//! - [`trace`]: CUPTI activity tracing and the ranges of a traced run, as nsys-schema records;
//! - [`transformer`]: the model's configuration, parameter layout, forward, backward and
//!   optimizer on the GPU, its CPU reference and its GPU-free plan;
//! - [`bench`](mod@bench): the benchmark harness, its tables and results file, and the numerics
//!   dump;
//! - [`precision`]: the assignment's mixed-precision experiments (accumulation, the ToyModel
//!   under autocast, LayerNorm in fp16 and bf16) on the GPU, or in their CPU emulation.
//!
//! The files a run writes are `analyze`'s formats (`analyze::formats`): this crate builds their
//! records and never spells a format itself.

pub mod autocast;
pub mod bench;
pub mod error;
pub mod gpu;
pub mod memory;
pub mod nvtx;
pub mod precision;
pub mod trace;
pub mod transformer;

pub use error::{Error, Result};
