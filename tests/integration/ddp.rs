//! Two GPUs, two processes: a DDP training run in one Nsight Systems export, where rank 1 spins
//! about 20 ms per step so that rank 0 waits for it inside NCCL's all-reduce. Per-device figures
//! are checked against plain SQL grouped by `deviceId`, steps are counted per process, NCCL
//! kernels are communication and the slower rank is named.

use crate::common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use analyze::formats;
use analyze::kernels::class::{Classifier, KernelClass};
use analyze::profile::{self, Profile, ProfileOptions};
use rusqlite::Connection;
use serde_json::Value;

const DDP: &str = "captures/torch_ddp2_small_l4_ctx128_train_fp32.sqlite.gz";

fn run() -> Profile {
    let trace = formats::load_trace(&common::fixture(DDP)).unwrap();
    profile::profile(&trace, &Classifier::builtin(), &ProfileOptions::default())
}

fn unpacked() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = common::unpacked(DDP, dir.path(), "ddp.sqlite");
    (dir, path)
}

/// deviceId -> (process, kernels, total ns, NCCL kernel ns), by plain SQL.
fn by_device() -> BTreeMap<u32, (u32, i64, i64, i64)> {
    let (_dir, db) = unpacked();
    let conn = Connection::open(&db).unwrap();
    let mut stmt = conn
        .prepare(
            "SELECT k.deviceId, (k.globalPid >> 24) & 16777215, COUNT(*), SUM(k.end - k.start),
                    SUM(CASE WHEN s.value LIKE 'nccl%' THEN k.end - k.start ELSE 0 END)
             FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName
             GROUP BY k.deviceId, k.globalPid",
        )
        .unwrap();
    let rows = stmt
        .query_map([], |r| {
            Ok((r.get(0)?, (r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
        })
        .unwrap();
    rows.map(Result::unwrap).collect()
}

#[test]
fn per_device_kernel_totals_equal_plain_sql_grouped_by_device() {
    let p = run();
    let sql = by_device();
    assert_eq!(sql.len(), 2, "two devices, one process each");
    assert_eq!(p.devices.len(), 2);
    for d in &p.devices {
        let (pid, kernels, total, nccl) = sql[&d.device];
        println!(
            "device {} (process {}): {} kernels, {} ns, NCCL {} ns",
            d.device, d.process, d.kernels, d.kernel_ns, d.communication_ns
        );
        assert_eq!(d.process, pid);
        assert_eq!(d.kernels as i64, kernels);
        assert_eq!(d.kernel_ns, total);
        // Every NCCL kernel is communication, and communication is NCCL's kernels.
        assert_eq!(d.communication_ns, nccl);
    }
}

#[test]
fn steps_are_counted_per_process_and_the_slower_rank_is_named() {
    let p = run();
    assert_eq!(p.measured_steps, 3, "each rank ran 3 steps");
    for f in p.phases.iter().chain(p.step.iter()) {
        assert_eq!(f.steps, 3, "{}", f.name);
    }
    for d in &p.devices {
        assert_eq!(d.steps, 3, "device {}", d.device);
    }
    // Rank 1 (device 1) spins in every step: the most compute per step, the one rank 0 waits
    // for, its wait showing as rank 0's communication.
    let slowest: Vec<_> = p.devices.iter().filter(|d| d.slowest).collect();
    assert_eq!(slowest.len(), 1);
    assert_eq!(slowest[0].device, 1);
    let (r0, r1) = (&p.devices[0], &p.devices[1]);
    let (s0, s1) = (r0.per_step.unwrap(), r1.per_step.unwrap());
    assert!(s1.compute_ns > 2.0 * s0.compute_ns, "{s0:?} {s1:?}");
    assert!(
        s0.exposed_communication_ns > 10.0 * s1.exposed_communication_ns,
        "{s0:?} {s1:?}"
    );
    // Per-step kernel figures add up both processes' work.
    let step = p.step.as_ref().unwrap();
    let per_step: f64 = p
        .devices
        .iter()
        .map(|d| d.per_step.unwrap().kernel_ns)
        .sum();
    assert!((step.kernel_ns_per_step.unwrap() - per_step).abs() < 1.0);
    assert!(p.notes.iter().any(|n| n.starts_with("2 processes")));
}

#[test]
fn nccl_kernels_are_communication() {
    let trace = formats::load_trace(&common::fixture(DDP)).unwrap();
    let c = Classifier::builtin();
    let mut nccl = 0;
    for k in &trace.kernels {
        let name = trace.name(k.name);
        if name.starts_with("nccl") {
            nccl += 1;
            assert_eq!(c.classify(name), KernelClass::Communication, "{name}");
        }
    }
    assert!(nccl > 50, "{nccl} NCCL kernels");
    let p = run();
    let backward = p.phases.iter().find(|f| f.name == "backward").unwrap();
    let top = backward.top_kernel.as_ref().unwrap();
    assert_eq!(top.class, KernelClass::Communication);
    assert!(backward.breakdown.exposed_communication_ns > 0);
}

#[test]
fn device_and_process_filters_keep_one_rank() {
    let f = common::fixture(DDP).display().to_string();
    let json = |args: &[&str]| -> Value {
        let mut all = vec!["profile", f.as_str(), "-f", "json"];
        all.extend_from_slice(args);
        let out = common::analyze(&all);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let sql = by_device();
    for (device, (pid, _, total, _)) in &sql {
        for args in [
            vec!["--device".to_owned(), device.to_string()],
            vec!["--process".to_owned(), pid.to_string()],
        ] {
            let a: Vec<&str> = args.iter().map(String::as_str).collect();
            let v = json(&a);
            let devices = v["devices"].as_array().unwrap();
            assert_eq!(devices.len(), 1, "{args:?}");
            assert_eq!(devices[0]["device"], *device);
            assert_eq!(devices[0]["kernel_ns"], *total);
            assert_eq!(v["whole_trace"]["kernel_ns"], *total);
            assert_eq!(v["measured_steps"], 3);
        }
    }
    let out = common::analyze(&["profile", &f, "--device", "7"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("devices in this trace: 0, 1"), "{err}");
}

#[test]
fn the_table_and_the_report_name_the_slowest_rank() {
    let f = common::fixture(DDP);
    let out = common::analyze(&["profile", f.to_str().unwrap()]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("Per device and process"), "{text}");
    assert!(text.contains("Slowest: device 1 (process 646)"), "{text}");

    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    let o = common::analyze(&[
        "report",
        "-q",
        "--no-plots",
        "-o",
        out_dir.to_str().unwrap(),
        f.to_str().unwrap(),
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let md = std::fs::read_to_string(out_dir.join("report.md")).unwrap();
    assert!(md.contains("## Where GPU time goes"), "{md}");
    assert!(md.contains("### Per device and process"), "{md}");
    assert!(
        md.contains("the slowest rank is device 1 (process 646)"),
        "{md}"
    );
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("report.json")).unwrap())
            .unwrap();
    let text = v.to_string();
    assert!(
        text.contains("\"gpu_time\""),
        "the section has its id in report.json"
    );
}

/// The arrival rule by plain SQL: each device's NCCL kernel starts inside its measured steps (the
/// windows the profile gives each step on each device), matched in order; each collective's
/// waiting is the last start minus every earlier one.
#[test]
fn straggler_waits_equal_the_arrival_rule_by_plain_sql() {
    let p = run();
    let (_dir, db) = unpacked();
    let conn = Connection::open(&db).unwrap();
    let mut stmt = conn
        .prepare(
            "SELECT k.deviceId, k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k
             JOIN StringIds s ON s.id = k.demangledName
             WHERE s.value LIKE 'nccl%' ORDER BY k.start",
        )
        .unwrap();
    let mut arrivals: BTreeMap<u32, Vec<i64>> = BTreeMap::new();
    for row in stmt
        .query_map([], |r| Ok((r.get::<_, u32>(0)?, r.get::<_, i64>(1)?)))
        .unwrap()
    {
        let (device, start) = row.unwrap();
        let inside = p.step_breakdown.iter().any(|s| {
            s.device == device && (s.start_ns..=s.start_ns + s.breakdown.span_ns).contains(&start)
        });
        if inside {
            arrivals.entry(device).or_default().push(start);
        }
    }
    let n = arrivals.values().map(Vec::len).min().unwrap();
    assert!(n > 0, "collectives inside the steps");
    let mut waited: BTreeMap<u32, i64> = BTreeMap::new();
    for k in 0..n {
        let last = arrivals.values().map(|a| a[k]).max().unwrap();
        for (d, a) in &arrivals {
            *waited.entry(*d).or_default() += last - a[k];
        }
    }
    println!(
        "waited by device (SQL): {waited:?}; straggler: {:?}",
        p.straggler
    );
    for d in &p.devices {
        assert_eq!(d.waited_ns, waited[&d.device], "device {}", d.device);
    }
    let s = p.straggler.as_ref().expect("the spinning rank stands out");
    assert_eq!((s.device, s.process), (1, 646));
    let others: i64 = waited.iter().filter(|w| *w.0 != 1).map(|w| *w.1).sum();
    assert_eq!(s.wait_caused_ns, others);
    assert_eq!(p.measured_steps, 3);
    let per_step = s.wait_caused_ns_per_step.unwrap();
    assert!((per_step - others as f64 / 3.0).abs() < 1e-6);
}
