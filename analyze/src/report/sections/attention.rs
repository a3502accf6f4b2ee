//! Softmax against matmul in attention: the kernel time of the softmax ranges over that of the
//! QK and V matmul ranges, per run and as a model × context matrix, beside the FLOP ratio.

use crate::profile::DEFAULT_ATTENTION;
use crate::render::cells::{ms, opt_float, opt_int};
use crate::render::{Cell, Table};

use super::super::{Block, ReportSection, TraceRun};
use super::matrix::{matrix_blocks, Entry};
use super::table_block;

pub(super) fn attention_section(traces: &[&TraceRun]) -> ReportSection {
    let mut t = Table::new([
        "run",
        "head_dim",
        "matmul QK+V (ms/step)",
        "softmax (ms/step)",
        "softmax/matmul time",
        "softmax/matmul wall",
        "FLOP ratio 5/(4·head_dim)",
        "time ratio ÷ FLOP ratio",
    ]);
    let mut forward_first: Vec<&TraceRun> = traces.to_vec();
    // A forward-only run's attention is the cleanest measure of a cell; training runs follow.
    forward_first.sort_by_key(|t| t.run.mode.as_deref() != Some("forward"));
    for tr in traces {
        let Some(a) = &tr.profile.attention else {
            continue;
        };
        let steps = tr.profile.measured_steps.max(1) as f64;
        t.push(vec![
            Cell::text(&tr.label),
            opt_int(a.head_dim),
            ms(a.matmul_ns as f64 / steps),
            ms(a.softmax_ns as f64 / steps),
            opt_float(a.ratio, 3),
            opt_float(a.wall_ratio, 3),
            opt_float(a.flop_ratio, 4),
            match (a.ratio, a.flop_ratio) {
                (Some(r), Some(f)) if f > 0.0 => Cell::Float(r / f, 1),
                _ => Cell::Missing,
            },
        ]);
    }
    let mut model_ctx = Vec::new();
    for tr in forward_first {
        let Some(a) = &tr.profile.attention else {
            continue;
        };
        let mut run = tr.run.clone();
        // Both modes measure the forward pass's attention: one column per context length.
        run.mode = Some("any".into());
        model_ctx.push((run, a.ratio));
    }
    let entries: Vec<Entry<'_>> = model_ctx
        .iter()
        .map(|(run, ratio)| Entry {
            run,
            cell: opt_float(*ratio, 3),
        })
        .collect();
    // The range names the profiles looked for (`--attention-ranges`), as the first run with
    // attention ranges names them.
    let names = traces
        .iter()
        .find_map(|t| t.profile.attention.as_ref())
        .map_or(DEFAULT_ATTENTION.map(str::to_owned), |a| {
            [a.qk.name.clone(), a.softmax.name.clone(), a.v.name.clone()]
        });
    let [qk, softmax, v] = &names;
    let mut blocks = vec![Block::Text(format!(
        "Kernel time inside the NVTX ranges `{qk}` and `{v}` (matmul) against `{softmax}` (softmax), in the forward passes of the measured steps (`--attention-ranges` names other ranges). The FLOP ratio 5/(4·head_dim) is what the softmax would cost if time followed FLOPs: per attention score it does about 5 operations (max, subtract, exp, sum, divide) against 2·head_dim for each of the two matmuls. head_dim comes from `--head-dim`, else the run metadata, else the model size (small to xl: 64, 2.7B: 80).",
    ))];
    if t.rows.is_empty() {
        blocks.push(Block::Text(format!(
            "No run has the attention ranges `{qk}`, `{softmax}` and `{v}`; `--attention-ranges QK,SOFTMAX,V` names the ranges a run has.",
        )));
    } else {
        blocks.extend(matrix_blocks(
            "softmax/matmul kernel time",
            &entries,
            &[("any", "")],
            vec!["Forward-only runs fill a cell first; a training run fills it otherwise.".into()],
        ));
        blocks.push(table_block(Some("Per run"), t, Vec::new()));
    }
    ReportSection {
        id: "softmax_vs_matmul",
        title: "Softmax against matmul in attention".into(),
        blocks,
    }
}
