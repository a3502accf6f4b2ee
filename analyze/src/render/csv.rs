//! RFC 4180 CSV, as `nsys stats --format csv` prints it: a header of column names, one line per
//! row, numbers with the decimals their cells carry; titles and notes are left out.

use std::io::{self, Write};

use super::{write_sections, Document, Renderer, Sectioned, Table};

/// RFC 4180 CSV; several sections are separated by a blank line.
pub struct CsvRenderer;

/// `s` as one CSV field: quoted when it holds a comma, a quote or a line break.
pub fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

impl Renderer for CsvRenderer {
    fn render(&self, doc: &Document, out: &mut dyn Write) -> io::Result<()> {
        write_sections(self, doc, out)
    }
}

impl Sectioned for CsvRenderer {
    fn title(&self, _title: &str, _out: &mut dyn Write) -> io::Result<()> {
        Ok(())
    }

    fn table(&self, table: &Table, out: &mut dyn Write) -> io::Result<()> {
        let header: Vec<String> = table.columns.iter().map(|c| csv_field(c)).collect();
        writeln!(out, "{}", header.join(","))?;
        for row in &table.rows {
            let fields: Vec<String> = row.iter().map(|c| csv_field(&c.display())).collect();
            writeln!(out, "{}", fields.join(","))?;
        }
        Ok(())
    }

    fn notes(&self, _notes: &[String], _out: &mut dyn Write) -> io::Result<()> {
        Ok(())
    }
}
