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
//! step keeps nothing. With activation checkpointing ([`config::RunConfig::checkpoint`]) each
//! block keeps only its input, and the backward runs the block's forward again, inside the NVTX
//! range `recompute`, just before the block's backward. Every allocation goes through the runtime's
//! [`DeviceMemory`](crate::gpu::device_memory::DeviceMemory), each activation under a module frame
//! (`layers.3.attn.scores`, [`crate::memory::frames`]) that a recorded memory history keeps. The
//! plan ([`plan`]) counts memory in this order of allocations and frees, and recorded snapshots
//! show it: a change to the order is a change to every memory figure.
//!
//! This module holds the [`Model`] (its buffers, tokens and host-side helpers); the step is spread
//! over `forward` (embedding, blocks, final norm and head, the loss), [`attention`] (the attention
//! core of a block, forward and backward, naive or FlashAttention-2 as the run's
//! [`config::Attention`] says; the attention benchmark calls it too), `backward` (loss gradient to
//! the embedding, through `linear`'s and the norm's backward helpers) and `optimizer` (AdamW, by
//! default each block's update beside the rest of the backward on a second stream); `graph`
//! captures the whole step into CUDA graphs and replays it ([`StepOptions::cuda_graph`]).
//! [`config`], [`params`], [`plan`] and [`reference`](mod@reference) need no GPU.

pub mod attention;
pub mod config;
pub mod dtypes;
pub mod params;
pub mod plan;
pub mod reference;

mod backward;
mod forward;
mod graph;
mod linear;
mod optimizer;

pub use forward::Forward;
pub use optimizer::{
    default_optimizer_sms, AdamW, OptimizerSchedule, StepOptions, BF16_OPTIMIZER_SMS,
};

use std::cell::RefCell;
use std::rc::Rc;

use crate::error::Result;
use crate::gpu::blas::Mat;
use crate::gpu::device_memory::{Buffer, DType};
use crate::gpu::ops::{AttnShape, Runtime};
use crate::memory::frames as memory_frames;
use crate::nvtx::{self, range};
use attention::{AttentionCore, AttentionForward, AttentionSaved, Input};
use config::{Mode, Precision, RunConfig, ROPE_THETA};
use optimizer::StepEvents;
use params::{Init, ParamLayout};

/// A buffer of `len` elements of `dtype` from the runtime's device memory, under the module frame
/// `frame` (`attn.scores`, joined to the enclosing `layers.N`), so that a recorded memory history
/// says what each activation is.
pub(crate) fn alloc_in(rt: &Runtime, frame: &str, dtype: DType, len: usize) -> Result<Buffer> {
    let _f = memory_frames::module(frame);
    rt.gpu.memory.alloc(dtype, len)
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
    /// How steps run (the optimizer's schedule); changeable between steps.
    pub options: StepOptions,
    params: Buffer,
    params_bf16: Option<Buffer>,
    /// Whether `params_bf16` holds the current parameters rounded (written by the forward's
    /// cast or the overlapped optimizer; stale after any other change of the parameters).
    bf16_current: bool,
    /// What orders the optimizer's stream against the main one (`train` only).
    events: Option<StepEvents>,
    grads: Option<Buffer>,
    adam_m: Option<Buffer>,
    adam_v: Option<Buffer>,
    rope: Buffer,
    tokens: Buffer,
    targets: Buffer,
    row_loss: Buffer,
    loss: Buffer,
    steps: u64,
    /// The step's capture while it is captured into CUDA graphs ([`graph`]).
    capture: Option<Rc<RefCell<graph::Capture>>>,
    /// The captured step, replayed while the options ask for CUDA graphs.
    graphs: Option<graph::StepGraphs>,
    /// The options of the last step when it ran under CUDA graph options (eagerly or not) and
    /// nothing was replaced since: the next step under them may be captured.
    graph_warm: Option<StepOptions>,
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
        let events = if run.mode == Mode::Train {
            Some(StepEvents::new(rt)?)
        } else {
            None
        };
        Ok(Model {
            rt,
            run: run.clone(),
            layout,
            adamw: AdamW::default(),
            options: StepOptions::default(),
            params,
            params_bf16,
            bf16_current: false,
            events,
            grads,
            adam_m,
            adam_v,
            rope,
            tokens,
            targets,
            row_loss,
            loss,
            steps: 0,
            capture: None,
            graphs: None,
            graph_warm: None,
        })
    }

    /// The element type of activations that feed GEMMs, from the run's autocast policy.
    pub fn act(&self) -> DType {
        dtypes::activation(self.run.precision)
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

    /// An activation under the module frame `frame` (see [`alloc_in`]).
    fn alloc_in(&self, frame: &str, dtype: DType, len: usize) -> Result<Buffer> {
        alloc_in(self.rt, frame, dtype, len)
    }

    /// The shape of every attention of the run.
    fn attn_shape(&self) -> AttnShape {
        let c = &self.run.model;
        AttnShape {
            batch: self.run.batch,
            ctx: self.run.ctx,
            heads: c.heads,
            d_head: c.d_head(),
        }
    }

    /// The attention core of every block: the run's implementation, causal.
    fn attention_core(&self) -> AttentionCore<'r> {
        AttentionCore {
            rt: self.rt,
            attention: self.run.attention,
            act: self.act(),
            shape: self.attn_shape(),
            causal: true,
        }
    }

    fn attention_forward(&self, q: &Buffer, k: &Buffer, v: &Buffer) -> Result<AttentionForward> {
        self.attention_core().forward(q, k, v)
    }

    fn attention_backward(
        &self,
        d_out: Buffer,
        q: Buffer,
        k: Buffer,
        v: Buffer,
        saved: AttentionSaved,
    ) -> Result<(Buffer, Buffer, Buffer)> {
        self.attention_core().backward(
            Input::Owned(d_out),
            Input::Owned(q),
            Input::Owned(k),
            Input::Owned(v),
            saved,
        )
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
        self.drop_graphs();
        Ok(())
    }

    /// One benchmark step of the run's mode, inside the `forward`, `backward` and `optimizer`
    /// ranges (the loss is computed inside `backward`, as the reference script does). With the
    /// overlapped optimizer the backward's range is cut by one `optimizer` range per update
    /// launched beside it, and the step ends with the main stream waiting for the optimizer's.
    /// With [`StepOptions::cuda_graph`], the same step replayed from CUDA graphs (the `graph`
    /// module).
    pub fn step(&mut self) -> Result<()> {
        if self.options.cuda_graph {
            return self.graph_step();
        }
        self.graph_warm = None;
        self.eager_step()
    }

    /// The step, kernel by kernel (or captured, while a capture is on).
    fn eager_step(&mut self) -> Result<()> {
        let fwd = {
            let _r = range(nvtx::FORWARD);
            self.forward(self.run.mode.backward())?
        };
        if !self.run.mode.backward() {
            return Ok(());
        }
        if self.overlapped() {
            let mut updates = self.begin_updates();
            updates.backward = Some(range(nvtx::BACKWARD));
            let embedding = self.backward_with(fwd, Some(&mut updates))?;
            updates.backward = None;
            let _r = range(nvtx::OPTIMIZER);
            return self.finish_updates(updates, embedding.0, embedding.1);
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
        self.bf16_current = false;
        self.drop_graphs();
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
