//! The autocast policy: under mixed precision, which floating-point format each kind of operation
//! computes and stores its result in. It follows `torch.autocast` on CUDA: matrix products run in
//! the low-precision format (fp16 or bf16, operands cast to it, fp32 accumulation); normalisation
//! layers, softmax and losses run in fp32 (autocast's "fp32 list"); pointwise operations that are
//! on neither list run in the type their inputs promote to (ReLU of an fp16 tensor is fp16, a
//! residual add of fp32 and bf16 is fp32); parameters, their gradients and the optimizer state stay
//! fp32 masters. With autocast off every operation follows its inputs.
//!
//! The transformer ([`crate::transformer`]) takes its activation type from [`Op::Matmul`] and its
//! kernels compute RMSNorm, softmax and the loss in fp32 as [`Op::Normalization`], [`Op::Softmax`]
//! and [`Op::Loss`] say (a test below holds them to it); `collect precision toy` runs the
//! assignment's ToyModel through the same policy. Pure data: no GPU, no rounding (that is
//! `precision::rounding`).

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};

/// A floating-point format a tensor is stored or computed in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Float {
    F32,
    F16,
    Bf16,
}

impl Float {
    /// `fp32`, `fp16`, `bf16`.
    pub fn as_str(self) -> &'static str {
        match self {
            Float::F32 => "fp32",
            Float::F16 => "fp16",
            Float::Bf16 => "bf16",
        }
    }

    /// The dtype as PyTorch prints it (`float32`, `float16`, `bfloat16`).
    pub fn torch_name(self) -> &'static str {
        match self {
            Float::F32 => "float32",
            Float::F16 => "float16",
            Float::Bf16 => "bfloat16",
        }
    }

    pub fn bytes(self) -> usize {
        match self {
            Float::F32 => 4,
            Float::F16 | Float::Bf16 => 2,
        }
    }

    /// Bits of the significand after the leading one (23, 10, 7).
    pub fn fraction_bits(self) -> u32 {
        match self {
            Float::F32 => 23,
            Float::F16 => 10,
            Float::Bf16 => 7,
        }
    }

    /// Machine epsilon, the distance from 1 to the next number: `2^-fraction_bits`
    /// (`torch.finfo(dtype).eps`).
    pub fn epsilon(self) -> f64 {
        (-(self.fraction_bits() as f64)).exp2()
    }

    /// The largest finite value (`torch.finfo(dtype).max`).
    pub fn max(self) -> f64 {
        match self {
            Float::F32 => f32::MAX as f64,
            Float::F16 => 65504.0,
            Float::Bf16 => f32::from_bits(0x7f7f_0000) as f64,
        }
    }

    /// The format code the kernels of `kernels/precision.cu` take (`FMT_F32`, `FMT_F16`,
    /// `FMT_BF16`).
    pub fn kernel_code(self) -> i32 {
        match self {
            Float::F32 => 0,
            Float::F16 => 1,
            Float::Bf16 => 2,
        }
    }

    /// The type PyTorch's type promotion gives an operation on `inputs`: their common format, or
    /// fp32 when they differ (fp16 with bf16 promotes to fp32) or there are none.
    pub fn promote(inputs: &[Float]) -> Float {
        match inputs.split_first() {
            Some((&first, rest)) if rest.iter().all(|&f| f == first) => first,
            _ => Float::F32,
        }
    }
}

impl fmt::Display for Float {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Float {
    type Err = Error;
    fn from_str(s: &str) -> Result<Float> {
        match s {
            "fp32" | "float32" => Ok(Float::F32),
            "fp16" | "float16" => Ok(Float::F16),
            "bf16" | "bfloat16" => Ok(Float::Bf16),
            other => Err(Error::InvalidConfig(format!(
                "unknown format `{other}` (expected fp32, fp16 or bf16)"
            ))),
        }
    }
}

/// The kinds of operation the policy has a rule for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// Master copies of the parameters, what the optimizer updates.
    Parameter,
    /// Gradients of the parameters (accumulated in the master's format).
    Gradient,
    /// Matrix products: linear layers, attention's `QKᵀ` and `PV`. Their operands are cast to
    /// this format and their output is in it; accumulation is fp32 whatever it is.
    Matmul,
    /// Normalisation layers (LayerNorm, RMSNorm): statistics and output.
    Normalization,
    Softmax,
    /// Losses (cross-entropy).
    Loss,
    /// Everything on neither list (ReLU, SiLU, RoPE, residual adds, copies): the promotion of
    /// its inputs.
    Pointwise,
}

/// What rule an operation follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// The low-precision format while autocast is on.
    LowPrecision,
    /// fp32 while autocast is on.
    Fp32,
    /// Always fp32 (master weights and their gradients).
    Master,
    /// The promotion of the inputs' formats.
    Promote,
}

impl Op {
    pub fn rule(self) -> Rule {
        match self {
            Op::Parameter | Op::Gradient => Rule::Master,
            Op::Matmul => Rule::LowPrecision,
            Op::Normalization | Op::Softmax | Op::Loss => Rule::Fp32,
            Op::Pointwise => Rule::Promote,
        }
    }
}

/// Autocast on to a low-precision format, or off.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Autocast {
    low: Option<Float>,
}

impl Autocast {
    /// Autocast off: every operation follows its inputs.
    pub const OFF: Autocast = Autocast { low: None };

    /// Autocast on, matrix products in `low` (fp16 or bf16).
    pub fn to(low: Float) -> Autocast {
        Autocast { low: Some(low) }
    }

    /// The low-precision format, when autocast is on.
    pub fn low(self) -> Option<Float> {
        self.low
    }

    /// The format `op` computes and stores its result in, given the formats of its inputs.
    pub fn dtype(self, op: Op, inputs: &[Float]) -> Float {
        match (op.rule(), self.low) {
            (Rule::Master, _) => Float::F32,
            (Rule::LowPrecision, Some(low)) => low,
            (Rule::Fp32, Some(_)) => Float::F32,
            (Rule::LowPrecision | Rule::Fp32, None) | (Rule::Promote, _) => Float::promote(inputs),
        }
    }
}

impl fmt::Display for Autocast {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.low {
            Some(low) => write!(f, "autocast {low}"),
            None => f.write_str("no autocast"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torch_autocast_rules_for_the_toy_model() {
        // What PyTorch reports for the assignment's ToyModel (fc1 -> ReLU -> LayerNorm -> fc2).
        for low in [Float::F16, Float::Bf16] {
            let a = Autocast::to(low);
            let fc1 = a.dtype(Op::Matmul, &[Float::F32, Float::F32]);
            let relu = a.dtype(Op::Pointwise, &[fc1]);
            let ln = a.dtype(Op::Normalization, &[relu]);
            let logits = a.dtype(Op::Matmul, &[ln, Float::F32]);
            let loss = a.dtype(Op::Loss, &[logits]);
            assert_eq!(
                [fc1, relu, ln, logits, loss, a.dtype(Op::Gradient, &[])],
                [low, low, Float::F32, low, Float::F32, Float::F32]
            );
            assert_eq!(a.dtype(Op::Parameter, &[]), Float::F32);
        }
    }

    #[test]
    fn without_autocast_operations_follow_their_inputs() {
        let a = Autocast::OFF;
        assert_eq!(a.dtype(Op::Matmul, &[Float::F32, Float::F32]), Float::F32);
        assert_eq!(a.dtype(Op::Matmul, &[Float::F16, Float::F16]), Float::F16);
        assert_eq!(a.dtype(Op::Normalization, &[Float::F16]), Float::F16);
        assert_eq!(a.dtype(Op::Gradient, &[Float::F16]), Float::F32);
    }

    #[test]
    fn promotion_is_pytorchs() {
        assert_eq!(Float::promote(&[Float::F16, Float::F16]), Float::F16);
        assert_eq!(Float::promote(&[Float::F32, Float::Bf16]), Float::F32);
        assert_eq!(Float::promote(&[Float::F16, Float::Bf16]), Float::F32);
        assert_eq!(Float::promote(&[]), Float::F32);
    }

    #[test]
    fn epsilons_and_maxima_are_torch_finfo() {
        assert_eq!(Float::F32.epsilon(), f32::EPSILON as f64);
        assert_eq!(Float::F16.epsilon(), 0.0009765625);
        assert_eq!(Float::Bf16.epsilon(), 0.0078125);
        assert_eq!(Float::Bf16.max(), 3.3895313892515355e38);
        assert_eq!("bfloat16".parse::<Float>().unwrap(), Float::Bf16);
        assert!("fp8".parse::<Float>().is_err());
    }
}
