//! The sums behind every row of a profile: a phase's (or the measured steps', or the whole
//! trace's) kernel time by kernel and by class, its GEMM share, memory operations and breakdown,
//! laid out as its [`PhaseProfile`]. The work to sum comes from [`super::plan`]; nothing here
//! selects ranges.

use std::collections::HashMap;

use crate::kernels::class::KernelClass;
use crate::kernels::label::display_name;
use crate::model::trace::{Nanos, StrId};

use super::breakdown::Breakdown;
use super::{ClassShare, KernelShare, PhaseProfile};

pub(super) fn per_step(v: f64, steps: usize) -> Option<f64> {
    (steps > 0).then(|| v / steps as f64)
}

/// Range figures of a phase: absent for the whole-trace row.
pub(super) struct Ranged {
    /// Steps per process.
    pub(super) steps: usize,
    /// Step ranges of all processes: wall and projected time per step are means over them.
    pub(super) step_ranges: usize,
    pub(super) ranges: usize,
    pub(super) wall: Nanos,
    pub(super) proj: Nanos,
    pub(super) all_ranges: usize,
    pub(super) all_wall: Nanos,
}

/// What a kernel row groups: a kernel name, or a graph traced as a whole.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Item {
    Kernel(StrId),
    Graph(u64),
}

/// One item's figures: name, short name, class, total ns, launches.
pub(super) type ItemFigures = (String, String, KernelClass, i64, usize);

/// The sums of some GPU work: by item and class, and in all.
#[derive(Default)]
pub(super) struct Totals {
    pub(super) by_item: HashMap<Item, ItemFigures>,
    pub(super) by_class: HashMap<KernelClass, (i64, usize)>,
    pub(super) kernel_ns: i64,
    pub(super) gemm_ns: i64,
    pub(super) memcpy_ns: i64,
    pub(super) memset_ns: i64,
    /// Kernels and graph executions.
    pub(super) launches: usize,
}

impl Totals {
    /// Add `n` launches of `item` taking `d` ns in all; `figures` names a new item.
    pub(super) fn add(
        &mut self,
        item: Item,
        d: i64,
        n: usize,
        figures: impl FnOnce() -> (String, String, KernelClass),
    ) {
        // Sums saturate: a damaged file's extreme times give extreme figures, never an overflow.
        self.kernel_ns = self.kernel_ns.saturating_add(d);
        let e = self.by_item.entry(item).or_insert_with(|| {
            let (name, short, class) = figures();
            (name, short, class, 0, 0)
        });
        e.3 = e.3.saturating_add(d);
        e.4 += n;
        let class = e.2;
        let c = self.by_class.entry(class).or_default();
        c.0 = c.0.saturating_add(d);
        c.1 += n;
        if class == KernelClass::Gemm {
            self.gemm_ns = self.gemm_ns.saturating_add(d);
        }
        self.launches += n;
    }
}

/// A phase's profile from its totals.
pub(super) fn phase_profile(
    top: usize,
    name: &str,
    totals: Totals,
    ranged: Option<Ranged>,
    breakdown: Breakdown,
) -> PhaseProfile {
    let steps = ranged.as_ref().map_or(0, |r| r.steps);
    let Totals {
        by_item,
        by_class,
        kernel_ns,
        gemm_ns,
        memcpy_ns,
        memset_ns,
        launches,
    } = totals;
    let share = |ns: i64| {
        if kernel_ns > 0 {
            ns as f64 / kernel_ns as f64
        } else {
            0.0
        }
    };
    let mut names: Vec<ItemFigures> = by_item.into_values().collect();
    // Most time first; the name breaks ties so the order never depends on hashing.
    names.sort_by(|a, b| b.3.cmp(&a.3).then_with(|| a.0.cmp(&b.0)));
    let kernel_share = |(n, short, class, t, c): &ItemFigures| KernelShare {
        name: n.clone(),
        short_name: short.clone(),
        display_name: display_name(n, 80),
        class: *class,
        total_ns: *t,
        share: share(*t),
        instances: *c,
        instances_per_step: ranged.as_ref().and_then(|_| per_step(*c as f64, steps)),
    };
    let top_kernel = names.first().map(kernel_share);
    let top_non_gemm: Vec<KernelShare> = names
        .iter()
        .filter(|k| k.2 != KernelClass::Gemm)
        .take(top)
        .map(kernel_share)
        .collect();
    let mut classes: Vec<ClassShare> = by_class
        .into_iter()
        .map(|(class, (t, c))| ClassShare {
            class,
            total_ns: t,
            share: share(t),
            instances: c,
        })
        .collect();
    classes.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then(a.class.cmp(&b.class)));
    let per = |v: f64| ranged.as_ref().and_then(|_| per_step(v, steps));
    let per_range = |v: f64| ranged.as_ref().and_then(|r| per_step(v, r.step_ranges));
    PhaseProfile {
        name: name.to_owned(),
        steps,
        ranges: ranged.as_ref().map_or(0, |r| r.ranges),
        wall_ns_per_step: ranged.as_ref().and_then(|r| per_range(r.wall.as_f64())),
        gpu_proj_ns_per_step: ranged.as_ref().and_then(|r| per_range(r.proj.as_f64())),
        kernel_ns,
        kernel_ns_per_step: per(kernel_ns as f64),
        kernels: launches,
        gemm_ns,
        gemm_fraction: (kernel_ns > 0).then(|| gemm_ns as f64 / kernel_ns as f64),
        memcpy_ns,
        memset_ns,
        top_kernel,
        top_non_gemm,
        classes,
        all_ranges: ranged.as_ref().map_or(0, |r| r.all_ranges),
        all_wall_ns: ranged.as_ref().map_or(0, |r| r.all_wall.0),
        breakdown,
    }
}
