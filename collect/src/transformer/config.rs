//! Model sizes, modes, precisions, attention implementations and activation checkpointing: the
//! CS336 `BasicsTransformerLM` presets (small to 2.7B) and custom dimensions, the run settings a
//! benchmark configuration is made of, and what keeps a configuration from running
//! ([`Refusal`]). Pure data; no GPU here.

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};

/// The vocabulary of the CS336 assignment's tokenizer.
pub const VOCAB: usize = 10_000;

/// RMSNorm's epsilon.
pub const RMS_EPS: f32 = 1e-5;

/// RoPE's base.
pub const ROPE_THETA: f32 = 10_000.0;

/// The named sizes of the CS336 handout: (name, d_model, d_ff, layers, heads).
pub const PRESETS: [(&str, usize, usize, usize, usize); 5] = [
    ("small", 768, 3072, 12, 12),
    ("medium", 1024, 4096, 24, 16),
    ("large", 1280, 5120, 36, 20),
    ("xl", 1600, 6400, 48, 25),
    ("2.7B", 2560, 10240, 32, 32),
];

/// The dimensions of one model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelConfig {
    /// `small` ... `2.7B`, or `custom` for dimensions given one by one.
    pub name: String,
    pub d_model: usize,
    pub d_ff: usize,
    pub layers: usize,
    pub heads: usize,
    pub vocab: usize,
}

impl ModelConfig {
    /// A named size (`small`, `medium`, `large`, `xl`, `2.7B`; case-insensitive).
    pub fn preset(name: &str) -> Result<ModelConfig> {
        PRESETS
            .iter()
            .find(|p| p.0.eq_ignore_ascii_case(name))
            .map(|&(n, d_model, d_ff, layers, heads)| ModelConfig {
                name: n.to_owned(),
                d_model,
                d_ff,
                layers,
                heads,
                vocab: VOCAB,
            })
            .ok_or_else(|| {
                let names: Vec<&str> = PRESETS.iter().map(|p| p.0).collect();
                Error::InvalidConfig(format!(
                    "unknown size `{name}` (expected one of {})",
                    names.join(", ")
                ))
            })
    }

    /// Custom dimensions, checked.
    pub fn custom(d_model: usize, d_ff: usize, layers: usize, heads: usize) -> Result<ModelConfig> {
        let c = ModelConfig {
            name: "custom".to_owned(),
            d_model,
            d_ff,
            layers,
            heads,
            vocab: VOCAB,
        };
        c.validate()?;
        Ok(c)
    }

    /// The dimensions must split into heads of an even width (RoPE rotates pairs).
    pub fn validate(&self) -> Result<()> {
        if self.d_model == 0 || self.d_ff == 0 || self.layers == 0 || self.heads == 0 {
            return Err(Error::InvalidConfig(
                "d_model, d_ff, layers and heads must all be positive".to_owned(),
            ));
        }
        if !self.d_model.is_multiple_of(self.heads) {
            return Err(Error::InvalidConfig(format!(
                "d_model {} is not a multiple of heads {}",
                self.d_model, self.heads
            )));
        }
        if !self.d_head().is_multiple_of(2) {
            return Err(Error::InvalidConfig(format!(
                "the head width d_model/heads = {} must be even for RoPE",
                self.d_head()
            )));
        }
        Ok(())
    }

    pub fn d_head(&self) -> usize {
        self.d_model / self.heads
    }

    /// Trainable parameters, counted as PyTorch counts them (embedding and head untied; RMSNorm
    /// gains; no biases).
    pub fn parameters(&self) -> u64 {
        let (d, f, v) = (self.d_model as u64, self.d_ff as u64, self.vocab as u64);
        let per_layer = 4 * d * d + 3 * d * f + 2 * d;
        v * d + self.layers as u64 * per_layer + d + d * v
    }

    /// `small`, or `custom(d768,ff3072,L12,H12)` for custom dimensions.
    pub fn label(&self) -> String {
        if self.name == "custom" {
            format!(
                "custom(d{},ff{},L{},H{})",
                self.d_model, self.d_ff, self.layers, self.heads
            )
        } else {
            self.name.clone()
        }
    }
}

/// What one benchmark step does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Forward,
    ForwardBackward,
    Train,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Forward => "forward",
            Mode::ForwardBackward => "forward-backward",
            Mode::Train => "train",
        }
    }

    pub fn backward(self) -> bool {
        self != Mode::Forward
    }
}

impl FromStr for Mode {
    type Err = Error;
    fn from_str(s: &str) -> Result<Mode> {
        match s {
            "forward" => Ok(Mode::Forward),
            "forward-backward" | "forward_backward" => Ok(Mode::ForwardBackward),
            "train" => Ok(Mode::Train),
            other => Err(Error::InvalidConfig(format!(
                "unknown mode `{other}` (expected forward, forward-backward or train)"
            ))),
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Numeric precision of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    /// Everything in fp32; GEMMs in true FP32 unless TF32 is asked for.
    Fp32,
    /// Autocast-style mixed precision: fp32 master weights, optimizer state and residual stream;
    /// GEMMs with bf16 operands and fp32 accumulation; norms, softmax and loss computed in fp32.
    Bf16,
}

impl Precision {
    pub fn as_str(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Bf16 => "bf16",
        }
    }

    /// Bytes of one activation element that feeds a GEMM.
    pub fn activation_bytes(self) -> usize {
        match self {
            Precision::Fp32 => 4,
            Precision::Bf16 => 2,
        }
    }
}

impl FromStr for Precision {
    type Err = Error;
    fn from_str(s: &str) -> Result<Precision> {
        match s {
            "fp32" | "float32" => Ok(Precision::Fp32),
            "bf16" | "bfloat16" => Ok(Precision::Bf16),
            other => Err(Error::InvalidConfig(format!(
                "unknown precision `{other}` (expected fp32 or bf16)"
            ))),
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which implementation computes the attention core of every block.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Attention {
    /// As the reference script computes it: the scores and probabilities `[B, H, T, T]`
    /// materialised, `P` kept for the backward.
    #[default]
    Naive,
    /// FlashAttention-2: tiles of `Q` against tiles of `K` and `V` with an online softmax; keeps
    /// the output and the logsumexp `L` (`[B, H, T]`), recomputes `P` in the backward.
    Flash,
}

impl Attention {
    pub fn as_str(self) -> &'static str {
        match self {
            Attention::Naive => "naive",
            Attention::Flash => "flash",
        }
    }
}

impl FromStr for Attention {
    type Err = Error;
    fn from_str(s: &str) -> Result<Attention> {
        match s {
            "naive" => Ok(Attention::Naive),
            "flash" => Ok(Attention::Flash),
            other => Err(Error::InvalidConfig(format!(
                "unknown attention `{other}` (expected naive or flash)"
            ))),
        }
    }
}

impl fmt::Display for Attention {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `--checkpoint`: whether the blocks keep their activations for the backward or only their
/// input (activation checkpointing), as asked; [`crate::transformer::plan::checkpoint_on`] turns
/// it into [`RunConfig::checkpoint`] for one configuration and device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Checkpoint {
    /// On exactly when the plan without it does not fit the device's memory.
    #[default]
    Auto,
    On,
    Off,
}

impl Checkpoint {
    pub fn as_str(self) -> &'static str {
        match self {
            Checkpoint::Auto => "auto",
            Checkpoint::On => "on",
            Checkpoint::Off => "off",
        }
    }
}

impl FromStr for Checkpoint {
    type Err = Error;
    fn from_str(s: &str) -> Result<Checkpoint> {
        match s {
            "auto" => Ok(Checkpoint::Auto),
            "on" => Ok(Checkpoint::On),
            "off" => Ok(Checkpoint::Off),
            other => Err(Error::InvalidConfig(format!(
                "unknown checkpoint setting `{other}` (expected auto, on or off)"
            ))),
        }
    }
}

impl fmt::Display for Checkpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The widest head FlashAttention runs (narrower ones are padded to 16, 32, 64 or 128).
pub const FLASH_MAX_HEAD_WIDTH: usize = 128;

/// The most batch × heads FlashAttention runs (a grid dimension of its backward's first kernel).
pub const FLASH_MAX_BATCH_HEADS: usize = 65_535;

/// Why a well-formed configuration cannot run, and, where the other attention implementation
/// would run it, which.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub reason: String,
    pub alternative: Option<Attention>,
}

impl Refusal {
    /// The flag that lets it run: `--attention flash` (or `naive`).
    pub fn hint(&self) -> Option<&'static str> {
        self.alternative.map(|a| match a {
            Attention::Naive => "--attention naive",
            Attention::Flash => "--attention flash",
        })
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)?;
        match self.hint() {
            Some(h) => write!(f, " (try {h})"),
            None => Ok(()),
        }
    }
}

/// Why attention over `heads` heads of width `d_head` cannot run as `attention` for `batch`
/// sequences of `ctx` positions, if it cannot; the hint names the other implementation when that
/// one can. Shared by the model and the attention benchmark.
pub fn attention_refusal(
    attention: Attention,
    batch: usize,
    heads: usize,
    ctx: usize,
    d_head: usize,
) -> Option<Refusal> {
    let naive = || {
        // The [B, H, T, T] scores are indexed and multiplied in 32-bit.
        let scores = batch * heads * ctx * ctx;
        (scores > i32::MAX as usize).then(|| {
            format!("batch {batch} x ctx {ctx} gives a tensor of {scores} elements, over the 2^31 limit")
        })
    };
    let flash = || {
        if d_head > FLASH_MAX_HEAD_WIDTH {
            Some(format!(
                "flash attention runs heads up to {FLASH_MAX_HEAD_WIDTH} wide, not {d_head}"
            ))
        } else if batch * heads > FLASH_MAX_BATCH_HEADS {
            Some(format!(
                "flash attention runs at most {FLASH_MAX_BATCH_HEADS} batch x heads, not {}",
                batch * heads
            ))
        } else {
            None
        }
    };
    let (this, other, alternative) = match attention {
        Attention::Naive => (naive(), flash(), Attention::Flash),
        Attention::Flash => (flash(), naive(), Attention::Naive),
    };
    this.map(|reason| Refusal {
        reason,
        alternative: other.is_none().then_some(alternative),
    })
}

/// One point of a benchmark grid.
#[derive(Clone, Debug, PartialEq)]
pub struct RunConfig {
    pub model: ModelConfig,
    pub ctx: usize,
    pub batch: usize,
    pub mode: Mode,
    pub precision: Precision,
    /// Let FP32 GEMMs use TF32 tensor cores (PyTorch's `allow_tf32`); off by default.
    pub tf32: bool,
    pub attention: Attention,
    /// Activation checkpointing: each block keeps only its input (the residual stream) in the
    /// forward, and the backward re-runs the block's forward just before the block's backward.
    /// Nothing changes in a mode without a backward, which keeps nothing.
    pub checkpoint: bool,
}

impl RunConfig {
    /// A run of `model` as the reference runs it unless told otherwise: fp32 without TF32, naive
    /// attention, no checkpointing.
    pub fn new(model: ModelConfig, ctx: usize, batch: usize, mode: Mode) -> RunConfig {
        RunConfig {
            model,
            ctx,
            batch,
            mode,
            precision: Precision::Fp32,
            tf32: false,
            attention: Attention::Naive,
            checkpoint: false,
        }
    }

    pub fn tokens(&self) -> usize {
        self.batch * self.ctx
    }

    /// Dimensions that make no model at all (a bad head split, a zero): an error, not a row.
    pub fn validate_dimensions(&self) -> Result<()> {
        self.model.validate()?;
        if self.ctx == 0 || self.batch == 0 {
            return Err(Error::InvalidConfig(
                "ctx and batch must be positive".to_owned(),
            ));
        }
        Ok(())
    }

    /// Why this well-formed configuration cannot run, if it cannot: a tensor over the 32-bit
    /// limits of cuBLAS and the kernels, or a shape the attention implementation does not run.
    /// A sweep makes it one row and goes on.
    pub fn refusal(&self) -> Option<Refusal> {
        // Row counts and GEMM dimensions are 32-bit in cuBLAS and in the kernels.
        let biggest = (self.tokens() * self.model.vocab).max(self.tokens() * 2 * self.model.d_ff);
        if biggest > i32::MAX as usize {
            return Some(Refusal {
                reason: format!(
                    "batch {} x ctx {} gives a tensor of {biggest} elements, over the 2^31 limit",
                    self.batch, self.ctx
                ),
                alternative: None,
            });
        }
        attention_refusal(
            self.attention,
            self.batch,
            self.model.heads,
            self.ctx,
            self.model.d_head(),
        )
    }

    /// [`RunConfig::validate_dimensions`], and a [`RunConfig::refusal`] as an error.
    pub fn validate(&self) -> Result<()> {
        self.validate_dimensions()?;
        match self.refusal() {
            Some(r) => Err(Error::InvalidConfig(r.to_string())),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_are_found_case_insensitively() {
        assert_eq!(ModelConfig::preset("XL").unwrap().d_model, 1600);
        assert_eq!(ModelConfig::preset("2.7b").unwrap().heads, 32);
        assert!(ModelConfig::preset("huge").is_err());
    }

    #[test]
    fn custom_dimensions_must_split_into_even_heads() {
        assert!(ModelConfig::custom(64, 128, 2, 4).is_ok());
        assert!(ModelConfig::custom(64, 128, 2, 5).is_err());
        assert!(ModelConfig::custom(12, 32, 1, 4).is_err()); // head width 3
    }

    #[test]
    fn modes_and_precisions_parse() {
        assert_eq!(
            "forward-backward".parse::<Mode>().unwrap(),
            Mode::ForwardBackward
        );
        assert_eq!("bf16".parse::<Precision>().unwrap(), Precision::Bf16);
        assert!("fp16".parse::<Precision>().is_err());
        assert_eq!("flash".parse::<Attention>().unwrap(), Attention::Flash);
        assert_eq!(Attention::default(), Attention::Naive);
        assert!("sdpa".parse::<Attention>().is_err());
        assert_eq!("on".parse::<Checkpoint>().unwrap(), Checkpoint::On);
        assert_eq!(Checkpoint::default(), Checkpoint::Auto);
        assert!("yes".parse::<Checkpoint>().is_err());
    }

    fn run_2p7b(ctx: usize, batch: usize, attention: Attention) -> RunConfig {
        RunConfig {
            model: ModelConfig::preset("2.7B").unwrap(),
            ctx,
            batch,
            mode: Mode::Train,
            precision: Precision::Bf16,
            tf32: false,
            attention,
            checkpoint: false,
        }
    }

    #[test]
    fn naive_scores_over_2_pow_31_are_refused_with_the_flash_hint() {
        let r = run_2p7b(8192, 4, Attention::Naive)
            .refusal()
            .expect("refused");
        assert_eq!(
            r.to_string(),
            "batch 4 x ctx 8192 gives a tensor of 8589934592 elements, over the 2^31 limit \
             (try --attention flash)"
        );
        assert!(run_2p7b(8192, 4, Attention::Naive).validate().is_err());
        assert_eq!(run_2p7b(8192, 4, Attention::Flash).refusal(), None);
        assert_eq!(run_2p7b(16384, 1, Attention::Flash).refusal(), None);
        assert!(run_2p7b(16384, 1, Attention::Naive).refusal().is_some());
        assert_eq!(run_2p7b(2048, 4, Attention::Naive).refusal(), None);
    }

    #[test]
    fn limits_flash_cannot_lift_give_no_hint() {
        // Logits of 2^31 elements: no attention helps.
        let r = run_2p7b(65536, 4, Attention::Flash)
            .refusal()
            .expect("refused");
        assert!(
            r.reason.contains("over the 2^31 limit") && r.hint().is_none(),
            "{r}"
        );
        // Heads wider than the flash kernels: naive runs them.
        let wide = attention_refusal(Attention::Flash, 1, 2, 64, 256).expect("refused");
        assert_eq!(wide.hint(), Some("--attention naive"));
        assert!(attention_refusal(Attention::Flash, 1, 65_536, 64, 64).is_some());
        // Neither runs it: no hint.
        let both = attention_refusal(Attention::Naive, 1, 1, 65_536, 256).expect("refused");
        assert_eq!(both.alternative, None);
    }
}
