//! What `collect attention` reports from its rows: the table ([`document`], printed through
//! `analyze`'s renderers) and the JSON rows of `--out` ([`rows_json`]), one object per row with
//! the fields the PyTorch side (`scripts/reference/torch_attention.py`) writes too, so the two
//! merge into one array. Pure, but for the one file write.

use std::path::Path;

use analyze::render::cells::bytes_to_mib;
use analyze::render::{Cell, Document, Section, Table};
use serde_json::{json, Value};

use super::{AttentionBenchOptions, AttentionOutcome, AttentionRow, MIN_PASSES};
use crate::error::{Error, Result};
use crate::gpu::device::DeviceInfo;

/// `OK`, `OOM`, or why the row did not run.
pub fn status(outcome: &AttentionOutcome) -> String {
    match outcome {
        AttentionOutcome::Ran(_) => "OK".to_owned(),
        AttentionOutcome::OutOfMemory => "OOM".to_owned(),
        AttentionOutcome::Refused(reason) => reason.clone(),
    }
}

/// FLOPs over milliseconds, in TFLOP/s.
fn tflops(flops: f64, ms: f64) -> f64 {
    flops / (ms * 1e-3) / 1e12
}

/// Each row as a JSON object: `impl`, `batch`, `heads`, `d`, `seq`, `precision`, `causal`,
/// `fwd_ms`, `bwd_ms`, `mem_before_bwd_mib`, `peak_mib`, `status`, `tflops_fwd`, `tflops_bwd`
/// (`null` where the row did not run).
pub fn rows_json(rows: &[AttentionRow]) -> Value {
    Value::Array(
        rows.iter()
            .map(|r| {
                let c = &r.config;
                let m = match &r.outcome {
                    AttentionOutcome::Ran(m) => Some(m),
                    _ => None,
                };
                json!({
                    "impl": c.attention.as_str(),
                    "batch": c.batch,
                    "heads": c.heads,
                    "d": c.d,
                    "seq": c.seq,
                    "precision": c.precision.as_str(),
                    "causal": c.causal,
                    "fwd_ms": m.map(|m| m.fwd_ms),
                    "bwd_ms": m.map(|m| m.bwd_ms),
                    "mem_before_bwd_mib": m.map(|m| bytes_to_mib(m.mem_before_bwd)),
                    "peak_mib": m.map(|m| bytes_to_mib(m.peak)),
                    "status": status(&r.outcome),
                    "tflops_fwd": m.map(|m| tflops(c.forward_flops(), m.fwd_ms)),
                    "tflops_bwd": m.map(|m| tflops(c.backward_flops(), m.bwd_ms)),
                })
            })
            .collect(),
    )
}

/// The rows written to `path` as a JSON array, atomically.
pub fn write_rows(path: &Path, rows: &[AttentionRow]) -> Result<()> {
    let io = |source| Error::Io {
        path: path.to_owned(),
        source,
    };
    let mut text =
        serde_json::to_string_pretty(&rows_json(rows)).map_err(|e| io(std::io::Error::other(e)))?;
    text.push('\n');
    analyze::atomic_file::write(path, text.as_bytes()).map_err(io)
}

/// The table: one row per configuration; `--format json` prints [`rows_json`].
pub fn document(
    rows: &[AttentionRow],
    device: &DeviceInfo,
    opts: &AttentionBenchOptions,
) -> Document {
    let mut t = Table::new([
        "impl",
        "batch",
        "heads",
        "d",
        "seq",
        "precision",
        "causal",
        "fwd (ms)",
        "bwd (ms)",
        "fwd+bwd (ms)",
        "before bwd (MiB)",
        "peak (MiB)",
        "fwd TFLOP/s",
        "bwd TFLOP/s",
        "passes",
        "status",
    ]);
    let mut cut = 0;
    for r in rows {
        let c = &r.config;
        let mut row = vec![
            Cell::text(c.attention.as_str()),
            Cell::Int(c.batch as i64),
            Cell::Int(c.heads as i64),
            Cell::Int(c.d as i64),
            Cell::Int(c.seq as i64),
            Cell::text(c.precision.as_str()),
            Cell::text(if c.causal { "yes" } else { "no" }),
        ];
        match &r.outcome {
            AttentionOutcome::Ran(m) => {
                if m.fwd_passes < opts.passes || m.bwd_passes < opts.passes {
                    cut += 1;
                }
                row.extend([
                    Cell::Float(m.fwd_ms, 3),
                    Cell::Float(m.bwd_ms, 3),
                    Cell::Float(m.fwd_ms + m.bwd_ms, 3),
                    Cell::Float(bytes_to_mib(m.mem_before_bwd), 1),
                    Cell::Float(bytes_to_mib(m.peak), 1),
                    Cell::Float(tflops(c.forward_flops(), m.fwd_ms), 1),
                    Cell::Float(tflops(c.backward_flops(), m.bwd_ms), 1),
                    Cell::text(format!("{}/{}", m.fwd_passes, m.bwd_passes)),
                ]);
            }
            _ => row.extend(std::iter::repeat_n(Cell::Missing, 8)),
        }
        row.push(Cell::text(status(&r.outcome)));
        t.push(row);
    }
    let mut notes = vec![
        format!(
            "Each pass timed by the host clock from its launch to the end of a stream synchronize; \
             mean over the passes after {} warm-up passes. A backward pass follows an untimed \
             forward.",
            opts.warmup
        ),
        "Memory beyond what was in use before Q, K, V: before bwd = Q, K, V and what a forward \
         leaves (its output and what it keeps: P naive, L flash); dO is not counted."
            .to_owned(),
        "TFLOP/s: forward 4 x batch x heads x seq^2 x d, halved when causal; backward 2.5 x the \
         forward, for every implementation."
            .to_owned(),
    ];
    if cut > 0 {
        notes.push(format!(
            "{cut} row(s) ran fewer than {} passes: a phase stops after {} s of passes, once {MIN_PASSES} have run (passes: forward/backward).",
            opts.passes, opts.max_seconds
        ));
    }
    Document {
        sections: vec![Section {
            title: Some(format!(
                "collect attention on {} (driver {})",
                device.name, device.driver
            )),
            table: t,
            notes,
        }],
        json: Some(rows_json(rows)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::attention::{AttentionConfig, AttentionMeasured, Preset};
    use crate::transformer::config::Attention;

    fn rows() -> Vec<AttentionRow> {
        let g = Preset::Leaderboard.options().grid();
        vec![
            AttentionRow {
                config: g[1],
                outcome: AttentionOutcome::Ran(AttentionMeasured {
                    fwd_ms: 1.5,
                    bwd_ms: 3.75,
                    fwd_passes: 100,
                    bwd_passes: 7,
                    mem_before_bwd: 3 << 20,
                    peak: 10 << 20,
                }),
            },
            AttentionRow {
                config: AttentionConfig {
                    seq: 1 << 20,
                    ..g[0]
                },
                outcome: AttentionOutcome::Refused("too big (try --impl flash)".into()),
            },
            AttentionRow {
                config: g[0],
                outcome: AttentionOutcome::OutOfMemory,
            },
        ]
    }

    #[test]
    fn json_rows_have_exactly_the_shared_fields() {
        let v = rows_json(&rows());
        let first = v[0].as_object().unwrap();
        let mut keys: Vec<&str> = first.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "batch",
                "bwd_ms",
                "causal",
                "d",
                "fwd_ms",
                "heads",
                "impl",
                "mem_before_bwd_mib",
                "peak_mib",
                "precision",
                "seq",
                "status",
                "tflops_bwd",
                "tflops_fwd"
            ]
        );
        assert_eq!(v[0]["impl"], "flash");
        assert_eq!(v[0]["mem_before_bwd_mib"], 3.0);
        assert_eq!(v[0]["status"], "OK");
        // 2 x 16 x 16384^2 x 64 FLOPs in 1.5 ms.
        let expected = 2.0 * 16.0 * 16384f64.powi(2) * 64.0 / 1.5e-3 / 1e12;
        assert!((v[0]["tflops_fwd"].as_f64().unwrap() - expected).abs() < 1e-9);
        assert_eq!(v[1]["status"], "too big (try --impl flash)");
        assert!(v[1]["fwd_ms"].is_null() && v[1]["peak_mib"].is_null());
        assert_eq!(
            (v[2]["status"].as_str(), v[2]["impl"].as_str()),
            (Some("OOM"), Some("naive"))
        );
        assert_eq!(Attention::Naive.as_str(), "naive");
    }

    #[test]
    fn the_table_sums_the_phases_and_says_which_rows_were_cut_short() {
        let device = DeviceInfo {
            name: "NVIDIA H200".into(),
            compute_capability: (9, 0),
            driver: "580.159.04".into(),
            total_memory: 150_000_000_000,
            multiprocessors: 132,
        };
        let doc = document(&rows(), &device, &Preset::Leaderboard.options());
        let t = &doc.sections[0].table;
        let col = |name: &str| t.columns.iter().position(|c| c == name).unwrap();
        assert_eq!(t.rows[0][col("fwd+bwd (ms)")], Cell::Float(5.25, 3));
        assert_eq!(t.rows[0][col("passes")], Cell::text("100/7"));
        assert_eq!(t.rows[1][col("fwd (ms)")], Cell::Missing);
        assert_eq!(t.rows[2][col("status")], Cell::text("OOM"));
        let notes = doc.sections[0].notes.join("\n");
        assert!(
            notes.contains("1 row(s) ran fewer than 100 passes"),
            "{notes}"
        );
        assert_eq!(doc.json, Some(rows_json(&rows())));
    }
}
