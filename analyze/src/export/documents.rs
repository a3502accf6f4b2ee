//! A document's tables as Parquet files, one per table: what `--output DIR --format parquet`
//! writes for `stats`, `profile`, `memory` and `compare`, beside the CSV, JSON and Markdown of
//! [`crate::render::write_tables`] and named as they are. A column is integers where every value
//! is one, floating point where every value is a number, text otherwise (as printed); missing
//! cells are nulls. Each file is written atomically.

use std::path::{Path, PathBuf};

use super::parquet::{bytes, Field, Kind, ParquetFile};
use crate::atomic_file;
use crate::error::{Error, Result};
use crate::render::{Cell, Document, Table};

/// Write every table of `doc` into `dir` as `NAME.parquet`; the paths, in section order.
pub fn write_tables(dir: &Path, doc: &Document) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(Error::io(dir))?;
    let mut written = Vec::with_capacity(doc.sections.len());
    for (section, name) in doc.sections.iter().zip(doc.table_names()) {
        let path = dir.join(format!("{name}.parquet"));
        write_table(&path, &section.table)?;
        written.push(path);
    }
    Ok(written)
}

/// What each column of `table` holds.
fn fields(table: &Table) -> Vec<Field> {
    (0..table.columns.len())
        .map(|i| {
            let cells = || table.rows.iter().map(|r| &r[i]);
            let present = || cells().filter(|c| **c != Cell::Missing);
            let kind = if present().count() == 0 {
                Kind::Text
            } else if present().all(|c| matches!(c, Cell::Int(_))) {
                Kind::Int
            } else if present().all(Cell::is_numeric) {
                Kind::Float
            } else {
                Kind::Text
            };
            Field {
                name: table.columns[i].clone().into(),
                kind,
                optional: cells().any(|c| *c == Cell::Missing),
            }
        })
        .collect()
}

/// `table` alone as the Parquet file `path`.
pub fn write_table(path: &Path, table: &Table) -> Result<()> {
    let fields = fields(table);
    let mut failed = None;
    let done = atomic_file::write_with(path, |f| {
        let file = f.try_clone()?;
        let written = (|| {
            let mut pq = ParquetFile::on(path, file, &fields)?;
            let mut cols = pq.columns(table.rows.len());
            for row in &table.rows {
                for ((cell, field), col) in row.iter().zip(&fields).zip(&mut cols) {
                    match (field.kind, cell) {
                        (_, Cell::Missing) => match field.kind {
                            Kind::Int => col.int(None),
                            Kind::Float => col.float(None),
                            Kind::Bool => col.bool(None),
                            Kind::Text => col.text(None),
                        },
                        (Kind::Int, Cell::Int(v)) => col.int(Some(*v)),
                        (Kind::Float, Cell::Int(v)) => col.float(Some(*v as f64)),
                        (Kind::Float, Cell::Float(v, _)) => col.float(Some(*v)),
                        (_, cell) => col.text(Some(bytes(&cell.display()))),
                    }
                }
            }
            pq.write(cols, table.rows.len())?;
            pq.finish()
        })();
        written.map(|_| ()).map_err(|e| {
            failed = Some(e);
            std::io::Error::other("stopped")
        })
    });
    if let Some(e) = failed {
        return Err(e);
    }
    done.map_err(Error::io(path))
}
