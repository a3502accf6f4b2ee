//! Renderers: one [`Document`] of tables, shown as an aligned text table, CSV, JSON or Markdown.
//!
//! Analyses build [`Table`]s of typed [`Cell`]s; a cell knows how many decimals it is printed
//! with, so the CSV of a `nsys stats` report prints `37268.7` where nsys does while JSON keeps the
//! full value. A [`Document`] may also carry its own JSON value, for outputs whose JSON shape is
//! richer than a list of tables (`profile`, `memory`). Every format is a [`Renderer`], one module
//! each ([`text`], [`csv`], [`json`], [`markdown`]); the three that print section by section share
//! the order of title, table and notes ([`Sectioned`]). [`cells`] holds the cell formatters every
//! table uses (milliseconds, percentages, MiB) and `plot` draws charts as PNG or SVG.

pub mod cells;
pub mod csv;
pub mod files;
pub mod json;
pub mod markdown;
#[cfg(feature = "analysis")]
pub mod plot;
pub mod stream;
pub mod text;

use std::io::{self, Write};

use serde_json::{Map, Value};

pub use self::csv::CsvRenderer;
pub use self::files::{check_output_dir, write_tables};
pub use self::json::JsonRenderer;
pub use self::markdown::{
    markdown_escape, markdown_header, markdown_row, write_markdown_table, MarkdownRenderer,
};
pub use self::text::TextRenderer;

/// The width text tables are fitted to unless full names are asked for.
pub const DEFAULT_WIDTH: usize = 120;

/// One value in a table.
#[derive(Clone, Debug, PartialEq)]
pub enum Cell {
    Int(i64),
    /// A number printed with this many decimals.
    Float(f64, usize),
    Text(String),
    /// No value: `-` in tables, empty in CSV, `null` in JSON.
    Missing,
}

impl Cell {
    pub fn text(s: impl Into<String>) -> Cell {
        Cell::Text(s.into())
    }

    /// The cell as it is printed in tables and CSV.
    pub fn display(&self) -> String {
        match self {
            Cell::Int(v) => v.to_string(),
            Cell::Float(v, d) => format_fixed(*v, *d),
            Cell::Text(s) => s.clone(),
            Cell::Missing => String::new(),
        }
    }

    fn json(&self) -> Value {
        match self {
            Cell::Int(v) => Value::from(*v),
            Cell::Float(v, _) => {
                serde_json::Number::from_f64(*v).map_or(Value::Null, Value::Number)
            }
            Cell::Text(s) => Value::from(s.as_str()),
            Cell::Missing => Value::Null,
        }
    }

    /// Whether the cell is a number (an integer or not).
    pub fn is_numeric(&self) -> bool {
        matches!(self, Cell::Int(_) | Cell::Float(..))
    }
}

/// `v` with `decimals` digits after the point, and never `-0.0`. Rounding is to the nearest
/// printed value; an exact tie (`2.25` to one decimal) goes away from zero, as SQLite's `round()`
/// does for the values `nsys stats` prints (Rust's own formatting would give `2.2`).
pub fn format_fixed(v: f64, decimals: usize) -> String {
    let v = if is_exact_tie(v, decimals) {
        // One ulp further from zero, so the tie resolves away from zero.
        f64::from_bits(v.to_bits() + 1)
    } else {
        v
    };
    let s = format!("{v:.decimals$}");
    if s.starts_with('-') && s[1..].chars().all(|c| c == '0' || c == '.') {
        s[1..].to_owned()
    } else {
        s
    }
}

/// Whether `v` lies exactly halfway between two numbers with `decimals` decimals, that is whether
/// `2 * 10^decimals * v` is an odd integer. Decided on the exact binary value, without rounding.
fn is_exact_tie(v: f64, decimals: usize) -> bool {
    if !v.is_finite() || v == 0.0 || decimals > 20 {
        return false;
    }
    let bits = v.abs().to_bits();
    let exponent = ((bits >> 52) & 0x7ff) as i32;
    let fraction = bits & ((1u64 << 52) - 1);
    // |v| = mantissa * 2^e exactly.
    let (mantissa, e) = if exponent == 0 {
        (fraction, -1074)
    } else {
        (fraction | (1u64 << 52), exponent - 1075)
    };
    // 2 * 10^d * |v| = mantissa * 5^d * 2^(e + 1 + d): an odd integer iff the power of two is
    // cancelled exactly by the trailing zero bits of mantissa * 5^d.
    let scaled = mantissa as u128 * 5u128.pow(decimals as u32);
    let shift = e + 1 + decimals as i32;
    shift <= 0 && scaled.trailing_zeros() as i32 == -shift
}

/// Rows under named columns.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Table {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<Cell>>,
}

impl Table {
    pub fn new<S: Into<String>>(columns: impl IntoIterator<Item = S>) -> Table {
        Table {
            columns: columns.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
        }
    }

    pub fn push(&mut self, row: Vec<Cell>) {
        debug_assert_eq!(row.len(), self.columns.len());
        self.rows.push(row);
    }

    /// For each column, whether every cell in it is a number (or missing): such columns are
    /// right-aligned. A table without rows has none.
    pub fn numeric_columns(&self) -> Vec<bool> {
        (0..self.columns.len())
            .map(|i| {
                !self.rows.is_empty()
                    && self
                        .rows
                        .iter()
                        .all(|r| r[i].is_numeric() || r[i] == Cell::Missing)
            })
            .collect()
    }

    /// Rows as JSON objects keyed by column name.
    pub fn to_json(&self) -> Value {
        Value::Array(
            self.rows
                .iter()
                .map(|row| {
                    let mut obj = Map::new();
                    for (col, cell) in self.columns.iter().zip(row) {
                        obj.insert(col.clone(), cell.json());
                    }
                    Value::Object(obj)
                })
                .collect(),
        )
    }
}

/// A titled table with optional notes below it.
#[derive(Clone, Debug, Default)]
pub struct Section {
    pub title: Option<String>,
    pub table: Table,
    pub notes: Vec<String>,
}

impl Section {
    /// The table's name in files and in JSON: a slug of its title (`Top non-GEMM kernels` is
    /// `top_non_gemm_kernels`), or `table_N` (from 1) without one.
    pub fn name(&self, index: usize) -> String {
        self.title
            .as_deref()
            .map(slug)
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| format!("table_{}", index + 1))
    }
}

/// `title` as a file name: lower-case ASCII letters and digits, every other run of characters
/// one `_`, none at either end.
pub fn slug(title: &str) -> String {
    let mut out = String::new();
    for c in title.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.is_empty() && !out.ends_with('_') {
            out.push('_');
        }
    }
    while out.ends_with('_') {
        out.pop();
    }
    out
}

/// What a command prints: sections of tables, and optionally its own JSON shape.
#[derive(Clone, Debug, Default)]
pub struct Document {
    pub sections: Vec<Section>,
    /// When set, the JSON renderer prints this instead of the sections.
    pub json: Option<Value>,
}

impl Document {
    pub fn single(table: Table) -> Document {
        Document {
            sections: vec![Section {
                title: None,
                table,
                notes: Vec::new(),
            }],
            json: None,
        }
    }

    /// The name of each section's table: its [`Section::name`], made unique by `_2`, `_3`
    /// suffixes in order.
    pub fn table_names(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::with_capacity(self.sections.len());
        for (i, s) in self.sections.iter().enumerate() {
            let base = s.name(i);
            let mut name = base.clone();
            let mut n = 1;
            while names.contains(&name) {
                n += 1;
                name = format!("{base}_{n}");
            }
            names.push(name);
        }
        names
    }

    /// Every table as `{name, title, columns, rows}`, rows as records keyed by column: the
    /// `tables` list of JSON output.
    pub fn tables_json(&self) -> Value {
        let names = self.table_names();
        Value::Array(
            self.sections
                .iter()
                .zip(names)
                .map(|(s, name)| {
                    serde_json::json!({
                        "name": name,
                        "title": s.title,
                        "columns": s.table.columns,
                        "rows": s.table.to_json(),
                    })
                })
                .collect(),
        )
    }
}

/// Output formats understood by every command.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Format {
    #[default]
    Table,
    Csv,
    Json,
    Markdown,
}

impl std::str::FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Format, String> {
        match s {
            "table" => Ok(Format::Table),
            "csv" => Ok(Format::Csv),
            "json" => Ok(Format::Json),
            "markdown" | "md" => Ok(Format::Markdown),
            other => Err(format!(
                "unknown format `{other}` (expected table, csv, json or markdown)"
            )),
        }
    }
}

/// Writes a [`Document`] in one format.
pub trait Renderer {
    fn render(&self, doc: &Document, out: &mut dyn Write) -> io::Result<()>;
}

/// The renderer for a format; text tables at full width.
pub fn renderer(format: Format) -> &'static dyn Renderer {
    match format {
        Format::Table => &TextRenderer { width: None },
        Format::Csv => &CsvRenderer,
        Format::Json => &JsonRenderer,
        Format::Markdown => &MarkdownRenderer,
    }
}

/// Render `doc` to a string.
pub fn render_to_string(format: Format, doc: &Document) -> String {
    let mut buf = Vec::new();
    renderer(format)
        .render(doc, &mut buf)
        .expect("writing to a Vec cannot fail");
    String::from_utf8(buf).expect("renderers write UTF-8")
}

/// Render `doc` to a string, text tables fitted to `width` columns (`None`: full width, every
/// name whole). CSV, JSON and Markdown never cut anything.
pub fn render_fitted(format: Format, doc: &Document, width: Option<usize>) -> String {
    if format != Format::Table {
        return render_to_string(format, doc);
    }
    let mut buf = Vec::new();
    TextRenderer { width }
        .render(doc, &mut buf)
        .expect("writing to a Vec cannot fail");
    String::from_utf8(buf).expect("renderers write UTF-8")
}

/// A format that prints a document section by section, a blank line between sections: each
/// section's title (when it has one), its table, then its notes. Each format says how it writes
/// the three; [`write_sections`] puts them in order.
pub trait Sectioned {
    fn title(&self, title: &str, out: &mut dyn Write) -> io::Result<()>;
    fn table(&self, table: &Table, out: &mut dyn Write) -> io::Result<()>;
    fn notes(&self, notes: &[String], out: &mut dyn Write) -> io::Result<()>;
}

/// Every section of `doc` in `format`.
pub fn write_sections(
    format: &impl Sectioned,
    doc: &Document,
    out: &mut dyn Write,
) -> io::Result<()> {
    for (i, section) in doc.sections.iter().enumerate() {
        if i > 0 {
            writeln!(out)?;
        }
        if let Some(title) = &section.title {
            format.title(title, out)?;
        }
        format.table(&section.table, out)?;
        format.notes(&section.notes, out)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Document {
        let mut t = Table::new(["Total Time (ns)", "Avg (ns)", "Name"]);
        t.push(vec![
            Cell::Int(10882460),
            Cell::Float(37268.65, 1),
            Cell::text("gemm, \"tn\""),
        ]);
        t.push(vec![Cell::Int(5), Cell::Float(2.5, 1), Cell::text("a|b")]);
        Document::single(t)
    }

    #[test]
    fn csv_quotes_fields_and_prints_fixed_decimals() {
        let s = render_to_string(Format::Csv, &sample());
        assert_eq!(
            s,
            "Total Time (ns),Avg (ns),Name\n10882460,37268.7,\"gemm, \"\"tn\"\"\"\n5,2.5,a|b\n"
        );
    }

    #[test]
    fn markdown_escapes_pipes_and_right_aligns_numbers() {
        let s = render_to_string(Format::Markdown, &sample());
        assert!(s.contains("| ---: | ---: | --- |"));
        assert!(s.contains("a\\|b"));
    }

    #[test]
    fn markdown_shows_template_names_as_code() {
        let mut t = Table::new(["Kernel"]);
        t.push(vec![Cell::text("elementwise_kernel<128, 2, Mul<float>>")]);
        let s = render_to_string(Format::Markdown, &Document::single(t));
        assert!(
            s.contains("| `elementwise_kernel<128, 2, Mul<float>>` |"),
            "{s}"
        );
        assert!(!s.contains("&lt;"));
    }

    #[test]
    fn json_keeps_full_precision() {
        let s = render_to_string(Format::Json, &sample());
        let v: Value = serde_json::from_str(&s).unwrap();
        assert_eq!(v[0]["Avg (ns)"], 37268.65);
        assert_eq!(v[1]["Name"], "a|b");
    }

    #[test]
    fn text_table_aligns_columns() {
        let s = render_to_string(Format::Table, &sample());
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines.len(), 4);
        assert!(lines[2].starts_with("       10882460"));
    }

    #[test]
    fn exact_ties_round_away_from_zero() {
        // Averages from the nsys stats CSVs: 6072417 ns / 4 calls, 123711 ns / 4 kernels.
        assert_eq!(format_fixed(1518104.25, 1), "1518104.3");
        assert_eq!(format_fixed(30927.75, 1), "30927.8");
        assert_eq!(format_fixed(-2.25, 1), "-2.3");
        assert_eq!(format_fixed(0.125, 2), "0.13");
        // Not exact ties: the binary value decides.
        assert_eq!(format_fixed(0.15, 1), "0.1");
        assert_eq!(format_fixed(0.35, 1), "0.3");
        assert_eq!(format_fixed(2.5, 0), "3");
        assert_eq!(format_fixed(37268.65, 1), "37268.7");
    }

    #[test]
    fn negative_zero_prints_as_zero() {
        assert_eq!(format_fixed(-0.01, 1), "0.0");
        assert_eq!(format_fixed(-0.06, 1), "-0.1");
    }
}
