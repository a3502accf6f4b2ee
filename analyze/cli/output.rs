//! The output options every table-printing command shares: `--format` (with `parquet` for the
//! files), `--output DIR` (one file per table), `--wide` (text tables at full width) and
//! `-q/--quiet` (nothing on stderr but errors), and how a command's document goes to stdout and
//! into the folder.

use std::path::PathBuf;

use analyze::render::{
    check_output_dir, render_fitted, write_tables, Document, Format, DEFAULT_WIDTH,
};

/// What `--format` asks for: a format that prints on stdout (and writes the files of
/// `--output`), or Parquet, which only files hold: stdout then prints text tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputFormat {
    Print(Format),
    Parquet,
}

impl OutputFormat {
    /// The format stdout prints in.
    pub fn stdout(self) -> Format {
        match self {
            OutputFormat::Print(f) => f,
            OutputFormat::Parquet => Format::Table,
        }
    }
}

impl std::str::FromStr for OutputFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<OutputFormat, String> {
        match s {
            "parquet" => Ok(OutputFormat::Parquet),
            other => other.parse().map(OutputFormat::Print).map_err(|_| {
                format!("unknown format `{other}` (expected table, csv, json, markdown or parquet)")
            }),
        }
    }
}

/// Where and how tables are written besides stdout.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct OutputArgs {
    /// Also write each table into DIR as a file of its own, named after the table
    /// (cuda_gpu_kern_sum.csv, top_non_gemm_kernels.json, ...), in --format (CSV for the default
    /// text format; `--format parquet` for Parquet files): one tidy table per file, every row,
    /// names whole. DIR is made if need be and
    /// checked before any input is read.
    #[arg(long, short = 'o', value_name = "DIR")]
    pub output: Option<PathBuf>,
    /// Print text tables at full width, names whole (by default they fit 120 columns, long names
    /// cut in the middle).
    #[arg(long)]
    pub wide: bool,
    /// Print nothing on stderr but errors: no progress bars, no notes.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

impl OutputArgs {
    /// Check that the output folder can be written, and that Parquet has one to go to; call
    /// before reading any input.
    pub fn check(&self, format: OutputFormat) -> anyhow::Result<()> {
        if let Some(dir) = &self.output {
            check_output_dir(dir)?;
        } else if format == OutputFormat::Parquet {
            anyhow::bail!("--format parquet writes the tables as files: give --output DIR");
        }
        Ok(())
    }

    /// A line on stderr, unless quiet.
    pub fn note(&self, line: &str) {
        if !self.quiet {
            crate::progress::println(line);
        }
    }

    /// Print `shown` on stdout in `format`, then write the tables of `whole` (the same tables
    /// with every row and whole names) into the output folder when one is given.
    pub fn emit(
        &self,
        format: OutputFormat,
        shown: &Document,
        whole: &Document,
    ) -> anyhow::Result<()> {
        let width = (!self.wide).then_some(DEFAULT_WIDTH);
        analyze::cli::print(&render_fitted(format.stdout(), shown, width))?;
        if let Some(dir) = &self.output {
            let written = match format {
                OutputFormat::Print(f) => write_tables(dir, whole, f)?,
                OutputFormat::Parquet => analyze::export::documents::write_tables(dir, whole)?,
            };
            self.note_written(written.len(), dir);
        }
        Ok(())
    }

    /// The note that `n` table files went into `dir`.
    pub fn note_written(&self, n: usize, dir: &std::path::Path) {
        self.note(&format!(
            "wrote {n} table file{} into {}",
            if n == 1 { "" } else { "s" },
            dir.display()
        ));
    }
}
