//! A plan as tables (`collect plan`'s text, Markdown and CSV) and as JSON.

use analyze::render::cells::format_bytes;
use analyze::render::{Cell, Document, Section, Table};
use serde_json::{json, Value};

use super::*;

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
                "checkpoint": self.run.checkpoint,
            },
            "parameters": self.parameters,
            "flops_per_step": self.flops.per_step,
            "flops": {
                "forward": self.flops.forward,
                "backward": self.flops.backward,
                "recompute": self.flops.recompute,
            },
            "memory": {
                "parameters": m.parameters,
                "gradients": m.gradients,
                "optimizer_state": m.optimizer_state,
                "bf16_weights": m.bf16_weights,
                "activations": m.activations,
                "attention": m.attention,
                "recomputed": m.recomputed,
                "logits": m.logits,
                "other": m.other,
                "peak": m.peak,
                "residual_stream": m.residual_stream,
            },
            "checkpoint_auto": self.auto_checkpoint.as_ref().map(|a| json!({
                "device_memory": a.capacity,
                "peak_without_checkpoint": a.peak_without,
            })),
            "device_memory": self.device_memory.map(|c| json!({
                "bytes": c,
                "fits": self.memory.peak < c,
            })),
        })
    }

    /// How checkpointing was decided, in a sentence, when `auto` decided it.
    fn auto_checkpoint_note(&self) -> Option<String> {
        let a = self.auto_checkpoint.as_ref()?;
        let against = format!(
            "the peak without it, {}, against {} of device memory",
            format_bytes(a.peak_without),
            format_bytes(a.capacity)
        );
        Some(if self.run.checkpoint {
            format!("--checkpoint auto: on ({against}: does not fit).")
        } else {
            format!("--checkpoint auto: off ({against}: fits).")
        })
    }

    /// Whether the peak fits the device memory the plan was checked against, in a sentence.
    pub fn device_note(&self) -> Option<String> {
        let capacity = self.device_memory?;
        let (verdict, relation) = if self.memory.peak < capacity {
            ("fits", "within")
        } else {
            ("does not fit", "over")
        };
        Some(format!(
            "The plan {verdict} the device: its peak, {}, is {relation} the {} of --device-memory.",
            format_bytes(self.memory.peak),
            format_bytes(capacity)
        ))
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
        row(
            "activation checkpointing",
            Cell::text(
                match (self.run.checkpoint, self.auto_checkpoint.is_some()) {
                    (true, true) => "on (auto)",
                    (true, false) => "on",
                    (false, true) => "off (auto)",
                    (false, false) => "off",
                },
            ),
        );
        row("parameters", Cell::Int(self.parameters as i64));
        row("forward FLOPs", Cell::Int(self.flops.forward as i64));
        row("backward FLOPs", Cell::Int(self.flops.backward as i64));
        row("FLOPs per step", Cell::Int(self.flops.per_step as i64));
        if self.run.checkpoint {
            row(
                "recomputed forward FLOPs",
                Cell::Int(self.flops.recompute as i64),
            );
        }
        let m = &self.memory;
        let mut mem = Table::new(["memory", "bytes", "size"]);
        let recomputed = [("recomputed per block (checkpointing)", m.recomputed)];
        let recomputed = if self.run.checkpoint {
            &recomputed[..]
        } else {
            &[]
        };
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
        ]
        .iter()
        .chain(recomputed)
        .chain(&[
            ("logits", m.logits),
            ("other (cuBLAS workspace, tables)", m.other),
            ("peak", m.peak),
            ("residual stream tensor (B x T x d x 4)", m.residual_stream),
        ]) {
            mem.push(vec![
                Cell::text(*k),
                Cell::Int(*v as i64),
                Cell::text(format_bytes(*v)),
            ]);
        }
        Document {
            sections: vec![
                Section {
                    title: Some("Model".into()),
                    table: model,
                    notes: std::iter::once(
                        "FLOPs count matrix products only (2 per multiply-add); backward = 2 x forward; \
                         attention over the whole T x T square, the same for both attention paths."
                            .to_owned(),
                    )
                    .chain(self.run.checkpoint.then(|| {
                        "With activation checkpointing the blocks' forward runs again in the backward: \
                         the recomputed FLOPs come on top of the FLOPs per step, which count each \
                         product once."
                            .to_owned()
                    }))
                    .collect(),
                },
                Section {
                    title: Some("Memory".into()),
                    table: mem,
                    notes: self
                        .auto_checkpoint_note()
                        .into_iter()
                        .chain(self.device_note())
                        .chain(
                            self.run
                                .refusal()
                                .map(|r| format!("This configuration does not run: {r}.")),
                        )
                        .collect(),
                },
            ],
            json: Some(self.to_json()),
        }
    }
}
