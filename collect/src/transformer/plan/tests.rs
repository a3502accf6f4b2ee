//! The plan against its own arithmetic and the limits of real devices.

use super::*;
use crate::transformer::config::ModelConfig;
use analyze::render::cells::format_bytes;

fn run(size: &str, mode: Mode, precision: Precision) -> RunConfig {
    RunConfig {
        model: ModelConfig::preset(size).unwrap(),
        ctx: 256,
        batch: 4,
        mode,
        precision,
        tf32: false,
        attention: Attention::Naive,
        checkpoint: false,
    }
}

#[test]
fn train_flops_are_six_n_t_plus_attention() {
    // 6 x matrix parameters x tokens, plus per layer attention's two products of 2BT^2d
    // FLOPs each, three times (forward and backward).
    let p = plan(&run("small", Mode::Train, Precision::Fp32));
    let c = ModelConfig::preset("small").unwrap();
    let matrix =
        c.parameters() - (c.vocab * c.d_model) as u64 - ((2 * c.layers + 1) * c.d_model) as u64;
    let attn = 12 * (2 * 2 * 4 * 256 * 256 * 768) * 3;
    assert_eq!(p.flops.per_step, 6 * matrix * 1024 + attn);
}

#[test]
fn memory_grows_with_mode_and_residual_is_fp32() {
    let f = plan(&run("medium", Mode::Forward, Precision::Bf16));
    let t = plan(&run("medium", Mode::Train, Precision::Bf16));
    assert_eq!(f.memory.gradients, 0);
    assert_eq!(t.memory.optimizer_state, 2 * t.memory.parameters);
    assert_eq!(t.memory.residual_stream, 4 * 256 * 1024 * 4);
    assert_eq!(t.memory.bf16_weights * 2, t.memory.parameters);
    assert!(t.memory.peak > f.memory.peak);
}

/// The naive path's peak as a closed form: the most of three moments of the backward (the
/// loss beside the logits, the FFN's gradients in the last block, the attention's dP and dV)
/// or, without a backward, of a block's end and the head's. The form the plan had before it
/// replayed allocations, checked then against all 80 peaks measured on the H200.
fn naive_closed_form(run: &RunConfig) -> u64 {
    let dims = Dims::of(run);
    let (b, t, d, f, h, v, l) = (dims.b, dims.t, dims.d, dims.f, dims.h, dims.v, dims.l);
    let bt = b * t;
    let a = run.precision.activation_bytes() as u64;
    let m = plan(run).memory;
    let persistent = m.parameters + m.gradients + m.optimizer_state + m.bf16_weights + m.other;
    let layer = bt * d * 8 + bt * 8 + bt * d * 6 * a + b * h * t * t * a + 3 * bt * f * a;
    let final_norm = bt * d * 4 + bt * 4 + bt * d * a;
    let logits_one = bt * v * a;
    persistent
        + if run.mode.backward() {
            let kept = l * layer + final_norm;
            let dx = bt * d * 4 + if a == 2 { bt * d * 2 } else { 0 };
            let at_loss = kept + 2 * logits_one;
            let at_ffn = l * layer + dx + 2 * bt * f * a;
            let at_attention = (l * layer + dx + b * h * t * t * a)
                .saturating_sub(3 * bt * f * a + bt * d * 4 + bt * 4);
            at_loss.max(at_ffn).max(at_attention)
        } else {
            (layer + bt * d * 4).max(final_norm + logits_one)
        }
}

fn every_run(attention: Attention) -> Vec<RunConfig> {
    let mut out = Vec::new();
    for size in ["small", "medium", "large", "xl", "2.7B"] {
        for ctx in [128, 256, 512, 1024, 2048] {
            for mode in [Mode::Forward, Mode::ForwardBackward, Mode::Train] {
                for precision in [Precision::Fp32, Precision::Bf16] {
                    out.push(RunConfig {
                        ctx,
                        attention,
                        ..run(size, mode, precision)
                    });
                }
            }
        }
    }
    out
}

#[test]
fn the_naive_replay_gives_the_closed_form_peak() {
    for r in every_run(Attention::Naive) {
        assert_eq!(plan(&r).memory.peak, naive_closed_form(&r), "{r:?}");
    }
}

#[test]
fn flash_keeps_the_output_and_l_instead_of_p() {
    for r in every_run(Attention::Flash) {
        let naive = plan(&RunConfig {
            attention: Attention::Naive,
            ..r.clone()
        });
        let flash = plan(&r);
        let c = &r.model;
        let (bt, rows) = ((r.batch * r.ctx) as u64, (r.batch * c.heads * r.ctx) as u64);
        let a = r.precision.activation_bytes() as u64;
        let (l, d) = (c.layers as u64, c.d_model as u64);
        if !r.mode.backward() {
            assert_eq!((naive.memory.attention, flash.memory.attention), (0, 0));
            if c.d_head() != 80 {
                assert!(flash.memory.peak <= naive.memory.peak, "{r:?}");
            }
            continue;
        }
        assert_eq!(naive.memory.attention, l * rows * r.ctx as u64 * a);
        // The 2.7B model's heads of 80 run padded to 128: the padded output is kept.
        let o = if c.d_head() == 80 {
            rows * 128 * a
        } else {
            bt * d * a
        };
        assert_eq!(flash.memory.attention, l * (o + rows * 4), "{r:?}");
        assert_eq!(
            flash.memory.activations + naive.memory.attention,
            naive.memory.activations + flash.memory.attention
        );
        assert_eq!(flash.memory.logits, naive.memory.logits);
    }
}

/// The long contexts the naive path cannot run: 2.7B, bf16, train, ctx 16384 x batch 1 fits
/// an H200 (139.8 GiB) with flash; ctx 8192 x batch 4 keeps twice the tokens' activations,
/// 3.7 GiB a block, and fits only with activation checkpointing, which `auto` turns on.
#[test]
fn long_contexts_with_flash_against_an_h200() {
    for (ctx, batch, fits) in [(16384, 1, true), (8192, 4, false)] {
        let r = RunConfig {
            ctx,
            batch,
            attention: Attention::Flash,
            ..run("2.7B", Mode::Train, Precision::Bf16)
        };
        assert_eq!(r.refusal(), None);
        let p = plan(&r).memory;
        assert_eq!(
            p.peak < H200_MEMORY,
            fits,
            "ctx {ctx}: {}",
            format_bytes(p.peak)
        );
        assert_eq!(checkpoint_on(Checkpoint::Auto, &r, H200_MEMORY), !fits);
        let auto = plan_with(Checkpoint::Auto, &r, H200_MEMORY);
        assert_eq!(auto.run.checkpoint, !fits);
        assert_eq!(
            auto.auto_checkpoint,
            Some(AutoCheckpoint {
                capacity: H200_MEMORY,
                peak_without: p.peak
            })
        );
        assert!(auto.memory.peak < H200_MEMORY);
        // Everything but the attention is the naive path's too: P alone would be 2 GiB
        // (ctx 16384 x batch 1) or 16 GiB per layer.
        let naive = plan(&RunConfig {
            attention: Attention::Naive,
            ..r.clone()
        })
        .memory;
        assert!(naive.peak > p.peak + (32 << 30));
    }
}

/// The configuration checkpointing is for: 2.7B, ctx 8192 x batch 4, flash, bf16, train.
/// Without it the blocks keep 118.6 GiB and the step peaks at 177.0 GiB; with it they keep
/// their inputs, 32 x 320 MiB, and the step peaks at 72.2 GiB, under an H200's 139.8.
#[test]
fn checkpointing_fits_2_7b_at_ctx_8192_batch_4_on_an_h200() {
    let off = RunConfig {
        ctx: 8192,
        batch: 4,
        attention: Attention::Flash,
        ..run("2.7B", Mode::Train, Precision::Bf16)
    };
    let on = RunConfig {
        checkpoint: true,
        ..off.clone()
    };
    let (p_off, p_on) = (plan(&off), plan(&on));
    assert_eq!(format_bytes(p_off.memory.peak), "177.0 GiB");
    assert_eq!(format_bytes(p_off.memory.activations), "118.6 GiB");
    assert!(
        p_on.memory.peak < 139 << 30,
        "{}",
        format_bytes(p_on.memory.peak)
    );
    assert_eq!(format_bytes(p_on.memory.peak), "72.2 GiB");
    let residual = p_on.memory.residual_stream;
    assert_eq!(residual, 320 << 20);
    // The blocks' inputs, and the final norm's input, rstd and output.
    let bt = 8192 * 4;
    assert_eq!(
        p_on.memory.activations,
        32 * residual + residual + bt * 4 + bt * 2560 * 2
    );
    assert_eq!(p_on.memory.attention, 0);
    // One block's activations but its input: 3.7 GiB a block with it.
    assert_eq!(
        p_on.memory.recomputed + residual,
        (p_off.memory.activations - (residual + bt * 4 + bt * 2560 * 2)) / 32
    );
    assert_eq!(p_on.flops.per_step, p_off.flops.per_step);
    assert_eq!(p_off.flops.recompute, 0);
    assert_eq!(
        p_on.flops.recompute,
        p_on.flops.forward - 2 * bt * 2560 * 10_000
    );
}

#[test]
fn checkpointing_lowers_every_peak_with_a_backward_and_changes_nothing_without() {
    for attention in [Attention::Naive, Attention::Flash] {
        for r in every_run(attention) {
            let on = RunConfig {
                checkpoint: true,
                ..r.clone()
            };
            let (off, on) = (plan(&r), plan(&on));
            if !r.mode.backward() {
                assert_eq!(off.memory, on.memory, "{r:?}");
                assert_eq!(on.flops.recompute, 0);
                assert!(!checkpoint_on(Checkpoint::On, &r, 0));
                continue;
            }
            assert!(on.memory.peak < off.memory.peak, "{r:?}");
            assert!(on.memory.activations < off.memory.activations, "{r:?}");
            assert!(on.memory.recomputed > 0);
            // Auto against a device just big enough for the plan without it: off; one byte
            // smaller: on.
            assert!(!checkpoint_on(Checkpoint::Auto, &r, off.memory.peak + 1));
            assert!(checkpoint_on(Checkpoint::Auto, &r, off.memory.peak));
            assert!(!checkpoint_on(Checkpoint::Off, &r, 0));
        }
    }
}

#[test]
fn a_plan_says_how_auto_decided() {
    let r = run("small", Mode::Train, Precision::Fp32);
    let fits = plan_with(Checkpoint::Auto, &r, H200_MEMORY);
    let doc = fits.document();
    assert!(!fits.run.checkpoint);
    assert!(doc.sections[1].notes[0].starts_with("--checkpoint auto: off (the peak without it, "));
    let small_device = plan_with(Checkpoint::Auto, &r, 1 << 30);
    assert!(small_device.run.checkpoint);
    assert!(small_device.document().sections[1].notes[0]
        .ends_with("against 1.0 GiB of device memory: does not fit)."));
    let json = small_device.to_json();
    assert_eq!(json["config"]["checkpoint"], true);
    assert_eq!(json["checkpoint_auto"]["device_memory"], 1u64 << 30);
    assert_eq!(
        json["checkpoint_auto"]["peak_without_checkpoint"],
        fits.memory.peak
    );
    assert_eq!(plan_with(Checkpoint::On, &r, 0).auto_checkpoint, None);
    let forward = run("small", Mode::Forward, Precision::Fp32);
    assert_eq!(
        plan_with(Checkpoint::Auto, &forward, 1).auto_checkpoint,
        None
    );
}

#[test]
fn memory_sizes_parse_with_or_without_a_unit() {
    assert_eq!(parse_bytes("150109880320").unwrap(), H200_MEMORY);
    assert_eq!(parse_bytes("80GiB").unwrap(), 80 << 30);
    assert_eq!(parse_bytes("141 GB").unwrap(), 141_000_000_000);
    assert_eq!(parse_bytes("0.5mib").unwrap(), 512 << 10);
    for bad in ["", "GiB", "12 parsecs", "-1GB", "0"] {
        assert!(parse_bytes(bad).is_err(), "{bad}");
    }
}

/// `collect plan --size 2.7B --device-memory 1GiB`: the checkpointed step still needs 51.4 GiB,
/// and the plan says it does not fit; an H200 holds it.
#[test]
fn a_plan_checked_against_a_device_says_whether_it_fits() {
    let r = run("2.7B", Mode::Train, Precision::Fp32);
    let unchecked = plan_with(Checkpoint::Auto, &r, 1 << 30);
    assert_eq!(unchecked.fits_device(), None);
    assert_eq!(unchecked.device_note(), None);
    assert_eq!(
        unchecked.to_json()["device_memory"],
        serde_json::Value::Null
    );

    let small = unchecked.check_device(1 << 30);
    assert_eq!(format_bytes(small.memory.peak), "51.4 GiB");
    assert_eq!(small.fits_device(), Some(false));
    assert_eq!(
        small.device_note().unwrap(),
        "The plan does not fit the device: its peak, 51.4 GiB, is over the 1.0 GiB of \
         --device-memory."
    );
    assert!(small.document().sections[1]
        .notes
        .contains(&small.device_note().unwrap()));
    let json = small.to_json();
    assert_eq!(json["device_memory"]["bytes"], 1u64 << 30);
    assert_eq!(json["device_memory"]["fits"], false);

    let h200 = plan_with(Checkpoint::Auto, &r, H200_MEMORY).check_device(H200_MEMORY);
    assert_eq!(h200.fits_device(), Some(true));
    assert!(h200
        .device_note()
        .unwrap()
        .starts_with("The plan fits the device"));
    // The peak equal to the device's memory does not fit, as `fits` counts it.
    let exact = h200.memory.peak;
    assert_eq!(h200.clone().check_device(exact).fits_device(), Some(false));
    assert_eq!(h200.check_device(exact + 1).fits_device(), Some(true));
}
