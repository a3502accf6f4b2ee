//! Errors a user's input can cause. Each names the file and says what is wrong with it in one
//! line; the binary prints it as `error: ...` and exits 2.
//!
//! One line whatever the file holds: text that comes from the file or from SQLite (a schema's
//! `CREATE TABLE`, a table name, a pickle's global, an error SQLite quotes) goes through
//! [`quote`], which escapes control characters and cuts it at [`QUOTE_CHARS`]; every message
//! goes through [`one_line`] when it is shown, so no variant can print a line break.

use std::path::{Path, PathBuf};

/// Everything that can go wrong while reading an input file.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{}: no such file or directory", path.display())]
    NotFound { path: PathBuf },

    #[error("{}: is a directory, expected a file", path.display())]
    IsDirectory { path: PathBuf },

    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("{}: not a recognised input (expected an Nsight Systems .sqlite or .nsys-rep, a PyTorch memory snapshot pickle, or a Kineto .json trace)", path.display())]
    UnknownFormat { path: PathBuf },

    #[error("{}: not an Nsight Systems export (no nsys tables; found {})", path.display(), describe_tables(found_tables))]
    NotAnNsysExport {
        path: PathBuf,
        found_tables: Vec<String>,
    },

    /// SQLite's own message, quoted: it may hold a schema's SQL. Not a `source`, so that the
    /// error line does not repeat it uncut.
    #[error("{}: SQLite error: {}", path.display(), quote(&error.to_string()))]
    Sqlite {
        path: PathBuf,
        error: rusqlite::Error,
    },

    #[error("{}: {}", path.display(), one_line(message))]
    NsysReport { path: PathBuf, message: String },

    #[error("{}: pickle opcode 0x{opcode:02x} at byte {offset} is not supported", path.display())]
    UnsupportedPickleOpcode {
        path: PathBuf,
        opcode: u8,
        offset: u64,
    },

    #[error("{}: pickle asks for `{}` at byte {offset}; only plain data is read, never code", path.display(), quote(name))]
    PickleCode {
        path: PathBuf,
        name: String,
        offset: u64,
    },

    /// The file is of a known format but its content is broken or of an unexpected shape.
    #[error("{}: {}", path.display(), one_line(message))]
    Malformed { path: PathBuf, message: String },

    /// A kernel-classes file (`--classes`) that cannot be used.
    #[error("{}: kernel classes: {}", path.display(), one_line(message))]
    KernelClasses { path: PathBuf, message: String },

    /// A trace that lacks what a profile needs (no kernels, no CUDA API calls, ...).
    #[error("{}: nothing to profile: {}", path.display(), one_line(message))]
    NothingToProfile { path: PathBuf, message: String },

    /// A folder for plots that cannot be made.
    #[error("{}: cannot create the plot folder: {source}", path.display())]
    PlotFolder {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A gzip input that inflates past the limit (a gzip bomb, or a file larger than allowed).
    #[error("{}: inflates to {size}, past the limit of {limit} for {compressed} of gzip (a gzip bomb, or a larger file than expected: set {var} to a size to allow it)", path.display())]
    GzipTooLarge {
        path: PathBuf,
        size: String,
        limit: String,
        compressed: String,
        var: &'static str,
    },

    /// The temporary folder cannot hold the inflated copy of a compressed input.
    #[error("{}: inflating needs {needed} in {} but only {free} is free there (set TMPDIR to a folder with more space, or unpack the file yourself)", path.display(), dir.display())]
    NoSpace {
        path: PathBuf,
        needed: String,
        dir: PathBuf,
        free: String,
    },

    /// A load that would need more memory than the machine (or the set limit) allows.
    #[error("{}: reading it needs about {needed} of memory ({what}), more than the {budget} {}; use a shorter capture, or set ANALYZE_MEMORY_LIMIT to a size (or `off`) if the estimate is wrong", path.display(), budget_source(budget_from))]
    TooLargeForMemory {
        path: PathBuf,
        needed: String,
        what: String,
        budget: String,
        /// `available`, or the variable that set the budget.
        budget_from: &'static str,
    },

    /// An environment variable with a value that cannot be used.
    #[error("{name}={}: {}", quote(value), one_line(message))]
    Setting {
        name: &'static str,
        value: String,
        message: String,
    },

    /// A `--label FILE=LABEL` whose file is not among the inputs.
    #[error("{}: --label names a file that is not among the inputs", path.display())]
    UnmatchedLabel { path: PathBuf },

    /// A device asked for (`memory --device N`) that the snapshot has no segments or trace for.
    #[error("{}: no device {device} in this snapshot (it has {})", path.display(), describe_devices(present))]
    NoSuchDevice {
        path: PathBuf,
        device: i64,
        present: Vec<i64>,
    },
}

impl Error {
    /// What turns an I/O error about `path` into [`Error::Io`], for `map_err`.
    pub fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
        move |source| Error::Io {
            path: path.to_owned(),
            source,
        }
    }
}

fn budget_source(source: &str) -> String {
    if source == "available" {
        "available now".to_owned()
    } else {
        format!("that {source} allows")
    }
}

fn describe_tables(tables: &[String]) -> String {
    let shown: Vec<String> = tables.iter().take(5).map(|t| quote(t)).collect();
    if tables.is_empty() {
        "no tables".to_owned()
    } else if tables.len() <= 5 {
        shown.join(", ")
    } else {
        format!("{}, ... ({} tables)", shown.join(", "), tables.len())
    }
}

/// How many characters of a file's text an error quotes.
pub const QUOTE_CHARS: usize = 120;

/// Text from a file or from SQLite as an error quotes it: on one line, control characters
/// escaped (`\n`, `\u{1b}`), cut after [`QUOTE_CHARS`] characters with `…`.
pub fn quote(text: &str) -> String {
    let mut out = String::new();
    let mut shown = 0;
    for c in text.chars() {
        let mut one = String::new();
        push_escaped(&mut one, c);
        shown += one.chars().count();
        if shown > QUOTE_CHARS {
            out.push('…');
            break;
        }
        out.push_str(&one);
    }
    out
}

/// A message on one line: control characters escaped, nothing cut (a message is the crate's
/// own words; what it quotes from a file was cut by [`quote`]).
pub fn one_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        push_escaped(&mut out, c);
    }
    out
}

fn push_escaped(out: &mut String, c: char) {
    if c.is_control() {
        out.extend(c.escape_default());
    } else {
        out.push(c);
    }
}

fn describe_devices(devices: &[i64]) -> String {
    match devices {
        [] => "no device".to_owned(),
        [d] => format!("device {d}"),
        many => format!(
            "devices {}",
            many.iter()
                .map(i64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quote_escapes_and_cuts() {
        assert_eq!(quote("a\nb\t\u{1b}c"), "a\\nb\\t\\u{1b}c");
        let long = "x".repeat(500);
        let q = quote(&long);
        assert_eq!(q.chars().count(), QUOTE_CHARS + 1);
        assert!(q.ends_with('…'));
        let escapes = quote(&"\u{1}".repeat(500));
        assert!(escapes.chars().count() <= QUOTE_CHARS + 1, "{escapes}");
        assert_eq!(
            quote("é".repeat(QUOTE_CHARS).as_str()),
            "é".repeat(QUOTE_CHARS)
        );
    }

    #[test]
    fn messages_show_on_one_line() {
        let e = Error::Malformed {
            path: "x.sqlite".into(),
            message: "bad\nworse".into(),
        };
        assert_eq!(e.to_string(), "x.sqlite: bad\\nworse");
        let e = Error::NotAnNsysExport {
            path: "x.sqlite".into(),
            found_tables: vec!["CREATE TABLE t (\n  a\n)".into()],
        };
        assert!(!e.to_string().contains('\n'), "{e}");
    }
}
