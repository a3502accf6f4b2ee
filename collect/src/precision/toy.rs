//! The assignment's ToyModel under autocast (`benchmarking_mixed_precision (a)`): fc1 (20 → 10,
//! no bias) → ReLU → LayerNorm(10) → fc2 (10 → 5, no bias), cross-entropy over a batch of 8, and
//! the backward. Each operation's format comes from collect's autocast policy
//! ([`crate::autocast`], the one the transformer follows): [`ToyFormats::from_policy`] asks it
//! once per operation, passing the formats of the operation's inputs, and the kernel (`toy_step`)
//! and [`emulate`] round every result to the format they are given. The dtype of each tensor the
//! assignment asks about is then read from those formats, never written per row.
//!
//! As in the transformer, the weight gradients come out of the product in fp32 (PyTorch rounds
//! them to the low format first, then accumulates them into the fp32 `.grad`); the dtypes are the
//! same either way. Weights are uniform in ±1/√fan_in as `nn.Linear` draws them, from our own
//! generator, so the values are not PyTorch's; the dtypes do not depend on them.

use super::rounding::{round, In};
use super::{normal, uniform};
use crate::autocast::{Autocast, Float, Op};
use crate::error::Result;
use crate::gpu::device_memory::DType;
use crate::gpu::ops::Runtime;

pub const BATCH: usize = 8;
pub const WIDTH_IN: usize = 20;
pub const HIDDEN: usize = 10;
pub const CLASSES: usize = 5;
/// `nn.LayerNorm`'s default epsilon.
pub const LN_EPS: f32 = 1e-5;
/// The autocast formats the assignment asks about.
pub const AUTOCASTS: [Float; 2] = [Float::F16, Float::Bf16];
const SEED: u64 = 0x70_79;

/// The format of each of the toy's operations, in the order of the kernel's `formats` argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ToyFormats {
    /// fc1's product: operands cast to it, output in it.
    pub fc1: Float,
    pub relu: Float,
    /// LayerNorm: statistics, output and its backward.
    pub norm: Float,
    /// fc2's product: the logits.
    pub fc2: Float,
    /// Cross-entropy and the gradient it starts.
    pub loss: Float,
    pub grad: Float,
    pub param: Float,
}

impl ToyFormats {
    /// Ask `policy` for every operation, in the order the forward runs them.
    pub fn from_policy(policy: Autocast) -> ToyFormats {
        let param = policy.dtype(Op::Parameter, &[]);
        let input = Float::F32;
        let fc1 = policy.dtype(Op::Matmul, &[input, param]);
        let relu = policy.dtype(Op::Pointwise, &[fc1]);
        let norm = policy.dtype(Op::Normalization, &[relu]);
        let fc2 = policy.dtype(Op::Matmul, &[norm, param]);
        let loss = policy.dtype(Op::Loss, &[fc2]);
        let grad = policy.dtype(Op::Gradient, &[param]);
        ToyFormats {
            fc1,
            relu,
            norm,
            fc2,
            loss,
            grad,
            param,
        }
    }

    /// The kernel's `formats`: `TOY_FC1` ... `TOY_PARAM` of `kernels/precision.cu`.
    fn kernel_codes(&self) -> [i32; 7] {
        [
            self.fc1, self.relu, self.norm, self.fc2, self.loss, self.grad, self.param,
        ]
        .map(Float::kernel_code)
    }
}

/// The input, the parameters and the targets.
#[derive(Clone, Debug, PartialEq)]
pub struct ToyInputs {
    /// `[BATCH, WIDTH_IN]`, standard normal.
    pub x: Vec<f32>,
    /// `[HIDDEN, WIDTH_IN]`.
    pub w1: Vec<f32>,
    pub ln_w: Vec<f32>,
    pub ln_b: Vec<f32>,
    /// `[CLASSES, HIDDEN]`.
    pub w2: Vec<f32>,
    pub targets: Vec<i32>,
}

impl ToyInputs {
    pub fn new(seed: u64) -> ToyInputs {
        let linear = |fan_out: usize, fan_in: usize, stream: u64| -> Vec<f32> {
            let bound = 1.0 / (fan_in as f64).sqrt();
            (0..fan_out * fan_in)
                .map(|i| ((2.0 * uniform(seed ^ stream, i as u64) - 1.0) * bound) as f32)
                .collect()
        };
        ToyInputs {
            x: (0..BATCH * WIDTH_IN)
                .map(|i| normal(seed, i as u64) as f32)
                .collect(),
            w1: linear(HIDDEN, WIDTH_IN, 1),
            ln_w: vec![1.0; HIDDEN],
            ln_b: vec![0.0; HIDDEN],
            w2: linear(CLASSES, HIDDEN, 2),
            targets: (0..BATCH)
                .map(|i| (uniform(seed ^ 3, i as u64) * CLASSES as f64) as i32)
                .collect(),
        }
    }

    /// The kernel's `in`: x | w1 | ln_w | ln_b | w2.
    fn packed(&self) -> Vec<f32> {
        [&self.x[..], &self.w1, &self.ln_w, &self.ln_b, &self.w2].concat()
    }
}

/// What a step leaves, each tensor's values in its operation's format.
#[derive(Clone, Debug, PartialEq)]
pub struct ToyOutputs {
    /// `[BATCH, HIDDEN]`, after the ReLU (what the assignment calls fc1's output).
    pub fc1_out: Vec<f32>,
    pub ln_out: Vec<f32>,
    /// `[BATCH, CLASSES]`.
    pub logits: Vec<f32>,
    pub loss: f32,
    pub dw1: Vec<f32>,
    pub dln_w: Vec<f32>,
    pub dln_b: Vec<f32>,
    pub dw2: Vec<f32>,
}

/// Lengths of the kernel's `out` pieces, in order.
const OUT_PIECES: [usize; 8] = [
    BATCH * HIDDEN,
    BATCH * HIDDEN,
    BATCH * CLASSES,
    1,
    HIDDEN * WIDTH_IN,
    HIDDEN,
    HIDDEN,
    CLASSES * HIDDEN,
];

/// Length of the kernel's `scratch`: x, w1, w2 and the LayerNorm input cast, x̂, rstd, the
/// logits' gradient and the hidden gradient.
const SCRATCH_LEN: usize = BATCH * WIDTH_IN
    + HIDDEN * WIDTH_IN
    + CLASSES * HIDDEN
    + 2 * BATCH * HIDDEN
    + BATCH
    + BATCH * CLASSES
    + BATCH * HIDDEN;

impl ToyOutputs {
    fn from_packed(out: &[f32]) -> ToyOutputs {
        let mut rest = out;
        let mut take = |n: usize| {
            let (a, b) = rest.split_at(n);
            rest = b;
            a.to_vec()
        };
        let [a, b, c, d, e, f, g, h] = OUT_PIECES.map(&mut take);
        ToyOutputs {
            fc1_out: a,
            ln_out: b,
            logits: c,
            loss: d[0],
            dw1: e,
            dln_w: f,
            dln_b: g,
            dw2: h,
        }
    }
}

/// One run of the toy under autocast to `autocast`.
#[derive(Clone, Debug, PartialEq)]
pub struct ToyRun {
    pub autocast: Float,
    pub formats: ToyFormats,
    pub outputs: ToyOutputs,
}

/// The tensors the assignment asks about, as the reference script names them.
pub const TENSORS: [&str; 6] = [
    "parameters",
    "fc1 output",
    "layer norm output",
    "logits",
    "loss",
    "gradients",
];

impl ToyRun {
    /// The format of each of [`TENSORS`].
    pub fn dtypes(&self) -> [(&'static str, Float); 6] {
        let f = &self.formats;
        let of = [f.param, f.relu, f.norm, f.fc2, f.loss, f.grad];
        std::array::from_fn(|i| (TENSORS[i], of[i]))
    }

    /// Whether every value of each output is a value of the format it is said to be in (NaN
    /// aside): the check that the computation kept to the formats.
    pub fn values_fit_their_formats(&self) -> bool {
        let (f, o) = (&self.formats, &self.outputs);
        let fits =
            |format: Float, v: &[f32]| v.iter().all(|&x| x.is_nan() || round(format, x) == x);
        fits(f.relu, &o.fc1_out)
            && fits(f.norm, &o.ln_out)
            && fits(f.fc2, &o.logits)
            && fits(f.loss, &[o.loss])
            && [&o.dw1, &o.dln_w, &o.dln_b, &o.dw2]
                .iter()
                .all(|g| fits(f.grad, g))
    }
}

/// `Σ a[i·sa] b[i·sb]` over `k` terms with fp32 FMA accumulation, rounded once to `f`: the
/// kernel's `fmt_dot`.
fn dot(f: Float, a: &[f32], sa: usize, b: &[f32], sb: usize, k: usize) -> f32 {
    let acc = (0..k).fold(0.0f32, |acc, i| a[i * sa].mul_add(b[i * sb], acc));
    round(f, acc)
}

/// The kernel's `toy_step` on the CPU, operation for operation.
fn step(inp: &ToyInputs, f: &ToyFormats) -> ToyOutputs {
    let (bs, wi, hd, cl) = (BATCH, WIDTH_IN, HIDDEN, CLASSES);
    let param = |v: f32| round(f.param, v);
    let x_c: Vec<f32> = inp.x.iter().map(|&v| round(f.fc1, v)).collect();
    let w1_c: Vec<f32> = inp.w1.iter().map(|&v| round(f.fc1, param(v))).collect();
    let mut fc1_out = vec![0.0f32; bs * hd];
    for b in 0..bs {
        for j in 0..hd {
            let h = dot(f.fc1, &x_c[b * wi..], 1, &w1_c[j * wi..], 1, wi);
            fc1_out[b * hd + j] = round(f.relu, if h > 0.0 { h } else { 0.0 });
        }
    }

    let n = In(f.norm);
    let eps = n.round(LN_EPS);
    let count = n.round(hd as f32);
    let (mut xhat, mut rstd, mut ln_out) = (
        vec![0.0f32; bs * hd],
        vec![0.0f32; bs],
        vec![0.0f32; bs * hd],
    );
    for b in 0..bs {
        let u = |j: usize| n.round(fc1_out[b * hd + j]);
        let mean = n.div((0..hd).fold(0.0, |s, j| n.add(s, u(j))), count);
        let v = (0..hd).fold(0.0, |v, j| {
            let d = n.sub(u(j), mean);
            n.add(v, n.mul(d, d))
        });
        let r = n.div(1.0, n.sqrt(n.add(n.div(v, count), eps)));
        rstd[b] = r;
        for j in 0..hd {
            let xh = n.mul(n.sub(u(j), mean), r);
            xhat[b * hd + j] = xh;
            ln_out[b * hd + j] = n.add(n.mul(xh, param(inp.ln_w[j])), param(inp.ln_b[j]));
        }
    }

    let ln_c: Vec<f32> = ln_out.iter().map(|&v| round(f.fc2, v)).collect();
    let w2_c: Vec<f32> = inp.w2.iter().map(|&v| round(f.fc2, param(v))).collect();
    let mut logits = vec![0.0f32; bs * cl];
    for b in 0..bs {
        for o in 0..cl {
            logits[b * cl + o] = dot(f.fc2, &ln_c[b * hd..], 1, &w2_c[o * hd..], 1, hd);
        }
    }

    let l = In(f.loss);
    let inv_b = l.div(1.0, l.round(bs as f32));
    let mut total = 0.0f32;
    let mut dlogits = vec![0.0f32; bs * cl];
    for b in 0..bs {
        let z = |o: usize| l.round(logits[b * cl + o]);
        let t = inp.targets[b] as usize;
        let m = (1..cl).fold(z(0), |m, o| m.max(z(o)));
        let s = (0..cl).fold(0.0, |s, o| l.add(s, l.round(l.sub(z(o), m).exp())));
        let lse = l.add(m, l.round(s.ln()));
        total = l.add(total, l.sub(lse, z(t)));
        for o in 0..cl {
            let p = l.round(l.sub(z(o), lse).exp());
            let g = l.mul(l.sub(p, if o == t { 1.0 } else { 0.0 }), inv_b);
            dlogits[b * cl + o] = round(f.fc2, g);
        }
    }
    let loss = l.mul(total, inv_b);

    let mut dw2 = vec![0.0f32; cl * hd];
    for o in 0..cl {
        for j in 0..hd {
            dw2[o * hd + j] = round(
                f.grad,
                dot(Float::F32, &dlogits[o..], cl, &ln_c[j..], hd, bs),
            );
        }
    }
    let gr = In(f.grad);
    let (mut dln_w, mut dln_b) = (vec![0.0f32; hd], vec![0.0f32; hd]);
    let mut dh = vec![0.0f32; bs * hd];
    for b in 0..bs {
        let mut g = [0.0f32; HIDDEN];
        let (mut sg, mut sgx) = (0.0f32, 0.0f32);
        for j in 0..hd {
            let dy = n.round(dot(f.fc2, &dlogits[b * cl..], 1, &w2_c[j..], hd, cl));
            let xh = xhat[b * hd + j];
            dln_w[j] = gr.add(dln_w[j], gr.round(n.mul(dy, xh)));
            dln_b[j] = gr.add(dln_b[j], gr.round(dy));
            g[j] = n.mul(dy, param(inp.ln_w[j]));
            sg = n.add(sg, g[j]);
            sgx = n.add(sgx, n.mul(g[j], xh));
        }
        let (mg, mgx) = (n.div(sg, count), n.div(sgx, count));
        for j in 0..hd {
            let t = n.sub(n.sub(g[j], mg), n.mul(xhat[b * hd + j], mgx));
            let d = round(f.relu, n.mul(rstd[b], t));
            dh[b * hd + j] = if fc1_out[b * hd + j] > 0.0 {
                round(f.fc1, d)
            } else {
                0.0
            };
        }
    }
    let mut dw1 = vec![0.0f32; hd * wi];
    for j in 0..hd {
        for k in 0..wi {
            dw1[j * wi + k] = round(f.grad, dot(Float::F32, &dh[j..], hd, &x_c[k..], wi, bs));
        }
    }
    ToyOutputs {
        fc1_out,
        ln_out,
        logits,
        loss,
        dw1,
        dln_w,
        dln_b,
        dw2,
    }
}

/// The toy under autocast to `low`, on the CPU.
pub fn emulate(low: Float) -> ToyRun {
    let formats = ToyFormats::from_policy(Autocast::to(low));
    ToyRun {
        autocast: low,
        formats,
        outputs: step(&ToyInputs::new(SEED), &formats),
    }
}

/// The toy under autocast to `low`, computed by `toy_step` on the GPU.
pub fn on_gpu(rt: &Runtime, low: Float) -> Result<ToyRun> {
    let formats = ToyFormats::from_policy(Autocast::to(low));
    let inputs = ToyInputs::new(SEED);
    let gpu = &rt.gpu;
    let input = gpu.upload(DType::F32, &inputs.packed())?;
    let targets = gpu.upload(DType::I32, &inputs.targets)?;
    let codes = gpu.upload(DType::I32, &formats.kernel_codes())?;
    let out_len: usize = OUT_PIECES.iter().sum();
    let out = gpu.memory.alloc(DType::F32, out_len)?;
    let scratch = gpu.memory.alloc(DType::F32, SCRATCH_LEN)?;
    rt.toy_step(
        input.ptr(),
        targets.ptr(),
        codes.ptr(),
        out.ptr(),
        scratch.ptr(),
        [BATCH, WIDTH_IN, HIDDEN, CLASSES],
    )?;
    let values: Vec<f32> = gpu.download(out.ptr(), out_len)?;
    Ok(ToyRun {
        autocast: low,
        formats,
        outputs: ToyOutputs::from_packed(&values),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::precision::pytorch;

    #[test]
    fn dtypes_equal_pytorchs_row_for_row() {
        let torch = pytorch::reference();
        for low in AUTOCASTS {
            let run = emulate(low);
            for (tensor, dtype) in run.dtypes() {
                assert_eq!(
                    Some(dtype.torch_name()),
                    torch.toy_dtype(low, tensor),
                    "{low} {tensor}"
                );
            }
        }
    }

    #[test]
    fn the_step_keeps_every_tensor_in_its_format() {
        for low in AUTOCASTS {
            let run = emulate(low);
            assert!(run.values_fit_their_formats(), "{low}");
            let o = &run.outputs;
            // The LayerNorm output is genuinely fp32: not every value is a value of the low format.
            assert!(o.ln_out.iter().any(|&v| round(low, v) != v));
            assert!(o.loss.is_finite() && o.loss > 0.0);
            // Rows of the LayerNorm output have mean 0 and variance 1 (up to eps and rounding).
            let row = &o.ln_out[..HIDDEN];
            let mean: f32 = row.iter().sum::<f32>() / HIDDEN as f32;
            assert!(mean.abs() < 1e-5, "{mean}");
        }
    }

    #[test]
    fn gradients_agree_between_fp16_and_bf16_within_their_rounding() {
        let (a, b) = (emulate(Float::F16).outputs, emulate(Float::Bf16).outputs);
        let max = a.dw1.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        assert!(max > 0.0);
        for (x, y) in a.dw1.iter().zip(&b.dw1) {
            assert!((x - y).abs() <= 0.05 * max, "{x} {y}");
        }
        assert!((a.loss - b.loss).abs() < 0.02, "{} {}", a.loss, b.loss);
    }

    #[test]
    fn without_autocast_everything_is_fp32() {
        let f = ToyFormats::from_policy(Autocast::OFF);
        assert_eq!(f.kernel_codes(), [0; 7]);
    }

    #[test]
    fn packed_layouts_add_up() {
        let inp = ToyInputs::new(SEED);
        assert_eq!(
            inp.packed().len(),
            BATCH * WIDTH_IN + HIDDEN * WIDTH_IN + 2 * HIDDEN + CLASSES * HIDDEN
        );
        assert!(inp
            .targets
            .iter()
            .all(|&t| (0..CLASSES as i32).contains(&t)));
        let total: usize = OUT_PIECES.iter().sum();
        let out = ToyOutputs::from_packed(&(0..total).map(|i| i as f32).collect::<Vec<_>>());
        assert_eq!(out.loss, (2 * BATCH * HIDDEN + BATCH * CLASSES) as f32);
        assert_eq!(out.dw2.len(), CLASSES * HIDDEN);
    }
}
