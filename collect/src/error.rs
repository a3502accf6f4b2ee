//! Errors of `collect`: a missing GPU, a failed CUDA, cuBLAS or NVRTC call, a configuration that
//! cannot be built, an output that cannot be written. Each prints as one line; the binary shows it
//! as `error: ...` and exits 2. Running out of device memory is its own variant, so that a sweep
//! can record an `OOM` row and go on.

use std::path::PathBuf;

use cudarc::driver::DriverError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No usable GPU: no driver library, no device, or a driver that refuses to start.
    #[error("no CUDA device found ({reason})")]
    NoDevice { reason: String },

    /// A CUDA library that the GPU path needs is not on the loader path.
    #[error("the CUDA library `{library}` was not found on the loader path")]
    MissingLibrary { library: &'static str },

    #[error("{call} failed: {source}")]
    Cuda {
        call: &'static str,
        #[source]
        source: DriverError,
    },

    /// Device memory ran out while allocating `bytes` (or inside a library call).
    #[error("out of device memory ({what})")]
    OutOfMemory { what: String },

    #[error("{call} failed with cuBLAS status {status}")]
    Cublas { call: &'static str, status: String },

    #[error("NVRTC could not compile kernels/{file}: {log}")]
    Nvrtc { file: &'static str, log: String },

    #[error("kernel `{name}` is not in the compiled kernels")]
    MissingKernel { name: String },

    #[error("invalid configuration: {0}")]
    InvalidConfig(String),

    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// CUPTI could not trace (not loadable, refused a setting, lost buffers).
    #[error("tracing failed: {0}")]
    Trace(String),

    #[error("writing the trace: {0}")]
    TraceDb(#[source] analyze::Error),

    #[error("writing the memory snapshot: {0}")]
    Snapshot(#[source] analyze::Error),
}

impl Error {
    /// Whether this is the device running out of memory (the sweep goes on after it).
    pub fn is_oom(&self) -> bool {
        matches!(self, Error::OutOfMemory { .. })
    }

    /// A driver error from `call`; out-of-memory becomes [`Error::OutOfMemory`].
    pub fn cuda(call: &'static str, source: DriverError) -> Error {
        use cudarc::driver::sys::CUresult;
        if source.0 == CUresult::CUDA_ERROR_OUT_OF_MEMORY {
            Error::OutOfMemory {
                what: call.to_owned(),
            }
        } else {
            Error::Cuda { call, source }
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Attach the name of the driver call to a cudarc result.
pub(crate) trait CudaContext<T> {
    fn during(self, call: &'static str) -> Result<T>;
}

impl<T> CudaContext<T> for std::result::Result<T, DriverError> {
    fn during(self, call: &'static str) -> Result<T> {
        self.map_err(|e| Error::cuda(call, e))
    }
}
