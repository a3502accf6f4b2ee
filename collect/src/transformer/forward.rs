//! The forward pass: embedding, the blocks (pre-norm attention and SwiGLU feed-forward, each
//! adding into the fp32 residual stream), the final RMSNorm and the LM head; and the loss without
//! a gradient. What the backward needs is kept in [`Forward`], one [`BlockKept`] per block: its
//! [`LayerSaved`], or, with activation checkpointing, only its input, from which the backward
//! re-runs the block ([`Model::block_saved`]).
//!
//! Each block allocates its activations in the order the plan counts them, under its
//! `layers.N` frame; what is not kept is freed at the block's end, newest first. The
//! attention core between RoPE and the merge of heads is [`super::attention`]'s.

use super::attention::AttentionSaved;
use super::Model;
use crate::error::Result;
use crate::gpu::blas::Mat;
use crate::gpu::device_memory::{Buffer, DType};
use crate::memory::frames as memory_frames;
use crate::nvtx::{self, range};
use crate::transformer::config::RMS_EPS;
use crate::transformer::params::LayerOffsets;

/// One block's activations kept for the backward. Fields drop in this order when a whole block
/// is dropped; the backward moves them out one by one.
pub(super) struct LayerSaved {
    pub(super) x_in: Buffer,
    pub(super) rstd1: Buffer,
    pub(super) h1: Buffer,
    pub(super) q: Buffer,
    pub(super) k: Buffer,
    pub(super) v: Buffer,
    /// What the attention core keeps for its backward.
    pub(super) attention: AttentionSaved,
    /// Attention output, token-major `[B*T, D]` (the input of Wo).
    pub(super) attn: Buffer,
    pub(super) x_mid: Buffer,
    pub(super) rstd2: Buffer,
    pub(super) h2: Buffer,
    pub(super) h13: Buffer,
    pub(super) g: Buffer,
}

/// How much of each block a forward keeps for the backward.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Keep {
    /// Nothing (no backward follows).
    Nothing,
    /// The block's input alone (activation checkpointing).
    Input,
    /// Every activation the block's backward reads.
    All,
}

/// What the backward has of one block.
// One per block: boxing the larger variant would save nothing that matters.
#[allow(clippy::large_enum_variant)]
pub(super) enum BlockKept {
    All(LayerSaved),
    /// The block's input, `[B*T, d_model]` fp32: the rest is computed again from it.
    Input(Buffer),
}

/// What a forward leaves: the logits and, when the backward will follow, what every block kept.
pub struct Forward {
    pub(super) layers: Vec<BlockKept>,
    pub(super) x_final: Buffer,
    pub(super) rstd_final: Buffer,
    pub(super) h_final: Buffer,
    /// `[B*T, vocab]` in the activation type.
    pub logits: Buffer,
}

impl Model<'_> {
    /// The forward pass. With `keep`, every block's activations are kept for [`Model::backward`],
    /// or, with the run's activation checkpointing, every block's input.
    pub fn forward(&mut self, keep: bool) -> Result<Forward> {
        let rt = self.rt;
        let c = &self.run.model;
        let act = self.act();
        let (bt, d, v) = (self.run.tokens(), c.d_model, c.vocab);
        // The bf16 copy: cast here, unless the overlapped optimizer wrote it with the update
        // (autocast casts at every forward; so does every other mode here).
        if let Some(b) = &self.params_bf16 {
            if !(self.bf16_current && self.overlapped()) {
                rt.cast_f32_bf16(self.params.ptr(), b.ptr(), self.layout.total)?;
                self.bf16_current = true;
            }
        }
        let mut x = self.alloc_in("token_embeddings", DType::F32, bt * d)?;
        rt.embedding_fwd(
            self.tokens.ptr(),
            self.params.at(self.layout.embedding),
            x.ptr(),
            bt,
            d,
        )?;
        let keep = match (keep, self.run.checkpoint) {
            (false, _) => Keep::Nothing,
            (true, false) => Keep::All,
            (true, true) => Keep::Input,
        };
        let mut saved = Vec::with_capacity(if keep == Keep::Nothing { 0 } else { c.layers });
        for (li, &lo) in self.layout.layers.iter().enumerate() {
            saved.extend(self.block_forward(li, lo, &mut x, keep)?);
        }
        let rstd_final = self.alloc_in("ln_final", DType::F32, bt)?;
        let h_final = self.alloc_in("ln_final", act, bt * d)?;
        rt.rmsnorm_fwd(
            act,
            x.ptr(),
            self.params.at(self.layout.ln_final),
            h_final.ptr(),
            rstd_final.ptr(),
            bt,
            d,
            RMS_EPS,
        )?;
        let logits = self.alloc_in("lm_head", act, bt * v)?;
        self.linear_forward(
            self.linear(self.layout.head, d, v),
            Mat::new(h_final.ptr(), act),
            0.0,
            Mat::new(logits.ptr(), act),
        )?;
        Ok(Forward {
            layers: saved,
            x_final: x,
            rstd_final,
            h_final,
            logits,
        })
    }

    /// Block `li`: `x` becomes the block's output. What `keep` asks for is returned; the rest is
    /// freed here, newest first, inside the block's frame.
    fn block_forward(
        &self,
        li: usize,
        lo: LayerOffsets,
        x: &mut Buffer,
        keep: Keep,
    ) -> Result<Option<BlockKept>> {
        let rt = self.rt;
        let c = &self.run.model;
        let act = self.act();
        let (bt, d, f) = (self.run.tokens(), c.d_model, c.d_ff);
        let shape = self.attn_shape();
        let _layer = memory_frames::module_with(|| format!("layers.{li}"));
        let rstd1 = self.alloc_in("ln1", DType::F32, bt)?;
        let h1 = self.alloc_in("ln1", act, bt * d)?;
        rt.rmsnorm_fwd(
            act,
            x.ptr(),
            self.params.at(lo.ln1),
            h1.ptr(),
            rstd1.ptr(),
            bt,
            d,
            RMS_EPS,
        )?;
        let qkv = self.alloc_in("attn.qkv_proj", act, bt * 3 * d)?;
        self.linear_forward(
            self.linear(lo.wqkv, d, 3 * d),
            Mat::new(h1.ptr(), act),
            0.0,
            Mat::new(qkv.ptr(), act),
        )?;
        let q = self.alloc_in("attn.rope", act, bt * d)?;
        let k = self.alloc_in("attn.rope", act, bt * d)?;
        let vv = self.alloc_in("attn.rope", act, bt * d)?;
        rt.rope_fwd(
            act,
            qkv.ptr(),
            self.rope.ptr(),
            q.ptr(),
            k.ptr(),
            vv.ptr(),
            shape,
        )?;
        drop(qkv);
        let core = self.attention_forward(&q, &k, &vv)?;
        let attn = self.alloc_in("attn.merge_heads", act, bt * d)?;
        rt.heads_to_tokens(act, core.output.ptr(), attn.ptr(), shape)?;
        let attention = core.into_saved();
        // x_mid = x + attn Woᵀ: the GEMM's epilogue adds the residual into a new buffer.
        let x_mid = self.alloc_in("attn.output_proj", DType::F32, bt * d)?;
        self.linear_forward_residual(
            self.linear(lo.wo, d, d),
            Mat::new(attn.ptr(), act),
            x,
            &x_mid,
        )?;
        let rstd2 = self.alloc_in("ln2", DType::F32, bt)?;
        let h2 = self.alloc_in("ln2", act, bt * d)?;
        rt.rmsnorm_fwd(
            act,
            x_mid.ptr(),
            self.params.at(lo.ln2),
            h2.ptr(),
            rstd2.ptr(),
            bt,
            d,
            RMS_EPS,
        )?;
        let h13 = self.alloc_in("ffn.w1_w3", act, bt * 2 * f)?;
        self.linear_forward(
            self.linear(lo.w13, d, 2 * f),
            Mat::new(h2.ptr(), act),
            0.0,
            Mat::new(h13.ptr(), act),
        )?;
        let g = self.alloc_in("ffn.swiglu", act, bt * f)?;
        rt.swiglu_fwd(act, h13.ptr(), g.ptr(), bt, f)?;
        let x_out = self.alloc_in("ffn.w2", DType::F32, bt * d)?;
        self.linear_forward_residual(
            self.linear(lo.w2, f, d),
            Mat::new(g.ptr(), act),
            &x_mid,
            &x_out,
        )?;
        let x_in = std::mem::replace(x, x_out);
        // What is not kept is freed here, the block's input first and then the rest newest
        // first, before the block's frame is popped.
        Ok(match keep {
            Keep::All => Some(BlockKept::All(LayerSaved {
                x_in,
                rstd1,
                h1,
                q,
                k,
                v: vv,
                attention,
                attn,
                x_mid,
                rstd2,
                h2,
                h13,
                g,
            })),
            Keep::Input => Some(BlockKept::Input(x_in)),
            Keep::Nothing => None,
        })
    }

    /// Block `li`'s activations for its backward: those the forward kept, or, when it kept only
    /// the block's input, the block's forward run again from it inside the NVTX range
    /// `recompute`. The same kernels run in the same order on the same input and weights, with
    /// the GEMMs planned for the whole device as in the forward (not for the SMs the overlapped
    /// optimizer leaves them), so every tensor is bit for bit the one the forward computed. The
    /// block's output, which the backward does not need, is freed at once.
    pub(super) fn block_saved(&self, li: usize, kept: BlockKept) -> Result<LayerSaved> {
        let mut x = match kept {
            BlockKept::All(s) => return Ok(s),
            BlockKept::Input(x_in) => x_in,
        };
        let _r = range(nvtx::RECOMPUTE);
        let narrowed = self.rt.blas.sm_count_target();
        self.rt.blas.set_sm_count_target(0)?;
        let again = self.block_forward(li, self.layout.layers[li], &mut x, Keep::All);
        self.rt.blas.set_sm_count_target(narrowed)?;
        match again? {
            Some(BlockKept::All(s)) => Ok(s),
            _ => unreachable!("a block kept whole returns its activations"),
        }
    }

    /// The mean cross-entropy of `fwd`'s logits against the targets, into the loss scalar
    /// (read it with [`Model::loss`]), without a gradient.
    pub fn compute_loss(&mut self, fwd: &Forward) -> Result<()> {
        let bt = self.run.tokens();
        self.rt.cross_entropy(
            self.act(),
            fwd.logits.ptr(),
            self.targets.ptr(),
            self.row_loss.ptr(),
            0,
            bt,
            self.run.model.vocab,
        )?;
        self.rt.mean(self.row_loss.ptr(), bt, self.loss.ptr())
    }
}
