//! The whole model with `--attention flash` against the naive model on the same weights and
//! tokens (logits, loss, every gradient), including heads of 80 that the flash path pads to
//! 128; the plan's peak against the measured one for flash runs; the ranges of a flash run; and
//! a sweep that goes on past a configuration it refuses.

use collect::bench::{self, BenchOptions, Outcome, Recording};
use collect::gpu::device_memory::AllocatorKind;
use collect::transformer::config::{Attention, Mode, ModelConfig, Precision, RunConfig};
use collect::transformer::params::ParamLayout;
use collect::transformer::plan;

use crate::{cosine, forward_backward, rel_max, runtime, tiny, Names};

fn with(run: RunConfig, attention: Attention) -> RunConfig {
    RunConfig { attention, ..run }
}

/// d 160, 2 heads of 80 (the 2.7B model's head width), 2 layers, ctx 40, vocab 512.
pub(crate) fn padded(mode: Mode, precision: Precision) -> RunConfig {
    let mut model = ModelConfig::custom(160, 256, 2, 2).unwrap();
    model.vocab = 512;
    RunConfig {
        model,
        ..tiny(mode, precision)
    }
}

#[test]
#[cfg_attr(
    no_gpu,
    ignore = "needs an NVIDIA GPU: run with --include-ignored there, or build with GPU_TESTS=1"
)]
fn the_flash_model_follows_the_naive_model_on_the_same_weights() {
    let Some(rt) = runtime() else { return };
    for precision in [Precision::Fp32, Precision::Bf16] {
        for base in [
            tiny(Mode::ForwardBackward, precision),
            padded(Mode::ForwardBackward, precision),
        ] {
            let what = format!("{precision} head width {}", base.model.d_head());
            let naive = forward_backward(&rt, &with(base.clone(), Attention::Naive));
            let flash = forward_backward(&rt, &with(base.clone(), Attention::Flash));
            assert_eq!(naive.params, flash.params, "same seed, same weights");
            let n64 = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<f64>>();
            let (logit_tol, loss_tol) = match precision {
                Precision::Fp32 => (1e-5, 1e-5),
                Precision::Bf16 => (3e-2, 1e-2),
            };
            let logits = rel_max(&flash.logits, &n64(&naive.logits));
            assert!(logits <= logit_tol, "{what}: logits differ by {logits:e}");
            let loss = ((flash.loss - naive.loss) / naive.loss).abs() as f64;
            assert!(
                loss <= loss_tol,
                "{what}: loss {} vs {}",
                flash.loss,
                naive.loss
            );
            for t in &ParamLayout::new(&base.model).tensors {
                let r = t.offset..t.offset + t.len();
                let (f, n) = (&flash.grads[r.clone()], &naive.grads[r]);
                if precision == Precision::Fp32 {
                    let err = rel_max(f, &n64(n));
                    assert!(
                        err <= 1e-4,
                        "{what}: {} gradient differs by {err:e}",
                        t.name
                    );
                } else {
                    let cos = cosine(f, n);
                    assert!(cos > 0.99, "{what}: {} gradients at cosine {cos}", t.name);
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
fn the_plan_gives_the_measured_peak_of_flash_runs() {
    let Some(rt) = runtime() else { return };
    for run in [
        tiny(Mode::Train, Precision::Fp32),
        tiny(Mode::Train, Precision::Bf16),
        tiny(Mode::Forward, Precision::Bf16),
        padded(Mode::ForwardBackward, Precision::Fp32),
        padded(Mode::Train, Precision::Bf16),
        padded(Mode::Forward, Precision::Fp32),
    ] {
        let run = with(run, Attention::Flash);
        let m = bench::run_one(&rt, &run, 1, 2, 0).unwrap();
        assert_eq!(
            m.memory.peak,
            plan::plan(&run).memory.peak,
            "{} {} head width {}",
            run.mode,
            run.precision,
            run.model.d_head()
        );
    }
}

#[test]
#[cfg_attr(
    no_gpu,
    ignore = "needs an NVIDIA GPU: run with --include-ignored there, or build with GPU_TESTS=1"
)]
fn a_flash_run_opens_one_attention_range_per_block_and_pass() {
    let Some(rt) = runtime() else { return };
    let run = with(tiny(Mode::Train, Precision::Bf16), Attention::Flash);
    let names = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    collect::nvtx::set_listener(Some(Box::new(Names(names.clone(), 0))));
    bench::run_one(&rt, &run, 0, 1, 0).unwrap();
    collect::nvtx::set_listener(None);
    let mut expected = vec![(0, "measurement".to_owned()), (1, "step_0".to_owned())];
    expected.push((2, "forward".to_owned()));
    for _ in 0..run.model.layers {
        expected.push((3, "attention_flash".to_owned()));
    }
    // The backward is cut by the overlapped optimizer's ranges: the head's part, one part per
    // block (with its attention), the embedding's, each followed by its update's range.
    for part in 0..run.model.layers + 2 {
        expected.push((2, "backward".to_owned()));
        if (1..=run.model.layers).contains(&part) {
            expected.push((3, "attention_flash".to_owned()));
        }
        expected.push((2, "optimizer".to_owned()));
    }
    assert_eq!(*names.borrow(), expected);
}

#[test]
#[cfg_attr(
    no_gpu,
    ignore = "needs an NVIDIA GPU: run with --include-ignored there, or build with GPU_TESTS=1"
)]
fn a_sweep_goes_on_past_a_configuration_it_refuses() {
    let Some(rt) = runtime() else { return };
    let base = tiny(Mode::Forward, Precision::Fp32);
    let opts = BenchOptions {
        models: vec![base.model.clone()],
        // 2 x 4 heads x 23200^2 scores: over 2^31 for naive, nothing for flash.
        ctxs: vec![40, 23200],
        modes: vec![Mode::Forward],
        precisions: vec![Precision::Fp32],
        attentions: vec![Attention::Naive],
        batch: base.batch,
        warmup: 0,
        steps: 1,
        tf32: false,
        checkpoint: collect::transformer::config::Checkpoint::Off,
        seed: 0,
        allocator: AllocatorKind::Pool,
        recording: Recording::default(),
        step: Default::default(),
    };
    let rows = bench::run_grid(&rt, &opts, |_| {}).unwrap();
    assert_eq!(rows.len(), 2);
    assert!(matches!(rows[0].outcome, Outcome::Ran(_)));
    match &rows[1].outcome {
        Outcome::Refused { reason, hint } => {
            assert!(reason.contains("over the 2^31 limit"), "{reason}");
            assert_eq!(*hint, Some("--attention flash"));
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}
