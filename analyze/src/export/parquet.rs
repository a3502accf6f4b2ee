//! Parquet files through the `parquet` crate's column writers (no Arrow): a table is a list of
//! [`Field`]s, each written as one column chunk per row group from a [`Values`] of the rows of
//! that group. Text is UTF-8 (`STRING`), integers 64-bit, times in nanoseconds; an optional
//! column carries its nulls as definition levels. Pages are Snappy-compressed, text
//! dictionary-encoded (kernel names repeat thousands of times).

use std::borrow::Cow;
use std::fs::File;
use std::io::BufWriter;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parquet::basic::{Compression, LogicalType, Repetition, Type as Physical};
use parquet::data_type::{BoolType, ByteArray, ByteArrayType, DoubleType, Int64Type};
use parquet::errors::ParquetError;
use parquet::file::properties::WriterProperties;
use parquet::file::writer::{SerializedFileWriter, SerializedRowGroupWriter};
use parquet::schema::types::Type;

use crate::error::{Error, Result};

/// What a column holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Int,
    Float,
    Bool,
    Text,
}

/// A column of a table: its name, what it holds, and whether it may be null.
#[derive(Clone, Debug)]
pub struct Field {
    pub name: Cow<'static, str>,
    pub kind: Kind,
    pub optional: bool,
}

impl Field {
    pub const fn new(name: &'static str, kind: Kind) -> Field {
        Field {
            name: Cow::Borrowed(name),
            kind,
            optional: false,
        }
    }

    pub const fn optional(name: &'static str, kind: Kind) -> Field {
        Field {
            name: Cow::Borrowed(name),
            kind,
            optional: true,
        }
    }
}

/// The values of one column in one row group. Optional columns hold the values present and a
/// definition level per row (1 present, 0 null).
#[derive(Clone, Debug)]
pub enum Values {
    Int(Vec<i64>, Option<Vec<i16>>),
    Float(Vec<f64>, Option<Vec<i16>>),
    Bool(Vec<bool>, Option<Vec<i16>>),
    Text(Vec<ByteArray>, Option<Vec<i16>>),
}

impl Values {
    /// Empty values for `field`, room for `rows`.
    pub fn new(field: &Field, rows: usize) -> Values {
        let levels = field.optional.then(|| Vec::with_capacity(rows));
        match field.kind {
            Kind::Int => Values::Int(Vec::with_capacity(rows), levels),
            Kind::Float => Values::Float(Vec::with_capacity(rows), levels),
            Kind::Bool => Values::Bool(Vec::with_capacity(rows), levels),
            Kind::Text => Values::Text(Vec::with_capacity(rows), levels),
        }
    }

    fn level(levels: &mut Option<Vec<i16>>, present: bool) {
        if let Some(l) = levels {
            l.push(i16::from(present));
        }
    }

    pub fn int(&mut self, v: Option<i64>) {
        if let Values::Int(values, levels) = self {
            Self::level(levels, v.is_some());
            values.extend(v);
        }
    }

    pub fn float(&mut self, v: Option<f64>) {
        if let Values::Float(values, levels) = self {
            Self::level(levels, v.is_some());
            values.extend(v);
        }
    }

    pub fn bool(&mut self, v: Option<bool>) {
        if let Values::Bool(values, levels) = self {
            Self::level(levels, v.is_some());
            values.extend(v);
        }
    }

    pub fn text(&mut self, v: Option<ByteArray>) {
        if let Values::Text(values, levels) = self {
            Self::level(levels, v.is_some());
            values.extend(v);
        }
    }
}

/// Text as Parquet bytes.
pub fn bytes(s: &str) -> ByteArray {
    ByteArray::from(s.as_bytes().to_vec())
}

/// The message type of a table of `fields`.
fn schema(fields: &[Field]) -> std::result::Result<Type, ParquetError> {
    let columns = fields
        .iter()
        .map(|f| {
            let physical = match f.kind {
                Kind::Int => Physical::INT64,
                Kind::Float => Physical::DOUBLE,
                Kind::Bool => Physical::BOOLEAN,
                Kind::Text => Physical::BYTE_ARRAY,
            };
            let repetition = if f.optional {
                Repetition::OPTIONAL
            } else {
                Repetition::REQUIRED
            };
            let logical = (f.kind == Kind::Text).then_some(LogicalType::String);
            Type::primitive_type_builder(&f.name, physical)
                .with_repetition(repetition)
                .with_logical_type(logical)
                .build()
                .map(Arc::new)
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Type::group_type_builder("schema")
        .with_fields(columns)
        .build()
}

fn properties() -> Arc<WriterProperties> {
    Arc::new(
        WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .set_created_by(format!("analyze {}", env!("CARGO_PKG_VERSION")))
            .build(),
    )
}

/// One row group of `columns` (in the order of the writer's fields).
fn row_group<W: Write + Send>(
    mut rg: SerializedRowGroupWriter<'_, W>,
    columns: Vec<Values>,
) -> std::result::Result<(), ParquetError> {
    for values in columns {
        let mut col = rg
            .next_column()?
            .ok_or_else(|| ParquetError::General("more columns than fields".into()))?;
        match &values {
            Values::Int(v, l) => col
                .typed::<Int64Type>()
                .write_batch(v, l.as_deref(), None)?,
            Values::Float(v, l) => col
                .typed::<DoubleType>()
                .write_batch(v, l.as_deref(), None)?,
            Values::Bool(v, l) => col.typed::<BoolType>().write_batch(v, l.as_deref(), None)?,
            Values::Text(v, l) => {
                col.typed::<ByteArrayType>()
                    .write_batch(v, l.as_deref(), None)?
            }
        };
        col.close()?;
    }
    rg.close()?;
    Ok(())
}

/// A Parquet file being written, a row group at a time.
pub struct ParquetFile {
    path: PathBuf,
    fields: Vec<Field>,
    writer: SerializedFileWriter<BufWriter<File>>,
    rows: u64,
}

impl ParquetFile {
    /// Create the file at `path` for a table of `fields`.
    pub fn create(path: &Path, fields: &[Field]) -> Result<ParquetFile> {
        let file = File::create(path).map_err(Error::io(path))?;
        ParquetFile::on(path, file, fields)
    }

    /// A Parquet file written into `file`, which is at `path`.
    pub fn on(path: &Path, file: File, fields: &[Field]) -> Result<ParquetFile> {
        let schema = schema(fields).map_err(failed(path))?;
        let writer = SerializedFileWriter::new(
            BufWriter::with_capacity(1 << 20, file),
            Arc::new(schema),
            properties(),
        )
        .map_err(failed(path))?;
        Ok(ParquetFile {
            path: path.to_owned(),
            fields: fields.to_vec(),
            writer,
            rows: 0,
        })
    }

    /// Empty columns for a row group of about `rows` rows.
    pub fn columns(&self, rows: usize) -> Vec<Values> {
        self.fields.iter().map(|f| Values::new(f, rows)).collect()
    }

    /// Write `columns`, `rows` rows, as one row group.
    pub fn write(&mut self, columns: Vec<Values>, rows: usize) -> Result<()> {
        if rows == 0 {
            return Ok(());
        }
        let rg = self.writer.next_row_group().map_err(failed(&self.path))?;
        row_group(rg, columns).map_err(failed(&self.path))?;
        self.rows += rows as u64;
        Ok(())
    }

    /// Write the footer, flush and sync the file; returns its rows.
    pub fn finish(self) -> Result<u64> {
        let path = self.path;
        let out = self.writer.into_inner().map_err(failed(&path))?;
        let file = out
            .into_inner()
            .map_err(|e| Error::io(&path)(e.into_error()))?;
        file.sync_all().map_err(Error::io(&path))?;
        Ok(self.rows)
    }
}

/// A Parquet error as an error writing `path`.
fn failed(path: &Path) -> impl FnOnce(ParquetError) -> Error + '_ {
    move |e| Error::io(path)(std::io::Error::other(e.to_string()))
}
