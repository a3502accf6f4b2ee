//! Matrices of runs: one table per precision, model sizes down the side and `ctx N <mode>`
//! across, a cell per run. The first run for a cell wins; runs whose label lacks a model, context
//! length or listed mode are left out (they appear in the per-run tables).

use std::collections::BTreeSet;

use crate::memory::summary::RunName;
use crate::render::{Cell, Table};

use super::super::labels::model_rank;
use super::super::Block;
use super::{precision_rank, table_block};

/// A cell of a model × context matrix: where it sits and what it shows.
pub(super) struct Entry<'a> {
    pub run: &'a RunName,
    pub cell: Cell,
}

/// One matrix per precision: model sizes down, `ctxN <mode>` across (modes in `modes` order,
/// titled by `mode_titles`). The first entry for a cell wins. Entries without model, context
/// length or a listed mode are left out.
fn matrices(entries: &[Entry<'_>], modes: &[(&str, &str)]) -> Vec<(Option<String>, Table)> {
    let usable: Vec<&Entry<'_>> = entries
        .iter()
        .filter(|e| {
            e.run.model.is_some()
                && e.run.ctx.is_some()
                && modes.iter().any(|(m, _)| e.run.mode.as_deref() == Some(*m))
        })
        .collect();
    let mut precisions: Vec<Option<String>> = usable
        .iter()
        .map(|e| e.run.precision.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    precisions.sort_by_key(precision_rank);
    let mut out = Vec::new();
    for precision in precisions {
        let these: Vec<&&Entry<'_>> = usable
            .iter()
            .filter(|e| e.run.precision == precision)
            .collect();
        let mut models: Vec<String> = these
            .iter()
            .filter_map(|e| e.run.model.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        models.sort_by_key(|m| (model_rank(m), m.clone()));
        let ctxs: BTreeSet<u32> = these.iter().filter_map(|e| e.run.ctx).collect();
        let mut columns: Vec<(u32, &str, &str)> = Vec::new();
        for &ctx in &ctxs {
            for (mode, title) in modes {
                if these
                    .iter()
                    .any(|e| e.run.ctx == Some(ctx) && e.run.mode.as_deref() == Some(*mode))
                {
                    columns.push((ctx, mode, title));
                }
            }
        }
        let mut header = vec!["model".to_owned()];
        header.extend(columns.iter().map(|(c, _, t)| {
            if t.is_empty() {
                format!("ctx {c}")
            } else {
                format!("ctx {c} {t}")
            }
        }));
        let mut table = Table::new(header);
        for model in &models {
            let mut row = vec![Cell::text(model)];
            for (ctx, mode, _) in &columns {
                let cell = these
                    .iter()
                    .find(|e| {
                        e.run.model.as_deref() == Some(model.as_str())
                            && e.run.ctx == Some(*ctx)
                            && e.run.mode.as_deref() == Some(*mode)
                    })
                    .map_or(Cell::Missing, |e| e.cell.clone());
                row.push(cell);
            }
            table.push(row);
        }
        out.push((precision, table));
    }
    out
}

pub(super) fn matrix_blocks(
    what: &str,
    entries: &[Entry<'_>],
    modes: &[(&str, &str)],
    notes: Vec<String>,
) -> Vec<Block> {
    let m = matrices(entries, modes);
    let several = m.len() > 1;
    let count = m.len();
    m.into_iter()
        .enumerate()
        .map(|(i, (precision, table))| {
            let title = match (&precision, several) {
                (Some(p), _) => format!("{what}, {p}"),
                (None, true) => format!("{what}, precision unknown"),
                (None, false) => what.to_owned(),
            };
            let notes = if i + 1 == count {
                notes.clone()
            } else {
                Vec::new()
            };
            table_block(Some(&title), table, notes)
        })
        .collect()
}
