//! Autocast's low-precision copies of weights, where the stacks cannot show the cast.
//!
//! With C++ frames on the stacks, a copy autocast makes passes through
//! `at::autocast::cached_cast`, and a built-in rule ([`super::categories`]) names it. A trace
//! recorded with Python frames only (`stacks="python"`, and PyTorch 2.10 and later) shows just
//! the line of model code that called the matmul, the same line that allocates the matmul's
//! output, so the copy reads as an activation. What still tells it is structure:
//!
//! - its size is exactly half a parameter's (a bf16 or fp16 copy of an fp32 weight);
//! - autocast casts each weight once per forward pass and caches the copy, so a size has at most
//!   as many copies per forward pass as there are parameters of twice the size;
//! - the copy is made inside the call that uses it, before that call's output: it is never the
//!   last of a run of consecutive allocations from the same stack.
//!
//! A forward-pass allocation of a Python-only stack that meets all three is a copy, provided the
//! snapshot shows autocast at work: for some size the copies match the parameters one for one.
//! A size with more candidates than parameters (an activation as large as half a weight) is left
//! as it is: the sizes do not say which is which.

use std::collections::HashMap;

use super::categories::{Categorizer, ACTIVATIONS_OTHER, ACTIVATION_KINDS, AUTOCAST, PARAMETERS};
use super::phases::{Phase, PhaseSpan};
use super::timeline::Timeline;

/// Copies smaller than this are not looked for: small parameters (norm weights, biases) are not
/// cast by autocast, and small sizes collide with everything.
const MIN_COPY: u64 = 1 << 16;

/// Mark autocast's weight copies among the forward activations of Python-only stacks.
pub fn copies_by_size(
    c: &Categorizer<'_>,
    spans: &[PhaseSpan],
    timeline: &Timeline,
    out: &mut [&str],
) {
    let allocs = &timeline.allocations;
    // Parameters by requested size.
    let mut params: HashMap<u64, usize> = HashMap::new();
    for (a, cat) in allocs.iter().zip(out.iter()) {
        if *cat == PARAMETERS {
            *params.entry(a.requested).or_default() += 1;
        }
    }
    if params.is_empty() {
        return;
    }
    let forward_passes = spans.iter().filter(|s| s.phase == Phase::Forward).count();
    let in_forward = |e: usize| {
        spans
            .iter()
            .any(|s| s.phase == Phase::Forward && s.first_entry <= e && e <= s.last_entry)
    };
    // The allocations made in the window, in trace order; the last of each run of one stack is
    // a call's output.
    let mut made: Vec<(u32, u32)> = allocs
        .iter()
        .enumerate()
        .filter_map(|(i, a)| a.alloc_entry().map(|e| (e as u32, i as u32)))
        .collect();
    made.sort_unstable();
    let mut candidates: HashMap<u64, Vec<usize>> = HashMap::new();
    for (k, &(entry, i)) in made.iter().enumerate() {
        let (entry, i) = (entry as usize, i as usize);
        let a = &allocs[i];
        let last_of_run = made
            .get(k + 1)
            .is_none_or(|&(_, j)| !c.same_frames(allocs[j as usize].stack, a.stack));
        let activation = out[i] == ACTIVATIONS_OTHER || ACTIVATION_KINDS.contains(&out[i]);
        if last_of_run
            || !activation
            || a.requested < MIN_COPY
            || !c.python_only(a.stack)
            || !in_forward(entry)
        {
            continue;
        }
        if params.contains_key(&a.requested.saturating_mul(2)) {
            candidates.entry(a.requested).or_default().push(i);
        }
    }
    let cap = |size: u64| params.get(&(size * 2)).copied().unwrap_or(0) * forward_passes;
    let evident = candidates
        .iter()
        .any(|(&size, v)| v.len() == cap(size) && v.len() > 1);
    if !evident {
        return;
    }
    for (size, v) in candidates {
        if v.len() <= cap(size) {
            for i in v {
                out[i] = AUTOCAST;
            }
        }
    }
}
