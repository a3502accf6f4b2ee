//! The run inventory (every input: what it is, how it was labelled, what it holds) and the files
//! found in the folders but skipped, grouped by folder and reason.

use crate::memory::summary::RunName;
use crate::model::trace::SourceFormat;
use crate::render::cells::{opt_int, opt_text};
use crate::render::{Cell, Table};

use super::super::labels::Labelled;
use super::super::{Inputs, ReportSection};
use super::{sorted_snapshots, sorted_traces, table_block};

/// Skipped files named per folder (all of them are in `report.json`'s inputs).
const SKIPPED_NAMED: usize = 3;

fn format_name(f: SourceFormat) -> &'static str {
    match f {
        SourceFormat::NsysSqlite => "nsys export",
        SourceFormat::Kineto => "Kineto trace",
    }
}

pub(super) fn inventory(inputs: &Inputs) -> ReportSection {
    let mut t = Table::new([
        "run",
        "input",
        "model",
        "ctx",
        "batch",
        "mode",
        "precision",
        "label from",
        "contents",
        "file",
    ]);
    let run_cells = |r: &RunName| {
        [
            opt_text(r.model.as_deref()),
            opt_int(r.ctx),
            opt_int(r.batch),
            opt_text(r.mode.as_deref()),
            opt_text(r.precision.as_deref()),
        ]
    };
    for tr in sorted_traces(inputs) {
        let mut row = vec![Cell::text(&tr.label), Cell::text(format_name(tr.format))];
        row.extend(run_cells(&tr.run));
        row.push(Cell::text(Labelled::source_text(
            tr.label_source,
            &tr.label_guessed,
        )));
        row.push(Cell::text(format!(
            "{} kernels, {} measured steps",
            tr.kernels, tr.profile.measured_steps
        )));
        row.push(Cell::text(&tr.file));
        t.push(row);
    }
    for s in sorted_snapshots(inputs) {
        let mut row = vec![Cell::text(&s.label), Cell::text("memory snapshot")];
        row.extend(run_cells(&s.run));
        row.push(Cell::text(Labelled::source_text(
            s.label_source,
            &s.label_guessed,
        )));
        let mut contents = format!("{} allocator events", s.memory.trace_entries);
        if s.memory.oom_events > 0 {
            contents.push_str(&format!(", {} out-of-memory events", s.memory.oom_events));
        }
        row.push(Cell::text(contents));
        row.push(Cell::text(&s.file));
        t.push(row);
    }
    for b in &inputs.benches {
        let ooms = b.results.rows.iter().filter(|r| r.oom).count();
        let mut row = vec![Cell::text(&b.label), Cell::text("bench results")];
        row.extend(run_cells(&RunName::default()));
        row.push(Cell::text("file name"));
        row.push(Cell::text(format!(
            "{} configurations ({ooms} OOM){}",
            b.results.rows.len(),
            b.results
                .device
                .as_ref()
                .map(|d| format!(" on {d}"))
                .unwrap_or_default()
        )));
        row.push(Cell::text(&b.file));
        t.push(row);
    }
    let mut notes = vec![
        "Runs are named from the run metadata a file carries (`collect --trace` writes model, ctx, batch, mode and precision), else from its file name (`..._{size}_ctx{N}_{fwd|forward|train}_{fp32|bf16}...`), else as `--label FILE=LABEL` says (a given label wins).".to_owned(),
    ];
    let guessed = inputs
        .traces
        .iter()
        .map(|t| t.label_guessed.len())
        .chain(inputs.snapshots.iter().map(|s| s.label_guessed.len()))
        .filter(|&n| n > 0)
        .count();
    if guessed > 0 {
        notes.push(format!(
            "{guessed} runs have fields guessed from their file names (`guessed` in `label from`): sizes `small` to `xl` and `2.7B`/`2_7B`/`2p7b`, `ctxN`/`contextN`/`seqN` or a number right after the size, `fwd`/`forward`/`inference` or `train`/`training`/`fullstep`, and the precision: a data type (`fp32`, `bf16`, `fp16`), else `amp`/`mixed`/`autocast` as bf16 unless negated (`without_mixed`, `no_amp`, `full_precision` are fp32). A wrong guess is corrected with `--label FILE=LABEL`."
        ));
    }
    if !inputs.skipped.is_empty() {
        notes.push(format!(
            "{} files found in the folders were skipped; see [Skipped files](#skipped-files).",
            inputs.skipped.len()
        ));
    }
    ReportSection {
        id: "runs",
        title: "Runs".into(),
        blocks: vec![table_block(None, t, notes)],
    }
}

pub(super) fn skipped_section(inputs: &Inputs) -> Option<ReportSection> {
    if inputs.skipped.is_empty() {
        return None;
    }
    // One row per folder and reason: a folder of `nsys stats` CSVs is one line, not forty.
    let mut groups: Vec<(String, String, Vec<String>)> = Vec::new();
    for s in &inputs.skipped {
        let path = std::path::Path::new(&s.file);
        let folder = path
            .parent()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        let name = path
            .file_name()
            .map_or_else(|| s.file.clone(), |n| n.to_string_lossy().into_owned());
        match groups
            .iter_mut()
            .find(|(f, r, _)| *f == folder && *r == s.reason)
        {
            Some(g) => g.2.push(name),
            None => groups.push((folder, s.reason.clone(), vec![name])),
        }
    }
    let mut t = Table::new(["folder", "files", "reason", "first files"]);
    for (folder, reason, names) in &groups {
        let mut shown: Vec<String> = names.iter().take(SKIPPED_NAMED).cloned().collect();
        if names.len() > SKIPPED_NAMED {
            shown.push(format!("… {} more", names.len() - SKIPPED_NAMED));
        }
        t.push(vec![
            Cell::text(if folder.is_empty() { "." } else { folder }),
            Cell::Int(names.len() as i64),
            Cell::text(reason),
            Cell::text(shown.join(", ")),
        ]);
    }
    Some(ReportSection {
        id: "skipped",
        title: "Skipped files".into(),
        blocks: vec![table_block(
            None,
            t,
            vec!["Files found in the folders that are not profiles, or could not be read. `report.json` lists each under `inputs.skipped`.".into()],
        )],
    })
}
