//! `collect plan`: what a configuration costs before it runs, with no GPU. Parameters (as PyTorch
//! counts them), matrix FLOPs per step (forward, backward, the step of the mode), and the device
//! memory this implementation holds: parameters, gradients, AdamW state, the bf16 weight copy,
//! the activations kept for the backward, the logits and their gradient, and the peak those add
//! up to, plus the size of one residual-stream tensor (batch × ctx × d_model × 4 bytes: the
//! residual stays fp32 under autocast too).
//!
//! The memory model replays the transformer's forward and backward allocation for allocation
//! (naive or FlashAttention-2, as the run's attention says), so the peak is the byte count
//! `collect bench` measures. A configuration that would not run is planned all the same, with a
//! note saying why. Pure arithmetic; rendering through `analyze::render`.

use analyze::render::cells::format_bytes;
use analyze::render::{Cell, Document, Section, Table};
use serde_json::{json, Value};

use crate::gpu::blas::WORKSPACE_BYTES;
use crate::gpu::flash;
use crate::transformer::config::{Attention, Mode, Precision, RunConfig};
use crate::transformer::params::ParamLayout;

/// cuBLAS workspace, as [`crate::gpu::blas`] allocates it.
pub const CUBLAS_WORKSPACE: u64 = WORKSPACE_BYTES as u64;

#[derive(Clone, Debug, PartialEq)]
pub struct Flops {
    /// Matrix FLOPs of one forward (2 per multiply-add; attention over the full T×T square, as
    /// computed).
    pub forward: u64,
    /// Twice the forward's (the gradients of both operands of every product).
    pub backward: u64,
    /// FLOPs of one step of the configuration's mode.
    pub per_step: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Memory {
    pub parameters: u64,
    pub gradients: u64,
    pub optimizer_state: u64,
    pub bf16_weights: u64,
    /// Activations kept for the backward (all blocks and the final norm); in `forward` mode, the
    /// largest set alive at once (one block's).
    pub activations: u64,
    /// Of the activations, what the attention cores keep for their backward: `P` on the naive
    /// path, the output and `L` on the flash path (0 in `forward` mode, which keeps nothing).
    pub attention: u64,
    /// Logits, plus their gradient when there is a backward.
    pub logits: u64,
    /// cuBLAS workspace, RoPE table, tokens, per-row losses.
    pub other: u64,
    /// The most held at once during a step.
    pub peak: u64,
    /// One `[batch, ctx, d_model]` fp32 tensor.
    pub residual_stream: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub run: RunConfig,
    pub parameters: u64,
    pub flops: Flops,
    pub memory: Memory,
}

pub fn plan(run: &RunConfig) -> Plan {
    let c = &run.model;
    let (b, t) = (run.batch as u64, run.ctx as u64);
    let (d, f, h, v, l) = (
        c.d_model as u64,
        c.d_ff as u64,
        c.heads as u64,
        c.vocab as u64,
        c.layers as u64,
    );
    let bt = b * t;
    let per_layer_matmul = 2 * bt * (4 * d * d + 3 * d * f) + 2 * 2 * b * t * t * d;
    let forward = l * per_layer_matmul + 2 * bt * d * v;
    let backward = 2 * forward;
    let per_step = match run.mode {
        Mode::Forward => forward,
        Mode::ForwardBackward | Mode::Train => forward + backward,
    };

    let total = ParamLayout::new(c).total as u64;
    let parameters = total * 4;
    let gradients = if run.mode.backward() { total * 4 } else { 0 };
    let optimizer_state = if run.mode == Mode::Train {
        2 * total * 4
    } else {
        0
    };
    let bf16_weights = if run.precision == Precision::Bf16 {
        total * 2
    } else {
        0
    };
    let other = CUBLAS_WORKSPACE + t * (d / h) * 4 + 3 * bt * 4 + 4;
    let persistent = parameters + gradients + optimizer_state + bf16_weights + other;
    let step = replay_step(run, persistent);
    let logits_one = bt * v * run.precision.activation_bytes() as u64;
    Plan {
        run: run.clone(),
        parameters: c.parameters(),
        flops: Flops {
            forward,
            backward,
            per_step,
        },
        memory: Memory {
            parameters,
            gradients,
            optimizer_state,
            bf16_weights,
            activations: step.activations,
            attention: step.attention,
            logits: if run.mode.backward() {
                2 * logits_one
            } else {
                logits_one
            },
            other,
            peak: step.peak,
            residual_stream: bt * d * 4,
        },
    }
}

/// Bytes in use and the most at once, counted as the device-memory layer counts them: every
/// allocation adds its size, every free takes it away.
struct Ledger {
    in_use: u64,
    peak: u64,
}

impl Ledger {
    fn alloc(&mut self, bytes: u64) -> u64 {
        self.in_use += bytes;
        self.peak = self.peak.max(self.in_use);
        bytes
    }

    fn free(&mut self, held: &[u64]) {
        for b in held {
            self.in_use -= b;
        }
    }
}

/// The sizes, in bytes, of the tensors one step allocates.
struct Sizes {
    /// Activation element (4 in fp32, 2 in bf16).
    a: u64,
    bt: u64,
    d: u64,
    f: u64,
    v: u64,
    /// Batch × heads × positions: the rows of attention.
    rows: u64,
    /// `[B, H, T, T]` elements.
    scores: u64,
    /// The FlashAttention kernel width of a head (the head's own, or the next wider).
    width: u64,
    d_head: u64,
}

/// What an attention core keeps between its forward and its backward.
#[derive(Clone, Copy)]
enum AttentionKept {
    Naive { p: u64 },
    Flash { o: u64, lse: u64 },
}

impl AttentionKept {
    fn bytes(self) -> u64 {
        match self {
            AttentionKept::Naive { p } => p,
            AttentionKept::Flash { o, lse } => o + lse,
        }
    }
}

/// One block's tensors kept for the backward (the forward's `LayerSaved`), in bytes.
#[derive(Clone, Copy)]
struct LayerKept {
    x_in: u64,
    rstd1: u64,
    h1: u64,
    q: u64,
    k: u64,
    v: u64,
    attention: AttentionKept,
    attn: u64,
    x_mid: u64,
    rstd2: u64,
    h2: u64,
    h13: u64,
    g: u64,
}

impl LayerKept {
    fn all(&self) -> [u64; 13] {
        [
            self.x_in,
            self.rstd1,
            self.h1,
            self.q,
            self.k,
            self.v,
            self.attention.bytes(),
            self.attn,
            self.x_mid,
            self.rstd2,
            self.h2,
            self.h13,
            self.g,
        ]
    }
}

/// What [`replay_step`] finds.
struct StepMemory {
    peak: u64,
    activations: u64,
    attention: u64,
}

/// One step of `run` replayed allocation by allocation, in the order the transformer makes them
/// (`forward.rs`, `attention.rs`, `backward.rs`), from `persistent` bytes in use: the peak is the
/// byte count the device-memory layer measures.
fn replay_step(run: &RunConfig, persistent: u64) -> StepMemory {
    let c = &run.model;
    let bt = run.tokens() as u64;
    let rows = (run.batch * c.heads * run.ctx) as u64;
    let d_head = c.d_head() as u64;
    let s = Sizes {
        a: run.precision.activation_bytes() as u64,
        bt,
        d: c.d_model as u64,
        f: c.d_ff as u64,
        v: c.vocab as u64,
        rows,
        scores: rows * run.ctx as u64,
        width: flash::kernel_width(c.d_head()).map_or(d_head, |w| w as u64),
        d_head,
    };
    let (a, d) = (s.a, s.d);
    let m = &mut Ledger {
        in_use: persistent,
        peak: persistent,
    };
    let keep = run.mode.backward();

    // Forward: the embedding's output, then each block.
    let mut x = m.alloc(bt * d * 4);
    let mut layers = Vec::with_capacity(c.layers);
    for _ in 0..c.layers {
        let rstd1 = m.alloc(bt * 4);
        let h1 = m.alloc(bt * d * a);
        let qkv = m.alloc(bt * 3 * d * a);
        let (q, k, v) = (
            m.alloc(bt * d * a),
            m.alloc(bt * d * a),
            m.alloc(bt * d * a),
        );
        m.free(&[qkv]);
        let (output, attention, output_kept) = attention_forward(m, &s, run.attention);
        let attn = m.alloc(bt * d * a);
        if !output_kept {
            m.free(&[output]);
        }
        let x_mid = m.alloc(bt * d * 4);
        let rstd2 = m.alloc(bt * 4);
        let h2 = m.alloc(bt * d * a);
        let h13 = m.alloc(bt * 2 * s.f * a);
        let g = m.alloc(bt * s.f * a);
        let x_out = m.alloc(bt * d * 4);
        let layer = LayerKept {
            x_in: std::mem::replace(&mut x, x_out),
            rstd1,
            h1,
            q,
            k,
            v,
            attention,
            attn,
            x_mid,
            rstd2,
            h2,
            h13,
            g,
        };
        if keep {
            layers.push(layer);
        } else {
            m.free(&layer.all());
        }
    }
    // Without a backward nothing is kept: the most alive at once in the blocks is one block's.
    let blocks_peak = m.peak;
    let rstd_final = m.alloc(bt * 4);
    let h_final = m.alloc(bt * d * a);
    let logits = m.alloc(bt * s.v * a);
    if !keep {
        return StepMemory {
            peak: m.peak,
            activations: blocks_peak - persistent,
            attention: 0,
        };
    }
    let activations = m.in_use - persistent - logits;
    let attention = layers.iter().map(|l| l.attention.bytes()).sum();

    // Backward: the loss, the head and the final norm, then each block from the last.
    let dlogits = m.alloc(bt * s.v * a);
    m.free(&[logits]);
    let dh_final = m.alloc(bt * d * 4);
    m.free(&[dlogits, h_final]);
    let dx = m.alloc(bt * d * 4);
    let dx_bf16 = if a == 2 { m.alloc(bt * d * 2) } else { 0 };
    m.free(&[dh_final, x, rstd_final]);
    while let Some(l) = layers.pop() {
        let dg = m.alloc(bt * s.f * a);
        m.free(&[l.g]);
        let dh13 = m.alloc(bt * 2 * s.f * a);
        m.free(&[dg, l.h13]);
        let dh2 = m.alloc(bt * d * 4);
        // dh13 holds the norm's partial sums until the norm's backward is done.
        m.free(&[l.h2]);
        m.free(&[dh13, dh2, l.x_mid, l.rstd2]);
        let dattn = m.alloc(bt * d * a);
        m.free(&[l.attn]);
        let d_out = m.alloc(bt * d * a);
        m.free(&[dattn]);
        let grads = attention_backward(m, &s, d_out, &l);
        let dqkv = m.alloc(bt * 3 * d * a);
        m.free(&grads);
        let dh1 = m.alloc(bt * d * 4);
        m.free(&[l.h1]);
        m.free(&[dh1, dqkv, l.x_in, l.rstd1]);
    }
    m.free(&[dx_bf16, dx]);
    StepMemory {
        peak: m.peak,
        activations,
        attention,
    }
}

/// The attention core's forward ([`crate::transformer::attention`]): the output, what is kept,
/// and whether the output itself is what is kept (so the block does not free it).
fn attention_forward(
    m: &mut Ledger,
    s: &Sizes,
    attention: Attention,
) -> (u64, AttentionKept, bool) {
    let (a, bt, d) = (s.a, s.bt, s.d);
    match attention {
        Attention::Naive => {
            let p = m.alloc(s.scores * a);
            let output = m.alloc(bt * d * a);
            (output, AttentionKept::Naive { p }, false)
        }
        Attention::Flash if s.width == s.d_head => {
            let output = m.alloc(bt * d * a);
            let lse = m.alloc(s.rows * 4);
            (output, AttentionKept::Flash { o: output, lse }, true)
        }
        Attention::Flash => {
            let padded = s.rows * s.width * a;
            let inputs = [m.alloc(padded), m.alloc(padded), m.alloc(padded)];
            let o = m.alloc(padded);
            let lse = m.alloc(s.rows * 4);
            m.free(&inputs);
            let output = m.alloc(bt * d * a);
            (output, AttentionKept::Flash { o, lse }, false)
        }
    }
}

/// The attention core's backward, from the output's gradient `d_out` and the block's `q`, `k`,
/// `v` and kept tensors (each freed once used); returns the sizes of `dq`, `dk`, `dv`.
fn attention_backward(m: &mut Ledger, s: &Sizes, d_out: u64, l: &LayerKept) -> [u64; 3] {
    let (a, bt, d) = (s.a, s.bt, s.d);
    match l.attention {
        AttentionKept::Naive { p } => {
            let dp = m.alloc(s.scores * a);
            let dv = m.alloc(bt * d * a);
            m.free(&[d_out, l.v]);
            m.free(&[p]);
            let (dq, dk) = (m.alloc(bt * d * a), m.alloc(bt * d * a));
            m.free(&[dp, l.q, l.k]);
            [dq, dk, dv]
        }
        AttentionKept::Flash { o, lse } => {
            let padded = s.width != s.d_head;
            let n = s.rows * s.width;
            let inputs = if padded {
                let p = [
                    m.alloc(n * a),
                    m.alloc(n * a),
                    m.alloc(n * a),
                    m.alloc(n * a),
                ];
                m.free(&[d_out, l.q, l.k, l.v]);
                p
            } else {
                [d_out, l.q, l.k, l.v]
            };
            let delta = m.alloc(s.rows * 4);
            let dq_accum = m.alloc(n * 4);
            let dq_bf16 = (a == 2).then(|| m.alloc(n * a));
            let (dk, dv) = (m.alloc(n * a), m.alloc(n * a));
            m.free(&inputs);
            m.free(&[o, lse, delta]);
            let dq = match dq_bf16 {
                Some(dq) => {
                    m.free(&[dq_accum]);
                    dq
                }
                None => dq_accum,
            };
            if !padded {
                return [dq, dk, dv];
            }
            let mut cut = [0; 3];
            for (out, g) in cut.iter_mut().zip([dq, dk, dv]) {
                *out = m.alloc(bt * d * a);
                m.free(&[g]);
            }
            cut
        }
    }
}

impl Plan {
    pub fn to_json(&self) -> Value {
        let c = &self.run.model;
        let m = &self.memory;
        json!({
            "config": {
                "size": c.label(),
                "d_model": c.d_model,
                "d_ff": c.d_ff,
                "layers": c.layers,
                "heads": c.heads,
                "vocab": c.vocab,
                "ctx": self.run.ctx,
                "batch": self.run.batch,
                "mode": self.run.mode.as_str(),
                "precision": self.run.precision.as_str(),
                "attention": self.run.attention.as_str(),
            },
            "parameters": self.parameters,
            "flops_per_step": self.flops.per_step,
            "flops": {
                "forward": self.flops.forward,
                "backward": self.flops.backward,
            },
            "memory": {
                "parameters": m.parameters,
                "gradients": m.gradients,
                "optimizer_state": m.optimizer_state,
                "bf16_weights": m.bf16_weights,
                "activations": m.activations,
                "attention": m.attention,
                "logits": m.logits,
                "other": m.other,
                "peak": m.peak,
                "residual_stream": m.residual_stream,
            },
        })
    }

    pub fn document(&self) -> Document {
        let c = &self.run.model;
        let mut model = Table::new(["quantity", "value"]);
        let mut row = |k: &str, v: Cell| model.push(vec![Cell::text(k), v]);
        row("size", Cell::text(c.label()));
        row(
            "d_model / d_ff / layers / heads",
            Cell::text(format!(
                "{} / {} / {} / {}",
                c.d_model, c.d_ff, c.layers, c.heads
            )),
        );
        row(
            "ctx x batch",
            Cell::text(format!("{} x {}", self.run.ctx, self.run.batch)),
        );
        row(
            "mode, precision, attention",
            Cell::text(format!(
                "{}, {}, {}",
                self.run.mode, self.run.precision, self.run.attention
            )),
        );
        row("parameters", Cell::Int(self.parameters as i64));
        row("forward FLOPs", Cell::Int(self.flops.forward as i64));
        row("backward FLOPs", Cell::Int(self.flops.backward as i64));
        row("FLOPs per step", Cell::Int(self.flops.per_step as i64));
        let m = &self.memory;
        let mut mem = Table::new(["memory", "bytes", "size"]);
        for (k, v) in [
            ("parameters (fp32)", m.parameters),
            ("gradients (fp32)", m.gradients),
            ("optimizer state (AdamW m, v)", m.optimizer_state),
            ("bf16 weight copy", m.bf16_weights),
            ("activations", m.activations),
            (
                match self.run.attention {
                    Attention::Naive => "  of which attention keeps (P)",
                    Attention::Flash => "  of which attention keeps (O, L)",
                },
                m.attention,
            ),
            ("logits", m.logits),
            ("other (cuBLAS workspace, tables)", m.other),
            ("peak", m.peak),
            ("residual stream tensor (B x T x d x 4)", m.residual_stream),
        ] {
            mem.push(vec![
                Cell::text(k),
                Cell::Int(v as i64),
                Cell::text(format_bytes(v)),
            ]);
        }
        Document {
            sections: vec![
                Section {
                    title: Some("Model".into()),
                    table: model,
                    notes: vec![
                        "FLOPs count matrix products only (2 per multiply-add); backward = 2 x forward; \
                         attention over the whole T x T square, the same for both attention paths."
                            .into(),
                    ],
                },
                Section {
                    title: Some("Memory".into()),
                    table: mem,
                    notes: self
                        .run
                        .refusal()
                        .map(|r| format!("This configuration does not run: {r}."))
                        .into_iter()
                        .collect(),
                },
            ],
            json: Some(self.to_json()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transformer::config::ModelConfig;

    fn run(size: &str, mode: Mode, precision: Precision) -> RunConfig {
        RunConfig {
            model: ModelConfig::preset(size).unwrap(),
            ctx: 256,
            batch: 4,
            mode,
            precision,
            tf32: false,
            attention: Attention::Naive,
        }
    }

    #[test]
    fn train_flops_are_six_n_t_plus_attention() {
        // 6 x matrix parameters x tokens, plus per layer attention's two products of 2BT^2d
        // FLOPs each, three times (forward and backward).
        let p = plan(&run("small", Mode::Train, Precision::Fp32));
        let c = ModelConfig::preset("small").unwrap();
        let matrix =
            c.parameters() - (c.vocab * c.d_model) as u64 - ((2 * c.layers + 1) * c.d_model) as u64;
        let attn = 12 * (2 * 2 * 4 * 256 * 256 * 768) * 3;
        assert_eq!(p.flops.per_step, 6 * matrix * 1024 + attn);
    }

    #[test]
    fn memory_grows_with_mode_and_residual_is_fp32() {
        let f = plan(&run("medium", Mode::Forward, Precision::Bf16));
        let t = plan(&run("medium", Mode::Train, Precision::Bf16));
        assert_eq!(f.memory.gradients, 0);
        assert_eq!(t.memory.optimizer_state, 2 * t.memory.parameters);
        assert_eq!(t.memory.residual_stream, 4 * 256 * 1024 * 4);
        assert_eq!(t.memory.bf16_weights * 2, t.memory.parameters);
        assert!(t.memory.peak > f.memory.peak);
    }

    /// The naive path's peak as a closed form: the most of three moments of the backward (the
    /// loss beside the logits, the FFN's gradients in the last block, the attention's dP and dV)
    /// or, without a backward, of a block's end and the head's. The form the plan had before it
    /// replayed allocations, checked then against all 80 peaks measured on the H200.
    fn naive_closed_form(run: &RunConfig) -> u64 {
        let c = &run.model;
        let (b, t) = (run.batch as u64, run.ctx as u64);
        let (d, f, h, v, l) = (
            c.d_model as u64,
            c.d_ff as u64,
            c.heads as u64,
            c.vocab as u64,
            c.layers as u64,
        );
        let bt = b * t;
        let a = run.precision.activation_bytes() as u64;
        let m = plan(run).memory;
        let persistent = m.parameters + m.gradients + m.optimizer_state + m.bf16_weights + m.other;
        let layer = bt * d * 8 + bt * 8 + bt * d * 6 * a + b * h * t * t * a + 3 * bt * f * a;
        let final_norm = bt * d * 4 + bt * 4 + bt * d * a;
        let logits_one = bt * v * a;
        persistent
            + if run.mode.backward() {
                let kept = l * layer + final_norm;
                let dx = bt * d * 4 + if a == 2 { bt * d * 2 } else { 0 };
                let at_loss = kept + 2 * logits_one;
                let at_ffn = l * layer + dx + 2 * bt * f * a;
                let at_attention = (l * layer + dx + b * h * t * t * a)
                    .saturating_sub(3 * bt * f * a + bt * d * 4 + bt * 4);
                at_loss.max(at_ffn).max(at_attention)
            } else {
                (layer + bt * d * 4).max(final_norm + logits_one)
            }
    }

    fn every_run(attention: Attention) -> Vec<RunConfig> {
        let mut out = Vec::new();
        for size in ["small", "medium", "large", "xl", "2.7B"] {
            for ctx in [128, 256, 512, 1024, 2048] {
                for mode in [Mode::Forward, Mode::ForwardBackward, Mode::Train] {
                    for precision in [Precision::Fp32, Precision::Bf16] {
                        out.push(RunConfig {
                            ctx,
                            attention,
                            ..run(size, mode, precision)
                        });
                    }
                }
            }
        }
        out
    }

    #[test]
    fn the_naive_replay_gives_the_closed_form_peak() {
        for r in every_run(Attention::Naive) {
            assert_eq!(plan(&r).memory.peak, naive_closed_form(&r), "{r:?}");
        }
    }

    #[test]
    fn flash_keeps_the_output_and_l_instead_of_p() {
        for r in every_run(Attention::Flash) {
            let naive = plan(&RunConfig {
                attention: Attention::Naive,
                ..r.clone()
            });
            let flash = plan(&r);
            let c = &r.model;
            let (bt, rows) = ((r.batch * r.ctx) as u64, (r.batch * c.heads * r.ctx) as u64);
            let a = r.precision.activation_bytes() as u64;
            let (l, d) = (c.layers as u64, c.d_model as u64);
            if !r.mode.backward() {
                assert_eq!((naive.memory.attention, flash.memory.attention), (0, 0));
                if c.d_head() != 80 {
                    assert!(flash.memory.peak <= naive.memory.peak, "{r:?}");
                }
                continue;
            }
            assert_eq!(naive.memory.attention, l * rows * r.ctx as u64 * a);
            // The 2.7B model's heads of 80 run padded to 128: the padded output is kept.
            let o = if c.d_head() == 80 {
                rows * 128 * a
            } else {
                bt * d * a
            };
            assert_eq!(flash.memory.attention, l * (o + rows * 4), "{r:?}");
            assert_eq!(
                flash.memory.activations + naive.memory.attention,
                naive.memory.activations + flash.memory.attention
            );
            assert_eq!(flash.memory.logits, naive.memory.logits);
        }
    }

    /// The long contexts the naive path cannot run: 2.7B, bf16, train, ctx 16384 x batch 1 fits
    /// an H200 (about 140 GiB) with flash; ctx 8192 x batch 4 keeps twice the tokens'
    /// activations, 3.7 GiB a block, and does not fit even so.
    #[test]
    fn long_contexts_with_flash_against_an_h200() {
        let h200 = 140 << 30;
        for (ctx, batch, fits) in [(16384, 1, true), (8192, 4, false)] {
            let r = RunConfig {
                ctx,
                batch,
                attention: Attention::Flash,
                ..run("2.7B", Mode::Train, Precision::Bf16)
            };
            assert_eq!(r.refusal(), None);
            let p = plan(&r).memory;
            assert_eq!(p.peak < h200, fits, "ctx {ctx}: {}", format_bytes(p.peak));
            // Everything but the attention is the naive path's too: P alone would be 2 GiB
            // (ctx 16384 x batch 1) or 16 GiB per layer.
            let naive = plan(&RunConfig {
                attention: Attention::Naive,
                ..r.clone()
            })
            .memory;
            assert!(naive.peak > p.peak + (32 << 30));
        }
    }
}
