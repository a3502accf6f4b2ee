//! Categories of snapshots whose stacks say less than the bundled ones, made from them: the
//! same step with only its Python frames (as PyTorch 2.10 and later, or `stacks="python"`,
//! record), and the same step with its trace starting after the backward pass (as when the
//! oldest entries fall out of the trace's ring buffer). The original, with its C++ frames and
//! whole window, is the oracle: parameters, gradients and optimizer state come out the same, and
//! autocast's weight copies are found without `at::autocast::cached_cast` on the stack.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use analyze::formats::torch_snapshot::{read, write};
use analyze::memory::categories::{Rules, AUTOCAST, GRADIENTS, OPTIMIZER_STATE, PARAMETERS};
use analyze::memory::inference::categorize;
use analyze::memory::phases::{stack_phases, Phase};
use analyze::memory::timeline::replay;
use analyze::model::snapshot::Snapshot;

const FP32: &str = "memsnap/memsnap_small_ctx128_train_fp32.pickle.gz";
const BF16: &str = "memsnap/memsnap_small_ctx128_train_bf16.pickle.gz";

fn load(path: &Path) -> Snapshot {
    read::load(path).unwrap()
}

/// The snapshot with every stack cut to its Python frames.
fn python_frames_only(mut snap: Snapshot) -> Snapshot {
    let python: Vec<bool> = snap.frames.frames.iter().map(|f| f.is_python()).collect();
    for s in &mut snap.frames.stacks {
        s.retain(|&f| python[f as usize]);
    }
    snap
}

/// The snapshot with its trace starting at the first optimizer entry.
fn window_after_backward(mut snap: Snapshot) -> Snapshot {
    let phases = stack_phases(&snap.frames);
    let first = snap.traces[0]
        .iter()
        .position(|e| phases[e.stack.0 as usize] == Some(Phase::Optimizer))
        .expect("the step has an optimizer");
    snap.traces[0] = snap.traces[0].iter().skip(first).collect();
    snap
}

fn save(snap: &Snapshot, dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, write::to_pickle(snap)).unwrap();
    p
}

/// `analyze memory -f json`'s categories at the peak: category -> (bytes, count).
fn categories_at_peak(path: &Path) -> BTreeMap<String, (u64, u64)> {
    let v = common::json_stdout(&common::analyze(&[
        "memory",
        &path.display().to_string(),
        "-f",
        "json",
    ]));
    v["categories_at_peak"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["category"].as_str().unwrap().to_owned(),
                (c["bytes"].as_u64().unwrap(), c["count"].as_u64().unwrap()),
            )
        })
        .collect()
}

/// Count of allocations of each category over the whole window.
fn counts(snap: &Snapshot) -> BTreeMap<String, usize> {
    let tl = replay(snap, 0);
    let mut out = BTreeMap::new();
    for c in categorize(snap, &tl, &Rules::builtin()).iter() {
        *out.entry(c.to_owned()).or_default() += 1;
    }
    out
}

#[test]
fn python_only_stacks_give_the_same_parameters_gradients_and_state() {
    let dir = tempfile::tempdir().unwrap();
    for fixture in [FP32, BF16] {
        let original = common::fixture(fixture);
        let derived = save(
            &python_frames_only(load(&original)),
            dir.path(),
            "python_only.pickle",
        );
        let (a, b) = (categories_at_peak(&original), categories_at_peak(&derived));
        for cat in [
            PARAMETERS,
            GRADIENTS,
            OPTIMIZER_STATE,
            "optimizer temporaries",
            "before recording",
        ] {
            assert_eq!(a.get(cat), b.get(cat), "{fixture}: {cat}");
        }
        assert!(a[GRADIENTS].1 == 111 && a[PARAMETERS].1 == 111, "{a:?}");
        assert!(!b.contains_key("other"), "{fixture}: {b:?}");
    }
}

#[test]
fn autocast_weight_copies_are_found_without_cpp_frames() {
    let snap = load(&common::fixture(BF16));
    // The oracle: the copies `at::autocast::cached_cast` made that are half a parameter's size
    // (weights; the other casts are of activations).
    let tl = replay(&snap, 0);
    let cats = categorize(&snap, &tl, &Rules::builtin());
    let param_sizes: Vec<u64> = tl
        .allocations
        .iter()
        .zip(cats.iter())
        .filter(|(_, c)| *c == PARAMETERS)
        .map(|(a, _)| a.requested)
        .collect();
    let weight_copies = tl
        .allocations
        .iter()
        .zip(cats.iter())
        .filter(|(a, c)| *c == AUTOCAST && param_sizes.contains(&(a.requested * 2)))
        .count();
    assert_eq!(
        weight_copies, 85,
        "48 attention, 36 FFN weights and the LM head"
    );
    let derived = python_frames_only(snap);
    assert_eq!(counts(&derived).get(AUTOCAST), Some(&weight_copies));
    // Without autocast, nothing is taken for a copy.
    let fp32 = python_frames_only(load(&common::fixture(FP32)));
    assert_eq!(counts(&fp32).get(AUTOCAST), None);
}

#[test]
fn a_window_that_starts_after_the_backward_pass_still_splits_the_training_state() {
    let dir = tempfile::tempdir().unwrap();
    for fixture in [FP32, BF16] {
        let original = common::fixture(fixture);
        let full = categories_at_peak(&original);
        let derived = save(
            &window_after_backward(load(&original)),
            dir.path(),
            "after_backward.pickle",
        );
        let cut = categories_at_peak(&derived);
        // The gradients were made before this window; the step's `zero_grad` frees them.
        for cat in [PARAMETERS, GRADIENTS, OPTIMIZER_STATE] {
            assert_eq!(cut[cat].1, full[cat].1, "{fixture}: {cat}: {cut:?}");
        }
    }
}

#[test]
#[cfg_attr(
    no_shared_public,
    ignore = "needs ../shared/fixtures/public beside the checkout"
)]
fn gradients_made_by_backward_ops_before_recording_are_gradients() {
    // A public torch 2.6 training step whose weight gradients come from `BmmBackward0`.
    let Some(dir) = common::shared("public/memsnap") else {
        return;
    };
    let original = dir.join("kkaitlyn-a2__memory_files_memory_ctx128_fullstep_.pickle.gz");
    let full = categories_at_peak(&original);
    let tmp = tempfile::tempdir().unwrap();
    let cut = save(
        &window_after_backward(load(&original)),
        tmp.path(),
        "after_backward.pickle",
    );
    let cut = categories_at_peak(&cut);
    assert_eq!(full[GRADIENTS].1, 291);
    for cat in [PARAMETERS, GRADIENTS, OPTIMIZER_STATE] {
        assert_eq!(cut[cat], full[cat], "{cat}: {cut:?}");
    }
    assert!(!cut.contains_key("activation gradients"), "{cut:?}");
}

#[test]
fn four_equal_blocks_of_a_training_step_are_parameters_gradients_and_two_moments() {
    // `collect` keeps parameters, gradients and AdamW's two moments each in one flat block.
    let cats = categories_at_peak(&common::fixture(
        "collect/collect_small_ctx128_train_fp32.pickle.gz",
    ));
    let (p, g, s) = (cats[PARAMETERS], cats[GRADIENTS], cats[OPTIMIZER_STATE]);
    assert_eq!((p.1, g.1, s.1), (1, 1, 2));
    assert_eq!((g.0, s.0), (p.0, 2 * p.0));
}
