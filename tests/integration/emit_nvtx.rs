//! PyTorch's `emit_nvtx` labels (`aten::conv2d, seq = 0`, `aten::mm, op_id = 123`) group under
//! their operator name in `profile` and `compare`, with the labels as recorded kept in JSON. Read
//! from the DLProf export of the shared public fixtures (`aten::*, seq = N` ranges).

use crate::common;

use std::process::Command;

use analyze::formats;
use analyze::kernels::class::Classifier;
use analyze::profile::{self, ProfileOptions};
use serde_json::Value;

fn dlprof() -> Option<std::path::PathBuf> {
    common::shared("public/nsys").map(|d| d.join("dlprof-dummy__nsys_profile.sqlite"))
}

#[test]
#[cfg_attr(
    no_shared_public,
    ignore = "needs ../shared/fixtures/public beside the checkout"
)]
fn a_phase_named_by_its_operator_gathers_every_call() {
    let Some(path) = dlprof() else { return };
    let trace = formats::load_trace(&path).unwrap();
    let raw = trace
        .ranges
        .iter()
        .filter(|r| trace.name(r.name).starts_with("aten::conv2d, seq = "))
        .count();
    assert_eq!(raw, 2);
    let opts = ProfileOptions {
        phases: vec!["aten::conv2d".into()],
        ..ProfileOptions::default()
    };
    let p = profile::profile(&trace, &Classifier::builtin(), &opts);
    let conv = &p.phases[0];
    assert_eq!(conv.name, "aten::conv2d");
    assert_eq!(
        conv.ranges, 2,
        "both calls, whatever their sequence numbers"
    );
    assert!(conv.kernels > 0);
    // The hint lists operators, not one-off labels.
    let missing = ProfileOptions {
        phases: vec!["forward".into()],
        ..ProfileOptions::default()
    };
    let p = profile::profile(&trace, &Classifier::builtin(), &missing);
    let hint = p
        .notes
        .iter()
        .find(|n| n.starts_with("ranges in this trace"))
        .unwrap();
    assert!(!hint.contains("seq ="), "{hint}");
}

#[test]
#[cfg_attr(
    no_shared_public,
    ignore = "needs ../shared/fixtures/public beside the checkout"
)]
fn compare_pairs_ranges_by_operator_and_keeps_the_labels_as_recorded() {
    let Some(path) = dlprof() else { return };
    let p = path.display().to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_analyze"))
        .args(["compare", &p, &p, "-f", "json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let phases = v["phases"].as_array().unwrap();
    assert!(phases
        .iter()
        .all(|r| !r["range"].as_str().unwrap().contains("seq =")));
    let conv = phases
        .iter()
        .find(|r| r["range"] == ":aten::conv2d")
        .unwrap();
    assert_eq!(conv["a"]["instances"], 2);
    assert_eq!(conv["raw_label_count"], 2);
    let raw: Vec<&str> = conv["raw_labels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    assert_eq!(raw, [":aten::conv2d, seq = 0", ":aten::conv2d, seq = 3"]);
    let plain = phases
        .iter()
        .find(|r| r["range"] == ":aten::empty")
        .unwrap();
    assert_eq!(
        plain["raw_label_count"], 0,
        "a label without numbers is as recorded"
    );
}
