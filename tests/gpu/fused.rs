//! The faster paths of a training step against what they replace: the overlapped AdamW (each
//! block's update on the optimizer's stream beside the backward, writing the bf16 weight copy)
//! against one update after the backward over 10 training steps, in fp32 and bf16; and each new
//! kernel against its reference: the range update against the whole-buffer update and the cast,
//! the fused norm backward against the two launches it replaces and an f64 computation (and
//! against itself: the same bits at every launch), the 16-byte SwiGLU, RoPE and head moves
//! against a CPU computation, cuBLASLt's `D = A B + C` against cuBLAS's copy-then-add. Skipped,
//! with a message, where there is no device.

use collect::gpu::blas::{Gemm, Mat};
use collect::gpu::device_memory::{Buffer, DType};
use collect::gpu::ops::{norm_bwd_scratch_rows, AdamWStep, AttnShape, Runtime};
use collect::transformer::config::{Attention, Mode, ModelConfig, Precision, RunConfig};
use collect::transformer::params::ParamLayout;
use collect::transformer::{Model, OptimizerSchedule, StepOptions};

use crate::{download as down, from_bf16, runtime, splitmix_values, tiny, to_bf16};

fn up(rt: &Runtime, v: &[f32]) -> Buffer {
    rt.gpu.upload(DType::F32, v).unwrap()
}

fn up_bf16(rt: &Runtime, v: &[f32]) -> Buffer {
    let bits: Vec<u16> = v.iter().map(|&x| to_bf16(x)).collect();
    rt.gpu.upload(DType::Bf16, &bits).unwrap()
}

/// `v` uploaded in `act` (bf16 rounded to nearest even).
fn upload_as(rt: &Runtime, act: DType, v: &[f32]) -> Buffer {
    match act {
        DType::Bf16 => up_bf16(rt, v),
        _ => up(rt, v),
    }
}

/// `v` as the device holds it in `act`.
fn as_stored(act: DType, v: &[f32]) -> Vec<f32> {
    match act {
        DType::Bf16 => v.iter().map(|&x| from_bf16(to_bf16(x))).collect(),
        _ => v.to_vec(),
    }
}

fn zeros(rt: &Runtime, dtype: DType, n: usize) -> Buffer {
    let b = rt.gpu.memory.alloc(dtype, n).unwrap();
    rt.gpu.memset_zero(b.ptr(), b.bytes()).unwrap();
    b
}

/// Largest |a - b| over the largest |b|.
fn rel(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let num = a
        .iter()
        .zip(b)
        .map(|(x, y)| (*x as f64 - *y as f64).abs())
        .fold(0.0, f64::max);
    let den = b.iter().map(|y| (*y as f64).abs()).fold(0.0, f64::max);
    if den == 0.0 {
        num
    } else {
        num / den
    }
}

/// Whether every element is within one bf16 rounding (2^-8 of its size, plus a floor).
fn within_bf16_rounding(got: &[f32], want: &[f32]) -> Option<usize> {
    got.iter()
        .zip(want)
        .position(|(g, w)| (g - w).abs() > w.abs() * (1.0 / 128.0) + 1e-6)
}

/// Train `steps` steps of `run` from seed 5 with `options`; the parameters and each step's loss.
fn train(
    rt: &Runtime,
    run: &RunConfig,
    options: StepOptions,
    steps: usize,
) -> (Vec<f32>, Vec<f32>) {
    let mut m = Model::new(rt, run, 5).unwrap();
    m.options = options;
    let mut losses = Vec::new();
    for _ in 0..steps {
        m.step().unwrap();
        losses.push(m.loss().unwrap());
    }
    (m.download_params().unwrap(), losses)
}

/// A model big enough that each block's kernels take a while (so a missing wait between the
/// streams shows): d 256, 4 layers of 4 heads of 64, ctx 128, batch 2.
fn medium(precision: Precision) -> RunConfig {
    RunConfig {
        model: ModelConfig::custom(256, 688, 4, 4).unwrap(),
        ctx: 128,
        batch: 2,
        mode: Mode::Train,
        precision,
        tf32: false,
        attention: Attention::Naive,
        checkpoint: false,
    }
}

#[test]
#[cfg_attr(
    no_gpu,
    ignore = "needs an NVIDIA GPU: run with --include-ignored there, or build with GPU_TESTS=1"
)]
fn overlapped_adamw_gives_the_parameters_of_the_update_after_the_backward() {
    let Some(rt) = runtime() else { return };
    let after = StepOptions {
        optimizer: OptimizerSchedule::AfterBackward,
        ..StepOptions::default()
    };
    for run in [
        tiny(Mode::Train, Precision::Fp32),
        tiny(Mode::Train, Precision::Bf16),
        medium(Precision::Fp32),
        medium(Precision::Bf16),
    ] {
        let layout = ParamLayout::new(&run.model);
        let (want, want_losses) = train(&rt, &run, after, 10);
        // The default: the backward's GEMMs are those of the update after the backward. (With
        // SMs left to the optimizer, `--optimizer-sms`, cuBLAS may choose other algorithms, whose
        // sums in another order drift apart over training steps: measured 3e-5 after 10.)
        let sms_tried: &[u32] = &[0];
        for &sms in sms_tried {
            let options = StepOptions {
                optimizer: OptimizerSchedule::Overlapped,
                optimizer_sms: Some(sms),
                ..StepOptions::default()
            };
            let (got, losses) = train(&rt, &run, options, 10);
            let what = format!(
                "{} {} (optimizer SMs {sms})",
                run.model.label(),
                run.precision
            );
            // The losses come from forwards through the bf16 copy in bf16: the copy the
            // optimizer wrote equals the one the forward casts.
            let loss_err = rel(&losses, &want_losses);
            assert!(
                loss_err <= 1e-6,
                "{what}: losses {losses:?} vs {want_losses:?}"
            );
            for t in &layout.tensors {
                let (g, w) = (&got[t.offset..][..t.len()], &want[t.offset..][..t.len()]);
                let err = rel(g, w);
                assert!(err <= 1e-6, "{what}: {} differs by {err:e}", t.name);
            }
        }
    }
}

#[test]
#[cfg_attr(
    no_gpu,
    ignore = "needs an NVIDIA GPU: run with --include-ignored there, or build with GPU_TESTS=1"
)]
fn the_range_update_is_the_whole_buffer_update_and_its_cast() {
    let Some(rt) = runtime() else { return };
    let n = 64 * 1000 + 4 * 7;
    let p0 = splitmix_values(n, 1);
    let g0: Vec<f32> = splitmix_values(n, 2).iter().map(|x| x * 1e-2).collect();
    let m0: Vec<f32> = splitmix_values(n, 3).iter().map(|x| x * 1e-3).collect();
    let v0: Vec<f32> = splitmix_values(n, 4).iter().map(|x| x * x * 1e-5).collect();
    let h = AdamWStep::new(3, 1e-3, 0.9, 0.999, 1e-8, 0.01);
    let (p, g, m, v) = (up(&rt, &p0), up(&rt, &g0), up(&rt, &m0), up(&rt, &v0));
    rt.adamw(p.ptr(), g.ptr(), m.ptr(), v.ptr(), n, h).unwrap();
    let cast = zeros(&rt, DType::Bf16, n);
    rt.cast_f32_bf16(p.ptr(), cast.ptr(), n).unwrap();
    // Two ranges, as two groups of the model would be updated.
    let (p2, g2, m2, v2) = (up(&rt, &p0), up(&rt, &g0), up(&rt, &m0), up(&rt, &v0));
    let copy = zeros(&rt, DType::Bf16, n);
    let split = 64 * 300;
    // The updates run on the optimizer's stream: the main stream's zeroing goes first.
    rt.gpu.synchronize().unwrap();
    for (start, end) in [(0, split), (split, n)] {
        rt.adamw_range(
            p2.at(start),
            g2.at(start),
            m2.at(start),
            v2.at(start),
            copy.at(start),
            end - start,
            h,
        )
        .unwrap();
    }
    rt.gpu.synchronize_all().unwrap();
    // The same arithmetic (one inline function): equal but for a contraction the compiler
    // might make differently in the two kernels.
    for (what, a, b) in [("p", &p, &p2), ("m", &m, &m2), ("v", &v, &v2)] {
        let err = rel(&down(&rt, b), &down(&rt, a));
        assert!(err <= 1e-6, "{what}: the range update differs by {err:e}");
    }
    let (x, y) = (down(&rt, &copy), down(&rt, &p2));
    let rounded: Vec<f32> = y.iter().map(|&v| from_bf16(to_bf16(v))).collect();
    assert_eq!(
        x, rounded,
        "the bf16 copy is the updated parameters rounded"
    );
    assert_eq!(within_bf16_rounding(&down(&rt, &cast), &x), None);
    // Without a copy to write, only the fp32 state changes.
    let (p3, g3, m3, v3) = (up(&rt, &p0), up(&rt, &g0), up(&rt, &m0), up(&rt, &v0));
    rt.adamw_range(p3.ptr(), g3.ptr(), m3.ptr(), v3.ptr(), 0, n, h)
        .unwrap();
    rt.gpu.synchronize_all().unwrap();
    assert_eq!(down(&rt, &p3), down(&rt, &p2));
}

#[test]
#[cfg_attr(
    no_gpu,
    ignore = "needs an NVIDIA GPU: run with --include-ignored there, or build with GPU_TESTS=1"
)]
fn the_fused_norm_backward_equals_the_two_launches_and_the_reference() {
    let Some(rt) = runtime() else { return };
    // Each width of the kernel (4, 8 and 16 columns a thread), one block to 256 blocks, groups
    // of blocks full and not.
    for (rows, d) in [
        (1, 64),
        (7, 1000),
        (300, 768),
        (200, 1280),
        (1024, 2560),
        (513, 4096),
        (5000, 512),
    ] {
        let n = rows * d;
        let (dy0, x0) = (splitmix_values(n, 10), splitmix_values(n, 11));
        let w0: Vec<f32> = splitmix_values(d, 12)
            .iter()
            .map(|v| 1.0 + 0.5 * v)
            .collect();
        let rstd0: Vec<f32> = splitmix_values(rows, 13).iter().map(|v| 1.5 + v).collect();
        let (dy, x, w, rstd) = (up(&rt, &dy0), up(&rt, &x0), up(&rt, &w0), up(&rt, &rstd0));
        let dres0 = splitmix_values(n, 14);
        for with_res in [false, true] {
            let (dx1, dx2) = (up(&rt, &dres0), up(&rt, &dres0));
            let dres = up(&rt, &dres0);
            let res = |b: &Buffer| if with_res { b.ptr() } else { 0 };
            let (b1, b2) = (zeros(&rt, DType::Bf16, n), zeros(&rt, DType::Bf16, n));
            let (dw1, dw2) = (zeros(&rt, DType::F32, d), zeros(&rt, DType::F32, d));
            rt.rmsnorm_bwd(
                dy.ptr(),
                x.ptr(),
                w.ptr(),
                rstd.ptr(),
                res(&dx1),
                dx1.ptr(),
                b1.ptr(),
                rows,
                d,
            )
            .unwrap();
            rt.rmsnorm_dw(dy.ptr(), x.ptr(), rstd.ptr(), dw1.ptr(), rows, d)
                .unwrap();
            let parts = up(&rt, &vec![f32::NAN; norm_bwd_scratch_rows(rows) * d]);
            // Three launches on the same tickets: each must find them zero again, and each
            // gives the same bits whichever blocks finish last.
            let mut dws = Vec::new();
            for _ in 0..3 {
                rt.gpu.copy(dx2.ptr(), dres.ptr(), n * 4).unwrap();
                rt.gpu.memset_zero(dw2.ptr(), d * 4).unwrap();
                rt.rmsnorm_bwd_fused(
                    dy.ptr(),
                    x.ptr(),
                    w.ptr(),
                    rstd.ptr(),
                    res(&dx2),
                    dx2.ptr(),
                    b2.ptr(),
                    dw2.ptr(),
                    parts.ptr(),
                    rows,
                    d,
                )
                .unwrap();
                dws.push(down(&rt, &dw2));
            }
            let what = format!("rows {rows} d {d} residual {with_res}");
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert!(
                dws.iter().all(|v| bits(v) == bits(&dws[0])),
                "{what}: dw differs between launches"
            );
            // dx: the same sums in the same order (equal but for a contraction the compiler
            // might make differently).
            let err = rel(&down(&rt, &dx2), &down(&rt, &dx1));
            assert!(err <= 1e-6, "{what}: dx differs by {err:e}");
            let bf = down(&rt, &b2);
            assert_eq!(
                within_bf16_rounding(&bf, &down(&rt, &b1)),
                None,
                "{what}: bf16 dx"
            );
            let rounded: Vec<f32> = down(&rt, &dx2)
                .iter()
                .map(|&v| from_bf16(to_bf16(v)))
                .collect();
            assert_eq!(bf, rounded, "{what}: the bf16 copy is dx rounded");
            let err = rel(&dws[0], &down(&rt, &dw1));
            assert!(
                err < 1e-5,
                "{what}: dw differs from the two launches by {err:e}"
            );
            // Both against f64.
            let mut want_dw = vec![0f64; d];
            let mut want_dx = vec![0f64; n];
            for (r, &rs) in rstd0.iter().enumerate() {
                let (row, rs) = (r * d, rs as f64);
                let dot: f64 = (0..d)
                    .map(|j| dy0[row + j] as f64 * w0[j] as f64 * x0[row + j] as f64)
                    .sum();
                let c = rs * rs * rs * dot / d as f64;
                for j in 0..d {
                    let (g, xv) = (dy0[row + j] as f64, x0[row + j] as f64);
                    let res = if with_res { dres0[row + j] as f64 } else { 0.0 };
                    want_dx[row + j] = g * w0[j] as f64 * rs - xv * c + res;
                    want_dw[j] += g * xv * rs;
                }
            }
            let err = crate::rel_max(&dws[0], &want_dw);
            assert!(err < 1e-5, "{what}: dw differs from f64 by {err:e}");
            let err = crate::rel_max(&down(&rt, &dx2), &want_dx);
            assert!(err < 1e-5, "{what}: dx differs from f64 by {err:e}");
        }
    }
}

fn silu(a: f32) -> f32 {
    a / (1.0 + (-a).exp())
}

#[test]
#[cfg_attr(
    no_gpu,
    ignore = "needs an NVIDIA GPU: run with --include-ignored there, or build with GPU_TESTS=1"
)]
fn sixteen_byte_swiglu_matches_the_cpu() {
    let Some(rt) = runtime() else { return };
    for (rows, dff) in [(3, 8), (33, 176), (256, 1024)] {
        let h13 = splitmix_values(rows * 2 * dff, 20)
            .iter()
            .map(|v| 4.0 * v)
            .collect::<Vec<_>>();
        let dg = splitmix_values(rows * dff, 21);
        for act in [DType::F32, DType::Bf16] {
            let load = |v: &[f32]| upload_as(&rt, act, v);
            let exact = |v: &[f32]| as_stored(act, v);
            let (h, d) = (load(&h13), load(&dg));
            let (hx, dx) = (exact(&h13), exact(&dg));
            let g = zeros(&rt, act, rows * dff);
            let dh = zeros(&rt, act, rows * 2 * dff);
            rt.swiglu_fwd(act, h.ptr(), g.ptr(), rows, dff).unwrap();
            rt.swiglu_bwd(act, h.ptr(), d.ptr(), dh.ptr(), rows, dff)
                .unwrap();
            let (mut want_g, mut want_dh) = (vec![0.0; rows * dff], vec![0.0; rows * 2 * dff]);
            for r in 0..rows {
                for j in 0..dff {
                    let (a, b, gr) = (
                        hx[r * 2 * dff + j],
                        hx[r * 2 * dff + dff + j],
                        dx[r * dff + j],
                    );
                    let s = 1.0 / (1.0 + (-a).exp());
                    want_g[r * dff + j] = silu(a) * b;
                    want_dh[r * 2 * dff + j] = gr * b * s * (1.0 + a * (1.0 - s));
                    want_dh[r * 2 * dff + dff + j] = gr * a * s;
                }
            }
            for (what, got, want) in [
                ("g", down(&rt, &g), want_g),
                ("dh13", down(&rt, &dh), want_dh),
            ] {
                let ctx = format!("{what} rows {rows} d_ff {dff} {act:?}");
                match act {
                    DType::Bf16 => assert_eq!(within_bf16_rounding(&got, &want), None, "{ctx}"),
                    _ => assert!(rel(&got, &want) < 1e-5, "{ctx}"),
                }
            }
        }
    }
}

#[test]
#[cfg_attr(
    no_gpu,
    ignore = "needs an NVIDIA GPU: run with --include-ignored there, or build with GPU_TESTS=1"
)]
fn sixteen_byte_rope_and_head_moves_match_the_cpu() {
    let Some(rt) = runtime() else { return };
    // Heads 16 and 80 wide (the 2.7B model's), an odd number of heads and positions.
    for s in [
        AttnShape {
            batch: 2,
            ctx: 5,
            heads: 3,
            d_head: 16,
        },
        AttnShape {
            batch: 1,
            ctx: 37,
            heads: 2,
            d_head: 80,
        },
    ] {
        let (b, t, h, dh) = (s.batch, s.ctx, s.heads, s.d_head);
        let dm = h * dh;
        let n = s.elements();
        let table = collect::transformer::rope_table(t, dh);
        let cs = up(&rt, &table);
        let qkv0 = splitmix_values(b * t * 3 * dm, 30);
        let grads0 = splitmix_values(3 * n, 31);
        for act in [DType::F32, DType::Bf16] {
            let load = |v: &[f32]| upload_as(&rt, act, v);
            let exact = |v: &[f32]| as_stored(act, v);
            let qkv = load(&qkv0);
            let qx = exact(&qkv0);
            let (q, k, v) = (zeros(&rt, act, n), zeros(&rt, act, n), zeros(&rt, act, n));
            rt.rope_fwd(act, qkv.ptr(), cs.ptr(), q.ptr(), k.ptr(), v.ptr(), s)
                .unwrap();
            let (dq, dk, dv) = (
                load(&grads0[..n]),
                load(&grads0[n..2 * n]),
                load(&grads0[2 * n..]),
            );
            let gx = exact(&grads0);
            let dqkv = zeros(&rt, act, b * t * 3 * dm);
            rt.rope_bwd(act, dq.ptr(), dk.ptr(), dv.ptr(), cs.ptr(), dqkv.ptr(), s)
                .unwrap();
            let tokens = zeros(&rt, act, n);
            rt.heads_to_tokens(act, q.ptr(), tokens.ptr(), s).unwrap();
            let back = zeros(&rt, act, n);
            rt.tokens_to_heads(act, tokens.ptr(), back.ptr(), s)
                .unwrap();

            let (mut wq, mut wk, mut wv) = (vec![0.0; n], vec![0.0; n], vec![0.0; n]);
            let mut wd = vec![0.0f32; b * t * 3 * dm];
            let head =
                |bi: usize, hi: usize, ti: usize, e: usize| ((bi * h + hi) * t + ti) * dh + e;
            for bi in 0..b {
                for ti in 0..t {
                    for hi in 0..h {
                        for i in 0..dh / 2 {
                            let (c, sn) = (
                                table[2 * (ti * dh / 2 + i)],
                                table[2 * (ti * dh / 2 + i) + 1],
                            );
                            let src = (bi * t + ti) * 3 * dm + hi * dh + 2 * i;
                            let dst = head(bi, hi, ti, 2 * i);
                            for (out, off) in [(&mut wq, 0), (&mut wk, dm)] {
                                let (x1, x2) = (qx[src + off], qx[src + off + 1]);
                                out[dst] = x1 * c - x2 * sn;
                                out[dst + 1] = x1 * sn + x2 * c;
                            }
                            wv[dst] = qx[src + 2 * dm];
                            wv[dst + 1] = qx[src + 2 * dm + 1];
                            for (which, off) in [(0, 0), (1, dm)] {
                                let (g1, g2) = (gx[which * n + dst], gx[which * n + dst + 1]);
                                wd[src + off] = g1 * c + g2 * sn;
                                wd[src + off + 1] = g2 * c - g1 * sn;
                            }
                            wd[src + 2 * dm] = gx[2 * n + dst];
                            wd[src + 2 * dm + 1] = gx[2 * n + dst + 1];
                        }
                    }
                }
            }
            let got_q = down(&rt, &q);
            for (what, got, want) in [
                ("q", got_q.clone(), wq),
                ("k", down(&rt, &k), wk),
                ("v", down(&rt, &v), wv),
                ("dqkv", down(&rt, &dqkv), wd),
            ] {
                let ctx = format!("{what} {s:?} {act:?}");
                match act {
                    DType::Bf16 => assert_eq!(within_bf16_rounding(&got, &want), None, "{ctx}"),
                    _ => assert!(rel(&got, &want) < 1e-6, "{ctx}"),
                }
            }
            // The moves copy bits: tokens hold q's values token-major, and back is q again.
            let mut from_q = vec![0.0f32; n];
            for bi in 0..b {
                for ti in 0..t {
                    for hi in 0..h {
                        for e in 0..dh {
                            from_q[(bi * t + ti) * dm + hi * dh + e] = got_q[head(bi, hi, ti, e)];
                        }
                    }
                }
            }
            assert_eq!(down(&rt, &tokens), from_q, "heads_to_tokens {s:?} {act:?}");
            assert_eq!(down(&rt, &back), got_q, "tokens_to_heads {s:?} {act:?}");
        }
    }
}

#[test]
#[cfg_attr(
    no_gpu,
    ignore = "needs an NVIDIA GPU: run with --include-ignored there, or build with GPU_TESTS=1"
)]
fn cublaslt_adds_the_residual_into_a_new_buffer() {
    let Some(rt) = runtime() else { return };
    for (m, n, k) in [(40, 64, 64), (80, 172, 344), (1024, 768, 3072)] {
        for (ta, tb) in [(false, true), (false, false), (true, false)] {
            let g = Gemm { ta, tb, m, n, k };
            let a0 = splitmix_values(m * k, 40);
            let b0 = splitmix_values(k * n, 41);
            let c0 = splitmix_values(m * n, 42);
            for act in [DType::F32, DType::Bf16] {
                let load = |v: &[f32]| upload_as(&rt, act, v);
                let (a, b) = (load(&a0), load(&b0));
                let c = up(&rt, &c0);
                let want = up(&rt, &c0);
                rt.blas
                    .gemm(
                        g,
                        1.0,
                        Mat::new(a.ptr(), act),
                        Mat::new(b.ptr(), act),
                        1.0,
                        Mat::new(want.ptr(), DType::F32),
                    )
                    .unwrap();
                let d = zeros(&rt, DType::F32, m * n);
                rt.blas
                    .gemm_add(
                        g,
                        Mat::new(a.ptr(), act),
                        Mat::new(b.ptr(), act),
                        Mat::new(c.ptr(), DType::F32),
                        Mat::new(d.ptr(), DType::F32),
                    )
                    .unwrap();
                let err = rel(&down(&rt, &d), &down(&rt, &want));
                assert!(err < 1e-5, "{g:?} {act:?}: differs by {err:e}");
                assert_eq!(down(&rt, &c), c0, "{g:?} {act:?}: C is left as it was");
            }
        }
    }
}

#[test]
#[cfg_attr(
    no_gpu,
    ignore = "needs an NVIDIA GPU: run with --include-ignored there, or build with GPU_TESTS=1"
)]
fn cublaslt_without_workspace_overwrites_like_cublas() {
    let Some(rt) = runtime() else { return };
    // Weights' gradients `dyᵀ x` over 1024 tokens: the large model's output projection (few
    // output tiles, the shape cuBLAS splits along k) and its W2, and an odd shape.
    for (m, n, k) in [(1280, 1280, 1024), (1280, 5120, 1024), (80, 172, 344)] {
        let g = Gemm {
            ta: true,
            tb: false,
            m,
            n,
            k,
        };
        let a0 = splitmix_values(k * m, 43);
        let b0 = splitmix_values(k * n, 44);
        let c0 = splitmix_values(m * n, 45);
        for act in [DType::F32, DType::Bf16] {
            let (a, b) = (upload_as(&rt, act, &a0), upload_as(&rt, act, &b0));
            let want = up(&rt, &c0);
            let (am, bm) = (Mat::new(a.ptr(), act), Mat::new(b.ptr(), act));
            rt.blas
                .gemm(g, 1.0, am, bm, 0.0, Mat::new(want.ptr(), DType::F32))
                .unwrap();
            let got = up(&rt, &c0);
            rt.blas
                .gemm_no_workspace(g, am, bm, Mat::new(got.ptr(), DType::F32))
                .unwrap();
            let err = rel(&down(&rt, &got), &down(&rt, &want));
            assert!(err < 1e-5, "{g:?} {act:?}: differs by {err:e}");
        }
    }
}
