//! The reports of a file printed: what [`super::document_file`] gives, rendered as the renderers
//! of [`crate::render`] render a document (sections in order, titles when there are several, the
//! same CSV, JSON, Markdown and text), except that a trace report's rows are written as they
//! come ([`crate::render::stream`]) and never held. With a folder, each table also goes to a
//! file of its own there, as `--output DIR` writes them; a trace report is then read once more
//! for its file, as it is for the second copy of its rows in the JSON of several reports.

use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::atomic_file;
use crate::error::{Error, Result};
use crate::render::files::{extension, table_bytes};
use crate::render::stream::TableWriter;
use crate::render::{
    CsvRenderer, Document, Format, MarkdownRenderer, Section, Sectioned, Table, TextRenderer,
};

use super::stream::{with_parts, Part};
use super::{trace, Missing, Report};

/// How to print reports.
pub struct Print<'a> {
    pub format: Format,
    /// The width text tables are fitted to; `None` prints every name whole.
    pub width: Option<usize>,
    /// A folder that also gets each table as a file of its own.
    pub dir: Option<&'a Path>,
}

/// What printing did: what the file lacks for each report left out, and the files written.
#[derive(Debug, Default)]
pub struct Printed {
    pub skipped: Vec<Missing>,
    pub files: Vec<PathBuf>,
}

/// A section to print: a summary's table, or a trace report to write.
enum Body {
    Table(Table),
    Trace(Report),
}

/// Print the reports `named` of the file at `path` to `out` as `print` asks, streaming the file
/// when it is an nsys export and writing the trace reports' rows as they come.
pub fn print_file(
    path: &Path,
    named: &[(String, Report)],
    print: &Print<'_>,
    out: &mut dyn Write,
) -> Result<Printed> {
    let kinds: Vec<Report> = named.iter().map(|r| r.1).collect();
    with_parts(path, &kinds, |parts, input| {
        let mut printed = Printed::default();
        let mut sections = Vec::new();
        for ((name, _), part) in named.iter().zip(parts) {
            let body = match part {
                Part::Lacks(m) => {
                    printed.skipped.push(m);
                    continue;
                }
                Part::Table(t) => Body::Table(t),
                Part::Trace(r) => Body::Trace(r),
            };
            sections.push((name.clone(), body));
        }
        // As `assemble` titles them: every section when several reports were named.
        let titled = named.len() > 1;
        let stdout = Path::new("stdout");
        match print.format {
            Format::Json => json(input, &sections, titled, out, stdout)?,
            format => {
                let sectioned: &dyn Sectioned = match format {
                    Format::Csv => &CsvRenderer,
                    Format::Markdown => &MarkdownRenderer,
                    _ => &TextRenderer { width: print.width },
                };
                for (i, (name, body)) in sections.iter().enumerate() {
                    let io = |r: io::Result<()>| r.map_err(Error::io(stdout));
                    if i > 0 {
                        io(writeln!(out))?;
                    }
                    if titled {
                        io(sectioned.title(name, out))?;
                    }
                    match body {
                        Body::Table(t) => io(sectioned.table(t, out))?,
                        Body::Trace(r) => {
                            stream(input, *r, format, print.width, 0, out, stdout)?;
                        }
                    }
                }
            }
        }
        if let Some(dir) = print.dir {
            printed.files = files(input, &sections, titled, print.format, dir)?;
        }
        Ok(printed)
    })
}

/// The rows of `report` as one table in `format`, its JSON array `depth` levels deep.
fn stream(
    input: &trace::Input<'_>,
    report: Report,
    format: Format,
    width: Option<usize>,
    depth: usize,
    out: &mut dyn Write,
    shown: &Path,
) -> Result<()> {
    let columns = trace::columns(report);
    let mut table = TableWriter::begin(format, width, columns.names, columns.numeric, depth, out)
        .map_err(Error::io(shown))?;
    trace::write(input, report, &mut trace::Out::new(&mut table, shown))?;
    table.finish().map_err(Error::io(shown))
}

/// The document of `sections` with the tables held, and the trace reports' tables empty (their
/// columns alone), each titled as printed, or after its report when it stands alone.
fn outline(sections: &[(String, Body)], titled: bool) -> Document {
    let sections = sections
        .iter()
        .map(|(name, body)| Section {
            title: (titled || sections.len() == 1).then(|| name.clone()),
            table: match body {
                Body::Table(t) => t.clone(),
                Body::Trace(r) => Table::new(trace::columns(*r).names.iter().copied()),
            },
            notes: Vec::new(),
        })
        .collect();
    Document {
        sections,
        json: None,
    }
}

/// JSON as [`crate::render::JsonRenderer`] prints the document: a lone table's array of records,
/// or an object of each table's records by title with the `tables` list. A trace report's rows
/// are written where its array stands, each time it stands.
fn json(
    input: &trace::Input<'_>,
    sections: &[(String, Body)],
    titled: bool,
    out: &mut dyn Write,
    shown: &Path,
) -> Result<()> {
    let io = |r: io::Result<()>| r.map_err(Error::io(shown));
    let value = match sections {
        [] => return Ok(()),
        [(_, Body::Trace(r))] => {
            stream(input, *r, Format::Json, None, 0, out, shown)?;
            return io(writeln!(out));
        }
        [(_, Body::Table(t))] => t.to_json(),
        _ => {
            // A string no table holds marks where a trace report's rows go.
            let mark = |i: usize| Value::String(format!("\u{1}rows of section {i}\u{1}"));
            let doc = outline(sections, titled);
            let mut tables = doc.tables_json();
            let mut obj = Map::new();
            for (i, (s, (_, body))) in doc.sections.iter().zip(sections).enumerate() {
                let key = s.title.clone().unwrap_or_else(|| format!("table_{i}"));
                let rows = match body {
                    Body::Table(t) => t.to_json(),
                    Body::Trace(_) => {
                        tables[i]["rows"] = mark(i);
                        mark(i)
                    }
                };
                obj.insert(key, rows);
            }
            obj.entry("tables").or_insert(tables);
            let text = serde_json::to_string_pretty(&Value::Object(obj)).unwrap_or_default();
            let mut rest = text.as_str();
            loop {
                // The next mark, and the trace report it stands for.
                let next = sections
                    .iter()
                    .enumerate()
                    .filter_map(|(i, (_, body))| match body {
                        Body::Trace(r) => {
                            let quoted = serde_json::to_string(&mark(i)).unwrap_or_default();
                            rest.find(&quoted).map(|at| (at, quoted.len(), *r))
                        }
                        Body::Table(_) => None,
                    })
                    .min_by_key(|m| m.0);
                let Some((at, len, report)) = next else { break };
                io(out.write_all(&rest.as_bytes()[..at]))?;
                let line = &rest[rest[..at].rfind('\n').map_or(0, |n| n + 1)..at];
                let depth = (line.len() - line.trim_start().len()) / 2;
                stream(input, report, Format::Json, None, depth, out, shown)?;
                rest = &rest[at + len..];
            }
            io(out.write_all(rest.as_bytes()))?;
            return io(writeln!(out));
        }
    };
    io(serde_json::to_writer_pretty(&mut *out, &value).map_err(io::Error::from))?;
    io(writeln!(out))
}

/// Each table into `dir` as a file of its own, named as [`crate::render::write_tables`] names
/// them, in `format` (CSV for text).
fn files(
    input: &trace::Input<'_>,
    sections: &[(String, Body)],
    titled: bool,
    format: Format,
    dir: &Path,
) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(Error::io(dir))?;
    let names = outline(sections, titled).table_names();
    let mut written = Vec::with_capacity(sections.len());
    for ((_, body), name) in sections.iter().zip(names) {
        let path = dir.join(format!("{name}.{}", extension(format)));
        match body {
            Body::Table(t) => atomic_file::write_file(&path, &table_bytes(t, format))?,
            Body::Trace(r) => {
                let format = if format == Format::Table {
                    Format::Csv
                } else {
                    format
                };
                let mut failed = None;
                let done = atomic_file::write_with(&path, |f| {
                    let mut w = BufWriter::new(f);
                    if let Err(e) = stream(input, *r, format, None, 0, &mut w, &path) {
                        failed = Some(e);
                        return Err(io::Error::other("stopped"));
                    }
                    if format == Format::Json {
                        writeln!(w)?;
                    }
                    w.flush()
                });
                if let Some(e) = failed {
                    return Err(e);
                }
                done.map_err(Error::io(&path))?;
            }
        }
        written.push(path);
    }
    Ok(written)
}
