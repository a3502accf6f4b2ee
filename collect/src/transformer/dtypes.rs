//! The transformer's tensor types, from the autocast policy ([`crate::autocast`]) of its
//! precision: an fp32 run has autocast off, a bf16 run autocast to bf16. The activations between
//! GEMMs are in the policy's format for matrix products ([`activation`]). The kernels compute
//! RMSNorm, softmax and the loss in fp32 and keep the residual stream, the master weights, their
//! gradients and AdamW's state in fp32, which is what the policy gives those operations; where
//! such a kernel writes a bf16 output, it is the cast the next matrix product would make, done in
//! the same pass. The tests below hold the kernels' fixed choices to the policy.

use crate::autocast::{Autocast, Float, Op};
use crate::gpu::device_memory::DType;
use crate::transformer::config::Precision;

/// The autocast policy a run of `precision` follows.
pub fn policy(precision: Precision) -> Autocast {
    match precision {
        Precision::Fp32 => Autocast::OFF,
        Precision::Bf16 => Autocast::to(Float::Bf16),
    }
}

/// The element type of the activations that feed GEMMs: the policy's format for matrix products
/// of fp32 inputs.
pub fn activation(precision: Precision) -> DType {
    match policy(precision).dtype(Op::Matmul, &[Float::F32, Float::F32]) {
        Float::F32 => DType::F32,
        Float::Bf16 => DType::Bf16,
        // `policy` turns autocast on to bf16 only; fp16 runs only in `collect precision`.
        Float::F16 => unreachable!("a transformer run is fp32 or bf16"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PRECISIONS: [Precision; 2] = [Precision::Fp32, Precision::Bf16];

    fn format(d: DType) -> Float {
        match d {
            DType::Bf16 => Float::Bf16,
            _ => Float::F32,
        }
    }

    #[test]
    fn activations_are_the_policys_matmul_format() {
        assert_eq!(activation(Precision::Fp32), DType::F32);
        assert_eq!(activation(Precision::Bf16), DType::Bf16);
        for p in PRECISIONS {
            // The plan counts activation bytes by the same rule.
            assert_eq!(format(activation(p)).bytes(), p.activation_bytes());
        }
    }

    #[test]
    fn what_the_kernels_keep_in_fp32_is_what_the_policy_says() {
        for p in PRECISIONS {
            let a = policy(p);
            let act = format(activation(p));
            // rmsnorm.cu reads the fp32 residual, computes in fp32; attention.cu's softmax and
            // loss.cu's cross-entropy read activations and compute in fp32.
            assert_eq!(a.dtype(Op::Normalization, &[Float::F32]), Float::F32, "{p}");
            assert_eq!(a.dtype(Op::Softmax, &[act]), Float::F32, "{p}");
            assert_eq!(a.dtype(Op::Loss, &[act]), Float::F32, "{p}");
            // The residual add: fp32 stream plus a product's output.
            assert_eq!(
                a.dtype(Op::Pointwise, &[Float::F32, act]),
                Float::F32,
                "{p}"
            );
            // SwiGLU's gate and RoPE write the activation type they read.
            assert_eq!(a.dtype(Op::Pointwise, &[act, act]), act, "{p}");
            assert_eq!(a.dtype(Op::Parameter, &[]), Float::F32, "{p}");
            assert_eq!(a.dtype(Op::Gradient, &[]), Float::F32, "{p}");
        }
    }
}
