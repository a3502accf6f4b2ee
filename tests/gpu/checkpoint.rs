//! Activation checkpointing against the same step without it: the logits, the loss, every
//! gradient, and the weights and loss after one more whole step, bit for bit (fp32 and bf16,
//! naive and flash, heads of 16 and heads of 80 that flash pads to 128); the plan's peak of
//! checkpointed runs against the measured one; one `recompute` range per block inside
//! `backward`; and the bench rows, the results file and a trace saying whether it was on.
//!
//! The models are small enough for every sum to be made in a fixed order: the tokens are all
//! different (the embedding's backward adds the rows of repeated tokens atomically) and the
//! context fits one key block of the flash backward (which adds dQ atomically across key
//! blocks). Each comparison also runs the step twice without checkpointing, so that a
//! difference is pinned on checkpointing and not on the step itself.

use collect::bench::{self, report, BenchOptions, Outcome, Recording};
use collect::gpu::device_memory::AllocatorKind;
use collect::gpu::ops::Runtime;
use collect::transformer::config::{Attention, Checkpoint, Mode, Precision, RunConfig};
use collect::transformer::params::ParamLayout;
use collect::transformer::{plan, Model};

use crate::flash_model::padded;
use crate::{runtime, tiny, Names};

fn with(run: RunConfig, attention: Attention, checkpoint: bool) -> RunConfig {
    RunConfig {
        attention,
        checkpoint,
        ..run
    }
}

/// What a training step and the next leave, as bits.
#[derive(PartialEq)]
struct Bits {
    logits: Vec<u32>,
    loss: u32,
    grads: Vec<u32>,
    /// After the first step's AdamW update and a whole second step.
    params_after: Vec<u32>,
    loss_after: u32,
}

/// `ranges` at nesting depth `depth`.
fn at(depth: usize, ranges: &[&str]) -> Vec<(usize, String)> {
    ranges.iter().map(|n| (depth, n.to_string())).collect()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// A forward and backward, its AdamW update, then one more whole step (`Model::step`), on
/// weights from seed 7 and tokens that are all different.
fn two_steps(rt: &Runtime, run: &RunConfig, optimizer_sms: u32) -> Bits {
    let mut m = Model::new(rt, run, 7).unwrap();
    m.options.optimizer_sms = Some(optimizer_sms);
    let (n, vocab) = (run.tokens(), run.model.vocab);
    let tokens: Vec<i32> = (0..n).map(|i| ((i * 37 + 5) % vocab) as i32).collect();
    let targets: Vec<i32> = (0..n).map(|i| ((i * 101 + 3) % vocab) as i32).collect();
    let distinct: std::collections::HashSet<i32> = tokens.iter().copied().collect();
    assert_eq!(distinct.len(), n, "tokens must all differ");
    m.set_tokens(&tokens, &targets).unwrap();
    let fwd = m.forward(true).unwrap();
    let logits = bits(&m.download_logits(&fwd).unwrap());
    m.backward(fwd).unwrap();
    let loss = m.loss().unwrap().to_bits();
    let grads = bits(&m.download_grads().unwrap());
    m.optimizer_step().unwrap();
    m.step().unwrap();
    Bits {
        logits,
        loss,
        grads,
        params_after: bits(&m.download_params().unwrap()),
        loss_after: m.loss().unwrap().to_bits(),
    }
}

/// Where `b` differs from `a`, in words (empty when nowhere).
fn differences(run: &RunConfig, a: &Bits, b: &Bits) -> Vec<String> {
    let mut out = Vec::new();
    if a.logits != b.logits {
        out.push("logits".to_owned());
    }
    if a.loss != b.loss {
        let f = |x: u32| f32::from_bits(x);
        out.push(format!("loss {} vs {}", f(a.loss), f(b.loss)));
    }
    for t in &ParamLayout::new(&run.model).tensors {
        let r = t.offset..t.offset + t.len();
        if a.grads[r.clone()] != b.grads[r.clone()] {
            out.push(format!("{} gradient", t.name));
        }
        if a.params_after[r.clone()] != b.params_after[r] {
            out.push(format!("{} after the second step", t.name));
        }
    }
    if a.loss_after != b.loss_after {
        out.push("second step's loss".to_owned());
    }
    out
}

#[test]
#[cfg_attr(
    no_gpu,
    ignore = "needs an NVIDIA GPU: run with --include-ignored there, or build with GPU_TESTS=1"
)]
fn checkpointing_changes_no_bit_of_the_loss_gradients_or_weights() {
    let Some(rt) = runtime() else { return };
    let mut failures = Vec::new();
    // With SMs left to the overlapped optimizer too: the backward's GEMMs are planned for the
    // others, the recomputed forward's as the forward's.
    for sms in [0, 16] {
        for attention in [Attention::Naive, Attention::Flash] {
            for precision in [Precision::Fp32, Precision::Bf16] {
                for base in [tiny(Mode::Train, precision), padded(Mode::Train, precision)] {
                    let what = format!(
                        "{attention} {precision} head width {} optimizer SMs {sms}",
                        base.model.d_head()
                    );
                    let off = with(base.clone(), attention, false);
                    let on = with(base, attention, true);
                    let (a, b) = (two_steps(&rt, &off, sms), two_steps(&rt, &off, sms));
                    let again = differences(&off, &a, &b);
                    if !again.is_empty() {
                        failures.push(format!(
                            "{what}: two runs without checkpointing differ ({}): the step is not \
                             deterministic here",
                            again.join(", ")
                        ));
                        continue;
                    }
                    let c = two_steps(&rt, &on, sms);
                    let diff = differences(&on, &a, &c);
                    if !diff.is_empty() {
                        failures.push(format!("{what}: checkpointing changes {}", diff.join(", ")));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
#[cfg_attr(
    no_gpu,
    ignore = "needs an NVIDIA GPU: run with --include-ignored there, or build with GPU_TESTS=1"
)]
fn the_plan_gives_the_measured_peak_of_checkpointed_runs() {
    let Some(rt) = runtime() else { return };
    let mut failures = Vec::new();
    for attention in [Attention::Naive, Attention::Flash] {
        for base in [
            tiny(Mode::Train, Precision::Fp32),
            tiny(Mode::Train, Precision::Bf16),
            tiny(Mode::ForwardBackward, Precision::Bf16),
            padded(Mode::Train, Precision::Bf16),
            padded(Mode::ForwardBackward, Precision::Fp32),
        ] {
            let off = with(base, attention, false);
            let on = with(off.clone(), attention, true);
            let measured = bench::run_one(&rt, &on, 1, 2, 0).unwrap().memory.peak;
            let planned = plan::plan(&on).memory.peak;
            if measured != planned {
                failures.push(format!(
                    "{attention} {} {} head width {}: measured {measured}, planned {planned}",
                    on.mode,
                    on.precision,
                    on.model.d_head()
                ));
            }
            let without = bench::run_one(&rt, &off, 1, 2, 0).unwrap().memory.peak;
            assert!(measured < without, "{measured} vs {without} without");
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
#[cfg_attr(
    no_gpu,
    ignore = "needs an NVIDIA GPU: run with --include-ignored there, or build with GPU_TESTS=1"
)]
fn a_checkpointed_run_recomputes_each_block_inside_backward() {
    let Some(rt) = runtime() else { return };
    for attention in [Attention::Naive, Attention::Flash] {
        let run = with(tiny(Mode::Train, Precision::Bf16), attention, true);
        let names = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        collect::nvtx::set_listener(Some(Box::new(Names(names.clone(), 0))));
        bench::run_one(&rt, &run, 0, 1, 0).unwrap();
        collect::nvtx::set_listener(None);
        let (forward, backward): (&[&str], &[&str]) = match attention {
            Attention::Naive => (
                &[
                    "attention_matmul_QK",
                    "attention_softmax",
                    "attention_matmul_V",
                ],
                &[],
            ),
            Attention::Flash => (&["attention_flash"], &["attention_flash"]),
        };
        let mut expected = vec![
            (0, "measurement".to_owned()),
            (1, "step_0".to_owned()),
            (2, "forward".to_owned()),
        ];
        for _ in 0..run.model.layers {
            expected.extend(at(3, forward));
        }
        expected.push((2, "backward".to_owned()));
        for _ in 0..run.model.layers {
            expected.push((3, "recompute".to_owned()));
            expected.extend(at(4, forward));
            expected.extend(at(3, backward));
        }
        // The optimizer's updates cut the backward into pieces (one per update launched beside
        // it): read without them, the pieces are one backward.
        let mut seen: Vec<(usize, String)> = Vec::new();
        for (depth, name) in names.borrow().iter().cloned() {
            let in_backward =
                seen.iter().rev().find(|(d, _)| *d <= 2) == Some(&(2, "backward".to_owned()));
            if depth == 2 && (name == "optimizer" || (name == "backward" && in_backward)) {
                continue;
            }
            seen.push((depth, name));
        }
        assert_eq!(seen, expected, "{attention}");
        assert_eq!(
            names.borrow().last(),
            Some(&(2, "optimizer".to_owned())),
            "{attention}: the step ends with an update"
        );
    }
}

#[test]
#[cfg_attr(
    no_gpu,
    ignore = "needs an NVIDIA GPU: run with --include-ignored there, or build with GPU_TESTS=1"
)]
fn bench_rows_results_and_traces_say_whether_checkpointing_was_on() {
    let Some(rt) = runtime() else { return };
    let base = tiny(Mode::Train, Precision::Bf16);
    let dir = tempfile::tempdir().unwrap();
    let mut opts = BenchOptions {
        models: vec![base.model.clone()],
        ctxs: vec![base.ctx],
        modes: vec![Mode::Forward, Mode::Train],
        precisions: vec![Precision::Bf16],
        attentions: vec![Attention::Flash],
        batch: base.batch,
        warmup: 0,
        steps: 1,
        tf32: false,
        checkpoint: Checkpoint::On,
        step: Default::default(),
        seed: 0,
        allocator: AllocatorKind::Pool,
        recording: Recording {
            trace: Some(dir.path().join("t.sqlite")),
            memory_snapshot: None,
            operator_ranges: false,
        },
    };
    let rows = bench::run_grid(&rt, &opts, |_| {}).unwrap();
    // A forward keeps nothing: checkpointing is off there whatever was asked.
    let on: Vec<bool> = rows.iter().map(|r| r.run.checkpoint).collect();
    assert_eq!(on, [false, true]);
    let file = report::results_file(&rows, &rt.gpu.info, &opts);
    let said: Vec<Option<bool>> = file.results.iter().map(|r| r.checkpoint).collect();
    assert_eq!(said, [Some(false), Some(true)]);
    assert_eq!(
        file.settings.and_then(|s| s.checkpoint).as_deref(),
        Some("on")
    );
    let Outcome::Ran(m) = &rows[1].outcome else {
        panic!("the train step ran: {:?}", rows[1].outcome)
    };
    let db = rusqlite::Connection::open(&m.written[0]).unwrap();
    let value: String = db
        .query_row(
            "SELECT value FROM RUN_METADATA WHERE name = 'checkpoint'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(value, "true");
    let recomputes: i64 = db
        .query_row(
            "SELECT count(*) FROM NVTX_EVENTS WHERE text = 'recompute'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(recomputes, base.model.layers as i64);

    // Auto on this device: the tiny model fits, so checkpointing stays off.
    opts.checkpoint = Checkpoint::Auto;
    opts.modes = vec![Mode::Train];
    opts.recording = Recording::default();
    let rows = bench::run_grid(&rt, &opts, |_| {}).unwrap();
    assert!(!rows[0].run.checkpoint);
    assert!(matches!(rows[0].outcome, Outcome::Ran(_)));
}
