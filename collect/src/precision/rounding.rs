//! Exact conversions between fp32 and fp16/bf16, as bit manipulation: round to nearest, ties to
//! even, overflow to infinity, subnormals kept, NaN kept quiet. These are what the GPU's
//! `cvt.rn.f16.f32` / `cvt.rn.bf16.f32` do and what PyTorch's casts compute, and they are written
//! the same way as `kernels/precision.cu` (fp16) and `kernels/common.cuh` (bf16) write them, so
//! that the CPU emulation of the experiments repeats the kernels bit for bit.
//!
//! An operation "in" fp16 or bf16 is the fp32 operation followed by [`round`]: fp32 carries more
//! than twice the significand bits of either plus two, so rounding an fp32 sum, product,
//! quotient or square root once more gives the correctly rounded result in the narrow format,
//! which is also how PyTorch's kernels compute on half-precision tensors.

use crate::autocast::Float;

/// fp32 to the bits of the nearest fp16 (ties to even).
pub fn f32_to_f16(f: f32) -> u16 {
    let x = f.to_bits();
    let sign = ((x >> 16) & 0x8000) as u16;
    let ax = x & 0x7fff_ffff;
    if ax > 0x7f80_0000 {
        return sign | 0x7e00; // quiet NaN
    }
    if ax >= 0x477f_f000 {
        return sign | 0x7c00; // 65520 and above round to infinity
    }
    if ax < 0x3880_0000 {
        // Below 2^-14: a subnormal fp16, in units of 2^-24.
        if ax < 0x3300_0000 {
            return sign; // below 2^-25: zero (2^-25 itself is a tie that goes to even, zero)
        }
        let e = ax >> 23;
        let m = (ax & 0x7f_ffff) | 0x80_0000;
        let shift = 126 - e; // 14..=24
        let mut q = m >> shift;
        let rem = m & ((1 << shift) - 1);
        let half = 1 << (shift - 1);
        if rem > half || (rem == half && q & 1 == 1) {
            q += 1;
        }
        return sign | q as u16;
    }
    let mut h = (((ax >> 23) - 112) << 10) | ((ax & 0x7f_ffff) >> 13);
    let rem = ax & 0x1fff;
    if rem > 0x1000 || (rem == 0x1000 && h & 1 == 1) {
        h += 1; // a carry into the exponent is the right answer
    }
    sign | h as u16
}

/// The fp16 with bits `h` as fp32 (exact).
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h as u32) & 0x8000) << 16;
    let e = ((h >> 10) & 0x1f) as u32;
    let mut m = (h & 0x3ff) as u32;
    let bits = match e {
        0x1f => sign | 0x7f80_0000 | (m << 13),
        0 if m == 0 => sign,
        0 => {
            // Subnormal: normalise.
            let mut e32 = 113u32;
            while m & 0x400 == 0 {
                m <<= 1;
                e32 -= 1;
            }
            sign | (e32 << 23) | ((m & 0x3ff) << 13)
        }
        _ => sign | ((e + 112) << 23) | (m << 13),
    };
    f32::from_bits(bits)
}

/// fp32 to the bits of the nearest bf16 (ties to even), as `kernels/common.cuh` does.
pub fn f32_to_bf16(f: f32) -> u16 {
    let u = f.to_bits();
    if u & 0x7fff_ffff > 0x7f80_0000 {
        return ((u >> 16) | 0x40) as u16; // quiet NaN
    }
    (u.wrapping_add(0x7fff + ((u >> 16) & 1)) >> 16) as u16
}

/// The bf16 with bits `b` as fp32 (exact).
pub fn bf16_to_f32(b: u16) -> f32 {
    f32::from_bits((b as u32) << 16)
}

/// `v` rounded to `format` and held in fp32 (every fp16 and bf16 value is an fp32 value).
pub fn round(format: Float, v: f32) -> f32 {
    match format {
        Float::F32 => v,
        Float::F16 => f16_to_f32(f32_to_f16(v)),
        Float::Bf16 => bf16_to_f32(f32_to_bf16(v)),
    }
}

/// Arithmetic in one format: each operation in fp32, its result rounded to the format. The
/// kernels' `fmt_add`, `fmt_mul`, ... of `kernels/precision.cu`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct In(pub Float);

impl In {
    pub fn round(self, v: f32) -> f32 {
        round(self.0, v)
    }
    pub fn add(self, a: f32, b: f32) -> f32 {
        self.round(a + b)
    }
    pub fn sub(self, a: f32, b: f32) -> f32 {
        self.round(a - b)
    }
    pub fn mul(self, a: f32, b: f32) -> f32 {
        self.round(a * b)
    }
    pub fn div(self, a: f32, b: f32) -> f32 {
        self.round(a / b)
    }
    pub fn sqrt(self, a: f32) -> f32 {
        self.round(a.sqrt())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The nearest fp16 to `v` by search over all finite fp16 values in f64 (ties to even),
    /// infinity beyond 65520: an independent reference.
    fn nearest_f16(v: f32) -> u16 {
        if v.is_nan() {
            return 0x7e00;
        }
        let x = v as f64;
        let sign = if v.is_sign_negative() { 0x8000 } else { 0 };
        let a = x.abs();
        if a >= 65520.0 {
            return sign | 0x7c00;
        }
        // Finite positive fp16 values are monotonic in their bits 0..=0x7bff.
        let value = |h: u16| f16_to_f32(h) as f64;
        let (mut lo, mut hi) = (0u16, 0x7bffu16);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if value(mid) <= a {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let pick = if value(hi) <= a {
            hi
        } else {
            let (dl, dh) = (a - value(lo), value(hi) - a);
            if dl < dh || (dl == dh && lo & 1 == 0) {
                lo
            } else {
                hi
            }
        };
        sign | pick
    }

    #[test]
    fn every_fp16_widens_and_narrows_back_to_itself() {
        for h in 0..=u16::MAX {
            let f = f16_to_f32(h);
            if f.is_nan() {
                assert_eq!(h & 0x7c00, 0x7c00);
                assert!(f32_to_f16(f) & 0x7fff > 0x7c00);
                continue;
            }
            assert_eq!(f32_to_f16(f), h, "{h:#06x} -> {f:e}");
        }
        assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24));
        assert_eq!(f16_to_f32(0x03ff), 1023.0 * 2f32.powi(-24));
        assert_eq!(f16_to_f32(0x7bff), 65504.0);
        assert_eq!(f16_to_f32(0x3c00), 1.0);
    }

    #[test]
    fn narrowing_to_fp16_rounds_to_nearest_even() {
        // Midpoints between neighbours and one ulp of fp32 either side, over the whole range.
        for h in 0..0x7bffu16 {
            let (a, b) = (f16_to_f32(h) as f64, f16_to_f32(h + 1) as f64);
            let mid = ((a + b) / 2.0) as f32; // exact in fp32
            for v in [
                mid,
                f32::from_bits(mid.to_bits() - 1),
                f32::from_bits(mid.to_bits() + 1),
            ] {
                assert_eq!(f32_to_f16(v), nearest_f16(v), "{v:e}");
                assert_eq!(f32_to_f16(-v), nearest_f16(-v), "{:e}", -v);
            }
        }
        // A spread of fp32 bit patterns, with every exponent.
        let mut x = 0x1234_5678u32;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let v = f32::from_bits(x);
            assert_eq!(f32_to_f16(v) & 0x7fff, nearest_f16(v) & 0x7fff, "{x:#010x}");
        }
    }

    #[test]
    fn fp16_edges() {
        assert_eq!(f32_to_f16(65504.0), 0x7bff);
        assert_eq!(f32_to_f16(65519.996), 0x7bff);
        assert_eq!(f32_to_f16(65520.0), 0x7c00);
        assert_eq!(f32_to_f16(f32::INFINITY), 0x7c00);
        assert_eq!(f32_to_f16(f32::NEG_INFINITY), 0xfc00);
        assert_eq!(f32_to_f16(2f32.powi(-25)), 0); // a tie, to even
        assert_eq!(f32_to_f16(f32::from_bits(0x3300_0001)), 1);
        assert_eq!(f32_to_f16(2f32.powi(-14)), 0x0400);
        assert_eq!(f32_to_f16(-0.0), 0x8000);
        assert_eq!(f16_to_f32(0x7c00), f32::INFINITY);
        // 0.01 as PyTorch's torch.tensor(0.01, dtype=torch.float16) holds it.
        assert_eq!(f16_to_f32(f32_to_f16(0.01)), 0.010002136);
    }

    #[test]
    fn bf16_rounds_to_nearest_even() {
        assert_eq!(f32_to_bf16(1.0), 0x3f80);
        // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: to even, 1.
        assert_eq!(f32_to_bf16(1.0 + 2f32.powi(-8)), 0x3f80);
        assert_eq!(f32_to_bf16(1.0 + 3.0 * 2f32.powi(-8)), 0x3f82);
        assert_eq!(bf16_to_f32(f32_to_bf16(0.01)) as f64, 0.010009765625);
        assert_eq!(f32_to_bf16(f32::MAX), 0x7f80); // rounds up to infinity
        assert!(bf16_to_f32(f32_to_bf16(f32::NAN)).is_nan());
        assert_eq!(
            round(Float::Bf16, 4.0 + bf16_to_f32(f32_to_bf16(0.01))),
            4.0
        );
    }

    #[test]
    fn arithmetic_in_a_format_rounds_each_result() {
        let h = In(Float::F16);
        assert_eq!(h.mul(300.0, 300.0), f32::INFINITY);
        assert_eq!(h.add(2048.0, 1.0), 2048.0);
        assert_eq!(In(Float::F32).add(2048.0, 1.0), 2049.0);
        assert_eq!(In(Float::Bf16).add(256.0, 1.0), 256.0);
    }
}
