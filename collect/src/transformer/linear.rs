//! The model's linear layers, `y = x Wᵀ` with `x` `[rows, d_in]` and `W` `[d_out, d_in]` as
//! `nn.Linear` stores it: the forward GEMM, and the backward's two, the weight's gradient and then
//! the input's. Every projection of the model (QKV, output, W1/W3, W2, LM head) goes through
//! these, so each product's shape and transposes are written once. The weight operand is the fp32
//! master or its bf16 copy ([`Model::weight`]); weight gradients are always fp32.

use super::Model;
use crate::error::Result;
use crate::gpu::blas::{Gemm, Mat};
use crate::gpu::device_memory::{Buffer, DType};

/// One linear layer: where its weight starts in the parameter buffer, and its sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Linear {
    /// Offset of `W` (`[d_out, d_in]`) in the flat parameters (and gradients).
    pub(super) weight: usize,
    /// Rows of `x` and `y` (tokens).
    pub(super) rows: usize,
    pub(super) d_in: usize,
    pub(super) d_out: usize,
}

impl Linear {
    /// The GEMM of the forward, `x Wᵀ`: `[rows, d_in]` times the transpose of `[d_out, d_in]`.
    fn forward_gemm(self) -> Gemm {
        Gemm {
            ta: false,
            tb: true,
            m: self.rows,
            n: self.d_out,
            k: self.d_in,
        }
    }
}

impl Model<'_> {
    /// The layer whose weight starts at `weight`, over the run's tokens.
    pub(super) fn linear(&self, weight: usize, d_in: usize, d_out: usize) -> Linear {
        Linear {
            weight,
            rows: self.run.tokens(),
            d_in,
            d_out,
        }
    }

    /// `y = x Wᵀ + beta * y`.
    pub(super) fn linear_forward(&self, lin: Linear, x: Mat, beta: f32, y: Mat) -> Result<()> {
        self.rt
            .blas
            .gemm(lin.forward_gemm(), 1.0, x, self.weight(lin.weight), beta, y)
    }

    /// `out = residual + x Wᵀ` (both fp32, `out` a buffer of its own), in the GEMM's epilogue.
    pub(super) fn linear_forward_residual(
        &self,
        lin: Linear,
        x: Mat,
        residual: &Buffer,
        out: &Buffer,
    ) -> Result<()> {
        self.rt.blas.gemm_add(
            lin.forward_gemm(),
            x,
            self.weight(lin.weight),
            Mat::new(residual.ptr(), DType::F32),
            Mat::new(out.ptr(), DType::F32),
        )
    }

    /// The backward of `y = x Wᵀ` given `dy`: first `dW = dyᵀ x` into the weight's gradient,
    /// then `dx = dy W` into a new `[rows, d_in]` buffer of `dx_dtype`, allocated between the two
    /// under the module frame `dx_frame`. Freeing `dy` and `x` is the caller's.
    pub(super) fn linear_backward(
        &self,
        lin: Linear,
        dy: Mat,
        x: Mat,
        dx_frame: &str,
        dx_dtype: DType,
    ) -> Result<Buffer> {
        let dw = Gemm {
            ta: true,
            tb: false,
            m: lin.d_out,
            n: lin.d_in,
            k: lin.rows,
        };
        if dy.dtype == DType::Bf16 {
            // bf16 products are short enough that a split-K reduction's memset and wait cost more
            // than they save; fp32 products keep cuBLAS's choice.
            self.rt
                .blas
                .gemm_no_workspace(dw, dy, x, self.grad(lin.weight))?;
        } else {
            self.rt
                .blas
                .gemm(dw, 1.0, dy, x, 0.0, self.grad(lin.weight))?;
        }
        let dx = self.alloc_in(dx_frame, dx_dtype, lin.rows * lin.d_in)?;
        self.rt.blas.gemm(
            Gemm {
                ta: false,
                tb: false,
                m: lin.rows,
                n: lin.d_in,
                k: lin.d_out,
            },
            1.0,
            dy,
            self.weight(lin.weight),
            0.0,
            Mat::new(dx.ptr(), dx_dtype),
        )?;
        Ok(dx)
    }
}
