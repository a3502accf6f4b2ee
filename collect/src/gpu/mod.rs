//! The GPU runtime: the device with its context and streams ([`device`]), device memory and
//! where it comes from ([`device_memory`], [`caching`]), cuBLAS and cuBLASLt ([`blas`]), our NVRTC-compiled
//! kernels ([`kernels`]) and their typed launches on a [`ops::Runtime`] ([`ops`]).
//!
//! This is the whole of what the transformer uses to reach the device. It knows nothing of the
//! model: shapes arrive as sizes and buffers as device addresses.

pub mod blas;
mod blas_lt;
pub mod caching;
pub mod device;
pub mod device_memory;
pub mod flash;
pub mod kernels;
pub mod ops;
