//! Matrix products through cuBLAS, in row-major terms.
//!
//! Every tensor of the model is row-major; cuBLAS is column-major. A row-major `C = op(A) op(B)`
//! is the column-major `Cᵀ = op(B)ᵀ op(A)ᵀ`, and a row-major matrix's memory read column-major
//! is its transpose, so each call swaps the operands and keeps the transpose flags. Operands are
//! fp32 or bf16 (both the same); the output is fp32 or bf16; accumulation is always fp32. fp32
//! products run in true FP32 (`CUBLAS_COMPUTE_32F`, PyTorch's default) unless TF32 is switched
//! on. cuBLAS gets its workspace from our
//! [`DeviceMemory`](crate::gpu::device_memory::DeviceMemory), so that every byte on the device is
//! counted. No kernels of ours here.
//!
//! With operator ranges on ([`Blas::set_operator_ranges`]), each product runs inside an NVTX
//! range labelled as PyTorch's `emit_nvtx(record_shapes=True)` labels the operator it would have
//! called (`aten::mm, sizes = [[m, k], [k, n]]`; `aten::addmm` when it adds to an output,
//! `aten::bmm` for a batch), the product's logical shapes with the transposes applied, so that a
//! trace's kernels are tied to an operator whose cost follows from its shapes.

use std::cell::Cell;
use std::ffi::c_void;

use cudarc::cublas::sys as cb;

use crate::error::{Error, Result};
use crate::gpu::blas_lt::Lt;
use crate::gpu::device::Gpu;
use crate::gpu::device_memory::{Buffer, DType};
use crate::nvtx;

/// cuBLAS workspace (PyTorch gives cuBLAS 32 MiB on Hopper).
pub const WORKSPACE_BYTES: usize = 32 << 20;

/// A matrix operand: a device address and its element type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mat {
    pub ptr: u64,
    pub dtype: DType,
}

impl Mat {
    pub fn new(ptr: u64, dtype: DType) -> Mat {
        Mat { ptr, dtype }
    }
}

/// Shape of one product `C[m, n] = alpha * op(A) op(B) + beta * C`, row-major, where `op(A)` is
/// `[m, k]` (A stored `[k, m]` when `ta`) and `op(B)` is `[k, n]` (B stored `[n, k]` when `tb`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Gemm {
    pub ta: bool,
    pub tb: bool,
    pub m: usize,
    pub n: usize,
    pub k: usize,
}

/// cuBLAS and cuBLASLt handles on the main stream, sharing one workspace. Fields drop in
/// declaration order: the cuBLASLt handle before the workspace it uses.
pub struct Blas {
    lt: Lt,
    handle: cb::cublasHandle_t,
    _workspace: Buffer,
    tf32: Cell<bool>,
    sm_target: Cell<u32>,
    operator_ranges: Cell<bool>,
}

fn check(call: &'static str, status: cb::cublasStatus_t) -> Result<()> {
    match status {
        cb::cublasStatus_t::CUBLAS_STATUS_SUCCESS => Ok(()),
        cb::cublasStatus_t::CUBLAS_STATUS_ALLOC_FAILED => Err(Error::OutOfMemory {
            what: call.to_owned(),
        }),
        other => Err(Error::Cublas {
            call,
            status: format!("{other:?}"),
        }),
    }
}

fn data_type(d: DType) -> cb::cudaDataType {
    match d {
        DType::F32 => cb::cudaDataType::CUDA_R_32F,
        DType::Bf16 => cb::cudaDataType::CUDA_R_16BF,
        DType::I32 => cb::cudaDataType::CUDA_R_32I,
    }
}

fn dim(x: usize) -> Result<i32> {
    i32::try_from(x).map_err(|_| Error::InvalidConfig(format!("matrix dimension {x} exceeds 2^31")))
}

impl Blas {
    pub fn new(gpu: &Gpu) -> Result<Blas> {
        // SAFETY: probes the loader only.
        if !unsafe { cb::is_culib_present() } {
            return Err(Error::MissingLibrary {
                library: "libcublas",
            });
        }
        let workspace = gpu.memory.alloc(DType::F32, WORKSPACE_BYTES / 4)?;
        let lt = Lt::new(
            gpu.stream.cu_stream() as u64,
            workspace.ptr(),
            WORKSPACE_BYTES,
        )?;
        let mut handle: cb::cublasHandle_t = std::ptr::null_mut();
        // SAFETY: creates a handle in the current (our) context; the stream and workspace outlive
        // it (the workspace is owned by the returned value, the stream by the Gpu).
        unsafe {
            check("cublasCreate", cb::cublasCreate_v2(&mut handle))?;
            let blas = Blas {
                lt,
                handle,
                _workspace: workspace,
                tf32: Cell::new(false),
                sm_target: Cell::new(0),
                operator_ranges: Cell::new(false),
            };
            check(
                "cublasSetStream",
                cb::cublasSetStream_v2(handle, gpu.stream.cu_stream() as cb::cudaStream_t),
            )?;
            check(
                "cublasSetWorkspace",
                cb::cublasSetWorkspace_v2(
                    handle,
                    blas._workspace.ptr() as *mut c_void,
                    WORKSPACE_BYTES,
                ),
            )?;
            Ok(blas)
        }
    }

    /// Let fp32 products use TF32 tensor cores.
    pub fn set_tf32(&self, on: bool) {
        self.tf32.set(on);
    }

    /// Plan the following products for `sms` SMs (0: the whole device), leaving the others to
    /// work running beside them on another stream.
    pub fn set_sm_count_target(&self, sms: u32) -> Result<()> {
        self.sm_target.set(sms);
        let n = i32::try_from(sms).unwrap_or(i32::MAX);
        // SAFETY: the handle is live; the call only sets a field of it.
        check("cublasSetSmCountTarget", unsafe {
            cb::cublasSetSmCountTarget(self.handle, n)
        })
    }

    /// The SMs products are planned for now (0: the whole device).
    pub fn sm_count_target(&self) -> u32 {
        self.sm_target.get()
    }

    /// Open an operator range around every following product (see the module's notes): they
    /// cut a step captured as CUDA graphs at every product, so they are for traces.
    pub fn set_operator_ranges(&self, on: bool) {
        self.operator_ranges.set(on);
    }

    /// The operator range of a product, when operator ranges are on.
    fn operator_range(&self, g: Gemm, adds: bool, batch: usize) -> Option<nvtx::Range> {
        self.operator_ranges
            .get()
            .then(|| nvtx::range(&operator_label(g, adds, batch)))
    }

    fn compute_type(&self, operands: DType) -> cb::cublasComputeType_t {
        if operands == DType::F32 && self.tf32.get() {
            cb::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32
        } else {
            cb::cublasComputeType_t::CUBLAS_COMPUTE_32F
        }
    }

    /// `C = alpha * op(A) op(B) + beta * C`, row-major, contiguous operands.
    pub fn gemm(&self, g: Gemm, alpha: f32, a: Mat, b: Mat, beta: f32, c: Mat) -> Result<()> {
        self.gemm_batched(g, alpha, a, 0, b, 0, beta, c, 0, 1)
    }

    /// `D = op(A) op(B) + C` into a buffer other than `C` (fp32 both), through cuBLASLt: the
    /// residual add without copying the residual first.
    pub fn gemm_add(&self, g: Gemm, a: Mat, b: Mat, c: Mat, d: Mat) -> Result<()> {
        let _op = self.operator_range(g, true, 1);
        let (tf32, sms) = (self.tf32.get(), self.sm_target.get());
        self.lt.gemm(g, a, b, 1.0, c, d, tf32, sms, true)
    }

    /// `C = op(A) op(B)` into fp32 `C`, through cuBLASLt with the best algorithm that needs no
    /// workspace. With a workspace, cuBLAS splits a product of few output tiles and a long `k`
    /// (a weight's gradient over the tokens) across the SMs and zeroes the reduction's counters
    /// with a memset first, and the product then waits for the SMs to clear.
    pub fn gemm_no_workspace(&self, g: Gemm, a: Mat, b: Mat, c: Mat) -> Result<()> {
        let _op = self.operator_range(g, false, 1);
        let (tf32, sms) = (self.tf32.get(), self.sm_target.get());
        self.lt.gemm(g, a, b, 0.0, c, c, tf32, sms, false)
    }

    /// `batch` products at strides (in elements) `sa`, `sb`, `sc`.
    #[allow(clippy::too_many_arguments)]
    pub fn gemm_batched(
        &self,
        g: Gemm,
        alpha: f32,
        a: Mat,
        sa: usize,
        b: Mat,
        sb: usize,
        beta: f32,
        c: Mat,
        sc: usize,
        batch: usize,
    ) -> Result<()> {
        debug_assert_eq!(a.dtype, b.dtype, "cuBLAS needs both operands of one type");
        let _op = self.operator_range(g, beta != 0.0, batch);
        let op = |t: bool| {
            if t {
                cb::cublasOperation_t::CUBLAS_OP_T
            } else {
                cb::cublasOperation_t::CUBLAS_OP_N
            }
        };
        // Row-major leading dimensions of the stored matrices.
        let lda = if g.ta { g.m } else { g.k };
        let ldb = if g.tb { g.k } else { g.n };
        let (m, n, k) = (dim(g.m)?, dim(g.n)?, dim(g.k)?);
        let compute = self.compute_type(a.dtype);
        let algo = cb::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT;
        // SAFETY: the caller passes live device matrices of the stated shapes and types; alpha
        // and beta are fp32 as the fp32 compute types require.
        unsafe {
            if batch == 1 {
                check(
                    "cublasGemmEx",
                    cb::cublasGemmEx(
                        self.handle,
                        op(g.tb),
                        op(g.ta),
                        n,
                        m,
                        k,
                        (&alpha as *const f32).cast(),
                        b.ptr as *const c_void,
                        data_type(b.dtype),
                        dim(ldb)?,
                        a.ptr as *const c_void,
                        data_type(a.dtype),
                        dim(lda)?,
                        (&beta as *const f32).cast(),
                        c.ptr as *mut c_void,
                        data_type(c.dtype),
                        n,
                        compute,
                        algo,
                    ),
                )
            } else {
                check(
                    "cublasGemmStridedBatchedEx",
                    cb::cublasGemmStridedBatchedEx(
                        self.handle,
                        op(g.tb),
                        op(g.ta),
                        n,
                        m,
                        k,
                        (&alpha as *const f32).cast(),
                        b.ptr as *const c_void,
                        data_type(b.dtype),
                        dim(ldb)?,
                        sb as i64,
                        a.ptr as *const c_void,
                        data_type(a.dtype),
                        dim(lda)?,
                        sa as i64,
                        (&beta as *const f32).cast(),
                        c.ptr as *mut c_void,
                        data_type(c.dtype),
                        n,
                        sc as i64,
                        dim(batch)?,
                        compute,
                        algo,
                    ),
                )
            }
        }
    }
}

/// The `emit_nvtx` label of a product of `batch` matrices: the operands' logical shapes
/// (`op(A)` `[m, k]`, `op(B)` `[k, n]`), after the output's when the product adds to it.
fn operator_label(g: Gemm, adds: bool, batch: usize) -> String {
    let (m, n, k) = (g.m, g.n, g.k);
    match (batch > 1, adds) {
        (false, false) => format!("aten::mm, sizes = [[{m}, {k}], [{k}, {n}]]"),
        (false, true) => format!("aten::addmm, sizes = [[{m}, {n}], [{m}, {k}], [{k}, {n}]]"),
        (true, false) => format!("aten::bmm, sizes = [[{batch}, {m}, {k}], [{batch}, {k}, {n}]]"),
        (true, true) => format!(
            "aten::baddbmm, sizes = [[{batch}, {m}, {n}], [{batch}, {m}, {k}], [{batch}, {k}, {n}]]"
        ),
    }
}

impl Drop for Blas {
    fn drop(&mut self) {
        // SAFETY: the handle was created in `new` and is destroyed once.
        unsafe {
            cb::cublasDestroy_v2(self.handle);
        }
    }
}
