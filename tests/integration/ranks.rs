//! One file per rank, read as one run: a two-GPU DDP run (the small model cut to 4 layers, ctx 512,
//! batch 8) captured per rank by nsys and by torch.profiler, once with rank 0 spinning about 30 ms
//! per step (a planted straggler) and once without. Per-rank kernel totals are checked against
//! plain SQL and JSON sums per file, the waits against the arrival rule computed by hand over the
//! same files on one timeline (each export's session start), and the verdicts against the plant.

use crate::common;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use analyze::kernels::class::Classifier;
use analyze::profile::{self, Profile, ProfileOptions};
use rusqlite::Connection;
use serde_json::Value;

const NSYS_SLOW: &str = "ranks/nsys_slow0_30ms";
const NSYS_EVEN: &str = "ranks/nsys_even";
const KINETO_SLOW: &str = "ranks/kineto_slow0_30ms";
const KINETO_EVEN: &str = "ranks/kineto_even";

fn run(folder: &str) -> Profile {
    profile::profile_files(
        &[common::fixture(folder)],
        &Classifier::builtin(),
        &ProfileOptions::default(),
    )
    .unwrap()
}

/// The folder's files, rank 0 first.
fn files(folder: &str) -> Vec<PathBuf> {
    let mut f: Vec<PathBuf> = std::fs::read_dir(common::fixture(folder))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    f.sort();
    f
}

/// Per rank file, by plain SQL: (session start, kernels, kernel ns, NCCL kernel starts).
fn nsys_by_sql(folder: &str) -> Vec<(i64, i64, i64, Vec<i64>)> {
    let dir = tempfile::tempdir().unwrap();
    files(folder)
        .iter()
        .enumerate()
        .map(|(i, path)| {
            let rel = path.strip_prefix(common::fixture("")).unwrap();
            let db = common::unpacked(rel.to_str().unwrap(), dir.path(), &format!("r{i}.sqlite"));
            let conn = Connection::open(db).unwrap();
            let origin: i64 = conn
                .query_row(
                    "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME",
                    [],
                    |r| r.get(0),
                )
                .unwrap();
            let (n, ns): (i64, i64) = conn
                .query_row(
                    "SELECT COUNT(*), SUM(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL",
                    [],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .unwrap();
            let mut stmt = conn
                .prepare(
                    "SELECT k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k
                     JOIN StringIds s ON s.id = k.demangledName
                     WHERE s.value LIKE 'nccl%' ORDER BY k.start",
                )
                .unwrap();
            let starts = stmt
                .query_map([], |r| r.get(0))
                .unwrap()
                .map(Result::unwrap)
                .collect();
            (origin, n, ns, starts)
        })
        .collect()
}

/// The arrival rule by hand: per rank, the starts of its collectives (on one timeline) inside
/// its measured steps' windows on its device, matched in order; each collective's waiting is
/// the last start minus every earlier one. Returns (waited, caused) per rank.
fn arrival_rule(p: &Profile, starts: &[Vec<i64>]) -> Vec<(i64, i64)> {
    let inside: Vec<Vec<i64>> = starts
        .iter()
        .enumerate()
        .map(|(rank, s)| {
            let device = p
                .ranks
                .iter()
                .find(|r| r.rank == rank as u32)
                .unwrap()
                .device;
            s.iter()
                .copied()
                .filter(|&t| {
                    p.step_breakdown.iter().any(|b| {
                        b.device == device
                            && (b.start_ns..=b.start_ns + b.breakdown.span_ns).contains(&t)
                    })
                })
                .collect()
        })
        .collect();
    let n = inside.iter().map(Vec::len).min().unwrap();
    assert!(n > 0, "collectives inside the steps");
    let mut out = vec![(0, 0); starts.len()];
    for k in 0..n {
        let (last, at) = inside
            .iter()
            .enumerate()
            .map(|(r, a)| (r, a[k]))
            .max_by_key(|&(r, t)| (t, std::cmp::Reverse(r)))
            .unwrap();
        for (r, a) in inside.iter().enumerate() {
            out[r].0 += at - a[k];
            out[last].1 += at - a[k];
        }
    }
    out
}

#[test]
fn per_rank_kernel_totals_and_clock_offsets_equal_plain_sql_per_file() {
    let p = run(NSYS_SLOW);
    let sql = nsys_by_sql(NSYS_SLOW);
    assert_eq!(p.ranks.len(), 2);
    for (rank, (origin, n, ns, _)) in sql.iter().enumerate() {
        let r = p.ranks.iter().find(|r| r.rank == rank as u32).unwrap();
        assert_eq!(r.kernel_ns, *ns, "rank {rank}");
        assert_eq!(r.device, rank as u32, "rank {rank}");
        assert_eq!(p.clock_offsets_ns[&(rank as u32)], origin - sql[0].0);
        assert!(*n > 0);
    }
    // Ranks come from the RANK each export recorded.
    assert!(p
        .ranks
        .iter()
        .all(|r| r.rank_from == analyze::source::many::RankFrom::Metadata));
}

#[test]
fn the_planted_straggler_is_named_with_the_waits_of_the_arrival_rule() {
    let p = run(NSYS_SLOW);
    let sql = nsys_by_sql(NSYS_SLOW);
    let on_one_timeline: Vec<Vec<i64>> = sql
        .iter()
        .map(|(origin, _, _, s)| s.iter().map(|t| t + origin - sql[0].0).collect())
        .collect();
    let rule = arrival_rule(&p, &on_one_timeline);
    println!("(waited, caused) per rank by hand: {rule:?}");
    for r in &p.ranks {
        assert_eq!((r.waited_ns, r.wait_caused_ns), rule[r.rank as usize]);
    }
    let s = p.straggler.as_ref().expect("the spinning rank stands out");
    assert_eq!((s.rank, s.device), (Some(0), 0));
    assert_eq!(s.wait_caused_ns, rule[1].0);
    // The spin shows in the step: rank 0's mean step is longer than the even run's by most of it.
    let even = run(NSYS_EVEN);
    let step = |p: &Profile| p.ranks[0].step_ns.unwrap();
    assert!(
        step(&p) - step(&even) > 20e6,
        "{} {}",
        step(&p),
        step(&even)
    );
}

#[test]
fn an_even_run_names_no_straggler() {
    for folder in [NSYS_EVEN, KINETO_EVEN] {
        let p = run(folder);
        assert_eq!(p.ranks.len(), 2, "{folder}");
        assert!(p.straggler.is_none(), "{folder}: {:?}", p.straggler);
        assert!(
            p.notes.iter().any(|n| n.starts_with("no rank stands out")),
            "{folder}: {:?}",
            p.notes
        );
    }
}

/// A Kineto trace's events as JSON.
fn kineto_events(path: &PathBuf) -> Vec<Value> {
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap())
        .read_to_string(&mut text)
        .unwrap();
    let doc: Value = serde_json::from_str(&text).unwrap();
    doc["traceEvents"].as_array().unwrap().clone()
}

#[test]
fn kineto_ranks_have_their_json_kernel_sums_and_the_same_straggler() {
    let p = run(KINETO_SLOW);
    let mut starts = Vec::new();
    for (rank, path) in files(KINETO_SLOW).iter().enumerate() {
        let kernels: Vec<Value> = kineto_events(path)
            .into_iter()
            .filter(|e| e["cat"] == "kernel")
            .collect();
        // ts and dur are microseconds with three decimals: exact in nanoseconds.
        let ns = |v: &Value| (v.as_f64().unwrap() * 1000.0).round() as i64;
        let total: i64 = kernels.iter().map(|k| ns(&k["dur"])).sum();
        let r = p.ranks.iter().find(|r| r.rank == rank as u32).unwrap();
        assert_eq!(r.kernel_ns, total, "rank {rank}");
        let mut s: Vec<i64> = kernels
            .iter()
            .filter(|k| k["name"].as_str().unwrap().starts_with("nccl"))
            .map(|k| ns(&k["ts"]))
            .collect();
        s.sort_unstable();
        starts.push(s);
    }
    // Both files count on the host's clock: no offset.
    assert!(p.clock_offsets_ns.values().all(|&o| o == 0));
    let rule = arrival_rule(&p, &starts);
    for r in &p.ranks {
        assert_eq!((r.waited_ns, r.wait_caused_ns), rule[r.rank as usize]);
    }
    let s = p.straggler.as_ref().expect("the spinning rank stands out");
    assert_eq!(s.rank, Some(0));
}

#[test]
fn the_cli_reads_a_folder_or_files_as_one_run() {
    let bin = env!("CARGO_BIN_EXE_analyze");
    let folder = common::fixture(NSYS_SLOW);
    let by_folder = std::process::Command::new(bin)
        .args(["profile", "--format", "json"])
        .arg(&folder)
        .output()
        .unwrap();
    assert!(by_folder.status.success());
    let by_files = std::process::Command::new(bin)
        .args(["profile", "--format", "json"])
        .args(files(NSYS_SLOW).iter().rev())
        .output()
        .unwrap();
    assert!(by_files.status.success());
    let json = |o: &[u8]| -> Value { serde_json::from_slice(o).unwrap() };
    let (a, b) = (json(&by_folder.stdout), json(&by_files.stdout));
    assert_eq!(a["ranks"], b["ranks"]);
    assert_eq!(a["straggler"]["rank"], 0);
    let offsets: BTreeMap<String, i64> =
        serde_json::from_value(a["clock_offsets_ns"].clone()).unwrap();
    assert_eq!(offsets.len(), 2);
}

/// `compare` of two folders of per-rank exports compares two runs: each side's kernel count and
/// time are its files' summed by plain SQL.
#[test]
fn compare_reads_each_folder_as_one_run() {
    let out = common::analyze(&[
        "compare",
        "--format",
        "json",
        common::fixture(NSYS_EVEN).to_str().unwrap(),
        common::fixture(NSYS_SLOW).to_str().unwrap(),
    ]);
    let c = common::json_stdout(&out);
    for (side, folder) in [("a", NSYS_EVEN), ("b", NSYS_SLOW)] {
        let files = nsys_by_sql(folder);
        assert_eq!(files.len(), 2);
        let count: i64 = files.iter().map(|f| f.1).sum();
        let ns: i64 = files.iter().map(|f| f.2).sum();
        assert_eq!(c[side]["kernel_instances"], count, "{side}");
        assert_eq!(c[side]["kernel_time"], ns, "{side}");
    }
}

/// The `report.json` of `analyze report` over `folder`.
fn report_json(folder: &Path) -> Value {
    let out = tempfile::tempdir().unwrap();
    let o = common::analyze(&[
        "report",
        "-q",
        "--no-plots",
        "-o",
        out.path().to_str().unwrap(),
        folder.to_str().unwrap(),
    ]);
    common::assert_success(&o);
    serde_json::from_str(&std::fs::read_to_string(out.path().join("report.json")).unwrap()).unwrap()
}

/// `report` over the folder of the rank fixtures makes one run of each folder of rank files:
/// both ranks' kernels (the files' sums by plain SQL), a rank table of two, and the planted
/// straggler named in the slowed runs only.
#[test]
fn report_reads_each_folder_of_rank_files_as_one_run() {
    let report = report_json(&common::fixture("ranks"));
    let traces = report["inputs"]["traces"].as_array().unwrap();
    assert_eq!(traces.len(), 4);
    for folder in [NSYS_EVEN, NSYS_SLOW, KINETO_EVEN, KINETO_SLOW] {
        let t = traces
            .iter()
            .find(|t| t["file"].as_str().unwrap().contains(&format!("{folder}/")))
            .unwrap_or_else(|| panic!("{folder}: {traces:?}"));
        assert!(t["file"]
            .as_str()
            .unwrap()
            .ends_with("and 1 more rank file"));
        assert_eq!(
            t["profile"]["ranks"].as_array().unwrap().len(),
            2,
            "{folder}"
        );
        let named = &t["profile"]["straggler"]["rank"];
        assert_eq!(
            named.as_u64(),
            folder.contains("slow").then_some(0),
            "{folder}"
        );
        if folder.starts_with("ranks/nsys") {
            let files = nsys_by_sql(folder);
            let count: i64 = files.iter().map(|f| f.1).sum();
            assert_eq!(t["kernels"], count, "{folder}");
        }
    }
}

/// A run streamed file after file profiles as the same run loaded whole (`compare`'s reading):
/// every figure but the rank table, which only the files give.
#[test]
fn a_run_streamed_profiles_as_the_run_loaded_whole() {
    let classifier = Classifier::builtin();
    for folder in [NSYS_SLOW, KINETO_SLOW] {
        let streamed = serde_json::to_value(run(folder)).unwrap();
        let trace = analyze::source::many::load_trace_or_run(&common::fixture(folder), &classifier)
            .unwrap();
        let loaded = profile::profile(&trace, &classifier, &ProfileOptions::default());
        let loaded = serde_json::to_value(loaded).unwrap();
        for key in [
            "file",
            "phases",
            "step",
            "whole_trace",
            "attention",
            "devices",
            "graphs",
            "step_breakdown",
            "idle_gaps",
        ] {
            assert_eq!(streamed[key], loaded[key], "{folder}: {key}");
        }
    }
}

/// `report` over a folder whose per-rank files' names give no rank (torch.profiler's
/// `host_pid.time.pt.trace.json`, exports named by node) makes one run of each set of files by
/// the ranks they record: Kineto's `distributedInfo`, the `RANK` of an export's environment.
#[test]
fn report_groups_files_by_the_ranks_they_record() {
    let dir = tempfile::tempdir().unwrap();
    let (kineto, nsys) = (files(KINETO_SLOW), files(NSYS_SLOW));
    for (from, to) in kineto.iter().zip([
        "host-a_4711.1700000000.pt.trace.json.gz",
        "host-b_4712.1700000001.pt.trace.json.gz",
    ]) {
        std::fs::copy(from, dir.path().join(to)).unwrap();
    }
    for (from, to) in nsys.iter().zip(["node-a.sqlite", "node-b.sqlite"]) {
        let rel = from.strip_prefix(common::fixture("")).unwrap();
        common::unpacked(rel.to_str().unwrap(), dir.path(), to);
    }
    let report = report_json(dir.path());
    let traces = report["inputs"]["traces"].as_array().unwrap();
    assert_eq!(traces.len(), 2, "{traces:?}");
    for t in traces {
        let ranks = t["profile"]["ranks"].as_array().unwrap();
        assert_eq!(ranks.len(), 2);
        assert!(ranks.iter().all(|r| r["rank_from"] == "metadata"));
        assert_eq!(t["profile"]["straggler"]["rank"].as_u64(), Some(0));
    }
    let exports = traces
        .iter()
        .find(|t| t["file"].as_str().unwrap().contains("node-a.sqlite"))
        .unwrap();
    let count: i64 = nsys_by_sql(NSYS_SLOW).iter().map(|f| f.1).sum();
    assert_eq!(exports["kernels"], count);
}
