//! GitHub-flavoured Markdown: `###` titles, pipe tables with numeric columns right-aligned, notes
//! as a list, and kernel names with template arguments or scopes in code spans, so that they
//! render as written (no HTML entities, nothing GitHub's HTML filter could take for a tag). The
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

/// Whether a cell's text is code (a kernel name with template arguments, parameters or scopes)
/// rather than prose: `<`, `>` or `::` in it.
fn is_code(s: &str) -> bool {
    s.contains(['<', '>']) || s.contains("::")
}

/// `s` as a code span inside a table cell: shown exactly as written, pipes escaped (GitHub
/// tables split cells at a bare `|` even inside code) and newlines flattened; a name holding a
/// backtick is fenced with two.
fn code_span(s: &str) -> String {
    let body = s.replace('|', "\\|").replace('\n', " ");
    if body.contains('`') {
        format!("`` {body} ``")
    } else {
        format!("`{body}`")
    }
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
        // One list item per note: lines of text in a row would run together as one paragraph.
        if !notes.is_empty() {
            writeln!(out)?;
            for note in notes {
                writeln!(out, "- {}", note.replace('\n', " "))?;
            }
        }
        Ok(())
    }
}

/// One Markdown table (numeric columns right-aligned).
pub fn write_markdown_table(table: &Table, out: &mut dyn Write) -> io::Result<()> {
    write!(
        out,
        "{}",
        markdown_header(&table.columns, &table.numeric_columns())
    )?;
    for row in &table.rows {
        writeln!(out, "{}", markdown_row(row))?;
    }
    Ok(())
}

/// The two lines that open a Markdown table: the column names, then the alignment of each
/// (numeric columns right-aligned).
pub fn markdown_header(columns: &[String], numeric: &[bool]) -> String {
    let header: Vec<String> = columns.iter().map(|c| markdown_escape(c)).collect();
    let align: Vec<&str> = numeric
        .iter()
        .map(|&numeric| if numeric { "---:" } else { "---" })
        .collect();
    format!("| {} |\n| {} |\n", header.join(" | "), align.join(" | "))
}

/// One row of a Markdown table: missing values as `-`, code as code spans, the rest escaped.
pub fn markdown_row(row: &[Cell]) -> String {
    let cells: Vec<String> = row
        .iter()
        .map(|c| match c {
            Cell::Missing => "-".to_owned(),
            Cell::Text(s) if is_code(s) => code_span(s),
            c => markdown_escape(&c.display()),
        })
        .collect();
    format!("| {} |", cells.join(" | "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_code_spans_and_notes_a_list() {
        let mut t = Table::new(["Kernel", "Time"]);
        t.push(vec![
            Cell::text("void at::native::elementwise_kernel<128, 2, Mul<float>>(int, T3)"),
            Cell::Int(5),
        ]);
        t.push(vec![Cell::text("a|b"), Cell::Int(1)]);
        let mut out = Vec::new();
        write_markdown_table(&t, &mut out).unwrap();
        MarkdownRenderer
            .notes(&["first".to_owned(), "second".to_owned()], &mut out)
            .unwrap();
        let s = String::from_utf8(out).unwrap();
        assert!(
            s.contains(
                "| `void at::native::elementwise_kernel<128, 2, Mul<float>>(int, T3)` | 5 |"
            ),
            "{s}"
        );
        assert!(s.contains("| a\\|b | 1 |"), "{s}");
        assert!(!s.contains("&lt;"), "{s}");
        assert!(s.contains("\n- first\n- second\n"), "{s}");
    }
}
