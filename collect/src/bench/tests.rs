//! The harness's choices without a GPU: output paths, options, outcomes and hints.

use super::*;

/// A bf16 training step of `size` at `ctx`, batch 4, naive attention, no checkpointing.
fn bf16_training(size: &str, ctx: usize) -> RunConfig {
    RunConfig {
        model: ModelConfig::preset(size).unwrap(),
        ctx,
        batch: 4,
        mode: Mode::Train,
        precision: Precision::Bf16,
        tf32: false,
        attention: Attention::Naive,
        checkpoint: false,
    }
}

#[test]
fn grid_runs_every_combination_in_order() {
    let opts = BenchOptions {
        models: vec![
            ModelConfig::preset("small").unwrap(),
            ModelConfig::preset("xl").unwrap(),
        ],
        ctxs: vec![128, 256],
        modes: vec![Mode::Forward, Mode::Train],
        precisions: vec![Precision::Fp32, Precision::Bf16],
        attentions: vec![Attention::Naive],
        batch: 4,
        warmup: 5,
        steps: 10,
        tf32: false,
        checkpoint: Checkpoint::Auto,
        seed: 0,
        allocator: AllocatorKind::Pool,
        recording: Recording::default(),
        step: StepOptions::default(),
    };
    let g = opts.grid(plan::H200_MEMORY);
    assert_eq!(g.len(), 16);
    assert!(g.iter().all(|r| !r.checkpoint), "all fit an H200");
    let on = BenchOptions {
        checkpoint: Checkpoint::On,
        ..opts.clone()
    };
    let modes: Vec<(Mode, bool)> = on.grid(0).iter().map(|r| (r.mode, r.checkpoint)).collect();
    assert_eq!(
        modes[..4],
        [
            (Mode::Forward, false),
            (Mode::Forward, false),
            (Mode::Train, true),
            (Mode::Train, true)
        ]
    );
    // Auto on a device too small for any of them: on wherever there is a backward.
    assert_eq!(
        opts.grid(1 << 30).iter().filter(|r| r.checkpoint).count(),
        8
    );
    assert_eq!(
        (
            g[1].model.name.as_str(),
            g[1].ctx,
            g[1].mode,
            g[1].precision
        ),
        ("small", 128, Mode::Forward, Precision::Bf16)
    );
    assert_eq!(g[15].model.name, "xl");
}

#[test]
fn sweeps_label_each_configuration_file() {
    let run = bf16_training("small", 256);
    let p = |s: &str, many| output_path(Path::new(s), &run, many);
    assert_eq!(p("out/t.sqlite", false), Path::new("out/t.sqlite"));
    assert_eq!(
        p("out/t.sqlite", true),
        Path::new("out/t.small-ctx256-train-bf16.sqlite")
    );
    assert_eq!(
        p("snap.pickle.gz", true),
        Path::new("snap.small-ctx256-train-bf16.pickle.gz")
    );
    assert_eq!(p("snap", true), Path::new("snap.small-ctx256-train-bf16"));
    let rec = Recording {
        trace: Some("t.sqlite".into()),
        memory_snapshot: None,
        operator_ranges: false,
    };
    assert!(rec.any() && !Recording::default().any());
    assert_eq!(rec.for_run(&run, false), rec);
    let flash = RunConfig {
        attention: Attention::Flash,
        ..run
    };
    assert_eq!(
        output_path(Path::new("t.sqlite"), &flash, true),
        Path::new("t.small-ctx256-train-bf16-flash.sqlite")
    );
}

#[test]
fn rows_that_did_not_run_say_why_and_what_to_try() {
    let run = bf16_training("2.7B", 8192);
    let r = run.refusal().expect("naive is refused");
    let refused = Outcome::Refused {
        hint: r.hint(),
        reason: r.reason,
    };
    assert_eq!(refused.status(), "refused");
    assert!(refused
        .reason()
        .unwrap()
        .ends_with("over the 2^31 limit; try --attention flash"));
    // Out of memory on 141 GB: the flash plan of the same run fits, so it is the hint.
    let h200 = 150_000_000_000;
    let small = RunConfig {
        ctx: 2048,
        ..run.clone()
    };
    assert_eq!(oom_hint(&small, h200), Some("--attention flash"));
    assert_eq!(oom_hint(&small, 1 << 30), None);
    let flash = RunConfig {
        attention: Attention::Flash,
        ..small
    };
    // Flash already: checkpointing is what is left, and at ctx 8192 x batch 4 what fits.
    assert_eq!(oom_hint(&flash, h200), Some("--checkpoint on"));
    let long = RunConfig {
        attention: Attention::Flash,
        ..run.clone()
    };
    assert_eq!(oom_hint(&long, h200), Some("--checkpoint on"));
    let checkpointed = RunConfig {
        checkpoint: true,
        ..long
    };
    assert_eq!(oom_hint(&checkpointed, h200), None);
    assert_eq!(oom_hint(&checkpointed, 1 << 30), None);
    let oom = Outcome::OutOfMemory {
        what: "cuMemAllocAsync".into(),
        hint: Some("--attention flash"),
    };
    assert_eq!(
        (oom.status(), oom.reason().as_deref()),
        (
            "oom",
            Some("out of device memory (cuMemAllocAsync); try --attention flash")
        )
    );
}
