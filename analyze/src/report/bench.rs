//! `collect bench` results files (`--out grid.json`, plain or gzip): one row per configuration
//! with its step times and peak memory, or `"status": "oom"` when it ran out of memory. The
//! report shows them as step-time and peak-memory matrices in which an out-of-memory
//! configuration reads `OOM`.
//!
//! [`looks_like_bench`] tells such a file from a Kineto trace (both are JSON objects); [`parse`]
//! reads it ([`crate::formats::bench_results`] defines the file) into the rows the report shows.
//! Nothing here touches the file system.

use std::path::Path;

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::formats::bench_results;
use crate::memory::summary::RunName;

/// One configuration of a bench file.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BenchRow {
    pub run: RunName,
    /// `true` when the configuration ran out of memory (no times, no peak).
    pub oom: bool,
    /// What ran out of memory, as `collect` reported it.
    pub oom_what: Option<String>,
    /// Host-clock step time: mean, standard deviation and median (ms).
    pub mean_ms: Option<f64>,
    pub std_ms: Option<f64>,
    pub median_ms: Option<f64>,
    /// Timed steps.
    pub steps: usize,
    pub tokens_per_s: Option<f64>,
    /// Peak device memory of the configuration (`collect`'s own allocator).
    pub peak_bytes: Option<u64>,
}

/// A bench results file.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BenchResults {
    /// The GPU the grid ran on.
    pub device: Option<String>,
    pub rows: Vec<BenchRow>,
}

#[derive(Deserialize)]
struct Probe {
    #[serde(rename = "traceEvents")]
    trace_events: Option<IgnoredAny>,
    results: Option<IgnoredAny>,
}

/// Whether `bytes` (a JSON document) is a bench results file: an object with `results` and
/// without Kineto's `traceEvents`.
pub fn looks_like_bench(bytes: &[u8]) -> bool {
    serde_json::from_slice::<Probe>(bytes)
        .is_ok_and(|p| p.results.is_some() && p.trace_events.is_none())
}

/// Read a bench results file; `path` names it in errors.
pub fn parse(path: &Path, bytes: &[u8]) -> Result<BenchResults> {
    let file = bench_results::from_json(bytes).map_err(|e| Error::Malformed {
        path: path.to_owned(),
        message: format!("not a `collect bench` results file: {e}"),
    })?;
    let rows = file
        .results
        .into_iter()
        .map(|r| {
            let oom = r.status.as_deref() == Some("oom") || r.oom.is_some();
            let host = r.host.as_ref();
            BenchRow {
                run: RunName {
                    model: r.size.map(|s| s.to_ascii_lowercase()),
                    ctx: r.ctx,
                    mode: r.mode,
                    precision: r.precision,
                    batch: r.batch,
                },
                oom,
                oom_what: r.oom,
                mean_ms: host.and_then(|h| h.mean_ms),
                std_ms: host.and_then(|h| h.std_ms),
                median_ms: host.and_then(|h| h.median_ms),
                steps: r.host_step_ms.map_or(0, |s| s.len()),
                tokens_per_s: r.tokens_per_s,
                peak_bytes: r.memory.and_then(|m| m.peak_bytes),
            }
        })
        .collect();
    Ok(BenchResults {
        device: file.device.and_then(|d| d.name),
        rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bench_files_are_told_from_kineto_traces() {
        assert!(looks_like_bench(br#"{"device": {}, "results": []}"#));
        assert!(!looks_like_bench(br#"{"traceEvents": [], "results": 1}"#));
        assert!(!looks_like_bench(br#"[{"ph": "X"}]"#));
        assert!(!looks_like_bench(b"{\"a\": 1}\n{\"a\": 2}\n"));
    }

    #[test]
    fn rows_that_ran_out_of_memory_say_so() {
        let text = br#"{"device": {"name": "NVIDIA H200"}, "results": [
            {"size": "2.7B", "ctx": 1024, "batch": 4, "mode": "train", "precision": "fp32",
             "status": "oom", "oom": "cuMemAlloc of 2.0 GiB"},
            {"size": "small", "ctx": 128, "batch": 4, "mode": "forward", "precision": "fp32",
             "status": "ok", "host": {"mean_ms": 4.39, "std_ms": 0.03, "median_ms": 4.38},
             "host_step_ms": [4.3, 4.4], "memory": {"peak_bytes": 584274948}}]}"#;
        let b = parse(Path::new("grid.json"), text).unwrap();
        assert_eq!(b.device.as_deref(), Some("NVIDIA H200"));
        assert!(b.rows[0].oom);
        assert_eq!(b.rows[0].run.model.as_deref(), Some("2.7b"));
        assert_eq!(b.rows[0].mean_ms, None);
        assert!(!b.rows[1].oom);
        assert_eq!(b.rows[1].mean_ms, Some(4.39));
        assert_eq!(b.rows[1].steps, 2);
        assert_eq!(b.rows[1].peak_bytes, Some(584_274_948));
        let err = parse(Path::new("grid.json"), b"{\"results\": 3}").unwrap_err();
        assert!(err.to_string().contains("grid.json"), "{err}");
    }
}
