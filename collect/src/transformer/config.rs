//! Model sizes, modes and precisions: the CS336 `BasicsTransformerLM` presets (small to 2.7B) and
//! custom dimensions, and the run settings a benchmark configuration is made of. Pure data; no
//! GPU here.

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
}

impl RunConfig {
    pub fn tokens(&self) -> usize {
        self.batch * self.ctx
    }

    pub fn validate(&self) -> Result<()> {
        self.model.validate()?;
        if self.ctx == 0 || self.batch == 0 {
            return Err(Error::InvalidConfig(
                "ctx and batch must be positive".to_owned(),
            ));
        }
        // Row counts and GEMM dimensions are 32-bit in cuBLAS and in the kernels.
        let biggest = (self.batch * self.model.heads * self.ctx * self.ctx)
            .max(self.tokens() * self.model.vocab)
            .max(self.tokens() * 2 * self.model.d_ff);
        if biggest > i32::MAX as usize {
            return Err(Error::InvalidConfig(format!(
                "batch {} x ctx {} gives a tensor of {biggest} elements, over the 2^31 limit",
                self.batch, self.ctx
            )));
        }
        Ok(())
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
    }
}
