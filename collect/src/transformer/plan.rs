//! `collect plan`: what a configuration costs before it runs, with no GPU. Parameters (as PyTorch
//! counts them), matrix FLOPs per step (forward, backward, the step of the mode), and the device
//! memory this implementation holds: parameters, gradients, AdamW state, the bf16 weight copy,
//! the activations kept for the backward, the logits and their gradient, and the peak those add
//! up to, plus the size of one residual-stream tensor (batch × ctx × d_model × 4 bytes: the
//! residual stays fp32 under autocast too).
//!
//! The memory model replays the transformer's forward and backward allocation for allocation
//! (naive or FlashAttention-2, as the run's attention says; with activation checkpointing, each
//! block keeping only its input and run again before its backward), so the peak is the byte
//! count `collect bench` measures. A configuration that would not run is planned all the same,
//! with a note saying why. [`checkpoint_on`] decides `--checkpoint auto` from the plan without
//! checkpointing and the device's memory. Pure arithmetic; rendering through `analyze::render`.

use analyze::render::cells::format_bytes;
use analyze::render::{Cell, Document, Section, Table};
use serde_json::{json, Value};

use crate::gpu::blas::WORKSPACE_BYTES;
use crate::gpu::flash;
use crate::transformer::config::{Attention, Checkpoint, Mode, Precision, RunConfig};
use crate::transformer::params::ParamLayout;

/// cuBLAS workspace, as [`crate::gpu::blas`] allocates it.
pub const CUBLAS_WORKSPACE: u64 = WORKSPACE_BYTES as u64;

/// An H200's device memory as the driver reports it (`cuDeviceTotalMem`, 139.8 GiB): what
/// `--checkpoint auto` weighs a plan against when there is no device to ask.
pub const H200_MEMORY: u64 = 150_109_880_320;

/// Whether the plan of `run` fits `capacity` bytes of device memory.
pub fn fits(run: &RunConfig, capacity: u64) -> bool {
    plan(run).memory.peak < capacity
}

/// Whether `run` (its own `checkpoint` aside) runs with activation checkpointing when `choice`
/// is asked for on a device of `capacity` bytes: never in a mode without a backward, which keeps
/// nothing; `on` and `off` as said; `auto` exactly when the plan without checkpointing does not
/// fit.
pub fn checkpoint_on(choice: Checkpoint, run: &RunConfig, capacity: u64) -> bool {
    run.mode.backward()
        && match choice {
            Checkpoint::On => true,
            Checkpoint::Off => false,
            Checkpoint::Auto => !fits(&without_checkpoint(run), capacity),
        }
}

/// A size of device memory: a byte count, or a number with a unit (`80GiB`, `141GB`, `512MiB`,
/// `1.5TiB`; `B`, `KB`/`KiB` and so on, case-insensitive).
pub fn parse_bytes(text: &str) -> crate::error::Result<u64> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = (&t[..split], t[split..].trim());
    let scale: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        _ => 0,
    };
    match number.parse::<f64>() {
        Ok(n) if scale > 0 && n > 0.0 && n.is_finite() => Ok((n * scale as f64).round() as u64),
        _ => Err(crate::Error::InvalidConfig(format!(
            "`{text}` is not a memory size (bytes, or a number with a unit such as 80GiB or 141GB)"
        ))),
    }
}

fn without_checkpoint(run: &RunConfig) -> RunConfig {
    RunConfig {
        checkpoint: false,
        ..run.clone()
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Flops {
    /// Matrix FLOPs of one forward (2 per multiply-add; attention over the full T×T square, as
    /// computed).
    pub forward: u64,
    /// Twice the forward's (the gradients of both operands of every product).
    pub backward: u64,
    /// FLOPs of one step of the configuration's mode, each product counted once.
    pub per_step: u64,
    /// With activation checkpointing, the blocks' forward run again in the backward: FLOPs the
    /// step computes beyond `per_step` (0 without).
    pub recompute: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Memory {
    pub parameters: u64,
    pub gradients: u64,
    pub optimizer_state: u64,
    pub bf16_weights: u64,
    /// Activations kept for the backward (all blocks, or with checkpointing their inputs, and the
    /// final norm); in `forward` mode, the largest set alive at once (one block's).
    pub activations: u64,
    /// Of the activations, what the attention cores keep for their backward: `P` on the naive
    /// path, the output and `L` on the flash path (0 in `forward` mode, which keeps nothing).
    pub attention: u64,
    /// With activation checkpointing, one block's activations, which the backward computes again
    /// for each block in turn (0 without).
    pub recomputed: u64,
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
    /// How `--checkpoint auto` decided, when it did ([`plan_with`]).
    pub auto_checkpoint: Option<AutoCheckpoint>,
}

/// What `--checkpoint auto` weighed: the device's memory and the peak without checkpointing.
#[derive(Clone, Debug, PartialEq)]
pub struct AutoCheckpoint {
    pub capacity: u64,
    pub peak_without: u64,
}

/// The plan of `run` with its checkpointing decided by `choice` against `capacity` bytes of
/// device memory ([`checkpoint_on`]), saying how `auto` decided.
pub fn plan_with(choice: Checkpoint, run: &RunConfig, capacity: u64) -> Plan {
    let run = RunConfig {
        checkpoint: checkpoint_on(choice, run, capacity),
        ..run.clone()
    };
    let mut p = plan(&run);
    if choice == Checkpoint::Auto && run.mode.backward() {
        p.auto_checkpoint = Some(AutoCheckpoint {
            capacity,
            peak_without: if run.checkpoint {
                plan(&without_checkpoint(&run)).memory.peak
            } else {
                p.memory.peak
            },
        });
    }
    p
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
    let recompute = if run.checkpoint && run.mode.backward() {
        l * per_layer_matmul
    } else {
        0
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
            recompute,
        },
        memory: Memory {
            parameters,
            gradients,
            optimizer_state,
            bf16_weights,
            activations: step.activations,
            attention: step.attention,
            recomputed: step.recomputed,
            logits: if run.mode.backward() {
                2 * logits_one
            } else {
                logits_one
            },
            other,
            peak: step.peak,
            residual_stream: bt * d * 4,
        },
        auto_checkpoint: None,
    }
}

/// Bytes in use and the most at once, counted as the device-memory layer counts them: every
/// allocation adds its size, every free takes it away.
struct Ledger {
    in_use: u64,
    peak: u64,
    /// Every change made while this is on, in order, to be made again ([`Ledger::replay`]).
    log: Option<Vec<Change>>,
}

/// One change of the bytes in use.
#[derive(Clone, Copy)]
enum Change {
    Alloc(u64),
    Free(u64),
}

impl Ledger {
    fn alloc(&mut self, bytes: u64) -> u64 {
        self.apply(Change::Alloc(bytes));
        bytes
    }

    fn free(&mut self, held: &[u64]) {
        for &b in held {
            self.apply(Change::Free(b));
        }
    }

    fn replay(&mut self, changes: &[Change]) {
        for &c in changes {
            self.apply(c);
        }
    }

    fn apply(&mut self, change: Change) {
        match change {
            Change::Alloc(b) => {
                self.in_use += b;
                self.peak = self.peak.max(self.in_use);
            }
            Change::Free(b) => self.in_use -= b,
        }
        if let Some(log) = &mut self.log {
            log.push(change);
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

/// What the backward has of one block: the forward's `BlockKept`.
enum BlockKept {
    All(LayerKept),
    /// The block's input alone (activation checkpointing).
    Input(u64),
}

/// What [`replay_step`] finds.
struct StepMemory {
    peak: u64,
    activations: u64,
    attention: u64,
    recomputed: u64,
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
        log: None,
    };
    let keep = run.mode.backward();
    let checkpoint = keep && run.checkpoint;

    // Forward: the embedding's output, then each block.
    let mut x = m.alloc(bt * d * 4);
    let mut layers = Vec::with_capacity(c.layers);
    // The first block's changes to the memory in use, what it keeps and its output: under
    // checkpointing the backward makes the same changes again for every block.
    let mut block: Option<(Vec<Change>, LayerKept, u64)> = None;
    for _ in 0..c.layers {
        m.log = block.is_none().then(Vec::new);
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
        let changes = m.log.take().unwrap_or_default();
        block.get_or_insert((changes, layer, x));
        if checkpoint {
            m.free(&layer.all()[1..]);
            layers.push(BlockKept::Input(layer.x_in));
        } else if keep {
            layers.push(BlockKept::All(layer));
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
            recomputed: 0,
        };
    }
    let activations = m.in_use - persistent - logits;
    let recomputed = match (&block, checkpoint) {
        (Some((_, l, _)), true) => l.all().iter().sum::<u64>() - l.x_in,
        _ => 0,
    };
    let attention = layers
        .iter()
        .map(|l| match l {
            BlockKept::All(l) => l.attention.bytes(),
            BlockKept::Input(_) => 0,
        })
        .sum();

    // Backward: the loss, the head and the final norm, then each block from the last.
    let dlogits = m.alloc(bt * s.v * a);
    m.free(&[logits]);
    let dh_final = m.alloc(bt * d * 4);
    m.free(&[dlogits, h_final]);
    let dx = m.alloc(bt * d * 4);
    let dx_bf16 = if a == 2 { m.alloc(bt * d * 2) } else { 0 };
    m.free(&[dh_final, x, rstd_final]);
    while let Some(kept) = layers.pop() {
        let l = match kept {
            BlockKept::All(l) => l,
            // The block's forward again; its output is freed at once.
            BlockKept::Input(x_in) => {
                let (changes, l, x_out) = block.as_ref().expect("a model has blocks");
                m.replay(changes);
                m.free(&[*x_out]);
                LayerKept { x_in, ..*l }
            }
        };
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
        recomputed,
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
            checkpoint: false,
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
    /// an H200 (139.8 GiB) with flash; ctx 8192 x batch 4 keeps twice the tokens' activations,
    /// 3.7 GiB a block, and fits only with activation checkpointing, which `auto` turns on.
    #[test]
    fn long_contexts_with_flash_against_an_h200() {
        for (ctx, batch, fits) in [(16384, 1, true), (8192, 4, false)] {
            let r = RunConfig {
                ctx,
                batch,
                attention: Attention::Flash,
                ..run("2.7B", Mode::Train, Precision::Bf16)
            };
            assert_eq!(r.refusal(), None);
            let p = plan(&r).memory;
            assert_eq!(
                p.peak < H200_MEMORY,
                fits,
                "ctx {ctx}: {}",
                format_bytes(p.peak)
            );
            assert_eq!(checkpoint_on(Checkpoint::Auto, &r, H200_MEMORY), !fits);
            let auto = plan_with(Checkpoint::Auto, &r, H200_MEMORY);
            assert_eq!(auto.run.checkpoint, !fits);
            assert_eq!(
                auto.auto_checkpoint,
                Some(AutoCheckpoint {
                    capacity: H200_MEMORY,
                    peak_without: p.peak
                })
            );
            assert!(auto.memory.peak < H200_MEMORY);
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

    /// The configuration checkpointing is for: 2.7B, ctx 8192 x batch 4, flash, bf16, train.
    /// Without it the blocks keep 118.6 GiB and the step peaks at 177.0 GiB; with it they keep
    /// their inputs, 32 x 320 MiB, and the step peaks at 72.2 GiB, under an H200's 139.8.
    #[test]
    fn checkpointing_fits_2_7b_at_ctx_8192_batch_4_on_an_h200() {
        let off = RunConfig {
            ctx: 8192,
            batch: 4,
            attention: Attention::Flash,
            ..run("2.7B", Mode::Train, Precision::Bf16)
        };
        let on = RunConfig {
            checkpoint: true,
            ..off.clone()
        };
        let (p_off, p_on) = (plan(&off), plan(&on));
        assert_eq!(format_bytes(p_off.memory.peak), "177.0 GiB");
        assert_eq!(format_bytes(p_off.memory.activations), "118.6 GiB");
        assert!(
            p_on.memory.peak < 139 << 30,
            "{}",
            format_bytes(p_on.memory.peak)
        );
        assert_eq!(format_bytes(p_on.memory.peak), "72.2 GiB");
        let residual = p_on.memory.residual_stream;
        assert_eq!(residual, 320 << 20);
        // The blocks' inputs, and the final norm's input, rstd and output.
        let bt = 8192 * 4;
        assert_eq!(
            p_on.memory.activations,
            32 * residual + residual + bt * 4 + bt * 2560 * 2
        );
        assert_eq!(p_on.memory.attention, 0);
        // One block's activations but its input: 3.7 GiB a block with it.
        assert_eq!(
            p_on.memory.recomputed + residual,
            (p_off.memory.activations - (residual + bt * 4 + bt * 2560 * 2)) / 32
        );
        assert_eq!(p_on.flops.per_step, p_off.flops.per_step);
        assert_eq!(p_off.flops.recompute, 0);
        assert_eq!(
            p_on.flops.recompute,
            p_on.flops.forward - 2 * bt * 2560 * 10_000
        );
    }

    #[test]
    fn checkpointing_lowers_every_peak_with_a_backward_and_changes_nothing_without() {
        for attention in [Attention::Naive, Attention::Flash] {
            for r in every_run(attention) {
                let on = RunConfig {
                    checkpoint: true,
                    ..r.clone()
                };
                let (off, on) = (plan(&r), plan(&on));
                if !r.mode.backward() {
                    assert_eq!(off.memory, on.memory, "{r:?}");
                    assert_eq!(on.flops.recompute, 0);
                    assert!(!checkpoint_on(Checkpoint::On, &r, 0));
                    continue;
                }
                assert!(on.memory.peak < off.memory.peak, "{r:?}");
                assert!(on.memory.activations < off.memory.activations, "{r:?}");
                assert!(on.memory.recomputed > 0);
                // Auto against a device just big enough for the plan without it: off; one byte
                // smaller: on.
                assert!(!checkpoint_on(Checkpoint::Auto, &r, off.memory.peak + 1));
                assert!(checkpoint_on(Checkpoint::Auto, &r, off.memory.peak));
                assert!(!checkpoint_on(Checkpoint::Off, &r, 0));
            }
        }
    }

    #[test]
    fn a_plan_says_how_auto_decided() {
        let r = run("small", Mode::Train, Precision::Fp32);
        let fits = plan_with(Checkpoint::Auto, &r, H200_MEMORY);
        let doc = fits.document();
        assert!(!fits.run.checkpoint);
        assert!(
            doc.sections[1].notes[0].starts_with("--checkpoint auto: off (the peak without it, ")
        );
        let small_device = plan_with(Checkpoint::Auto, &r, 1 << 30);
        assert!(small_device.run.checkpoint);
        assert!(small_device.document().sections[1].notes[0]
            .ends_with("against 1.0 GiB of device memory: does not fit)."));
        let json = small_device.to_json();
        assert_eq!(json["config"]["checkpoint"], true);
        assert_eq!(json["checkpoint_auto"]["device_memory"], 1u64 << 30);
        assert_eq!(
            json["checkpoint_auto"]["peak_without_checkpoint"],
            fits.memory.peak
        );
        assert_eq!(plan_with(Checkpoint::On, &r, 0).auto_checkpoint, None);
        let forward = run("small", Mode::Forward, Precision::Fp32);
        assert_eq!(
            plan_with(Checkpoint::Auto, &forward, 1).auto_checkpoint,
            None
        );
    }

    #[test]
    fn memory_sizes_parse_with_or_without_a_unit() {
        assert_eq!(parse_bytes("150109880320").unwrap(), H200_MEMORY);
        assert_eq!(parse_bytes("80GiB").unwrap(), 80 << 30);
        assert_eq!(parse_bytes("141 GB").unwrap(), 141_000_000_000);
        assert_eq!(parse_bytes("0.5mib").unwrap(), 512 << 10);
        for bad in ["", "GiB", "12 parsecs", "-1GB", "0"] {
            assert!(parse_bytes(bad).is_err(), "{bad}");
        }
    }
}
