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
    /// The device memory the plan was checked against, when one was named
    /// ([`Plan::check_device`]).
    pub device_memory: Option<u64>,
}

impl Plan {
    /// Checks the plan against a device of `capacity` bytes (`--device-memory`): afterwards the
    /// plan's tables and JSON say whether it fits, and so does [`Plan::fits_device`].
    pub fn check_device(mut self, capacity: u64) -> Plan {
        self.device_memory = Some(capacity);
        self
    }

    /// Whether the peak fits the device memory the plan was checked against (as [`fits`]
    /// counts it), or `None` when it was checked against none.
    pub fn fits_device(&self) -> Option<bool> {
        self.device_memory.map(|c| self.memory.peak < c)
    }
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

/// The sizes of a run that the plan's arithmetic uses, as u64: batch `b`, context `t`, model
/// width `d`, FFN width `f`, heads `h`, vocabulary `v`, layers `l`.
struct Dims {
    b: u64,
    t: u64,
    d: u64,
    f: u64,
    h: u64,
    v: u64,
    l: u64,
}

impl Dims {
    fn of(run: &RunConfig) -> Dims {
        let c = &run.model;
        Dims {
            b: run.batch as u64,
            t: run.ctx as u64,
            d: c.d_model as u64,
            f: c.d_ff as u64,
            h: c.heads as u64,
            v: c.vocab as u64,
            l: c.layers as u64,
        }
    }
}

pub fn plan(run: &RunConfig) -> Plan {
    let c = &run.model;
    let dims = Dims::of(run);
    let (b, t, d, f, h, v, l) = (dims.b, dims.t, dims.d, dims.f, dims.h, dims.v, dims.l);
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
        device_memory: None,
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

mod tables;

#[cfg(test)]
mod tests;
