//! The backward pass: the loss and its gradient in one pass over the logits, then the LM head,
//! the final norm, every block from the last to the first (each re-run forward first when the
//! forward kept only its input: activation checkpointing), and the embedding. Each weight's
//! gradient is written (not accumulated) into the flat gradient buffer; each activation the
//! forward kept is freed as soon as its last use has been launched, so the memory in use falls
//! through the backward as PyTorch's does.
//!
//! The gradient of the residual stream ([`ResidualGrad`]) is fp32, with a bf16 copy that the
//! norms' backward keeps up to date for the GEMMs of a bf16 run. Projections go through
//! [`super::linear`]; the attention core through [`super::attention`].
//!
//! With the overlapped optimizer ([`super::optimizer`]) the backward launches each group's
//! update as soon as the group's gradients are final: the LM head and final norm after the
//! final norm's backward, each block after its own, between blocks (outside any module frame).

use super::forward::{Forward, LayerSaved};
use super::linear::Linear;
use super::optimizer::Updates;
use super::Model;
use crate::error::Result;
use crate::gpu::blas::Mat;
use crate::gpu::device_memory::{Buffer, DType};
use crate::gpu::ops::{norm_bwd_fused_takes, norm_bwd_scratch_rows};
use crate::memory::frames as memory_frames;

/// The gradient of the residual stream, `[B*T, d_model]`: fp32, and its bf16 copy in a bf16
/// run. Fields drop in this order (the copy first), the reverse of their allocation.
struct ResidualGrad {
    bf16: Option<Buffer>,
    dx: Buffer,
    /// The element type of the activations (`bf16` exists exactly when it is bf16).
    act: DType,
}

impl ResidualGrad {
    /// The address of the bf16 copy, 0 for none (as the norm's backward kernel takes it).
    fn bf16_ptr(&self) -> u64 {
        self.bf16.as_ref().map_or(0, Buffer::ptr)
    }

    /// The gradient as a GEMM operand in the activation type.
    fn as_operand(&self) -> Mat {
        let ptr = if self.act == DType::Bf16 {
            self.bf16_ptr()
        } else {
            self.dx.ptr()
        };
        Mat::new(ptr, self.act)
    }
}

impl Model<'_> {
    /// Loss and the backward of every operation; fills the gradient buffer (each gradient is
    /// written, not accumulated). Activations are freed as they are used.
    pub fn backward(&mut self, fwd: Forward) -> Result<()> {
        self.backward_with(fwd, None).map(|_| ())
    }

    /// [`Model::backward`], launching `updates` as groups of gradients become final; returns
    /// the embedding's elements (`start..end` of the flat buffer), whose gradient is the last
    /// to be final and whose update is the caller's.
    pub(super) fn backward_with(
        &mut self,
        fwd: Forward,
        mut updates: Option<&mut Updates>,
    ) -> Result<(usize, usize)> {
        let rt = self.rt;
        let c = &self.run.model;
        let act = self.act();
        let (bt, d, v) = (self.run.tokens(), c.d_model, c.vocab);
        let Forward {
            mut layers,
            x_final,
            rstd_final,
            h_final,
            logits,
        } = fwd;

        // Loss and its gradient in one pass over the logits.
        let dlogits = self.alloc_in("loss", act, bt * v)?;
        rt.cross_entropy(
            act,
            logits.ptr(),
            self.targets.ptr(),
            self.row_loss.ptr(),
            dlogits.ptr(),
            bt,
            v,
        )?;
        rt.mean(self.row_loss.ptr(), bt, self.loss.ptr())?;
        drop(logits);
        let dh_final = self.linear_backward(
            self.linear(self.layout.head, d, v),
            Mat::new(dlogits.ptr(), act),
            Mat::new(h_final.ptr(), act),
            "lm_head",
            DType::F32,
        )?;
        drop((dlogits, h_final));
        let dx = self.alloc_in("ln_final", DType::F32, bt * d)?;
        let bf16 = if act == DType::Bf16 {
            Some(self.alloc_in("ln_final", DType::Bf16, bt * d)?)
        } else {
            None
        };
        let grad = ResidualGrad { bf16, dx, act };
        self.norm_backward(
            &dh_final,
            &x_final,
            &rstd_final,
            self.layout.ln_final,
            &grad,
            false,
            None,
        )?;
        drop((dh_final, x_final, rstd_final));
        if let Some(u) = updates.as_deref_mut() {
            let tail = self.layout.tail_span();
            self.interleave_update(u, tail.start, tail.end)?;
        }

        for li in (0..c.layers).rev() {
            {
                // Recomputed, under checkpointing, in the forward's own frames.
                let s = self.block_saved(li, layers.pop().expect("one kept block per layer"))?;
                let _layer = memory_frames::module_with(|| format!("layers.{li}"));
                self.block_backward(li, s, &grad)?;
            }
            if let Some(u) = updates.as_deref_mut() {
                let span = self.layout.block_span(li);
                self.interleave_update(u, span.start, span.end)?;
            }
        }

        // Embedding: rows of the gradient scatter-add into the looked-up rows.
        let emb = self.layout.embedding;
        rt.gpu.memset_zero(self.grad(emb).ptr, v * d * 4)?;
        rt.embedding_bwd(self.tokens.ptr(), grad.dx.ptr(), self.grad(emb).ptr, bt, d)?;
        let e = self.layout.embedding_span();
        Ok((e.start, e.end))
    }

    /// Block `li`'s backward, inside its frame (the caller's): `grad` enters as the gradient of
    /// the block's output and leaves as that of its input. The activations in `s` are freed as
    /// they are used; `x_in` and `rstd1`, used last, when this returns.
    fn block_backward(&self, li: usize, s: LayerSaved, grad: &ResidualGrad) -> Result<()> {
        let rt = self.rt;
        let c = &self.run.model;
        let act = self.act();
        let (bt, d, f) = (self.run.tokens(), c.d_model, c.d_ff);
        let shape = self.attn_shape();
        let lo = self.layout.layers[li];
        let dx_act = grad.as_operand();

        // FFN: x_out = x_mid + g W2ᵀ, g = silu(h13[:, :f]) * h13[:, f:].
        let w2 = self.linear(lo.w2, f, d);
        let dg = self.linear_backward(w2, dx_act, Mat::new(s.g.ptr(), act), "ffn.w2", act)?;
        drop(s.g);
        let dh13 = self.alloc_in("ffn.swiglu", act, bt * 2 * f)?;
        rt.swiglu_bwd(act, s.h13.ptr(), dg.ptr(), dh13.ptr(), bt, f)?;
        drop((dg, s.h13));
        let w13 = self.linear(lo.w13, d, 2 * f);
        let dh2 = self.input_projection_backward(
            w13,
            &dh13,
            (s.h2, "ffn.w1_w3"),
            (&s.x_mid, &s.rstd2, lo.ln2),
            grad,
        )?;
        drop((dh13, dh2, s.x_mid, s.rstd2));

        // Attention output projection: x_mid = x + attn Woᵀ.
        let wo = self.linear(lo.wo, d, d);
        let dattn = self.linear_backward(
            wo,
            dx_act,
            Mat::new(s.attn.ptr(), act),
            "attn.output_proj",
            act,
        )?;
        drop(s.attn);
        let do_heads = self.alloc_in("attn.merge_heads", act, bt * d)?;
        rt.tokens_to_heads(act, dattn.ptr(), do_heads.ptr(), shape)?;
        drop(dattn);

        // Attention, then RoPE and the QKV projection.
        let (dq, dk, dv) = self.attention_backward(do_heads, s.q, s.k, s.v, s.attention)?;
        let dqkv = self.alloc_in("attn.rope", act, bt * 3 * d)?;
        rt.rope_bwd(
            act,
            dq.ptr(),
            dk.ptr(),
            dv.ptr(),
            self.rope.ptr(),
            dqkv.ptr(),
            shape,
        )?;
        drop((dq, dk, dv));
        let wqkv = self.linear(lo.wqkv, d, 3 * d);
        let _dh1 = self.input_projection_backward(
            wqkv,
            &dqkv,
            (s.h1, "attn.qkv_proj"),
            (&s.x_in, &s.rstd1, lo.ln1),
            grad,
        )?;
        Ok(())
    }

    /// The backward of one of the block's input projections, `y = h Wᵀ` over
    /// `h = rmsnorm(x) * gain`: `dh` from `dy` (fp32), `h` freed once it has served, then the
    /// norm's backward added into the residual gradient. `dy` has served by then: its memory
    /// holds the norm's partial sums. Returns `dh` for the caller to free with the rest.
    fn input_projection_backward(
        &self,
        proj: Linear,
        dy: &Buffer,
        (h, frame): (Buffer, &str),
        (x, rstd, gain): (&Buffer, &Buffer, usize),
        grad: &ResidualGrad,
    ) -> Result<Buffer> {
        let act = self.act();
        let dh = self.linear_backward(
            proj,
            Mat::new(dy.ptr(), act),
            Mat::new(h.ptr(), act),
            frame,
            DType::F32,
        )?;
        drop(h);
        self.norm_backward(&dh, x, rstd, gain, grad, true, Some(dy))?;
        Ok(dh)
    }

    /// The backward of `y = rmsnorm(x) * gain` (`gain` the offset of the gain vector) given `dy`
    /// (fp32): the input's gradient into `grad` (added to what it holds with `accumulate`, the
    /// residual's own gradient; its bf16 copy refreshed), then the gain's gradient. Given
    /// `scratch`, a buffer that has served and is about to be freed, both in one launch, one pass
    /// over `dy` and `x`, the blocks' partial sums of the gain's gradient in `scratch`, where the
    /// rows are narrow enough and `scratch` large enough; in two launches otherwise.
    #[allow(clippy::too_many_arguments)]
    fn norm_backward(
        &self,
        dy: &Buffer,
        x: &Buffer,
        rstd: &Buffer,
        gain: usize,
        grad: &ResidualGrad,
        accumulate: bool,
        scratch: Option<&Buffer>,
    ) -> Result<()> {
        let (bt, d) = (self.run.tokens(), self.run.model.d_model);
        // The same inputs for either path.
        let [dy, x, rstd] = [dy, x, rstd].map(Buffer::ptr);
        let (w, dw) = (self.params.at(gain), self.grad(gain).ptr);
        let (dx, dx_bf16) = (grad.dx.ptr(), grad.bf16_ptr());
        let residual = if accumulate { dx } else { 0 };
        let parts = scratch
            .filter(|s| norm_bwd_fused_takes(d) && norm_bwd_scratch_rows(bt) * d * 4 <= s.bytes());
        if let Some(parts) = parts {
            return self.rt.rmsnorm_bwd_fused(
                dy,
                x,
                w,
                rstd,
                residual,
                dx,
                dx_bf16,
                dw,
                parts.ptr(),
                bt,
                d,
            );
        }
        self.rt
            .rmsnorm_bwd(dy, x, w, rstd, residual, dx, dx_bf16, bt, d)?;
        self.rt.rmsnorm_dw(dy, x, rstd, dw, bt, d)
    }
}
