//! CUDA graphs: the same torch.compile(mode="reduce-overhead") training step captured with
//! Nsight Systems' default graph tracing (each graph execution one row, its kernels untraced) and
//! with `--cuda-graph-trace=node` (the kernels inside graphs traced one by one). The GPU work of
//! each measured step must agree between the two, and `compare` must see no large change.

use crate::common;

use std::path::PathBuf;

use analyze::formats;
use analyze::kernels::class::{Classifier, KernelClass};
use analyze::profile::{self, Profile, ProfileOptions};
use rusqlite::Connection;
use serde_json::Value;

const GRAPH: &str = "captures/torch_graphs_graph_small_l4_ctx128_train_fp32.sqlite.gz";
const NODE: &str = "captures/torch_graphs_node_small_l4_ctx128_train_fp32.sqlite.gz";

fn run(rel: &str) -> Profile {
    let trace = formats::load_trace(&common::fixture(rel)).unwrap();
    profile::profile(&trace, &Classifier::builtin(), &ProfileOptions::default())
}

/// The export unpacked into a temporary file, for plain SQL.
fn unpacked(rel: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = common::unpacked(rel, dir.path(), "export.sqlite");
    (dir, path)
}

#[test]
fn graph_executions_count_as_gpu_work_within_3_percent_of_the_traced_kernels_per_step() {
    let (graph, node) = (run(GRAPH), run(NODE));
    assert_eq!(graph.measured_steps, 3);
    assert_eq!(node.measured_steps, 3);
    for step in ["step_0", "step_1", "step_2"] {
        let of = |p: &Profile| {
            let s: Vec<_> = p.step_breakdown.iter().filter(|s| s.step == step).collect();
            assert_eq!(s.len(), 1, "{step}: one device");
            s[0].kernel_ns
        };
        let (g, n) = (of(&graph), of(&node));
        let diff = (g - n) as f64 / n as f64;
        println!("{step}: default tracing {g} ns (kernels + graphs), node tracing {n} ns of kernels ({:+.2}%)", diff * 100.0);
        assert!(diff.abs() < 0.03, "{step}: {g} vs {n}");
    }
    // Per pass too: forward and backward are one graph each.
    for name in ["forward", "backward"] {
        let pass = |p: &Profile| p.phases.iter().find(|f| f.name == name).unwrap().clone();
        let (g, n) = (pass(&graph), pass(&node));
        let diff = (g.kernel_ns - n.kernel_ns) as f64 / n.kernel_ns as f64;
        assert!(
            diff.abs() < 0.03,
            "{name}: {} vs {}",
            g.kernel_ns,
            n.kernel_ns
        );
        assert!(g.classes.iter().any(|c| c.class == KernelClass::CudaGraph));
        assert!(
            n.gemm_fraction.unwrap() > 0.5,
            "{name}: node tracing sees the GEMMs"
        );
    }
}

#[test]
fn graph_launches_are_counted_against_plain_sql() {
    let (_dg, graph_db) = unpacked(GRAPH);
    let (_dn, node_db) = unpacked(NODE);
    let sql = |db: &PathBuf, q: &str| -> i64 {
        Connection::open(db)
            .unwrap()
            .query_row(q, [], |r| r.get(0))
            .unwrap()
    };
    let graph = run(GRAPH);
    let execs = sql(
        &graph_db,
        "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
    );
    let graph_ns = sql(
        &graph_db,
        "SELECT SUM(end - start) FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
    );
    assert_eq!(graph.graphs.launches as i64, execs);
    assert_eq!(graph.graphs.untraced_launches as i64, execs);
    assert_eq!(graph.graphs.graph_ns, graph_ns);
    assert!(graph
        .notes
        .iter()
        .any(|n| n.contains("no per-kernel detail") && n.contains("--cuda-graph-trace=node")));
    // The breakdown of the measured steps sees the graphs as graph time.
    assert!(graph.step.as_ref().unwrap().breakdown.graph_ns > 0);

    let node = run(NODE);
    let launches = sql(
        &node_db,
        "SELECT COUNT(DISTINCT correlationId) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE graphNodeId IS NOT NULL",
    );
    assert_eq!(node.graphs.launches as i64, launches);
    assert_eq!(node.graphs.untraced_launches, 0);
    assert_eq!(node.graphs.graph_ns, 0);
    // With node tracing the kernels inside a graph belong to the range of its launch: every
    // kernel whose launch call (a kernel launch or `cudaGraphLaunch`) starts inside a step.
    let in_steps = sql(
        &node_db,
        "WITH named AS (SELECT n.start, n.end,
                        COALESCE(n.text, (SELECT value FROM StringIds WHERE id = n.textId)) AS name
                        FROM NVTX_EVENTS n WHERE n.eventType = 59),
              steps AS (SELECT start, end FROM named WHERE name GLOB 'step_[0-9]*')
         SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k
         JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId
         WHERE EXISTS (SELECT 1 FROM steps WHERE r.start >= steps.start AND r.start <= steps.end)",
    );
    assert_eq!(node.step.as_ref().unwrap().kernels as i64, in_steps);
}

#[test]
fn compare_of_the_pair_reports_no_large_change() {
    let (graph, node) = (
        common::fixture(GRAPH).display().to_string(),
        common::fixture(NODE).display().to_string(),
    );
    for (a, b) in [(&node, &graph), (&graph, &node)] {
        let out = common::analyze(&["compare", a, b, "--fail-if-slower", "5", "-f", "json"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        assert!(
            stderr.contains("check passed: GPU time per measured step"),
            "{stderr}"
        );
        assert!(!stderr.contains("fell 100"), "{stderr}");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let change = v["headline"]["change_pct"].as_f64().unwrap();
        assert!(change.abs() < 3.0, "{change}");
        // Graph time is GPU work in the kernel rows too.
        let graph_rows = v["classes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "cuda_graph")
            .unwrap()
            .clone();
        let graph_side = if a == &graph { "a" } else { "b" };
        assert!(graph_rows[graph_side]["total_ns"].as_i64().unwrap() > 0);
    }
}
