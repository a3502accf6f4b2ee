//! The CS336 `BasicsTransformerLM` on the GPU: forward, a hand-written backward of every
//! operation, cross-entropy loss and AdamW.
//!
//! Per block (pre-norm): `h = RMSNorm(x)`; `[q|k|v] = h [Wq;Wk;Wv]ᵀ`; RoPE on q and k; causal
//! attention `softmax(q kᵀ/√d_head) v` per head; `x += attn Woᵀ`; `h = RMSNorm(x)`;
//! `x += (silu(h W1ᵀ) ⊙ h W3ᵀ) W2ᵀ`. Then a final RMSNorm and the untied LM head.
//!
//! Precision: in fp32 everything is fp32. In bf16 the model follows autocast: master weights,
//! gradients, AdamW state and the residual stream stay fp32; each forward casts the weights to a
//! bf16 copy; GEMM operands and the activations between GEMMs are bf16 with fp32 accumulation;
//! RMSNorm, softmax, SwiGLU's gate and the loss compute in fp32 from whatever they read. Weight
//! gradients come out of cuBLAS in fp32 directly.
//!
//! Activations are allocated during the forward and freed as the backward consumes them, so the
//! memory in use rises and falls through a step as PyTorch's does. The forward of a `forward`
//! step keeps nothing. Every allocation goes through the runtime's
//! [`DeviceMemory`](crate::gpu::device_memory::DeviceMemory), each activation under a module frame
//! (`layers.3.attn.scores`, [`crate::memory::frames`]) that a recorded memory history keeps.

pub mod config;
pub mod params;
pub mod plan;
pub mod reference;

use crate::error::Result;
use crate::gpu::blas::{Gemm, Mat};
use crate::gpu::device_memory::{Buffer, DType};
use crate::gpu::ops::{AdamWStep, AttnShape, Runtime};
use crate::memory::frames as memory_frames;
use crate::nvtx::{self, range};
use config::{Mode, Precision, RunConfig, RMS_EPS, ROPE_THETA};
use params::{Init, ParamLayout};

/// AdamW's settings (the issue's: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight decay 0.01).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamW {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

impl Default for AdamW {
    fn default() -> AdamW {
        AdamW {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.01,
        }
    }
}

/// One block's activations kept for the backward.
struct LayerSaved {
    x_in: Buffer,
    rstd1: Buffer,
    h1: Buffer,
    q: Buffer,
    k: Buffer,
    v: Buffer,
    /// Attention probabilities `[B, H, T, T]`.
    p: Buffer,
    /// Attention output, token-major `[B*T, D]` (the input of Wo).
    attn: Buffer,
    x_mid: Buffer,
    rstd2: Buffer,
    h2: Buffer,
    h13: Buffer,
    g: Buffer,
}

/// What a forward leaves: the logits and, when the backward will follow, every block's
/// activations.
pub struct Forward {
    layers: Vec<LayerSaved>,
    x_final: Buffer,
    rstd_final: Buffer,
    h_final: Buffer,
    /// `[B*T, vocab]` in the activation type.
    pub logits: Buffer,
}

/// splitmix64: the host-side generator for seeds and tokens.
pub fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// `n` tokens uniform in `[0, vocab)` from `seed`.
pub fn random_tokens(n: usize, vocab: usize, seed: u64) -> Vec<i32> {
    (0..n)
        .map(|i| (splitmix64(seed ^ splitmix64(i as u64)) % vocab as u64) as i32)
        .collect()
}

/// The RoPE table PyTorch's reference builds: for position t and pair i, cos and sin of
/// `t * theta^(-2i/d_head)`, computed in f32 as it does.
pub fn rope_table(ctx: usize, d_head: usize) -> Vec<f32> {
    let half = d_head / 2;
    let mut cs = Vec::with_capacity(ctx * half * 2);
    for t in 0..ctx {
        for i in 0..half {
            let inv = ROPE_THETA.powf(-((2 * i) as f32 / d_head as f32));
            let angle = t as f32 * inv;
            cs.push(angle.cos());
            cs.push(angle.sin());
        }
    }
    cs
}

pub struct Model<'r> {
    rt: &'r Runtime,
    pub run: RunConfig,
    pub layout: ParamLayout,
    pub adamw: AdamW,
    params: Buffer,
    params_bf16: Option<Buffer>,
    grads: Option<Buffer>,
    adam_m: Option<Buffer>,
    adam_v: Option<Buffer>,
    rope: Buffer,
    tokens: Buffer,
    targets: Buffer,
    row_loss: Buffer,
    loss: Buffer,
    steps: u64,
}

impl<'r> Model<'r> {
    /// Allocate and initialise the model for `run` (weights from `seed`, random tokens and
    /// targets from `seed + 1`). Gradients exist for modes with a backward, AdamW state for
    /// `train`.
    pub fn new(rt: &'r Runtime, run: &RunConfig, seed: u64) -> Result<Model<'r>> {
        run.validate()?;
        rt.blas.set_tf32(run.tf32);
        let c = &run.model;
        let layout = ParamLayout::new(c);
        let mem = &rt.gpu.memory;
        let params = mem.alloc(DType::F32, layout.total)?;
        // Padding is zero, so that whole-buffer kernels (cast, AdamW) only ever see numbers.
        rt.gpu.memset_zero(params.ptr(), params.bytes())?;
        for (i, t) in layout.tensors.iter().enumerate() {
            match t.init {
                Init::TruncNormal { std } => rt.init_trunc_normal(
                    params.at(t.offset),
                    t.len(),
                    std,
                    splitmix64(seed.wrapping_add(i as u64)),
                )?,
                Init::Constant(v) => rt.fill(params.at(t.offset), t.len(), v)?,
            }
        }
        let zeroed = |len: usize| -> Result<Buffer> {
            let b = mem.alloc(DType::F32, len)?;
            rt.gpu.memset_zero(b.ptr(), b.bytes())?;
            Ok(b)
        };
        let grads = if run.mode.backward() {
            Some(zeroed(layout.total)?)
        } else {
            None
        };
        let (adam_m, adam_v) = if run.mode == Mode::Train {
            (Some(zeroed(layout.total)?), Some(zeroed(layout.total)?))
        } else {
            (None, None)
        };
        let params_bf16 = match run.precision {
            Precision::Bf16 => Some(mem.alloc(DType::Bf16, layout.total)?),
            Precision::Fp32 => None,
        };
        let rope = rt
            .gpu
            .upload(DType::F32, &rope_table(run.ctx, c.d_head()))?;
        let n = run.tokens();
        let tokens = rt
            .gpu
            .upload(DType::I32, &random_tokens(n, c.vocab, seed + 1))?;
        let targets = rt
            .gpu
            .upload(DType::I32, &random_tokens(n, c.vocab, splitmix64(seed + 1)))?;
        let row_loss = mem.alloc(DType::F32, n)?;
        let loss = zeroed(1)?;
        Ok(Model {
            rt,
            run: run.clone(),
            layout,
            adamw: AdamW::default(),
            params,
            params_bf16,
            grads,
            adam_m,
            adam_v,
            rope,
            tokens,
            targets,
            row_loss,
            loss,
            steps: 0,
        })
    }

    /// The element type of activations that feed GEMMs.
    pub fn act(&self) -> DType {
        match self.run.precision {
            Precision::Fp32 => DType::F32,
            Precision::Bf16 => DType::Bf16,
        }
    }

    /// A weight as a GEMM operand: the fp32 master or its bf16 copy.
    fn weight(&self, offset: usize) -> Mat {
        match &self.params_bf16 {
            Some(b) => Mat::new(b.at(offset), DType::Bf16),
            None => Mat::new(self.params.at(offset), DType::F32),
        }
    }

    fn grad(&self, offset: usize) -> Mat {
        let g = self
            .grads
            .as_ref()
            .expect("a backward runs only in modes that allocate gradients");
        Mat::new(g.at(offset), DType::F32)
    }

    fn alloc(&self, dtype: DType, len: usize) -> Result<Buffer> {
        self.rt.gpu.memory.alloc(dtype, len)
    }

    /// [`Model::alloc`] under the module frame `frame` (`attn.scores`, joined to the enclosing
    /// `layers.N`), so that a recorded memory history says what each activation is.
    fn alloc_in(&self, frame: &str, dtype: DType, len: usize) -> Result<Buffer> {
        let _f = memory_frames::module(frame);
        self.alloc(dtype, len)
    }

    /// Replace the input tokens and targets (`batch * ctx` each).
    pub fn set_tokens(&mut self, tokens: &[i32], targets: &[i32]) -> Result<()> {
        let n = self.run.tokens();
        if tokens.len() != n || targets.len() != n {
            return Err(crate::Error::InvalidConfig(format!(
                "expected {n} tokens and targets, got {} and {}",
                tokens.len(),
                targets.len()
            )));
        }
        self.tokens = self.rt.gpu.upload(DType::I32, tokens)?;
        self.targets = self.rt.gpu.upload(DType::I32, targets)?;
        Ok(())
    }

    /// One benchmark step of the run's mode, inside the `forward`, `backward` and `optimizer`
    /// ranges (the loss is computed inside `backward`, as the reference script does).
    pub fn step(&mut self) -> Result<()> {
        let fwd = {
            let _r = range(nvtx::FORWARD);
            self.forward(self.run.mode.backward())?
        };
        if !self.run.mode.backward() {
            return Ok(());
        }
        {
            let _r = range(nvtx::BACKWARD);
            self.backward(fwd)?;
        }
        if self.run.mode == Mode::Train {
            let _r = range(nvtx::OPTIMIZER);
            self.optimizer_step()?;
        }
        Ok(())
    }

    /// The forward pass. With `keep`, every block's activations are kept for [`Model::backward`].
    pub fn forward(&mut self, keep: bool) -> Result<Forward> {
        let rt = self.rt;
        let c = &self.run.model;
        let act = self.act();
        let (bt, d, f, v) = (self.run.tokens(), c.d_model, c.d_ff, c.vocab);
        let shape = AttnShape {
            batch: self.run.batch,
            ctx: self.run.ctx,
            heads: c.heads,
            d_head: c.d_head(),
        };
        let (t, dh, bh) = (shape.ctx, shape.d_head, shape.batch * shape.heads);
        if let Some(b) = &self.params_bf16 {
            rt.cast_f32_bf16(self.params.ptr(), b.ptr(), self.layout.total)?;
        }
        let mut x = self.alloc_in("token_embeddings", DType::F32, bt * d)?;
        rt.embedding_fwd(
            self.tokens.ptr(),
            self.params.at(self.layout.embedding),
            x.ptr(),
            bt,
            d,
        )?;
        let mut saved = Vec::with_capacity(if keep { c.layers } else { 0 });
        for (li, lo) in self.layout.layers.iter().enumerate() {
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
            rt.blas.gemm(
                Gemm {
                    ta: false,
                    tb: true,
                    m: bt,
                    n: 3 * d,
                    k: d,
                },
                1.0,
                Mat::new(h1.ptr(), act),
                self.weight(lo.wqkv),
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
            let o_heads = self.alloc_in("attn.context", act, bt * d)?;
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
                    Mat::new(vv.ptr(), act),
                    t * dh,
                    0.0,
                    Mat::new(o_heads.ptr(), act),
                    t * dh,
                    bh,
                )?;
            }
            let attn = self.alloc_in("attn.merge_heads", act, bt * d)?;
            rt.heads_to_tokens(act, o_heads.ptr(), attn.ptr(), shape)?;
            drop(o_heads);
            // x_mid = x + attn Woᵀ: the residual add rides on the GEMM's beta.
            let x_mid = self.alloc_in("attn.output_proj", DType::F32, bt * d)?;
            rt.gpu.copy(x_mid.ptr(), x.ptr(), x.bytes())?;
            rt.blas.gemm(
                Gemm {
                    ta: false,
                    tb: true,
                    m: bt,
                    n: d,
                    k: d,
                },
                1.0,
                Mat::new(attn.ptr(), act),
                self.weight(lo.wo),
                1.0,
                Mat::new(x_mid.ptr(), DType::F32),
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
            rt.blas.gemm(
                Gemm {
                    ta: false,
                    tb: true,
                    m: bt,
                    n: 2 * f,
                    k: d,
                },
                1.0,
                Mat::new(h2.ptr(), act),
                self.weight(lo.w13),
                0.0,
                Mat::new(h13.ptr(), act),
            )?;
            let g = self.alloc_in("ffn.swiglu", act, bt * f)?;
            rt.swiglu_fwd(act, h13.ptr(), g.ptr(), bt, f)?;
            let x_out = self.alloc_in("ffn.w2", DType::F32, bt * d)?;
            rt.gpu.copy(x_out.ptr(), x_mid.ptr(), x_mid.bytes())?;
            rt.blas.gemm(
                Gemm {
                    ta: false,
                    tb: true,
                    m: bt,
                    n: d,
                    k: f,
                },
                1.0,
                Mat::new(g.ptr(), act),
                self.weight(lo.w2),
                1.0,
                Mat::new(x_out.ptr(), DType::F32),
            )?;
            let x_in = std::mem::replace(&mut x, x_out);
            if keep {
                saved.push(LayerSaved {
                    x_in,
                    rstd1,
                    h1,
                    q,
                    k,
                    v: vv,
                    p,
                    attn,
                    x_mid,
                    rstd2,
                    h2,
                    h13,
                    g,
                });
            }
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
        rt.blas.gemm(
            Gemm {
                ta: false,
                tb: true,
                m: bt,
                n: v,
                k: d,
            },
            1.0,
            Mat::new(h_final.ptr(), act),
            self.weight(self.layout.head),
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

    /// Loss and the backward of every operation; fills the gradient buffer (each gradient is
    /// written, not accumulated). Activations are freed as they are used.
    pub fn backward(&mut self, fwd: Forward) -> Result<()> {
        let rt = self.rt;
        let c = &self.run.model;
        let act = self.act();
        let bf16 = act == DType::Bf16;
        let (bt, d, f, v) = (self.run.tokens(), c.d_model, c.d_ff, c.vocab);
        let shape = AttnShape {
            batch: self.run.batch,
            ctx: self.run.ctx,
            heads: c.heads,
            d_head: c.d_head(),
        };
        let (t, dh, bh) = (shape.ctx, shape.d_head, shape.batch * shape.heads);
        let scale = 1.0 / (dh as f32).sqrt();
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
        let head = self.layout.head;
        rt.blas.gemm(
            Gemm {
                ta: true,
                tb: false,
                m: v,
                n: d,
                k: bt,
            },
            1.0,
            Mat::new(dlogits.ptr(), act),
            Mat::new(h_final.ptr(), act),
            0.0,
            self.grad(head),
        )?;
        let dh_final = self.alloc_in("lm_head", DType::F32, bt * d)?;
        rt.blas.gemm(
            Gemm {
                ta: false,
                tb: false,
                m: bt,
                n: d,
                k: v,
            },
            1.0,
            Mat::new(dlogits.ptr(), act),
            self.weight(head),
            0.0,
            Mat::new(dh_final.ptr(), DType::F32),
        )?;
        drop((dlogits, h_final));
        // dx: gradient of the residual stream (fp32), and its bf16 copy for bf16 GEMMs.
        let dx = self.alloc_in("ln_final", DType::F32, bt * d)?;
        let dx_bf16 = if bf16 {
            Some(self.alloc_in("ln_final", DType::Bf16, bt * d)?)
        } else {
            None
        };
        let dxb_ptr = dx_bf16.as_ref().map_or(0, Buffer::ptr);
        let dx_act = Mat::new(if bf16 { dxb_ptr } else { dx.ptr() }, act);
        let ln_f = self.layout.ln_final;
        rt.rmsnorm_bwd(
            dh_final.ptr(),
            x_final.ptr(),
            self.params.at(ln_f),
            rstd_final.ptr(),
            0,
            dx.ptr(),
            dxb_ptr,
            bt,
            d,
        )?;
        rt.rmsnorm_dw(
            dh_final.ptr(),
            x_final.ptr(),
            rstd_final.ptr(),
            self.grad(ln_f).ptr,
            bt,
            d,
        )?;
        drop((dh_final, x_final, rstd_final));

        for li in (0..c.layers).rev() {
            let lo = self.layout.layers[li];
            let _layer = memory_frames::module_with(|| format!("layers.{li}"));
            let s = layers.pop().expect("one saved block per layer");
            // FFN: x_out = x_mid + g W2ᵀ, g = silu(h13[:, :f]) * h13[:, f:].
            rt.blas.gemm(
                Gemm {
                    ta: true,
                    tb: false,
                    m: d,
                    n: f,
                    k: bt,
                },
                1.0,
                dx_act,
                Mat::new(s.g.ptr(), act),
                0.0,
                self.grad(lo.w2),
            )?;
            let dg = self.alloc_in("ffn.w2", act, bt * f)?;
            rt.blas.gemm(
                Gemm {
                    ta: false,
                    tb: false,
                    m: bt,
                    n: f,
                    k: d,
                },
                1.0,
                dx_act,
                self.weight(lo.w2),
                0.0,
                Mat::new(dg.ptr(), act),
            )?;
            drop(s.g);
            let dh13 = self.alloc_in("ffn.swiglu", act, bt * 2 * f)?;
            rt.swiglu_bwd(act, s.h13.ptr(), dg.ptr(), dh13.ptr(), bt, f)?;
            drop((dg, s.h13));
            rt.blas.gemm(
                Gemm {
                    ta: true,
                    tb: false,
                    m: 2 * f,
                    n: d,
                    k: bt,
                },
                1.0,
                Mat::new(dh13.ptr(), act),
                Mat::new(s.h2.ptr(), act),
                0.0,
                self.grad(lo.w13),
            )?;
            let dh2 = self.alloc_in("ffn.w1_w3", DType::F32, bt * d)?;
            rt.blas.gemm(
                Gemm {
                    ta: false,
                    tb: false,
                    m: bt,
                    n: d,
                    k: 2 * f,
                },
                1.0,
                Mat::new(dh13.ptr(), act),
                self.weight(lo.w13),
                0.0,
                Mat::new(dh2.ptr(), DType::F32),
            )?;
            drop((dh13, s.h2));
            rt.rmsnorm_bwd(
                dh2.ptr(),
                s.x_mid.ptr(),
                self.params.at(lo.ln2),
                s.rstd2.ptr(),
                dx.ptr(),
                dx.ptr(),
                dxb_ptr,
                bt,
                d,
            )?;
            rt.rmsnorm_dw(
                dh2.ptr(),
                s.x_mid.ptr(),
                s.rstd2.ptr(),
                self.grad(lo.ln2).ptr,
                bt,
                d,
            )?;
            drop((dh2, s.x_mid, s.rstd2));

            // Attention output projection: x_mid = x + attn Woᵀ.
            rt.blas.gemm(
                Gemm {
                    ta: true,
                    tb: false,
                    m: d,
                    n: d,
                    k: bt,
                },
                1.0,
                dx_act,
                Mat::new(s.attn.ptr(), act),
                0.0,
                self.grad(lo.wo),
            )?;
            let dattn = self.alloc_in("attn.output_proj", act, bt * d)?;
            rt.blas.gemm(
                Gemm {
                    ta: false,
                    tb: false,
                    m: bt,
                    n: d,
                    k: d,
                },
                1.0,
                dx_act,
                self.weight(lo.wo),
                0.0,
                Mat::new(dattn.ptr(), act),
            )?;
            drop(s.attn);
            let do_heads = self.alloc_in("attn.merge_heads", act, bt * d)?;
            rt.tokens_to_heads(act, dattn.ptr(), do_heads.ptr(), shape)?;
            drop(dattn);

            // Attention: o = P v, P = softmax(q kᵀ * scale).
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
                Mat::new(s.v.ptr(), act),
                t * dh,
                0.0,
                Mat::new(dp.ptr(), act),
                t * t,
                bh,
            )?;
            let dv = self.alloc_in("attn.context", act, bt * d)?;
            rt.blas.gemm_batched(
                Gemm {
                    ta: true,
                    tb: false,
                    m: t,
                    n: dh,
                    k: t,
                },
                1.0,
                Mat::new(s.p.ptr(), act),
                t * t,
                Mat::new(do_heads.ptr(), act),
                t * dh,
                0.0,
                Mat::new(dv.ptr(), act),
                t * dh,
                bh,
            )?;
            drop((do_heads, s.v));
            rt.softmax_causal_bwd(act, s.p.ptr(), dp.ptr(), t, bh * t)?;
            drop(s.p);
            let dq = self.alloc_in("attn.scores", act, bt * d)?;
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
                Mat::new(s.k.ptr(), act),
                t * dh,
                0.0,
                Mat::new(dq.ptr(), act),
                t * dh,
                bh,
            )?;
            let dk = self.alloc_in("attn.scores", act, bt * d)?;
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
                Mat::new(s.q.ptr(), act),
                t * dh,
                0.0,
                Mat::new(dk.ptr(), act),
                t * dh,
                bh,
            )?;
            drop((dp, s.q, s.k));
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
            rt.blas.gemm(
                Gemm {
                    ta: true,
                    tb: false,
                    m: 3 * d,
                    n: d,
                    k: bt,
                },
                1.0,
                Mat::new(dqkv.ptr(), act),
                Mat::new(s.h1.ptr(), act),
                0.0,
                self.grad(lo.wqkv),
            )?;
            let dh1 = self.alloc_in("attn.qkv_proj", DType::F32, bt * d)?;
            rt.blas.gemm(
                Gemm {
                    ta: false,
                    tb: false,
                    m: bt,
                    n: d,
                    k: 3 * d,
                },
                1.0,
                Mat::new(dqkv.ptr(), act),
                self.weight(lo.wqkv),
                0.0,
                Mat::new(dh1.ptr(), DType::F32),
            )?;
            drop((dqkv, s.h1));
            rt.rmsnorm_bwd(
                dh1.ptr(),
                s.x_in.ptr(),
                self.params.at(lo.ln1),
                s.rstd1.ptr(),
                dx.ptr(),
                dx.ptr(),
                dxb_ptr,
                bt,
                d,
            )?;
            rt.rmsnorm_dw(
                dh1.ptr(),
                s.x_in.ptr(),
                s.rstd1.ptr(),
                self.grad(lo.ln1).ptr,
                bt,
                d,
            )?;
        }

        // Embedding: rows of the gradient scatter-add into the looked-up rows.
        let emb = self.layout.embedding;
        rt.gpu.memset_zero(self.grad(emb).ptr, v * d * 4)?;
        rt.embedding_bwd(self.tokens.ptr(), dx.ptr(), self.grad(emb).ptr, bt, d)?;
        Ok(())
    }

    /// One AdamW step over every parameter (one kernel over the flat buffers).
    pub fn optimizer_step(&mut self) -> Result<()> {
        self.steps += 1;
        let a = self.adamw;
        let h = AdamWStep::new(self.steps, a.lr, a.beta1, a.beta2, a.eps, a.weight_decay);
        let (Some(g), Some(m), Some(v)) = (&self.grads, &self.adam_m, &self.adam_v) else {
            return Err(crate::Error::InvalidConfig(
                "the optimizer runs only in train mode".to_owned(),
            ));
        };
        self.rt.adamw(
            self.params.ptr(),
            g.ptr(),
            m.ptr(),
            v.ptr(),
            self.layout.total,
            h,
        )
    }

    /// The loss of the last backward (or [`Model::compute_loss`]).
    pub fn loss(&self) -> Result<f32> {
        Ok(self.rt.gpu.download::<f32>(self.loss.ptr(), 1)?[0])
    }

    /// The flat fp32 parameter buffer (see [`ParamLayout`] for where each tensor is).
    pub fn download_params(&self) -> Result<Vec<f32>> {
        self.rt.gpu.download(self.params.ptr(), self.layout.total)
    }

    /// The flat fp32 gradient buffer, after a backward.
    pub fn download_grads(&self) -> Result<Vec<f32>> {
        let g = self.grads.as_ref().ok_or_else(|| {
            crate::Error::InvalidConfig("no gradients in forward mode".to_owned())
        })?;
        self.rt.gpu.download(g.ptr(), self.layout.total)
    }

    /// Overwrite the parameters with a flat buffer of the layout's length.
    pub fn upload_params(&mut self, flat: &[f32]) -> Result<()> {
        if flat.len() != self.layout.total {
            return Err(crate::Error::InvalidConfig(format!(
                "expected {} parameters (padding included), got {}",
                self.layout.total,
                flat.len()
            )));
        }
        let fresh = self.rt.gpu.upload(DType::F32, flat)?;
        self.params = fresh;
        Ok(())
    }

    /// Logits as fp32 on the host (bf16 logits widened exactly).
    pub fn download_logits(&self, fwd: &Forward) -> Result<Vec<f32>> {
        let n = fwd.logits.len();
        match fwd.logits.dtype() {
            DType::Bf16 => {
                let raw: Vec<u16> = self.rt.gpu.download(fwd.logits.ptr(), n)?;
                Ok(raw
                    .into_iter()
                    .map(|b| f32::from_bits((b as u32) << 16))
                    .collect())
            }
            _ => self.rt.gpu.download(fwd.logits.ptr(), n),
        }
    }

    /// The input tokens and targets.
    pub fn tokens(&self) -> Result<(Vec<i32>, Vec<i32>)> {
        let n = self.run.tokens();
        Ok((
            self.rt.gpu.download(self.tokens.ptr(), n)?,
            self.rt.gpu.download(self.targets.ptr(), n)?,
        ))
    }
}
