//! Per-step pass deltas: the forward, backward and optimizer passes (and the measured steps as a
//! whole) of two profiles side by side, per step: NVTX wall time, GPU kernel time, launches and
//! GEMM fraction. Per step, because two runs rarely measure the same number of steps.
//!
//! Built from two [`Profile`]s ([`crate::profile::profile`]), so the figures are those
//! `analyze profile` prints for each file. A pass is compared only when both profiles have it.

use serde::Serialize;

use crate::kernels::class::KernelClass;
use crate::profile::{PhaseProfile, Profile};

/// Above this share of a pass's GPU time in CUDA graphs traced without per-kernel detail, the
/// pass's kernels are mostly unknown: its GEMM fraction is not given.
pub const MOSTLY_UNTRACED: f64 = 0.5;

/// One pass of one profile, per measured step.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PassSide {
    pub steps: usize,
    pub wall_ns_per_step: Option<f64>,
    pub kernel_ns_per_step: Option<f64>,
    pub kernels_per_step: Option<f64>,
    /// GEMM kernel time over kernel time (0..1); `None` when most of the pass's time is in CUDA
    /// graphs traced without per-kernel detail (their kernels could be GEMMs or not).
    pub gemm_fraction: Option<f64>,
    /// Time in CUDA graphs traced without per-kernel detail over kernel time (0..1).
    pub untraced_graph_fraction: Option<f64>,
}

/// Time in CUDA graphs traced without per-kernel detail over a pass's kernel time (0..1);
/// `None` without kernel time.
pub fn untraced_graph_fraction(p: &PhaseProfile) -> Option<f64> {
    let graph_ns: i64 = p
        .classes
        .iter()
        .filter(|c| c.class == KernelClass::CudaGraph)
        .map(|c| c.total_ns)
        .sum();
    (p.kernel_ns > 0).then(|| graph_ns as f64 / p.kernel_ns as f64)
}

/// A pass's GEMM fraction, `None` when most of its time is in CUDA graphs traced without
/// per-kernel detail ([`MOSTLY_UNTRACED`]).
pub fn seen_gemm_fraction(p: &PhaseProfile) -> Option<f64> {
    let untraced = untraced_graph_fraction(p);
    p.gemm_fraction
        .filter(|_| untraced.is_none_or(|u| u <= MOSTLY_UNTRACED))
}

impl PassSide {
    fn of(p: &PhaseProfile) -> PassSide {
        PassSide {
            steps: p.steps,
            wall_ns_per_step: p.wall_ns_per_step,
            kernel_ns_per_step: p.kernel_ns_per_step,
            kernels_per_step: (p.steps > 0).then(|| p.kernels as f64 / p.steps as f64),
            gemm_fraction: seen_gemm_fraction(p),
            untraced_graph_fraction: untraced_graph_fraction(p),
        }
    }

    /// Whether most of the pass's time is in CUDA graphs traced without per-kernel detail.
    pub fn mostly_untraced(&self) -> bool {
        self.untraced_graph_fraction
            .is_some_and(|u| u > MOSTLY_UNTRACED)
    }
}

/// One pass in both profiles.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PassDelta {
    /// `forward`, `backward`, `optimizer` or `measured steps`.
    pub name: String,
    pub a: PassSide,
    pub b: PassSide,
}

fn sub(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    Some(b? - a?)
}

fn rel(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    let (a, b) = (a?, b?);
    (a != 0.0).then(|| (b - a) / a * 100.0)
}

impl PassDelta {
    /// B's kernel time per step minus A's (ns).
    pub fn kernel_delta_ns(&self) -> Option<f64> {
        sub(self.a.kernel_ns_per_step, self.b.kernel_ns_per_step)
    }
    pub fn kernel_delta_pct(&self) -> Option<f64> {
        rel(self.a.kernel_ns_per_step, self.b.kernel_ns_per_step)
    }
    /// B's wall time per step minus A's (ns).
    pub fn wall_delta_ns(&self) -> Option<f64> {
        sub(self.a.wall_ns_per_step, self.b.wall_ns_per_step)
    }
    pub fn wall_delta_pct(&self) -> Option<f64> {
        rel(self.a.wall_ns_per_step, self.b.wall_ns_per_step)
    }
    /// Change of the GEMM fraction in percentage points.
    pub fn gemm_delta_points(&self) -> Option<f64> {
        sub(self.a.gemm_fraction, self.b.gemm_fraction).map(|d| d * 100.0)
    }
}

/// The passes both profiles have, and their measured steps, sorted by the size of the change in
/// kernel time per step.
pub fn pass_deltas(a: &Profile, b: &Profile) -> Vec<PassDelta> {
    let mut rows: Vec<PassDelta> = a
        .phases
        .iter()
        .filter_map(|pa| {
            let pb = b.phases.iter().find(|p| p.name == pa.name)?;
            Some(PassDelta {
                name: pa.name.clone(),
                a: PassSide::of(pa),
                b: PassSide::of(pb),
            })
        })
        .collect();
    if let (Some(sa), Some(sb)) = (&a.step, &b.step) {
        rows.push(PassDelta {
            name: sa.name.clone(),
            a: PassSide::of(sa),
            b: PassSide::of(sb),
        });
    }
    rows.sort_by(|x, y| {
        let impact = |d: &PassDelta| d.kernel_delta_ns().map_or(0.0, f64::abs);
        impact(y)
            .total_cmp(&impact(x))
            .then_with(|| x.name.cmp(&y.name))
    });
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(kernel: f64, gemm: f64) -> PassSide {
        PassSide {
            steps: 2,
            wall_ns_per_step: Some(kernel * 2.0),
            kernel_ns_per_step: Some(kernel),
            kernels_per_step: Some(10.0),
            gemm_fraction: Some(gemm),
            untraced_graph_fraction: Some(0.0),
        }
    }

    #[test]
    fn deltas_are_b_minus_a() {
        let d = PassDelta {
            name: "forward".into(),
            a: side(100.0, 0.75),
            b: side(80.0, 0.25),
        };
        assert_eq!(d.kernel_delta_ns(), Some(-20.0));
        assert_eq!(d.kernel_delta_pct(), Some(-20.0));
        assert_eq!(d.wall_delta_ns(), Some(-40.0));
        assert_eq!(d.gemm_delta_points(), Some(-50.0));
    }
}
