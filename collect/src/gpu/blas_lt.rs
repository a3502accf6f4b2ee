//! Products through cuBLASLt, for what `cublasGemmEx` cannot do: `D = op(A) op(B) + C` with `D`
//! and `C` different buffers. The residual stream needs exactly that: a block's input stays (the
//! backward reads it) and its output is a new tensor, so with `cublasGemmEx` the input is first
//! copied into the output and the product added with beta 1; here the product's epilogue reads
//! the input and writes the sum, and the copy is gone. And products held to algorithms that need
//! no workspace, which `cublasGemmEx` offers only for a whole handle.
//!
//! Row-major in, as [`crate::gpu::blas`]: each call swaps the operands and keeps the transpose
//! flags. `A` and `B` fp32 or bf16 (both the same), `C` and `D` fp32, fp32 accumulation (TF32
//! only when switched on). The descriptors and the heuristic's first algorithm are made once per
//! shape and kept. The workspace is cuBLAS's own (both run on the main stream, one product at a
//! time), so no byte is added to the device's memory.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::c_void;

use cudarc::cublaslt::sys as lt;

use crate::error::{Error, Result};
use crate::gpu::blas::{Gemm, Mat};
use crate::gpu::device_memory::DType;

fn check(call: &'static str, status: lt::cublasStatus_t) -> Result<()> {
    match status {
        lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS => Ok(()),
        lt::cublasStatus_t::CUBLAS_STATUS_ALLOC_FAILED => Err(Error::OutOfMemory {
            what: call.to_owned(),
        }),
        other => Err(Error::Cublas {
            call,
            status: format!("{other:?}"),
        }),
    }
}

fn data_type(d: DType) -> lt::cudaDataType {
    match d {
        DType::F32 => lt::cudaDataType::CUDA_R_32F,
        DType::Bf16 => lt::cudaDataType::CUDA_R_16BF,
        DType::I32 => lt::cudaDataType::CUDA_R_32I,
    }
}

/// What a plan is made for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Key {
    g: Gemm,
    operands: DType,
    tf32: bool,
    sm_target: u32,
    /// Whether the algorithm may use the workspace.
    workspace: bool,
}

/// The descriptors of one shape and the algorithm cuBLASLt's heuristic chose for it.
struct Plan {
    desc: lt::cublasLtMatmulDesc_t,
    a: lt::cublasLtMatrixLayout_t,
    b: lt::cublasLtMatrixLayout_t,
    /// `C` and `D` (the same layout).
    c: lt::cublasLtMatrixLayout_t,
    algo: lt::cublasLtMatmulAlgo_t,
}

impl Drop for Plan {
    fn drop(&mut self) {
        // SAFETY: each descriptor was created once by `Lt::plan` and is destroyed once here.
        unsafe {
            lt::cublasLtMatrixLayoutDestroy(self.c);
            lt::cublasLtMatrixLayoutDestroy(self.b);
            lt::cublasLtMatrixLayoutDestroy(self.a);
            lt::cublasLtMatmulDescDestroy(self.desc);
        }
    }
}

/// A cuBLASLt handle on the main stream, with cuBLAS's workspace.
pub(crate) struct Lt {
    handle: lt::cublasLtHandle_t,
    stream: lt::cudaStream_t,
    workspace: u64,
    workspace_bytes: usize,
    plans: RefCell<HashMap<Key, Plan>>,
}

impl Lt {
    /// A handle for `stream`, sharing the workspace at `workspace` (`workspace_bytes` long),
    /// which must outlive it.
    pub(crate) fn new(stream: u64, workspace: u64, workspace_bytes: usize) -> Result<Lt> {
        // SAFETY: probes the loader only.
        if !unsafe { lt::is_culib_present() } {
            return Err(Error::MissingLibrary {
                library: "libcublasLt",
            });
        }
        let mut handle: lt::cublasLtHandle_t = std::ptr::null_mut();
        // SAFETY: creates a handle; destroyed in Drop.
        check("cublasLtCreate", unsafe { lt::cublasLtCreate(&mut handle) })?;
        Ok(Lt {
            handle,
            stream: stream as lt::cudaStream_t,
            workspace,
            workspace_bytes,
            plans: RefCell::new(HashMap::new()),
        })
    }

    /// `d = op(a) op(b) + beta * c`, row-major, `c` and `d` fp32 and distinct (or the same
    /// buffer). Without `workspace` the algorithm is the heuristic's best of those that need none.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn gemm(
        &self,
        g: Gemm,
        a: Mat,
        b: Mat,
        beta: f32,
        c: Mat,
        d: Mat,
        tf32: bool,
        sm_target: u32,
        workspace: bool,
    ) -> Result<()> {
        debug_assert_eq!(a.dtype, b.dtype, "cuBLASLt needs both operands of one type");
        debug_assert!(c.dtype == DType::F32 && d.dtype == DType::F32);
        let key = Key {
            g,
            operands: a.dtype,
            tf32: tf32 && a.dtype == DType::F32,
            sm_target,
            workspace,
        };
        let mut plans = self.plans.borrow_mut();
        let p = match plans.entry(key) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => e.insert(self.plan(key)?),
        };
        let alpha = 1.0f32;
        let (ws, ws_bytes) = if workspace {
            (self.workspace as *mut c_void, self.workspace_bytes)
        } else {
            (std::ptr::null_mut(), 0)
        };
        // SAFETY: the caller passes live device matrices of the plan's shapes and types; the
        // workspace outlives the handle; alpha and beta are fp32 as the scale type says.
        check("cublasLtMatmul", unsafe {
            lt::cublasLtMatmul(
                self.handle,
                p.desc,
                (&alpha as *const f32).cast(),
                b.ptr as *const c_void,
                p.a,
                a.ptr as *const c_void,
                p.b,
                (&beta as *const f32).cast(),
                c.ptr as *const c_void,
                p.c,
                d.ptr as *mut c_void,
                p.c,
                &p.algo,
                ws,
                ws_bytes,
                self.stream,
            )
        })
    }

    /// The descriptors of `key`'s product in cuBLASLt's column-major terms (the row-major
    /// `C[m, n] = op(A) op(B)` is the column-major `Cᵀ[n, m] = op(B)ᵀ op(A)ᵀ`, B first) and the
    /// heuristic's best algorithm within the workspace (or with none, without `key.workspace`).
    fn plan(&self, key: Key) -> Result<Plan> {
        let g = key.g;
        let compute = if key.tf32 {
            lt::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32
        } else {
            lt::cublasComputeType_t::CUBLAS_COMPUTE_32F
        };
        let op = |t: bool| -> i32 { i32::from(t) }; // CUBLAS_OP_N = 0, CUBLAS_OP_T = 1
        let (m, n, k) = (g.m as u64, g.n as u64, g.k as u64);
        // Row-major leading dimensions of the stored matrices.
        let lda = if g.ta { g.m } else { g.k } as i64;
        let ldb = if g.tb { g.k } else { g.n } as i64;
        let operand = data_type(key.operands);
        let mut plan = Plan {
            desc: std::ptr::null_mut(),
            a: std::ptr::null_mut(),
            b: std::ptr::null_mut(),
            c: std::ptr::null_mut(),
            algo: lt::cublasLtMatmulAlgo_t { data: [0; 8] },
        };
        // SAFETY: every descriptor is created here and owned by `plan`, which destroys what was
        // created if a later call fails; attribute buffers are read during the call.
        unsafe {
            check(
                "cublasLtMatmulDescCreate",
                lt::cublasLtMatmulDescCreate(&mut plan.desc, compute, lt::cudaDataType::CUDA_R_32F),
            )?;
            let set = |attr, value: i32| {
                check(
                    "cublasLtMatmulDescSetAttribute",
                    lt::cublasLtMatmulDescSetAttribute(
                        plan.desc,
                        attr,
                        (&value as *const i32).cast(),
                        std::mem::size_of::<i32>(),
                    ),
                )
            };
            // cuBLASLt's A is our B, its B our A.
            set(
                lt::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA,
                op(g.tb),
            )?;
            set(
                lt::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSB,
                op(g.ta),
            )?;
            if key.sm_target > 0 {
                set(
                    lt::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET,
                    key.sm_target as i32,
                )?;
            }
            // Stored shapes, column-major: our B is [n, k] row-major when transposed.
            let (a_rows, a_cols) = if g.tb { (k, n) } else { (n, k) };
            let (b_rows, b_cols) = if g.ta { (m, k) } else { (k, m) };
            check(
                "cublasLtMatrixLayoutCreate",
                lt::cublasLtMatrixLayoutCreate(&mut plan.a, operand, a_rows, a_cols, ldb),
            )?;
            check(
                "cublasLtMatrixLayoutCreate",
                lt::cublasLtMatrixLayoutCreate(&mut plan.b, operand, b_rows, b_cols, lda),
            )?;
            check(
                "cublasLtMatrixLayoutCreate",
                lt::cublasLtMatrixLayoutCreate(
                    &mut plan.c,
                    lt::cudaDataType::CUDA_R_32F,
                    n,
                    m,
                    n as i64,
                ),
            )?;
            let mut pref: lt::cublasLtMatmulPreference_t = std::ptr::null_mut();
            check(
                "cublasLtMatmulPreferenceCreate",
                lt::cublasLtMatmulPreferenceCreate(&mut pref),
            )?;
            let bytes = if key.workspace {
                self.workspace_bytes as u64
            } else {
                0
            };
            let found = check(
                "cublasLtMatmulPreferenceSetAttribute",
                lt::cublasLtMatmulPreferenceSetAttribute(
                    pref,
                    lt::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                    (&bytes as *const u64).cast(),
                    std::mem::size_of::<u64>(),
                ),
            )
            .and_then(|()| {
                let mut result: lt::cublasLtMatmulHeuristicResult_t = std::mem::zeroed();
                let mut count = 0i32;
                check(
                    "cublasLtMatmulAlgoGetHeuristic",
                    lt::cublasLtMatmulAlgoGetHeuristic(
                        self.handle,
                        plan.desc,
                        plan.a,
                        plan.b,
                        plan.c,
                        plan.c,
                        pref,
                        1,
                        &mut result,
                        &mut count,
                    ),
                )?;
                if count < 1 {
                    return Err(Error::Cublas {
                        call: "cublasLtMatmulAlgoGetHeuristic",
                        status: format!("no algorithm for {g:?} with {:?} operands", key.operands),
                    });
                }
                Ok(result.algo)
            });
            lt::cublasLtMatmulPreferenceDestroy(pref);
            plan.algo = found?;
        }
        Ok(plan)
    }
}

impl Drop for Lt {
    fn drop(&mut self) {
        self.plans.borrow_mut().clear();
        // SAFETY: the handle was created in `new` and is destroyed once, after its plans.
        unsafe {
            lt::cublasLtDestroy(self.handle);
        }
    }
}
