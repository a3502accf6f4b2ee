//! The category of every allocation: the rules of [`super::categories`], then what the trace
//! shows beyond one stack.
//!
//! - A forward activation that no rule recognised but that was allocated from the same line of
//!   user code as recognised ones of exactly one kind takes that kind (the `w1`, `w3` matmuls on
//!   the line that also calls `silu` are FFN), walking outwards through the user's frames.
//! - A forward activation of the logits' size (the size of `log_softmax`'s output, or half of it
//!   in 16-bit precision) is the logits.
//! - A backward allocation that outlives the backward pass is a parameter gradient (autograd
//!   often hands a node's output to `AccumulateGrad` as the gradient itself), and an optimizer
//!   allocation that outlives its step is optimizer state (hand-written optimizers replace their
//!   state tensors every step).
//! - Allocations made before recording began have no stack. When the window holds parameter
//!   gradients, as many of those never freed in the window as there are gradients of each size
//!   are parameters and, if an optimizer ran in the window, twice as many more are optimizer
//!   state (Adam's two moments); the rest stay "before recording".

use std::collections::{HashMap, HashSet};

use super::categories::{
    Categorizer, Rules, ACTIVATIONS_OTHER, ACTIVATION_KINDS, BACKWARD, BEFORE_RECORDING, GRADIENTS,
    LOGITS, OPTIMIZER_STATE, OPTIMIZER_TEMP, OTHER, PARAMETERS,
};
use super::phases::{spans, Phase};
use super::timeline::{round_size, Timeline};
use crate::model::snapshot::{Snapshot, StackId};

/// The category of every allocation of `timeline` (same order as `timeline.allocations`).
pub fn categorize(snap: &Snapshot, timeline: &Timeline, rules: &Rules) -> Vec<String> {
    let mut c = Categorizer::new(&snap.frames, rules);
    let allocs = &timeline.allocations;
    let mut out: Vec<String> = allocs
        .iter()
        .map(|a| {
            if a.stack == StackId::EMPTY {
                return if a.before_recording() {
                    BEFORE_RECORDING.to_owned()
                } else {
                    OTHER.to_owned()
                };
            }
            match c.rule_for(a.stack) {
                Some(r) => c.category_name(r).to_owned(),
                None => OTHER.to_owned(),
            }
        })
        .collect();

    gradients_by_lifetime(snap, &c, timeline, &mut out);
    optimizer_state_by_lifetime(snap, &c, timeline, &mut out);
    same_line_inference(&c, timeline, &mut out);
    logits_by_size(&c, timeline, &mut out);
    before_recording_inference(snap, &c, timeline, &mut out);
    out
}

/// Backward allocations that outlive the backward pass are parameter gradients: autograd often
/// hands a node's output buffer to `AccumulateGrad` as the gradient itself (no allocation under
/// `AccumulateGrad`), and only the lifetime tells it from an activation gradient, which is freed
/// within the backward pass.
fn gradients_by_lifetime(
    snap: &Snapshot,
    c: &Categorizer<'_>,
    timeline: &Timeline,
    out: &mut [String],
) {
    let spans = spans(snap.trace(timeline.device), c.stack_phases());
    let Some(last_backward) = spans
        .iter()
        .filter(|s| s.phase == Phase::Backward)
        .map(|s| s.last_entry)
        .max()
    else {
        return;
    };
    let after_backward = |e: usize| {
        e > last_backward
            || spans
                .iter()
                .any(|s| s.phase == Phase::Optimizer && s.first_entry <= e && e <= s.last_entry)
    };
    for (a, cat) in timeline.allocations.iter().zip(out.iter_mut()) {
        if cat == BACKWARD
            && !a.before_recording()
            && match a.free_entry {
                None => true,
                Some(f) => after_backward(f),
            }
        {
            *cat = GRADIENTS.to_owned();
        }
    }
}

/// Optimizer allocations that outlive their step are its state: optimizers written
/// out-of-place (`m = beta1 * m + (1 - beta1) * g`, common in hand-written AdamW) replace their
/// state tensors every step, so the state is allocated by ordinary arithmetic, not `zeros_like`.
fn optimizer_state_by_lifetime(
    snap: &Snapshot,
    c: &Categorizer<'_>,
    timeline: &Timeline,
    out: &mut [String],
) {
    let spans = spans(snap.trace(timeline.device), c.stack_phases());
    let span_of = |e: usize| {
        spans
            .iter()
            .position(|s| s.first_entry <= e && e <= s.last_entry)
    };
    for (a, cat) in timeline.allocations.iter().zip(out.iter_mut()) {
        let Some(alloc) = a.alloc_entry else { continue };
        if cat == OPTIMIZER_TEMP
            && match a.free_entry {
                None => true,
                Some(f) => span_of(f) != span_of(alloc),
            }
        {
            *cat = OPTIMIZER_STATE.to_owned();
        }
    }
}

/// Unrecognised forward activations take the kind recognised allocations of the same user line
/// have, when it is a single kind.
fn same_line_inference(c: &Categorizer<'_>, timeline: &Timeline, out: &mut [String]) {
    let mut seeds: HashMap<u32, HashSet<&'static str>> = HashMap::new();
    for (a, cat) in timeline.allocations.iter().zip(out.iter()) {
        let Some(kind) = ACTIVATION_KINDS.iter().find(|k| **k == cat.as_str()) else {
            continue;
        };
        if let Some(f) = c.user_frames(a.stack).next() {
            seeds.entry(f).or_default().insert(kind);
        }
    }
    for (a, cat) in timeline.allocations.iter().zip(out.iter_mut()) {
        if cat != ACTIVATIONS_OTHER {
            continue;
        }
        for f in c.user_frames(a.stack) {
            if let Some(kinds) = seeds.get(&f) {
                if kinds.len() == 1 {
                    if let Some(k) = kinds.iter().next() {
                        *cat = (*k).to_owned();
                    }
                }
                break;
            }
        }
    }
}

/// Forward activations the size of the logits (as `log_softmax` sees them) are the logits.
fn logits_by_size(c: &Categorizer<'_>, timeline: &Timeline, out: &mut [String]) {
    let sizes: HashSet<u64> = timeline
        .allocations
        .iter()
        .zip(out.iter())
        .filter(|(a, cat)| *cat == LOGITS && c.ops(a.stack).any(|o| o == "_log_softmax"))
        .map(|(a, _)| a.requested)
        .filter(|&s| s >= 1 << 16)
        .collect();
    if sizes.is_empty() {
        return;
    }
    for (a, cat) in timeline.allocations.iter().zip(out.iter_mut()) {
        if cat == ACTIVATIONS_OTHER
            && (sizes.contains(&a.requested) || sizes.contains(&a.requested.saturating_mul(2)))
        {
            *cat = LOGITS.to_owned();
        }
    }
}

/// Stackless allocations from before recording: parameters and optimizer state by matching the
/// sizes of the parameter gradients made in the window.
fn before_recording_inference(
    snap: &Snapshot,
    c: &Categorizer<'_>,
    timeline: &Timeline,
    out: &mut [String],
) {
    let rounded = |n: u64| round_size(n, &snap.settings);
    let mut grads: HashMap<u64, usize> = HashMap::new();
    for (a, cat) in timeline.allocations.iter().zip(out.iter()) {
        if cat == GRADIENTS && !a.before_recording() {
            *grads.entry(rounded(a.requested)).or_default() += 1;
        }
    }
    if grads.is_empty() {
        return;
    }
    let optimizer_ran = snap
        .trace(timeline.device)
        .iter()
        .any(|e| c.phase(e.stack) == Some(Phase::Optimizer));
    let mut params = grads.clone();
    let mut state: HashMap<u64, usize> = if optimizer_ran {
        grads.iter().map(|(&s, &n)| (s, 2 * n)).collect()
    } else {
        HashMap::new()
    };
    // Parameters live through the whole step: only allocations never freed in the window can be
    // parameters. Largest first, so that when sizes collide the big tensors are matched.
    let mut order: Vec<usize> = (0..timeline.allocations.len())
        .filter(|&i| out[i] == BEFORE_RECORDING)
        .collect();
    order.sort_by_key(|&i| {
        let a = &timeline.allocations[i];
        (a.free_entry.is_some(), std::cmp::Reverse(a.size), i)
    });
    for i in order {
        let a = &timeline.allocations[i];
        let key = rounded(a.requested);
        if let Some(n) = params
            .get_mut(&key)
            .filter(|n| **n > 0 && a.free_entry.is_none())
        {
            *n -= 1;
            out[i] = PARAMETERS.to_owned();
        } else if let Some(n) = state.get_mut(&key).filter(|n| **n > 0) {
            *n -= 1;
            out[i] = OPTIMIZER_STATE.to_owned();
        }
    }
}
