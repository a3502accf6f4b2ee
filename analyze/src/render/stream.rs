//! Tables written as their rows come, for tables too long to hold (the trace reports of
//! `analyze stats`, a row per kernel). An [`Encoder`] turns rows into the table's format on any
//! thread, into [`Rows`] (a reader of a file's pages encodes each row as it reads it, pieces of
//! the file side by side); a [`RowSink`] takes encoded rows in order: a [`TableWriter`] prints
//! them after the table's header, and a [`Table`] in memory holds them as cells, so that a report
//! written to either is computed by the same code.
//!
//! Each format prints a streamed table the way its [`super::Renderer`] prints the same rows held
//! in a [`Table`]: CSV byte for byte, JSON the same value (an array of records keyed by column),
//! Markdown the same cells. What cannot be known before the last row is decided otherwise:
//! Markdown and text align a column by its declared kind, not by the cells it turned out to
//! hold, and text columns are as wide as the header and the first rows written make them (a
//! later, wider name is cut by its middle; a later, wider number is printed whole and pushes the
//! rest of its line right, never cut), a table too
//! wide for the terminal having its text columns cut but never being sliced. Once the first rows
//! have set the widths, text rows are encoded as finished lines, cut and padded, on the threads
//! that encode them, as CSV's are; only the rows encoded before that are aligned by the writer.

use std::io::{self, Write};
use std::ops::Range;
use std::sync::{Arc, OnceLock};

use rayon::prelude::*;
use serde_json::Value;

use super::csv::push_csv_field;
use super::text::{aligned_line, shrink, MIN_TEXT};
use super::{markdown_header, markdown_row, Cell, Format, Table};
use crate::fast_hash::FastMap;

mod encode;

use encode::{trim_line_end, CsvCells, Group, Lead, TextCells};

/// Where the cells of a row go, one call per cell in column order.
pub trait CellSink {
    fn int(&mut self, v: i64);
    /// A number printed with `decimals` decimals ([`crate::render::format_fixed`]).
    fn float(&mut self, v: f64, decimals: usize);
    fn text(&mut self, s: &str);
    /// Text that `key` always names (an interned name): a sink may keep what it made of it.
    fn named(&mut self, key: u64, s: &str) {
        let _ = key;
        self.text(s);
    }
    /// No value: empty in CSV, `null` in JSON, `-` in tables.
    fn missing(&mut self);
    /// The cells `fill` gives, which `key` alone decides: a sink may keep what it made of them
    /// for the next row with the same key.
    fn group(&mut self, key: &[i64], fill: &mut dyn FnMut(&mut dyn CellSink)) {
        let _ = key;
        fill(self.as_dyn());
    }
    /// This sink as a trait object.
    fn as_dyn(&mut self) -> &mut dyn CellSink;

    fn opt_int(&mut self, v: Option<i64>) {
        match v {
            Some(v) => self.int(v),
            None => self.missing(),
        }
    }

    /// Integer cells one after another, as [`CellSink::opt_int`] writes each.
    fn ints(&mut self, vs: &[Option<i64>]) {
        for &v in vs {
            self.opt_int(v);
        }
    }

    fn opt_float(&mut self, v: Option<f64>, decimals: usize) {
        match v {
            Some(v) => self.float(v, decimals),
            None => self.missing(),
        }
    }

    fn opt_text(&mut self, s: Option<&str>) {
        match s {
            Some(s) => self.text(s),
            None => self.missing(),
        }
    }
}

/// What an [`Encoder`] makes of rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Csv,
    Markdown,
    /// Records each opening with `,` and a line break, as they sit in the array.
    Json,
    /// Lines aligned to the columns' widths once the writer knows them ([`Layout`]); before
    /// that, the printed cells of each row separated by [`UNIT`], for the writer to align.
    Text,
    /// The cells themselves.
    Cells,
}

/// Separates the cells of a text row until the writer aligns them.
const UNIT: u8 = 0x1f;

/// How a text table's lines are laid out: the width of each column, set by the first rows
/// written, and which columns hold numbers.
#[derive(Debug)]
struct Layout {
    widths: Vec<usize>,
    numeric: Vec<bool>,
}

/// How the rows of one table are encoded; shared by the threads that encode them.
#[derive(Clone, Debug)]
pub struct Encoder {
    kind: Kind,
    columns: Vec<String>,
    /// JSON: levels of nesting the table's array sits at.
    depth: usize,
    /// Text: the layout, once the writer has set it from the first rows; rows encoded after
    /// that are lines ready to print.
    layout: Arc<OnceLock<Layout>>,
}

/// Rows an [`Encoder`] made, in order: bytes with the end of each row, or cells.
#[derive(Default)]
pub struct Rows {
    bytes: Vec<u8>,
    ends: Vec<usize>,
    cells: Vec<Vec<Cell>>,
    /// Text: how many of the first rows were encoded before the layout was known, their cells
    /// apart; the rows after them are lines, aligned and ended.
    unaligned: usize,
    /// Numbers, names and groups of cells already encoded: the same few recur on every row.
    floats: FastMap<(u64, usize), String>,
    /// The leading digits of the last large number written.
    lead: Lead,
    /// Names by key and, in text, by column (a name's cell is cut and padded to its column).
    names: FastMap<(u64, usize), Vec<u8>>,
    /// Groups by the hash of their key ([`encode::group_hash`]), with the key itself to tell two
    /// keys of one hash apart.
    groups: FastMap<u64, Group>,
}

impl Rows {
    /// Rows ready for about `n` rows of `width` bytes.
    pub fn with_capacity(n: usize, width: usize) -> Rows {
        Rows {
            bytes: Vec::with_capacity(n * width),
            ends: Vec::with_capacity(n),
            ..Rows::default()
        }
    }

    /// How many rows.
    pub fn len(&self) -> usize {
        self.ends.len().max(self.cells.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// No rows, what was kept of names and groups kept.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
        self.cells.clear();
        self.unaligned = 0;
    }

    /// The bytes of rows `range`.
    fn bytes(&self, range: Range<usize>) -> &[u8] {
        if range.is_empty() {
            return &[];
        }
        let from = if range.start == 0 {
            0
        } else {
            self.ends[range.start - 1]
        };
        &self.bytes[from..self.ends[range.end - 1]]
    }
}

impl Encoder {
    /// Add a row to `rows`, its cells given by `fill`.
    pub fn row(&self, rows: &mut Rows, fill: impl FnOnce(&mut dyn CellSink)) {
        match self.kind {
            Kind::Csv => {
                fill(&mut CsvCells { rows, first: true });
                rows.bytes.push(b'\n');
            }
            Kind::Text => match self.layout.get() {
                Some(layout) => {
                    let start = rows.bytes.len();
                    fill(&mut TextCells {
                        rows,
                        layout,
                        column: 0,
                    });
                    trim_line_end(&mut rows.bytes, start);
                    rows.bytes.push(b'\n');
                }
                None => {
                    let mut cells = Cells::default();
                    fill(&mut cells);
                    for (i, c) in cells.0.iter().enumerate() {
                        if i > 0 {
                            rows.bytes.push(UNIT);
                        }
                        match c {
                            Cell::Missing => rows.bytes.push(b'-'),
                            c => rows.bytes.extend_from_slice(c.display().as_bytes()),
                        }
                    }
                    // Before any aligned row: the layout, once set, stays.
                    rows.unaligned += 1;
                }
            },
            kind => {
                let mut cells = Cells::default();
                fill(&mut cells);
                match kind {
                    Kind::Markdown => {
                        rows.bytes
                            .extend_from_slice(markdown_row(&cells.0).as_bytes());
                        rows.bytes.push(b'\n');
                    }
                    Kind::Json => {
                        rows.bytes.extend_from_slice(b",\n");
                        rows.bytes
                            .extend_from_slice(self.json_record(cells.0).as_bytes());
                    }
                    _ => {
                        rows.cells.push(cells.0);
                        return;
                    }
                }
            }
        }
        rows.ends.push(rows.bytes.len());
    }

    /// One JSON record, indented to sit in the table's array.
    fn json_record(&self, cells: Vec<Cell>) -> String {
        let table = Table {
            columns: self.columns.clone(),
            rows: vec![cells],
        };
        let record = match table.to_json() {
            Value::Array(mut records) => records.pop().unwrap_or(Value::Null),
            other => other,
        };
        let text = serde_json::to_string_pretty(&record).unwrap_or_default();
        let indent = "  ".repeat(self.depth + 1);
        let lines: Vec<String> = text.lines().map(|l| format!("{indent}{l}")).collect();
        lines.join("\n")
    }
}

/// Where a table's rows go, in order.
pub trait RowSink {
    /// How the rows are to be encoded.
    fn encoder(&self) -> Encoder;
    /// Rows `range` of `rows`, after those written before.
    fn write(&mut self, rows: &mut Rows, range: Range<usize>) -> io::Result<()>;
}

/// Rows encoded side by side, this many to a part.
const PART_ROWS: usize = 512;

/// `items` as rows of `sink`, `row` giving the cells of each: encoded side by side into
/// `parts` (kept from one call to the next, with what they keep of names and groups of cells),
/// written in order.
pub fn write_rows<T: Sync>(
    sink: &mut dyn RowSink,
    items: &[T],
    parts: &mut Vec<Rows>,
    row: impl Fn(&T, &mut dyn CellSink) + Sync,
) -> io::Result<()> {
    let encoder = sink.encoder();
    for rows in encode_rows(&encoder, items, parts, row) {
        let n = rows.len();
        sink.write(rows, 0..n)?;
    }
    Ok(())
}

/// `items` encoded side by side as [`write_rows`] encodes them, into the first of `parts`
/// (made as needed, and kept with what they keep of names and groups of cells); those parts,
/// in order, for the caller to write.
pub fn encode_rows<'p, T: Sync>(
    encoder: &Encoder,
    items: &[T],
    parts: &'p mut Vec<Rows>,
    row: impl Fn(&T, &mut dyn CellSink) + Sync,
) -> &'p mut [Rows] {
    let count = items.len().div_ceil(PART_ROWS);
    if parts.len() < count {
        parts.resize_with(count, Rows::default);
    }
    parts[..count]
        .par_iter_mut()
        .zip(items.par_chunks(PART_ROWS))
        .for_each(|(rows, part)| {
            rows.clear();
            for item in part {
                encoder.row(rows, |c| row(item, c));
            }
        });
    &mut parts[..count]
}

/// A row's cells held as [`Cell`]s.
#[derive(Default)]
struct Cells(Vec<Cell>);

impl CellSink for Cells {
    fn int(&mut self, v: i64) {
        self.0.push(Cell::Int(v));
    }
    fn float(&mut self, v: f64, decimals: usize) {
        self.0.push(Cell::Float(v, decimals));
    }
    fn text(&mut self, s: &str) {
        self.0.push(Cell::text(s));
    }
    fn missing(&mut self) {
        self.0.push(Cell::Missing);
    }
    fn as_dyn(&mut self) -> &mut dyn CellSink {
        self
    }
}

/// Rows collected into a table in memory.
impl RowSink for Table {
    fn encoder(&self) -> Encoder {
        Encoder {
            kind: Kind::Cells,
            columns: self.columns.clone(),
            depth: 0,
            layout: Arc::default(),
        }
    }

    fn write(&mut self, rows: &mut Rows, range: Range<usize>) -> io::Result<()> {
        for cells in &mut rows.cells[range] {
            self.push(std::mem::take(cells));
        }
        Ok(())
    }
}

/// One table of a document, written as its rows come.
pub struct TableWriter<'w> {
    format: Format,
    width: Option<usize>,
    columns: Vec<String>,
    numeric: Vec<bool>,
    /// Levels of JSON nesting the table's array sits at.
    depth: usize,
    out: &'w mut dyn Write,
    /// Whether a row was written.
    any: bool,
    /// Text: the widths of the columns, once the first rows have set them, shared with the
    /// encoders.
    layout: Arc<OnceLock<Layout>>,
}

impl<'w> TableWriter<'w> {
    /// Start a table of `columns` (each numeric or text, as `numeric` says) in `format`: its
    /// header goes out now, except in text, whose widths wait for the first rows. Text is
    /// fitted to `width` columns where it can be; JSON sits `depth` levels deep.
    pub fn begin(
        format: Format,
        width: Option<usize>,
        columns: &[&str],
        numeric: &[bool],
        depth: usize,
        out: &'w mut dyn Write,
    ) -> io::Result<TableWriter<'w>> {
        let columns: Vec<String> = columns.iter().map(|c| c.to_string()).collect();
        match format {
            Format::Csv => {
                let mut header = Vec::new();
                for (i, c) in columns.iter().enumerate() {
                    if i > 0 {
                        header.push(b',');
                    }
                    push_csv_field(&mut header, c);
                }
                header.push(b'\n');
                out.write_all(&header)?;
            }
            Format::Markdown => out.write_all(markdown_header(&columns, numeric).as_bytes())?,
            Format::Json => out.write_all(b"[")?,
            Format::Table => {}
        }
        Ok(TableWriter {
            format,
            width,
            columns,
            numeric: numeric.to_vec(),
            depth,
            out,
            any: false,
            layout: Arc::default(),
        })
    }

    /// Text: set the widths from the header and `rows`, fitted to the width asked for, and
    /// return the header and its rule.
    fn set_widths(&mut self, rows: &[Vec<String>]) -> String {
        let mut widths: Vec<usize> = self.columns.iter().map(|c| c.chars().count()).collect();
        for row in rows {
            for (w, c) in widths.iter_mut().zip(row) {
                *w = (*w).max(c.chars().count());
            }
        }
        if let Some(max) = self.width {
            let floor: Vec<Option<usize>> = (0..widths.len())
                .map(|i| (!self.numeric[i]).then(|| self.columns[i].chars().count().max(MIN_TEXT)))
                .collect();
            shrink(&mut widths, &floor, max);
        }
        let all: Vec<usize> = (0..widths.len()).collect();
        let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
        let head = format!(
            "{}\n{}\n",
            aligned_line(&self.columns, &all, &widths, &self.numeric),
            aligned_line(&rule, &all, &widths, &self.numeric)
        );
        let numeric = self.numeric.clone();
        // Set once, here: the encoders read it from then on.
        let _ = self.layout.set(Layout { widths, numeric });
        head
    }

    /// The table's end: the closing bracket of JSON, the header of a text table that had no
    /// rows.
    pub fn finish(mut self) -> io::Result<()> {
        match self.format {
            Format::Json if !self.any => self.out.write_all(b"]"),
            Format::Json => write!(self.out, "\n{}]", "  ".repeat(self.depth)),
            Format::Table if self.layout.get().is_none() => {
                let head = self.set_widths(&[]);
                self.out.write_all(head.as_bytes())
            }
            _ => Ok(()),
        }
    }
}

impl RowSink for TableWriter<'_> {
    fn encoder(&self) -> Encoder {
        Encoder {
            kind: match self.format {
                Format::Csv => Kind::Csv,
                Format::Markdown => Kind::Markdown,
                Format::Json => Kind::Json,
                Format::Table => Kind::Text,
            },
            columns: self.columns.clone(),
            depth: self.depth,
            layout: Arc::clone(&self.layout),
        }
    }

    fn write(&mut self, rows: &mut Rows, range: Range<usize>) -> io::Result<()> {
        if range.is_empty() {
            return Ok(());
        }
        let first = !std::mem::replace(&mut self.any, true);
        match self.format {
            // The first record of the array has no comma before it.
            Format::Json if first => self.out.write_all(&rows.bytes(range)[1..]),
            Format::Table => {
                // Rows encoded before the layout was known, aligned here; the rest are lines.
                let held = range.start..range.end.min(rows.unaligned);
                let lines: Vec<Vec<String>> = held
                    .clone()
                    .map(|i| {
                        rows.bytes(i..i + 1)
                            .split(|&b| b == UNIT)
                            .map(|c| String::from_utf8_lossy(c).into_owned())
                            .collect()
                    })
                    .collect();
                if self.layout.get().is_none() {
                    let head = self.set_widths(&lines);
                    self.out.write_all(head.as_bytes())?;
                }
                if let Some(layout) = self.layout.get() {
                    let all: Vec<usize> = (0..layout.widths.len()).collect();
                    for line in &lines {
                        writeln!(
                            self.out,
                            "{}",
                            aligned_line(line, &all, &layout.widths, &layout.numeric)
                        )?;
                    }
                }
                self.out
                    .write_all(rows.bytes(range.start.max(held.end)..range.end))
            }
            _ => self.out.write_all(rows.bytes(range)),
        }
    }
}

#[cfg(test)]
mod tests;
