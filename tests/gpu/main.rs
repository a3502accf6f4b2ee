//! The model on the GPU against the CPU reference (`collect::transformer::reference`, f64, no
//! shared code): logits and loss directly, gradients by central differences of the reference
//! loss, one AdamW step against its formula, and training lowering the loss; the attention core
//! alone, naive and FlashAttention-2, against the reference ([`attention`]); the model with
//! FlashAttention against the naive model ([`flash_model`]); activation checkpointing against
//! the same step without it, bit for bit ([`checkpoint`]); the step replayed from CUDA graphs
//! against the eager step, bit for bit, with its ranges and trace ([`graphs`]). `precision` holds
//! the mixed-precision experiments' kernels against their CPU emulation.
//!
//! Where the build finds no NVIDIA driver (build.rs sets `no_gpu`), `cargo test` lists every
//! test here as ignored, with the reason. A test that runs and still finds no CUDA device (or
//! no CUDA library) says so and returns.
//!
//! This is the suite's second test binary; on the GPU machine run it with
//! `cargo test --test gpu -- --test-threads=1` (each test opens the device). A binary built
//! without a GPU (`cargo test --release --test gpu --no-run` prints its path) and copied to the
//! GPU machine runs its tests there with `--include-ignored --test-threads=1`; built with
//! `GPU_TESTS=1`, it runs them without `--include-ignored`.

mod attention;
mod checkpoint;
mod flash_model;
mod fused;
mod graphs;
mod precision;

use collect::gpu::device_memory::{Buffer, DType};
use collect::gpu::ops::Runtime;
use collect::transformer::config::{Attention, Mode, ModelConfig, Precision, RunConfig};
use collect::transformer::params::ParamLayout;
use collect::transformer::reference;
use collect::transformer::{Forward, Model};
use collect::Error;

fn runtime() -> Option<Runtime> {
    match Runtime::open() {
        Ok(rt) => Some(rt),
        Err(e @ (Error::NoDevice { .. } | Error::MissingLibrary { .. })) => {
            eprintln!("skipped: {e}");
            None
        }
        Err(e) => panic!("the GPU is there but could not be opened: {e}"),
    }
}

/// d 64, 4 heads of 16, 2 layers, ctx 40 (more than a warp, not a multiple of one), vocab 512.
fn tiny(mode: Mode, precision: Precision) -> RunConfig {
    let mut model = ModelConfig::custom(64, 172, 2, 4).unwrap();
    model.vocab = 512;
    RunConfig {
        model,
        ctx: 40,
        batch: 2,
        mode,
        precision,
        tf32: false,
        attention: Attention::Naive,
        checkpoint: false,
    }
}

/// `n` values uniform in [-1, 1) from `seed`.
fn splitmix_values(n: usize, seed: u64) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let r =
                collect::transformer::splitmix64(seed ^ collect::transformer::splitmix64(i as u64));
            (r >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

/// The cosine of the angle between two vectors.
fn cosine(x: &[f32], y: &[f32]) -> f64 {
    let dot: f64 = x.iter().zip(y).map(|(a, b)| *a as f64 * *b as f64).sum();
    let nx: f64 = x.iter().map(|a| (*a as f64).powi(2)).sum::<f64>().sqrt();
    let ny: f64 = y.iter().map(|a| (*a as f64).powi(2)).sum::<f64>().sqrt();
    dot / (nx * ny)
}

/// max |a - b| and max |b|.
fn max_diff_and_max(a: &[f32], b: &[f64]) -> (f64, f64) {
    let num = a
        .iter()
        .zip(b)
        .map(|(x, y)| (*x as f64 - y).abs())
        .fold(0.0, f64::max);
    let den = b.iter().map(|y| y.abs()).fold(0.0, f64::max);
    (num, den)
}

/// max |a - b| / max |b|.
fn rel_max(a: &[f32], b: &[f64]) -> f64 {
    let (num, den) = max_diff_and_max(a, b);
    num / den
}

/// f32 to bf16 bits, round to nearest even (as the kernels' own conversion).
fn to_bf16(x: f32) -> u16 {
    let u = x.to_bits();
    ((u + 0x7fff + ((u >> 16) & 1)) >> 16) as u16
}

fn from_bf16(b: u16) -> f32 {
    f32::from_bits((b as u32) << 16)
}

/// The values of a device buffer, bf16 widened to f32.
fn download(rt: &Runtime, b: &Buffer) -> Vec<f32> {
    match b.dtype() {
        DType::Bf16 => rt
            .gpu
            .download::<u16>(b.ptr(), b.len())
            .unwrap()
            .into_iter()
            .map(from_bf16)
            .collect(),
        _ => rt.gpu.download::<f32>(b.ptr(), b.len()).unwrap(),
    }
}

struct Run {
    logits: Vec<f32>,
    loss: f32,
    params: Vec<f32>,
    grads: Vec<f32>,
    tokens: Vec<i32>,
    targets: Vec<i32>,
}

fn forward_backward(rt: &Runtime, run: &RunConfig) -> Run {
    let mut m = Model::new(rt, run, 7).unwrap();
    let fwd: Forward = m.forward(true).unwrap();
    let logits = m.download_logits(&fwd).unwrap();
    m.backward(fwd).unwrap();
    let (tokens, targets) = m.tokens().unwrap();
    Run {
        logits,
        loss: m.loss().unwrap(),
        params: m.download_params().unwrap(),
        grads: m.download_grads().unwrap(),
        tokens,
        targets,
    }
}

#[test]
#[cfg_attr(
    no_gpu,
    ignore = "needs an NVIDIA GPU: run with --include-ignored there, or build with GPU_TESTS=1"
)]
fn fp32_logits_loss_and_gradients_match_the_cpu_reference() {
    let Some(rt) = runtime() else { return };
    let run = tiny(Mode::ForwardBackward, Precision::Fp32);
    let c = &run.model;
    let r = forward_backward(&rt, &run);
    let reference = reference::forward(c, &r.params, &r.tokens, &r.targets, run.batch, run.ctx);
    let logit_err = rel_max(&r.logits, &reference.logits);
    assert!(
        logit_err < 1e-5,
        "logits differ by {logit_err:e} of their scale"
    );
    let loss_err = ((r.loss as f64 - reference.loss) / reference.loss).abs();
    assert!(
        loss_err < 1e-5,
        "loss {} vs reference {}",
        r.loss,
        reference.loss
    );

    let layout = ParamLayout::new(c);
    let p64: Vec<f64> = r.params.iter().map(|&v| v as f64).collect();
    let loss_at =
        |p: &[f64]| reference::forward_f64(c, p, &r.tokens, &r.targets, run.batch, run.ctx).loss;
    let eps = 1e-5;
    for t in &layout.tensors {
        if t.name.starts_with("layers.1.") && !t.name.ends_with("q.weight") {
            continue; // the first block covers every kind of tensor; keep the test quick
        }
        let g = &r.grads[t.offset..t.offset + t.len()];
        // The two largest entries, each by a central difference of the reference loss.
        let mut idx: Vec<usize> = (0..g.len()).collect();
        idx.sort_by(|&a, &b| g[b].abs().total_cmp(&g[a].abs()));
        for &i in &idx[..2] {
            let mut p = p64.clone();
            p[t.offset + i] += eps;
            let up = loss_at(&p);
            p[t.offset + i] -= 2.0 * eps;
            let down = loss_at(&p);
            let fd = (up - down) / (2.0 * eps);
            let err = (g[i] as f64 - fd).abs() / fd.abs().max(1e-6);
            assert!(
                err < 1e-3,
                "{}[{i}]: gpu {} vs finite difference {fd}",
                t.name,
                g[i]
            );
        }
        // The derivative along the GPU gradient itself must be |g|^2.
        let gmax = g.iter().fold(0.0f64, |m, v| m.max(v.abs() as f64));
        if gmax == 0.0 {
            continue;
        }
        let u: Vec<f64> = g.iter().map(|&v| v as f64 / gmax).collect();
        let mut p = p64.clone();
        for (k, uk) in u.iter().enumerate() {
            p[t.offset + k] += eps * uk;
        }
        let up = loss_at(&p);
        for (k, uk) in u.iter().enumerate() {
            p[t.offset + k] -= 2.0 * eps * uk;
        }
        let down = loss_at(&p);
        let fd = (up - down) / (2.0 * eps);
        let expected: f64 = g.iter().zip(&u).map(|(a, b)| *a as f64 * b).sum();
        let err = (fd - expected).abs() / expected.abs();
        assert!(
            err < 1e-3,
            "{}: directional derivative {fd} vs {expected}",
            t.name
        );
    }
}

#[test]
#[cfg_attr(
    no_gpu,
    ignore = "needs an NVIDIA GPU: run with --include-ignored there, or build with GPU_TESTS=1"
)]
fn bf16_follows_fp32_within_autocast_error() {
    let Some(rt) = runtime() else { return };
    let f = forward_backward(&rt, &tiny(Mode::ForwardBackward, Precision::Fp32));
    let b = forward_backward(&rt, &tiny(Mode::ForwardBackward, Precision::Bf16));
    assert_eq!(f.params, b.params, "same seed, same weights");
    let loss_err = ((b.loss - f.loss) / f.loss).abs();
    assert!(loss_err < 1e-2, "bf16 loss {} vs fp32 {}", b.loss, f.loss);
    let layout = ParamLayout::new(&tiny(Mode::Forward, Precision::Fp32).model);
    for t in &layout.tensors {
        let (x, y) = (
            &f.grads[t.offset..][..t.len()],
            &b.grads[t.offset..][..t.len()],
        );
        let cos = cosine(x, y);
        assert!(
            cos > 0.99,
            "{}: cosine {cos} between bf16 and fp32 gradients",
            t.name
        );
    }
}

#[test]
#[cfg_attr(
    no_gpu,
    ignore = "needs an NVIDIA GPU: run with --include-ignored there, or build with GPU_TESTS=1"
)]
fn longer_rows_and_wider_heads_match_the_reference() {
    // ctx 130 (five warps' worth of keys), head width 64, the full vocabulary.
    let Some(rt) = runtime() else { return };
    for precision in [Precision::Fp32, Precision::Bf16] {
        let run = RunConfig {
            model: ModelConfig::custom(128, 256, 1, 2).unwrap(),
            ctx: 130,
            batch: 1,
            mode: Mode::Forward,
            precision,
            tf32: false,
            attention: Attention::Naive,
            checkpoint: false,
        };
        let mut m = Model::new(&rt, &run, 3).unwrap();
        let fwd = m.forward(false).unwrap();
        m.compute_loss(&fwd).unwrap();
        let logits = m.download_logits(&fwd).unwrap();
        let (tokens, targets) = m.tokens().unwrap();
        let params = m.download_params().unwrap();
        let reference = reference::forward(&run.model, &params, &tokens, &targets, 1, 130);
        let (logit_tol, loss_tol) = match precision {
            Precision::Fp32 => (1e-5, 1e-5),
            Precision::Bf16 => (3e-2, 1e-2),
        };
        let err = rel_max(&logits, &reference.logits);
        assert!(err < logit_tol, "{precision}: logits differ by {err:e}");
        let loss = m.loss().unwrap() as f64;
        assert!(
            ((loss - reference.loss) / reference.loss).abs() < loss_tol,
            "{precision}: loss {loss} vs {}",
            reference.loss
        );
    }
}

#[test]
#[cfg_attr(
    no_gpu,
    ignore = "needs an NVIDIA GPU: run with --include-ignored there, or build with GPU_TESTS=1"
)]
fn one_adamw_step_follows_the_formula() {
    let Some(rt) = runtime() else { return };
    let run = tiny(Mode::Train, Precision::Fp32);
    let mut m = Model::new(&rt, &run, 11).unwrap();
    let fwd = m.forward(true).unwrap();
    m.backward(fwd).unwrap();
    let p0 = m.download_params().unwrap();
    let g = m.download_grads().unwrap();
    m.optimizer_step().unwrap();
    let p1 = m.download_params().unwrap();
    let a = m.adamw;
    let mut worst = 0.0f64;
    for i in 0..p0.len() {
        let (p, g) = (p0[i] as f64, g[i] as f64);
        let mh = (1.0 - a.beta1) * g / (1.0 - a.beta1);
        let vh = (1.0 - a.beta2) * g * g / (1.0 - a.beta2);
        let expected = p * (1.0 - a.lr * a.weight_decay) - a.lr * mh / (vh.sqrt() + a.eps);
        let err = (p1[i] as f64 - expected).abs() / expected.abs().max(1e-3);
        worst = worst.max(err);
    }
    assert!(worst < 1e-5, "AdamW differs from its formula by {worst:e}");
}

#[test]
#[cfg_attr(
    no_gpu,
    ignore = "needs an NVIDIA GPU: run with --include-ignored there, or build with GPU_TESTS=1"
)]
fn training_lowers_the_loss() {
    let Some(rt) = runtime() else { return };
    for precision in [Precision::Fp32, Precision::Bf16] {
        let run = tiny(Mode::Train, precision);
        let mut m = Model::new(&rt, &run, 5).unwrap();
        let mut losses = Vec::new();
        for _ in 0..8 {
            m.step().unwrap();
            losses.push(m.loss().unwrap());
        }
        // The loss reported by step n is the loss before its update: it falls step after step.
        assert!(
            losses.windows(2).all(|w| w[1] < w[0]),
            "{precision}: {losses:?}"
        );
        assert!(losses[7] < 0.9 * losses[0], "{precision}: {losses:?}");
    }
}

/// Records range names with their nesting depth.
struct Names(std::rc::Rc<std::cell::RefCell<Vec<(usize, String)>>>, usize);

impl collect::nvtx::RangeListener for Names {
    fn push(&mut self, name: &str, _: std::time::Instant) {
        self.0.borrow_mut().push((self.1, name.to_owned()));
        self.1 += 1;
    }
    fn pop(&mut self, _: std::time::Instant) {
        self.1 -= 1;
    }
}

#[test]
#[cfg_attr(
    no_gpu,
    ignore = "needs an NVIDIA GPU: run with --include-ignored there, or build with GPU_TESTS=1"
)]
fn a_bench_run_opens_the_reference_ranges_and_peaks_where_planned() {
    let Some(rt) = runtime() else { return };
    let run = tiny(Mode::Train, Precision::Bf16);
    let names = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    collect::nvtx::set_listener(Some(Box::new(Names(names.clone(), 0))));
    let m = collect::bench::run_one(&rt, &run, 1, 2, 0).unwrap();
    collect::nvtx::set_listener(None);

    // The overlapped optimizer cuts the backward: its first part (the loss, the head and the
    // final norm), each block's, and the embedding's, each followed by the `optimizer` range of
    // the update launched when it is done (the last also holds the wait for the update).
    let step: Vec<(usize, String)> = {
        let mut v = vec![(0, "forward".to_owned())];
        for _ in 0..run.model.layers {
            for n in [
                "attention_matmul_QK",
                "attention_softmax",
                "attention_matmul_V",
            ] {
                v.push((1, n.to_owned()));
            }
        }
        for _ in 0..run.model.layers + 2 {
            v.push((0, "backward".to_owned()));
            v.push((0, "optimizer".to_owned()));
        }
        v
    };
    let mut expected = vec![(0, "warmup".to_owned())];
    expected.extend(step.iter().map(|(d, n)| (d + 1, n.clone())));
    expected.push((0, "measurement".to_owned()));
    for i in 0..2 {
        expected.push((1, format!("step_{i}")));
        expected.extend(step.iter().map(|(d, n)| (d + 2, n.clone())));
    }
    assert_eq!(*names.borrow(), expected);

    // The plan's memory model follows the allocations one for one.
    let planned = collect::transformer::plan::plan(&run).memory.peak;
    assert_eq!(m.memory.peak, planned, "measured peak vs plan");
    assert_eq!(m.host_ms.len(), 2);
    assert!(m.event.mean > 0.0 && m.host.mean >= m.event.mean * 0.5);
}

/// In each of `step_0` and `step_1` of a recorded trace, our kernels of a training step, each
/// counted by its launch call's start inside the step's range on the launching thread.
fn assert_kernels_per_step(db: &rusqlite::Connection, layers: i64) {
    let expected = our_kernels_per_train_step(layers);
    for step in ["step_0", "step_1"] {
        let mut st = db
            .prepare(
                "SELECT s.value, count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k \
                 JOIN StringIds s ON s.id = k.demangledName \
                 JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId \
                 JOIN NVTX_EVENTS n ON n.text = ?1 AND r.start BETWEEN n.start AND n.end \
                 AND r.globalTid = n.globalTid GROUP BY s.value",
            )
            .unwrap();
        let got: std::collections::BTreeMap<String, i64> = st
            .query_map([step], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
        for (name, n) in &expected {
            assert_eq!(got.get(*name), Some(n), "{step}: {name} in {got:?}");
        }
    }
}

/// Kernels of ours one fp32 training step of [`tiny`] launches, for `layers` blocks (from
/// `Model::step`; GEMMs are cuBLAS's and vary in count with its heuristics). Heads of 16 take
/// the 16-byte RoPE and head moves; d_ff 172 the one-element SwiGLU; the blocks' norms the
/// fused backward (one launch), the final norm's two launches; one AdamW update per block and
/// for the head and for the embedding, on the optimizer's stream.
fn our_kernels_per_train_step(layers: i64) -> std::collections::BTreeMap<&'static str, i64> {
    let l = layers;
    [
        ("embedding_fwd", 1),
        ("rmsnorm_fwd_f32", 2 * l + 1),
        ("rope_fwd_vec_f32", l),
        ("softmax_causal_fwd_f32", l),
        ("heads_to_tokens_vec_f32", l),
        ("swiglu_fwd_f32", l),
        ("cross_entropy_f32", 1),
        ("mean_f32", 1),
        ("rmsnorm_bwd", 1),
        ("rmsnorm_dw", 1),
        ("rmsnorm_bwd_fused_v1", 2 * l),
        ("swiglu_bwd_f32", l),
        ("tokens_to_heads_vec_f32", l),
        ("softmax_causal_bwd_f32", l),
        ("rope_bwd_vec_f32", l),
        ("embedding_bwd", 1),
        ("adamw_range_x4", l + 2),
    ]
    .into_iter()
    .collect()
}

#[test]
#[cfg_attr(
    no_gpu,
    ignore = "needs an NVIDIA GPU: run with --include-ignored there, or build with GPU_TESTS=1"
)]
fn a_recorded_run_writes_a_trace_and_a_snapshot_that_agree_with_the_allocator() {
    use collect::bench::{run_one_with, Recording};
    use collect::gpu::device_memory::AllocatorKind;
    let rt = match Runtime::open_with(AllocatorKind::Caching) {
        Ok(rt) => rt,
        Err(e @ (Error::NoDevice { .. } | Error::MissingLibrary { .. })) => {
            eprintln!("skipped: {e}");
            return;
        }
        Err(e) => panic!("the GPU is there but could not be opened: {e}"),
    };
    let run = tiny(Mode::Train, Precision::Fp32);
    let dir = tempfile::tempdir().unwrap();
    let rec = Recording {
        trace: Some(dir.path().join("run.sqlite")),
        memory_snapshot: Some(dir.path().join("run.pickle")),
        operator_ranges: false,
    };
    let m = run_one_with(&rt, &run, 1, 2, 0, &rec, Default::default()).unwrap();
    assert_eq!(m.written.len(), 2);
    let a = m.allocator.expect("the caching allocator's counters");
    assert_eq!(m.memory.peak, a.max_allocated);
    assert!(a.history_entries > 0);
    // Blocks are 512-byte multiples and the plan counts bytes asked for: the allocator's peak is
    // at least the planned one.
    assert!(a.max_allocated >= collect::transformer::plan::plan(&run).memory.peak);

    let db = rusqlite::Connection::open(dir.path().join("run.sqlite")).unwrap();
    let one = |sql: &str| -> i64 { db.query_row(sql, [], |r| r.get(0)).unwrap() };
    let kernels = one("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL");
    assert!(kernels > 0);
    // Every kernel joins exactly one API call (the driver call a runtime call makes is dropped).
    assert_eq!(
        one(
            "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k WHERE (SELECT count(*) FROM \
             CUPTI_ACTIVITY_KIND_RUNTIME r WHERE r.correlationId = k.correlationId) != 1"
        ),
        0
    );
    let peak: String = db
        .query_row(
            "SELECT value FROM RUN_METADATA WHERE name = 'peak_allocated_bytes'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(peak, a.max_allocated.to_string());
    // Our kernels per measured step, attributed by the launching call's start inside step_N.
    assert_kernels_per_step(&db, run.model.layers as i64);
    let snapshot = std::fs::read(dir.path().join("run.pickle")).unwrap();
    assert_eq!(&snapshot[..2], b"\x80\x04", "a protocol-4 pickle");
}
