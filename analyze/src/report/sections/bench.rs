//! `collect bench` results: per results file, step time and peak memory as model × context
//! matrices (`OOM` where a configuration ran out of memory) and every configuration in a folded
//! table.

use crate::render::cells::{bytes_to_mib, opt_float, opt_int, opt_text};
use crate::render::{Cell, Table};

use super::super::bench::BenchRow;
use super::super::{run_order, Block, Inputs, ReportSection};
use super::matrix::{matrix_blocks, Entry};
use super::{folded_block, oom};

pub(super) fn bench_section(inputs: &Inputs) -> Option<ReportSection> {
    if inputs.benches.is_empty() {
        return None;
    }
    let mut blocks = vec![Block::Text(
        "`collect bench` results: host-clock step time (mean over the timed steps, after warm-up) and peak device memory per configuration. `OOM`: the configuration ran out of memory.".into(),
    )];
    for b in &inputs.benches {
        let mut rows: Vec<&BenchRow> = b.results.rows.iter().collect();
        rows.sort_by(|x, y| run_order(&x.run, "", &y.run, ""));
        let modes = [
            ("forward", "forward"),
            ("forward-backward", "fwd+bwd"),
            ("train", "train"),
        ];
        // A configuration that ran out of memory reads `OOM` wherever it would show a figure.
        let or_oom = |r: &BenchRow, c: Cell| if r.oom { oom() } else { c };
        let peak_mib = |r: &BenchRow| opt_float(r.peak_bytes.map(bytes_to_mib), 1);
        let entries = |cell: &dyn Fn(&BenchRow) -> Cell| -> Vec<Entry<'_>> {
            rows.iter()
                .map(|r| Entry {
                    run: &r.run,
                    cell: or_oom(r, cell(r)),
                })
                .collect()
        };
        let time = entries(&|r| opt_float(r.mean_ms, 3));
        let peak = entries(&peak_mib);
        let prefix = if inputs.benches.len() > 1 {
            format!("{}: ", b.label)
        } else {
            String::new()
        };
        blocks.extend(matrix_blocks(
            &format!("{prefix}mean step time (ms)"),
            &time,
            &modes,
            Vec::new(),
        ));
        blocks.extend(matrix_blocks(
            &format!("{prefix}peak memory (MiB)"),
            &peak,
            &modes,
            Vec::new(),
        ));
        let mut t = Table::new([
            "model",
            "ctx",
            "batch",
            "mode",
            "precision",
            "mean (ms)",
            "std (ms)",
            "median (ms)",
            "steps",
            "tokens/s",
            "peak (MiB)",
        ]);
        for r in &rows {
            t.push(vec![
                opt_text(r.run.model.as_deref()),
                opt_int(r.run.ctx),
                opt_int(r.run.batch),
                opt_text(r.run.mode.as_deref()),
                opt_text(r.run.precision.as_deref()),
                or_oom(r, opt_float(r.mean_ms, 3)),
                or_oom(r, opt_float(r.std_ms, 3)),
                or_oom(r, opt_float(r.median_ms, 3)),
                Cell::Int(r.steps as i64),
                or_oom(r, opt_float(r.tokens_per_s, 0)),
                or_oom(r, peak_mib(r)),
            ]);
        }
        blocks.push(folded_block(
            &format!("{prefix}every configuration: mean, standard deviation and median step time, throughput, peak memory"),
            t,
            Vec::new(),
        ));
    }
    Some(ReportSection {
        id: "bench",
        title: "Benchmark results".into(),
        blocks,
    })
}
