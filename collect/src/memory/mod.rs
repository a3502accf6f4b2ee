//! Memory recording, with no GPU in it: the PyTorch-like caching allocator (over any
//! [`caching_allocator::Backend`]; the CUDA one is [`crate::gpu::caching`]), the history it records
//! ([`history`]: events, interned frames and stacks, phase annotations), the frames the model and
//! the benchmark push ([`frames`]), and the conversion of the allocator's state to the snapshot
//! model that `analyze::formats::torch_snapshot` writes ([`snapshot`]).
//!
//! Only [`snapshot`] knows the file format's conventions; the allocator speaks the snapshot's
//! vocabulary (actions, block states, frames, stack ids) and nothing else of it.

pub mod caching_allocator;
pub mod frames;
pub mod history;
pub mod snapshot;
