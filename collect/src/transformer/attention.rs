//! The attention core of a block, forward and backward: from head-major `q`, `k`, `v`
//! (`[B, H, T, d_head]`, RoPE applied) to the head-major output, and from the output's gradient
//! back to those of `q`, `k` and `v`. RoPE, the merge of heads and the projections around it are
//! the block's ([`super::forward`], [`super::backward`]).
//!
//! This is the naive path, as the reference script computes it: the scores `q kᵀ/√d_head` and
//! the probabilities `P` (`[B, H, T, T]`) are materialised, the forward inside the NVTX ranges
//! `attention_matmul_QK`, `attention_softmax` and `attention_matmul_V`, and `P` is kept for the
//! backward. What the backward needs beyond `q`, `k`, `v` is an [`AttentionSaved`], which the
//! rest of the model never looks inside: another implementation of attention keeps its own
//! there and needs no change outside this file.

use super::Model;
use crate::error::Result;
use crate::gpu::blas::{Gemm, Mat};
use crate::gpu::device_memory::Buffer;
use crate::gpu::ops::AttnShape;
use crate::nvtx::{self, range};

/// What the attention keeps for its backward besides `q`, `k` and `v`: on the naive path, the
/// probabilities `P`, `[B, H, T, T]`.
pub(super) struct AttentionSaved {
    p: Buffer,
}

impl Model<'_> {
    /// `o = softmax(q kᵀ/√d_head, causal) v` per head; the output is head-major like its inputs.
    pub(super) fn attention_forward(
        &self,
        q: &Buffer,
        k: &Buffer,
        v: &Buffer,
        shape: AttnShape,
    ) -> Result<(Buffer, AttentionSaved)> {
        let act = self.act();
        let (t, dh, bh) = (shape.ctx, shape.d_head, shape.batch * shape.heads);
        let p = self.alloc_in("attn.scores", act, bh * t * t)?;
        {
            let _r = range(nvtx::ATTENTION_QK);
            self.per_head(scores(shape), 1.0 / (dh as f32).sqrt(), q, k, &p, shape)?;
        }
        {
            let _r = range(nvtx::ATTENTION_SOFTMAX);
            self.rt.softmax_causal_fwd(act, p.ptr(), t, bh * t)?;
        }
        let o_heads = self.alloc_in("attn.context", act, shape.elements())?;
        {
            let _r = range(nvtx::ATTENTION_V);
            self.per_head(context(shape, false), 1.0, &p, v, &o_heads, shape)?;
        }
        Ok((o_heads, AttentionSaved { p }))
    }

    /// The gradients of `q`, `k` and `v` (head-major) from that of the output, `do_heads`. Takes
    /// the block's `q`, `k`, `v` and what the forward saved, and frees each as soon as it has
    /// served.
    pub(super) fn attention_backward(
        &self,
        do_heads: Buffer,
        q: Buffer,
        k: Buffer,
        v: Buffer,
        saved: AttentionSaved,
        shape: AttnShape,
    ) -> Result<(Buffer, Buffer, Buffer)> {
        let act = self.act();
        let (t, dh, bh) = (shape.ctx, shape.d_head, shape.batch * shape.heads);
        let scale = 1.0 / (dh as f32).sqrt();
        let AttentionSaved { p } = saved;
        // o = P v: dP = dO vᵀ, dV = Pᵀ dO.
        let dp = self.alloc_in("attn.context", act, bh * t * t)?;
        self.per_head(scores(shape), 1.0, &do_heads, &v, &dp, shape)?;
        let dv = self.alloc_in("attn.context", act, shape.elements())?;
        self.per_head(context(shape, true), 1.0, &p, &do_heads, &dv, shape)?;
        drop((do_heads, v));
        // P = softmax(S), in place: dP becomes dS.
        self.rt
            .softmax_causal_bwd(act, p.ptr(), dp.ptr(), t, bh * t)?;
        drop(p);
        // S = q kᵀ * scale: dq = dS k * scale, dk = dSᵀ q * scale.
        let dq = self.alloc_in("attn.scores", act, shape.elements())?;
        self.per_head(context(shape, false), scale, &dp, &k, &dq, shape)?;
        let dk = self.alloc_in("attn.scores", act, shape.elements())?;
        self.per_head(context(shape, true), scale, &dp, &q, &dk, shape)?;
        drop((dp, q, k));
        Ok((dq, dk, dv))
    }

    /// `c = alpha * op(a) op(b)` for every (batch, head), operands in the activation type, each
    /// head's matrices one after the other (so a head's stride is its matrix's size).
    fn per_head(
        &self,
        g: Gemm,
        alpha: f32,
        a: &Buffer,
        b: &Buffer,
        c: &Buffer,
        shape: AttnShape,
    ) -> Result<()> {
        let act = self.act();
        self.rt.blas.gemm_batched(
            g,
            alpha,
            Mat::new(a.ptr(), act),
            g.m * g.k,
            Mat::new(b.ptr(), act),
            g.k * g.n,
            0.0,
            Mat::new(c.ptr(), act),
            g.m * g.n,
            shape.batch * shape.heads,
        )
    }
}

/// Per head, `[T, T] = x yᵀ` for `x`, `y` `[T, d_head]`: the scores, and the probabilities'
/// gradient.
fn scores(shape: AttnShape) -> Gemm {
    Gemm {
        ta: false,
        tb: true,
        m: shape.ctx,
        n: shape.ctx,
        k: shape.d_head,
    }
}

/// Per head, `[T, d_head] = s y` for `s` `[T, T]` (`sᵀ` with `transpose_s`) and `y`
/// `[T, d_head]`: the output, and the gradients of `v`, `q` and `k`.
fn context(shape: AttnShape, transpose_s: bool) -> Gemm {
    Gemm {
        ta: transpose_s,
        tb: false,
        m: shape.ctx,
        n: shape.d_head,
        k: shape.ctx,
    }
}
