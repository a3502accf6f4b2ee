//! The attention core, forward and backward: from head-major `q`, `k`, `v` (`[B, H, T, d_head]`,
//! RoPE applied) to the head-major output, and from the output's gradient back to those of `q`,
//! `k` and `v`. RoPE, the merge of heads and the projections around it are the block's
//! (`forward.rs`, `backward.rs`); the attention benchmark (`collect attention`) calls
//! the same core on inputs of its own.
//!
//! Two implementations, chosen by [`Attention`]:
//! - **naive**, as the reference script computes it: the scores `q kᵀ/√d_head` are materialised
//!   (`[B, H, T, T]`, the `attn.scores` frame), the causal softmax turns them into the
//!   probabilities `P` in place, and `P` is kept for the backward; the forward runs inside the
//!   NVTX ranges `attention_matmul_QK`, `attention_softmax` and `attention_matmul_V`. Causal
//!   only: the softmax kernel masks the keys after each query.
//! - **flash**, FlashAttention-2 (`kernels/flash_attention_*.cu`): no `[T, T]` tensor; the
//!   forward keeps its output `O` and the logsumexp `L` (`[B, H, T]` fp32, `attn.lse`) and the
//!   backward recomputes `P` from them. Forward and backward each run inside one NVTX range,
//!   `attention_flash`. A head narrower than a kernel width (80 in the 2.7B model) is
//!   zero-padded to the next one (`attn.padded`), which changes no score and no gradient; the
//!   padded `O` is what is kept then.
//!
//! Every buffer is allocated under a module frame, in an order the plan
//! ([`super::plan`]) replays allocation for allocation: a change here is a change there.

use std::fmt;

use crate::error::{Error, Result};
use crate::gpu::blas::{Gemm, Mat};
use crate::gpu::device_memory::{Buffer, DType};
use crate::gpu::flash;
use crate::gpu::ops::{AttnShape, FlashBackwardBuffers, FlashShape, Runtime};
use crate::nvtx::{self, range};
use crate::transformer::alloc_in;
use crate::transformer::config::Attention;

/// What the backward needs besides `q`, `k` and `v`: `P` (naive), or `O` and `L` (flash).
pub struct AttentionSaved {
    kept: Kept,
}

enum Kept {
    Naive {
        p: Buffer,
    },
    /// `o` is `[B, H, T, w]`, `w` the kernel width (the padded output when the head is narrower).
    Flash {
        o: Buffer,
        lse: Buffer,
    },
}

/// The forward's result: the output for the merge of heads, and what the backward will need.
pub struct AttentionForward {
    /// `[B, H, T, d_head]` in the activation type.
    pub output: Buffer,
    kept: ForwardKept,
}

enum ForwardKept {
    Naive {
        p: Buffer,
    },
    /// `padded_o` when the head was padded (the output is then a cut-back copy of it).
    Flash {
        padded_o: Option<Buffer>,
        lse: Buffer,
    },
}

impl AttentionForward {
    /// What the backward keeps, and the output when it is not itself kept (naive, or a padded
    /// flash head, whose padded form is kept instead).
    pub fn split(self) -> (Option<Buffer>, AttentionSaved) {
        let (output, kept) = match self.kept {
            ForwardKept::Naive { p } => (Some(self.output), Kept::Naive { p }),
            ForwardKept::Flash {
                padded_o: Some(o),
                lse,
            } => (Some(self.output), Kept::Flash { o, lse }),
            ForwardKept::Flash {
                padded_o: None,
                lse,
            } => (
                None,
                Kept::Flash {
                    o: self.output,
                    lse,
                },
            ),
        };
        (output, AttentionSaved { kept })
    }

    /// Once the output has been merged into tokens: what the backward keeps. Naive frees the
    /// output here; flash keeps it (or its padded form) as `O`.
    pub fn into_saved(self) -> AttentionSaved {
        self.split().1
    }
}

/// A tensor the backward reads: `Owned`, freed as soon as it has served, or `Borrowed`, left to
/// the caller (the attention benchmark runs many backward passes over the same inputs).
pub enum Input<'a> {
    Owned(Buffer),
    Borrowed(&'a Buffer),
}

impl std::ops::Deref for Input<'_> {
    type Target = Buffer;
    fn deref(&self) -> &Buffer {
        match self {
            Input::Owned(b) => b,
            Input::Borrowed(b) => b,
        }
    }
}

/// Why the attention core cannot run at all as asked (shapes aside, see
/// [`crate::transformer::config::attention_refusal`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unsupported(pub &'static str);

impl fmt::Display for Unsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

/// Whether `attention` runs without a causal mask.
pub fn unsupported(attention: Attention, causal: bool) -> Option<Unsupported> {
    (attention == Attention::Naive && !causal).then_some(Unsupported(
        "naive attention is causal only here (its softmax kernel masks the keys after each query)",
    ))
}

/// One attention configuration on a runtime: which implementation, the activation type, the
/// shape, and whether keys after a query are masked.
pub struct AttentionCore<'r> {
    pub rt: &'r Runtime,
    pub attention: Attention,
    /// `F32` or `Bf16`: the type of `q`, `k`, `v`, the output and their gradients.
    pub act: DType,
    pub shape: AttnShape,
    pub causal: bool,
}

impl AttentionCore<'_> {
    fn scale(&self) -> f32 {
        1.0 / (self.shape.d_head as f32).sqrt()
    }

    fn alloc(&self, frame: &str, dtype: DType, len: usize) -> Result<Buffer> {
        alloc_in(self.rt, frame, dtype, len)
    }

    fn bh(&self) -> usize {
        self.shape.batch * self.shape.heads
    }

    /// `o = softmax(q kᵀ/√d_head [causal]) v` per head, head-major like its inputs.
    pub fn forward(&self, q: &Buffer, k: &Buffer, v: &Buffer) -> Result<AttentionForward> {
        if let Some(u) = unsupported(self.attention, self.causal) {
            return Err(Error::InvalidConfig(u.to_string()));
        }
        match self.attention {
            Attention::Naive => self.naive_forward(q, k, v),
            Attention::Flash => self.flash_forward(q, k, v),
        }
    }

    /// The gradients of `q`, `k` and `v` (head-major) from that of the output, `d_out`. Takes
    /// the inputs and what the forward saved, and frees each (of those owned) as soon as it has
    /// served.
    pub fn backward(
        &self,
        d_out: Input<'_>,
        q: Input<'_>,
        k: Input<'_>,
        v: Input<'_>,
        saved: AttentionSaved,
    ) -> Result<(Buffer, Buffer, Buffer)> {
        let inputs = [d_out, q, k, v];
        match saved.kept {
            Kept::Naive { p } => self.naive_backward(inputs, p),
            Kept::Flash { o, lse } => self.flash_backward(inputs, o, lse),
        }
    }

    fn naive_forward(&self, q: &Buffer, k: &Buffer, v: &Buffer) -> Result<AttentionForward> {
        let (act, shape, t) = (self.act, self.shape, self.shape.ctx);
        let p = self.alloc("attn.scores", act, self.bh() * t * t)?;
        {
            let _r = range(nvtx::ATTENTION_QK);
            self.per_head(scores(shape), self.scale(), q, k, &p)?;
        }
        {
            let _r = range(nvtx::ATTENTION_SOFTMAX);
            self.rt.softmax_causal_fwd(act, p.ptr(), t, self.bh() * t)?;
        }
        let output = self.alloc("attn.context", act, shape.elements())?;
        {
            let _r = range(nvtx::ATTENTION_V);
            self.per_head(context(shape, false), 1.0, &p, v, &output)?;
        }
        Ok(AttentionForward {
            output,
            kept: ForwardKept::Naive { p },
        })
    }

    fn naive_backward(
        &self,
        [d_out, q, k, v]: [Input<'_>; 4],
        p: Buffer,
    ) -> Result<(Buffer, Buffer, Buffer)> {
        let (act, shape, t) = (self.act, self.shape, self.shape.ctx);
        // o = P v: dP = dO vᵀ, dV = Pᵀ dO.
        let dp = self.alloc("attn.context", act, self.bh() * t * t)?;
        self.per_head(scores(shape), 1.0, &d_out, &v, &dp)?;
        let dv = self.alloc("attn.context", act, shape.elements())?;
        self.per_head(context(shape, true), 1.0, &p, &d_out, &dv)?;
        drop((d_out, v));
        // P = softmax(S), in place: dP becomes dS.
        self.rt
            .softmax_causal_bwd(act, p.ptr(), dp.ptr(), t, self.bh() * t)?;
        drop(p);
        // S = q kᵀ * scale: dq = dS k * scale, dk = dSᵀ q * scale.
        let dq = self.alloc("attn.scores", act, shape.elements())?;
        self.per_head(context(shape, false), self.scale(), &dp, &k, &dq)?;
        let dk = self.alloc("attn.scores", act, shape.elements())?;
        self.per_head(context(shape, true), self.scale(), &dp, &q, &dk)?;
        drop((dp, q, k));
        Ok((dq, dk, dv))
    }

    /// The kernel width the heads run at, and the launch shape.
    fn flash_shape(&self) -> Result<FlashShape> {
        let d = flash::kernel_width(self.shape.d_head).ok_or_else(|| {
            Error::InvalidConfig(format!(
                "flash attention runs heads up to 128 wide, not {}",
                self.shape.d_head
            ))
        })?;
        Ok(FlashShape {
            bh: self.bh(),
            seq: self.shape.ctx,
            d,
        })
    }

    fn flash_forward(&self, q: &Buffer, k: &Buffer, v: &Buffer) -> Result<AttentionForward> {
        let _r = range(nvtx::ATTENTION_FLASH);
        let (act, fs) = (self.act, self.flash_shape()?);
        let rows = fs.bh * fs.seq;
        if fs.d == self.shape.d_head {
            let output = self.alloc("attn.context", act, self.shape.elements())?;
            let lse = self.alloc("attn.lse", DType::F32, rows)?;
            self.rt.flash_attention_forward(
                act,
                fs,
                q.ptr(),
                k.ptr(),
                v.ptr(),
                output.ptr(),
                lse.ptr(),
                self.scale(),
                self.causal,
            )?;
            return Ok(AttentionForward {
                output,
                kept: ForwardKept::Flash {
                    padded_o: None,
                    lse,
                },
            });
        }
        let (qp, kp, vp) = (
            self.padded(q, fs)?,
            self.padded(k, fs)?,
            self.padded(v, fs)?,
        );
        let o = self.alloc("attn.context", act, rows * fs.d)?;
        let lse = self.alloc("attn.lse", DType::F32, rows)?;
        self.rt.flash_attention_forward(
            act,
            fs,
            qp.ptr(),
            kp.ptr(),
            vp.ptr(),
            o.ptr(),
            lse.ptr(),
            self.scale(),
            self.causal,
        )?;
        drop((qp, kp, vp));
        let output = self.cut_back(&o, fs, "attn.context")?;
        Ok(AttentionForward {
            output,
            kept: ForwardKept::Flash {
                padded_o: Some(o),
                lse,
            },
        })
    }

    fn flash_backward(
        &self,
        [d_out, q, k, v]: [Input<'_>; 4],
        o: Buffer,
        lse: Buffer,
    ) -> Result<(Buffer, Buffer, Buffer)> {
        let _r = range(nvtx::ATTENTION_FLASH);
        let (act, fs) = (self.act, self.flash_shape()?);
        let padded = fs.d != self.shape.d_head;
        let (d_out, q, k, v) = if padded {
            let p = (
                Input::Owned(self.padded(&d_out, fs)?),
                Input::Owned(self.padded(&q, fs)?),
                Input::Owned(self.padded(&k, fs)?),
                Input::Owned(self.padded(&v, fs)?),
            );
            drop((d_out, q, k, v));
            p
        } else {
            (d_out, q, k, v)
        };
        let n = fs.bh * fs.seq * fs.d;
        let delta = self.alloc("attn.delta", DType::F32, fs.bh * fs.seq)?;
        let dq_accum = self.alloc("attn.dq_accum", DType::F32, n)?;
        let dq_bf16 = match act {
            DType::Bf16 => Some(self.alloc("attn.scores", act, n)?),
            _ => None,
        };
        let dk = self.alloc("attn.scores", act, n)?;
        let dv = self.alloc("attn.context", act, n)?;
        self.rt.flash_attention_backward(
            act,
            fs,
            FlashBackwardBuffers {
                q: q.ptr(),
                k: k.ptr(),
                v: v.ptr(),
                o: o.ptr(),
                dout: d_out.ptr(),
                lse: lse.ptr(),
                delta: delta.ptr(),
                dq_accum: dq_accum.ptr(),
                dq: dq_bf16.as_ref().map_or(0, Buffer::ptr),
                dk: dk.ptr(),
                dv: dv.ptr(),
            },
            self.scale(),
            self.causal,
        )?;
        drop((d_out, q, k, v, o, lse, delta));
        let dq = match dq_bf16 {
            Some(dq) => {
                drop(dq_accum);
                dq
            }
            None => dq_accum,
        };
        if !padded {
            return Ok((dq, dk, dv));
        }
        let dq = self.cut_back_owned(dq, fs, "attn.scores")?;
        let dk = self.cut_back_owned(dk, fs, "attn.scores")?;
        let dv = self.cut_back_owned(dv, fs, "attn.context")?;
        Ok((dq, dk, dv))
    }

    /// `x` (`[BH, T, d_head]`) widened to the kernel width with zeros.
    fn padded(&self, x: &Buffer, fs: FlashShape) -> Result<Buffer> {
        let a = self.act.bytes();
        let p = self.alloc("attn.padded", self.act, fs.bh * fs.seq * fs.d)?;
        let (dh, rows) = (self.shape.d_head, fs.bh * fs.seq);
        self.rt
            .copy_rows_zero_fill(p.ptr(), fs.d * a, x.ptr(), dh * a, dh * a, rows)?;
        Ok(p)
    }

    /// The first `d_head` columns of a padded `x`, in a new buffer under `frame`.
    fn cut_back(&self, x: &Buffer, fs: FlashShape, frame: &str) -> Result<Buffer> {
        let a = self.act.bytes();
        let out = self.alloc(frame, self.act, self.shape.elements())?;
        let (dh, rows) = (self.shape.d_head, fs.bh * fs.seq);
        self.rt
            .copy_rows_zero_fill(out.ptr(), dh * a, x.ptr(), fs.d * a, dh * a, rows)?;
        Ok(out)
    }

    /// [`AttentionCore::cut_back`], freeing the padded buffer once copied.
    fn cut_back_owned(&self, x: Buffer, fs: FlashShape, frame: &str) -> Result<Buffer> {
        self.cut_back(&x, fs, frame)
    }

    /// `c = alpha * op(a) op(b)` for every (batch, head), operands in the activation type, each
    /// head's matrices one after the other (so a head's stride is its matrix's size).
    fn per_head(&self, g: Gemm, alpha: f32, a: &Buffer, b: &Buffer, c: &Buffer) -> Result<()> {
        let act = self.act;
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
            self.bh(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_naive_without_a_mask_is_unsupported() {
        assert!(unsupported(Attention::Naive, false).is_some());
        assert!(unsupported(Attention::Naive, true).is_none());
        assert!(unsupported(Attention::Flash, false).is_none());
        assert!(unsupported(Attention::Flash, true).is_none());
    }
}
