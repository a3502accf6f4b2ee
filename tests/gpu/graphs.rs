//! The step replayed from CUDA graphs (`--cuda-graph`) against the eager step: the same bits of
//! every loss and of the weights after training, under both optimizer schedules, with the naive
//! and the flash attention and with activation checkpointing; and a recorded run whose ranges are
//! an eager run's and whose trace puts each step's kernels in its own `step_N` range.

use collect::bench::{run_one_with, Recording};
use collect::gpu::device_memory::AllocatorKind;
use collect::gpu::ops::Runtime;
use collect::transformer::config::{Attention, Mode, Precision, RunConfig};
use collect::transformer::{Model, OptimizerSchedule, StepOptions};
use collect::Error;

use crate::{assert_kernels_per_step, tiny, Names};

fn caching_runtime() -> Option<Runtime> {
    match Runtime::open_with(AllocatorKind::Caching) {
        Ok(rt) => Some(rt),
        Err(e @ (Error::NoDevice { .. } | Error::MissingLibrary { .. })) => {
            eprintln!("skipped: {e}");
            None
        }
        Err(e) => panic!("the GPU is there but could not be opened: {e}"),
    }
}

/// A model of `run` whose tokens all differ: the embedding's backward adds repeated tokens'
/// rows atomically, in an order that may change from run to run.
fn model<'r>(rt: &'r Runtime, run: &RunConfig) -> Model<'r> {
    let mut m = Model::new(rt, run, 5).unwrap();
    let (n, vocab) = (run.tokens(), run.model.vocab);
    let tokens: Vec<i32> = (0..n).map(|i| ((i * 37 + 5) % vocab) as i32).collect();
    let targets: Vec<i32> = (0..n).map(|i| ((i * 101 + 3) % vocab) as i32).collect();
    m.set_tokens(&tokens, &targets).unwrap();
    m
}

/// The loss of each of `steps` training steps and the weights after them, as bits.
fn train_bits(rt: &Runtime, run: &RunConfig, options: StepOptions, steps: usize) -> Vec<u32> {
    let mut m = model(rt, run);
    m.options = options;
    let mut bits = Vec::new();
    for _ in 0..steps {
        m.step().unwrap();
        bits.push(m.loss().unwrap().to_bits());
    }
    rt.gpu.synchronize_all().unwrap();
    bits.extend(m.download_params().unwrap().iter().map(|x| x.to_bits()));
    bits
}

#[test]
#[cfg_attr(
    no_gpu,
    ignore = "needs an NVIDIA GPU: run with --include-ignored there, or build with GPU_TESTS=1"
)]
fn graphed_steps_give_the_bits_of_eager_steps() {
    let Some(rt) = caching_runtime() else { return };
    let mut failures = Vec::new();
    for precision in [Precision::Fp32, Precision::Bf16] {
        for optimizer in [
            OptimizerSchedule::Overlapped,
            OptimizerSchedule::AfterBackward,
        ] {
            for (attention, checkpoint) in [
                (Attention::Naive, false),
                (Attention::Flash, false),
                (Attention::Naive, true),
            ] {
                let run = RunConfig {
                    attention,
                    checkpoint,
                    ..tiny(Mode::Train, precision)
                };
                let eager = StepOptions {
                    optimizer,
                    ..StepOptions::default()
                };
                let graphed = StepOptions {
                    cuda_graph: true,
                    ..eager
                };
                // Step 1 eager, step 2 captured and replayed, steps 3 to 5 replayed.
                let (want, got) = (
                    train_bits(&rt, &run, eager, 5),
                    train_bits(&rt, &run, graphed, 5),
                );
                if want != got {
                    failures.push(format!(
                        "{precision} {optimizer} {attention} checkpoint {checkpoint}: losses {:?} \
                         vs {:?}, weights {}",
                        &got[..5],
                        &want[..5],
                        if got[5..] == want[5..] {
                            "equal"
                        } else {
                            "differ"
                        }
                    ));
                }
            }
        }
    }
    // A forward-backward step has no optimizer: its gradients alone.
    let run = tiny(Mode::ForwardBackward, Precision::Bf16);
    let grads = |options: StepOptions| {
        let mut m = model(&rt, &run);
        m.options = options;
        for _ in 0..3 {
            m.step().unwrap();
        }
        m.download_grads().unwrap()
    };
    let graphed = StepOptions {
        cuda_graph: true,
        ..StepOptions::default()
    };
    if grads(StepOptions::default()) != grads(graphed) {
        failures.push("forward-backward: gradients differ".to_owned());
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
#[cfg_attr(
    no_gpu,
    ignore = "needs an NVIDIA GPU: run with --include-ignored there, or build with GPU_TESTS=1"
)]
fn a_graphed_run_opens_the_eager_ranges_and_traces_each_steps_kernels() {
    let Some(rt) = caching_runtime() else { return };
    let run = tiny(Mode::Train, Precision::Fp32);
    let ranges = |options: StepOptions, rec: &Recording| {
        let names = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        collect::nvtx::set_listener(Some(Box::new(Names(names.clone(), 0))));
        let m = run_one_with(&rt, &run, 1, 2, 0, rec, options).unwrap();
        collect::nvtx::set_listener(None);
        let seen = names.borrow().clone();
        (m, seen)
    };
    let dir = tempfile::tempdir().unwrap();
    let rec = Recording {
        trace: Some(dir.path().join("run.sqlite")),
        memory_snapshot: None,
        operator_ranges: false,
    };
    let graphed = StepOptions {
        cuda_graph: true,
        ..StepOptions::default()
    };
    // A recorded run installs its own listener: the ranges are compared unrecorded.
    let (eager, eager_ranges) = ranges(StepOptions::default(), &Recording::default());
    let (graph, graph_ranges) = ranges(graphed, &Recording::default());
    assert_eq!(graph_ranges, eager_ranges);
    // The same training (random tokens repeat: the embedding's atomic adds may differ in bits).
    let (a, b) = (graph.loss.unwrap(), eager.loss.unwrap());
    assert!((a - b).abs() <= 1e-6 * b.abs(), "losses {a} vs {b}");
    run_one_with(&rt, &run, 1, 2, 0, &rec, graphed).unwrap();

    // Each timed step's kernels, attributed by their launch call (a graph launch) inside step_N.
    let db = rusqlite::Connection::open(dir.path().join("run.sqlite")).unwrap();
    assert_kernels_per_step(&db, run.model.layers as i64);
    // The phases: every kernel of the forward inside a `forward` range, by its launch call.
    let forward: i64 = db
        .query_row(
            "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k \
             JOIN StringIds s ON s.id = k.demangledName \
             JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId \
             JOIN NVTX_EVENTS n ON n.text = 'forward' AND r.start BETWEEN n.start AND n.end \
             AND r.globalTid = n.globalTid WHERE s.value = 'embedding_fwd'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(
        forward, 3,
        "one embedding lookup per step, warm-up included"
    );
}
