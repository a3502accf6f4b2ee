//! Which parts of layer normalisation are sensitive to reduced precision
//! (`benchmarking_mixed_precision (b)`): rows of [`WIDTH`] fp32 values normalised with every
//! operation in fp16, bf16 or fp32, against an fp64 reference of the same fp32 row.
//!
//! In a format, the row is first cast to it, then: the mean `Σx / n`; the mean of squares
//! `Σx² / n` and the naive variance `E[x²] − E[x]²`; the two-pass variance `Σ(x − mean)² / n`; and
//! the normalised row `(x − mean) / sqrt(var + eps)` with each variance. Every sum, product,
//! quotient and square root is rounded to the format, and sums are a fixed tree (neighbours, then
//! pairs of pairs) as a block reduction adds them. The kernel (`layernorm_in_formats`, one thread
//! per row and format) and [`emulate`] do the same operations in the same order.
//!
//! The rows are chosen to separate the failures: a well-scaled row; a row whose squares fit fp16
//! but whose sum of squares does not (fp16's range, 65504); a row whose squares themselves
//! overflow fp16; and a row with a large mean and a small spread, where `E[x²] − E[x]²` cancels
//! catastrophically and the spread is below bf16's (and fp16's) resolution at the mean.

use super::normal;
use super::rounding::In;
use crate::autocast::Float;
use crate::error::Result;
use crate::gpu::device_memory::DType;
use crate::gpu::ops::Runtime;

/// Values per row (a model width).
pub const WIDTH: usize = 1024;
/// `nn.LayerNorm`'s default epsilon.
pub const EPS: f32 = 1e-5;
/// The formats each row is normalised in, in the table's order.
pub const FORMATS: [Float; 3] = [Float::F16, Float::Bf16, Float::F32];
const SEED: u64 = 0x4c4e;

/// One input row: `mean + std · N(0, 1)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Input {
    pub name: &'static str,
    /// What goes wrong, and where.
    pub about: &'static str,
    pub mean: f64,
    pub std: f64,
}

pub const INPUTS: [Input; 4] = [
    Input {
        name: "N(0,1)",
        about: "well scaled",
        mean: 0.0,
        std: 1.0,
    },
    Input {
        name: "N(0,16^2)",
        about: "every x^2 fits fp16; their sum over the row (about 2.7e5) does not",
        mean: 0.0,
        std: 16.0,
    },
    Input {
        name: "N(0,300^2)",
        about: "x^2 itself is above fp16's largest value, 65504, for |x| >= 256",
        mean: 0.0,
        std: 300.0,
    },
    Input {
        name: "1000+N(0,0.1^2)",
        about: "a large mean and a small spread: E[x^2] - E[x]^2 cancels, and 0.1 is below bf16's \
                step at 1000 (4) and fp16's (0.5)",
        mean: 1000.0,
        std: 0.1,
    },
];

impl Input {
    /// The row, in fp32.
    pub fn row(&self, index: usize) -> Vec<f32> {
        let seed = SEED ^ ((index as u64) << 32);
        (0..WIDTH)
            .map(|j| (self.mean + self.std * normal(seed, j as u64)) as f32)
            .collect()
    }
}

/// LayerNorm's statistics of one row computed in one format (values of that format).
#[derive(Clone, Debug, PartialEq)]
pub struct Computed {
    pub mean: f32,
    pub mean_sq: f32,
    /// `E[x²] − E[x]²`.
    pub var_naive: f32,
    /// `Σ(x − mean)² / n`.
    pub var_two_pass: f32,
    /// The row normalised with the naive variance.
    pub y_naive: Vec<f32>,
    /// The row normalised with the two-pass variance.
    pub y_two_pass: Vec<f32>,
}

/// The same in fp64, from the fp32 row.
#[derive(Clone, Debug, PartialEq)]
pub struct Reference {
    pub mean: f64,
    pub var: f64,
    pub y: Vec<f64>,
}

impl Reference {
    pub fn of(x: &[f32]) -> Reference {
        let n = x.len() as f64;
        let mean = x.iter().map(|&v| v as f64).sum::<f64>() / n;
        let var = x.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n;
        let rstd = 1.0 / (var + EPS as f64).sqrt();
        Reference {
            mean,
            var,
            y: x.iter().map(|&v| (v as f64 - mean) * rstd).collect(),
        }
    }
}

/// One row of the table: an input normalised in one format, and the reference.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub input: Input,
    pub format: Float,
    pub computed: Computed,
    pub reference: Reference,
}

/// `|v − r| / |r|`; infinite or NaN when `v` is.
fn relative(v: f32, r: f64) -> f64 {
    (v as f64 - r).abs() / r.abs()
}

/// `max |y − ŷ| / max |ŷ|`: NaN when any `y` is NaN, infinite when any is infinite.
pub fn output_error(y: &[f32], reference: &[f64]) -> f64 {
    let scale = reference.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let mut worst = 0.0f64;
    for (&a, &b) in y.iter().zip(reference) {
        let e = (a as f64 - b).abs();
        if e.is_nan() {
            return f64::NAN;
        }
        worst = worst.max(e);
    }
    worst / scale
}

impl Row {
    /// `|mean − mean_ref| / σ_ref`: the mean's error in units of the row's spread, which is
    /// what the normalisation divides by.
    pub fn mean_error(&self) -> f64 {
        (self.computed.mean as f64 - self.reference.mean).abs() / self.reference.var.sqrt()
    }

    pub fn var_naive_error(&self) -> f64 {
        relative(self.computed.var_naive, self.reference.var)
    }

    pub fn var_two_pass_error(&self) -> f64 {
        relative(self.computed.var_two_pass, self.reference.var)
    }

    /// The normalised row's error with the naive variance (see [`output_error`]).
    pub fn output_naive_error(&self) -> f64 {
        output_error(&self.computed.y_naive, &self.reference.y)
    }

    pub fn output_two_pass_error(&self) -> f64 {
        output_error(&self.computed.y_two_pass, &self.reference.y)
    }
}

/// `buf` summed as the kernel's `fmt_tree_sum` does: neighbours, then pairs of pairs, each sum
/// rounded. Overwrites `buf`.
fn tree_sum(f: In, buf: &mut [f32]) -> f32 {
    let n = buf.len();
    let mut w = 1;
    while w < n {
        let mut i = 0;
        while i + w < n {
            buf[i] = f.add(buf[i], buf[i + w]);
            i += 2 * w;
        }
        w *= 2;
    }
    buf.first().copied().unwrap_or(0.0)
}

/// LayerNorm's statistics of `x` in `format`, operation for operation as the kernel does them.
pub fn compute(format: Float, x: &[f32]) -> Computed {
    let f = In(format);
    let count = f.round(x.len() as f32);
    let eps = f.round(EPS);
    let xs: Vec<f32> = x.iter().map(|&v| f.round(v)).collect();
    let mean = f.div(tree_sum(f, &mut xs.clone()), count);
    let mut squares: Vec<f32> = xs.iter().map(|&v| f.mul(v, v)).collect();
    let mean_sq = f.div(tree_sum(f, &mut squares), count);
    let var_naive = f.sub(mean_sq, f.mul(mean, mean));
    let d: Vec<f32> = xs.iter().map(|&v| f.sub(v, mean)).collect();
    let mut dd: Vec<f32> = d.iter().map(|&v| f.mul(v, v)).collect();
    let var_two_pass = f.div(tree_sum(f, &mut dd), count);
    let rstd = |var: f32| f.div(1.0, f.sqrt(f.add(var, eps)));
    let (r_naive, r_two_pass) = (rstd(var_naive), rstd(var_two_pass));
    Computed {
        mean,
        mean_sq,
        var_naive,
        var_two_pass,
        y_naive: d.iter().map(|&v| f.mul(v, r_naive)).collect(),
        y_two_pass: d.iter().map(|&v| f.mul(v, r_two_pass)).collect(),
    }
}

/// Every input in every format, on the CPU.
pub fn emulate() -> Vec<Row> {
    let mut rows = Vec::new();
    for (i, input) in INPUTS.iter().enumerate() {
        let x = input.row(i);
        let reference = Reference::of(&x);
        for format in FORMATS {
            rows.push(Row {
                input: *input,
                format,
                computed: compute(format, &x),
                reference: reference.clone(),
            });
        }
    }
    rows
}

/// Every input in every format, computed by `layernorm_in_formats` on the GPU (one thread per
/// row and format); the reference on the host.
pub fn on_gpu(rt: &Runtime) -> Result<Vec<Row>> {
    let gpu = &rt.gpu;
    let (rows, nf, n) = (INPUTS.len(), FORMATS.len(), WIDTH);
    let xs: Vec<Vec<f32>> = INPUTS.iter().enumerate().map(|(i, p)| p.row(i)).collect();
    let x = gpu.upload(DType::F32, &xs.concat())?;
    let codes = gpu.upload(DType::I32, &FORMATS.map(Float::kernel_code))?;
    let cases = rows * nf;
    let scratch = gpu.memory.alloc(DType::F32, cases * n)?;
    let stats = gpu.memory.alloc(DType::F32, cases * 4)?;
    let y_naive = gpu.memory.alloc(DType::F32, cases * n)?;
    let y_two_pass = gpu.memory.alloc(DType::F32, cases * n)?;
    rt.layernorm_in_formats(
        x.ptr(),
        n,
        rows,
        codes.ptr(),
        nf,
        EPS,
        scratch.ptr(),
        stats.ptr(),
        y_naive.ptr(),
        y_two_pass.ptr(),
    )?;
    let stats: Vec<f32> = gpu.download(stats.ptr(), cases * 4)?;
    let y_naive: Vec<f32> = gpu.download(y_naive.ptr(), cases * n)?;
    let y_two_pass: Vec<f32> = gpu.download(y_two_pass.ptr(), cases * n)?;
    let mut out = Vec::with_capacity(cases);
    for (i, input) in INPUTS.iter().enumerate() {
        let reference = Reference::of(&xs[i]);
        for (k, format) in FORMATS.into_iter().enumerate() {
            let b = i * nf + k;
            out.push(Row {
                input: *input,
                format,
                computed: Computed {
                    mean: stats[4 * b],
                    mean_sq: stats[4 * b + 1],
                    var_naive: stats[4 * b + 2],
                    var_two_pass: stats[4 * b + 3],
                    y_naive: y_naive[b * n..(b + 1) * n].to_vec(),
                    y_two_pass: y_two_pass[b * n..(b + 1) * n].to_vec(),
                },
                reference: reference.clone(),
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row<'a>(rows: &'a [Row], input: &str, format: Float) -> &'a Row {
        rows.iter()
            .find(|r| r.input.name == input && r.format == format)
            .expect("a row of the table")
    }

    #[test]
    fn the_rows_have_the_spread_asked_for() {
        for (i, input) in INPUTS.iter().enumerate() {
            let r = Reference::of(&input.row(i));
            assert!(
                (r.mean - input.mean).abs() < 4.0 * input.std / 32.0,
                "{}",
                input.name
            );
            assert!(
                (r.var.sqrt() / input.std - 1.0).abs() < 0.1,
                "{}",
                input.name
            );
        }
    }

    #[test]
    fn fp16_overflows_where_bf16_does_not() {
        let rows = emulate();
        for input in ["N(0,16^2)", "N(0,300^2)"] {
            let h = row(&rows, input, Float::F16);
            assert_eq!(h.computed.var_two_pass, f32::INFINITY, "{input}");
            let e = h.output_two_pass_error();
            assert!(e.is_nan() || e >= 0.5, "{input}: {e}"); // 1 (all zeros), or NaN
            let b = row(&rows, input, Float::Bf16);
            assert!(
                b.var_two_pass_error() < 0.02,
                "{input}: {}",
                b.var_two_pass_error()
            );
            assert!(
                b.output_two_pass_error() < 0.02,
                "{input}: {}",
                b.output_two_pass_error()
            );
        }
        // The squares of N(0, 16²) fit fp16; only their sum overflows.
        let x = INPUTS[1].row(1);
        assert!(x.iter().all(|&v| v * v < 65504.0));
    }

    #[test]
    fn a_large_mean_defeats_bf16_and_the_naive_variance_even_in_fp32() {
        let rows = emulate();
        let b = row(&rows, "1000+N(0,0.1^2)", Float::Bf16);
        assert_eq!(b.computed.var_two_pass, 0.0); // every value rounds to 1000
        assert!(b.output_two_pass_error() > 0.9);
        let h = row(&rows, "1000+N(0,0.1^2)", Float::F16);
        assert!(h.output_two_pass_error().is_nan()); // the sum of the row overflows
        let s = row(&rows, "1000+N(0,0.1^2)", Float::F32);
        assert!(s.var_two_pass_error() < 0.01, "{}", s.var_two_pass_error());
        let e = s.var_naive_error();
        assert!(e.is_nan() || e >= 1.0, "{e}");
    }

    #[test]
    fn well_scaled_rows_are_fine_in_every_format() {
        let rows = emulate();
        for (format, bound) in [(Float::F16, 3e-3), (Float::Bf16, 2e-2), (Float::F32, 1e-6)] {
            let r = row(&rows, "N(0,1)", format);
            assert!(
                r.output_two_pass_error() < bound,
                "{format}: {}",
                r.output_two_pass_error()
            );
            assert!(
                r.output_naive_error() < bound,
                "{format}: {}",
                r.output_naive_error()
            );
        }
    }

    #[test]
    fn tree_sums_pair_neighbours_first() {
        // In bf16 (steps of 2 at 256) adding 1 to 256 is a tie that stays at 256: one at a time
        // every 1 is lost; the tree loses only the first and adds the others together first.
        let mut v = vec![1.0f32; 8];
        v[0] = 256.0;
        assert_eq!(tree_sum(In(Float::Bf16), &mut v.clone()), 262.0);
        let seq = v.iter().fold(0.0, |s, &x| In(Float::Bf16).add(s, x));
        assert_eq!(seq, 256.0);
        assert_eq!(tree_sum(In(Float::F32), &mut [1.0, 2.0, 3.0]), 6.0);
        assert_eq!(tree_sum(In(Float::F32), &mut []), 0.0);
    }

    #[test]
    fn output_errors_say_nan_and_infinity() {
        assert!(output_error(&[f32::NAN, 0.0], &[1.0, 0.0]).is_nan());
        assert_eq!(output_error(&[f32::INFINITY], &[1.0]), f64::INFINITY);
        assert_eq!(output_error(&[0.0, 0.0], &[1.0, -2.0]), 1.0);
    }
}
