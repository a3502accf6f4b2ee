//! Time per call: what a comparison says when the two traces did not run the same amount of
//! work.
//!
//! Two captures of one job over a fixed time window, or with fewer layers, steps or ranks, hold
//! different numbers of kernel launches. Their total kernel time then falls or rises with the
//! amount of work, not the speed: 10% fewer launches and a 41% slower communication kernel still
//! read as "kernel time fell". [`Work`] says whether the instance counts differ (in total, or
//! for any kernel the two traces share, by more than [`WORK_TOLERANCE_PCT`]); [`PerCall`] is
//! then the honest figure: each kernel's average time in B applied to A's instance counts,
//! summed over the kernels both traces ran, against A's time for them. The `--fail-if-slower`
//! gate judges that figure when the work differs ([`super::check_slower`]).
//!
//! Kernels only one trace ran have no per-call change; [`PerCall::coverage`] says how much of
//! A's kernel time the figure covers. Pure: data in, data out.

use serde::Serialize;

use super::{Comparison, Delta, Presence};

/// Instance counts that differ by more than this many percent mean different work.
pub const WORK_TOLERANCE_PCT: f64 = 2.0;

/// Whether two traces ran the same amount of work, as their kernel instance counts tell.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Work {
    pub a_instances: u64,
    pub b_instances: u64,
    /// Kernels that both traces ran.
    pub kernels_in_both: usize,
    /// Of those, the ones whose instance counts differ by more than [`WORK_TOLERANCE_PCT`].
    pub kernels_differing: usize,
    /// CUDA graph executions without per-kernel detail, in A and B together: each counts as
    /// one instance however many kernels it ran, so instance counts do not measure the work.
    pub untraced_graph_executions: u64,
}

/// `b` against `a` in percent; `None` when `a` is zero.
fn change_pct(a: f64, b: f64) -> Option<f64> {
    (a != 0.0).then(|| (b - a) / a * 100.0)
}

fn counts_differ(a: u64, b: u64) -> bool {
    match change_pct(a as f64, b as f64) {
        Some(p) => p.abs() > WORK_TOLERANCE_PCT,
        None => b > 0,
    }
}

impl Work {
    /// The change in total kernel instances, in percent of A's.
    pub fn instances_delta_pct(&self) -> Option<f64> {
        change_pct(self.a_instances as f64, self.b_instances as f64)
    }

    /// Total instances differ by more than the tolerance.
    pub fn total_differs(&self) -> bool {
        counts_differ(self.a_instances, self.b_instances)
    }

    /// The traces ran different amounts of work: total instances, or the instances of a kernel
    /// both ran, differ by more than the tolerance.
    pub fn differs(&self) -> bool {
        self.total_differs() || self.kernels_differing > 0
    }

    /// Whether instance counts measure the work: no CUDA graph ran without per-kernel detail.
    pub fn counts_measure_work(&self) -> bool {
        self.untraced_graph_executions == 0
    }
}

impl Delta {
    /// B's average minus A's, times A's instances: how much longer (ns) A's calls of this kernel
    /// would have taken at B's speed. `None` unless both traces ran it.
    pub fn per_call_delta_ns(&self) -> Option<f64> {
        let (a, b) = (self.a.average()?, self.b.average()?);
        Some((b - a) * self.a.instances as f64)
    }

    /// The change in average time per call, in percent of A's.
    pub fn per_call_delta_pct(&self) -> Option<f64> {
        change_pct(self.a.average()?, self.b.average()?)
    }
}

/// Kernel time per call, over the kernels both traces ran, weighted by A's instances.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PerCall {
    /// A's kernel time of the kernels both ran (ns).
    pub a_ns: f64,
    /// The same calls at B's average time per call (ns): Σ A's instances × B's average.
    pub b_ns: f64,
    /// Share (0..1) of A's whole kernel time that these kernels hold; `None` without kernels.
    pub coverage: Option<f64>,
    /// The kernels both ran, largest per-call rise first ([`Delta::per_call_delta_ns`]), falls
    /// last.
    pub kernels: Vec<Delta>,
}

impl PerCall {
    pub fn delta_ns(&self) -> f64 {
        self.b_ns - self.a_ns
    }

    /// The change in kernel time per call, in percent; `None` when A's calls took no time.
    pub fn delta_pct(&self) -> Option<f64> {
        change_pct(self.a_ns, self.b_ns)
    }
}

impl Comparison {
    /// How much work each trace ran.
    pub fn work(&self) -> Work {
        let both = self
            .kernels
            .iter()
            .filter(|d| d.presence() == Presence::Both);
        let (mut kernels_in_both, mut kernels_differing) = (0, 0);
        for d in both {
            kernels_in_both += 1;
            kernels_differing += usize::from(counts_differ(d.a.instances, d.b.instances));
        }
        Work {
            a_instances: self.a.kernel_instances,
            b_instances: self.b.kernel_instances,
            kernels_in_both,
            kernels_differing,
            untraced_graph_executions: self.a.untraced_graph_executions
                + self.b.untraced_graph_executions,
        }
    }

    /// Whether time per call leads the comparison and is what `--fail-if-slower` judges: the
    /// two traces ran different amounts of work, their instance counts measure it, and they
    /// share kernels to compare.
    pub fn per_call_leads(&self) -> bool {
        let w = self.work();
        w.differs() && w.counts_measure_work() && w.kernels_in_both > 0
    }

    /// Kernel time per call over the kernels both traces ran.
    pub fn per_call(&self) -> PerCall {
        let mut kernels: Vec<Delta> = self
            .kernels
            .iter()
            .filter(|d| d.presence() == Presence::Both)
            .cloned()
            .collect();
        kernels.sort_by(|x, y| {
            let impact = |d: &Delta| d.per_call_delta_ns().unwrap_or(0.0);
            impact(y)
                .total_cmp(&impact(x))
                .then_with(|| x.name.cmp(&y.name))
        });
        let a_ns: f64 = kernels.iter().map(|d| d.a.total.as_f64()).sum();
        let b_ns: f64 = kernels
            .iter()
            .map(|d| d.b.average().unwrap_or(0.0) * d.a.instances as f64)
            .sum();
        let whole = self.a.kernel_time.as_f64();
        PerCall {
            a_ns,
            b_ns,
            coverage: (whole > 0.0).then(|| a_ns / whole),
            kernels,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::{Side, TraceSummary};
    use crate::model::trace::{Nanos, SourceFormat};

    fn delta(name: &str, a: (u64, i64), b: (u64, i64)) -> Delta {
        Delta {
            name: name.into(),
            class: "other".into(),
            a: Side {
                instances: a.0,
                total: Nanos(a.1),
            },
            b: Side {
                instances: b.0,
                total: Nanos(b.1),
            },
        }
    }

    fn comparison(kernels: Vec<Delta>) -> Comparison {
        let side = |f: fn(&Delta) -> &Side| TraceSummary {
            path: String::new(),
            format: SourceFormat::Kineto,
            kernel_time: Nanos(kernels.iter().map(|d| f(d).total.0).sum()),
            kernel_instances: kernels.iter().map(|d| f(d).instances).sum(),
            distinct_kernels: kernels.iter().filter(|d| f(d).instances > 0).count(),
            untraced_graph_executions: 0,
            untraced_graph_time: Nanos(0),
        };
        Comparison {
            a: side(|d| &d.a),
            b: side(|d| &d.b),
            kernels,
            families: Vec::new(),
            classes: Vec::new(),
            phases: Vec::new(),
            passes: Vec::new(),
            gemm_fraction: None,
        }
    }

    #[test]
    fn fewer_calls_at_the_same_speed_is_no_change_per_call() {
        // B ran 10% fewer GEMMs, each as fast; its communication kernel got 41% slower.
        let c = comparison(vec![
            delta("gemm", (1000, 1_000_000), (900, 900_000)),
            delta("allreduce", (100, 100_000), (90, 126_900)),
        ]);
        assert!(c.kernel_time_delta_pct().unwrap() < 0.0, "total time fell");
        let w = c.work();
        assert!(w.total_differs() && w.differs());
        assert_eq!((w.kernels_in_both, w.kernels_differing), (2, 2));
        let p = c.per_call();
        assert_eq!(
            p.kernels[0].name, "allreduce",
            "largest per-call rise first"
        );
        assert!((p.kernels[0].per_call_delta_pct().unwrap() - 41.0).abs() < 1e-9);
        assert!((p.delta_ns() - 41_000.0).abs() < 1e-6);
        assert!((p.delta_pct().unwrap() - 41_000.0 / 1_100_000.0 * 100.0).abs() < 1e-9);
        assert_eq!(p.coverage, Some(1.0));
    }

    #[test]
    fn counts_within_two_percent_are_the_same_work() {
        let c = comparison(vec![
            delta("a", (1000, 1000), (1019, 1019)),
            delta("gone", (1, 5), (0, 0)),
            delta("new", (0, 0), (1, 5)),
        ]);
        let w = c.work();
        assert_eq!((w.kernels_in_both, w.kernels_differing), (1, 0));
        assert!(!w.differs());
        let c = comparison(vec![delta("a", (1000, 1000), (1021, 1021))]);
        assert!(c.work().differs());
        let p = c.per_call();
        assert_eq!(p.delta_ns(), 0.0);
    }
}
