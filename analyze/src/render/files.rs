//! One file per table: what `--output DIR` writes. Each table of a [`Document`] goes to
//! `DIR/<name>.<ext>`, named by [`Document::table_names`] (a slug of its title), as one tidy
//! table a program reads in one call: CSV is a header and its rows (`pandas.read_csv`), JSON a
//! list of records (`pandas.read_json(orient="records")`), Markdown one pipe table. Names are
//! never cut and every row is kept. Each file is written atomically; [`check_output_dir`] is
//! meant to run before any input is read, so an unwritable folder costs nothing.

use std::path::{Path, PathBuf};

use super::csv::csv_field;
use super::{write_markdown_table, Document, Format, Table};
use crate::atomic_file::write_file;
use crate::error::{Error, Result};

/// The extension of a table file; the text format writes CSV (aligned text is not a table a
/// program can read back).
pub fn extension(format: Format) -> &'static str {
    match format {
        Format::Table | Format::Csv => "csv",
        Format::Json => "json",
        Format::Markdown => "md",
    }
}

/// Make `dir` if need be and check that a file can be created in it.
pub fn check_output_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(Error::io(dir))?;
    if !dir.is_dir() {
        return Err(Error::io(dir)(std::io::Error::other("not a folder")));
    }
    let probe = dir.join(format!(".write-check-{}", std::process::id()));
    std::fs::File::create(&probe).map_err(Error::io(dir))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// `table` alone, as one file of `format`.
pub fn table_bytes(table: &Table, format: Format) -> Vec<u8> {
    let mut out = Vec::new();
    match format {
        Format::Table | Format::Csv => {
            let line = |cells: Vec<String>| cells.join(",") + "\n";
            out.extend(line(table.columns.iter().map(|c| csv_field(c)).collect()).bytes());
            for row in &table.rows {
                out.extend(line(row.iter().map(|c| csv_field(&c.display())).collect()).bytes());
            }
        }
        Format::Json => {
            // Serialising a Value into a Vec cannot fail.
            let _ = serde_json::to_writer_pretty(&mut out, &table.to_json());
            out.push(b'\n');
        }
        Format::Markdown => {
            let _ = write_markdown_table(table, &mut out);
        }
    }
    out
}

/// Write every table of `doc` into `dir`, one file each; returns the paths, in section order.
pub fn write_tables(dir: &Path, doc: &Document, format: Format) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(Error::io(dir))?;
    let mut written = Vec::with_capacity(doc.sections.len());
    for (section, name) in doc.sections.iter().zip(doc.table_names()) {
        let path = dir.join(format!("{name}.{}", extension(format)));
        write_file(&path, &table_bytes(&section.table, format))?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::{Cell, Section};

    fn doc() -> Document {
        let mut t = Table::new(["Name", "Total (ms)"]);
        t.push(vec![Cell::text("gemm<float, 128>"), Cell::Float(1.5, 3)]);
        let section = |title: &str| Section {
            title: Some(title.to_owned()),
            table: t.clone(),
            notes: vec!["a note".into()],
        };
        Document {
            sections: vec![
                section("Top non-GEMM kernels"),
                section("Top non-GEMM kernels"),
            ],
            json: None,
        }
    }

    #[test]
    fn one_file_per_table_named_by_its_title() {
        let dir = tempfile::tempdir().unwrap();
        let written = write_tables(dir.path(), &doc(), Format::Csv).unwrap();
        let names: Vec<String> = written
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            ["top_non_gemm_kernels.csv", "top_non_gemm_kernels_2.csv"]
        );
        let text = std::fs::read_to_string(&written[0]).unwrap();
        assert_eq!(text, "Name,Total (ms)\n\"gemm<float, 128>\",1.500\n");
    }

    #[test]
    fn json_files_are_lists_of_records() {
        let dir = tempfile::tempdir().unwrap();
        let written = write_tables(dir.path(), &doc(), Format::Json).unwrap();
        let v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&written[0]).unwrap()).unwrap();
        assert_eq!(v[0]["Name"], "gemm<float, 128>");
        assert_eq!(v[0]["Total (ms)"], 1.5);
    }

    #[test]
    fn an_unwritable_folder_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, "x").unwrap();
        assert!(check_output_dir(&file).is_err());
        assert!(check_output_dir(&dir.path().join("new/sub")).is_ok());
    }
}
