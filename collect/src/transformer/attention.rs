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
        let rt = self.rt;
        let act = self.act();
        let (t, dh, bh) = (shape.ctx, shape.d_head, shape.batch * shape.heads);
        let p = self.alloc_in("attn.scores", act, bh * t * t)?;
        {
            let _r = range(nvtx::ATTENTION_QK);
            rt.blas.gemm_batched(
                Gemm {
                    ta: false,
                    tb: true,
                    m: t,
                    n: t,
                    k: dh,
                },
                1.0 / (dh as f32).sqrt(),
                Mat::new(q.ptr(), act),
                t * dh,
                Mat::new(k.ptr(), act),
                t * dh,
                0.0,
                Mat::new(p.ptr(), act),
                t * t,
                bh,
            )?;
        }
        {
            let _r = range(nvtx::ATTENTION_SOFTMAX);
            rt.softmax_causal_fwd(act, p.ptr(), t, bh * t)?;
        }
        let o_heads = self.alloc_in("attn.context", act, shape.elements())?;
        {
            let _r = range(nvtx::ATTENTION_V);
            rt.blas.gemm_batched(
                Gemm {
                    ta: false,
                    tb: false,
                    m: t,
                    n: dh,
                    k: t,
                },
                1.0,
                Mat::new(p.ptr(), act),
                t * t,
                Mat::new(v.ptr(), act),
                t * dh,
                0.0,
                Mat::new(o_heads.ptr(), act),
                t * dh,
                bh,
            )?;
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
        let rt = self.rt;
        let act = self.act();
        let (t, dh, bh) = (shape.ctx, shape.d_head, shape.batch * shape.heads);
        let scale = 1.0 / (dh as f32).sqrt();
        let AttentionSaved { p } = saved;
        // o = P v, P = softmax(q kᵀ * scale).
        let dp = self.alloc_in("attn.context", act, bh * t * t)?;
        rt.blas.gemm_batched(
            Gemm {
                ta: false,
                tb: true,
                m: t,
                n: t,
                k: dh,
            },
            1.0,
            Mat::new(do_heads.ptr(), act),
            t * dh,
            Mat::new(v.ptr(), act),
            t * dh,
            0.0,
            Mat::new(dp.ptr(), act),
            t * t,
            bh,
        )?;
        let dv = self.alloc_in("attn.context", act, shape.elements())?;
        rt.blas.gemm_batched(
            Gemm {
                ta: true,
                tb: false,
                m: t,
                n: dh,
                k: t,
            },
            1.0,
            Mat::new(p.ptr(), act),
            t * t,
            Mat::new(do_heads.ptr(), act),
            t * dh,
            0.0,
            Mat::new(dv.ptr(), act),
            t * dh,
            bh,
        )?;
        drop((do_heads, v));
        rt.softmax_causal_bwd(act, p.ptr(), dp.ptr(), t, bh * t)?;
        drop(p);
        let dq = self.alloc_in("attn.scores", act, shape.elements())?;
        rt.blas.gemm_batched(
            Gemm {
                ta: false,
                tb: false,
                m: t,
                n: dh,
                k: t,
            },
            scale,
            Mat::new(dp.ptr(), act),
            t * t,
            Mat::new(k.ptr(), act),
            t * dh,
            0.0,
            Mat::new(dq.ptr(), act),
            t * dh,
            bh,
        )?;
        let dk = self.alloc_in("attn.scores", act, shape.elements())?;
        rt.blas.gemm_batched(
            Gemm {
                ta: true,
                tb: false,
                m: t,
                n: dh,
                k: t,
            },
            scale,
            Mat::new(dp.ptr(), act),
            t * t,
            Mat::new(q.ptr(), act),
            t * dh,
            0.0,
            Mat::new(dk.ptr(), act),
            t * dh,
            bh,
        )?;
        drop((dp, q, k));
        Ok((dq, dk, dv))
    }
}
