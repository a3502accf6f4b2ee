//! GitHub-flavoured Markdown: `###` titles, pipe tables with numeric columns right-aligned, and
//! text escaped so that kernel names with template arguments survive GitHub's HTML filter. The
//! report's own Markdown (`crate::report`) writes its tables with [`write_markdown_table`].

use std::io::{self, Write};

use super::{write_sections, Cell, Document, Renderer, Sectioned, Table};

/// GitHub-flavoured Markdown tables, ready to paste into a report.
pub struct MarkdownRenderer;

/// `s` made safe for a Markdown table cell: pipes escaped, newlines flattened, and `<`/`>` as
/// entities, since GitHub drops what looks like an HTML tag (`elementwise_kernel<float>` would lose
/// its template arguments).
pub fn markdown_escape(s: &str) -> String {
    s.replace('|', "\\|")
        .replace('\n', " ")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

impl Renderer for MarkdownRenderer {
    fn render(&self, doc: &Document, out: &mut dyn Write) -> io::Result<()> {
        write_sections(self, doc, out)
    }
}

impl Sectioned for MarkdownRenderer {
    fn title(&self, title: &str, out: &mut dyn Write) -> io::Result<()> {
        writeln!(out, "### {title}")?;
        writeln!(out)
    }

    fn table(&self, table: &Table, out: &mut dyn Write) -> io::Result<()> {
        write_markdown_table(table, out)
    }

    fn notes(&self, notes: &[String], out: &mut dyn Write) -> io::Result<()> {
        if !notes.is_empty() {
            writeln!(out)?;
            for note in notes {
                writeln!(out, "{note}")?;
            }
        }
        Ok(())
    }
}

/// One Markdown table (numeric columns right-aligned).
pub fn write_markdown_table(table: &Table, out: &mut dyn Write) -> io::Result<()> {
    let header: Vec<String> = table.columns.iter().map(|c| markdown_escape(c)).collect();
    writeln!(out, "| {} |", header.join(" | "))?;
    let align: Vec<&str> = table
        .numeric_columns()
        .into_iter()
        .map(|numeric| if numeric { "---:" } else { "---" })
        .collect();
    writeln!(out, "| {} |", align.join(" | "))?;
    for row in &table.rows {
        let cells: Vec<String> = row
            .iter()
            .map(|c| match c {
                Cell::Missing => "-".to_owned(),
                c => markdown_escape(&c.display()),
            })
            .collect();
        writeln!(out, "| {} |", cells.join(" | "))?;
    }
    Ok(())
}
