//! The aligned plain-text table of the terminal: numbers right-aligned, text left-aligned, a rule
//! of dashes under the header, missing values as `-`.

use std::io::{self, Write};

use super::{write_sections, Cell, Document, Renderer, Sectioned, Table};

/// Aligned plain-text tables: numbers right-aligned, text left-aligned.
pub struct TextRenderer;

impl Renderer for TextRenderer {
    fn render(&self, doc: &Document, out: &mut dyn Write) -> io::Result<()> {
        write_sections(self, doc, out)
    }
}

impl Sectioned for TextRenderer {
    fn title(&self, title: &str, out: &mut dyn Write) -> io::Result<()> {
        writeln!(out, "{title}")?;
        writeln!(out)
    }

    fn table(&self, table: &Table, out: &mut dyn Write) -> io::Result<()> {
        write_aligned(table, out)
    }

    fn notes(&self, notes: &[String], out: &mut dyn Write) -> io::Result<()> {
        for note in notes {
            writeln!(out, "{note}")?;
        }
        Ok(())
    }
}

fn write_aligned(table: &Table, out: &mut dyn Write) -> io::Result<()> {
    let cells: Vec<Vec<String>> = table
        .rows
        .iter()
        .map(|r| {
            r.iter()
                .map(|c| match c {
                    Cell::Missing => "-".to_owned(),
                    c => c.display(),
                })
                .collect()
        })
        .collect();
    let mut widths: Vec<usize> = table.columns.iter().map(|c| c.chars().count()).collect();
    for row in &cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let numeric = table.numeric_columns();
    let line = |out: &mut dyn Write, row: &[String]| -> io::Result<()> {
        let mut parts = Vec::with_capacity(row.len());
        for (i, c) in row.iter().enumerate() {
            let pad = widths[i].saturating_sub(c.chars().count());
            let last = i + 1 == row.len();
            parts.push(if numeric[i] {
                format!("{}{c}", " ".repeat(pad))
            } else if last {
                c.clone()
            } else {
                format!("{c}{}", " ".repeat(pad))
            });
        }
        writeln!(out, "{}", parts.join("  ").trim_end())
    };
    line(out, &table.columns)?;
    let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
    line(out, &rule)?;
    for row in &cells {
        line(out, row)?;
    }
    Ok(())
}
