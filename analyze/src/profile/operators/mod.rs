//! The operator view (`analyze profile --by op`): the kernel time of the measured steps (and of
//! each phase) per PyTorch operator, and where each operator stands under the GPU's roofs.
//!
//! Each launch call's operator call is found once, as the API calls are read
//! ([`crate::attribution::operators`]), and travels in the call's launch context; each kernel (and
//! each CUDA graph traced as a whole) is then summed, in the same pass as every other figure of
//! the profile, under the signature of its operator call (its operator, shapes, types and scalar
//! inputs) or as unattributed (`OpChunk`). Sums are kept per signature, not per call; a chunk
//! also lists the calls it met, so that a call whose kernels two chunks share counts once. The
//! cost of each signature ([`crate::roofline::flops`]) is reckoned once, at the end, and times the
//! calls that share it.
//!
//! Per operator over the measured steps (the whole trace without steps): calls that launched
//! work, kernels, their GPU time, the shapes seen, FLOPs and bytes, achieved TFLOP/s and TB/s,
//! intensity, the roof that bounds it and the fraction of it reached; per phase, calls,
//! kernels and time; per top-level operator, calls, kernels and time. The operators' times and
//! the unattributed time add up to the steps' kernel time exactly.

use crate::attribution::operators::{Operators, NONE};

use super::plan::What;

mod view;

pub(super) use self::view::{default_dtype, without_operators, ViewInputs};
pub use self::view::{DevicePeak, OperatorRow, OperatorView, PhaseOps, ShapeRow, TopLevelRow};

/// Kernels and their time.
#[derive(Clone, Copy, Debug, Default)]
struct Sum {
    kernels: usize,
    ns: i64,
    /// Of which kernels that ran FP32 products on tensor cores (TF32).
    tf32_ns: i64,
}

impl Sum {
    fn add(&mut self, d: i64, tf32: bool) {
        self.kernels += 1;
        self.ns = self.ns.saturating_add(d);
        if tf32 {
            self.tf32_ns = self.tf32_ns.saturating_add(d);
        }
    }

    fn merge(&mut self, o: &Sum) {
        self.kernels += o.kernels;
        self.ns = self.ns.saturating_add(o.ns);
        self.tf32_ns = self.tf32_ns.saturating_add(o.tf32_ns);
    }
}

/// The sums of one view (the measured steps, or one phase) in one chunk.
#[derive(Clone, Default)]
struct ViewChunk {
    by_signature: Vec<Sum>,
    /// The calls met, a call met twice in a row once.
    calls: Vec<u32>,
    unattributed: Sum,
}

/// The operator sums of one chunk of kernel rows.
#[derive(Default)]
pub(super) struct OpChunk {
    /// Per kernel id of the chunk, once its name was read: whether it ran FP32 products on
    /// tensor cores.
    pub(super) tf32: Vec<bool>,
    /// The measured steps' (or the whole trace's) sums, then each phase's.
    views: Vec<ViewChunk>,
    /// Per top-level operator name, in the measured steps.
    top: Vec<Sum>,
}

/// Whether a kernel name says it computes FP32 products on tensor cores: cuBLAS's `tf32`
/// kernels, CUTLASS's `tensorop_s1688`/`s16816` (TF32) kernels.
pub(super) fn runs_tf32(name: &str) -> bool {
    name.contains("tf32") || name.contains("tensorop_s1688") || name.contains("tensorop_s16816")
}

/// The operator calls and which launch context holds which.
pub(super) struct OpPlan {
    pub(super) ops: Operators,
    /// The operator call of each launch context, or [`NONE`].
    pub(super) of_ctx: Vec<u32>,
    /// Each selection's view (1 + its position among the phases), where it is a phase.
    pub(super) view_of_selection: Vec<Option<usize>>,
    pub(super) views: usize,
}

impl OpPlan {
    /// Note in `views` the view of selection `s`, which claimed a piece of work: 0 for the
    /// measured steps (selection `steps`), a phase's own.
    #[inline]
    pub(super) fn claimed(&self, views: &mut Vec<usize>, s: usize, steps: Option<usize>) {
        if Some(s) == steps {
            views.push(0);
        } else if let Some(v) = self.view_of_selection[s] {
            views.push(v);
        }
    }

    /// Sum a piece of work of `d` ns, launched by a call of one of `contexts`, in `views`:
    /// kernels and graphs traced as a whole (what kernel time counts), not memory operations.
    pub(super) fn work(
        &self,
        c: &mut OpChunk,
        views: &mut [usize],
        contexts: &[u32],
        what: What,
        d: i64,
    ) {
        let tf32 = match what {
            What::Kernel(kid, _) => c.tf32.get(kid as usize).copied(),
            What::Graph(_) => Some(false),
            What::MemOp(_) => None,
        };
        let Some(tf32) = tf32.filter(|_| !views.is_empty()) else {
            return;
        };
        let call = (contexts.iter())
            .map(|&ctx| self.of_ctx[ctx as usize])
            .find(|&op| op != NONE)
            .unwrap_or(NONE);
        views.sort_unstable();
        self.add(c, call, views, d, tf32);
    }

    /// Add `d` ns of work launched by `call` (or by no operator, [`NONE`]) to `views` (0, the
    /// measured steps, and each phase's) of chunk `c`.
    fn add(&self, c: &mut OpChunk, call: u32, views: &[usize], d: i64, tf32: bool) {
        if c.views.len() < self.views {
            c.views.resize_with(self.views, ViewChunk::default);
        }
        let signature = (call != NONE).then(|| self.ops.calls[call as usize].signature as usize);
        for &v in views {
            let view = &mut c.views[v];
            match signature {
                None => view.unattributed.add(d, tf32),
                Some(s) => {
                    if view.by_signature.len() <= s {
                        view.by_signature.resize(s + 1, Sum::default());
                    }
                    view.by_signature[s].add(d, tf32);
                    if view.calls.last() != Some(&call) {
                        view.calls.push(call);
                    }
                }
            }
        }
        if let (Some(_), Some(0)) = (signature, views.first()) {
            let top = self.ops.calls[call as usize].top as usize;
            let name = self.ops.signatures[self.ops.calls[top].signature as usize].name as usize;
            if c.top.len() <= name {
                c.top.resize(name + 1, Sum::default());
            }
            c.top[name].add(d, tf32);
        }
    }
}

/// The chunks' sums together, each view's calls as a set.
pub(super) struct OpTotals {
    views: Vec<MergedView>,
    top: Vec<Sum>,
}

struct MergedView {
    by_signature: Vec<Sum>,
    /// A bit per call met.
    calls: Vec<u64>,
    unattributed: Sum,
}

impl OpTotals {
    pub(super) fn new(plan: &OpPlan, chunks: impl Iterator<Item = OpChunk>) -> OpTotals {
        let words = plan.ops.calls.len().div_ceil(64);
        let mut views: Vec<MergedView> = (0..plan.views)
            .map(|_| MergedView {
                by_signature: vec![Sum::default(); plan.ops.signatures.len()],
                calls: vec![0; words],
                unattributed: Sum::default(),
            })
            .collect();
        let mut top = vec![Sum::default(); plan.ops.names.len()];
        for c in chunks {
            for (into, v) in views.iter_mut().zip(c.views) {
                for (s, sum) in v.by_signature.iter().enumerate() {
                    into.by_signature[s].merge(sum);
                }
                for call in v.calls {
                    into.calls[call as usize / 64] |= 1 << (call % 64);
                }
                into.unattributed.merge(&v.unattributed);
            }
            for (n, sum) in c.top.iter().enumerate() {
                top[n].merge(sum);
            }
        }
        OpTotals { views, top }
    }
}

#[cfg(test)]
mod tests;
