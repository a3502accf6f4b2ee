//! The GPU runtime: the device with its context and one stream ([`device`]), device memory and
//! where it comes from ([`device_memory`], [`caching`]), cuBLAS ([`blas`]), our NVRTC-compiled
//! kernels ([`kernels`]) and their typed launches on a [`ops::Runtime`] ([`ops`]).
//!
//! This is the whole of what the transformer uses to reach the device. It knows nothing of the
//! model: shapes arrive as sizes and buffers as device addresses.

pub mod blas;
pub mod caching;
pub mod device;
pub mod device_memory;
pub mod flash;
pub mod kernels;
pub mod ops;
