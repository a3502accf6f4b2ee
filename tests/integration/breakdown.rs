//! Where GPU time goes, on every trace fixture (the project's and, when present, the shared
//! ones): for each measured step on each device, and for every phase and the whole trace, the
//! parts (compute, exposed communication, memcpy, memset, graph, other steps' work, idle) add up
//! to the span; a step's busy parts never exceed its own kernels' time, nor the steps' the
//! trace's; no idle gap is listed twice; on a single device the steps' spans are the GPU
//! projections `profile` reports beside them. And on a capture whose steps overlap on the GPU,
//! each step holds its own work only.

use crate::common;

use std::path::PathBuf;

use analyze::formats;
use analyze::kernels::class::Classifier;
use analyze::profile::breakdown::Breakdown;
use analyze::profile::{self, ProfileOptions};

fn traces() -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut add = |dir: PathBuf, ends: &[&str]| {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return;
        };
        let mut files: Vec<PathBuf> = entries
            .map(|e| e.unwrap().path())
            .filter(|p| {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                ends.iter().any(|e| name.ends_with(e))
            })
            .collect();
        files.sort();
        out.extend(files);
    };
    for dir in ["nsys", "collect", "captures"] {
        add(common::fixture(dir), &[".sqlite.gz"]);
    }
    add(common::fixture("kineto"), &[".json.gz"]);
    for (dir, ends) in [
        ("ours/nsys", &[".sqlite"][..]),
        ("ours/large", &[".sqlite.gz"][..]),
        ("public/nsys", &[".sqlite"][..]),
        ("public/kineto", &[".json.gz"][..]),
    ] {
        if let Some(d) = common::shared(dir) {
            add(d, ends);
        }
    }
    out
}

fn check(what: &str, b: &Breakdown) {
    let parts = b.parts_ns();
    assert!(b.span_ns >= 0, "{what}: {b:?}");
    assert!(
        (parts - b.span_ns).abs() as f64 <= b.span_ns as f64 * 0.001,
        "{what}: parts {parts} ns vs span {} ns",
        b.span_ns
    );
    assert_eq!(parts, b.span_ns, "{what}: the partition is exact");
    assert!(
        b.exposed_communication_ns <= b.communication_ns,
        "{what}: {b:?}"
    );
}

#[test]
fn the_parts_add_up_to_the_span_of_every_step_on_every_device_of_every_fixture() {
    let classifier = Classifier::builtin();
    let mut steps_checked = 0;
    let mut files = 0;
    for path in traces() {
        let trace = formats::load_trace(&path).unwrap();
        if profile::check_profilable(&trace).is_err() {
            continue;
        }
        files += 1;
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let p = profile::profile(&trace, &classifier, &ProfileOptions::default());
        for s in &p.step_breakdown {
            check(
                &format!("{name} {} device {}", s.step, s.device),
                &s.breakdown,
            );
            assert!(s.breakdown.span_ns > 0, "{name} {}", s.step);
            // The time its own kernels and graphs ran, as a union, is at most their sum.
            let b = &s.breakdown;
            let busy = b.compute_ns + b.graph_ns + b.exposed_communication_ns;
            assert!(busy <= s.kernel_ns, "{name} {}: {b:?}", s.step);
            steps_checked += 1;
        }
        // Each op is in one step at most: the steps' kernels are some of the trace's.
        let in_steps: i64 = p.step_breakdown.iter().map(|s| s.kernel_ns).sum();
        assert!(
            in_steps <= p.whole_trace.kernel_ns,
            "{name}: {in_steps} ns in steps"
        );
        let mut gaps: Vec<(u32, i64, i64)> = (p.idle_gaps.iter())
            .map(|g| (g.device, g.start_ns, g.start_ns + g.idle_ns))
            .collect();
        gaps.sort_unstable();
        for pair in gaps.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            assert!(
                a.0 != b.0 || a.2 <= b.1,
                "{name}: gaps {a:?} and {b:?} overlap"
            );
        }
        for f in p.phases.iter().chain(p.step.iter()) {
            check(&format!("{name} {}", f.name), &f.breakdown);
        }
        check(&format!("{name} whole trace"), &p.whole_trace.breakdown);
        for d in &p.devices {
            assert!(d.idle_ns + d.compute_ns <= d.span_ns, "{name}: {d:?}");
        }
        // On one device a step's span is its GPU projection.
        if let (Some(step), 1) = (&p.step, p.devices.len()) {
            let spans: i64 = p.step_breakdown.iter().map(|s| s.breakdown.span_ns).sum();
            let proj = step.gpu_proj_ns_per_step.unwrap() * step.ranges as f64;
            assert!(
                (spans as f64 - proj).abs() < 1.0,
                "{name}: {spans} vs {proj}"
            );
        }
        println!(
            "{name}: {} step spans, measured steps {:?}",
            p.step_breakdown.len(),
            p.step.as_ref().map(|s| &s.breakdown)
        );
    }
    assert!(files >= 11, "{files} traces");
    assert!(steps_checked >= 27, "{steps_checked} step spans");
}

/// A capture whose steps enqueue more work than the GPU finishes before the next step begins
/// (`scripts/reference/torch_captures.py overlap`): each step's span on the GPU overlaps the next.
/// Each step's compute is its own kernels' time (they run one at a time on one stream), the rest
/// of its span where other steps ran is `other_work_ns`, and the steps' compute adds up to the
/// kernels of the measured steps.
#[test]
fn overlapping_steps_each_count_their_own_work() {
    let path = common::fixture("captures/torch_overlap_small_l4_ctx128_train_fp32.sqlite.gz");
    let trace = formats::load_trace(&path).unwrap();
    let p = profile::profile(&trace, &Classifier::builtin(), &ProfileOptions::default());
    let steps = &p.step_breakdown;
    assert_eq!(steps.len(), 4);
    let overlapping = steps
        .windows(2)
        .filter(|w| w[1].start_ns < w[0].start_ns + w[0].breakdown.span_ns)
        .count();
    assert_eq!(overlapping, 3, "the fixture's step spans overlap");
    for (i, s) in steps.iter().enumerate() {
        let b = &s.breakdown;
        assert_eq!(b.compute_ns, s.kernel_ns, "{}: {b:?}", s.step);
        assert_eq!(b.other_work_ns > 0, i > 0, "{}: {b:?}", s.step);
    }
    let step = p.step.as_ref().unwrap();
    let compute: i64 = steps.iter().map(|s| s.breakdown.compute_ns).sum();
    assert_eq!(step.breakdown.compute_ns, compute);
    assert_eq!(compute as f64, step.kernel_ns_per_step.unwrap() * 4.0);
    assert!(compute < p.whole_trace.breakdown.compute_ns);
}
