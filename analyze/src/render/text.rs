//! The aligned plain-text table of the terminal: numbers right-aligned, text left-aligned, a rule
//! of dashes under the header, missing values as `-`.
//!
//! Fitted to a width (120 columns for the command line) unless full width is asked for: text
//! columns wider than they need to be are cut by their middle (`sm80_xmma…tn_n`), the widest
//! first, down to [`MIN_TEXT`] characters; a table that is still too wide (many numeric columns)
//! is printed in several slices of columns, each repeating the table's key column (its first
//! column when that is text, else its last). CSV, JSON and Markdown never cut anything.

use std::io::{self, Write};

use super::cells::truncate_middle;
use super::{write_sections, Cell, Document, Renderer, Sectioned, Table};

/// Text columns are not cut below this many characters (or their header's width).
pub const MIN_TEXT: usize = 12;

/// Spaces between columns.
pub(crate) const GAP: usize = 2;

/// Aligned plain-text tables: numbers right-aligned, text left-aligned.
pub struct TextRenderer {
    /// The widest a line may be; `None` prints every cell whole.
    pub width: Option<usize>,
}

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
        write_aligned(table, self.width, out)
    }

    fn notes(&self, notes: &[String], out: &mut dyn Write) -> io::Result<()> {
        for note in notes {
            match self.width {
                Some(max) => {
                    for line in wrap(note, max) {
                        writeln!(out, "{line}")?;
                    }
                }
                None => writeln!(out, "{note}")?,
            }
        }
        Ok(())
    }
}

/// `text` broken at spaces into lines of at most `max` characters (a word longer than that keeps
/// a line of its own), continuation lines indented by two spaces.
fn wrap(text: &str, max: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut current = String::new();
    for word in text.split(' ') {
        let len = current.chars().count();
        if len > 0 && len + 1 + word.chars().count() > max {
            lines.push(std::mem::take(&mut current));
            current.push_str("  ");
            current.push_str(word);
        } else {
            if len > 0 {
                current.push(' ');
            }
            current.push_str(word);
        }
    }
    lines.push(current);
    lines
}

fn line_width(widths: &[usize], columns: &[usize]) -> usize {
    columns.iter().map(|&i| widths[i]).sum::<usize>() + GAP * columns.len().saturating_sub(1)
}

/// Narrow the text columns, the widest first, until the line fits `max` or none can be cut more.
pub(crate) fn shrink(widths: &mut [usize], floor: &[Option<usize>], max: usize) {
    let all: Vec<usize> = (0..widths.len()).collect();
    while line_width(widths, &all) > max {
        let widest = (0..widths.len())
            .filter(|&i| floor[i].is_some_and(|f| widths[i] > f))
            .max_by_key(|&i| (widths[i], std::cmp::Reverse(i)));
        match widest {
            Some(i) => widths[i] -= 1,
            None => return,
        }
    }
}

/// The slices of columns printed one after another, each within `max` where it can be, each
/// holding the key column.
fn slices(widths: &[usize], key: usize, max: usize) -> Vec<Vec<usize>> {
    let n = widths.len();
    let mut out: Vec<Vec<usize>> = Vec::new();
    let mut current: Vec<usize> = Vec::new();
    for i in (0..n).filter(|&i| i != key) {
        let mut trial = current.clone();
        trial.push(i);
        trial.push(key);
        trial.sort_unstable();
        if !current.is_empty() && line_width(widths, &trial) > max {
            out.push(std::mem::take(&mut current));
            current.push(i);
        } else {
            current.push(i);
        }
    }
    out.push(current);
    for s in &mut out {
        s.push(key);
        s.sort_unstable();
    }
    out
}

fn write_aligned(table: &Table, width: Option<usize>, out: &mut dyn Write) -> io::Result<()> {
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
    let n = widths.len();
    let mut groups = vec![(0..n).collect::<Vec<usize>>()];
    if let Some(max) = width.filter(|_| n > 0) {
        let floor: Vec<Option<usize>> = (0..n)
            .map(|i| (!numeric[i]).then(|| table.columns[i].chars().count().max(MIN_TEXT)))
            .collect();
        let whole = widths.clone();
        shrink(&mut widths, &floor, max);
        if line_width(&widths, &groups[0]) > max {
            // Sliced, a text column may take a slice's whole width beside the key.
            let key = if !numeric[0] || numeric[n - 1] {
                0
            } else {
                n - 1
            };
            let room = max.saturating_sub(widths[key] + GAP).max(MIN_TEXT);
            for i in (0..n).filter(|&i| i != key && !numeric[i]) {
                widths[i] = whole[i].min(room);
            }
            groups = slices(&widths, key, max);
        }
    }
    let line = |out: &mut dyn Write, row: &[String], columns: &[usize]| -> io::Result<()> {
        writeln!(out, "{}", aligned_line(row, columns, &widths, &numeric))
    };
    let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
    for (g, columns) in groups.iter().enumerate() {
        if g > 0 {
            writeln!(out)?;
        }
        line(out, &table.columns, columns)?;
        line(out, &rule, columns)?;
        for row in &cells {
            line(out, row, columns)?;
        }
    }
    Ok(())
}

/// The `columns` of `row` as one line: each cell cut to its width, numbers right-aligned and
/// text left-aligned, [`GAP`] spaces between them, no spaces at the end.
pub(crate) fn aligned_line(
    row: &[String],
    columns: &[usize],
    widths: &[usize],
    numeric: &[bool],
) -> String {
    let mut parts = Vec::with_capacity(columns.len());
    for (k, &i) in columns.iter().enumerate() {
        // A number is never cut: one wider than its column (a streamed table's widths are set
        // by its first rows) pushes the rest of its line right.
        let c = if numeric[i] {
            row[i].clone()
        } else {
            truncate_middle(&row[i], widths[i])
        };
        let pad = widths[i].saturating_sub(c.chars().count());
        let last = k + 1 == columns.len();
        parts.push(if numeric[i] {
            format!("{}{c}", " ".repeat(pad))
        } else if last {
            c
        } else {
            format!("{c}{}", " ".repeat(pad))
        });
    }
    parts.join(&" ".repeat(GAP)).trim_end().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::render_fitted;
    use crate::render::Format;

    fn render(table: Table, width: Option<usize>) -> String {
        render_fitted(Format::Table, &Document::single(table), width)
    }

    #[test]
    fn notes_wrap_at_spaces() {
        let note = "word ".repeat(40);
        let lines = wrap(note.trim_end(), 30);
        assert!(lines.iter().all(|l| l.chars().count() <= 30));
        assert_eq!(lines.join(" ").split_whitespace().count(), 40);
    }

    #[test]
    fn long_names_are_cut_in_the_middle_to_fit() {
        let mut t = Table::new(["Total (ns)", "Name"]);
        let name = format!("start_{}_end", "x".repeat(200));
        t.push(vec![Cell::Int(5), Cell::text(&name)]);
        let s = render(t.clone(), Some(60));
        assert!(s.lines().all(|l| l.chars().count() <= 60), "{s}");
        let row = s.lines().nth(2).unwrap();
        assert!(row.contains("start_") && row.ends_with("_end") && row.contains('…'));
        assert!(render(t, None).contains(&name));
    }

    #[test]
    fn a_table_too_wide_for_its_numbers_is_sliced_with_its_key() {
        let mut columns = vec!["Phase".to_owned()];
        columns.extend((0..12).map(|i| format!("Figure number {i}")));
        let mut t = Table::new(columns);
        let mut row = vec![Cell::text("forward")];
        row.extend((0..12).map(Cell::Int));
        t.push(row);
        let s = render(t, Some(80));
        assert!(s.lines().all(|l| l.chars().count() <= 80), "{s}");
        let headers: Vec<&str> = s.lines().filter(|l| l.starts_with("Phase")).collect();
        assert!(headers.len() > 1, "{s}");
        assert_eq!(s.matches("forward").count(), headers.len());
        for i in 0..12 {
            assert_eq!(
                s.matches(&format!("Figure number {i} ")).count()
                    + s.matches(&format!("Figure number {i}\n")).count(),
                1,
                "{s}"
            );
        }
    }
}
