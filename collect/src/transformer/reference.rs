//! A plain CPU forward of the same model in f64, written from the architecture's definition and
//! sharing no code with the GPU path: the referee for the GPU's logits and loss, and, through
//! central differences, for its gradients. Beside it the attention core alone, forward and
//! backward ([`attention`], [`attention_backward`]), the referee of both GPU attention
//! implementations. Slow and only for tiny configurations.

use crate::transformer::config::{ModelConfig, RMS_EPS, ROPE_THETA};
use crate::transformer::params::ParamLayout;

/// Logits `[tokens, vocab]` and mean cross-entropy.
pub struct Output {
    pub logits: Vec<f64>,
    pub loss: f64,
}

fn tensor<'a>(layout: &ParamLayout, params: &'a [f64], name: &str) -> &'a [f64] {
    let t = layout
        .tensors
        .iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("no tensor {name}"));
    &params[t.offset..t.offset + t.len()]
}

/// `y[r, o] = sum_i x[r, i] * w[o, i]`.
fn linear(x: &[f64], rows: usize, d_in: usize, w: &[f64], d_out: usize) -> Vec<f64> {
    let mut y = vec![0.0; rows * d_out];
    for r in 0..rows {
        let xr = &x[r * d_in..(r + 1) * d_in];
        for o in 0..d_out {
            let wo = &w[o * d_in..(o + 1) * d_in];
            y[r * d_out + o] = xr.iter().zip(wo).map(|(a, b)| a * b).sum();
        }
    }
    y
}

fn rmsnorm(x: &[f64], rows: usize, d: usize, w: &[f64]) -> Vec<f64> {
    let mut y = vec![0.0; rows * d];
    for r in 0..rows {
        let xr = &x[r * d..(r + 1) * d];
        let ms = xr.iter().map(|v| v * v).sum::<f64>() / d as f64;
        let s = 1.0 / (ms + RMS_EPS as f64).sqrt();
        for j in 0..d {
            y[r * d + j] = xr[j] * s * w[j];
        }
    }
    y
}

/// Forward of `config` with `params` (the flat layout) on `tokens` (`batch * ctx`, row-major),
/// scored against `targets`.
pub fn forward(
    c: &ModelConfig,
    params: &[f32],
    tokens: &[i32],
    targets: &[i32],
    batch: usize,
    ctx: usize,
) -> Output {
    let p: Vec<f64> = params.iter().map(|&v| v as f64).collect();
    forward_f64(c, &p, tokens, targets, batch, ctx)
}

/// [`forward`] with f64 parameters (for finite differences).
pub fn forward_f64(
    c: &ModelConfig,
    p: &[f64],
    tokens: &[i32],
    targets: &[i32],
    batch: usize,
    ctx: usize,
) -> Output {
    let layout = ParamLayout::new(c);
    let (d, f, h, v) = (c.d_model, c.d_ff, c.heads, c.vocab);
    let dh = c.d_head();
    let n = batch * ctx;
    let emb = tensor(&layout, p, "emb");
    let mut x = vec![0.0; n * d];
    for r in 0..n {
        let t = tokens[r] as usize;
        x[r * d..(r + 1) * d].copy_from_slice(&emb[t * d..(t + 1) * d]);
    }
    for l in 0..c.layers {
        let w = |s: &str| tensor(&layout, p, &format!("layers.{l}.{s}"));
        let y = rmsnorm(&x, n, d, w("ln1.weight"));
        let mut q = linear(&y, n, d, w("q.weight"), d);
        let mut k = linear(&y, n, d, w("k.weight"), d);
        let vv = linear(&y, n, d, w("v.weight"), d);
        // RoPE on interleaved pairs of each head, by position within the sequence.
        for r in 0..n {
            let pos = (r % ctx) as f64;
            for hh in 0..h {
                for i in 0..dh / 2 {
                    let ang = pos * (ROPE_THETA as f64).powf(-((2 * i) as f64) / dh as f64);
                    let (s, co) = ang.sin_cos();
                    for m in [&mut q, &mut k] {
                        let a = r * d + hh * dh + 2 * i;
                        let (x1, x2) = (m[a], m[a + 1]);
                        m[a] = x1 * co - x2 * s;
                        m[a + 1] = x1 * s + x2 * co;
                    }
                }
            }
        }
        let mut attn = vec![0.0; n * d];
        let scale = 1.0 / (dh as f64).sqrt();
        for b in 0..batch {
            for hh in 0..h {
                for i in 0..ctx {
                    let qi = &q[(b * ctx + i) * d + hh * dh..][..dh];
                    let scores: Vec<f64> = (0..=i)
                        .map(|j| {
                            let kj = &k[(b * ctx + j) * d + hh * dh..][..dh];
                            qi.iter().zip(kj).map(|(a, c)| a * c).sum::<f64>() * scale
                        })
                        .collect();
                    let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
                    let z: f64 = e.iter().sum();
                    for (j, ej) in e.iter().enumerate() {
                        let vj = &vv[(b * ctx + j) * d + hh * dh..][..dh];
                        for t in 0..dh {
                            attn[(b * ctx + i) * d + hh * dh + t] += ej / z * vj[t];
                        }
                    }
                }
            }
        }
        let o = linear(&attn, n, d, w("o.weight"), d);
        for (xi, oi) in x.iter_mut().zip(&o) {
            *xi += oi;
        }
        let y = rmsnorm(&x, n, d, w("ln2.weight"));
        let a = linear(&y, n, d, w("w1.weight"), f);
        let bgate = linear(&y, n, d, w("w3.weight"), f);
        let g: Vec<f64> = a
            .iter()
            .zip(&bgate)
            .map(|(a, b)| a / (1.0 + (-a).exp()) * b)
            .collect();
        let o = linear(&g, n, f, w("w2.weight"), d);
        for (xi, oi) in x.iter_mut().zip(&o) {
            *xi += oi;
        }
    }
    let y = rmsnorm(&x, n, d, tensor(&layout, p, "ln.weight"));
    let logits = linear(&y, n, d, tensor(&layout, p, "head.weight"), v);
    let mut loss = 0.0;
    for r in 0..n {
        let row = &logits[r * v..(r + 1) * v];
        let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let lse = m + row.iter().map(|x| (x - m).exp()).sum::<f64>().ln();
        loss += lse - row[targets[r] as usize];
    }
    Output {
        logits,
        loss: loss / n as f64,
    }
}

/// The shape of a reference attention: `heads` independent heads (batch × heads) of `t` rows of
/// width `d`, every tensor row-major `[heads, t, d]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionShape {
    pub heads: usize,
    pub t: usize,
    pub d: usize,
    /// Key `j` is visible to query `i` only when `j <= i`.
    pub causal: bool,
}

impl AttentionShape {
    fn visible(&self, i: usize) -> usize {
        if self.causal {
            i + 1
        } else {
            self.t
        }
    }

    /// The probabilities of query `i` of head `h` (over the visible keys), and the logsumexp of
    /// its scaled scores.
    fn probabilities(&self, q: &[f64], k: &[f64], h: usize, i: usize) -> (Vec<f64>, f64) {
        let (t, d) = (self.t, self.d);
        let scale = 1.0 / (d as f64).sqrt();
        let qi = &q[(h * t + i) * d..][..d];
        let s: Vec<f64> = (0..self.visible(i))
            .map(|j| {
                scale
                    * qi.iter()
                        .zip(&k[(h * t + j) * d..][..d])
                        .map(|(a, b)| a * b)
                        .sum::<f64>()
            })
            .collect();
        let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let lse = m + s.iter().map(|x| (x - m).exp()).sum::<f64>().ln();
        (s.iter().map(|x| (x - lse).exp()).collect(), lse)
    }
}

/// `o = softmax(q kᵀ / √d [causal]) v` per head, and the logsumexp `L` of each row's scaled
/// scores (`[heads, t]`).
pub fn attention(s: AttentionShape, q: &[f64], k: &[f64], v: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let (t, d) = (s.t, s.d);
    let mut o = vec![0.0; s.heads * t * d];
    let mut lse = vec![0.0; s.heads * t];
    for h in 0..s.heads {
        for i in 0..t {
            let (p, l) = s.probabilities(q, k, h, i);
            lse[h * t + i] = l;
            let oi = &mut o[(h * t + i) * d..][..d];
            for (j, pj) in p.iter().enumerate() {
                for (x, vj) in oi.iter_mut().zip(&v[(h * t + j) * d..][..d]) {
                    *x += pj * vj;
                }
            }
        }
    }
    (o, lse)
}

/// The gradients of `q`, `k`, `v` given that of the output, `d_out`: with `P` the
/// probabilities, `dV = Pᵀ dO`, `dP = dO vᵀ`, `dS = P ⊙ (dP − rowsum(P ⊙ dP))`, and, through the
/// scale, `dQ = dS k / √d`, `dK = dSᵀ q / √d`.
pub fn attention_backward(
    s: AttentionShape,
    q: &[f64],
    k: &[f64],
    v: &[f64],
    d_out: &[f64],
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (t, d) = (s.t, s.d);
    let scale = 1.0 / (d as f64).sqrt();
    let n = s.heads * t * d;
    let (mut dq, mut dk, mut dv) = (vec![0.0; n], vec![0.0; n], vec![0.0; n]);
    let row = |h: usize, i: usize| (h * t + i) * d..(h * t + i + 1) * d;
    for h in 0..s.heads {
        for i in 0..t {
            let (p, _) = s.probabilities(q, k, h, i);
            let doi = &d_out[row(h, i)];
            let dp: Vec<f64> = (0..p.len())
                .map(|j| doi.iter().zip(&v[row(h, j)]).map(|(a, b)| a * b).sum())
                .collect();
            let sum: f64 = p.iter().zip(&dp).map(|(a, b)| a * b).sum();
            for j in 0..p.len() {
                let ds = p[j] * (dp[j] - sum) * scale;
                for e in 0..d {
                    dv[(h * t + j) * d + e] += p[j] * doi[e];
                    dq[(h * t + i) * d + e] += ds * k[(h * t + j) * d + e];
                    dk[(h * t + j) * d + e] += ds * q[(h * t + i) * d + e];
                }
            }
        }
    }
    (dq, dk, dv)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> ModelConfig {
        let mut c = ModelConfig::custom(16, 24, 2, 2).unwrap();
        c.vocab = 50;
        c
    }

    fn params(c: &ModelConfig) -> Vec<f32> {
        let layout = ParamLayout::new(c);
        let mut p = vec![0.0f32; layout.total];
        for (i, v) in p.iter_mut().enumerate() {
            *v = ((crate::transformer::splitmix64(i as u64) % 2001) as f32 - 1000.0) / 2000.0;
        }
        for t in layout.tensors.iter().filter(|t| t.name.contains("ln")) {
            p[t.offset..t.offset + t.len()].fill(1.0);
        }
        p
    }

    #[test]
    fn attention_is_causal() {
        let c = tiny();
        let p = params(&c);
        let tokens: Vec<i32> = (0..8).map(|i| i * 7 % 50).collect();
        let mut changed = tokens.clone();
        changed[7] = 3;
        let a = forward(&c, &p, &tokens, &tokens, 1, 8);
        let b = forward(&c, &p, &changed, &tokens, 1, 8);
        // Positions before the changed one see the same logits; the changed one differs.
        assert_eq!(a.logits[..7 * 50], b.logits[..7 * 50]);
        assert_ne!(a.logits[7 * 50..], b.logits[7 * 50..]);
    }

    #[test]
    fn uniform_logits_give_log_vocab() {
        // A zero head makes every logit 0, so the loss is ln(vocab) exactly.
        let c = tiny();
        let mut p = params(&c);
        let layout = ParamLayout::new(&c);
        let head = layout
            .tensors
            .iter()
            .find(|t| t.name == "head.weight")
            .unwrap();
        p[head.offset..head.offset + head.len()].fill(0.0);
        let tokens = [1, 2, 3, 4];
        let out = forward(&c, &p, &tokens, &tokens, 2, 2);
        assert!((out.loss - (50f64).ln()).abs() < 1e-12);
    }

    fn values(n: usize, seed: u64) -> Vec<f64> {
        (0..n)
            .map(|i| {
                let r =
                    crate::transformer::splitmix64(seed ^ crate::transformer::splitmix64(i as u64));
                (r % 2001) as f64 / 1000.0 - 1.0
            })
            .collect()
    }

    #[test]
    fn attention_gradients_are_central_differences_of_the_forward() {
        for causal in [false, true] {
            let s = AttentionShape {
                heads: 2,
                t: 5,
                d: 4,
                causal,
            };
            let n = s.heads * s.t * s.d;
            let (q, k, v, d_out) = (values(n, 1), values(n, 2), values(n, 3), values(n, 4));
            // The loss sum(o ⊙ dO), whose gradients are the backward's.
            let loss = |q: &[f64], k: &[f64], v: &[f64]| -> f64 {
                attention(s, q, k, v)
                    .0
                    .iter()
                    .zip(&d_out)
                    .map(|(a, b)| a * b)
                    .sum()
            };
            let (dq, dk, dv) = attention_backward(s, &q, &k, &v, &d_out);
            let eps = 1e-6;
            for i in 0..n {
                let fd = |which: usize| {
                    let mut x = [q.clone(), k.clone(), v.clone()];
                    x[which][i] += eps;
                    let up = loss(&x[0], &x[1], &x[2]);
                    x[which][i] -= 2.0 * eps;
                    (up - loss(&x[0], &x[1], &x[2])) / (2.0 * eps)
                };
                for (which, g) in [(0, &dq), (1, &dk), (2, &dv)] {
                    assert!(
                        (fd(which) - g[i]).abs() < 1e-7,
                        "causal {causal}, tensor {which}[{i}]"
                    );
                }
            }
        }
    }

    #[test]
    fn causal_attention_sees_only_earlier_keys() {
        let s = AttentionShape {
            heads: 1,
            t: 3,
            d: 2,
            causal: true,
        };
        let (q, k, v) = (values(6, 5), values(6, 6), values(6, 7));
        let (o, lse) = attention(s, &q, &k, &v);
        // The first query sees only the first key: its output is that value, its logsumexp the
        // one scaled score.
        assert_eq!(&o[..2], &v[..2]);
        let score = (q[0] * k[0] + q[1] * k[1]) / 2f64.sqrt();
        assert!((lse[0] - score).abs() < 1e-15);
        let full = attention(AttentionShape { causal: false, ..s }, &q, &k, &v).0;
        assert_eq!(&full[4..], &o[4..]);
        assert_ne!(&full[..2], &o[..2]);
    }
}
