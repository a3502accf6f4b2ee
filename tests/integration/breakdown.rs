//! Where GPU time goes, on every trace fixture (the project's and, when present, the shared
//! ones): for each measured step on each device, and for every phase and the whole trace, the
//! parts (compute, exposed communication, memcpy, memset, graph, idle) add up to the span; on a
//! single device the steps' spans are the GPU projections `profile` reports beside them.

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
            steps_checked += 1;
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
