//! The category of every allocation: the rules of [`super::categories`], then what the trace
//! shows beyond one stack.
//!
//! - A backward allocation that outlives the backward pass is a parameter gradient (autograd
//!   often hands a node's output to `AccumulateGrad` as the gradient itself), and an optimizer
//!   allocation that outlives its step is optimizer state (hand-written optimizers replace their
//!   state tensors every step).
//! - Gradients also come from where the stack cannot name them: made before recording began by
//!   a backward op (`BmmBackward0`, `ToCopyBackward0`: the block keeps its stack) and still held
//!   after the backward the window starts in, or made in the window's backward pass with no
//!   stack at all (recorded with Python frames only, the autograd thread has none) and kept past
//!   it. Both must have a parameter's size, and there are no more of a size than parameters.
//! - Allocations made before recording began have no stack. With the gradients known, as many
//!   of those never freed in the window as there are gradients of each size are parameters and,
//!   if an optimizer ran in the window, twice as many more are optimizer state (Adam's two
//!   moments). With no gradient known, a training step's sizes may still say it: three kept
//!   through the window per one freed by the step's `zero_grad` (parameter, two moments,
//!   gradient), or large sizes that all come in threes (parameter and two moments) or all in
//!   fours (and the gradient) are split so (`split_by_counts`); the rest stay "before
//!   recording". In a forward-only window the blocks from before recording that it never
//!   frees are the model's parameters and buffers, labelled as a training step's are.
//! - Autocast's low-precision copies of weights, in stacks with Python frames only
//!   ([`super::autocast`]).
//! - A forward activation that no rule recognised but that was allocated from the same line of
//!   user code as recognised ones of exactly one kind takes that kind (the `w1`, `w3` matmuls on
//!   the line that also calls `silu` are FFN), walking outwards through the user's frames.
//! - A forward activation of the logits' size (the size of `log_softmax`'s output, or half of it
//!   in 16-bit precision) is the logits.

use std::collections::{HashMap, HashSet};

use super::autocast;
use super::categories::{
    Categorizer, Rules, ACTIVATIONS_OTHER, ACTIVATION_KINDS, BACKWARD, BEFORE_RECORDING, GRADIENTS,
    LOGITS, OPTIMIZER_STATE, OPTIMIZER_TEMP, OTHER, PARAMETERS,
};
use super::phases::{spans, Phase, PhaseSpan};
use super::timeline::{round_size, Timeline};
use crate::model::snapshot::{Snapshot, StackId};

/// The category of every allocation of a timeline, in its order: each name stored once, each
/// allocation its name's number.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Categories {
    names: Vec<String>,
    of: Vec<u32>,
}

impl Categories {
    /// The categories named in order.
    pub fn new(names: &[&str]) -> Categories {
        let mut c = Categories::default();
        let mut ids: HashMap<&str, u32> = HashMap::new();
        c.of.reserve_exact(names.len());
        for &name in names {
            let id = *ids.entry(name).or_insert_with(|| {
                c.names.push(name.to_owned());
                (c.names.len() - 1) as u32
            });
            c.of.push(id);
        }
        c
    }

    pub fn len(&self) -> usize {
        self.of.len()
    }

    pub fn is_empty(&self) -> bool {
        self.of.is_empty()
    }

    /// The category of allocation `i`.
    pub fn get(&self, i: usize) -> Option<&str> {
        self.of.get(i).map(|&id| self.names[id as usize].as_str())
    }

    /// The categories in order.
    pub fn iter(&self) -> impl Iterator<Item = &str> + '_ {
        self.of.iter().map(|&id| self.names[id as usize].as_str())
    }
}

/// The category of every allocation of `timeline` (same order as `timeline.allocations`).
pub fn categorize(snap: &Snapshot, timeline: &Timeline, rules: &Rules) -> Categories {
    let mut c = Categorizer::new(&snap.frames, rules);
    let allocs = &timeline.allocations;
    let mut out: Vec<&str> = allocs
        .iter()
        .map(|a| {
            if a.stack == StackId::EMPTY {
                return if a.before_recording() {
                    BEFORE_RECORDING
                } else {
                    OTHER
                };
            }
            match c.rule_for(a.stack) {
                Some(r) => c.category_name(r),
                None => OTHER,
            }
        })
        .collect();

    let spans = spans(&timeline.trace, c.stack_phases());
    gradients_by_lifetime(&spans, timeline, &mut out);
    gradients_without_their_node(snap, &c, &spans, timeline, &mut out);
    optimizer_state_by_lifetime(&spans, timeline, &mut out);
    before_recording_inference(snap, &c, &spans, timeline, &mut out);
    autocast::copies_by_size(&c, &spans, timeline, &mut out);
    same_line_inference(&c, timeline, &mut out);
    logits_by_size(&c, timeline, &mut out);
    Categories::new(&out)
}

/// The last entry of the window's backward passes, and whether entry `e` lies after it or in
/// an optimizer step: what a gradient outlives.
struct AfterBackward<'a> {
    last_backward: Option<usize>,
    spans: &'a [PhaseSpan],
}

impl AfterBackward<'_> {
    fn new(spans: &[PhaseSpan]) -> AfterBackward<'_> {
        AfterBackward {
            last_backward: spans
                .iter()
                .filter(|s| s.phase == Phase::Backward)
                .map(|s| s.last_entry)
                .max(),
            spans,
        }
    }

    fn contains(&self, e: usize) -> bool {
        self.last_backward.is_some_and(|b| e > b)
            || self
                .spans
                .iter()
                .any(|s| s.phase == Phase::Optimizer && s.first_entry <= e && e <= s.last_entry)
    }
}

/// Backward allocations that outlive the backward pass are parameter gradients: autograd often
/// hands a node's output buffer to `AccumulateGrad` as the gradient itself (no allocation under
/// `AccumulateGrad`), and only the lifetime tells it from an activation gradient, which is freed
/// within the backward pass.
fn gradients_by_lifetime(spans: &[PhaseSpan], timeline: &Timeline, out: &mut [&str]) {
    let after = AfterBackward::new(spans);
    if after.last_backward.is_none() {
        return;
    }
    for (a, cat) in timeline.allocations.iter().zip(out.iter_mut()) {
        if *cat == BACKWARD
            && !a.before_recording()
            && match a.free_entry() {
                None => true,
                Some(f) => after.contains(f),
            }
        {
            *cat = GRADIENTS;
        }
    }
}

/// Rounded sizes of the allocations that may be parameters, with their counts: those made
/// before recording and never freed in the window that no rule placed elsewhere.
fn parameter_sizes(snap: &Snapshot, timeline: &Timeline, out: &[&str]) -> HashMap<u64, usize> {
    let mut sizes: HashMap<u64, usize> = HashMap::new();
    for (a, cat) in timeline.allocations.iter().zip(out) {
        if a.before_recording()
            && a.free_entry().is_none()
            && (*cat == BEFORE_RECORDING || *cat == PARAMETERS)
        {
            *sizes
                .entry(round_size(a.requested, &snap.settings))
                .or_default() += 1;
        }
    }
    sizes
}

/// Gradients whose stack does not say so, recognised by a parameter's size and a backward
/// origin, and by outliving the backward pass:
/// - made before recording began by a backward op (the end-state block keeps the stack:
///   `BmmBackward0`, `ToCopyBackward0`, `IndexBackward0`), and not freed within the backward
///   pass the window starts in (an activation gradient would be);
/// - made in the window's backward pass with no stack (the autograd thread has no Python
///   frames, and a trace recorded with Python frames only has nothing else), in a snapshot
///   whose stacks are Python-only, and kept past the backward pass.
///
/// No more of a size become gradients than there are possible parameters of that size. The
/// autograd thread's other allocations in such a snapshot are the backward pass's own
/// (activation gradients and temporaries), as its C++ frames would have said.
fn gradients_without_their_node(
    snap: &Snapshot,
    c: &Categorizer<'_>,
    spans: &[PhaseSpan],
    timeline: &Timeline,
    out: &mut [&str],
) {
    let after = AfterBackward::new(spans);
    // The backward pass the window starts in, if it starts in one: its last entry.
    let first_backward_end = spans
        .first()
        .filter(|s| s.phase == Phase::Backward)
        .map(|s| s.last_entry);
    let python_only = timeline.allocations.iter().any(|a| c.python_only(a.stack));
    let in_backward = |e: usize| {
        spans
            .iter()
            .any(|s| s.phase == Phase::Backward && s.first_entry <= e && e <= s.last_entry)
    };
    let mut room = parameter_sizes(snap, timeline, out);
    for (i, a) in timeline.allocations.iter().enumerate() {
        // Made by the autograd thread in a trace whose stacks are Python-only.
        let autograd_thread = python_only
            && a.stack == StackId::EMPTY
            && out[i] == OTHER
            && a.alloc_entry().is_some_and(in_backward);
        let candidate = if a.before_recording() {
            out[i] == BACKWARD
                && match (a.free_entry(), first_backward_end) {
                    (Some(f), Some(end)) => f > end,
                    _ => true,
                }
        } else {
            autograd_thread && a.free_entry().is_none_or(|f| after.contains(f))
        };
        let key = round_size(a.requested, &snap.settings);
        match room.get_mut(&key).filter(|n| **n > 0 && candidate) {
            Some(n) => {
                *n -= 1;
                out[i] = GRADIENTS;
            }
            // The rest of the autograd thread's work: activation gradients and temporaries.
            None if autograd_thread => out[i] = BACKWARD,
            None => {}
        }
    }
}

/// Optimizer allocations that outlive their step are its state: optimizers written
/// out-of-place (`m = beta1 * m + (1 - beta1) * g`, common in hand-written AdamW) replace their
/// state tensors every step, so the state is allocated by ordinary arithmetic, not `zeros_like`.
fn optimizer_state_by_lifetime(spans: &[PhaseSpan], timeline: &Timeline, out: &mut [&str]) {
    let span_of = |e: usize| {
        spans
            .iter()
            .position(|s| s.first_entry <= e && e <= s.last_entry)
    };
    for (a, cat) in timeline.allocations.iter().zip(out.iter_mut()) {
        let Some(alloc) = a.alloc_entry() else {
            continue;
        };
        if *cat == OPTIMIZER_TEMP
            && match a.free_entry() {
                None => true,
                Some(f) => span_of(f) != span_of(alloc),
            }
        {
            *cat = OPTIMIZER_STATE;
        }
    }
}

/// Unrecognised forward activations take the kind recognised allocations of the same user line
/// have, when it is a single kind.
fn same_line_inference(c: &Categorizer<'_>, timeline: &Timeline, out: &mut [&str]) {
    let mut seeds: HashMap<u32, HashSet<&'static str>> = HashMap::new();
    for (a, cat) in timeline.allocations.iter().zip(out.iter()) {
        let Some(kind) = ACTIVATION_KINDS.iter().find(|k| **k == *cat) else {
            continue;
        };
        if let Some(f) = c.user_frames(a.stack).next() {
            seeds.entry(f).or_default().insert(kind);
        }
    }
    for (a, cat) in timeline.allocations.iter().zip(out.iter_mut()) {
        if *cat != ACTIVATIONS_OTHER {
            continue;
        }
        for f in c.user_frames(a.stack) {
            if let Some(kinds) = seeds.get(&f) {
                if kinds.len() == 1 {
                    if let Some(k) = kinds.iter().next() {
                        *cat = *k;
                    }
                }
                break;
            }
        }
    }
}

/// Forward activations the size of the logits (as `log_softmax` sees them) are the logits.
fn logits_by_size(c: &Categorizer<'_>, timeline: &Timeline, out: &mut [&str]) {
    let sizes: HashSet<u64> = timeline
        .allocations
        .iter()
        .zip(out.iter())
        .filter(|(a, cat)| **cat == LOGITS && c.ops(a.stack).any(|o| o == "_log_softmax"))
        .map(|(a, _)| a.requested)
        .filter(|&s| s >= 1 << 16)
        .collect();
    if sizes.is_empty() {
        return;
    }
    for (a, cat) in timeline.allocations.iter().zip(out.iter_mut()) {
        if *cat == ACTIVATIONS_OTHER
            && (sizes.contains(&a.requested) || sizes.contains(&a.requested.saturating_mul(2)))
        {
            *cat = LOGITS;
        }
    }
}

/// Stackless allocations from before recording: parameters, gradients and optimizer state,
/// by matching the sizes of the parameter gradients, or else by the counts of each size.
fn before_recording_inference(
    snap: &Snapshot,
    c: &Categorizer<'_>,
    spans: &[PhaseSpan],
    timeline: &Timeline,
    out: &mut [&str],
) {
    let rounded = |n: u64| round_size(n, &snap.settings);
    let mut grads: HashMap<u64, usize> = HashMap::new();
    for (a, cat) in timeline.allocations.iter().zip(out.iter()) {
        if *cat == GRADIENTS {
            *grads.entry(rounded(a.requested)).or_default() += 1;
        }
    }
    let optimizer_ran = timeline
        .trace
        .stacks()
        .any(|s| c.phase(s) == Some(Phase::Optimizer));
    if grads.is_empty() {
        let training_step = spans.iter().any(|s| s.phase != Phase::Forward);
        if training_step {
            split_by_counts(snap, spans, timeline, out);
        } else if !spans.is_empty() && !optimizer_ran {
            forward_only_parameters(timeline, out);
        }
        return;
    }
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
        (a.free_entry().is_some(), std::cmp::Reverse(a.size), i)
    });
    for i in order {
        let a = &timeline.allocations[i];
        let key = rounded(a.requested);
        if let Some(n) = params
            .get_mut(&key)
            .filter(|n| **n > 0 && a.free_entry().is_none())
        {
            *n -= 1;
            out[i] = PARAMETERS;
        } else if let Some(n) = state.get_mut(&key).filter(|n| **n > 0) {
            *n -= 1;
            out[i] = OPTIMIZER_STATE;
        }
    }
}

/// A forward-only window (inference): no gradient or optimizer state exists to tell the
/// parameters apart, but the model's weights and buffers are what a forward pass holds from
/// before recording through to its end. Those blocks are parameters, as a training step's are;
/// blocks from before recording that the window frees (inputs, caches) stay "before recording".
fn forward_only_parameters(timeline: &Timeline, out: &mut [&str]) {
    for (a, cat) in timeline.allocations.iter().zip(out.iter_mut()) {
        if *cat == BEFORE_RECORDING && a.free_entry().is_none() {
            *cat = PARAMETERS;
        }
    }
}

/// A training step's stackless block from before recording, split by the counts of its sizes
/// when no gradient is known. Per size, counting the allocations kept through the window and
/// those freed after the backward pass (the step's `zero_grad` freeing the gradients):
/// - three kept per one freed: the parameter and its two Adam moments, and the gradient;
/// - else, for the sizes of 1 MiB or more that at least three kept allocations share, when all
///   their counts are multiples of three (and not all of four), the parameter and two moments
///   per three, or of four (and not all of three), the same and the gradient per four.
///
/// Other sizes (inputs, workspaces, buffers such as RoPE tables) stay "before recording".
fn split_by_counts(snap: &Snapshot, spans: &[PhaseSpan], timeline: &Timeline, out: &mut [&str]) {
    let rounded = |n: u64| round_size(n, &snap.settings);
    let after = AfterBackward::new(spans);
    // Per size: (kept through the window, freed after the backward pass).
    let mut counts: HashMap<u64, (usize, usize)> = HashMap::new();
    for (a, cat) in timeline.allocations.iter().zip(out.iter()) {
        if *cat != BEFORE_RECORDING {
            continue;
        }
        let e = counts.entry(rounded(a.requested)).or_default();
        match a.free_entry() {
            None => e.0 += 1,
            Some(f) if after.contains(f) => e.1 += 1,
            Some(_) => {}
        }
    }
    // Per size: parameters, gradients kept, gradients freed, optimizer state.
    let mut plan: HashMap<u64, [usize; 4]> = counts
        .iter()
        .filter(|(_, &(kept, freed))| freed > 0 && kept == 3 * freed)
        .map(|(&size, &(_, freed))| (size, [freed, 0, freed, 2 * freed]))
        .collect();
    if plan.is_empty() {
        let large: Vec<(u64, usize)> = counts
            .iter()
            .filter(|(&size, &(kept, _))| size >= 1 << 20 && kept >= 3)
            .map(|(&size, &(kept, _))| (size, kept))
            .collect();
        let thirds = large.iter().all(|(_, k)| k % 3 == 0);
        let quarters = large.iter().all(|(_, k)| k % 4 == 0);
        let per_param = match (thirds, quarters) {
            (true, false) => 3,
            (false, true) => 4,
            // Both or neither: the sizes do not say.
            _ => return,
        };
        plan = large
            .into_iter()
            .map(|(size, kept)| {
                let params = kept / per_param;
                let grads = if per_param == 4 { params } else { 0 };
                (size, [params, grads, 0, 2 * params])
            })
            .collect();
    }
    for (a, cat) in timeline.allocations.iter().zip(out.iter_mut()) {
        if *cat != BEFORE_RECORDING {
            continue;
        }
        let Some(p) = plan.get_mut(&rounded(a.requested)) else {
            continue;
        };
        let slot = match a.free_entry() {
            None => (0..2).chain(3..4).find(|&k| p[k] > 0),
            Some(f) if after.contains(f) => (p[2] > 0).then_some(2),
            Some(_) => None,
        };
        if let Some(k) = slot {
            p[k] -= 1;
            *cat = [PARAMETERS, GRADIENTS, GRADIENTS, OPTIMIZER_STATE][k];
        }
    }
}
