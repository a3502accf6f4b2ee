//! `collect plan`: what a configuration costs before it runs, with no GPU. Parameters (as PyTorch
//! counts them), matrix FLOPs per step (forward, backward, the step of the mode), and the device
//! memory this implementation holds: parameters, gradients, AdamW state, the bf16 weight copy,
//! the activations kept for the backward, the logits and their gradient, and the peak those add
//! up to, plus the size of one residual-stream tensor (batch × ctx × d_model × 4 bytes: the
//! residual stays fp32 under autocast too).
//!
//! The memory model follows the transformer's forward and backward allocation for allocation, so
//! the estimate can be checked against the peak `collect bench` measures. Pure arithmetic;
//! rendering through `analyze::render`.

use analyze::render::cells::format_bytes;
use analyze::render::{Cell, Document, Section, Table};
use serde_json::{json, Value};

use crate::gpu::blas::WORKSPACE_BYTES;
use crate::transformer::config::{Mode, Precision, RunConfig};
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
    let a = run.precision.activation_bytes() as u64;
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
    // One block's kept tensors (the forward's LayerSaved): x_in and x_mid in fp32, two 1/rms
    // vectors, h1, q, k, v, attn, h2 in the activation type, P (B×H×T×T), h13 and g.
    let layer = bt * d * 8 + bt * 8 + bt * d * 6 * a + b * h * t * t * a + 3 * bt * f * a;
    let final_norm = bt * d * 4 + bt * 4 + bt * d * a;
    let logits_one = bt * v * a;
    let other = CUBLAS_WORKSPACE + t * (d / h) * 4 + 3 * bt * 4 + 4;
    let persistent = parameters + gradients + optimizer_state + bf16_weights + other;
    let (activations, logits, transient_peak) = if run.mode.backward() {
        let kept = l * layer + final_norm;
        // Candidates for the most alive at once in the backward (in its order):
        // the loss allocating the logits' gradient beside them; in the last block, the gradient
        // of the residual (fp32, and its bf16 copy) beside the FFN's dg and dh13 once g is
        // freed; and the attention's dP and dV once the FFN's tensors are gone.
        let dx = bt * d * 4 + if a == 2 { bt * d * 2 } else { 0 };
        let at_loss = kept + 2 * logits_one;
        let at_ffn = l * layer + dx + 2 * bt * f * a;
        let at_attention = (l * layer + dx + b * h * t * t * a)
            .saturating_sub(3 * bt * f * a + bt * d * 4 + bt * 4);
        (kept, 2 * logits_one, at_loss.max(at_ffn).max(at_attention))
    } else {
        // Nothing is kept; a block's tensors and its output are alive at its end.
        let block = layer + bt * d * 4;
        let end = final_norm + logits_one;
        (block, logits_one, block.max(end))
    };
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
            activations,
            logits,
            other,
            peak: persistent + transient_peak,
            residual_stream: bt * d * 4,
        },
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
            "mode, precision",
            Cell::text(format!("{}, {}", self.run.mode, self.run.precision)),
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
                        "FLOPs count matrix products only (2 per multiply-add); backward = 2 x forward.".into(),
                    ],
                },
                Section {
                    title: Some("Memory".into()),
                    table: mem,
                    notes: Vec::new(),
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
}
